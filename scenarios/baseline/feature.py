"""Feature ``baseline``: ``fedpriv baseline record`` and ``fedpriv baseline check``.

Scenario regression checks for a user's CI. ``record`` runs the named scenarios
or grid cells over a few seeds (:mod:`fedpriv.scenarios.baseline.runs`) and writes a baseline file:
for each run's final metrics, per-round metrics and privacy figures, either the exact value
per seed (ε, σ, z, δ, sampling: what does not depend on float training) or a seed-spread band
(accuracy, loss: ``[min - k·s - tol, max + k·s + tol]``, :mod:`fedpriv.baseline`).
``check`` reruns them with the recorded run config (plus its own ``--run-config``, which is
how a change is tried), prints a table of figure, band, value and verdict
(:mod:`fedpriv.scenarios.baseline.report`), writes JUnit XML, and exits 1 naming every figure out of
its band. Bad targets, seeds or keys: one line, exit 2, before anything runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fedpriv.scenarios.baseline.report import RunVerdicts, summary_line, table, write_junit
from fedpriv.scenarios.baseline.runs import (
    BaselineCell,
    check_common,
    plan_cells,
    run_cells,
    target_overrides,
)
from fedpriv.scenarios.cli import launch as cli
from fedpriv.scenarios.config.feature import Catalog, Command, Feature
from fedpriv.scenarios.config.schema import ConfigError

from fedpriv.baseline import BandRule, band_for_seed, bands_of_runs, compare, run_figures
from fedpriv.grid import GridError, parse_list, parse_seeds

FORMAT = "fedpriv-baseline/1"
PREFIX = "fedpriv baseline"

RECORD_HELP = """\
Run scenarios (or grid cells) over a few seeds and save their results as a baseline file:
the privacy figures (epsilon, sigma) exactly, accuracy and loss as bands over the seeds.

example:
  fedpriv baseline record digits digits/fedavg/global-dp --seeds 0,1,2 \\
      --run-config "num-server-rounds=3" --out ci/fedpriv-baseline.json
"""

CHECK_HELP = """\
Rerun the runs of a baseline file and compare: prints each figure with its band, its value
and a verdict, writes JUnit XML for CI, and exits with status 1 if a figure left its band.

example:
  fedpriv baseline check ci/fedpriv-baseline.json --junit reports/baseline.xml
  fedpriv baseline check ci/fedpriv-baseline.json --only digits --seeds 0 \\
      --run-config "learning-rate=0.01"      # try a change against the baseline
  fedpriv baseline check ci/fedpriv-baseline.json \\
      --target-config digits/fedavg/global-dp "noise-multiplier=0.02"   # one target only
