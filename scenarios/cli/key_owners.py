"""Which party owns each run-config key, and the value each simulated node will use.

``fedpriv show`` answers it from the key declarations, never from a list of its own:

* **every node**: the opt-ins of :data:`fedpriv.privacy.ownership.NODE_SECURE_DEFAULTS`
  (``unaccounted-metrics``, ``reproducible-noise``): every node resolves them itself, false
  unless its own config sets true;
* **a node role**: the keys a server-distrusting role owns (each mode's ``owned_keys``,
  :func:`fedpriv.privacy.ownership.owned_keys`: DP-SGD's z, C, δ, B and E, a zone node's
  zonal keys, IFCA's ν and budgets, client budgets' ε) and the limits such a node reads from
  its own config only (:data:`NODE_READ`: a DP-SGD client's ``max-epsilon``,
  :func:`fedpriv.scenarios.config.node_roles.own_max_epsilon`; a zone node's ``max-epsilon``,
  ``min-zone-clients`` and rounds, :func:`fedpriv.scenarios.zonal.zone_node.own_value`), for
  the roles the run's nodes play (:func:`node_roles`, from the resolved config by
  :func:`fedpriv.scenarios.config.node_roles.client_mode`, the code a node runs);
* **server**: every other key. A node still checks that a message's privacy keys equal its own
  (:mod:`fedpriv.scenarios.config.node_spec`), but it is the server's config that sets them.

For a node-owned key, the value each SIMULATED node uses is its own resolution
(:func:`fedpriv.scenarios.config.node_spec.resolve_node`) of what fedpriv's simulation gives it:
the run config (pyproject.toml + ``-c``) and its node config
(:func:`fedpriv.scenarios.cli.simulated_nodes.node_settings`: the scenario's and the run
config's node-owned opt-ins). A deployed node uses its own ``--node-config``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from fedpriv.scenarios.cli.simulated_nodes import node_settings
from fedpriv.scenarios.config.node_roles import client_mode
from fedpriv.scenarios.config.node_spec import resolve_node
from fedpriv.scenarios.config.schema import AUTO
from fedpriv.scenarios.zonal.keys import zone_nodes

from fedpriv.privacy.modes import dp_sgd as dp_sgd_mode
from fedpriv.privacy.modes import ifca as ifca_mode
from fedpriv.privacy.modes import zonal as zonal_mode
from fedpriv.privacy.ownership import NODE_SECURE_DEFAULTS, ZONE_NODE, owned_keys

__all__ = ["NODE_READ", "SERVER", "EVERY_NODE", "KeyOwner", "key_owners", "node_roles"]

SERVER, EVERY_NODE = "server", "every node"
IFCA_KIND = ifca_mode.NAME  # the scenario kind whose every user is an IFCA node (node_mode)
# limits a node of a role reads from its OWN node config, else its run config (never the
# server's resolution, never a message): node_roles.own_max_epsilon, zone_node.own_value
NODE_READ: Mapping[str, tuple[str, ...]] = {
    dp_sgd_mode.NAME: ("max-epsilon",),
    ZONE_NODE: ("max-epsilon", "min-zone-clients", "num-server-rounds"),
}
ROLE_LABELS = {
    ZONE_NODE: "zone nodes",
    zonal_mode.NAME: "LDP-zone clients",
    ifca_mode.NAME: "IFCA users",
}


@dataclass(frozen=True)
class KeyOwner:
    """One key: its owner, the server's value and where it came from, and for a node-owned
    key the value every simulated node uses and where that came from."""

    key: str
    owner: str
    value: Any
    source: str
    node_value: Any = None
    node_source: str = ""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.owner == SERVER:
            del out["node_value"], out["node_source"]
        return out


def node_roles(cfg: Mapping[str, Any], kind: str) -> dict[str, int]:
    """Each server-distrusting role the run's nodes play -> how many nodes play it (a zone
    node: one per LDP or HDP zone; an IFCA scenario: every user)."""
    if kind == IFCA_KIND:
        return {ifca_mode.MODE.name: int(cfg["num-clients"])}
    roles: dict[str, int] = {}
    for node in range(node_count(cfg)):
        role = client_mode(cfg, node)
        if role is not None:
            roles[role] = roles.get(role, 0) + 1
    return roles


def node_count(cfg: Mapping[str, Any]) -> int:
    """The run's ClientApp nodes: one per zone with zone nodes, else one per client."""
    return int(cfg["num-zones"]) if zone_nodes(cfg) else int(cfg["num-clients"])


