"""One message for the virtual clients of one worker SuperNode, and back (client-safe).

A worker SuperNode of the simulation serves several clients
(:mod:`fedpriv.scenarios.nodes.virtual_grid`
on the server, :mod:`fedpriv.scenarios.nodes.worker` on the node). The round's messages for its
clients
travel as ONE Flower message whose content is

- every record that all of them carry identically (the global model, the shared config),
  once, under its own name;
- every other record once per client, as ``"<name>@<partition>"``;
- the ConfigRecord :data:`PACK_KEY`: ``clients`` (the partitions, in order) and ``shared``
  (the names stored once).

A reply is packed the same way, with the clients whose handler answered an error listed in
``errors`` and their codes and reasons beside. :func:`unpack` gives every client exactly the
records its own message had, so each runs the handler it runs as a SuperNode of its own.

Which clients a worker serves is decided by the worker's own ``node_config``
(:func:`worker_clients`): partition ``p`` belongs to worker ``p mod W``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, RecordDict

PACK_KEY = "fedpriv-packed"
CLIENTS_KEY = "clients"  # a query answer: the partitions a SuperNode serves
SEP = "@"

__all__ = [
    "CLIENTS_KEY",
    "PACK_KEY",
    "is_packed",
    "pack",
    "pack_replies",
    "same_record",
    "unpack",
    "unpack_errors",
    "worker_clients",
]


def worker_clients(worker: int, workers: int, num_clients: int) -> list[int]:
    """The partitions worker ``worker`` of ``workers`` serves: ``{p : p mod W = worker}``
    (round-robin, so a sampled cohort spreads evenly); ``[worker]`` when every client is a
    SuperNode of its own (``workers >= num_clients``)."""
    if workers >= num_clients:
        return [int(worker)]
    return list(range(int(worker), int(num_clients), int(workers)))


def same_record(a: Any, b: Any) -> bool:
    """True when records ``a`` and ``b`` hold the same values (arrays compared byte for byte)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, ArrayRecord):
        if list(a.keys()) != list(b.keys()):
            return False
        return all(
            x.dtype == y.dtype and list(x.shape) == list(y.shape) and x.data == y.data
            for x, y in zip(a.values(), b.values())
        )
    return dict(a) == dict(b)


def pack(contents: Mapping[int, RecordDict], extra: Mapping[str, Any] | None = None) -> RecordDict:
    """The content of one message for the clients ``contents`` (partition -> its content)."""
    parts = sorted(int(p) for p in contents)
    names = list(dict.fromkeys(n for p in parts for n in contents[p].keys()))
    out: dict[str, Any] = {}
    shared = []
    for name in names:
        records = [contents[p].get(name) for p in parts]
        first = records[0]
        if first is not None and all(same_record(first, r) for r in records[1:]):
            out[name] = first
            shared.append(name)
            continue
        for p, record in zip(parts, records):
            if record is not None:
                out[f"{name}{SEP}{p}"] = record
    out[PACK_KEY] = ConfigRecord({"clients": parts, "shared": shared, **(extra or {})})
    return RecordDict(out)


def is_packed(content: RecordDict) -> bool:
    """True for the content of a packed message (:func:`pack`)."""
    return PACK_KEY in content


def unpack(content: RecordDict) -> dict[int, RecordDict]:
    """partition -> the content its own message had (:func:`pack` reversed)."""
    head = content[PACK_KEY]
    parts = [int(p) for p in head.get("clients", [])]
    shared = {str(n) for n in head.get("shared", [])}
    own: dict[int, dict[str, Any]] = {p: {} for p in parts}
    for key, record in content.items():
        if key == PACK_KEY:
            continue
        if key in shared:
            for p in parts:
                own[p][key] = record
            continue
        name, _, tail = key.rpartition(SEP)
        if name and tail.lstrip("-").isdigit() and int(tail) in own:
            own[int(tail)][name] = record
    return {p: RecordDict(own[p]) for p in parts}


def pack_replies(
    contents: Mapping[int, RecordDict], errors: Mapping[int, tuple[int, str]]
) -> RecordDict:
    """A worker's one reply: the clients' reply contents and, for the clients whose handler
    answered an error, its code and reason."""
    failed = sorted(int(p) for p in errors)
    extra = {
        "errors": failed,
        "error-codes": [int(errors[p][0]) for p in failed],
        "error-reasons": [str(errors[p][1]) for p in failed],
    }
    packed = pack(contents, extra) if contents else RecordDict({PACK_KEY: ConfigRecord(extra)})
    return packed


def unpack_errors(content: RecordDict) -> dict[int, tuple[int, str]]:
    """partition -> (code, reason) of the clients a packed reply reports as failed."""
    head = content[PACK_KEY]
    parts: Sequence[int] = [int(p) for p in head.get("errors", [])]
    codes = list(head.get("error-codes", []))
    reasons = list(head.get("error-reasons", []))
    return {p: (int(c), str(r)) for p, c, r in zip(parts, codes, reasons)}
