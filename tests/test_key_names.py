"""One key name per idea. ``noise-multiplier``, ``clipping-norm`` and ``dp-delta`` are
shared by every mode; left at ``auto`` each takes the selected mode's value (declared on the
mode's params, :func:`fedpriv.spec.key`); the old per-mode names are refused in one line that
names the new key, by the server's resolution and by a node's own."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.node_spec import node_keys, resolve_node
from fedpriv.scenarios.config.schema import RENAMED, ConfigError

ROOT = Path(__file__).resolve().parents[1]
# the papers' / tutorials' values, written out here (not read from the modes)
EXPECTED = {
    "global-dp": (1.0, 5.0),  # DP-FedAvg scale (the MP scenarios set MP's 0.01 themselves)
    "metric-dp": (0.01, 5.0),  # MP paper
    "dp-sgd": (1.1, 1.0),  # Abadi et al. MNIST tutorial
    "zonal": (0.5, 0.5),  # HDP paper
}


def _server(values: dict) -> dict:
    return dict(CATALOG.resolve_run_config(values))


@pytest.mark.parametrize("resolve", [_server, resolve_node], ids=["server", "node"])
@pytest.mark.parametrize("old", sorted(RENAMED))
def test_an_old_key_name_is_refused_naming_the_new_one(resolve, old):
    with pytest.raises(ConfigError) as err:
        resolve({old: 0.5})
    text = str(err.value)
    assert "\n" not in text and old in text and RENAMED[old] in text


def test_no_old_name_is_declared_or_in_the_app_config():
    assert not set(RENAMED) & set(node_keys())
    app = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert not set(RENAMED) & set(app)
    assert {"noise-multiplier", "clipping-norm", "dp-delta"} <= set(app)


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_auto_takes_the_mode_value(mode):
    """Left at auto (as pyproject.toml ships it), z and C are the mode's, δ 1e-5."""
    extra = {"scenario": "hdp-digits"} if mode == "zonal" else {}
    for resolve in (_server, resolve_node):
        cfg = resolve({"privacy": mode, "noise-multiplier": "auto", "clipping-norm": "auto",
                       **extra})  # fmt: skip
        assert (cfg["noise-multiplier"], cfg["clipping-norm"]) == EXPECTED[mode]
        assert cfg["dp-delta"] == 1e-5


@pytest.mark.parametrize("mode", ["global-dp", "dp-sgd"])
def test_a_set_value_wins_over_the_mode_value(mode):
    cfg = _server({"privacy": mode, "noise-multiplier": 0.7, "clipping-norm": 2.5})
    assert (cfg["noise-multiplier"], cfg["clipping-norm"]) == (0.7, 2.5)


def test_a_bad_shared_value_is_refused_after_the_mode_value():
    with pytest.raises(ConfigError, match="noise-multiplier = -1"):
        _server({"privacy": "dp-sgd", "noise-multiplier": -1})