def _label(role: str, count: int, nodes: int) -> str:
    name = ROLE_LABELS.get(role, f"{role} clients")
    return name if count == nodes else f"{name} ({count} of {nodes})"


def owners_of(cfg: Mapping[str, Any], kind: str) -> dict[str, str]:
    """Key -> its owner for the node-owned keys of this run (every other key: the server)."""
    roles, nodes = node_roles(cfg, kind), node_count(cfg)
    out: dict[str, str] = {}
    for role, count in roles.items():
        label = _label(role, count, nodes)
        for key in dict.fromkeys((*owned_keys(role), *NODE_READ.get(role, ()))):
            out[key] = label if key not in out else f"{out[key]}, {label}"
    out.update({key: EVERY_NODE for key in NODE_SECURE_DEFAULTS})
    return out


def _node_source(
    key: str,
    node_config: Mapping[str, Any],
    run_config: Mapping[str, Any],
    scenario: Mapping,
    server_source: str,
) -> str:
    """Where a simulated node's value of ``key`` comes from (its node config, its run config,
    its copy of the scenario, its secure default, or ``auto`` resolved as the server does)."""
    if key in node_config:
        return "node config"
    if run_config.get(key, AUTO) != AUTO:
        return "run config"
    if key in NODE_SECURE_DEFAULTS:
        return "secure default"
    if key in scenario:
        return "scenario"
    return server_source if server_source in ("privacy mode", "derived") else "default"


def key_owners(
    cfg: Mapping[str, Any],
    kind: str,
    run_config: Mapping[str, Any],
    sources: Mapping[str, str],
    scenario: Mapping[str, Any],
) -> list[KeyOwner]:
    """Every key of the resolved ``cfg`` (scenario kind ``kind``): its owner, value and
    source (``sources``, ``fedpriv show``'s), and for a node-owned key the value each
    simulated node uses: the node's own resolution of ``run_config`` (what the simulation
    passes every node: pyproject.toml + ``-c``) and its node config (``node_settings``)."""
    owners = owners_of(cfg, kind)
    read_raw = {k for role in node_roles(cfg, kind) for k in NODE_READ.get(role, ())}
    node_config = node_settings(cfg)
    own = resolve_node({**run_config, **node_config})
    out = []
    for key, value in cfg.items():
        owner = owners.get(key, SERVER)
        if owner == SERVER:
            out.append(KeyOwner(key, owner, value, sources.get(key, "")))
            continue
        node_value = own.get(key)
        if key in read_raw:  # read from the node's own configs, not from its resolution
            raw = node_config.get(key, run_config.get(key, AUTO))
            node_value = raw if raw not in (AUTO, None, "") else node_value
        source = sources.get(key, "")
        where = _node_source(key, node_config, run_config, scenario, source)
        out.append(KeyOwner(key, owner, value, source, node_value, where))
    return out


SHORT_SOURCES = {
    "set on the command line": "run config",
    "set in pyproject.toml": "pyproject.toml",
    "set by the scenario": "scenario",
    "the privacy mode's value": "privacy mode",
    "derived from the others": "derived",
}


def short_sources(
    cfg: Mapping[str, Any], specs: Mapping[str, Any], sources: Mapping[str, str]
) -> dict[str, str]:
    """``fedpriv show``'s sources in a word: ``default`` for a key at its default that no
    scenario or ``-c`` set, else ``run config`` | ``pyproject.toml`` | ``scenario`` |
    ``privacy mode`` | ``derived``."""
    out = {}
    for key, source in sources.items():
        short = SHORT_SOURCES.get(source, source)
        at_default = key in specs and key in cfg and cfg[key] == specs[key].default
        quiet = short in ("pyproject.toml", "derived", "privacy mode")
        out[key] = "default" if at_default and quiet else short
    return out


def owner_lines(owners: list[KeyOwner], indent: str = "  ") -> list[str]:
    """``fedpriv show``'s section: one line per node-owned key (owner, the server's value and
    its source, the value each simulated node uses and its source), then the server's count."""
    own = [o for o in owners if o.owner != SERVER]
    head = f"{indent}{'key':24s} {'owner':24s} {'value (from)':28s} each simulated node uses"
    lines = ["who owns each key (a node's own key: its own config decides, never a message):"]
    lines.append(head)
    for o in own:
        value = f"{o.value!r} ({o.source})"
        lines.append(
            f"{indent}{o.key:24s} {o.owner:24s} {value:28s} {o.node_value!r} ({o.node_source})"
        )
    rest = len(owners) - len(own)
    lines.append(f"{indent}the other {rest} keys: the server's (--json: every key's owner)")
    return lines
