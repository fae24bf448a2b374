"""The base of fedpriv's Message-API wrappers: every step delegates unless overridden."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from flwr.common import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.server import Grid
from flwr.serverapp.strategy.strategy import Strategy


class StrategyWrapper(Strategy):
    """A strategy around ``self.strategy``; subclasses override only the steps they change."""

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy

    def summary(self) -> None:
        """Log the wrapped strategy's summary."""
        self.strategy.summary()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Delegate."""
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Delegate."""
        return self.strategy.aggregate_train(server_round, replies)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Delegate."""
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> Optional[MetricRecord]:
        """Delegate."""
        return self.strategy.aggregate_evaluate(server_round, replies)
