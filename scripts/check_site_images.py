"""Every image under a source folder (``docs/results/``) is shown on the built site: some built
HTML page has an ``<img>`` whose file exists and has the same bytes as the source image.

``python scripts/check_site_images.py docs/results docs/_build/html`` (the last step of
``make docs``) prints one line per image that no page shows and exits 1 if there is any.
Sphinx copies an image a page shows into ``_images/`` (renamed when two share a name), so an
image is matched by its content, not its name.
"""

from __future__ import annotations

import hashlib
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".svg")


class _ImageSources(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.sources += [v for k, v in attrs if k == "src" and v]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shown_images(html_root: Path) -> dict[str, list[str]]:
    """``{sha256 of an image file: [the pages that show it]}`` over every built page; an
    ``<img>`` whose file is missing is listed under ``"missing:<src>"``."""
    shown: dict[str, list[str]] = {}
    for page in sorted(html_root.rglob("*.html")):
        parser = _ImageSources()
        parser.feed(page.read_text(errors="replace"))
        for src in parser.sources:
            parts = urlsplit(src)
            if parts.scheme or parts.netloc:  # remote images are not the site's files
                continue
            target = (page.parent / unquote(parts.path)).resolve()
            key = _digest(target) if target.is_file() else f"missing:{src}"
            shown.setdefault(key, []).append(str(page.relative_to(html_root)))
    return shown


def unshown(source_root: Path, html_root: Path) -> list[str]:
    """One line per image under ``source_root`` that no built page shows, and per ``<img>`` of
    a built page whose file is missing."""
    shown = shown_images(html_root)
    problems = [
        f"{path}: no page of {html_root} shows it (add it to a page, e.g. ![...]({path.name}))"
        for path in sorted(source_root.rglob("*"))
        if path.suffix.lower() in IMAGE_SUFFIXES and _digest(path) not in shown
    ]
    problems += [
        f"{', '.join(pages)}: <img src={key[len('missing:') :]!r}> has no file in {html_root}"
        for key, pages in shown.items()
        if key.startswith("missing:")
    ]
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: check_site_images.py SOURCE_DIR BUILT_HTML_DIR", file=sys.stderr)
        return 2
    source_root, html_root = Path(args[0]), Path(args[1])
    if not html_root.is_dir():
        print(
            f"check_site_images: {html_root} is not a built site (run sphinx-build first)",
            file=sys.stderr,
        )
        return 2
    problems = unshown(source_root, html_root)
    for line in problems:
        print(f"check_site_images: {line}", file=sys.stderr)
    count = sum(1 for p in source_root.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not problems:
        print(f"check_site_images: all {count} images under {source_root} are on the site")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
