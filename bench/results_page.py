"""A results page under ``docs/results/`` written from a run's own report: the command that made
it and when and on what it ran at the top, then the report, then its images.

``python -m bench.results_page --command "make hdp-compare" --report reports/hdp-compare/report.md
--page docs/results/hdp-compare.md --image reports/hdp-compare/comparison.png=hdp-compare.png``
copies each image beside the page (under the name after ``=``) and shows it on the page, so the
built site shows every figure a page names (``bench/site_images.py`` checks that).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

STACK = ("flwr", "keras", "tensorflow-cpu", "tensorflow", "jax", "dp-accounting", "numpy")


def git_revision() -> str:
    """``<short commit>`` of the working tree, ``+dirty`` when it has uncommitted changes."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return rev + ("+dirty" if dirty else "")


def stack_versions() -> str:
    """The installed versions of the simulation stack, e.g. ``flwr 1.42.0, keras 3.12.0``."""
    found = []
    for name in STACK:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ", ".join(found)


def provenance(command: str, *, wall_seconds: float | None = None) -> str:
    """The provenance line of a page: the command, the time (UTC), the machine and the stack."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    wall = f"; {wall_seconds:,.0f} s wall" if wall_seconds is not None else ""
    return (
        f"> Made by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"commit {git_revision()}, on {platform.machine()} {platform.system()} with "
        f"{os.cpu_count()} CPUs (load average {load} at the end){wall}; Python "
        f"{platform.python_version()}, {stack_versions()}. Regenerate with `{command}`."
    )


def write_page(
    command: str,
    report: Path,
    page: Path,
    images: list[tuple[Path, str]],
    *,
    wall_seconds: float | None = None,
    title: str = "",
) -> Path:
    """``page``: the title (``title``, else the report's title line, which it replaces), the
    provenance line, the rest of the report, then each image (copied beside the page) as a
    Markdown image."""
    lines = report.read_text().splitlines()
    if lines and lines[0].startswith("# "):  # the page's title replaces the report's
        title, lines = title or lines[0][2:], lines[1:]
    rest = lines if lines and not lines[0].strip() else ["", *lines]
    page.parent.mkdir(parents=True, exist_ok=True)
    shown = []
    for source, name in images:
        shutil.copyfile(source, page.parent / name)
        if f"]({name})" not in "\n".join(lines):  # the report shows it already
            shown += ["", f"![{Path(name).stem}]({name})"]
    head = [f"# {title}", ""] if title else []
    text = "\n".join([*head, provenance(command, wall_seconds=wall_seconds), *rest, *shown])
    page.write_text(text.rstrip("\n") + "\n")
    return page


def _image(spec: str) -> tuple[Path, str]:
    source, _, name = spec.partition("=")
    return Path(source), name or Path(source).name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--command", required=True, help="the command named on the page")
    parser.add_argument("--report", required=True, type=Path, help="the run's report.md")
    parser.add_argument("--page", required=True, type=Path, help="the page to write")
    parser.add_argument(
        "--image",
        action="append",
        default=[],
        type=_image,
        help="SOURCE=NAME: copy SOURCE beside the page as NAME and show it",
    )
    parser.add_argument("--started", type=float, help="epoch seconds the command started")
    parser.add_argument("--title", default="", help="the page's title (default: the report's)")
    args = parser.parse_args(argv)
    if not args.report.is_file():
        print(f"results page {args.page}: no report at {args.report}", file=sys.stderr)
        return 1
    wall = time.time() - args.started if args.started else None
    write_page(
        args.command, args.report, args.page, args.image, wall_seconds=wall, title=args.title
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
