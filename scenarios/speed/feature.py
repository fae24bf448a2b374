"""The ``speed`` feature: paper-scale scenarios and the training switches.

Keys (:mod:`fedpriv.scenarios.speed.keys`): ``image-size``, ``jit-compile``, ``mixed-precision``,
``op-determinism``, ``evaluate-in-train`` (one message per round,
:mod:`fedpriv.scenarios.app.fused`).
Local training itself is compiled for every client task (:mod:`fedpriv.clients.compiled`); these
keys
only choose its options.

Scenarios at the papers' own settings, runnable on a 2-core machine since training is compiled:

- ``hdp-paper`` (kind ``zonal-compare``): HDP §VII — k = 100 clients per round, s = 10 zones,
  FedAvg, SGD 0.02, 5 local epochs, server learning rate 1, 200 rounds; none / LDP / HDP / CDP
  at the same z and C in one simulation (HDP Fig. 2 / Table III). Digits (100 Dirichlet(0.5)
  clients, 1,437 training images) stands in for EMNIST, so k = 100 is every client (q = 1).
  HDP's own datasets are read from ``data-path``: ``dataset = cifar10 | cifar100``
  with ``partition = iid num-clients = 500``, or ``dataset = emnist partition = writer
  num-clients = 3383`` (:mod:`fedpriv.data.cifar`, :mod:`fedpriv.data.emnist`).
  Server test accuracy only (no per-client evaluation messages).
- ``gp-fig2`` (kind ``ifca``): GP extended Fig. 2 on GP's synthetic data — RMSE against the
  noise multiplier ν ∈ {0, 1, 2, 3, 5} and the number of hypotheses k ∈ {1, 2, 3, 5, 7},
  10 seeds each (250 IFCA runs in one simulation, ``ifca-sweep``; table in ``ifca_table.md``).

Summary block ``speed``: present only when a run deviates from the defaults, so a reader of
``summary.json`` sees an image size below MP's 128 and the switches that were on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedpriv.scenarios.app.fused import check_evaluate_in_train
from fedpriv.scenarios.config.feature import Feature, Scenario
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import ServerRun
from fedpriv.scenarios.ifca.feature import SCENARIOS as IFCA_SCENARIOS
from fedpriv.scenarios.speed.keys import KEYS
from fedpriv.scenarios.zonal.feature import HDP_DIGITS

from fedpriv.data.resize import IMAGE_DATASETS, deviation_note
from fedpriv.privacy.modes import dp_sgd, mode_of

GP_FIG2_HYPOTHESES = (1, 2, 3, 5, 7)
GP_FIG2_NUS = (0, 1, 2, 3, 5)
GP_FIG2_SEEDS = tuple(range(10))

HDP_PAPER = {
    **HDP_DIGITS,
    "clients-per-round": 100,
    "num-zones": 10,
    "num-server-rounds": 200,
    "zonal-distributed-eval": "none",
}


def gp_fig2_sweep(hypotheses=GP_FIG2_HYPOTHESES, nus=GP_FIG2_NUS, seeds=GP_FIG2_SEEDS) -> str:
    """The ``ifca-sweep`` text of GP Fig. 2: every (k, ν, seed), seed outermost (a run cut
    short still holds the whole k × ν grid for its first seeds)."""
    return ";".join(
        f"num-hypotheses={k},ifca-noise-multiplier={nu},seed={s}"
        for s in seeds
        for k in hypotheses
        for nu in nus
    )


def _gp_defaults() -> dict[str, Any]:
    """gp-synthetic's defaults with the 250-run sweep; each validation user answers at most
    one query per round of each run: 250 runs x 50 rounds (its own query budget)."""
    base = next(s for s in IFCA_SCENARIOS if s.name == "gp-synthetic")
    sweep = gp_fig2_sweep()
    queries = (sweep.count(";") + 1) * int(base.defaults["num-server-rounds"])
    return {**base.defaults, "ifca-sweep": sweep, "validation-query-budget": queries}


SCENARIOS = (
    Scenario(
        "hdp-paper",
        "zonal-compare",
        "HDP §VII at its own scale: k = 100 per round, s = 10 zones, FedAvg + SGD 0.02, "
        "5 epochs, 200 rounds; none vs LDP vs HDP vs CDP (digits for EMNIST).",
        HDP_PAPER,
    ),
    Scenario(
        "gp-fig2",
        "ifca",
        "GP Fig. 2 on GP's synthetic data: RMSE vs nu in {0,1,2,3,5} and k in {1,2,3,5,7}, "
        "10 seeds (250 IFCA runs in one simulation).",
        _gp_defaults(),
    ),
)


def speed_summary(run: ServerRun, rounds: list[dict]) -> dict:
    """``{"speed": {...}}`` when the image size or a training switch is not the default."""
    del rounds
    data, train = run.spec.data, run.spec.train
    block: dict[str, Any] = {}
    size = int(data.image_size)
    if data.dataset in IMAGE_DATASETS and deviation_note(size):
        block["image_size"] = size
        block["deviation"] = deviation_note(size)
    switches = {"jit-compile": train.jit_compile, "mixed-precision": train.mixed_precision}
    for name, on in switches.items():
        if on:
            block[name] = True
    if not train.op_determinism:
        block["op-determinism"] = False
    return {"speed": block} if block else {}


def check_mixed_precision(cfg: Mapping[str, Any], catalog: Any) -> None:
    """``mixed-precision`` is refused with DP-SGD (its clipping and noise stay float32)."""
    del catalog
    mode = mode_of(cfg)
    if cfg.get("mixed-precision") and mode is dp_sgd.MODE:
        raise ConfigError("mixed-precision", True, f"false with privacy = {mode.name!r}")


FEATURE = Feature(
    name="speed",
    description="Compiled-training switches, image size, paper-scale scenarios.",
    keys=KEYS,
    scenarios=SCENARIOS,
    summary=speed_summary,
    checks=(check_mixed_precision, check_evaluate_in_train),
)
