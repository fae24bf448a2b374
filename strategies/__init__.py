"""Flower strategy adapters: the stock-strategy factory and fedpriv's wrappers."""

if __name__ != "fedpriv.strategies":  # the repository folder imported under its old top-level name
    raise ImportError(
        f"'{__name__}' is now 'fedpriv.strategies': import fedpriv.strategies.… "
        "(fedpriv installs one top-level package, fedpriv; see docs/wrappers.md)"
    )


from fedpriv.strategies.factory import build_stock_strategy, needs_initial_pretraining
from fedpriv.strategies.validating import ValidUpdatesOnly

__all__ = ["build_stock_strategy", "needs_initial_pretraining", "ValidUpdatesOnly"]
