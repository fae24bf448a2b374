"""What a client may send in each privacy mode: only what that mode's accounting covers.

Issue 11: data must not leave a client outside the accounted mechanism. A client's reply is
its model parameters (the accounted mechanism's input or output) plus a MetricRecord; each
privacy mode declares (``Mode.disclosure`` in its module of :mod:`fedpriv.modes`), per
message kind, the metric keys a reply may carry, and this module filters every reply in
the ClientApp's handlers (``scenarios/client_app.py``).

Allowed without opt-in (``Mode.disclosure``):

* ``num-examples`` — the example count, used for aggregation weights. It is treated as
  **public metadata** (the DP modes aggregate uniformly by default; with
  ``dp-weighting = examples`` the accountant charges the largest weight);
* values computed from the run config and public metadata only: DP-SGD's own ε
  (``dp-sgd-epsilon*``: a function of z, C, batch, epochs and n), a zonal LDP client's noise
  std ``z·C``.

Unaccounted channels (``Mode.unaccounted``) are sent only with ``unaccounted-metrics = true``, an
explicit opt-in that summary.json lists under ``privacy.unaccounted``: un-noised training
loss (DP-SGD, central DP, zonal), a zonal client's pre-clipping update norm, clipping flag
and noise norm (the noise norm reveals σ·√n, the update norm the data), distributed
evaluation metrics on the clients' test splits, and IFCA's final evaluation (a training
user's cluster index and test metrics; GP's rule is that only the sanitized vector leaves).
A mode that accounts nothing (``none``) filters nothing (``Mode.filters = False``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "GP_FINAL_EVALUATION",
    "ifca_privacy_block",
    "OPT_IN_KEY",
    "allowed_metric_keys",
    "filter_metrics",
    "reply_keys",
    "unaccounted_channels",
    "sends_unaccounted",
    "policy",
]

OPT_IN_KEY = "unaccounted-metrics"


def policy(mode: str) -> Mapping[str, frozenset[str]] | None:
    """What a mode's clients may send (kind -> metric keys; None: a mode that filters
    nothing, ``Mode.filters = False``), from the mode's own declaration (:mod:`fedpriv.modes`).

    Fail closed: an unknown mode raises ValueError naming the known modes.
    """
    from fedpriv.modes import ModeError, get

    try:
        declared = get(mode)
    except ModeError as err:
        raise ValueError(f"{err}: it has no disclosure policy") from None
    return declared.disclosure if declared.filters else None


def reply_keys() -> dict[str, Mapping[str, frozenset[str]]]:
    """Every filtering mode's policy (mode -> kind -> metric keys)."""
    from fedpriv.modes import get, names

    modes = [get(n) for n in names(selectable=False)]
    return {m.name: m.disclosure for m in modes if m.filters and m.disclosure is not None}


def sends_unaccounted(cfg: Mapping[str, Any]) -> bool:
    """True when the run opted in to unaccounted client metrics (or accounts nothing).

    Raises ValueError for a mode without a disclosure policy (:func:`policy`)."""
    from fedpriv.modes import name_of

    value = cfg.get(OPT_IN_KEY, False)
    return policy(name_of(cfg)) is None or bool(value)


def allowed_metric_keys(cfg: Mapping[str, Any], kind: str) -> frozenset[str] | None:
    """Metric keys a ``kind`` (``train`` | ``evaluate``) reply may carry; None = anything."""
    if kind not in ("train", "evaluate"):
        raise ValueError(f"kind = {kind!r} is not allowed; expected train | evaluate")
    from fedpriv.modes import name_of

    if sends_unaccounted(cfg):
        return None
    return (policy(name_of(cfg)) or {})[kind]


def filter_metrics(cfg: Mapping[str, Any], kind: str, metrics: Mapping[str, Any]) -> dict:
    """``metrics`` restricted to :func:`allowed_metric_keys` (unchanged with the opt-in)."""
    allowed = allowed_metric_keys(cfg, kind)
    if allowed is None:
        return dict(metrics)
    return {k: v for k, v in metrics.items() if k in allowed}


def unaccounted_channels(cfg: Mapping[str, Any], *, mode: str | None = None) -> list[str]:
    """What summary.json lists under ``privacy.unaccounted`` (empty without the opt-in)."""
    from fedpriv.modes import ModeError, get, name_of

    try:
        declared = get(mode or name_of(cfg))
    except ModeError:
        return []
    if not declared.filters or not bool(cfg.get(OPT_IN_KEY, False)):
        return []
    return list(declared.unaccounted)


# The GP scenarios' explicit opt-in: training users report their cluster and test metrics at
# the end (GP's evaluation protocol), listed in summary.json ``privacy.unaccounted``.
GP_FINAL_EVALUATION = {OPT_IN_KEY: True}


def ifca_privacy_block(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """summary.json ``privacy`` of an IFCA run: no ε, GP's heuristic, unaccounted channels."""
    from fedpriv.accounting.leakage import LEAKAGE_LABEL
    from fedpriv.modes.ifca import MODE

    mode = MODE.name
    return {
        "mode": mode,
        "epsilon": None,
        "heuristic": LEAKAGE_LABEL,
        "unaccounted": unaccounted_channels(cfg, mode=mode),
    }
