"""The stock strategy factory builds from a typed StrategySpec (no run config below
scenarios/): each hyper-parameter of the spec reaches the Flower strategy."""

from __future__ import annotations

import dataclasses

import pytest
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.specs import run_spec
from fedpriv.strategies.factory import build_stock_strategy
from flwr.serverapp.strategy import FedAvg, FedAvgM, FedMedian, FedProx, FedYogi
from flwr.serverapp.strategy.fedopt import FedOpt

from fedpriv.spec import StrategySpec

HYPER = dict(
    server_learning_rate=0.7,
    server_momentum=0.3,
    eta=0.02,
    eta_l=0.004,
    beta_1=0.8,
    beta_2=0.95,
    tau=1e-4,
    proximal_mu=0.25,
)


def spec(strategy: str) -> StrategySpec:
    base = run_spec(resolve_run_config({"strategy": strategy})).strategy
    return dataclasses.replace(base, **HYPER)


@pytest.mark.parametrize(
    ("name", "cls"),
    [("fedavg", FedAvg), ("fedavgm", FedAvgM), ("fedmedian", FedMedian), ("fedprox", FedProx),
     ("fedopt", FedOpt), ("fedyogi", FedYogi)],
)  # fmt: skip
def test_each_strategy_is_built_from_its_spec(name, cls):
    built = build_stock_strategy(spec(name))
    assert type(built) is cls
    assert built.fraction_train == 1.0 and built.min_available_nodes == 1  # the grid samples


def test_the_spec_hyper_parameters_reach_the_strategy():
    avgm = build_stock_strategy(spec("fedavgm"))
    assert (avgm.server_learning_rate, avgm.server_momentum) == (0.7, 0.3)
    assert build_stock_strategy(spec("fedprox")).proximal_mu == 0.25
    for name in ("fedopt", "fedyogi"):
        opt = build_stock_strategy(spec(name))
        assert (opt.eta, opt.eta_l, opt.beta_1, opt.beta_2, opt.tau) == (
            0.02, 0.004, 0.8, 0.95, 1e-4
        )  # fmt: skip


def test_the_resolved_config_defaults_reach_the_strategy():
    cfg = resolve_run_config({"strategy": "fedavgm"})
    built = build_stock_strategy(run_spec(cfg).strategy)
    assert built.server_momentum == float(cfg["server-momentum"])
    assert built.server_learning_rate == float(cfg["server-learning-rate"])


def test_an_unknown_strategy_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="'fedsgd'.*fedavg"):
        build_stock_strategy(dataclasses.replace(spec("fedavg"), strategy="fedsgd"))
