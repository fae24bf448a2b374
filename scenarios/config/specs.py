"""Build the typed run spec (:class:`fedpriv.spec.RunSpec`) from a resolved run config.

The one place below which no run-config mapping travels: the server builds its
spec from its resolved config, each ClientApp node from its own (:mod:`scenarios.config.node_spec`),
with :func:`run_spec`. Every field of a spec class names its config key in its metadata
(:func:`fedpriv.spec.key`); :func:`build` reads those keys, so no key name is repeated here.

A config that lacks keys (a partial config in a test, a record written by an older version)
is completed from the declared key defaults and the scenario's defaults first
(:func:`complete`), exactly as ``fedpriv run`` resolves it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from fedpriv.privacy.modes.registry import mode_of
from fedpriv.privacy.participation import Participation
from fedpriv.spec import KEY, DataSpec, RunSpec, StrategySpec, TrainSpec, ZoneSpec

__all__ = ["build", "complete", "data_spec", "run_spec", "train_spec"]

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
    default (the node's resolution, :func:`scenarios.config.node_spec.resolve_node`, without its
    checks of the values ``cfg`` holds)."""
    from scenarios.config.node_spec import load_snapshot, node_keys
    from scenarios.config.schema import fill_auto

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
