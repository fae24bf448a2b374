"""A node's role and zone level, read from its OWN config.

These read a node's own run config (``context.run_config`` overlaid with its
``node_config``), keys possibly still ``"auto"`` (then the value is not decided by the node):
the node-side resolution is the Flower app's job, so they live here, next to
:mod:`fedpriv.scenarios.config.node_spec` (their caller), not below ``scenarios/``. The allow-list
they
serve and the refusal line are declared in :mod:`fedpriv.privacy.ownership`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedpriv.privacy.modes import ModeError, get, name_of
from fedpriv.privacy.modes import ifca as ifca_mode
from fedpriv.privacy.modes import zonal as zonal_mode
from fedpriv.privacy.ownership import AUTO, ZONE_NODE
from fedpriv.privacy.releases import data_key, node_dir
from fedpriv.zonal import assign_zones, zone_levels

if TYPE_CHECKING:  # the base install (fedpriv epsilon) has no Flower
    from flwr.app import Context

__all__ = [
    "client_mode",
    "node_identity",
    "ledger_folder",
    "zonal_level",
    "zone_node_level",
]

FIXED_LEVELS = ("none", "ldp", "hdp", "cdp")  # a placement that is one level for every zone


def _set(own: Mapping[str, Any], key: str) -> bool:
    return key in own and own[key] != AUTO


def _mixed_levels(own: Mapping[str, Any]) -> list[str]:
    """The zone levels of a ``mixed`` placement (HDP paper §III) from the node's own keys."""
    return zone_levels(
        int(own["num-zones"]),
        "mixed",
        hdp_fraction=float(own.get("hdp-fraction", 0.0)),
        ldp_fraction=float(own.get("ldp-fraction", 0.0)),
    )


def zonal_level(own: Mapping[str, Any], partition: int) -> str | None:
    """The noise level of this client's zone from its own config (None: not decided by it)."""
    placement = own.get("noise-placement")
    if placement in FIXED_LEVELS:
        return str(placement)
    if placement != "mixed" or not all(_set(own, k) for k in ("num-clients", "num-zones")):
        return None
    zones = int(own["num-zones"])
    try:
        zone_of = assign_zones(
            int(own["num-clients"]),
            zones,
            method=str(own.get("zone-assignment", "blocks")),
            zone_map=str(own.get("zone-map", "")) or None,
        )
        return _mixed_levels(own)[zone_of[partition]]
    except (ValueError, IndexError):
        return None


def zone_node_level(own: Mapping[str, Any], zone: int) -> str | None:
    """The level of zone ``zone`` from a zone node's own config (None: not decided by it)."""
    placement = own.get("noise-placement")
    if placement in FIXED_LEVELS:
        return str(placement)
    if placement != "mixed" or not _set(own, "num-zones"):
        return None
    try:
        return _mixed_levels(own)[int(zone)]
    except (ValueError, IndexError):
        return None


def _mode_or_none(name: str) -> Any:
    try:
        return get(name)
    except ModeError:
        return None


def client_mode(own: Mapping[str, Any], partition: int, message_task: str = "") -> str | None:
    """The client's server-distrusting role from its OWN config (None: it trusts the server).

    A mode whose ``client`` party owns keys and has no zones (DP-SGD): its name; the zonal
    mode: ``zonal`` in an LDP zone, ``zone-node`` for a zone SuperNode of an LDP or HDP
    zone; IFCA: an own ν > 0 or an IFCA message (``message_task``: GP's untrusted server).
    """
    mode = _mode_or_none(name_of({**own, "client-task": ""}))
    zonal = mode is zonal_mode.MODE
    if mode is not None and mode.party_keys("client") and not zonal and mode.selectable:
        return mode.name
    zone_node = message_task == ZONE_NODE or own.get("zonal-runtime") == "zone-nodes"
    if zonal and zone_node:
        return ZONE_NODE if zone_node_level(own, partition) in ("ldp", "hdp") else None
    if zonal and zonal_level(own, partition) == "ldp":
        return mode.name
    nu = own.get("ifca-noise-multiplier", AUTO)
    if (nu != AUTO and float(nu) > 0) or message_task == ifca_mode.MODE.client_task:
        return ifca_mode.MODE.name
    return None


DATA_KEYS = (
    "dataset",
    "partition",
    "num-clients",
    "seed",
    "data-path",
    "data-format",
    "dirichlet-alpha",
    "image-size",
)  # fmt: skip  (fedpriv.spec.DataSpec's keys)


def node_identity(context: Context) -> int:
    """The node's identity: its ``node_config``'s ``partition-id`` (a zone node: its zone id;
    a virtual client of a worker SuperNode: its own Context's). Never ``context.node_id``
    or ``context.run_id``."""
    return int(context.node_config["partition-id"])


def ledger_folder(named: str, own: Mapping[str, Any] | None) -> Path:
    """``named`` (the node's own ``client-state-dir``), else the per-node default folder of
    the data settings in ``own`` (:func:`fedpriv.privacy.releases.node_dir`; the caller passes
    the node's RESOLVED settings: :func:`fedpriv.scenarios.config.node_spec.node_ledger`)."""
    own = own or {}
    return node_dir(named, data_key({k: own[k] for k in DATA_KEYS if k in own}))


def own_max_epsilon(context: Context) -> float | None:
    """The node's own lifetime ``max-epsilon`` (its node config, else its run config; 0,
    unset or ``auto``: none). Never the message's."""
    for source in (context.node_config, context.run_config):
        value = source.get("max-epsilon")
        if value not in (None, "", "auto"):
            return float(value) if float(value) > 0 else None
    return None
