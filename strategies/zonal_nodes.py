"""Zonal aggregation with one Flower SuperNode per zone (SPEC §3.5, HDP Alg. 1).

:class:`ZoneNodeAggregation` is :class:`fedpriv.strategies.zonal.ZonalAggregation` for
``zonal-runtime = zone-nodes``: the federation's SuperNodes are the zones
(:class:`fedpriv.scenarios.nodes.federation.ZoneGrid`), and the zone arithmetic runs in them, not
in the
ServerApp. Each round it

1. runs the super-node elections and simulated failures of HDP §IV-A as before; a zone
   whose elected super-node fails this round gets no message (HDP §V: the zone is down for
   the round), the failure and the re-election are recorded, and the run goes on;
2. lets the stock strategy address the sampled clients (the ZoneGrid shows it the clients),
   groups them by zone and sends every live zone node ONE message: the global arrays, the
   zone's sampled client ids (``zonal-clients``), its level and its super-node;
3. takes each zone's reply ``θ + Δ(i)`` — already clipped, summed over the fixed
   denominator q·W_i and noised at its level inside the node
   (:mod:`fedpriv.scenarios.zonal.zone_node`) — and does the server step ``Σ_i π_i Δ(i)``, adding
   the
   server's noise once when a zone is CDP (:func:`fedpriv.zonal.release.server_step`; in CDP
   the server is trusted with the clipped zone sums);
4. hands ``θ + Δ`` to the stock strategy as one synthetic reply, as the parent does.

Under ``ldp`` and ``hdp`` the ServerApp never holds one client's update: it receives s zone
aggregates per round. A zone node that does not reply (killed, unreachable) is missing from
the sum with its share (fixed denominators: σ and the sensitivity stay), and its super-node is
re-elected next round (reason ``no-reply``). Distributed evaluation goes through the zone
nodes too: one ``evaluate`` message per zone, its clients' example-weighted means back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from logging import WARNING
from typing import Any, Optional

import numpy as np
from fedpriv.strategies.zonal import ZonalAggregation
from flwr.common import (
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
    log,
)
from flwr.server import Grid

from fedpriv import seeds
from fedpriv.zonal import draw_failures
from fedpriv.zonal.release import ZONE_CLIENTS_KEY, ZoneRelease, server_step

ZONE_NODE_TASK = "zone-node"


class ZoneNodeAggregation(ZonalAggregation):
    """HDP with the zones as SuperNodes: the ServerApp receives zone aggregates only."""

    CHECKPOINT_SKIP = ("_node_to_partition", "_grid", "reply_log")

    def __init__(
        self,
        *args: Any,
        reply_log: Optional[Callable[[Optional[Message], Message], None]] = None,
        min_zone_clients: int = 2,
        **kwargs: Any,
    ) -> None:
        """As :class:`ZonalAggregation`; ``reply_log(instruction, reply)``, when given, is
        installed on the ZoneGrid and sees every reply the ServerApp receives.

        ``min_zone_clients``: a zone node refuses a sample of 1 ..
        ``min_zone_clients`` − 1 of its clients, so the server does not ask for one: such a
        zone gets an empty sample (its node releases the zone noise only; the sampled
        clients' updates are left out, recorded as ``undersized_zones``)."""
        super().__init__(*args, **kwargs)
        self.reply_log = reply_log
        self.min_zone_clients = int(min_zone_clients)
        self._grid: Any = None
        self._zone_clients: dict[int, list[int]] = {}

    def _zone_config(self, base: ConfigRecord, zone: int, clients: list[int]) -> ConfigRecord:
        config = ConfigRecord(dict(base))
        config["client-task"] = ZONE_NODE_TASK
        config["zonal-zone"] = int(zone)
        config["zonal-level"] = self.plan.levels[zone]
        sn = self.election.current().get(zone)
        config["zonal-supernode"] = -1 if sn is None else int(sn)
        config[ZONE_CLIENTS_KEY] = [int(p) for p in clients]
        return config

    def _zone_message(self, zone: int, content: RecordDict, message_type: str) -> Message:
        return Message(
            content=content, message_type=message_type, dst_node_id=self._grid.zone_node(zone)
        )

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Elections and failures, then one message per live zone node."""
        if not hasattr(grid, "zone_node"):
            raise ValueError("ZoneNodeAggregation needs a ZoneGrid (one SuperNode per zone)")
        self._grid = grid
        if self.reply_log is not None:
            grid.reply_log = self.reply_log
        self._keys = list(arrays.keys())
        self._global = [np.asarray(a) for a in arrays.to_numpy_ndarrays()]
        events = self.election.step(server_round, unreachable=self._unreachable)
        failed = draw_failures(
            self.election.current(), self.failure_rate, self._failure_rng, self.plan.num_zones
        )
        down = {self.plan.zone_of[p] for p in failed}
        events += self.election.step(server_round, failed=failed)
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        sampled = sorted(int(m.metadata.dst_node_id) for m in messages)  # ids = partitions
        base = messages[0].content[self._config_key] if messages else config
        self._zone_clients = {}
        out, undersized = [], []
        for zone in range(self.plan.num_zones):
            if zone in down:
                continue
            clients = [p for p in sampled if self.plan.zone_of[p] == zone]
            if 0 < len(clients) < self.min_zone_clients:  # the zone node would refuse it
                undersized.append((zone, len(clients)))
                clients = []
            self._zone_clients[zone] = clients
            content = RecordDict(
                {
                    self._array_key: arrays,
                    self._config_key: self._zone_config(base, zone, clients),
                }
            )
            out.append(self._zone_message(zone, content, MessageType.TRAIN))
        self._sent = sorted(p for c in self._zone_clients.values() for p in c)
        self.current = {
            "placement": self.placement,
            "runtime": "zone-nodes",
            "table_i": self.plan.table_i,
            "elections": [e.to_dict() for e in events],
            "failed_supernodes": failed,
            "down_zones": sorted(down),
            "offline": [p for p in sampled if self.plan.zone_of[p] in down],
            "zone_messages": len(out),
            "undersized_zones": [zone for zone, _ in undersized],
        }
        if undersized:
            log(WARNING, "round %s: %s", server_round, self.undersized_text(undersized))
        return out if messages else []

    def undersized_text(self, undersized: list[tuple[int, int]]) -> str:
        """One clause per zone whose sample the zone node would refuse (1 .. min-zone-clients
        - 1 sampled clients): it gets an empty sample, so the round goes on without it."""
        m = self.min_zone_clients
        return "; ".join(
            f"zone {zone}: {n} sampled client{'s' if n > 1 else ''} < min-zone-clients {m}, "
            "zone skipped"
            for zone, n in undersized
        )

    def _release_of(self, zone: int, reply: Message) -> ZoneRelease:
        """The server's view of a zone reply: Δ(i) = reply − θ and its plan's weights."""
        sent = reply.content[self._array_key].to_numpy_ndarrays()
        delta = [
            np.asarray(a, np.float64) - np.asarray(g, np.float64)
            for a, g in zip(sent, self._global)
        ]
        clients = self._zone_clients.get(zone, [])
        w = [self.plan.weights[p] for p in clients]
        level = self.plan.levels[zone]
        return ZoneRelease(
            delta,
            clients,
            float(sum(w)),
            float(sum(x * x for x in w)) if level == "ldp" else 0.0,
            self.plan.sigma_zone(zone) if level == "hdp" else 0.0,
            0.0,
            0,
        )

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """The server step over the zone replies; the stock strategy applies the result."""
        replies = list(replies)
        valid = [m for m in replies if not m.has_error()]
        releases = {
            self._grid.zone_of(m): self._release_of(self._grid.zone_of(m), m) for m in valid
        }
        missing = [z for z in self._zone_clients if z not in releases]
        current = self.election.current()
        self._unreachable = [current[z] for z in missing if current.get(z) is not None]
        self.current["missing_zones"] = missing
        replied = sorted(p for z in releases for p in self._zone_clients[z])
        if not valid:
            self.current.update(self._round_report(server_round, None, []))
            return None, None
        result = server_step(
            self.plan,
            releases,
            template=self._global,
            server_rng=seeds.privacy_stream(
                self.seed, "zonal-server-noise", server_round, reproducible=self.reproducible_noise
            ),
            supernodes=current,
        )
        return self._release(server_round, result, valid, replied)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One evaluate message per zone node: its sampled (or all its) clients evaluate."""
        if self.distributed_eval == "none":
            return []
        self._grid = grid
        base = ConfigRecord({**dict(config), "server-round": int(server_round)})
        out = []
        for zone, members in enumerate(self.plan.members):
            clients = list(members)
            if self.distributed_eval == "sampled":
                clients = [p for p in self._sent if self.plan.zone_of[p] == zone]
            if not clients:
                continue
            content = RecordDict(
                {self._array_key: arrays, self._config_key: self._zone_config(base, zone, clients)}
            )
            out.append(self._zone_message(zone, content, MessageType.EVALUATE))
        return out
