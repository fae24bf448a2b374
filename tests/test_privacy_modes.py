"""A privacy mode is one declaration that fails closed."""

from __future__ import annotations

import dataclasses

import pytest
from fedpriv.scenarios.app.privacy_modes import declare
from fedpriv.scenarios.config.feature import Catalog, Feature, PrivacyMode
from fedpriv.scenarios.config.features import CATALOG, FEATURES
from fedpriv.scenarios.config.specs import run_spec

from fedpriv.privacy.accounting.planning import privacy_plan
from fedpriv.privacy.disclosure import allowed_metric_keys, filter_metrics, policy
from fedpriv.privacy.modes import ModeError, get, names, register
from fedpriv.privacy.modes import global_dp as global_dp_module
from fedpriv.privacy.modes.base import PUBLIC, Mode
from fedpriv.privacy.modes.registry import unregister
from fedpriv.privacy.participation import Participation


def _identity(strategy, cfg, rng):
    return strategy


def _with(mode: PrivacyMode) -> Catalog:
    return Catalog([*FEATURES, Feature(name="dummy", description="d", privacy_modes=(mode,))])


DUMMY = Mode(
    name="dummy",
    params=global_dp_module.GlobalDPParams,
    threat_model={"server": "x."},
    epsilon_against={"server": "none"},
    plan=lambda spec, examples=None: {},
    disclosure={"train": PUBLIC, "evaluate": PUBLIC},
)


def test_a_mode_without_a_disclosure_policy_is_refused_at_registration():
    with pytest.raises(ModeError, match="'dummy' declares no disclosure policy"):
        register(dataclasses.replace(DUMMY, disclosure=None))
    with pytest.raises(ModeError, match="train and evaluate"):
        register(dataclasses.replace(DUMMY, disclosure={"train": PUBLIC}))
    assert "dummy" not in names()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"threat_model": {}}, "no threat_model"),
        ({"epsilon_against": {}}, "no epsilon_against"),
        ({"plan": None}, "no planning function"),
        ({"params": dict}, "frozen dataclass"),
        ({"audit": "sometimes"}, "audit"),
        ({"noise_field": "noise_multiplier"}, "noise_field and epsilon_of_z go together"),
        (
            {"noise_field": "sigma", "epsilon_of_z": lambda spec, examples=None: float},
            "noise_field = 'sigma' is not a field of GlobalDPParams",
        ),
    ],
)
def test_an_incomplete_mode_is_refused_at_registration(change, match):
    with pytest.raises(ModeError, match=match):
        register(dataclasses.replace(DUMMY, **change))
    assert "dummy" not in names()


def test_a_flower_side_mode_must_be_the_registered_declaration():
    with pytest.raises(ValueError, match="'dummy' is not a privacy mode"):
        _with(PrivacyMode("dummy", _identity, DUMMY))  # never registered
    copy = dataclasses.replace(get("global-dp"))
    with pytest.raises(ValueError, match="not the registered one"):
        _with(PrivacyMode("global-dp", _identity, copy))
    register(DUMMY)
    try:
        assert _with(declare(DUMMY, _identity)).modes["dummy"].mode is DUMMY
        with pytest.raises(ModeError, match="declared twice"):
            register(dataclasses.replace(DUMMY))
    finally:
        unregister("dummy")
    with pytest.raises(ModeError, match="built in"):
        unregister("global-dp")


def test_every_declared_mode_is_complete_and_modes_are_unique():
    for name, mode in CATALOG.modes.items():
        assert mode.plan is not None and mode.threat_model, name
        assert mode.mode is get(name) and mode.mode.epsilon_against, name
        assert all(s.strip().endswith(".") for s in mode.threat_model.values()), name
        assert CATALOG.privacy_modes[name] is mode.wrapper
    with pytest.raises(ValueError, match="declared by two features"):
        _with(declare("global-dp", _identity))


def test_zonal_threat_model_says_whom_each_runtime_trusts():
    text = CATALOG.modes["zonal"].threat_model["zone aggregator"]
    zone_nodes, in_server = text.split("With zonal-runtime = in-server")
    assert "trusted with its clients' data" in zone_nodes and "no guarantee" not in zone_nodes
    assert "no guarantee against the ServerApp" in in_server
    assert "never one client's update" in CATALOG.modes["zonal"].threat_model["server"]


def test_unknown_modes_fail_closed_in_disclosure_and_planning():
    cfg = {"privacy": "dummy"}
    with pytest.raises(ValueError, match="'dummy' is not a privacy mode.*no disclosure policy"):
        allowed_metric_keys("dummy", "train", opted_in=False)
    with pytest.raises(ValueError, match="'dummy' is not a privacy mode.*no disclosure policy"):
        filter_metrics("dummy", "train", {"train-loss": 0.1}, opted_in=False)
    with pytest.raises(ValueError, match="'dummy' is not a privacy mode.*no disclosure policy"):
        filter_metrics("dummy", "train", {"train-loss": 0.1}, opted_in=True)  # no opt-out either
    # no spec (hence no plan) for an unknown mode: the spec holds the registered mode object
    with pytest.raises(ModeError, match="'dummy' is not a privacy mode; expected one of"):
        run_spec(cfg)
    assert policy("none") is None  # declared: protects nothing, filters nothing
    assert filter_metrics("none", "train", {"x": 1}, opted_in=False) == {"x": 1}
    assert privacy_plan(run_spec({"privacy": "none"}))["epsilon"] == "inf"


@pytest.mark.parametrize(
    "cfg,want",
    [
        ({"num-clients": 10}, (10, 10, 10)),
        ({"num-clients": 10, "clients-per-round": 4}, (10, 4, 4)),
        ({"num-clients": 10, "clients-per-round": 10}, (10, 10, 10)),
        ({"num-clients": 10, "clients-per-round": 4, "num-sampled-clients": 6}, (10, 4, 6)),
        ({"num-clients": 10, "num-sampled-clients": 3}, (10, 10, 3)),
    ],
)
def test_participation_resolves_zero_means_all_once(cfg, want):
    counts = {"num-sampled-clients": 0, "clients-per-round": 0, **cfg}
    part = Participation.from_counts(
        counts["num-clients"], counts["clients-per-round"], counts["num-sampled-clients"], "fixed"
    )
    assert run_spec(cfg).participation == part  # the run spec resolves it the same way
    assert (part.population, part.per_round, part.noise_clients) == want
    assert part.sampler_per_round == (0 if want[1] == want[0] else want[1])


def test_participation_refuses_bad_values_naming_the_key():
    with pytest.raises(ValueError, match="client-sampling"):
        Participation(10, 4, 4, "sometimes")
    with pytest.raises(ValueError, match="clients-per-round"):
        Participation(10, 11, 4)


def test_with_noise_sets_only_its_own_modes_noise_field():
    spec = run_spec({"privacy": "global-dp", "noise-multiplier": 1.0})
    at_z = get("global-dp").with_noise(spec, 2.5)
    assert at_z.params == dataclasses.replace(spec.params, noise_multiplier=2.5)
    assert dataclasses.replace(at_z, params=spec.params) == spec  # nothing else changed
    assert get("global-dp").noise_key == "noise-multiplier"
    assert get("dp-sgd").noise_key == "noise-multiplier" and get("none").noise_key is None
    with pytest.raises(ModeError, match="no noise multiplier"):
        get("metric-dp").with_noise(run_spec({"privacy": "metric-dp"}), 1.0)
    with pytest.raises(ModeError, match="no noise multiplier"):
        get("zonal").with_noise(spec, 1.0)  # a global-dp spec: not zonal's params
