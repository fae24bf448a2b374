"""The simulated nodes' own node config: the scenario describes every simulated node.

In a deployment each node's opt-ins come from its own ``node_config`` (its operator's), and a
scenario's opt-in never reaches it (:data:`fedpriv.privacy.ownership.NODE_SECURE_DEFAULTS`:
false unless the node sets true). In a simulation the researcher plays every party: the
scenario IS the description of every simulated node. fedpriv's simulation runner therefore
gives each simulated SuperNode the node-owned opt-ins of the resolved scenario
(:func:`node_settings`: ``unaccounted-metrics``, ``reproducible-noise`` and the per-node keys,
client-budgets' ``client-epsilon``, as the scenario or the researcher's ``--run-config`` set
them: :data:`fedpriv.privacy.ownership.NODE_HELD_BACK`) in its own ``node_config``, beside Flower's
``partition-id`` / ``num-partitions`` (:func:`use_node_settings`, over flwr 1.42's
``vce_api._register_node_info_stores``). Never through a server message: the message
allow-list is unchanged. A run plan (several cells in one simulation) passes none: each cell's
node-side variant is resolved by the node from the plan, as before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fedpriv.privacy.ownership import NODE_HELD_BACK

__all__ = ["node_settings", "use_node_settings"]


def node_settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The node-owned opt-ins and per-node keys of the resolved server config ``cfg`` for
    every simulated node (none for a run plan)."""
    if cfg.get("run-plan"):
        return {}
    return {key: cfg[key] for key in NODE_HELD_BACK if key in cfg and cfg[key] != "auto"}


def use_node_settings(settings_json: str) -> dict[str, Any]:
    """Add ``settings_json`` (a JSON object) to every simulated node's ``node_config`` in this
    process's simulation engine; the settings added."""
    extra = dict(json.loads(settings_json or "{}"))
    if not extra:
        return {}
    from flwr.server.superlink.fleet.vce import vce_api

    original = vce_api._register_node_info_stores

    def register(nodes_mapping: Any, run: Any, app_dir: str | None = None) -> Any:
        stores = original(nodes_mapping, run, app_dir=app_dir)
        for store in stores.values():
            _add(store, extra)
        return stores

    vce_api._register_node_info_stores = register
    return extra


def _add(store: Any, extra: Mapping[str, Any]) -> None:
    """``extra`` in a node's config and in the contexts already registered for it."""
    store.node_config.update(extra)
    for info in store.run_infos.values():
        info.context.node_config.update(extra)
