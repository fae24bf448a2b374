"""``fedpriv`` command line: ``run``, ``keys``, ``scenarios`` (more sub-commands register).

``fedpriv run`` is ``flwr run .`` with the checks first: the run config is resolved and
every value checked, and the data source opened, before the simulation starts. A bad
value prints one line and exits with status 2 (``flwr run`` itself always exits 0).
The simulation is started exactly as ``flwr run .`` starts it (``flower-simulation``
with the federation's options from pyproject.toml); the number of SuperNodes is the
scenario's ``num-clients``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

APP_DIR = Path(__file__).resolve().parent.parent

# sub-command name -> (add_arguments(parser), run(args) -> exit code)
COMMANDS: dict[
    str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
] = {}


def pyproject() -> dict[str, Any]:
    """The app's pyproject.toml."""
    with (APP_DIR / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Flower's ``--run-config`` syntax (``"a=1 b='x'"``, TOML values) to a dict."""
    from flwr.common.config import parse_config_args

    return dict(parse_config_args(list(items))) if items else {}


def app_config(overrides: dict[str, Any]) -> dict[str, Any]:
    """pyproject's [tool.flwr.app.config] with the overrides applied."""
    return {**pyproject()["tool"]["flwr"]["app"]["config"], **overrides}


def preflight(run_config: dict[str, Any]) -> dict[str, Any]:
    """Resolve, check, and open the data source; raises ConfigError / DataError."""
    from clients.keras_client import federated_data
    from scenarios.registry import resolve_run_config

    cfg = resolve_run_config(run_config)
    if cfg["data-path"] and not Path(cfg["data-path"]).exists():
        from fedpriv.config import ConfigError

        raise ConfigError("data-path", cfg["data-path"], "an existing file or directory")
    federated_data(cfg)
    return cfg


def simulation_command(cfg: dict[str, Any], overrides: Sequence[str], federation: str) -> list[str]:
    """The ``flower-simulation`` command ``flwr run . FEDERATION`` would run."""
    federations = pyproject()["tool"]["flwr"]["federations"]
    options = federations[federation].get("options", {})
    launcher = Path(sys.executable).parent / "flower-simulation"
    cmd = [
        str(launcher) if launcher.exists() else "flower-simulation",
        "--app",
        str(APP_DIR),
        "--num-supernodes",
        str(int(cfg["num-clients"])),
    ]
    if options.get("backend"):
        cmd += ["--backend-config", json.dumps(options["backend"])]
    if overrides:
        cmd += ["--run-config", " ".join(overrides)]
    return cmd


def _run_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run-config",
        "-c",
        action="append",
        default=[],
        help="Flower-style overrides, e.g. \"scenario='digits' seed=1\"",
    )
    parser.add_argument(
        "--federation", default="local-simulation", help="local-simulation | local-simulation-gpu"
    )


def _run(args: argparse.Namespace) -> int:
    from fedpriv.config import ConfigError
    from fedpriv.data import DataError

    try:
        cfg = preflight(app_config(parse_overrides(args.run_config)))
    except (ConfigError, DataError) as err:
        print(f"fedpriv: {err}", file=sys.stderr)
        return 2
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if args.federation.endswith("-gpu"):
        env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    else:
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
    print(f"fedpriv: running scenario {cfg['scenario']!r} -> {cfg['output-dir']}", flush=True)
    proc = subprocess.run(
        simulation_command(cfg, args.run_config, args.federation),
        cwd=os.getcwd(),
        env=env,
        check=False,
    )
    summary = Path(cfg["output-dir"]) / "summary.json"
    if proc.returncode == 0 and not summary.exists():
        print("fedpriv: the simulation ended without a summary.json", file=sys.stderr)
        return 1
    if proc.returncode == 0:
        final = json.loads(summary.read_text()).get("final", {})
        print("fedpriv: final " + json.dumps(final, sort_keys=True), flush=True)
    return proc.returncode


def _keys_args(parser: argparse.ArgumentParser) -> None:
    del parser


def _keys(args: argparse.Namespace) -> int:
    del args
    import scenarios.registry  # noqa: F401  (feature keys register on import)
    from fedpriv.config import KEYS

    for spec in KEYS.values():
        print(f"{spec.name:28s} default {spec.default!r:14} allowed: {spec.allowed}")
    return 0


def _scenarios(args: argparse.Namespace) -> int:
    del args
    from scenarios.registry import SCENARIOS

    for scenario in SCENARIOS.values():
        print(f"{scenario.name:20s} [{scenario.kind}] {scenario.description}")
    return 0


COMMANDS["run"] = (_run_args, _run)
COMMANDS["keys"] = (_keys_args, _keys)
COMMANDS["scenarios"] = (_keys_args, _scenarios)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fedpriv`` console script."""
    parser = argparse.ArgumentParser(prog="fedpriv", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (add_args, _) in COMMANDS.items():
        add_args(sub.add_parser(name))
    args = parser.parse_args(argv)
    return COMMANDS[args.command][1](args)


import scenarios.plugins  # noqa: E402,F401  (feature registrations)

if __name__ == "__main__":  # run the registered module, not this __main__ copy
    from scenarios.cli import main as _registered_main

    raise SystemExit(_registered_main())
