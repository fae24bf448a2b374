"""The six stock Flower strategies (Message API), built by name from a :class:`StrategySpec`.

Settings follow the MP paper where it gives them and are documented where it does not
(SPEC §5):

- ``fedavgm``: MP gives no server learning rate or momentum; defaults here are
  ``server-learning-rate = 1.0``, ``server-momentum = 0.5``.
- ``fedprox``: Flower only forwards ``proximal-mu``; the Keras client adds
  (mu/2)||w - w_g||^2 to its loss (``clients/keras_client.py``).
- ``fedopt``: in Flower 1.23 (both APIs) ``FedOpt`` does not override aggregation; it
  is FedAvg started from its required initial parameters. We keep that reading (the one
  MP ran) and pretrain the initial parameters on the server validation split.
- ``fedyogi``: Flower's FedYogi with ``eta``, ``eta-l``, ``beta-1``, ``beta-2``, ``tau``.

Sampling is done by fedpriv's partition-aware grid (``fedpriv.scenarios.nodes.federation``), so the
stock strategy is built to take every node the grid offers (fractions 1.0, minimum 1).
"""

from __future__ import annotations

from typing import Any

from flwr.serverapp.strategy import FedAvg, FedAvgM, FedMedian, FedProx, FedYogi
from flwr.serverapp.strategy.fedopt import FedOpt
from flwr.serverapp.strategy.strategy import Strategy

from fedpriv.names import STRATEGIES
from fedpriv.spec import StrategySpec

PRETRAINED_STRATEGIES = ("fedavgm", "fedopt", "fedyogi")


def needs_initial_pretraining(strategy: str) -> bool:
    """Strategies whose MP setting starts from server-pretrained initial parameters."""
    return strategy in PRETRAINED_STRATEGIES


def build_stock_strategy(spec: StrategySpec) -> Strategy:
    """Build ``spec.strategy`` with the spec's server-side hyper-parameters."""
    common: dict[str, Any] = dict(
        fraction_train=1.0,
        fraction_evaluate=1.0,
        min_train_nodes=1,
        min_evaluate_nodes=1,
        min_available_nodes=1,
    )
    name = spec.strategy
    if name == "fedavg":
        return FedAvg(**common)
    if name == "fedavgm":
        return FedAvgM(
            **common,
            server_learning_rate=float(spec.server_learning_rate),
            server_momentum=float(spec.server_momentum),
        )
    if name == "fedmedian":
        return FedMedian(**common)
    if name == "fedprox":
        return FedProx(**common, proximal_mu=float(spec.proximal_mu))
    opt = dict(
        eta=float(spec.eta),
        eta_l=float(spec.eta_l),
        beta_1=float(spec.beta_1),
        beta_2=float(spec.beta_2),
        tau=float(spec.tau),
    )
    if name == "fedopt":
        return FedOpt(**common, **opt)
    if name == "fedyogi":
        return FedYogi(**common, **opt)
    raise ValueError(f"strategy {name!r}: expected one of " + " | ".join(STRATEGIES))
