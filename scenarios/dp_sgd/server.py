"""The server side of ``privacy = dp-sgd``: :class:`DpSgdClients` (Message API).

A thin wrapper around the stock strategy (declared by :mod:`fedpriv.scenarios.dp_sgd.feature`,
which loads
this module only when a run builds its strategy, so the feature list imports without
Flower). It sets ``client-task = "dp-sgd"`` in the train config, mirrors how many rounds it
asked each client to train (for the summary, not sent), and keeps each client's latest ε
and its own z, C and δ (``OWN_MECHANISM_KEYS``: a deployed node's node config decides them,
not the run config) from its replies; ``round_metrics()`` reports them per node (the
recorder maps them to partitions).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from fedpriv.scenarios.app.task_names import DPSGD_TASK as TASK
from fedpriv.scenarios.app.task_names import EPSILON_KEY, OWN_MECHANISM_KEYS
from fedpriv.strategies.base import StrategyWrapper
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy.strategy import Strategy

EPSILON_LABEL = (
    "example level, add/remove-one example, Poisson-sampled batches as the clients run "
    "them (PLD/RDP): an upper bound"
)


def _reply_metrics(reply: Message) -> dict[str, Any]:
    records = list(reply.content.metric_records.values())
    return dict(records[0]) if records else {}


class DpSgdClients(StrategyWrapper):
    """Ask the sampled clients for DP-SGD training and keep their ε (per node)."""

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy
        self.participations: dict[int, int] = {}
        self.epsilon: dict[int, float] = {}
        self.own: dict[str, dict[int, float]] = {key: {} for key in OWN_MECHANISM_KEYS}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Delegate with ``client-task = dp-sgd``; mirror each client's participation count
        (the clients count their own, in their own state directories)."""
        config = ConfigRecord({**dict(config), "client-task": TASK})
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        for msg in messages:
            node = msg.metadata.dst_node_id
            self.participations[node] = self.participations.get(node, 0) + 1
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Record each replying client's ε, then delegate."""
        replies = list(replies)
        for reply in replies:
            if reply.has_error():
                continue
            metrics = _reply_metrics(reply)
            if EPSILON_KEY in metrics:
                self.epsilon[reply.metadata.src_node_id] = float(metrics[EPSILON_KEY])
            for key, per_node in self.own.items():
                if key in metrics:
                    per_node[reply.metadata.src_node_id] = float(metrics[key])
        return self.strategy.aggregate_train(server_round, replies)

    def round_metrics(self) -> dict[str, Any]:
        """Cumulative ε and participations per client, and each client's own z, C and δ
        (node ids; the recorder maps them)."""
        return {
            **{f"{key}-nodes": dict(per_node) for key, per_node in self.own.items() if per_node},
            "dp-sgd-epsilon-nodes": dict(self.epsilon),
            "dp-sgd-participations-nodes": dict(self.participations),
            "dp-sgd-epsilon-max": max(self.epsilon.values(), default=0.0),
            "dp-sgd-epsilon-bounds": EPSILON_LABEL,
        }
