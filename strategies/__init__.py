"""Flower strategy adapters: the stock-strategy factory and fedpriv's wrappers."""

from strategies.factory import build_stock_strategy, needs_initial_pretraining
from strategies.validating import ValidUpdatesOnly

__all__ = ["build_stock_strategy", "needs_initial_pretraining", "ValidUpdatesOnly"]
