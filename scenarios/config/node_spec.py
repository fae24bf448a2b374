"""Each ClientApp node's own run spec, and the message allow-list.

The server resolves its config for itself; every ClientApp node (a client or a zone
SuperNode) resolves ITS OWN with the same code (:func:`fedpriv.scenarios.config.schema.resolve`
over the
same key declarations, the ``scenarios.<feature>.keys`` modules)::

    key defaults  <-  scenario defaults  <-  the node's run_config  <-  its node_config

once per (run, run_config, node_config) and cached, frozen (:class:`NodeSpec`). The scenario
defaults come from ``node_catalog.json``, a snapshot of the server's catalog
(``tests/test_curious_server.py`` checks it equals
:data:`fedpriv.scenarios.config.features.CATALOG`; after
adding a scenario run ``python -c "from fedpriv.scenarios.config.features import CATALOG; from
fedpriv.scenarios.config.node_spec import write_snapshot;
write_snapshot(CATALOG)"``), so a worker imports no
server code. ``"auto"`` resolves ON THE NODE:

* ``reproducible-noise`` and ``unaccounted-metrics``: false unless the node itself sets true
  (:data:`fedpriv.privacy.ownership.NODE_SECURE_DEFAULTS`; a paper scenario's opt-in does not
  reach the nodes, :func:`fedpriv.scenarios.app.wire_config.wire_config` does not send it);
* z, C, δ, the zones and the placement: the scenario's, as the server resolves them;
* ``client-state-dir``: the node's ``node_config`` value, else the per-node default
  ``$FEDPRIV_STATE_ROOT/node-<data key>`` (its own data settings; outside every run's output
  folder, the same in every run); a message may only repeat it. Its lifetime release ledgers
  (:mod:`fedpriv.privacy.releases`) are written there whatever the message says
  (:func:`fedpriv.scenarios.config.node_roles.node_ledger`).

**The allow-list** (:mod:`fedpriv.privacy.ownership`, one place: ``PRIVACY_KEYS``,
each mode's ``release_keys``, ``SEEDED_KEYS``, ``DERIVED_KEYS``, ``MESSAGE_KEYS``). A message
may carry the global arrays, ``server-round``, a zone node's sampled ``zonal-clients``, the
elected super-node, the zone id, IFCA's ledger tag, and any training key outside those lists
(learning rate, optimizer, ...). A privacy key or a derived key (the client task the node's own mode
implies, its zone level, its state folder, IFCA's evaluation split) whose value differs from
the spec gets an error reply naming the key (``REFUSED_CODE``), in every mode, for a node that
sets nothing as for one that sets everything. ``seed`` is a privacy key only for a node whose
own ``reproducible-noise`` is true (otherwise the noise is OS entropy and the seed only picks
the training order). ``dp-sgd-participations`` is never accepted (the node counts).

**Declared variants.** One simulation may run several configs on the same nodes; each is a
variant the NODE derives from its own config, never one the message names:

* a ``zonal-compare`` scenario: one variant per (placement, zone count) of its own
  ``zonal-compare-placements`` / ``zonal-sweep-zones``
  (:func:`fedpriv.scenarios.zonal.keys.compare_variants`, the code the server runs). A node whose
  comparison lists ``none`` releases an un-noised zone sum in that variant, as its own config
  says; a node that must never do so sets ``zonal-compare-placements`` without ``none``;
* an IFCA ``ifca-sweep``: one per run (:func:`fedpriv.scenarios.ifca.keys.sweep_overrides`);
* ``run-plan``: one per cell of the plan file its own config names (``fedpriv grid``,
  ``fedpriv attack cia``, ``fedpriv audit --grid``), each resolved again here.

A message is accepted when it agrees with one variant on every privacy and derived key; the
node then trains with that variant's values (its mode, level, z, C, opt-ins), so what it
releases and counts is decided by its own rules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from fedpriv.scenarios.adaptive_clip import keys as keys_adaptive_clip
from fedpriv.scenarios.app.task_names import IFCA_TASK, ZONE_NODE_TASK
from fedpriv.scenarios.attacks import keys as keys_attacks
from fedpriv.scenarios.audit import keys as keys_audit
from fedpriv.scenarios.client_budgets import keys as keys_client_budgets
from fedpriv.scenarios.config.node_roles import (
    DATA_KEYS,
    client_mode,
    ledger_folder,
    node_identity,
    zonal_level,
    zone_node_level,
)
from fedpriv.scenarios.config.schema import (
    AUTO,
    ConfigError,
    KeySpec,
    choice,
    default_output_dir,
    resolve,
)
from fedpriv.scenarios.dp import keys as keys_dp
from fedpriv.scenarios.dp_ftrl import keys as keys_dp_ftrl
from fedpriv.scenarios.dp_sgd import keys as keys_dpsgd
from fedpriv.scenarios.faults import keys as keys_faults
from fedpriv.scenarios.grid import keys as keys_grid
from fedpriv.scenarios.ifca import keys as keys_ifca
from fedpriv.scenarios.speed import keys as keys_speed
from fedpriv.scenarios.standard import keys as keys_standard
from fedpriv.scenarios.tracking import keys as keys_tracking
from fedpriv.scenarios.zonal import keys as keys_zonal

from fedpriv.privacy.modes import ifca, mode_of, names
from fedpriv.privacy.modes import zonal as zonal_mode
from fedpriv.privacy.modes.base import STANDARD_TASK
from fedpriv.privacy.modes.registry import KEY as MODE_KEY
from fedpriv.privacy.ownership import (
    CLIENT_COUNTED,
    DERIVED_KEYS,
    NODE_SECURE_DEFAULTS,
    privacy_keys,
    reason,
    same,
    server_keys,
)
from fedpriv.privacy.releases import STATE_DIR_KEY

IFCA_MODE = (
    ifca.MODE.name
)  # the role of an IFCA node (fedpriv.scenarios.config.node_roles.client_mode)

__all__ = [
    "NodeLedger",
    "NodeSpec",
    "catalog_snapshot",
    "node_data",
    "node_keys",
    "node_ledger",
    "node_spec",
    "node_state_dir",
    "resolve_node",
]

SNAPSHOT = Path(__file__).with_name("node_catalog.json")
KEY_MODULES = (
    keys_standard,
    keys_dp,
    keys_adaptive_clip,
    keys_dp_ftrl,
    keys_client_budgets,
    keys_dpsgd,
    keys_ifca,
    keys_zonal,
    keys_attacks,
    keys_faults,
    keys_audit,
    keys_grid,
    keys_speed,
    keys_tracking,
)
ZONAL_COMPARE, IFCA_KIND, CIA_KIND = "zonal-compare", "ifca", "cia"
CIA_ABSENT_DIR = (
    "target-absent"  # the CIA runner's second phase (fedpriv.scenarios.attacks.feature)
)


def catalog_snapshot(catalog: Any) -> dict[str, Any]:
    """What a node needs of the server's catalog: the mode names and each scenario's kind
    and defaults (JSON; ``catalog``: a :class:`fedpriv.scenarios.config.feature.Catalog`)."""
    return {
        "modes": list(catalog.modes),
        "scenarios": {
            name: {"kind": s.kind, "defaults": dict(s.defaults)}
            for name, s in catalog.scenarios.items()
        },
    }


def write_snapshot(catalog: Any, path: Path = SNAPSHOT) -> None:
    """Write :func:`catalog_snapshot` to ``node_catalog.json``."""
    path.write_text(json.dumps(catalog_snapshot(catalog), indent=1, sort_keys=True) + "\n")


@lru_cache(maxsize=1)
def load_snapshot() -> Mapping[str, Any]:
    """The node's copy of the catalog (``node_catalog.json``)."""
    return json.loads(SNAPSHOT.read_text())


