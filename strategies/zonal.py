"""Zonal super-node aggregation as a Message-API strategy wrapper (SPEC §3.5, HDP Alg. 1).

This is the ``zonal-runtime = in-server`` runtime (one SuperNode per client, the zone
arithmetic in the ServerApp), kept for comparison; the default runtime, one SuperNode per
zone, is :class:`fedpriv.strategies.zonal_nodes.ZoneNodeAggregation`.

:class:`ZonalAggregation` wraps a stock strategy (FedAvg, FedProx, FedAvgM, FedOpt, FedYogi).
Each round it

1. runs the super-node elections of HDP §IV-A (:class:`fedpriv.zonal.SuperNodeElection`):
   initial elections, re-elections of super-nodes that did not answer in the previous
   round, and simulated failures (``supernode-failure-rate``, seeded): a failed super-node
   is offline for the round (its training message is not sent), a new one is elected
   among the zone's online clients, and the round goes on;
2. lets the stock strategy address the sampled clients, then gives every message its own
   config: ``client-task = "zonal"``, the client's zone, the zone's noise level (``ldp``
   tells the client to noise its own clipped update) and the zone's super-node;
3. groups the replies by zone through the partition ids (``PartitionGrid``), and does the
   zone averages, the super-node (HDP) and server (CDP) noise and the server step
   ``Σ_i π_i (Δ(i) + noise_i)`` in :func:`fedpriv.zonal.aggregate_round`;
4. hands the resulting global arrays to the stock strategy as a single synthetic reply
   (weight 1), so the strategy's own server update applies: FedAvg/FedProx/FedOpt keep
   them as they are, FedAvgM/FedYogi take their server-optimizer step towards them.
   Train metrics are the stock strategy's weighted average over the real replies.

The super-node is a role, not a separate process: Flower has no node-to-node messages,
so the zone arithmetic runs in the ServerApp process on behalf of the elected client,
with a Generator per (round, zone) as the super-node's randomness. What a super-node
would see is exactly what :func:`aggregate_round` is given for its zone.

Failures: a client that does not reply is missing from its zone's sum; the fixed
denominators q·W_i keep σ_i and the sensitivity unchanged (the FedAvg identity holds only
when every sampled client replies). A super-node that did not reply is replaced at the
next round (reason ``no-reply``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Optional

import numpy as np
from fedpriv.strategies.array_records import named_record
from fedpriv.strategies.dp_core import inner_count_hidden
from flwr.common import (
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.server import Grid
from flwr.serverapp.strategy.strategy import Strategy

from fedpriv import seeds
from fedpriv.privacy.modes import zonal as zonal_mode
from fedpriv.zonal import (
    SuperNodeElection,
    ZonalPlan,
    ZoneSecAgg,
    aggregate_round,
    apply_update,
    draw_failures,
)

ZONAL_TASK = zonal_mode.MODE.client_task
SEED_TAG = seeds.ZONAL_TAG  # the zonal streams of fedpriv.seeds
DISTRIBUTED_EVAL = ("all", "sampled", "none")


class ZonalAggregation(Strategy):
    """Hierarchical FL with DP noise at client, super-node or server around ``strategy``.

    Parameters
    ----------
    strategy : Strategy
        A stock strategy whose array aggregation is a (weighted) mean.
    plan : ZonalPlan
        Zones, levels, weights, z, C and q (:class:`fedpriv.zonal.ZonalPlan`).
    seed : int
        Seeds the election and failure Generators (each its own stream, so client sampling
        does not depend on the placement), and the noise ones when ``reproducible_noise``.
    reproducible_noise : bool
        The run's ``reproducible-noise``: super-node and server noise from ``seed``'s
        streams (labelled runs) instead of OS entropy (the default).
    failure_rate : float
        Probability that an elected super-node fails in a round, in [0, 1).
    placement : str
        The configured ``noise-placement`` (for the round records).
    distributed_eval : str
        ``all`` (every client evaluates), ``sampled`` (this round's sampled clients) or
        ``none`` (server-side evaluation only).
    epsilon_fn : callable, optional
        ``fn(round) -> dict``: the ε block of the round (see
        :func:`fedpriv.zonal.epsilon_at_aggregator`).
    secure : ZoneSecAgg, optional
        ``zonal-secagg``: each zone's replies are summed through SecAgg among its clients
        (:mod:`fedpriv.zonal.secure_sum`; simulated here on the clients' behalf), HDP noise
        as the clients' shares (stream ``zonal-share-noise``).

    Notes
    -----
    Randomness: the super-node (HDP) and server (CDP) noise come from OS entropy, a fresh
    Generator per (round, zone), unless ``reproducible_noise`` (the run's
    ``reproducible-noise``: then the seeded ``zonal-*-noise`` streams of ``seed``). The
    elections and simulated failures stay seeded from ``seed``: they are not privacy noise
    (who aggregates a zone, not what is released), and seeded they let every placement of a
    comparison see the same super-nodes.

    A checkpoint (``fedpriv.checkpoint``) holds the elections (super-nodes, log, Generator),
    the failure Generator and the last round's unreachable partitions; the node-id map is
    this simulation's (rebuilt every round from the grid), so it is not checkpointed.
    """

    CHECKPOINT_SKIP = ("_node_to_partition",)

    def __init__(
        self,
        strategy: Strategy,
        *,
        plan: ZonalPlan,
        seed: int,
        reproducible_noise: bool = False,
        failure_rate: float = 0.0,
        placement: str = "",
        distributed_eval: str = "all",
        epsilon_fn: Optional[Callable[[int], dict[str, Any]]] = None,
        secure: Optional[ZoneSecAgg] = None,
    ) -> None:
        if distributed_eval not in DISTRIBUTED_EVAL:
            raise ValueError(
                f"distributed_eval = {distributed_eval!r} is not allowed; expected one of "
                + " | ".join(DISTRIBUTED_EVAL)
            )
        if not 0.0 <= float(failure_rate) < 1.0:
            raise ValueError(f"failure_rate = {failure_rate!r} is not allowed; expected [0, 1)")
        self.strategy = strategy
        self.plan = plan
        self.seed = int(seed)
        self.reproducible_noise = bool(reproducible_noise)
        self.failure_rate = float(failure_rate)
        self.placement = placement or ("mixed" if len(set(plan.levels)) > 1 else plan.levels[0])
        self.distributed_eval = distributed_eval
        self.epsilon_fn = epsilon_fn
        self.secure = secure
        self.election = SuperNodeElection(
            plan.members, rng=seeds.stream(self.seed, "zonal-election")
        )
        self._failure_rng = seeds.stream(self.seed, "zonal-failure")
        self._global: list[np.ndarray] = []
        self._keys: list[str] = []
        self._sent: list[int] = []
        self._unreachable: list[int] = []
        self._node_to_partition: dict[int, int] = {}
        self.current: dict[str, Any] = {}

    # --- helpers --------------------------------------------------------------------------

    @property
    def _array_key(self) -> str:
        return getattr(self.strategy, "arrayrecord_key", "arrays")

    @property
    def _config_key(self) -> str:
        return getattr(self.strategy, "configrecord_key", "config")

    @property
    def _weight_key(self) -> str:
        return getattr(self.strategy, "weighted_by_key", "num-examples")

    def _partition(self, node_id: int) -> int:
        return self._node_to_partition[node_id]

    def _zone_message(self, msg: Message, supernodes: dict[int, Optional[int]]) -> Message:
        """A copy of ``msg`` whose config tells the client its zone, level and task."""
        node = msg.metadata.dst_node_id
        part = self._partition(node)
        zone = self.plan.zone_of[part]
        config = ConfigRecord(dict(msg.content[self._config_key]))
        config["client-task"] = ZONAL_TASK
        config["zonal-zone"] = int(zone)
        config["zonal-level"] = self.plan.levels[zone]
        sn = supernodes.get(zone)
        config["zonal-supernode"] = -1 if sn is None else int(sn)
        content = RecordDict(
            {self._array_key: msg.content[self._array_key], self._config_key: config}
        )
        return Message(content=content, message_type=msg.metadata.message_type, dst_node_id=node)

    # --- Strategy API ---------------------------------------------------------------------

    def summary(self) -> None:
        """Log the wrapped strategy's summary."""
        self.strategy.summary()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Elections and failures, then per-zone configs on the stock strategy's messages."""
        self._node_to_partition = dict(getattr(grid, "node_to_partition", {}))
        if not self._node_to_partition:
            raise ValueError("ZonalAggregation needs a PartitionGrid (node_to_partition)")
        self._keys = list(arrays.keys())
        self._global = [np.asarray(a) for a in arrays.to_numpy_ndarrays()]
        events = self.election.step(server_round, unreachable=self._unreachable)
        failed = draw_failures(
            self.election.current(), self.failure_rate, self._failure_rng, self.plan.num_zones
        )
        events += self.election.step(server_round, failed=failed)
        offered = [self._partition(n) for n in grid.get_node_ids()]
        offline = [p for p in offered if p in set(failed)]
        restore = None
        if offline and hasattr(grid, "offer"):
            restore = offered
            grid.offer([p for p in offered if p not in set(failed)])
        try:
            messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        finally:
            if restore is not None:
                grid.offer(restore)
        supernodes = self.election.current()
        out = [self._zone_message(m, supernodes) for m in messages]
        self._sent = sorted(self._partition(m.metadata.dst_node_id) for m in out)
        self.current = {
            "placement": self.placement,
            "table_i": self.plan.table_i,
            "elections": [e.to_dict() for e in events],
            "failed_supernodes": failed,
            "offline": offline,
        }
        return out

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Zone averages, noise and server step; the stock strategy applies the result."""
        valid = [m for m in replies if not m.has_error()]
        replied = {self._partition(m.metadata.src_node_id) for m in valid}
        self._unreachable = [p for p in self._sent if p not in replied]
        if not valid:
            self.current.update(self._round_report(server_round, None, []))
            return None, None
        updates: dict[int, list[np.ndarray]] = {}
        for msg in valid:
            new = msg.content[self._array_key].to_numpy_ndarrays()
            updates[self._partition(msg.metadata.src_node_id)] = [
                np.asarray(a, dtype=np.float64) - np.asarray(g, dtype=np.float64)
                for a, g in zip(new, self._global)
            ]
        seed, rep = self.seed, self.reproducible_noise
        result = aggregate_round(
            self.plan,
            updates,
            template=self._global,
            zone_rng=lambda z: seeds.privacy_stream(
                seed, "zonal-zone-noise", server_round, z, reproducible=rep
            ),
            server_rng=seeds.privacy_stream(
                seed, "zonal-server-noise", server_round, reproducible=rep
            ),
            supernodes=self.election.current(),
            secure=self.secure,
            share_rng=lambda z: seeds.privacy_stream(
                seed, "zonal-share-noise", server_round, z, reproducible=rep
            ),
        )
        return self._release(server_round, result, valid, sorted(replied))

    def _release(
        self, server_round: int, result, valid: list[Message], replied: list[int]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Hand ``θ + Δ`` to the stock strategy (one synthetic reply); record the round."""
        new_global = apply_update(self._global, result.delta)
        target = named_record(self._keys, new_global)
        synthetic = Message(
            content=RecordDict(
                {self._array_key: target, "metrics": MetricRecord({self._weight_key: 1})}
            ),
            message_type=MessageType.TRAIN,
            dst_node_id=0,
        )
        with inner_count_hidden():  # one synthetic reply: not "Received 1 results"
            arrays, _ = self.strategy.aggregate_train(server_round, [synthetic])
        metrics = None
        aggr = getattr(self.strategy, "train_metrics_aggr_fn", None)
        if callable(aggr):
            metrics = aggr([m.content for m in valid], self._weight_key)
        self.current.update(self._round_report(server_round, result, replied))
        return arrays, metrics

    def _round_report(self, server_round: int, result, replied: list[int]) -> dict[str, Any]:
        plan = self.plan
        report: dict[str, Any] = {
            "supernodes": {str(z): p for z, p in self.election.current().items()},
            "replied": replied,
            "unreachable": list(self._unreachable),
            "levels": {str(z): level for z, level in enumerate(plan.levels)},
            "sigma_zone": {
                str(z): plan.sigma_zone(z) if level == "hdp" else 0.0
                for z, level in enumerate(plan.levels)
            },
            "sigma_client": plan.sigma_client if "ldp" in plan.levels else 0.0,
            "sigma_server": plan.sigma_server if "cdp" in plan.levels else 0.0,
        }
        if result is not None:
            report["zones"] = result.zone_dicts()
            report["server_noise_norm"] = result.server_noise_norm
            report["aggregator_noise_multiplier"] = result.aggregator_noise_multiplier
        if self.epsilon_fn is not None:
            report["epsilon"] = self.epsilon_fn(server_round)
        return report

    def round_metrics(self) -> dict[str, Any]:
        """The round's zonal record (collected by the RoundRecorder into rounds.jsonl).

        ``{"zonal": {...}}`` with ``placement``, ``table_i``, ``elections`` (this round's
        events: round, zone, supernode, previous, reason = initial | failed | no-reply |
        vacant), ``failed_supernodes``, ``offline`` (failed and sampled: not sent),
        ``supernodes`` (zone -> partition), ``replied``, ``unreachable``, ``levels`` (zone ->
        none | ldp | hdp | cdp), ``sigma_zone`` (zone -> std added by its super-node: σ_i =
        z·C/(q·W_i) in HDP zones, else 0), ``sigma_client`` (z·C if a zone is LDP),
        ``sigma_server`` (z·C/(q·W) if a zone is CDP), ``zones`` (per zone: partitions
        aggregated, weight sum, σ, noise norm, clipped), ``server_noise_norm``,
        ``aggregator_noise_multiplier`` (realised) and ``epsilon``
        (:func:`fedpriv.zonal.epsilon_at_aggregator`).
        """
        return {"zonal": dict(self.current)}

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Distributed evaluation on all clients, this round's sampled clients, or none."""
        if self.distributed_eval == "none":
            return []
        if self.distributed_eval == "sampled" and hasattr(grid, "offer") and self._sent:
            grid.offer(self._sent)
            try:
                return list(self.strategy.configure_evaluate(server_round, arrays, config, grid))
            finally:
                grid.offer(None)
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> Optional[MetricRecord]:
        """Delegate."""
        return self.strategy.aggregate_evaluate(server_round, list(replies))
