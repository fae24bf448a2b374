"""What a client may send in each privacy mode: only what that mode's accounting covers.

Issue 11: data must not leave a client outside the accounted mechanism. A client's reply is
its model parameters (the accounted mechanism's input or output) plus a MetricRecord; this
module lists, per privacy mode and message kind, the metric keys a reply may carry, and
filters every reply in the ClientApp's handlers (``scenarios/client_app.py``).

Allowed without opt-in (``REPLY_KEYS``):

* ``num-examples`` — the example count, used for aggregation weights. It is treated as
  **public metadata** (the DP modes aggregate uniformly by default; with
  ``dp-weighting = examples`` the accountant charges the largest weight);
* values computed from the run config and public metadata only: DP-SGD's own ε
  (``dp-sgd-epsilon*``: a function of z, C, batch, epochs and n), a zonal LDP client's noise
  std ``z·C``.

Unaccounted channels (``UNACCOUNTED``) are sent only with ``unaccounted-metrics = true``, an
explicit opt-in that summary.json lists under ``privacy.unaccounted``: un-noised training
loss (DP-SGD, central DP, zonal), a zonal client's pre-clipping update norm, clipping flag
and noise norm (the noise norm reveals σ·√n, the update norm the data), distributed
evaluation metrics on the clients' test splits, and IFCA's final evaluation (a training
user's cluster index and test metrics; GP's rule is that only the sanitized vector leaves).
``privacy = none`` accounts nothing and filters nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "GP_FINAL_EVALUATION",
    "ifca_privacy_block",
    "OPT_IN_KEY",
    "REPLY_KEYS",
    "UNACCOUNTED",
    "allowed_metric_keys",
    "filter_metrics",
    "unaccounted_channels",
    "sends_unaccounted",
    "policy",
    "UNFILTERED_MODES",
]

OPT_IN_KEY = "unaccounted-metrics"
PUBLIC = frozenset({"num-examples"})

# privacy mode -> message kind -> metric keys a reply may carry without the opt-in
REPLY_KEYS: dict[str, dict[str, frozenset[str]]] = {
    "global-dp": {"train": PUBLIC, "evaluate": PUBLIC},
    "metric-dp": {"train": PUBLIC, "evaluate": PUBLIC},
    "dp-sgd": {
        "train": PUBLIC | {"dp-sgd-epsilon"},
        "evaluate": PUBLIC,
    },
    # zonal-zone-sigma: a zone node's σ_i = z·C/(q·W_i), public
    "zonal": {"train": PUBLIC | {"zonal-noise-std", "zonal-zone-sigma"}, "evaluate": PUBLIC},
    "ifca": {"train": frozenset(), "evaluate": frozenset()},
}

# modes that account nothing and filter nothing (declared, not defaulted: fail closed)
UNFILTERED_MODES = frozenset({"none"})

UNACCOUNTED: dict[str, list[str]] = {
    "global-dp": [
        "train-loss: un-noised training loss of each client (aggregated into rounds.jsonl)",
        "distributed evaluation metrics on each client's test split",
    ],
    "metric-dp": [
        "train-loss: un-noised training loss of each client (aggregated into rounds.jsonl)",
        "distributed evaluation metrics on each client's test split",
    ],
    "dp-sgd": [
        "train-loss: un-noised training loss (not part of DP-SGD's noised gradients)",
        "distributed evaluation metrics on each client's test split",
    ],
    "zonal": [
        "train-loss: un-noised training loss",
        "zonal-update-norm: the update norm before clipping",
        "zonal-clipped: whether the update was clipped",
        "zonal-noise-norm: the norm of the drawn noise",
        "zonal-zone-noise-norm, zonal-clipped-count: a zone node's noise norm and clip count",
        "distributed evaluation metrics on each client's test split",
    ],
    "ifca": [
        "final evaluation: every training user's cluster index and test metrics",
    ],
}


def _mode(cfg: Mapping[str, Any]) -> str:
    """The accounting mode of a config (IFCA runs are keyed by their client task)."""
    if str(cfg.get("client-task", "")) == "ifca" or str(cfg.get("scenario-kind", "")) == "ifca":
        return "ifca"
    return str(cfg.get("privacy", "none"))


def policy(mode: str) -> dict[str, frozenset[str]] | None:
    """What a mode's clients may send (kind -> metric keys; None: ``privacy = none``, anything).

    Fail closed: a mode with no policy here raises (it used to be allowed everything).
    """
    if mode in UNFILTERED_MODES:
        return None
    if mode not in REPLY_KEYS:
        allowed = " | ".join(sorted(set(REPLY_KEYS) | UNFILTERED_MODES))
        raise ValueError(f"privacy = {mode!r} has no disclosure policy; expected one of {allowed}")
    return REPLY_KEYS[mode]


def sends_unaccounted(cfg: Mapping[str, Any]) -> bool:
    """True when the run opted in to unaccounted client metrics (or accounts nothing).

    Raises ValueError for a mode without a disclosure policy (:func:`policy`)."""
    value = cfg.get(OPT_IN_KEY, False)
    return policy(_mode(cfg)) is None or bool(value)


def allowed_metric_keys(cfg: Mapping[str, Any], kind: str) -> frozenset[str] | None:
    """Metric keys a ``kind`` (``train`` | ``evaluate``) reply may carry; None = anything."""
    if kind not in ("train", "evaluate"):
        raise ValueError(f"kind = {kind!r} is not allowed; expected train | evaluate")
    if sends_unaccounted(cfg):
        return None
    return REPLY_KEYS[_mode(cfg)][kind]


def filter_metrics(cfg: Mapping[str, Any], kind: str, metrics: Mapping[str, Any]) -> dict:
    """``metrics`` restricted to :func:`allowed_metric_keys` (unchanged with the opt-in)."""
    allowed = allowed_metric_keys(cfg, kind)
    if allowed is None:
        return dict(metrics)
    return {k: v for k, v in metrics.items() if k in allowed}


def unaccounted_channels(cfg: Mapping[str, Any], *, mode: str | None = None) -> list[str]:
    """What summary.json lists under ``privacy.unaccounted`` (empty without the opt-in)."""
    mode = mode or _mode(cfg)
    if mode not in REPLY_KEYS or not bool(cfg.get(OPT_IN_KEY, False)):
        return []
    return list(UNACCOUNTED[mode])


# The GP scenarios' explicit opt-in: training users report their cluster and test metrics at
# the end (GP's evaluation protocol), listed in summary.json ``privacy.unaccounted``.
GP_FINAL_EVALUATION = {OPT_IN_KEY: True}


def ifca_privacy_block(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """summary.json ``privacy`` of an IFCA run: no ε, GP's heuristic, unaccounted channels."""
    from fedpriv.accounting.leakage import LEAKAGE_LABEL

    return {
        "mode": "ifca",
        "epsilon": None,
        "heuristic": LEAKAGE_LABEL,
        "unaccounted": unaccounted_channels(cfg, mode="ifca"),
    }
