"""Partition-aware view of a Flower ``Grid``: who is who, who trains this round.

Flower node ids are random per run, so seeded experiments need the partition id of each
node. At start the ServerApp sends one ``query`` message to every node; each ClientApp
answers with its ``partition-id`` (from ``node_config``). :class:`PartitionGrid` then

- offers the stock strategy only the nodes sampled for the round (a seeded
  ``numpy.random.Generator`` over partition ids, not Flower's global ``random``), and
- returns replies ordered by partition id, so aggregation sums in a fixed order and the
  same seed gives the same floating-point result.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np
from flwr.common import ConfigRecord, Message, MessageType, RecordDict
from flwr.server import Grid

from fedpriv.zonal.release import ZONE_CLIENTS_KEY

QUERY_KEY = "fedpriv-query"


class FederationError(RuntimeError):
    """The federation does not match the scenario (one-line message)."""


SIMULATION_SETTLE_S = 20.0
QUERY_SECONDS_PER_NODE = 0.05


def _all_nodes_start_together(grid: Grid) -> bool:
    """True for the simulation engine's grid, whose SuperNodes all register at start-up."""
    inner = getattr(grid, "_grid", grid)
    return type(inner).__name__ == "InMemoryGrid"


QUERY_SECONDS_PER_NODE = 0.1  # the query round trip grows with the nodes (10,000: ~3 min)


def discover_partitions(grid: Grid, expected: int, timeout: float | None = None) -> dict[int, int]:
    """Map node id -> partition id, waiting up to ``timeout`` s for ``expected`` nodes.

    The default timeout is ``max(600, 0.1 s x expected)``: the simulation engine answers
    the one-query-per-node round in time proportional to the number of nodes, and the first
    replies wait for the ClientApp workers to start (Ray + TensorFlow import: measured over
    120 s for 24 SuperNodes on a busy 2-core machine).
    """
    if timeout is None:
        timeout = max(600.0, QUERY_SECONDS_PER_NODE * expected)
    deadline = time.monotonic() + timeout
    if _all_nodes_start_together(grid):  # simulation: nodes register at once, none join later
        deadline = min(deadline, time.monotonic() + SIMULATION_SETTLE_S)
    while len(node_ids := sorted(grid.get_node_ids())) < expected:
        if time.monotonic() > deadline:
            raise FederationError(
                f"num-clients = {expected} but only {len(node_ids)} nodes connected; "
                f"run with --federation-config 'options.num-supernodes={expected}' "
                f"(or use `fedpriv run`, which sizes the simulation from the scenario)"
            )
        time.sleep(0.5)
    if len(node_ids) != expected:
        raise FederationError(
            f"num-clients = {expected} but {len(node_ids)} nodes connected; "
            f"run with --federation-config 'options.num-supernodes={expected}' "
            f"or --run-config 'num-clients={len(node_ids)}'"
        )
    # one query message per node: allow for large federations (10,000 nodes took > 120 s on
    # 2 busy cores), about 50 ms a message on top of the base timeout
    mapping, failed = query_partitions(grid, node_ids, timeout + QUERY_SECONDS_PER_NODE * expected)
    if failed:
        node, reason = next(iter(failed.items()))
        raise FederationError(f"node {node} failed the query: {reason}")
    if sorted(mapping.values()) != list(range(expected)):
        raise FederationError(f"partition ids {sorted(mapping.values())} are not 0..{expected - 1}")
    from fedpriv.scenarios.app.startup import status  # server side only (the ClientApp never asks)

    status("workers ready", f"{expected} SuperNodes answered")
    return mapping


def query_partitions(
    grid: Grid, node_ids: Sequence[int], timeout: float
) -> tuple[dict[int, int], dict[int, str]]:
    """Ask ``node_ids`` for their partition id: (node -> partition, node -> error reason)."""
    content = RecordDict({QUERY_KEY: ConfigRecord({"ask": "partition-id"})})
    messages = [
        Message(content=content, message_type=MessageType.QUERY, dst_node_id=node)
        for node in node_ids
    ]
    mapping: dict[int, int] = {}
    failed: dict[int, str] = {}
    for reply in grid.send_and_receive(messages, timeout=timeout):
        if reply.has_error():
            failed[reply.metadata.src_node_id] = reply.error.reason
        else:
            mapping[reply.metadata.src_node_id] = int(reply.content[QUERY_KEY]["partition-id"])
    return mapping, failed


def remap_joined(
    grid: Optional[Grid], node_to_key: dict[int, int], key_to_node: dict[int, int], timeout: float
) -> list[int]:
    """Ask the SuperNodes that joined since the start which partition (or zone) they hold;
    the newest node of a known key takes it over. Returns the keys re-mapped."""
    if grid is None:
        return []
    new_nodes = sorted(set(grid.get_node_ids()) - set(node_to_key))
    if not new_nodes:
        return []
    mapping, _ = query_partitions(grid, new_nodes, timeout)
    for node, key in mapping.items():
        if key in key_to_node:
            node_to_key[node] = key
            key_to_node[key] = node
    return sorted(k for n, k in mapping.items() if key_to_node.get(k) == n)


