"""Build the typed run spec (:class:`fedpriv.spec.RunSpec`) from a resolved run config.

The one place below which no run-config mapping travels: each party builds its spec once, at
its boundary, with :func:`run_spec`. The server builds it when it resolves its config
(:func:`server_run`, called by :mod:`fedpriv.scenarios.app.server_app` and, for each cell of a
plan, by
:mod:`fedpriv.scenarios.app.multirun`); each ClientApp node when it reads its Context and a message
(:mod:`fedpriv.scenarios.app.client_app`). Below that point code takes the spec or its parts.

Every field of a spec class names its config key in its metadata (:func:`fedpriv.spec.key`);
:func:`build` reads those keys, so no key name is repeated here.

A config that lacks keys (a partial config in a test, a record written by an older version)
is completed from the declared key defaults and the scenario's defaults first
(:func:`complete`), exactly as ``fedpriv run`` resolves it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from fedpriv.privacy.modes.registry import mode_of
from fedpriv.privacy.participation import Participation
from fedpriv.spec import KEY, DataSpec, RunSpec, StrategySpec, TrainSpec, ZoneSpec

__all__ = [
    "NodeCall",
    "ServerRun",
    "build",
    "complete",
    "data_spec",
    "node_call",
    "run_spec",
    "server_run",
    "train_spec",
]

Spec = TypeVar("Spec")
KIND_KEY = "scenario-kind"  # set by the server's catalog; a node reads its snapshot


def build(cls: type[Spec], cfg: Mapping[str, Any]) -> Spec:
    """An instance of spec class ``cls`` whose keyed fields are read from ``cfg``.

    Raises ``KeyError`` naming the key when ``cfg`` lacks one (call :func:`complete` first).
    """
    values = {}
    for f in dataclasses.fields(cls):
        if KEY in f.metadata:
            values[f.name] = cfg[f.metadata[KEY]]
    return cls(**values)


def complete(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` with every declared key: missing ones take the scenario's, then the key's
    default (the node's resolution, :func:`fedpriv.scenarios.config.node_spec.resolve_node`,
    without its
    checks of the values ``cfg`` holds)."""
    from fedpriv.scenarios.config.node_spec import load_snapshot, node_keys
    from fedpriv.scenarios.config.schema import fill_auto

    scenarios = load_snapshot()["scenarios"]
    name = cfg.get("scenario", "digits")
    defaults = scenarios.get(name, {}).get("defaults", {})
    out = {k: spec.default for k, spec in node_keys().items()}
    out.update(defaults)
    out.update(cfg)
    out = fill_auto(node_keys(), out)
    if KIND_KEY not in out:
        out[KIND_KEY] = scenarios.get(name, {}).get("kind", "standard")
    return out


def data_spec(cfg: Mapping[str, Any]) -> DataSpec:
    """The :class:`DataSpec` of a (possibly partial) config."""
    return build(DataSpec, complete(cfg))


def train_spec(cfg: Mapping[str, Any]) -> TrainSpec:
    """The :class:`TrainSpec` of a (possibly partial) config."""
    return build(TrainSpec, complete(cfg))


def run_spec(cfg: Mapping[str, Any]) -> RunSpec:
    """The frozen :class:`RunSpec` of a resolved (or partial) config."""
    full = complete(cfg)
    mode = mode_of(full)
    return RunSpec(
        mode=mode,
        params=build(mode.params, full),
        kind=str(full[KIND_KEY]),
        participation=Participation.from_counts(
            full["num-clients"],
            full["clients-per-round"],
            full["num-sampled-clients"],
            full["client-sampling"],
        ),
        data=build(DataSpec, full),
        train=build(TrainSpec, full),
        strategy=build(StrategySpec, full),
        zones=build(ZoneSpec, full),
        **{f.name: full[f.metadata[KEY]] for f in dataclasses.fields(RunSpec) if KEY in f.metadata},
    )


@dataclass(frozen=True)
class ServerRun:
    """One server-side run: its :class:`RunSpec`, built once from its resolved config, and that
    config (a copy) as the record it is.

    ``record`` is what is written or sent as a mapping (run-config.json and summary.json's
    ``config``, the manifest and the checkpoint's fingerprint, the message's wire config) and
    what a feature reads of its own keys; every value the spec holds is read from ``spec``.
    """

    spec: RunSpec
    record: Mapping[str, Any]

    def variant(self, overrides: Mapping[str, Any]) -> ServerRun:
        """Another run of the same server: this config with ``overrides`` (a zonal-comparison
        variant, a CIA phase, a sweep cell), its spec built once from that config; this run
        itself when ``overrides`` changes no value (no second spec of one config)."""
        record = self.record
        if all(k in record and _same(record[k], v) for k, v in overrides.items()):
            return self
        kind = None if "scenario" in overrides else self.spec.kind
        return server_run({**self.record, **overrides}, kind)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def server_run(cfg: Mapping[str, Any], kind: str | None = None) -> ServerRun:
    """The server's run of resolved config ``cfg``: its spec (scenario kind ``kind`` when the
    catalog names it, else the node catalog's) and its record."""
    full = dict(cfg) if kind is None else {**cfg, KIND_KEY: kind}
    return ServerRun(spec=run_spec(full), record=dict(cfg))


ROUND_KEY, TASK_KEY = "server-round", "client-task"  # set by the server in each message


@dataclass(frozen=True)
class NodeCall:
    """One message as a ClientApp node runs it: the node's :class:`RunSpec`, built once when it
    reads its Context and the message (:func:`fedpriv.scenarios.app.client_app.resolved`), and the
    config it was built from, as the record it is.

    ``record`` holds the message's own values (its round, its task, the derived keys the node
    sets: zone level, state folder, IFCA split) and what a feature reads of its own keys (the
    zonal plan); every value the spec holds is read from ``spec``.
    """

    spec: RunSpec
    record: Mapping[str, Any]

    @property
    def round(self) -> int:
        """The message's round (0 when it names none)."""
        return int(self.record.get(ROUND_KEY, 0))

    @property
    def task(self) -> str:
        """The client task the message runs (``standard`` when it names none)."""
        return str(self.record.get(TASK_KEY, "standard"))


def node_call(cfg: Mapping[str, Any]) -> NodeCall:
    """The node's call of resolved config ``cfg`` (its own values and the message's)."""
    return NodeCall(spec=run_spec(cfg), record=dict(cfg))