@lru_cache(maxsize=1)
def node_keys() -> Mapping[str, KeySpec]:
    """Every run-config key, declared as the server declares it (``privacy``: a registered
    mode, :func:`fedpriv.privacy.modes.names`, looked up when checked)."""
    keys = {spec.name: spec for module in KEY_MODULES for spec in module.KEYS}
    keys[MODE_KEY] = KeySpec(
        MODE_KEY, keys[MODE_KEY].default, _registered_mode, "a registered privacy mode"
    )
    return MappingProxyType(keys)


def _registered_mode(value: Any) -> str:
    """A check for one of the modes registered now (a mode a test registers included)."""
    return choice(names())(value)


def resolve_node(own: Mapping[str, Any]) -> dict[str, Any]:
    """A node's resolved config from its own values (``run_config`` + ``node_config``).

    Same layering and checks as the server's (:func:`fedpriv.scenarios.config.schema.resolve`),
    except that
    the scenario's opt-ins do not apply (:data:`fedpriv.privacy.ownership.NODE_SECURE_DEFAULTS`).
    Raises :class:`ConfigError` (one line) for an unknown key or a bad value.
    """
    scenarios = load_snapshot()["scenarios"]
    name = own.get("scenario", AUTO)
    name = "digits" if name == AUTO else name
    if name not in scenarios:
        raise ConfigError("scenario", name, "one of " + " | ".join(sorted(scenarios)))
    defaults = {
        k: v for k, v in scenarios[name]["defaults"].items() if k not in NODE_SECURE_DEFAULTS
    }
    cfg = resolve(node_keys(), {**own, "scenario": name}, defaults)
    if not cfg["output-dir"]:
        cfg["output-dir"] = default_output_dir(cfg)
    return cfg


