"""The outermost Message-API wrapper of a scenario run: sampling, metrics, round records.

``RoundRecorder`` wraps the privacy-wrapped strategy. Each round it

1. samples the training partitions with the run's seeded Generator and offers exactly
   those nodes to the inner strategy (through
   :class:`fedpriv.scenarios.nodes.federation.PartitionGrid`); a wrapper of the chain with a
   ``sample_round(population)`` method (DP-FTRL's shuffled epochs) chooses them instead, so
   ``sampled`` always names the clients asked;
2. captures the aggregated train and evaluate metrics;
3. collects ``round_metrics()`` from every wrapper in the chain (DP sigma, distance d,
   clipped clients, rejected updates, ...) — a wrapper exposes what it did, the recorder
   writes it.

The round loop (:func:`fedpriv.scenarios.app.engine.run_rounds`) writes ``current`` into the round's
record after the server-side evaluation, the last step of each round.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

import numpy as np
from fedpriv.scenarios.nodes.federation import PartitionGrid, sample_partitions
from fedpriv.strategies.base import StrategyWrapper
from flwr.common import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.server import Grid
from flwr.serverapp.strategy.strategy import Strategy


def wrapper_chain(strategy: Any) -> list[Any]:
    """The strategy and every strategy it wraps (via ``.strategy``), outermost first."""
    chain = []
    while strategy is not None:
        chain.append(strategy)
        strategy = getattr(strategy, "strategy", None)
    return chain


class RoundRecorder(StrategyWrapper):
    """Seeded sampling + per-round metric capture around ``strategy``."""

    def __init__(
        self,
        strategy: Strategy,
        *,
        grid: PartitionGrid,
        num_clients: int,
        clients_per_round: int,
        rng: np.random.Generator,
        sampling: str = "fixed",
        evaluate_sampled_only: bool = False,
    ) -> None:
        self.strategy = strategy
        self.sampling = sampling
        self.evaluate_sampled_only = evaluate_sampled_only
        self.grid = grid
        self.num_clients = num_clients
        self.clients_per_round = clients_per_round
        self.rng = rng
        self.current: dict[str, Any] = {}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Sample this round's partitions and let the inner strategy address them."""
        rejoined = self.grid.refresh()
        sampler = next(
            (w for w in wrapper_chain(self.strategy) if callable(getattr(w, "sample_round", None))),
            None,
        )
        if sampler is not None:  # the wrapper owns the schedule (it draws from its own rng)
            sampled = sorted(int(p) for p in sampler.sample_round(range(self.num_clients)))
        else:
            sampled = sample_partitions(
                self.num_clients, self.clients_per_round, self.rng, self.sampling
            )
        self.current = {"round": server_round, "sampled": sampled}
        if rejoined:
            self.current["rejoined"] = rejoined
        if not sampled:  # Poisson sampling drew nobody: no messages; wrappers learn w_g
            self.current["empty-sample"] = True
            for wrapper in wrapper_chain(self.strategy):
                if callable(getattr(wrapper, "note_global_arrays", None)):
                    wrapper.note_global_arrays(arrays)
            return []
        self.grid.offer(sampled)
        try:
            return list(self.strategy.configure_train(server_round, arrays, config, self.grid))
        finally:
            self.grid.offer(None)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Delegate and keep the aggregated train metrics and wrapper reports."""
        replies = list(replies)
        ok = [m for m in replies if not m.has_error()]
        self.current["replied"] = [p for m in ok for p in self.grid.partitions_of(m)]
        self.current["failed"] = [
            p for m in replies if m.has_error() for p in self.grid.partitions_of(m)
        ]
        arrays, metrics = self.strategy.aggregate_train(server_round, replies)
        self.current["aggregated"] = arrays is not None
        self.current["train"] = dict(metrics) if metrics is not None else {}
        for wrapper in wrapper_chain(self.strategy):
            report = getattr(wrapper, "round_metrics", None)
            if callable(report):
                self.current.update(self._with_partitions(report()))
        return arrays, metrics

    def _with_partitions(self, report: dict) -> dict:
        """Translate node ids in a wrapper report (keys ending in -nodes) to partitions."""
        out = {}
        for key, value in report.items():
            if key.endswith("-nodes") and isinstance(value, dict):
                out[key[: -len("-nodes")]] = {
                    str(self.grid.node_to_partition.get(n, n)): v for n, v in value.items()
                }
            elif key.endswith("-nodes") and isinstance(value, list):
                out[key[: -len("-nodes")]] = [self.grid.node_to_partition.get(n, n) for n in value]
            else:
                out[key] = value
        return out

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Every client (or, with ``evaluate_sampled_only``, the round's sampled clients:
        cross-device scale) evaluates the global model on its test split."""
        sampled = self.current.get("sampled") if self.evaluate_sampled_only else None
        self.grid.offer(sampled)
        try:
            return list(self.strategy.configure_evaluate(server_round, arrays, config, self.grid))
        finally:
            self.grid.offer(None)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> Optional[MetricRecord]:
        """Delegate and keep the weighted distributed metrics."""
        metrics = self.strategy.aggregate_evaluate(server_round, list(replies))
        self.current["distributed"] = dict(metrics) if metrics is not None else {}
        for wrapper in wrapper_chain(self.strategy):
            report = getattr(wrapper, "evaluate_round_metrics", None)
            if callable(report):
                self.current.update(self._with_partitions(report()))
        return metrics
