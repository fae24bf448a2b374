"""The commands that describe without running: ``keys``, ``scenarios`` and ``show``.

``fedpriv show SCENARIO`` answers "what will this run do?" before it runs: the scenario, the
keys whose values differ from the key defaults and what set each (the scenario, ``-c``,
pyproject.toml, or the privacy mode for a key left at ``"auto"``), the whole resolved config
as TOML lines (a file ``-c`` accepts), and the privacy plan's headline (``fedpriv epsilon``).
Nothing is trained and no data is read; a bad value is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from fedpriv.scenarios.config.feature import Catalog, Command
from fedpriv.scenarios.config.schema import AUTO, ConfigError, KeySpec, mode_values, toml_lines

INDENT = "  "


def _keys_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--toml",
        action="store_true",
        help="print the settings as the lines of pyproject.toml's [tool.flwr.app.config]",
    )
    parser.add_argument(
        "--scenario",
        default=None,
        metavar="NAME",
        help="the values scenario NAME runs with (its defaults, the mode's values for the "
        "keys left at auto) instead of each key's own default (see fedpriv scenarios)",
    )


def resolved(catalog: Catalog, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The config a run with ``overrides`` resolves to (pyproject's values, the scenario's
    defaults, the mode's values for ``"auto"``), every check done; ConfigError otherwise."""
    from fedpriv.scenarios.cli.launch import app_config

    return catalog.resolve_run_config(app_config(dict(overrides)))


def keys(args: argparse.Namespace, catalog: Catalog) -> int:
    """``fedpriv keys``: every run-config key (``--toml``: pyproject.toml's lines;
    ``--scenario NAME``: the values that scenario runs with)."""
    if args.toml:
        for feature in catalog.features:
            if feature.keys:
                print(f"# {feature.name}")
                print("\n".join(toml_lines(feature.keys)))
        return 0
    values = {name: spec.default for name, spec in catalog.keys.items()}
    if args.scenario is not None:
        try:
            values = resolved(catalog, {"scenario": args.scenario})
        except ConfigError as err:
            print(f"fedpriv: {err}", file=sys.stderr)
            return 2
    for spec in catalog.keys.values():
        value = values[spec.name]
        own = f" (key default {spec.default!r})" if value != spec.default else ""
        print(f"{spec.name:28s} default {value!r:14} allowed: {spec.allowed}{own}")
    return 0


def _no_args(parser: argparse.ArgumentParser) -> None:
    del parser


def scenarios(args: argparse.Namespace, catalog: Catalog) -> int:
    """``fedpriv scenarios``: every scenario with its kind."""
    del args
    for scenario in catalog.scenarios.values():
        print(f"{scenario.name:20s} [{scenario.kind}] {scenario.description}")
    return 0


def source_of(
    name: str,
    overrides: Mapping[str, Any],
    app: Mapping[str, Any],
    scenario: Mapping[str, Any],
    mode: Mapping[str, Any],
) -> str:
    """Who set key ``name``: the command line over pyproject.toml over the scenario, else
    the privacy mode's value (``mode``) or a value derived from the others, for a key left
    at ``"auto"``."""
    if name in overrides and overrides[name] != AUTO:
        return "set on the command line"
    if app.get(name, AUTO) != AUTO:
        return "set in pyproject.toml"
    if name in scenario:
        return "set by the scenario"
    return "the privacy mode's value" if name in mode else "derived from the others"


def changed_lines(
    cfg: Mapping[str, Any],
    specs: Mapping[str, KeySpec],
    sources: Mapping[str, str],
) -> list[str]:
    """One line per key whose resolved value differs from the key's default: the value, the
    key default and what set it."""
    out = []
    for name, spec in specs.items():
        if cfg[name] != spec.default:
            out.append(
                f"{INDENT}{name:28s} {cfg[name]!r:16} (key default {spec.default!r}; "
                f"{sources[name]})"
            )
    return out or [f"{INDENT}none"]


def _show_args(parser: argparse.ArgumentParser) -> None:
    from fedpriv.scenarios.cli.launch import add_run_config_option

    parser.add_argument(
        "scenario", nargs="?", default=None, help="a scenario (fedpriv scenarios; default digits)"
    )
    add_run_config_option(parser, "settings that replace the defaults, as for fedpriv run")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print every key's owner, value and source (and each simulated node's value of "
        "a node-owned key) as JSON",
    )


def show(args: argparse.Namespace, catalog: Catalog) -> int:
    """``fedpriv show [SCENARIO] [-c ...]``: what a run would do, without running it."""
    from fedpriv.scenarios.cli.key_owners import key_owners, owner_lines, short_sources
    from fedpriv.scenarios.cli.launch import app_config, parse_overrides
    from fedpriv.scenarios.config.specs import run_spec

    from fedpriv.privacy.accounting.planning import privacy_plan
    from fedpriv.reporting.plan_text import plan_headline

    try:
        overrides = parse_overrides(args.run_config)
        if args.scenario is not None:
            if overrides.get("scenario", args.scenario) != args.scenario:
                raise ConfigError("scenario", overrides["scenario"], f"{args.scenario!r} or no -c")
            overrides["scenario"] = args.scenario
        cfg = resolved(catalog, overrides)
    except ConfigError as err:
        print(f"fedpriv: {err}", file=sys.stderr)
        return 2
    scenario = catalog.scenario(cfg["scenario"])
    app = app_config({})
    mode = mode_values(cfg)
    sources = {k: source_of(k, overrides, app, scenario.defaults, mode) for k in catalog.keys}
    owners = key_owners(
        cfg, scenario.kind, app_config(overrides), short_sources(cfg, catalog.keys, sources),
        scenario.defaults,
    )  # fmt: skip
    if args.json:
        doc = {"scenario": scenario.name, "keys": {o.key: o.to_json() for o in owners}}
        print(json.dumps(doc, indent=1, default=str))
        return 0
    plan = privacy_plan(run_spec({**cfg, "scenario-kind": scenario.kind}))
    lines = [
        f"scenario   {scenario.name} [{scenario.kind}]: {scenario.description}",
        f"output     {cfg['output-dir']}",
        "",
        "changed from the key defaults (fedpriv keys):",
        *changed_lines(cfg, catalog.keys, sources),
        "",
        *owner_lines(owners),
        "",
        "privacy plan (fedpriv epsilon):",
        *(INDENT + line for line in plan_headline(plan)),
        "",
        "resolved config (as a -c FILE.toml):",
        *(INDENT + line for line in toml_lines(_as_specs(catalog.keys, cfg))),
    ]
    print("\n".join(lines))
    return 0


def _as_specs(specs: Mapping[str, KeySpec], cfg: Mapping[str, Any]) -> list[KeySpec]:
    """The key specs with the resolved values as defaults (for :func:`toml_lines`)."""
    from dataclasses import replace

    return [replace(spec, default=cfg[name]) for name, spec in specs.items()]


COMMANDS = (
    Command(
        "keys",
        _keys_args,
        keys,
        "List every setting --run-config accepts, with its default and allowed values.",
        "fedpriv keys\nfedpriv keys --scenario hdp-digits",
    ),
    Command(
        "scenarios",
        _no_args,
        scenarios,
        "List the ready-made scenarios.",
        "fedpriv scenarios",
    ),
    Command(
        "show",
        _show_args,
        show,
        "Print what a run would do: its resolved config, the keys it changes from the "
        "defaults, and its privacy plan (nothing is trained).",
        "fedpriv show\nfedpriv show hdp-digits\nfedpriv show digits -c \"privacy='global-dp'\"",
    ),
)
