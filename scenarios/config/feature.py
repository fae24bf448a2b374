"""The Feature declaration type and the Catalog built from a list of features.

A feature (standard training, global/metric DP, DP-SGD, IFCA, zonal, attacks, grid/report)
is one :class:`Feature` object in its own module. It declares everything the app needs to
know about it: run-config keys, privacy modes with their wrapper builders, scenarios,
server runners (one per scenario kind), client task names, a summary block, consistency
checks and CLI commands. :mod:`fedpriv.scenarios.config.features` lists the features, in order;
that list
is the only place that names them all. Nothing registers itself on import.

A :class:`Catalog` is the read-only view the engine uses (lookups by key, mode, kind,
command). Runners, checks and commands receive it as an argument, so feature modules never
import the feature list (no import cycles).

Client tasks are named here but implemented in :mod:`fedpriv.scenarios.app.client_tasks`
(client-side
code only): the ClientApp looks tasks up there and never imports a server module.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from fedpriv.scenarios.config.schema import (
    AUTO,
    ConfigError,
    KeySpec,
    choice,
    default_output_dir,
    resolve,
)

from fedpriv.privacy.modes import Mode
from fedpriv.privacy.modes.registry import KEY as MODE_KEY

if TYPE_CHECKING:
    from fedpriv.scenarios.config.specs import ServerRun

RunConfig = dict[str, Any]
# fn(strategy, run, rng) -> strategy: the privacy wrapper around the stock strategy
# (run: the spec built once and its record)
WrapperBuilder = Callable[[Any, "ServerRun", Any], Any]
# fn(grid, run, catalog) -> None: one scenario kind's server-side run
Runner = Callable[[Any, "ServerRun", "Catalog"], None]
# fn(run, rounds) -> dict merged into summary.json
SummaryBlock = Callable[["ServerRun", list[dict]], dict]
# fn(cfg, catalog) -> None, raises ConfigError
Check = Callable[[Mapping[str, Any], "Catalog"], None]


@dataclass(frozen=True)
class PrivacyMode:
    """The Flower side of one privacy mode: its registered declaration and its server wrapper.

    ``mode`` is the mode's whole declaration (:class:`fedpriv.privacy.modes.Mode`, one module per
    mode: parameters, threat model, ε against each party, owned keys, disclosure, planning,
    report fields); ``wrapper`` builds its server-side strategy wrapper. The catalog refuses
    a mode that is not the registered one (:func:`check_mode`): what the server plans and
    wraps is what the ClientApp enforces, from one declaration.
    """

    name: str
    wrapper: WrapperBuilder
    mode: Mode

    @property
    def disclosure(self) -> Mapping[str, frozenset[str]] | None:
        """What its clients may send (kind -> metric keys; None: the mode filters nothing)."""
        return self.mode.disclosure if self.mode.filters else None

    @property
    def plan(self) -> Callable[..., dict]:
        """``plan(spec, examples_per_client)``: its figures before training (``spec``: the
        run's :class:`fedpriv.spec.RunSpec`, built once by the party)."""
        return self.mode.plan

    @property
    def summary_key(self) -> str:
        """The summary.json block that reports it."""
        return self.mode.summary_key

    @property
    def threat_model(self) -> Mapping[str, str]:
        """Who is trusted for what, one sentence per party."""
        return self.mode.threat_model

    @property
    def owned_keys(self) -> tuple[str, ...]:
        """The run-config keys its clients own (empty: they trust the server)."""
        return self.mode.party_keys("client")


def check_mode(mode: PrivacyMode) -> PrivacyMode:
    """``mode`` if it wraps the registered declaration of its name; ValueError otherwise."""
    from fedpriv.privacy.modes import get

    registered = get(mode.name)  # ModeError (a ValueError) for an unregistered mode
    if registered is not mode.mode:
        raise ValueError(
            f"privacy mode {mode.name!r}: the Flower side wraps a declaration that is not the "
            "registered one (fedpriv.privacy.modes): refused, modes fail closed"
        )
    if not callable(mode.wrapper):
        raise ValueError(f"privacy mode {mode.name!r} declares no server wrapper builder")
    return mode


@dataclass(frozen=True)
class Scenario:
    """A named experiment: what runs it (``kind``) and which defaults it sets."""

    name: str
    kind: str
    description: str
    defaults: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Command:
    """A ``fedpriv`` sub-command: ``add_arguments(parser)``, ``run(args, catalog) -> rc``.

    ``help`` is one sentence in a user's words (``fedpriv --help``); ``example`` one or more
    command lines shown under "example:" in ``fedpriv <name> --help``.
    """

    name: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Catalog], int]
    help: str = ""
    example: str = ""


