"""The Flower side of a node's own release counter (:mod:`fedpriv.privacy.releases`).

:func:`node_counter` opens the lifetime ledger of a node in its own folder, keyed by its own
identity (``fedpriv.scenarios.config.node_roles.node_ledger``: its ``node_config``, never the
message,
the run id or the Flower node id); :func:`sequence_of` names a release sequence by the node's
own mechanism settings only (the same in every run); :func:`request_digest`
fingerprints a request's arrays and round; :func:`guarded_release` runs a release through the
counter: a fresh release is charged before it is computed and its reply cached, an identical
repeat gets the cached reply (the same arrays bit for bit), anything else the counter does not
allow raises :class:`ReleaseRefused` (the ClientApp turns it into an error reply).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from fedpriv.privacy.releases import ReleaseCounter, Rewind, Ticket, node_dir

__all__ = [
    "ReleaseRefused",
    "guarded_release",
    "node_counter",
    "request_digest",
    "sequence_of",
]


class ReleaseRefused(ValueError):
    """A request the node's own counter does not allow (the reason is one line)."""


def node_counter(context: Context, party: str, folder: Path | None = None) -> ReleaseCounter:
    """The ledger of this node's ``party`` in ``folder`` (the node's own state directory,
    ``fedpriv.scenarios.config.node_roles.node_ledger``; None: the per-node default folder of no
    data
    key), keyed by its own ``partition-id`` (a zone node: its zone id)."""
    if folder is None:
        folder = node_dir("", "")  # $FEDPRIV_STATE_ROOT's default folder, else none
    return ReleaseCounter(folder, party, int(context.node_config["partition-id"]))


def sequence_of(settings: Mapping[str, Any]) -> str:
    """A release sequence: the node's own mechanism settings (a short hash; no run id, so
    every run's releases of that mechanism are one sequence)."""
    text = repr(sorted((str(k), repr(v)) for k, v in settings.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def request_digest(msg: Message, server_round: int) -> str:
    """A fingerprint of the request: its round, its config records (every key and value: a
    replayed message is the same request, another cell's or strategy's is not) and every
    array it carries (names, dtypes, shapes, bytes)."""
    h = hashlib.sha256(str(int(server_round)).encode())
    for name, config in sorted(msg.content.config_records.items()):
        h.update(f"{name}|{sorted((str(k), repr(v)) for k, v in config.items())}".encode())
    for name, record in sorted(msg.content.array_records.items()):
        h.update(name.encode())
        for key, array in record.items():
            value = np.ascontiguousarray(array.numpy())
            h.update(f"{key}|{value.dtype}|{value.shape}".encode())
            h.update(value.tobytes())
    return h.hexdigest()


def to_plain(content: RecordDict) -> dict[str, tuple[str, Any]]:
    """A reply's records as plain Python (arrays as numpy, metrics and configs as dicts)."""
    out: dict[str, tuple[str, Any]] = {}
    for name, record in content.items():
        if isinstance(record, ArrayRecord):
            out[name] = ("arrays", OrderedDict((k, a.numpy()) for k, a in record.items()))
        elif isinstance(record, MetricRecord):
            out[name] = ("metrics", dict(record))
        else:
            out[name] = ("config", dict(record))
    return out


def from_plain(plain: Mapping[str, tuple[str, Any]]) -> RecordDict:
    """The inverse of :func:`to_plain` (same keys, same bytes)."""
    records: dict[str, Any] = {}
    for name, (kind, value) in plain.items():
        if kind == "arrays":
            records[name] = ArrayRecord(
                OrderedDict((k, Array(np.ascontiguousarray(a))) for k, a in value.items())
            )
        elif kind == "metrics":
            records[name] = MetricRecord(value)
        else:
            records[name] = ConfigRecord(value)
    return RecordDict(records)


def guarded_release(
    counter: ReleaseCounter,
    sequence: str,
    server_round: int,
    digest: str,
    produce: Callable[[Ticket], RecordDict],
    *,
    run: str = "",
    cost: float = 1.0,
    budget: float | None = None,
    budget_name: str = "budget",
    max_releases: int | None = None,
    rewind: Rewind = "refuse",
    on_declined: Callable[[Ticket], RecordDict] | None = None,
    event: Any = None,
    epsilon_budget: tuple[float, float] | None = None,
    data: Mapping[str, Any] | None = None,
) -> RecordDict:
    """One release through ``counter``: ``produce(ticket)`` runs only for a fresh, already
    charged release (its reply is cached); an identical repeat returns the cached reply; a
    declined request returns ``on_declined(ticket)`` (IFCA's empty reply) and anything else
    refused raises :class:`ReleaseRefused`. ``run``: the run the request comes from (only the
    in-run rewind rule and ``max_releases`` are per run). ``event``, ``epsilon_budget`` and
    ``data``: the release's ``DpEvent``, the ε budget over the stored events and the node's
    resolved data settings (:meth:`fedpriv.privacy.releases.ReleaseCounter.begin`)."""
    ticket = counter.begin(
        sequence,
        server_round,
        digest,
        run=run,
        cost=cost,
        budget=budget,
        budget_name=budget_name,
        max_releases=max_releases,
        rewind=rewind,
        event=event,
        epsilon_budget=epsilon_budget,
        data=data,
    )
    if ticket.kind == "repeat":
        return from_plain(counter.cached(sequence, server_round, digest))
    if ticket.kind == "declined" and on_declined is not None:
        return on_declined(ticket)
    if not ticket.fresh:
        raise ReleaseRefused(f"{counter.party} node {counter.identity}: {ticket.reason}")
    content = produce(ticket)
    counter.remember(sequence, server_round, digest, to_plain(content))
    return content
