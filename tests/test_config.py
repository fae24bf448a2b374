"""Config resolution and one-line errors (SPEC §7)."""

import pytest
from fedpriv.scenarios.config.registry import KEYS, SCENARIOS, resolve_run_config
from fedpriv.scenarios.config.schema import AUTO, ConfigError, resolve


def test_scenario_defaults_layer_under_user_values():
    cfg = resolve_run_config({"scenario": "synthetic-mri", "local-epochs": 2})
    assert cfg["model"] == "mp-cnn"  # scenario default
    assert cfg["local-epochs"] == 2  # user value wins
    assert cfg["num-server-rounds"] == 20  # MP setting


def test_auto_means_scenario_default():
    cfg = resolve_run_config({"scenario": "digits", "local-epochs": AUTO, "model": AUTO})
    assert cfg["local-epochs"] == SCENARIOS["digits"].defaults["local-epochs"]
    assert cfg["model"] == "digits-cnn"


def test_every_key_has_a_valid_default():
    cfg = resolve(KEYS, {}, {})
    assert set(cfg) == set(KEYS)


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("scenario", "nope", "scenario = 'nope'"),
        ("strategy", "fedsgd", "strategy = 'fedsgd'"),
        ("local-epochs", -1, "local-epochs = -1"),
        ("batch-size", 0, "batch-size = 0"),
        ("learning-rate", float("nan"), "learning-rate"),
        ("seed", 1.5, "seed = 1.5"),
        ("accept-failures", "yes", "accept-failures"),
        ("no-such-key", 1, "no-such-key"),
    ],
)
def test_bad_value_is_one_line_naming_key_and_value(key, value, fragment):
    with pytest.raises(ConfigError) as info:
        resolve_run_config({key: value})
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message
    assert "expected" in message


def test_cross_key_checks():
    with pytest.raises(ConfigError, match="clients-per-round"):
        resolve_run_config({"clients-per-round": 9, "num-clients": 4})
    with pytest.raises(ConfigError, match="data-path"):
        resolve_run_config({"scenario": "alzheimer"})


def test_pyproject_declares_every_key():
    """flwr refuses --run-config keys that pyproject.toml does not declare."""
    from fedpriv.scenarios.cli.main import pyproject

    declared = set(pyproject()["tool"]["flwr"]["app"]["config"])
    assert declared == set(KEYS)