@dataclass(frozen=True)
class Feature:
    """Everything one feature adds to the app (see the module docstring)."""

    name: str
    description: str
    keys: Sequence[KeySpec] = ()
    privacy_modes: Sequence[PrivacyMode] = ()
    scenarios: Sequence[Scenario] = ()
    runners: Mapping[str, Runner] = field(default_factory=dict)
    client_tasks: Sequence[str] = ()
    summary: SummaryBlock | None = None
    checks: Sequence[Check] = ()
    commands: Sequence[Command] = ()
    # kind -> fn(cfg) -> bool: is a run of this kind in cfg["output-dir"] complete (resume)?
    # Kinds without one are complete when their summary.json exists.
    completion: Mapping[str, Callable[[Mapping[str, Any]], bool]] = field(default_factory=dict)


def _unique(pairs: list[tuple[str, Any]], what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise ValueError(f"{what} {name!r} is declared by two features")
        out[name] = value
    return out


class Catalog:
    """Read-only lookups over an ordered list of features."""

    def __init__(self, features: Sequence[Feature]) -> None:
        self.features = tuple(features)
        self.modes: Mapping[str, PrivacyMode] = MappingProxyType(
            _unique([(m.name, check_mode(m)) for f in features for m in f.privacy_modes], "mode")
        )
        self.privacy_modes: Mapping[str, WrapperBuilder] = MappingProxyType(
            {name: mode.wrapper for name, mode in self.modes.items()}
        )
        keys = _unique([(k.name, k) for f in features for k in f.keys], "key")
        modes = tuple(self.privacy_modes)
        keys[MODE_KEY] = replace(
            keys[MODE_KEY], check=choice(modes), allowed="one of " + " | ".join(modes)
        )
        self.keys: Mapping[str, KeySpec] = MappingProxyType(keys)
        self.scenarios: Mapping[str, Scenario] = MappingProxyType(
            _unique([(s.name, s) for f in features for s in f.scenarios], "scenario")
        )
        self.runners: Mapping[str, Runner] = MappingProxyType(
            _unique([(k, r) for f in features for k, r in f.runners.items()], "kind")
        )
        self.commands: Mapping[str, Command] = MappingProxyType(
            _unique([(c.name, c) for f in features for c in f.commands], "command")
        )
        self.client_tasks = tuple(t for f in features for t in f.client_tasks)
        self.summaries = tuple(f.summary for f in features if f.summary is not None)
        self.checks = tuple(c for f in features for c in f.checks)
        self._completion = _unique(
            [(k, c) for f in features for k, c in f.completion.items()], "completion of kind"
        )

    def scenario(self, name: Any) -> Scenario:
        """The scenario called ``name`` or a one-line :class:`ConfigError`."""
        if not isinstance(name, str) or name not in self.scenarios:
            raise ConfigError("scenario", name, "one of " + " | ".join(sorted(self.scenarios)))
        return self.scenarios[name]

    def kind(self, cfg: Mapping[str, Any]) -> str:
        """The scenario kind of a resolved config."""
        return self.scenario(cfg["scenario"]).kind

    def resolve_run_config(self, run_config: Mapping[str, Any]) -> RunConfig:
        """Scenario lookup, defaults layering, every key check and every consistency check."""
        name = run_config.get("scenario", "digits")
        scenario = self.scenario("digits" if name == AUTO else name)
        cfg = resolve(self.keys, {**run_config, "scenario": scenario.name}, scenario.defaults)
        if not cfg["output-dir"]:
            cfg["output-dir"] = default_output_dir(cfg)
        for check in self.checks:
            check(cfg, self)
        return cfg

    def completion(self, kind: str) -> Callable[[Mapping[str, Any]], bool] | None:
        """The completion check of runs of ``kind`` (None: summary.json exists)."""
        return self._completion.get(kind)

    def wrapper(self, mode: str) -> WrapperBuilder:
        """The wrapper builder of privacy mode ``mode``."""
        return self.privacy_modes[mode]

    def summary_blocks(self, run: ServerRun, rounds: list[dict]) -> dict:
        """Every feature's summary block of ``run`` (its spec and record), merged in feature
        order."""
        out: dict = {}
        for block in self.summaries:
            out.update(block(run, rounds))
        return out