def _kind(cfg: Mapping[str, Any]) -> str:
    return str(load_snapshot()["scenarios"][cfg["scenario"]]["kind"])


def _plan_cells(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The cells of the plan file the node's own ``run-plan`` names, resolved here."""
    try:
        items = json.loads(Path(cfg["run-plan"]).read_text())["cells"]
        return [resolve_node({**item["config"], "run-plan": ""}) for item in items]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError("run-plan", cfg["run-plan"], "a plan file written by fedpriv") from err


def _expand(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """``cfg`` and the variants its own keys declare (see the module docstring)."""
    out = [cfg]
    if _kind(cfg) == ZONAL_COMPARE and mode_of(cfg) is zonal_mode.MODE:
        try:
            runs = keys_zonal.compare_variants(cfg)
        except ValueError as err:
            raise ConfigError(
                "zonal-compare-placements", cfg["zonal-compare-placements"], str(err)
            ) from err
        out += [resolve_node({k: v for k, v in run.items() if k != "_label"}) for run in runs]
    if _kind(cfg) == CIA_KIND and cfg.get("cia-absent-run"):  # the same run, its own folder
        out.append({**cfg, "output-dir": str(Path(cfg["output-dir"]) / CIA_ABSENT_DIR)})
    if _kind(cfg) == IFCA_KIND and cfg["ifca-sweep"]:
        try:
            out += [resolve_node(run) for run in keys_ifca.sweep_overrides(cfg)]
        except ValueError as err:
            raise ConfigError("ifca-sweep", cfg["ifca-sweep"], str(err)) from err
    return out


def _own_placement(runs: list[dict[str, Any]], own: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The variants of a node that sets its own ``noise-placement``: only that placement
    (a comparison's other placements, ``none`` and ``cdp`` included, are not the node's)."""
    placement = own.get("noise-placement", AUTO)
    if placement in (AUTO, None, ""):
        return runs
    return [v for v in runs if v.get("noise-placement") == placement] or runs[:1]


def node_mode(cfg: Mapping[str, Any], partition: int, message_task: str = "") -> str | None:
    """The node's server-distrusting mode in variant ``cfg`` (None: it trusts the server):
    :func:`fedpriv.scenarios.config.node_roles.client_mode` on the resolved values; IFCA by the
    scenario
    kind."""
    if _kind(cfg) == IFCA_KIND or message_task == IFCA_TASK:
        return IFCA_MODE
    return client_mode({**cfg, "ifca-noise-multiplier": AUTO}, partition, message_task)


def expected_task(cfg: Mapping[str, Any], mode: str | None) -> str:
    """The client task the node's own config implies."""
    if mode == IFCA_MODE:
        return IFCA_TASK
    declared = mode_of(cfg)
    if declared is zonal_mode.MODE:
        return ZONE_NODE_TASK if keys_zonal.zone_nodes(cfg) else declared.client_task
    return declared.client_task


@dataclass(frozen=True)
class NodeSpec:
    """One node's resolved config: its variants (``variants[0]`` the base, each a read-only
    mapping), its partition (a zone node: its zone id) and its own state folder if set."""

    partition: int
    variants: tuple[Mapping[str, Any], ...]
    state_dir: str = ""
    ledger_dir: str = ""  # node_roles.node_ledger's folder (its own state dir, or the default)
    data: tuple[tuple[str, Any], ...] = ()  # its RESOLVED data settings (node_roles.DATA_KEYS)

    @property
    def base(self) -> Mapping[str, Any]:
        """The node's own config (no variant)."""
        return self.variants[0]

    def state_dir_of(self, cfg: Mapping[str, Any]) -> str:
        """The node's state folder (node_config's, else the per-node default of its own data
        settings: :func:`fedpriv.scenarios.config.node_roles.node_ledger`), whatever the variant."""
        del cfg  # the same folder in every variant: the node's, not a cell's
        return self.ledger_dir or str(ledger_folder(self.state_dir, {}))

    def derived(self, cfg: Mapping[str, Any], mode: str | None) -> dict[str, Any]:
        """The derived keys of variant ``cfg``: task, zone level, state folder, IFCA split."""
        out: dict[str, Any] = {"client-task": expected_task(cfg, mode)}
        if mode_of(cfg) is zonal_mode.MODE:
            level = (
                zone_node_level(cfg, self.partition)
                if keys_zonal.zone_nodes(cfg)
                else zonal_level(cfg, self.partition)
            )
            if level is not None:
                out["zonal-level"] = level
        out[STATE_DIR_KEY] = self.state_dir_of(cfg)
        if mode == IFCA_MODE:
            first = int(cfg["num-clients"]) - int(cfg["validation-clients"])
            out["ifca-eval-split"] = "all" if self.partition >= first else "test"
        return out

    def difference(
        self, cfg: Mapping[str, Any], sent: Mapping[str, Any], kind: str, task: str
    ) -> tuple[int, str] | None:
        """Why variant ``cfg`` does not match what the message sent (None: it does), with
        how many keys matched before the first that does not (the closest variant's reason
        is the one reported)."""
        mode = node_mode(cfg, self.partition, task or str(sent.get("client-task", "")))
        for key in CLIENT_COUNTED:
            if key in sent:
                return 0, reason(mode, key, sent[key], "counted by the node itself")
        keys = privacy_keys(mode, bool(cfg["reproducible-noise"]))
        # a key the message leaves out keeps the node's own value (the shared run_config's);
        # an opt-in left out is the node's to decide (the server sends none it left at auto)
        kept = {k: self.base[k] for k in keys if k not in NODE_SECURE_DEFAULTS}
        asked = {**kept, **sent}
        if not task and (kind == "train" or mode == IFCA_MODE):  # IFCA has its own types
            asked.setdefault("client-task", STANDARD_TASK)
        wanted = {k: cfg[k] for k in keys} | self.derived(cfg, mode)
        for rank, (key, value) in enumerate(wanted.items()):
            if key in asked and asked[key] != AUTO and not same(asked[key], value):
                return rank, reason(mode, key, asked[key], f"the node's own value is {value!r}")
        return self._not_allowed(cfg, sent, mode, len(wanted))

    def _not_allowed(
        self, cfg: Mapping[str, Any], sent: Mapping[str, Any], mode: str | None, rank: int
    ) -> tuple[int, str] | None:
        """The allow-list (:func:`fedpriv.privacy.ownership.server_keys`): a key the server
        may not set must equal the node's own value (a key the node does not know: refused)."""
        allowed = server_keys(mode) | set(DERIVED_KEYS) | set(CLIENT_COUNTED)
        for key, value in sent.items():
            if key in allowed or value == AUTO or key in NODE_SECURE_DEFAULTS:
                continue
            if key not in cfg or not same(value, cfg[key]):
                own = cfg.get(key, "unset")
                why = f"the server may not set it; the node's own value is {own!r}"
                return rank, reason(mode, key, value, why)
        return None

    def accept(
        self, sent: Mapping[str, Any], kind: str, task: str = ""
    ) -> tuple[dict[str, Any] | None, str]:
        """(the config to run, "") for an allowed message, else (None, the refusal line).

        ``sent``: the keys the message's config record carries (a digest-less message: the
        whole config; keys it leaves out are the shared run_config's, which the node resolved
        itself); ``kind``: ``train`` | ``evaluate``; ``task``: a custom message type's task.
        """
        closest = (-1, "")
        for cfg in self.variants:
            why = self.difference(cfg, sent, kind, task)
            if why is None:
                return self._run_config(cfg, sent, task), ""
            closest = max(closest, why, key=lambda pair: pair[0])
        return None, closest[1]

    def _run_config(self, cfg: Mapping[str, Any], sent: Mapping[str, Any], task: str):
        mode = node_mode(cfg, self.partition, task or str(sent.get("client-task", "")))
        own = set(privacy_keys(mode, bool(cfg["reproducible-noise"]))) | set(DERIVED_KEYS)
        out = {**cfg, **{k: v for k, v in sent.items() if k not in own and v != AUTO}}
        derived = self.derived(cfg, mode)
        if not (self.state_dir or same(sent.get(STATE_DIR_KEY), derived[STATE_DIR_KEY])):
            derived.pop(STATE_DIR_KEY)  # no folder of its own: keep state in-process only
        return out | derived


_CACHE: dict[tuple[Any, ...], NodeSpec] = {}


def _digest(values: Mapping[str, Any]) -> str:
    return json.dumps(sorted((k, type(v).__name__, str(v)) for k, v in values.items()))


def node_spec(run_id: int, run_config: Mapping[str, Any], node_config: Mapping[str, Any]):
    """The node's :class:`NodeSpec`, cached per (run, run_config, node_config).

    ``node_config`` overlays ``run_config`` for every known key; ``partition-id`` is the
    node's partition (zone id for a zone node), ``client-state-dir`` its state folder.
    Raises :class:`ConfigError` for a bad own value (the node refuses every message).
    """
    keys = node_keys()
    own_keys = {k: v for k, v in node_config.items() if k in keys}
    # the variants depend on the node's own keys, not on its partition: one resolution
    # serves every virtual client of a worker SuperNode (fedpriv.scenarios.nodes.worker)
    ident = (run_id, _digest(run_config), _digest(own_keys))
    if ident not in _CACHE:
        own = {**run_config, **own_keys}
        base = resolve_node(own)
        cells = _plan_cells(base) if base["run-plan"] else []
        runs = _own_placement([v for cfg in [base, *cells] for v in _expand(cfg)], own)
        if len(_CACHE) > 8:
            _CACHE.clear()
        _CACHE[ident] = NodeSpec(
            partition=0,
            variants=tuple(MappingProxyType(v) for v in runs),
            state_dir="",
            data=tuple((k, base[k]) for k in DATA_KEYS if k in base),
        )
    own_dir = str(node_config.get(STATE_DIR_KEY, "") or "")
    cached = _CACHE[ident]
    return replace(
        cached,
        partition=int(node_config["partition-id"]),
        state_dir=own_dir,
        ledger_dir=str(ledger_folder(own_dir, dict(cached.data))),  # resolved: any spelling
    )


@dataclass(frozen=True)
class NodeLedger:
    """Where a node keeps its lifetime release ledgers, and under which identity."""

    identity: int  # its own partition-id (a zone node: its zone id)
    folder: Path  # its own client-state-dir, else $FEDPRIV_STATE_ROOT/node-<resolved data key>


def node_ledger(context: Any) -> NodeLedger:
    """The node's identity (:func:`fedpriv.scenarios.config.node_roles.node_identity`: its
    ``node_config``'s ``partition-id``, never the Flower node id or the run id) and its ledger
    folder (:func:`node_state_dir`). The same node, in any run (a new or resumed run id) and
    any restart (a new Context), finds the same ledger (:mod:`fedpriv.privacy.releases`)."""
    return NodeLedger(node_identity(context), node_state_dir(context))


def node_state_dir(context: Any) -> Path:
    """The node's own state folder: its ``client-state-dir``, else ``$FEDPRIV_STATE_ROOT``
    ``/node-<data key>`` of its RESOLVED data settings (``dataset = 'digits'`` and ``'auto'``
    are one folder), else none (:data:`fedpriv.privacy.releases.NO_FOLDER`)."""
    server_set = {k: v for k, v in context.run_config.items() if k != STATE_DIR_KEY}  # not its
    try:
        spec = node_spec(context.run_id, server_set, context.node_config)
    except (ConfigError, KeyError):  # a direct call with no run config (tests, tools)
        own_dir = str(context.node_config.get(STATE_DIR_KEY, "") or "")
        return ledger_folder(own_dir, {})
    return Path(spec.ledger_dir)


def node_data(context: Any) -> dict[str, Any] | None:
    """The resolved data settings a node with its OWN ``client-state-dir`` binds its ledger
    to (None for a node under a state root: there the folder is already the data's)."""
    spec = node_spec(context.run_id, context.run_config, context.node_config)
    return dict(spec.data) if spec.state_dir and spec.state_dir != "auto" else None
