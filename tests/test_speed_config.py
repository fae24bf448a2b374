"""The run config on the wire (only keys differing from run_config) and the speed keys."""

import pytest
from fedpriv.scenarios.app import wire_config
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.specs import server_run


@pytest.fixture()
def base():
    run_config = {"scenario": "hdp-digits", "num-server-rounds": 3}
    cfg = resolve_run_config(run_config)
    run_config = {k: (run_config.get(k, "auto") if k in run_config else v) for k, v in cfg.items()}
    run_config["learning-rate"] = "auto"  # as pyproject: the scenario sets it
    wire_config.set_base(run_config)
    yield run_config, cfg
    wire_config._BASE.clear()
    wire_config._SEEN.clear()


def test_server_sends_the_delta_and_the_client_rebuilds_the_config(base):
    run_config, cfg = base
    message_cfg = {**cfg, "server-round": 4, "client-task": "zonal", "noise-placement": "ldp"}
    sent = wire_config.wire_config(message_cfg)
    assert set(sent) == {
        "server-round",
        "client-task",
        "noise-placement",
        "learning-rate",
        "config-digest",
    }
    assert len(cfg) > 40  # what used to be sent
    assert wire_config.client_config(sent, run_config) == message_cfg
    assert wire_config.client_config(sent, run_config) == message_cfg  # cached
    added = {**sent, "zonal-zone": 3}  # a strategy adds keys after wire_config
    assert wire_config.client_config(added, run_config) == {**message_cfg, "zonal-zone": 3}


def test_type_changes_are_sent_and_mismatches_raise(base):
    run_config, cfg = base
    sent = wire_config.wire_config({**cfg, "seed": float(cfg["seed"])})
    assert isinstance(sent["seed"], float)  # 0.0 == 0 but not the same value on the wire
    other = wire_config.wire_config({**cfg, "server-round": 1})
    with pytest.raises(RuntimeError, match="config-digest"):
        wire_config.client_config(other, {**run_config, "num-server-rounds": 4})
    wire_config._BASE.clear()
    assert wire_config.wire_config(cfg) == cfg  # no base: the whole config
    assert wire_config.client_config(cfg, {}) == cfg


def test_speed_keys_resolve_and_refuse_mixed_precision_with_dp_sgd():
    from fedpriv.scenarios.config.schema import ConfigError

    cfg = resolve_run_config({"scenario": "hdp-paper"})
    assert (cfg["clients-per-round"], cfg["num-zones"], cfg["num-server-rounds"]) == (100, 10, 200)
    assert (cfg["optimizer"], cfg["learning-rate"], cfg["local-epochs"]) == ("sgd", 0.02, 5)
    gp = resolve_run_config({"scenario": "gp-fig2"})
    assert gp["ifca-sweep"].count(";") == 249 and "num-hypotheses=7" in gp["ifca-sweep"]
    assert cfg["image-size"] == 128 and cfg["op-determinism"] and not cfg["jit-compile"]
    with pytest.raises(ConfigError, match="mixed-precision = True"):
        resolve_run_config({"scenario": "digits", "privacy": "dp-sgd", "mixed-precision": True})
    with pytest.raises(ConfigError, match="image-size = 48"):
        resolve_run_config({"scenario": "synthetic-mri", "image-size": 48})


def test_summary_labels_a_reduced_image_size_as_a_deviation():
    from fedpriv.scenarios.speed.feature import speed_summary

    small = resolve_run_config({"scenario": "synthetic-mri", "image-size": 32})
    assert "deviation from MP" in speed_summary(server_run(small), [])["speed"]["deviation"]
    assert speed_summary(server_run(resolve_run_config({"scenario": "synthetic-mri"})), []) == {}
    digits = resolve_run_config({"scenario": "digits", "image-size": 32, "jit-compile": True})
    assert speed_summary(server_run(digits), []) == {"speed": {"jit-compile": True}}


def test_gp_fig2_from_pyproject_defaults_is_the_250_run_sweep():
    """`fedpriv run --run-config "scenario='gp-fig2'"` resolves pyproject's values + the
    scenario's: ifca-sweep must be "auto" there, or '' hides the scenario's 250 runs."""
    from fedpriv.scenarios.cli.launch import pyproject

    raw = dict(pyproject()["tool"]["flwr"]["app"]["config"])
    assert resolve_run_config({**raw, "scenario": "gp-fig2"})["ifca-sweep"].count(";") == 249
    assert resolve_run_config({**raw, "scenario": "gp-synthetic"})["ifca-sweep"] == ""