"""


class BaselineFileError(ValueError):
    """A baseline file that cannot be read (one-line message)."""


def _work_dir(path: str | None) -> Path:
    """The folder for the runs, not created yet (nothing is written before the checks pass).

    Default: a new folder in the system's temporary folder. A given one must be empty or
    new: the runs of an older record or check there would be taken as done and skipped.
    """
    if path is None:
        stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        return Path(tempfile.gettempdir()) / f"fedpriv-baseline-{stamp}"
    work = Path(path)
    if work.exists() and (not work.is_dir() or any(work.iterdir())):
        raise ConfigError("--work-dir", path, "an empty or new folder")
    return work


def _rule(args: argparse.Namespace) -> BandRule:
    for name in ("spread_factor", "score_tol", "value_rel", "value_floor"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0):
            raise ConfigError("--" + name.replace("_", "-"), value, "a number >= 0")
    return BandRule(args.spread_factor, args.score_tol, args.value_rel, args.value_floor)


def _shared_args(parser: argparse.ArgumentParser) -> None:
    cli.add_run_config_option(
        parser, 'run-config overrides for every run, e.g. "num-server-rounds=3"'
    )
    cli.add_federation_option(parser)
    parser.add_argument(
        "--work-dir", help="where the runs go (empty or new; default: a new temporary folder)"
    )


def _record_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("targets", nargs="+", help="SCENARIO or SCENARIO/STRATEGY/PRIVACY")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated (default 0,1,2)")
    parser.add_argument("--out", default="fedpriv-baseline.json", help="the baseline file")
    parser.add_argument(
        "--spread-factor",
        type=float,
        default=BandRule.spread_factor,
        help="k: bands reach k times the seed spread beyond the seed range",
    )
    parser.add_argument(
        "--score-tol",
        type=float,
        default=BandRule.score_tol,
        help="added to both sides of accuracy-like bands (absolute)",
    )
    parser.add_argument(
        "--value-rel",
        type=float,
        default=BandRule.value_rel,
        help="added to both sides of loss-like bands (relative)",
    )
    parser.add_argument("--value-floor", type=float, default=BandRule.value_floor,
                        help="the least absolute margin of loss-like bands")  # fmt: skip
    _shared_args(parser)


def _check_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", help="a file written by fedpriv baseline record")
    parser.add_argument("--only", help="comma-separated targets of the file (default: all)")
    parser.add_argument("--seeds", help="comma-separated recorded seeds (default: all)")
    parser.add_argument("--junit", help="write JUnit XML here (for CI test reports)")
    parser.add_argument("--all", action="store_true", help="print every per-round figure")
    parser.add_argument(
        "--target-config",
        nargs=2,
        action="append",
        default=[],
        metavar=("TARGET", "OVERRIDES"),
        help="run-config overrides for one target only (repeatable)",
    )
    _shared_args(parser)


def _baseline_args(parser: argparse.ArgumentParser) -> None:
    parser.description = "Scenario regression checks for CI: record a baseline, then check."
    sub = parser.add_subparsers(dest="baseline_command", required=True, metavar="{record,check}")
    fmt = argparse.RawDescriptionHelpFormatter
    _record_args(sub.add_parser("record", help="run and save a baseline", description=RECORD_HELP,
                                formatter_class=fmt))  # fmt: skip
    _check_args(sub.add_parser("check", help="rerun and compare with a baseline",
                               description=CHECK_HELP, formatter_class=fmt))  # fmt: skip


def _targets(specs: list[str]) -> dict[str, dict[str, Any]]:
    duplicates = sorted({s for s in specs if specs.count(s) > 1})
    if duplicates:
        raise ConfigError("target", duplicates[0], "each target once")
    return {spec: target_overrides(spec) for spec in specs}


def _run(
    cells: list[BaselineCell],
    common: dict[str, Any],
    work: Path,
    args: argparse.Namespace,
    catalog: Catalog,
) -> dict[BaselineCell, bool]:
    """Run the cells (:func:`fedpriv.scenarios.baseline.runs.run_cells`) after saying where."""
    print(f"{PREFIX}: {len(cells)} runs -> {work} (seeded noise: reproducible-noise = true "
          "unless --run-config sets it)", flush=True)  # fmt: skip
    return run_cells(cells, common, work, args.federation, catalog)


def record(args: argparse.Namespace, catalog: Catalog) -> int:
    """``fedpriv baseline record``: run every target at every seed, write the bands."""
    from fedpriv.data import DataError

    try:
        targets, seeds = _targets(args.targets), parse_seeds(args.seeds)
        common, rule = cli.parse_overrides(args.run_config), _rule(args)
        work = _work_dir(args.work_dir)
        cells = plan_cells(targets, seeds, common, work, catalog)
    except (ConfigError, DataError, GridError) as err:
        print(f"{PREFIX}: {err}", file=sys.stderr)
        return 2
    done = _run(cells, common, work, args, catalog)
    failed = [c.label for c, ok in done.items() if not ok]
    if failed:
        print(f"{PREFIX}: no baseline written, runs failed: {', '.join(failed)} "
              f"(logs in {work})", file=sys.stderr)  # fmt: skip
        return 1
    doc = {"format": FORMAT, "seeds": seeds, "run-config": common, "rule": vars(rule),
           "targets": {}}  # fmt: skip
    for target, overrides in targets.items():
        runs = {c.seed: run_figures(c.path) for c in cells if c.target == target}
        doc["targets"][target] = {"overrides": overrides, "figures": bands_of_runs(runs, rule)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    count = sum(len(t["figures"]) for t in doc["targets"].values())
    print(f"{PREFIX}: wrote {out}: {len(targets)} targets x {len(seeds)} seeds, {count} figures")
    return 0


def load_baseline(path: str) -> dict[str, Any]:
    """A baseline file, or BaselineFileError (one line)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise BaselineFileError(f"cannot read baseline {path}: {err}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BaselineFileError(f"{path} is not a baseline file ({FORMAT}) of fedpriv baseline")
    return doc


def _selection(doc: dict, args: argparse.Namespace) -> tuple[dict[str, dict], list[int]]:
    """The targets and seeds to rerun (subsets of the file's)."""
    names = parse_list(args.only, name="--only") if args.only else list(doc["targets"])
    unknown = [n for n in names if n not in doc["targets"]]
    if unknown:
        raise ConfigError("--only", unknown[0], "one of " + " | ".join(doc["targets"]))
    seeds = parse_seeds(args.seeds) if args.seeds else list(doc["seeds"])
    other = [s for s in seeds if s not in doc["seeds"]]
    if other:
        raise ConfigError("--seeds", other[0], f"recorded seeds {doc['seeds']}")
    extra: dict[str, dict[str, Any]] = {}
    for name, text in args.target_config:
        if name not in names:
            raise ConfigError("--target-config", name, "one of " + " | ".join(names))
        extra[name] = {**extra.get(name, {}), **cli.parse_overrides([text])}
        check_common(extra[name])
    targets = {n: {**doc["targets"][n]["overrides"], **extra.get(n, {})} for n in names}
    return targets, seeds


def _verdicts(cell: BaselineCell, ok: bool, entries: dict[str, Any]) -> RunVerdicts:
    if not ok:
        return RunVerdicts(cell.label, (), failed=True)
    bands = {name: band_for_seed(entry, cell.seed) for name, entry in entries.items()}
    kept = {name: band for name, band in bands.items() if band is not None}
    return RunVerdicts(cell.label, compare(kept, run_figures(cell.path)))


def check(args: argparse.Namespace, catalog: Catalog) -> int:
    """``fedpriv baseline check``: rerun, print the table, write JUnit, 1 on a regression."""
    from fedpriv.data import DataError

    t0 = time.time()
    try:
        doc = load_baseline(args.baseline)
        targets, seeds = _selection(doc, args)
        common = {**doc["run-config"], **cli.parse_overrides(args.run_config)}
        work = _work_dir(args.work_dir)
        cells = plan_cells(targets, seeds, common, work, catalog)
    except (BaselineFileError, ConfigError, DataError, GridError) as err:
        print(f"{PREFIX}: {err}", file=sys.stderr)
        return 2
    done = _run(cells, common, work, args, catalog)
    results = [_verdicts(c, ok, doc["targets"][c.target]["figures"]) for c, ok in done.items()]
    print("\n".join(table(results, every_row=args.all)))
    if args.junit:
        print(f"{PREFIX}: JUnit XML -> {write_junit(args.junit, results, time.time() - t0)}")
    print(summary_line(results), flush=True)
    return 1 if any(r.failed or r.regressions for r in results) else 0


def _baseline(args: argparse.Namespace, catalog: Catalog) -> int:
    return (record if args.baseline_command == "record" else check)(args, catalog)


FEATURE = Feature(
    name="baseline",
    description="Scenario regression checks for CI: fedpriv baseline record / check.",
    commands=(
        Command(
            "baseline",
            _baseline_args,
            _baseline,
            "Save runs' results as a baseline, or check new runs against it (for CI).",
            "fedpriv baseline record digits --seeds 0,1,2 --out ci/fedpriv-baseline.json\n"
            "fedpriv baseline check ci/fedpriv-baseline.json --junit reports/baseline.xml",
        ),
    ),
)