CLIENT_SAMPLING = ("fixed", "poisson")


def sample_partitions(
    num_clients: int, per_round: int, rng: np.random.Generator, sampling: str = "fixed"
) -> list[int]:
    """The partitions that train this round (all of them when per_round is 0 or >= num).

    ``fixed`` (``client-sampling``, Flower's way): ``per_round`` distinct ids, uniformly
    without replacement. ``poisson``: each id independently with probability
    ``q = per_round/num_clients`` (the sample size varies and may be 0) — the sampling for
    which the add/remove-one PLD accountant is exact (``fedpriv.privacy.accounting``).
    """
    if sampling not in CLIENT_SAMPLING:
        raise ValueError(f"sampling = {sampling!r} is not allowed; expected fixed | poisson")
    if per_round <= 0 or per_round >= num_clients:
        return list(range(num_clients))
    if sampling == "poisson":
        keep = rng.random(num_clients) < per_round / num_clients
        return [int(p) for p in np.flatnonzero(keep)]
    return sorted(int(p) for p in rng.choice(num_clients, size=per_round, replace=False))


def supernodes(grid: Any) -> int:
    """How many SuperNodes a run's grid sends to (workers, zones or one per client; 0 for a
    grid that does not say)."""
    count = getattr(grid, "supernodes", None)
    return int(count()) if callable(count) else 0


class PartitionGrid:
    """A ``Grid`` proxy that restricts and orders nodes by partition id."""

    def __init__(self, grid: Grid, node_to_partition: dict[int, int]) -> None:
        self._grid = grid
        self.node_to_partition = dict(node_to_partition)
        self.partition_to_node = {p: n for n, p in self.node_to_partition.items()}
        self._offered: Optional[list[int]] = None
        self.online: set[int] = set(self.partition_to_node)
        self._sent: dict[str, int] = {}  # message id -> destination node, last send

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)

    def refresh(self, timeout: float = 60.0) -> list[int]:
        """Map SuperNodes that joined since the start (a restarted node rejoins with a new
        node id) to their partitions; the newest node of a partition takes it over.
        Returns the partitions that were re-mapped (none in the simulation engine)."""
        return remap_joined(self._grid, self.node_to_partition, self.partition_to_node, timeout)

    def supernodes(self) -> int:
        """How many SuperNodes the messages go to (here one per client)."""
        return len(self.partition_to_node)

    def offer(self, partitions: Optional[Sequence[int]]) -> None:
        """Offer only these partitions to the next ``get_node_ids`` (None = all)."""
        self._offered = None if partitions is None else sorted(partitions)

    def get_node_ids(self) -> Iterable[int]:
        """Node ids of the offered partitions, in partition order."""
        parts = sorted(self.partition_to_node) if self._offered is None else self._offered
        return [self.partition_to_node[p] for p in parts]

    def node_of(self, message: Message) -> int:
        """The node a reply is about: its sender, or — for an error the SuperLink wrote
        on behalf of an unreachable node (sender = the SuperLink) — the node the
        instruction went to."""
        node = message.metadata.src_node_id
        if node in self.node_to_partition:
            return node
        return self._sent.get(message.metadata.reply_to_message_id, node)

    def partition_of(self, message: Message) -> int:
        """Partition id of the node a reply is about (see :meth:`node_of`)."""
        return self.node_to_partition[self.node_of(message)]

    def partitions_of(self, message: Message) -> list[int]:
        """The client partitions a reply speaks for: here its node's one partition."""
        return [self.partition_of(message)]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: Optional[float] = None
    ) -> list[Message]:
        """Send, then return replies sorted by partition id; remember where each went."""
        messages = list(messages)
        replies = list(self._grid.send_and_receive(messages, timeout=timeout))
        self._sent = {m.metadata.message_id: m.metadata.dst_node_id for m in messages}
        return sorted(replies, key=lambda m: self.node_to_partition.get(self.node_of(m), -1))


ZONE_PULL_INTERVAL_S = 0.005  # reply polling of the simulation grid with zone nodes


