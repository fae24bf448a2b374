"""Feature ``tracking``: experiment trackers for a run, and ``fedpriv compare``.

- ``tracking = 'mlflow' | 'tensorboard'`` (keys in :mod:`fedpriv.scenarios.tracking.keys`): every
  run of the round engine (:func:`fedpriv.scenarios.app.engine.train_run`: ``fedpriv run``, each
  cell of ``fedpriv grid`` and ``fedpriv audit --grid``, each zonal variant and CIA phase)
  logs its resolved config, each round's metrics with σ and ε, its final metrics and its
  plots (:mod:`fedpriv.scenarios.app.tracking`). IFCA runs its own loop and refuses the key.
- ``fedpriv compare RUN_DIR...``: one table with mean ± std over the seeds of runs that
  differ only in the seed, and one accuracy-vs-round plot with ε on a second axis
  (:mod:`fedpriv.reporting.compare`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Mapping
from typing import Any

from fedpriv.scenarios.config.feature import Catalog, Command, Feature
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.ifca.feature import KIND as IFCA_KIND
from fedpriv.scenarios.tracking.keys import KEYS

# the module each tracker imports (the `tracking` extra)
PACKAGES = {"mlflow": "mlflow", "tensorboard": "tensorboard"}
UNTRACKED_KINDS = (IFCA_KIND,)  # kinds whose runner is not the round engine


def check_tracking(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """A tracker needs its package, and a scenario kind that runs the round engine."""
    kind = cfg.get("tracking", "none")
    if kind == "none":
        return
    if importlib.util.find_spec(PACKAGES[kind]) is None:
        extra = "pip install 'fedpriv[tracking]'"
        raise ConfigError("tracking", kind, f"none, or the tracking extra installed: {extra}")
    if catalog.kind(cfg) in UNTRACKED_KINDS:
        raise ConfigError(
            "tracking", kind, f"'none' for scenario {cfg['scenario']!r} (IFCA runs its own loop)"
        )


def _compare_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs", nargs="+", metavar="RUN_DIR", help="run directories, or folders of runs (a grid)"
    )
    parser.add_argument(
        "--out", default="runs/compare", help="where compare.md/.json/.png go (runs/compare)"
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")


def _compare(args: argparse.Namespace, catalog: Catalog) -> int:
    del catalog
    from fedpriv.reporting.compare import CompareError, compare_runs

    try:
        doc = compare_runs(args.runs, args.out)
    except CompareError as err:
        print(f"fedpriv compare: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(doc["rows"], indent=1, default=str))
        return 0
    print(doc["table"], end="")
    print(f"fedpriv compare: mean ± std (ddof 0) over seeds; plot {doc['plot']}")
    return 0


FEATURE = Feature(
    name="tracking",
    description="MLflow / TensorBoard tracking of runs; fedpriv compare over seeds.",
    keys=KEYS,
    checks=(check_tracking,),
    commands=(
        Command(
            "compare",
            _compare_args,
            _compare,
            "Compare finished runs: mean ± std over seeds, and accuracy and ε per round.",
            "fedpriv compare runs/digits-fedavg-none-s0 runs/digits-fedavg-none-s1\n"
            "fedpriv compare runs/grid --out runs/grid/compare",
        ),
    ),
)
