"""Virtual clients on worker SuperNodes: the strategy chain sees clients, messages go to workers.

With ``num-workers`` W < ``num-clients`` the simulation has W SuperNodes; each serves the
clients its own ``node_config`` gives it (:func:`fedpriv.scenarios.nodes.packing.worker_clients`,
:mod:`fedpriv.scenarios.nodes.worker`). :class:`VirtualGrid` is the generalised
:class:`fedpriv.scenarios.nodes.federation.PartitionGrid` / ``ZoneGrid`` for them:

- the stock strategy, every DP wrapper, the recorder and the checkpoints see one node id per
  client — the partition id itself, never sent to — as they see one SuperNode per client;
- :meth:`VirtualGrid.send_and_receive` packs the round's messages for the clients of one
  worker into ONE message (:func:`fedpriv.scenarios.nodes.packing.pack`: the global arrays once when
  they are the same for all), and unpacks the worker's reply into one reply per client,
  with that client's node id as sender and its message as ``reply_to``; a worker that
  refuses or fails gives each of its clients that error reply. The replies come back sorted
  by partition, as from ``PartitionGrid``.

Discovery (:func:`discover_federation`) asks each SuperNode once — W queries, not one per
client — for its partition id and the clients it serves, and checks that every client is
served exactly once. Where every node serves one client it is today's ``PartitionGrid``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Optional

from fedpriv.scenarios.config.specs import ServerRun
from fedpriv.scenarios.nodes.federation import (
    QUERY_KEY,
    QUERY_SECONDS_PER_NODE,
    SIMULATION_SETTLE_S,
    ZONE_PULL_INTERVAL_S,
    FederationError,
    PartitionGrid,
    ZoneGrid,
    _all_nodes_start_together,
    discover_partitions,
)
from fedpriv.scenarios.nodes.packing import CLIENTS_KEY, SEP, pack, unpack, unpack_errors
from flwr.common import ConfigRecord, Message, MessageType, RecordDict
from flwr.server import Grid

WORKER_PULL_INTERVAL_S = 0.005  # reply polling of the simulation grid with worker nodes
ZONE_NODE_BASE = 1 << 48  # zone z's virtual node id on zone workers: never a Flower node id

__all__ = [
    "VirtualGrid",
    "ZoneWorkerGrid",
    "discover_federation",
    "exchange_packed",
    "federation_grid",
    "query_clients",
]


class VirtualGrid(PartitionGrid):
    """A ``Grid`` proxy: one node id per virtual client (= its partition), packed messages."""

    def __init__(self, grid: Grid, served: Mapping[int, Iterable[int]]) -> None:
        """``served``: worker node id -> the partitions it serves."""
        self.worker_of = {int(p): int(node) for node, parts in served.items() for p in parts}
        super().__init__(grid, {p: p for p in sorted(self.worker_of)})

    def supernodes(self) -> int:
        """How many SuperNodes the messages go to: the workers."""
        return len(set(self.worker_of.values()))

    def refresh(self, timeout: float = 60.0) -> list[int]:
        """Workers are simulation nodes: none joins later (nothing to re-map)."""
        return []

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: Optional[float] = None
    ) -> list[Message]:
        """Send one packed message per worker; return one reply per client, by partition."""
        messages = list(messages)
        out = exchange_packed(self._grid, messages, self.worker_of, int, timeout)
        self._sent = {m.metadata.message_id: int(m.metadata.dst_node_id) for m in messages}
        return sorted(out, key=lambda m: self.node_to_partition.get(self.node_of(m), -1))


def _groups(
    messages: list[Message], worker_of: Mapping[int, int]
) -> list[tuple[int, str, list[Message]]]:
    """(worker, message type, its messages): one group per worker and type, and a new group
    for a node that gets a second message in the same batch."""
    groups: dict[tuple[int, str, int], list[Message]] = {}
    seen: dict[tuple[int, str], int] = {}
    for m in messages:
        node = int(m.metadata.dst_node_id)
        kind = m.metadata.message_type
        k = seen[(node, kind)] = seen.get((node, kind), -1) + 1
        groups.setdefault((worker_of[node], kind, k), []).append(m)
    return [(w, kind, group) for (w, kind, _), group in groups.items()]


def exchange_packed(
    grid: Grid,
    messages: list[Message],
    worker_of: Mapping[int, int],
    key_of: Callable[[int], int],
    timeout: Optional[float],
) -> list[Message]:
    """Send ``messages`` — those to a virtual node (a key of ``worker_of``) packed, ONE
    message per worker and type, each node's content under ``key_of(node)`` (its partition:
    a client's, or a zone's) — and return the replies, one per virtual node that its worker
    answered (its message's ``reply_to``), with the replies to the other messages."""
    virtual = [m for m in messages if int(m.metadata.dst_node_id) in worker_of]
    direct = [m for m in messages if int(m.metadata.dst_node_id) not in worker_of]
    groups = _groups(virtual, worker_of)
    packed = [
        Message(
            content=pack({key_of(int(m.metadata.dst_node_id)): m.content for m in group}),
            dst_node_id=worker,
            message_type=kind,
            ttl=group[0].metadata.ttl,
            group_id=group[0].metadata.group_id,
        )
        for worker, kind, group in groups
    ]
    replies = list(grid.send_and_receive([*packed, *direct], timeout=timeout))
    by_id = {r.metadata.reply_to_message_id: r for r in replies}
    packed_ids = {p.metadata.message_id for p in packed}
    out = [r for r in replies if r.metadata.reply_to_message_id not in packed_ids]
    for sent, (_, _, group) in zip(packed, groups):
        for m in group:  # the virtual messages' ids: the packed one's @ partition
            pid = f"{sent.metadata.message_id}{SEP}{key_of(int(m.metadata.dst_node_id))}"
            m.metadata.__dict__["_message_id"] = pid
        reply = by_id.get(sent.metadata.message_id)
        if reply is not None:
            out += _unpacked(reply, group, key_of)
    return out


def _unpacked(reply: Message, group: list[Message], key_of: Callable[[int], int]) -> list[Message]:
    """One reply per node of ``group`` from its worker's packed ``reply``."""
    if reply.has_error():
        return [_with_id(Message(reply.error, reply_to=m), reply, key_of, m) for m in group]
    contents = unpack(reply.content)
    errors = unpack_errors(reply.content)
    out = []
    for m in group:
        p = key_of(int(m.metadata.dst_node_id))
        if p in errors:
            code, reason = errors[p]
            from flwr.app import Error

            one = Message(Error(code=code, reason=reason), reply_to=m)
        elif p in contents:
            one = Message(content=contents[p], reply_to=m)
        else:
            continue  # the worker did not answer for it (as a node that does not reply)
        out.append(_with_id(one, reply, key_of, m))
    return out


def _with_id(one: Message, reply: Message, key_of: Callable[[int], int], sent: Message) -> Message:
    one.metadata.__dict__["_message_id"] = (
        f"{reply.metadata.message_id}{SEP}{key_of(int(sent.metadata.dst_node_id))}"
    )
    return one


class ZoneWorkerGrid(ZoneGrid):
    """A :class:`ZoneGrid` whose zones are served by W < s worker SuperNodes (simulation):
    zone z's node id is a virtual one, :data:`ZONE_NODE_BASE` + z, never sent to; the zone
    messages of one worker travel as ONE packed message (:func:`exchange_packed`, keyed by
    zone), and the worker serves each zone as the zone's own node
    (:mod:`fedpriv.scenarios.nodes.worker`): its own Context, ledger and noise; its zones' clients
    train as one cohort (:mod:`fedpriv.clients.cohort`)."""

    def __init__(self, grid: Grid, served: Mapping[int, Iterable[int]], num_clients: int) -> None:
        """``served``: worker node id -> the zones it serves."""
        zones = {int(z): int(node) for node, zs in served.items() for z in zs}
        super().__init__(grid, {ZONE_NODE_BASE + z: z for z in zones}, num_clients)
        self.worker_of = {ZONE_NODE_BASE + z: node for z, node in zones.items()}

    def supernodes(self) -> int:
        """How many SuperNodes the messages go to: the workers."""
        return len(set(self.worker_of.values()))

    def refresh(self, timeout: float = 60.0) -> list[int]:
        """Workers are simulation nodes: none joins later (nothing to re-map)."""
        return []

    def _exchange(self, messages: list[Message], timeout: Optional[float]) -> list[Message]:
        key = self.node_to_zone.__getitem__
        return exchange_packed(self._grid, messages, self.worker_of, key, timeout)


def query_clients(
    grid: Grid, node_ids: list[int], timeout: float
) -> tuple[dict[int, list[int]], dict[int, str]]:
    """Ask ``node_ids`` which partitions they serve: (node -> partitions, node -> error)."""
    content = RecordDict({QUERY_KEY: ConfigRecord({"ask": "partition-id"})})
    messages = [
        Message(content=content, message_type=MessageType.QUERY, dst_node_id=node)
        for node in node_ids
    ]
    served: dict[int, list[int]] = {}
    failed: dict[int, str] = {}
    for reply in grid.send_and_receive(messages, timeout=timeout):
        node = reply.metadata.src_node_id
        if reply.has_error():
            failed[node] = reply.error.reason
            continue
        answer = reply.content[QUERY_KEY]
        clients = answer.get(CLIENTS_KEY, [answer["partition-id"]])
        served[node] = [int(p) for p in clients]
    return served, failed


def _wait_for_nodes(grid: Grid, expected: Optional[int], timeout: float) -> list[int]:
    """The node ids once ``expected`` are connected (None: once their count is stable)."""
    deadline = time.monotonic() + timeout
    if _all_nodes_start_together(grid):
        deadline = min(deadline, time.monotonic() + SIMULATION_SETTLE_S)
    last, stable_since = -1, time.monotonic()
    while True:
        node_ids = sorted(grid.get_node_ids())
        if expected is not None and len(node_ids) >= expected:
            return node_ids
        if expected is None and node_ids and len(node_ids) == last:
            if time.monotonic() - stable_since > 0.5:
                return node_ids
        elif len(node_ids) != last:
            last, stable_since = len(node_ids), time.monotonic()
        if time.monotonic() > deadline:
            return node_ids
        time.sleep(0.1)


def expected_nodes(run: ServerRun) -> Optional[int]:
    """How many SuperNodes the run expects: ``min(num-workers, num-clients)``; None for
    ``num-workers = auto`` outside ``fedpriv run`` (which resolves it): as many as connect."""
    workers = run.record.get("num-workers", "auto")  # the speed feature's own key
    n = run.spec.participation.population
    return None if workers == "auto" else min(int(workers), n)


def discover_federation(grid: Grid, run: ServerRun) -> PartitionGrid:
    """The run's grid over one SuperNode per client (:class:`PartitionGrid`) or over worker
    SuperNodes (:class:`VirtualGrid`), from one query per SuperNode."""
    n = run.spec.participation.population
    expected = expected_nodes(run)
    if not _all_nodes_start_together(grid):  # a deployment: one client per SuperNode
        expected = n
    node_ids = _wait_for_nodes(grid, expected, max(600.0, QUERY_SECONDS_PER_NODE * n))
    if not node_ids or (expected is not None and len(node_ids) != expected):
        raise FederationError(
            f"num-clients = {n} with num-workers = {run.record.get('num-workers', 'auto')} needs "
            f"{expected or 'some'} SuperNodes but {len(node_ids)} connected; run with "
            f"--federation-config 'options.num-supernodes={expected or n}' (or use `fedpriv "
            "run`, which sizes the simulation from the scenario)"
        )
    inner = getattr(grid, "_grid", grid)
    served, failed = query_clients(grid, node_ids, 600.0 + QUERY_SECONDS_PER_NODE * n)
    if failed:
        node, reason = next(iter(failed.items()))
        raise FederationError(f"node {node} failed the query: {reason}")
    parts = sorted(p for clients in served.values() for p in clients)
    if parts != list(range(n)):
        raise FederationError(
            f"the SuperNodes serve partitions {parts[:10]}{'...' if len(parts) > 10 else ''}, "
            f"not each of 0..{n - 1} once (num-clients = {n})"
        )
    from fedpriv.scenarios.app.startup import status  # server side only (the ClientApp never asks)

    status("workers ready", f"{len(node_ids)} SuperNodes answered, serving {n} clients")
    if all(len(clients) == 1 for clients in served.values()):
        return PartitionGrid(grid, {node: clients[0] for node, clients in served.items()})
    if hasattr(inner, "pull_interval"):  # a round is W replies: poll them quickly
        inner.pull_interval = WORKER_PULL_INTERVAL_S
    return VirtualGrid(grid, served)


def federation_grid(grid: Grid, run: ServerRun) -> PartitionGrid:
    """The run's partition-aware grid: a :class:`ZoneGrid` over the zone SuperNodes when the
    run has zone nodes (``zonal-runtime = zone-nodes``), else a :class:`PartitionGrid` over
    one SuperNode per client or a :class:`VirtualGrid` over worker SuperNodes
    (:func:`discover_federation`)."""
    from fedpriv.scenarios.zonal.keys import federation_size, zone_nodes

    if not zone_nodes(run.record):  # the zonal keys' own functions read the run's record
        return discover_federation(grid, run)
    zones = federation_size(run.record)
    simulation = _all_nodes_start_together(grid)
    inner = getattr(grid, "_grid", grid)
    if simulation and hasattr(inner, "pull_interval"):
        # the simulation grid polls for replies every 0.1 s; a zone round is ~10 replies
        # of ~0.2 s of training, so the default poll adds up to half a round
        inner.pull_interval = ZONE_PULL_INTERVAL_S
    workers = zone_workers(run.record)
    if simulation and workers is not None:
        node_ids = _wait_for_nodes(grid, workers, max(600.0, QUERY_SECONDS_PER_NODE * zones))
        if len(node_ids) != zones:  # else the simulation started one SuperNode per zone
            served = _served_zones(grid, node_ids, zones)
            return ZoneWorkerGrid(grid, served, run.spec.participation.population)
    mapping = discover_partitions(grid, zones)
    return ZoneGrid(grid, mapping, run.spec.participation.population)


def zone_workers(record: Mapping) -> Optional[int]:
    """W, the worker SuperNodes that serve the zones in a simulation, from the run's resolved
    ``num-workers`` (``fedpriv run`` resolves ``auto``); None: one SuperNode per zone (W >= the
    zones, ``auto`` outside ``fedpriv run``, a deployment)."""
    from fedpriv.scenarios.zonal.keys import federation_size

    value = record.get("num-workers", "auto")
    if value == "auto" or int(value) >= federation_size(record):
        return None
    return int(value)


def _served_zones(grid: Grid, node_ids: list[int], zones: int) -> dict[int, list[int]]:
    """worker node -> the zones it serves (its query answer), checked: every zone once."""
    served, failed = query_clients(grid, node_ids, 600.0)
    if failed:
        node, reason = next(iter(failed.items()))
        raise FederationError(f"node {node} failed the query: {reason}")
    listed = sorted(z for zs in served.values() for z in zs)
    if listed != list(range(zones)):
        raise FederationError(f"the zone workers serve zones {listed}, not each of 0..{zones - 1}")
    from fedpriv.scenarios.app.startup import status  # server side only

    status("workers ready", f"{len(node_ids)} SuperNodes answered, serving {zones} zones")
    return served
