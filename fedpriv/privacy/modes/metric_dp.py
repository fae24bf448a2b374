"""``privacy = metric-dp``: the server's Gaussian with a data-dependent σ = z·C/(m·d).

A heuristic (no ε): the distance d depends on the data. With ``distance-on = clipped``,
σ ≥ z·√L/(2m) (L = number of layers).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedpriv.privacy.modes.base import PUBLIC, Mode
from fedpriv.spec import RunSpec
from fedpriv.spec import key as config_key

METRIC_NOTE = (
    "metric DP is a heuristic: sigma = z*C/(m*d) with a data-dependent distance d; no "
    "epsilon. With distance-on = clipped, sigma >= z*sqrt(L)/(2m) (L = number of layers)."
)
UNACCOUNTED = (
    "train-loss: un-noised training loss of each client (aggregated into rounds.jsonl)",
    "distributed evaluation metrics on each client's test split",
)


@dataclass(frozen=True)
class MetricDPParams:
    """z, C and what the distance is measured on."""

    noise_multiplier: float = config_key("noise-multiplier", mode_default=0.01)
    clipping_norm: float = config_key("clipping-norm", mode_default=5.0)
    distance_on: str = config_key("distance-on")


def plan(spec: RunSpec, examples_per_client: int | None = None) -> dict:
    """No ε (a heuristic); the sampling labels of the run."""
    from fedpriv.privacy.accounting.events import labels_for

    del examples_per_client
    part = spec.participation
    params: MetricDPParams = spec.params
    return {
        "mode": MODE.name,
        "epsilon": None,
        "heuristic": METRIC_NOTE,
        "distance_on": params.distance_on,
        **labels_for("fixed", part.per_round, part.population),
        "accountant": "none (heuristic)",
    }


MODE = Mode(
    name="metric-dp",
    params=MetricDPParams,
    threat_model={
        "server": "trusted as under global DP; it sees every client's un-noised update.",
        "clients and observers": "see noised releases whose noise depends on the data "
        "(a heuristic, no epsilon).",
    },
    epsilon_against={"server": "none (trusted)", "clients and observers": "none (heuristic)"},
    plan=plan,
    disclosure={"train": PUBLIC, "evaluate": PUBLIC},
    unaccounted=UNACCOUNTED,
    report_label="Metric-privacy",
    server_noise=True,
    audit="client",
)
