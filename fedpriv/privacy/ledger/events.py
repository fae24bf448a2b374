"""``dp_accounting`` privacy events as JSON, and a party's lifetime ε as their composition.

Each row of a release ledger (:mod:`fedpriv.privacy.ledger.store`) holds the ``DpEvent`` of
that release, serialised here as ``{"type": <class name>, <field>: <value>, ...}`` with nested
events as nested objects (``dp_accounting``'s events are ``attrs`` classes; only its own event
classes are read back). A party's lifetime ε is then

    ε_lifetime(δ) = ε(compose(e_1, ..., e_k); δ)

over the events it really released, each with the settings (z, q, steps, ...) it had at the
time, by :class:`fedpriv.privacy.accounting.PrivacyAccountant` (PLD and RDP, the smaller valid
bound as the headline). Changing z, the batch size or δ between runs therefore cannot make
earlier releases look cheaper.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

__all__ = ["NOT_A_DP_EVENT", "compose_epsilon", "event_from_json", "event_to_json"]

NOT_A_DP_EVENT = ""  # a release whose cost is not a DP event (GP leakage, a count)


def _to_plain(event: Any) -> Any:
    import attr
    import dp_accounting

    if isinstance(event, dp_accounting.DpEvent):
        out: dict[str, Any] = {"type": type(event).__name__}
        for field in attr.fields(type(event)):
            out[field.name] = _to_plain(getattr(event, field.name))
        return out
    if isinstance(event, (list, tuple)):
        return [_to_plain(e) for e in event]
    if isinstance(event, float) and not math.isfinite(event):
        raise ValueError(f"a privacy event with a non-finite parameter ({event!r})")
    return event


def event_to_json(event: Any) -> str:
    """The JSON text of one ``DpEvent`` (compact, sorted keys: one event, one text)."""
    return json.dumps(_to_plain(event), sort_keys=True, separators=(",", ":"))


def _from_plain(value: Any) -> Any:
    from dp_accounting import dp_event

    if isinstance(value, dict):
        name = value.get("type")
        cls = getattr(dp_event, str(name), None)
        if not (isinstance(cls, type) and issubclass(cls, dp_event.DpEvent)):
            raise ValueError(f"not a dp_accounting event type: {name!r}")
        kwargs = {k: _from_plain(v) for k, v in value.items() if k != "type"}
        return cls(**kwargs)
    if isinstance(value, list):
        return [_from_plain(v) for v in value]
    return value


def event_from_json(text: str) -> Any:
    """The ``DpEvent`` of :func:`event_to_json`'s text."""
    return _from_plain(json.loads(text))


def compose_epsilon(events: Iterable[Any], delta: float, relation: Any = None) -> float:
    """ε at ``delta`` of the composition of ``events`` (0 for none), under ``relation``
    (default: add-or-remove-one, dp_accounting's default).

    Under replace-special (DP-FTRL's trees, ``SingleEpochTreeAggregationDpEvent``; PLD has no
    construction for them) it is dp_accounting's ``RdpAccountant`` of
    ``ComposedDpEvent(events)`` (with PLD too when all are the ``mf`` factorizations'
    ``GaussianDpEvent``: the smaller), the accountant of
    :func:`fedpriv.privacy.ftrl.tree_epsilon`: a tree without noise (z = 0) is ``inf``."""
    from fedpriv.privacy.accounting import NeighborRel, PrivacyAccountant

    if relation == NeighborRel.REPLACE_SPECIAL:
        return _tree_epsilon(list(events), delta)
    accountant = PrivacyAccountant(
        delta=float(delta), relation=relation or NeighborRel.ADD_OR_REMOVE_ONE
    )
    any_event = False
    for event in events:
        accountant.compose(event)
        any_event = True
    if not any_event:
        return 0.0
    return float(accountant.report().epsilon)


def _tree_epsilon(events: list[Any], delta: float) -> float:
    """ε of DP-FTRL's stored events composed under replace-special, 0 for none: the run's own
    accountant (:func:`fedpriv.privacy.ftrl.replace_special_epsilon`)."""
    from fedpriv.privacy.ftrl import replace_special_epsilon

    return replace_special_epsilon(events, delta)
