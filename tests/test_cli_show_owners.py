"""``fedpriv show``: which party owns each key, and the value each simulated node will use.

The per-node value is checked against the node's own resolution
(:func:`fedpriv.scenarios.config.node_spec.node_spec`, what the ClientApp runs) of what the
simulation gives a node: the run config and the node config of
:func:`fedpriv.scenarios.cli.simulated_nodes.node_settings`.
"""

from __future__ import annotations

import json

import pytest
from fedpriv.scenarios.cli.launch import app_config
from fedpriv.scenarios.cli.simulated_nodes import node_settings
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.node_spec import node_spec

from fedpriv.zonal import zone_levels
from tests.test_cli_show import _cli, _section


def rows(out: str) -> dict[str, str]:
    section = _section(out, "who owns each key")
    return {line.split()[0]: line for line in section[1:-1]}


def owners_json(*argv: str) -> dict[str, dict]:
    status, out, err = _cli("show", *argv, "--json")
    assert status == 0, err
    return json.loads(out)["keys"]


def simulated_node(overrides: dict, partition: int = 0):
    """What a simulated node of this run resolves for itself (the ClientApp's code)."""
    cfg = CATALOG.resolve_run_config(app_config(overrides))
    node_config = {"partition-id": partition, **node_settings(cfg)}
    return node_spec(1, app_config(overrides), node_config).base


def test_gp_synthetic_says_unaccounted_metrics_is_every_nodes_and_the_nodes_use_true():
    status, out, err = _cli("show", "gp-synthetic")
    assert status == 0, err
    row = rows(out)["unaccounted-metrics"]
    assert row.split()[1:3] == ["every", "node"]
    assert "True (scenario)" in row and row.endswith("True (node config)")
    assert simulated_node({"scenario": "gp-synthetic"})["unaccounted-metrics"] is True
    keys = owners_json("gp-synthetic")
    assert keys["unaccounted-metrics"]["node_value"] is True
    assert keys["unaccounted-metrics"]["node_source"] == "node config"
    # without its node config a node would not opt in: the scenario alone does not reach it
    bare = node_spec(1, app_config({"scenario": "gp-synthetic"}), {"partition-id": 0}).base
    assert bare["unaccounted-metrics"] is False
    # IFCA's own keys are its users'
    assert keys["ifca-noise-multiplier"]["owner"] == "IFCA users"
    assert keys["validation-query-budget"]["owner"] == "IFCA users"


def test_a_run_config_override_changes_the_value_each_node_uses():
    items = ("gp-synthetic", "-c", "unaccounted-metrics=false validation-query-budget=7")
    keys = owners_json(*items)
    assert keys["unaccounted-metrics"]["value"] is False
    assert keys["unaccounted-metrics"]["source"] == "run config"
    assert keys["unaccounted-metrics"]["node_value"] is False
    assert keys["validation-query-budget"]["node_value"] == 7
    node = simulated_node({"scenario": "gp-synthetic", "unaccounted-metrics": False,
                           "validation-query-budget": 7})  # fmt: skip
    assert node["unaccounted-metrics"] is False and node["validation-query-budget"] == 7
    row = rows(_cli("show", *items)[1])["unaccounted-metrics"]
    assert row.endswith("False (node config)")


def test_a_server_owned_key_says_server():
    keys = owners_json("gp-synthetic")
    for key in ("learning-rate", "num-server-rounds", "output-dir", "strategy"):
        assert keys[key]["owner"] == "server" and "node_value" not in keys[key]
    status, out, _ = _cli("show", "gp-synthetic")
    assert "learning-rate" not in rows(out)
    servers = sum(1 for k in keys.values() if k["owner"] == "server")
    assert f"the other {servers} keys: the server's" in out
    cfg = CATALOG.resolve_run_config(app_config({"scenario": "gp-synthetic"}))
    assert set(keys) == set(cfg) and all(keys[k]["value"] == cfg[k] for k in ("seed", "model"))


def test_dp_sgd_clients_own_their_mechanism_and_their_max_epsilon():
    items = ("digits", "-c", "privacy='dp-sgd' noise-multiplier=2.0 max-epsilon=8.0")
    keys = owners_json(*items)
    for key in ("noise-multiplier", "clipping-norm", "dp-delta", "batch-size", "max-epsilon"):
        assert keys[key]["owner"] == "dp-sgd clients", key
    assert keys["noise-multiplier"]["node_value"] == 2.0
    assert keys["max-epsilon"]["node_value"] == 8.0
    assert keys["learning-rate"]["owner"] == "server"  # a message may set it
    plain = owners_json("digits")  # global trust: only the opt-ins are the nodes'
    assert {k for k, v in plain.items() if v["owner"] != "server"} == {
        "unaccounted-metrics",
        "reproducible-noise",
    }


@pytest.mark.parametrize("hdp_fraction", [0.3, 0.5])
def test_zone_nodes_of_noising_zones_own_the_zonal_keys(hdp_fraction):
    """A mixed placement: only the zone nodes of LDP and HDP zones are server-distrusting; the
    count is the plan's (:func:`fedpriv.zonal.zone_levels`)."""
    items = f"noise-placement='mixed' hdp-fraction={hdp_fraction} ldp-fraction=0.2"
    keys = owners_json("hdp-digits", "-c", items)
    levels = zone_levels(10, "mixed", hdp_fraction=hdp_fraction, ldp_fraction=0.2)
    noising = sum(level in ("ldp", "hdp") for level in levels)
    assert 0 < noising < 10
    assert keys["noise-placement"]["owner"] == f"zone nodes ({noising} of 10)"
    assert keys["min-zone-clients"]["owner"].startswith("zone nodes")
