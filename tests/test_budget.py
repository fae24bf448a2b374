"""A privacy budget (``max-epsilon``), ``fedpriv epsilon --target-epsilon`` and whom a zonal ε
protects against. No simulation here (``tests/test_budget_simulation.py`` runs one)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import run_spec
from fedpriv.strategies.dp_wrappers import ServerSideFixedClippingDP
from fedpriv.strategies.legacy_dp import LegacyServerSideFixedClippingDP
from flwr.app import ArrayRecord
from flwr.server.strategy import FedAvg as LegacyFedAvg
from flwr.serverapp.strategy import FedAvg, FedMedian

from fedpriv.privacy.accounting.budget import REL_TOL, EpsilonBudget, smallest_noise_multiplier
from fedpriv.privacy.accounting.rounds import global_dp_accountant, global_dp_epsilon
from fedpriv.privacy.accounting.target import noise_for_target
from fedpriv.privacy.participation import Participation
from fedpriv.zonal import ZonalPlan, epsilon_at_aggregator
from tests.test_dp_wrappers import client_models, fit_results, global_model, replies

ROOT = Path(__file__).resolve().parent.parent
DELTA = 1e-5


def _eps(multipliers, part: Participation) -> float:
    return float(global_dp_epsilon(multipliers, part, delta=DELTA)["epsilon"])


def _wrapper(part: Participation, max_epsilon, z: float = 1.0, **kw):
    accountant = global_dp_accountant(part, delta=DELTA)
    wrapper = ServerSideFixedClippingDP(
        FedAvg(), noise_multiplier=z, clipping_norm=1.0, num_sampled_clients=part.noise_clients,
        rng=np.random.default_rng(0), accountant=accountant, max_epsilon=max_epsilon, **kw,
    )  # fmt: skip
    wrapper.current_arrays = ArrayRecord(global_model())
    return wrapper


# --- the budget in the wrapper -----------------------------------------------------------------


def test_budget_stops_before_the_round_that_would_pass_it():
    part = Participation(4, 4, 4)
    eps = [_eps([1.0] * k, part) for k in range(1, 6)]
    budget = (eps[2] + eps[3]) / 2  # 3 rounds fit, the 4th does not
    wrapper = _wrapper(part, budget)
    models = client_models([0.5] * 4)
    for r in (1, 2, 3):
        assert wrapper.budget_stop(r) is None
        arrays, _ = wrapper.aggregate_train(r, replies(models))
        assert arrays is not None
    reason = wrapper.budget_stop(4)
    assert reason == f"max-epsilon {budget:g} would be exceeded at round 4 (epsilon {eps[3]:.4g})"
    assert wrapper.accountant.current()["epsilon"] == pytest.approx(eps[2])
    assert wrapper.accountant.current()["epsilon"] <= budget
    assert wrapper.budget_stop(5) == reason  # stays stopped


def test_fewer_replies_than_planned_withhold_the_release():
    """The pre-check plans every client replying (z·n/m = z); 2 of 4 replies charge z/2 —
    more than the budget allows: nothing is released and ε stays where it was."""
    part = Participation(4, 4, 4)
    budget = (_eps([1.0], part) + _eps([1.0, 0.5], part)) / 2
    assert _eps([1.0, 1.0], part) <= budget  # the planned round fits
    wrapper = _wrapper(part, budget, accept_failures=True)
    models = client_models([0.5] * 4)
    assert wrapper.aggregate_train(1, replies(models))[0] is not None
    assert wrapper.budget_stop(2) is None
    assert wrapper.aggregate_train(2, replies(models[:2])) == (None, None)
    assert wrapper.round_metrics()["dp-skipped"].startswith("max-epsilon")
    assert wrapper.round_metrics()["dp-noised"] is False
    assert wrapper.accountant.current()["rounds"] == 1
    assert wrapper.accountant.current()["epsilon"] == pytest.approx(_eps([1.0], part))
    assert wrapper.budget_stop(3) == wrapper.budget_stopped


def test_poisson_round_with_nobody_sampled_is_withheld_past_the_budget():
    """Poisson: every round is charged z (fixed denominator), even an empty sample's
    noise-only release; past the budget that release is withheld too."""
    part = Participation(10, 3, 3, "poisson")
    budget = (_eps([1.0], part) + _eps([1.0, 1.0], part)) / 2
    wrapper = _wrapper(part, budget, poisson=True)
    assert wrapper.aggregate_train(1, [])[0] is not None  # noise only, charged z
    assert wrapper.accountant.current()["rounds"] == 1
    assert wrapper.aggregate_train(2, []) == (None, None)
    assert wrapper.accountant.current()["rounds"] == 1
    assert wrapper.budget_stopped.endswith(f"round 2 (epsilon {_eps([1.0, 1.0], part):.4g})")


def test_legacy_wrapper_withholds_too():
    part = Participation(3, 3, 3)
    budget = (_eps([1.0], part) + _eps([1.0, 1.0], part)) / 2
    accountant = global_dp_accountant(part, delta=DELTA)
    wrapper = LegacyServerSideFixedClippingDP(
        LegacyFedAvg(),
        noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=3,
        rng=np.random.default_rng(0), accountant=accountant, max_epsilon=budget,
    )  # fmt: skip
    wrapper.current_round_params = global_model()
    models = client_models([0.5] * 3)
    assert wrapper.aggregate_fit(1, fit_results(models), [])[0] is not None
    assert wrapper.aggregate_fit(2, fit_results(models), []) == (None, {})
    assert accountant.current()["rounds"] == 1


@pytest.mark.parametrize(
    "kw",
    [
        {"max_epsilon": 0.0},
        {"max_epsilon": -1.0},
        {"max_epsilon": math.inf},
        {"max_epsilon": "3"},
        {"max_epsilon": 1.0, "accountant": None},
    ],
)
def test_bad_max_epsilon_is_refused_in_one_line(kw):
    part = Participation(4, 4, 4)
    accountant = kw.pop("accountant", global_dp_accountant(part, delta=DELTA))
    with pytest.raises(ValueError, match=r"max_epsilon = .* is not allowed; expected") as err:
        ServerSideFixedClippingDP(
            FedAvg(), noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=4,
            accountant=accountant, **kw,
        )  # fmt: skip
    assert "\n" not in str(err.value)


def test_max_epsilon_refused_around_a_median():
    part = Participation(4, 4, 4)
    with pytest.raises(ValueError, match="max_epsilon"):
        ServerSideFixedClippingDP(
            FedMedian(), noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=4,
            accountant=global_dp_accountant(part, delta=DELTA), max_epsilon=1.0,
        )  # fmt: skip


def test_epsilon_if_leaves_the_accountant_unchanged():
    part = Participation(10, 3, 3)
    accountant = global_dp_accountant(part, delta=DELTA).extend([1.0, 1.0])
    event = accountant.event(1.0)
    assert accountant.epsilon_if(event) == pytest.approx(_eps([1.0] * 3, part))
    assert accountant.current()["rounds"] == 2
    assert EpsilonBudget(1e9).check(accountant, event, 3) is None


# --- config ------------------------------------------------------------------------------------


def test_max_epsilon_config():
    cfg = CATALOG.resolve_run_config({"privacy": "global-dp", "max-epsilon": 3.0})
    assert cfg["max-epsilon"] == 3.0
    # DP-SGD: each client's own lifetime budget (it refuses past it, test_lifetime_ledgers)
    dpsgd = CATALOG.resolve_run_config({"privacy": "dp-sgd", "max-epsilon": 3.0})
    assert dpsgd["max-epsilon"] == 3.0
    assert CATALOG.resolve_run_config({"privacy": "metric-dp"})["max-epsilon"] == 0.0


@pytest.mark.parametrize(
    "run_config,allowed",
    [
        ({"privacy": "global-dp", "max-epsilon": -1.0}, "a float >= 0"),
        ({"privacy": "global-dp", "max-epsilon": "x"}, "a float >= 0"),
        ({"privacy": "metric-dp", "max-epsilon": 3.0}, "privacy = metric-dp"),
        ({"privacy": "none", "max-epsilon": 3.0}, "privacy = none"),
        ({"privacy": "none", "max-epsilon": 3.0}, "privacy = none"),
        ({"privacy": "global-dp", "strategy": "fedmedian", "max-epsilon": 3.0}, "fedmedian"),
    ],
)
def test_bad_max_epsilon_config_is_one_line(run_config, allowed):
    with pytest.raises(ConfigError) as err:
        CATALOG.resolve_run_config(run_config)
    text = str(err.value)
    assert "max-epsilon" in text and allowed in text and "\n" not in text


# --- the noise multiplier of a target ε --------------------------------------------------------


def test_bisection_on_a_known_function():
    z, eps = smallest_noise_multiplier(lambda z: 10.0 / z, 2.0)
    assert 5.0 <= z <= 5.0 * (1 + REL_TOL) and eps <= 2.0
    with pytest.raises(ValueError, match="target epsilon"):
        smallest_noise_multiplier(lambda z: 1 / z, 0.0)


@pytest.mark.parametrize(
    "run_config",
    [
        {"privacy": "global-dp", "num-server-rounds": 10},
        {"privacy": "global-dp", "num-clients": 20, "clients-per-round": 5,
         "num-server-rounds": 10},
        {"privacy": "global-dp", "num-clients": 20, "clients-per-round": 5,
         "num-sampled-clients": 4, "client-sampling": "fixed", "num-server-rounds": 5},
    ],
)  # fmt: skip
def test_target_noise_multiplier_is_the_smallest_that_meets_the_target(run_config):
    cfg = CATALOG.resolve_run_config(run_config)
    part = run_spec(cfg).participation
    factor = part.per_round / part.noise_clients
    rounds = int(cfg["num-server-rounds"])

    def eps(z: float) -> float:  # independently: the run's accountant, fed the rounds
        return _eps([z * factor] * rounds, part)

    out = noise_for_target(run_spec(cfg), 2.0)
    z = out["noise_multiplier"]
    assert out["epsilon"] == pytest.approx(eps(z)) and eps(z) <= 2.0
    assert eps(z * (1 - REL_TOL)) > 2.0
    # monotone: a larger target needs less noise
    assert noise_for_target(run_spec(cfg), 4.0)["noise_multiplier"] < z


def test_target_epsilon_for_dp_sgd_and_zonal():
    from fedpriv.privacy import dpsgd

    cfg = CATALOG.resolve_run_config({"privacy": "dp-sgd", "num-server-rounds": 3})
    out = noise_for_target(run_spec(cfg), 3.0, examples_per_client=200)

    def eps(z: float) -> float:
        return dpsgd.client_epsilon(
            num_examples=200, batch_size=int(cfg["batch-size"]),
            local_epochs=int(cfg["local-epochs"]), participations=3, noise_multiplier=z,
            delta=float(cfg["dp-delta"]),
        ).epsilon  # fmt: skip

    assert eps(out["noise_multiplier"]) <= 3.0 < eps(out["noise_multiplier"] * (1 - REL_TOL))
    assert out["key"] == "noise-multiplier"
    zcfg = CATALOG.resolve_run_config({"scenario": "hdp-digits", "num-server-rounds": 4})
    zspec = run_spec(zcfg)
    zout = noise_for_target(zspec, 2.0)
    from fedpriv.privacy.accounting.planning import privacy_plan

    # the spec at the found z (its params' noise field replaced) plans what the config at z does
    at_z = zspec.mode.with_noise(zspec, zout["noise_multiplier"])
    assert at_z.params.noise_multiplier == zout["noise_multiplier"] != zspec.params.noise_multiplier
    plan = privacy_plan(at_z)
    assert plan["epsilon"] == pytest.approx(zout["epsilon"]) and plan["epsilon"] <= 2.0
    by_config = run_spec({**zcfg, "noise-multiplier": zout["noise_multiplier"]})
    assert by_config == at_z and privacy_plan(by_config)["epsilon"] == plan["epsilon"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fedpriv.scenarios.cli.main", "epsilon", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_cli_target_epsilon_prints_one_line():
    proc = _cli("--run-config", "privacy='global-dp' num-server-rounds=5", "--target-epsilon", "3")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    assert out["key"] == "noise-multiplier" and out["epsilon"] <= 3.0
    cfg = CATALOG.resolve_run_config({"privacy": "global-dp", "num-server-rounds": 5})
    assert out["epsilon"] == pytest.approx(
        _eps([out["noise_multiplier"]] * 5, run_spec(cfg).participation)
    )


@pytest.mark.parametrize(
    "run_config,target,words",
    [
        ("privacy='global-dp'", "0", "expected a float > 0"),
        ("privacy='global-dp'", "-2", "expected a float > 0"),
        ("privacy='global-dp'", "abc", "expected a float > 0"),
        ("privacy='metric-dp'", "1", "no epsilon to target"),
        ("privacy='dp-sgd'", "1", "--examples-per-client"),
    ],
)
def test_cli_bad_target_is_one_line(run_config, target, words):
    proc = _cli("--run-config", run_config, "--target-epsilon", target)
    assert proc.returncode == 2
    assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# --- zonal: against whom ε holds ---------------------------------------------------------------


def test_zonal_epsilon_says_against_whom():
    """With zone nodes (the default runtime) LDP and HDP ε hold against the
    ServerApp; the in-server runtime keeps saying that HDP's holds against no one in it."""
    labels, old = {}, {}
    for placement in ("ldp", "hdp", "cdp", "none"):
        plan = ZonalPlan.build(
            num_clients=20, num_zones=4, clients_per_round=8, noise_multiplier=1.0,
            clipping_norm=1.0, placement=placement,
        )  # fmt: skip
        out = epsilon_at_aggregator(
            plan, round_=1, total_rounds=1, clients_per_round=8, delta=DELTA
        )
        labels[placement] = out["epsilon-against"]
        old[placement] = epsilon_at_aggregator(
            plan, round_=1, total_rounds=1, clients_per_round=8, delta=DELTA, runtime="in-server"
        )["epsilon-against"]
    assert labels["hdp"]["hdp"].startswith("the ServerApp")
    assert "none against the zone node" in labels["hdp"]["hdp"]
    assert labels["ldp"]["ldp"].startswith("everyone outside the client's own training step")
    assert "the ServerApp" in labels["ldp"]["ldp"]
    assert "none against the zone aggregator, which runs in the ServerApp" in old["hdp"]["hdp"]
    assert old["ldp"]["ldp"].startswith("everyone")
    assert "none against the server" in labels["cdp"]["cdp"]
    assert list(labels["none"]) == ["none"]
