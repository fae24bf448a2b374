"""What a client may send in each privacy mode: only what that mode's accounting covers.

Data must not leave a client outside the accounted mechanism. A client's reply is
its model parameters (the accounted mechanism's input or output) plus a MetricRecord; each
privacy mode declares (``Mode.disclosure`` in its module of :mod:`fedpriv.privacy.modes`), per
message kind, the metric keys a reply may carry, and this module filters every reply in
the ClientApp's handlers (``scenarios/app/client_app.py``).

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
    nothing, ``Mode.filters = False``), from the mode's own declaration
    (:mod:`fedpriv.privacy.modes`).

    Fail closed: an unknown mode raises ValueError naming the known modes.
    """
    from fedpriv.privacy.modes import ModeError, get

    try:
        declared = get(mode)
    except ModeError as err:
        raise ValueError(f"{err}: it has no disclosure policy") from None
    return declared.disclosure if declared.filters else None


def reply_keys() -> dict[str, Mapping[str, frozenset[str]]]:
    """Every filtering mode's policy (mode -> kind -> metric keys)."""
    from fedpriv.privacy.modes import get, names

    modes = [get(n) for n in names(selectable=False)]
    return {m.name: m.disclosure for m in modes if m.filters and m.disclosure is not None}


def sends_unaccounted(mode: str, *, opted_in: bool) -> bool:
    """True when a run of ``mode`` sends unaccounted client metrics: it opted in
    (``opted_in``: its ``unaccounted-metrics``, :attr:`fedpriv.spec.RunSpec.unaccounted_metrics`)
    or its mode accounts nothing.

    Raises ValueError for a mode without a disclosure policy (:func:`policy`)."""
    return policy(mode) is None or bool(opted_in)


def allowed_metric_keys(mode: str, kind: str, *, opted_in: bool) -> frozenset[str] | None:
    """Metric keys a ``kind`` (``train`` | ``evaluate``) reply of a ``mode`` client may
    carry; None = anything."""
    if kind not in ("train", "evaluate"):
        raise ValueError(f"kind = {kind!r} is not allowed; expected train | evaluate")
    if sends_unaccounted(mode, opted_in=opted_in):
        return None
    return (policy(mode) or {})[kind]


def filter_metrics(
    mode: str, kind: str, metrics: Mapping[str, Any], *, opted_in: bool
) -> dict[str, Any]:
    """``metrics`` restricted to :func:`allowed_metric_keys` (unchanged with the opt-in)."""
    allowed = allowed_metric_keys(mode, kind, opted_in=opted_in)
    if allowed is None:
        return dict(metrics)
    return {k: v for k, v in metrics.items() if k in allowed}


def unaccounted_channels(mode: str, *, opted_in: bool) -> list[str]:
    """What summary.json lists under ``privacy.unaccounted`` for a run of ``mode`` (empty
    without the opt-in, for a mode that filters nothing, and for an unknown mode)."""
    from fedpriv.privacy.modes import ModeError, get

    try:
        declared = get(mode)
    except ModeError:
        return []
    if not declared.filters or not bool(opted_in):
        return []
    return list(declared.unaccounted)


# The GP scenarios' explicit opt-in: training users report their cluster and test metrics at
# the end (GP's evaluation protocol), listed in summary.json ``privacy.unaccounted``.
GP_FINAL_EVALUATION = {OPT_IN_KEY: True}


def ifca_privacy_block(*, opted_in: bool) -> dict[str, Any]:
    """summary.json ``privacy`` of an IFCA run: no ε, GP's heuristic, unaccounted channels
    (``opted_in``: the run's ``unaccounted-metrics``)."""
    from fedpriv.privacy.accounting.leakage import LEAKAGE_LABEL
    from fedpriv.privacy.modes.ifca import MODE

    mode = MODE.name
    return {
        "mode": mode,
        "epsilon": None,
        "heuristic": LEAKAGE_LABEL,
        "unaccounted": unaccounted_channels(mode, opted_in=opted_in),
    }
