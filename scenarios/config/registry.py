"""Read-only lookups of the app's catalog (:data:`fedpriv.scenarios.config.features.CATALOG`).

``resolve_run_config(run_config)`` is what ``fedpriv run``, the ServerApp and the tests call:
scenario lookup, defaults layering (key defaults <- scenario defaults <- user values), every
key check and every feature's consistency check. Nothing is registered here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedpriv.scenarios.config.feature import Scenario
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.schema import KeySpec

KEYS: Mapping[str, KeySpec] = CATALOG.keys
SCENARIOS: Mapping[str, Scenario] = CATALOG.scenarios


def get_scenario(name: Any) -> Scenario:
    """The scenario called ``name`` or a one-line
    :class:`~fedpriv.scenarios.config.schema.ConfigError`."""
    return CATALOG.scenario(name)


def resolve_run_config(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved, checked run config (see the module docstring)."""
    return CATALOG.resolve_run_config(run_config)