class ZoneGrid(PartitionGrid):
    """The clients as the strategy chain sees them, the zone SuperNodes as messages go.

    With ``zonal-runtime = zone-nodes`` the federation has one SuperNode per zone (its
    ``partition-id`` is the zone id). Sampling and the stock strategy still address the
    ``num_clients`` clients: their "node ids" here are the partition ids themselves, never
    sent to. The zonal wrapper turns them into one message per zone node (:meth:`zone_node`);
    :meth:`send_and_receive` sends those to the real grid and remembers which clients each
    message covered (its ``zonal-clients``), so a zone reply is recorded for its clients.
    """

    def __init__(
        self,
        grid: Grid,
        node_to_zone: dict[int, int],
        num_clients: int,
        reply_log: Optional[Callable[[Message, Message], None]] = None,
    ) -> None:
        super().__init__(grid, {p: p for p in range(int(num_clients))})
        self.node_to_zone = dict(node_to_zone)
        self.zone_to_node = {z: n for n, z in self.node_to_zone.items()}
        self._covers: dict[str, list[int]] = {}
        self.reply_log = reply_log  # (instruction, reply) of every reply the ServerApp gets

    def supernodes(self) -> int:
        """How many SuperNodes the messages go to: one per zone."""
        return len(self.zone_to_node)

    def zone_node(self, zone: int) -> int:
        """The SuperNode of ``zone``."""
        return self.zone_to_node[int(zone)]

    def refresh(self, timeout: float = 60.0) -> list[int]:
        """Map zone SuperNodes that (re)joined since the start; returns the zones re-mapped."""
        return remap_joined(self._grid, self.node_to_zone, self.zone_to_node, timeout)

    def zone_of(self, message: Message) -> int:
        """The zone a reply is about (its sender, or where the instruction went)."""
        node = message.metadata.src_node_id
        if node not in self.node_to_zone:
            node = self._sent.get(message.metadata.reply_to_message_id, node)
        return self.node_to_zone[node]

    def partition_of(self, message: Message) -> int:
        """Not defined for a zone reply (it speaks for several clients): :meth:`partitions_of`."""
        raise TypeError("a zone reply covers several clients: use partitions_of")

    def partitions_of(self, message: Message) -> list[int]:
        """The clients of the message a reply answers (its ``zonal-clients``)."""
        return list(self._covers.get(message.metadata.reply_to_message_id, []))

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: Optional[float] = None
    ) -> list[Message]:
        """Send the zone messages; return the replies sorted by zone."""
        messages = list(messages)
        replies = self._exchange(messages, timeout)
        self._sent = {m.metadata.message_id: m.metadata.dst_node_id for m in messages}
        if self.reply_log is not None:
            by_id = {m.metadata.message_id: m for m in messages}
            for reply in replies:
                self.reply_log(by_id.get(reply.metadata.reply_to_message_id), reply)
        self._covers = {
            m.metadata.message_id: [int(p) for p in m.content["config"].get(ZONE_CLIENTS_KEY, [])]
            for m in messages
            if "config" in m.content
        }
        return sorted(replies, key=lambda m: self.node_to_zone.get(self._node(m), -1))

    def _exchange(self, messages: list[Message], timeout: Optional[float]) -> list[Message]:
        """The replies of the zone SuperNodes to ``messages`` (one message per zone node)."""
        return list(self._grid.send_and_receive(messages, timeout=timeout))

    def _node(self, message: Message) -> int:
        node = message.metadata.src_node_id
        return self._sent.get(message.metadata.reply_to_message_id, node)


def save_replies(folder: str | Path) -> Callable[[Optional[Message], Message], None]:
    """A :class:`ZoneGrid` reply log that writes every reply the ServerApp receives to
    ``folder/NNNNNN-<type>-node<id>.npz``: its arrays (``reply-<key>``), the instruction's
    arrays (``sent-<key>``) and a JSON header (``meta``: message type, sender, the
    instruction's config, the reply's metrics, error). Key ``zonal-save-replies``: an
    audit trail of what left the zone nodes."""
    import json

    root = Path(folder)
    count = [0]

    def arrays(message: Optional[Message], prefix: str) -> dict[str, np.ndarray]:
        if message is None or message.has_error():
            return {}
        return {
            f"{prefix}-{k}": np.asarray(a.numpy())
            for record in message.content.array_records.values()
            for k, a in record.items()
        }

    def log(sent: Optional[Message], reply: Message) -> None:
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o700)  # the operator's only (docs/privacy.md)
        config = {} if sent is None else dict(sent.content.get("config", {}))
        meta = {
            "type": reply.metadata.message_type,
            "src": int(reply.metadata.src_node_id),
            "config": {k: v for k, v in config.items() if not isinstance(v, bytes)},
            "metrics": {}
            if reply.has_error()
            else {k: v for r in reply.content.metric_records.values() for k, v in r.items()},
            "error": reply.error.reason if reply.has_error() else "",
        }
        name = f"{count[0]:06d}-{reply.metadata.message_type}-node{reply.metadata.src_node_id}"
        count[0] += 1
        np.savez(
            root / f"{name}.npz",
            meta=json.dumps(meta),
            **arrays(sent, "sent"),
            **arrays(reply, "reply"),
        )

    return log
