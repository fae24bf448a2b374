"""``make results-check``: every page under ``docs/results/`` re-made by its own make target at
a reduced scale into a scratch folder, then the orderings and bands the page claims checked on
what that run wrote (the claims and their bands: :mod:`bench.results_claims`).

A page fails when its command exits non-zero, when it writes no page, or when a claim does not
hold; each failure is one line ``FAIL <page>: ...`` and the exit status is 1.

``python -m bench.results_check --out runs/results-check --make make`` runs everything;
``--pages gp-fig2,dlg`` a subset; ``--check-only`` re-checks the outputs already in ``--out``.
"""

from __future__ import annotations

import argparse
import resource
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import results_claims as claims


@dataclass(frozen=True)
class Page:
    """A results page: its file under docs/results/, its make target, the reduced-scale
    overrides (``VAR=value``, each naming an output under the scratch folder ``{out}``) and
    the check of its claims on that run (a list of failed claims, empty when all hold)."""

    name: str
    page: str
    target: str
    overrides: tuple[str, ...]
    check: Callable[[Path], list[str]]

    def command(self, make: Sequence[str], out: Path) -> list[str]:
        scratch = out / self.name
        variables = [v.format(out=scratch) for v in self.overrides]
        return [*make, self.target, f"RESULTS_DIR={scratch}/pages", *variables]


GP_FIG2_SWEEP = (
    "num-hypotheses=1,ifca-noise-multiplier=0;num-hypotheses=2,ifca-noise-multiplier=0;"
    "num-hypotheses=2,ifca-noise-multiplier=5"
)

PAGES: tuple[Page, ...] = (
    Page(
        "gp-fig2",
        "gp-fig2.md",
        "gp-fig2",
        ("GP_FIG2_DIR={out}/run", f"GP_FIG2_RUN_CONFIG=ifca-sweep='{GP_FIG2_SWEEP}'"),
        claims.gp_fig2,
    ),
    Page(
        "ifca-digits-rotated-table",
        "ifca-digits-rotated-table.md",
        "ifca-table",
        ("IFCA_TABLE_DIR={out}/run", "IFCA_NUS=0 15", "IFCA_RUN_CONFIG=num-server-rounds=6"),
        claims.ifca_table,
    ),
    Page(
        "dlg",
        "dlg.md",
        "dlg-report",
        (
            "DLG_OUT={out}/run",
            "DLG_ARGS=--images 2 --nu 0.01,10 --zonal-z 0.01 --groups 1 --max-iter 100",
        ),
        claims.dlg,
    ),
    Page(
        "hdp-compare",
        "hdp-compare.md",
        "hdp-compare",
        ("HDP_COMPARE_DIR={out}/run", "HDP_RUN_CONFIG=num-server-rounds=8"),
        claims.hdp_compare,
    ),
    Page(
        "hdp-sweep",
        "hdp-sweep.md",
        "hdp-sweep",
        ("HDP_SWEEP_DIR={out}/run", "HDP_SWEEP_ZONES=1,10", "HDP_SWEEP_ROUNDS=8"),
        claims.hdp_sweep,
    ),
    Page(
        "hdp-paper",
        "hdp-paper.md",
        "hdp-paper",
        ("HDP_PAPER_DIR={out}/run", "HDP_PAPER_RUN_CONFIG=num-server-rounds=10"),
        claims.hdp_paper,
    ),
    Page(
        "cia-synthetic-mri",
        "cia-synthetic-mri.md",
        "cia-table",
        (
            "CIA_RUNS={out}/runs",
            "CIA_OUT={out}/run",
            "CIA_STRATEGIES=fedavg",
            "CIA_PRIVACY=none,global-dp",
            "CIA_RUN_CONFIG=cia-local-epochs=3 reproducible-noise=true",
        ),
        claims.cia,
    ),
    Page(
        "mp-grid-synthetic",
        "mp-grid-synthetic.md",
        "mp-grid-synthetic",
        (
            "MP_GRID_DIR={out}/run",
            "MP_STRATEGIES=fedavg",
            "MP_PRIVACY=none,global-dp",
            "MP_SEEDS=0",
            "MP_GRID_RUN_CONFIG=num-server-rounds=1 local-epochs=1",
        ),
        claims.mp_grid,
    ),
    Page(
        "privacy-utility",
        "privacy-utility.md",
        "privacy-utility",
        ("PU_DIR={out}/run", "PU_EPSILONS=8", "PU_SEEDS=0", "PU_ROUNDS=3"),
        claims.privacy_utility,
    ),
    Page(
        "distributed-dp-utility",
        "distributed-dp-utility.md",
        "distributed-dp-utility",
        ("DDPU_DIR={out}/run", "DDPU_EPSILONS=8", "DDPU_SEEDS=0", "DDPU_ROUNDS=3"),
        claims.distributed_utility,
    ),
    Page(
        "audit",
        "audit/audit.md",
        "audit-report",
        ("AUDIT_DIR={out}/run", "AUDIT_Z=3", "AUDIT_RUN_CONFIG=num-server-rounds=1"),
        claims.audit,
    ),
)


def run_page(page: Page, make: Sequence[str], out: Path, *, check_only: bool = False) -> list[str]:
    """The failures of one page: its command's exit status, then its claims."""
    scratch = out / page.name
    if not check_only:  # a fresh folder: no finished cell of an earlier run is resumed
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        command = page.command(make, out)
        with open(scratch / "command.log", "w") as log:
            rc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            return [f"`{shlex.join(command)}` exited {rc} (log: {scratch / 'command.log'})"]
    written = scratch / "pages" / page.page
    if not written.is_file():
        return [f"its command wrote no page at {written}"]
    try:
        return page.check(scratch)
    except (OSError, KeyError, ValueError, IndexError, TypeError) as err:
        return [f"its outputs could not be read: {type(err).__name__}: {err}"]


def _children_cpu() -> float:
    """User + system CPU seconds of the finished child processes (the commands and theirs;
    a load-independent measure of a page's cost, where wall time on a shared machine is not)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def check_pages(
    pages: Sequence[Page], make: Sequence[str], out: Path, *, check_only: bool = False
) -> int:
    """Run and check every page; one line per page; 1 when any page failed."""
    failed = 0
    for page in pages:
        t0, cpu0 = time.time(), _children_cpu()
        failures = run_page(page, make, out, check_only=check_only)
        took = f"{time.time() - t0:.0f} s wall, {_children_cpu() - cpu0:.0f} CPU s"
        for failure in failures:
            print(f"FAIL {page.name} (docs/results/{page.page}): {failure}", flush=True)
        if not failures:
            print(f"ok   {page.name} (docs/results/{page.page}): claims hold ({took})", flush=True)
        failed += bool(failures)
    print(f"results-check: {len(pages) - failed}/{len(pages)} pages reproduced", flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/results-check"))
    parser.add_argument("--make", default="make", help="the make command (with its variables)")
    parser.add_argument("--pages", default="", help="comma-separated page names (default: all)")
    parser.add_argument("--check-only", action="store_true", help="check outputs in --out")
    args = parser.parse_args(argv)
    names = [n for n in args.pages.split(",") if n]
    known = {p.name for p in PAGES}
    if unknown := [n for n in names if n not in known]:
        print(
            f"--pages: {', '.join(unknown)} unknown; allowed: {', '.join(sorted(known))}",
            file=sys.stderr,
        )
        return 2
    pages = [p for p in PAGES if not names or p.name in names]
    return check_pages(pages, shlex.split(args.make), args.out, check_only=args.check_only)


if __name__ == "__main__":
    sys.exit(main())
