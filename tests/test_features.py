"""The feature declarations are complete and consistent, and the layers hold."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fedpriv.scenarios.app import client_tasks
from fedpriv.scenarios.cli.launch import pyproject
from fedpriv.scenarios.config.feature import Catalog, Feature
from fedpriv.scenarios.config.features import CATALOG, FEATURES
from fedpriv.scenarios.config.schema import ConfigError

from tests.simulate import ROOT


def test_every_feature_is_a_declaration_with_a_unique_name():
    assert all(isinstance(f, Feature) for f in FEATURES)
    names = [f.name for f in FEATURES]
    assert len(names) == len(set(names))
    assert names[0] == "standard"  # the core keys come first


def test_every_privacy_mode_has_a_wrapper_and_is_an_allowed_value():
    assert "none" in CATALOG.privacy_modes
    for mode, builder in CATALOG.privacy_modes.items():
        assert callable(builder), mode
        assert CATALOG.keys["privacy"].coerce(mode) == mode
    with pytest.raises(ConfigError, match="privacy"):
        CATALOG.keys["privacy"].coerce("no-such-mode")


def test_every_scenario_kind_has_a_runner_and_every_scenario_resolves():
    for scenario in CATALOG.scenarios.values():
        assert scenario.kind in CATALOG.runners, scenario.name
        assert set(scenario.defaults) <= set(CATALOG.keys), scenario.name
        if scenario.defaults.get("dataset") != "alzheimer":  # needs a local data-path
            cfg = CATALOG.resolve_run_config({"scenario": scenario.name})
            assert cfg["scenario"] == scenario.name


def test_every_key_is_in_pyproject_in_the_declared_order():
    """flwr refuses --run-config keys that pyproject.toml does not declare."""
    declared = list(pyproject()["tool"]["flwr"]["app"]["config"])
    assert sorted(declared) == sorted(CATALOG.keys)
    for feature in FEATURES:
        for spec in feature.keys:
            assert pyproject()["tool"]["flwr"]["app"]["config"][spec.name] in (
                spec.default,
                "auto",
            ), spec.name


def test_client_tasks_named_by_features_are_the_client_side_list():
    assert sorted(CATALOG.client_tasks) == sorted(client_tasks.TASKS)
    assert all(callable(task) for task in client_tasks.TASKS.values())


def test_a_feature_declared_twice_is_refused():
    with pytest.raises(ValueError, match="declared by two features"):
        Catalog([*FEATURES, FEATURES[1]])


def test_commands_and_keys_toml():
    assert {"run", "keys", "scenarios", "grid", "report", "attack"} <= set(CATALOG.commands)
    out = subprocess.run(
        [sys.executable, "-m", "fedpriv.scenarios.cli.main", "keys", "--toml"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    lines = [x for x in out.splitlines() if x and not x.startswith("#")]
    assert [x.split(" = ")[0] for x in lines] == list(CATALOG.keys)


PLOTTING = (
    "fedpriv.reporting.report",
    "fedpriv.reporting.plots",
    "fedpriv.reporting.report_plots",
    "fedpriv.reporting.ifca_plots",
)


def test_the_client_app_imports_no_server_cli_report_or_plotting_code():
    """Keras 3 itself imports matplotlib.pyplot when it is installed (keras.src.visualization),
    so the check is on the project's own report and plotting modules."""
    code = (
        "import sys, json; import fedpriv.scenarios.app.client_app; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith("
        f"('fedpriv.scenarios', 'fedpriv.strategies')) or m in {PLOTTING!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
        check=True, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)},
    ).stdout  # fmt: skip
    loaded = json.loads(out.strip().splitlines()[-1])
    # the zone-node task (fedpriv.scenarios.zonal.zone_node) derives the zone's plan from the
    # zonal keys (fedpriv.scenarios.zonal.keys: declarations and plan_from_config, over
    # fedpriv.scenarios.config.schema's key checks) - client-side code, no server app, CLI or report
    # each node resolves its own spec (fedpriv.scenarios.config.node_spec) from the key
    # declarations (the scenarios.<feature>.keys modules, declarations only) - still client-side;
    # fedpriv.scenarios.app.quiet sets the worker's log levels (logging and os only);
    # fedpriv.scenarios.config.specs builds the node's typed RunSpec from its resolved config, and
    # fedpriv.scenarios.config.node_roles reads the node's role, zone level and state folder from
    # its own
    # a worker SuperNode serves its virtual clients (fedpriv.scenarios.nodes.worker) from packed
    # messages
    # (fedpriv.scenarios.nodes.packing): client-side, flwr.app only
    features = (
        "adaptive_clip",
        "attacks",
        "audit",
        "client_budgets",
        "dp",
        "dp_ftrl",
        "dp_sgd",
        "faults",
        "grid",
        "ifca",
        "speed",
        "standard",
        "tracking",
        "zonal",
    )
    expected = {
        "fedpriv.scenarios",
        "fedpriv.scenarios.app",
        "fedpriv.scenarios.config",
        "fedpriv.scenarios.nodes",
        "fedpriv.scenarios.app.client_app",
        "fedpriv.scenarios.app.client_tasks",
        "fedpriv.scenarios.nodes.federation",
        "fedpriv.scenarios.app.quiet",
        "fedpriv.scenarios.app.task_names",
        "fedpriv.scenarios.app.wire_config",
        "fedpriv.scenarios.nodes.packing",
        "fedpriv.scenarios.nodes.worker",
        "fedpriv.scenarios.config.node_roles",
        "fedpriv.scenarios.config.node_spec",
        "fedpriv.scenarios.config.schema",
        "fedpriv.scenarios.config.specs",
        "fedpriv.scenarios.zonal.zone_node",
        # the distributed-dp client (its SecAgg steps and its keys: client-side code)
        "fedpriv.scenarios.distributed_dp",
        "fedpriv.scenarios.distributed_dp.client",
        "fedpriv.scenarios.distributed_dp.keys",
    }
    expected |= {f"fedpriv.scenarios.{name}" for name in features}  # the feature packages (empty)
    expected |= {f"fedpriv.scenarios.{name}.keys" for name in features}  # their key declarations
    assert sorted(loaded) == sorted(expected)
