"""The core ``fedpriv`` commands (``run``, ``keys``, ``scenarios``) and launch helpers.

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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scenarios.feature import Catalog, Command
from scenarios.schema import ConfigError, toml_lines

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

APP_DIR = Path(__file__).resolve().parent.parent


def pyproject() -> dict[str, Any]:
    """The app's pyproject.toml."""
    with (APP_DIR / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Flower's ``--run-config`` syntax (``"a=1 b='x'"``, TOML values) to a dict."""
    from flwr.common.config import parse_config_args

    return dict(parse_config_args(list(items))) if items else {}


def app_config(overrides: dict[str, Any]) -> dict[str, Any]:
    """pyproject's [tool.flwr.app.config] with the overrides applied.

    Installed from a wheel (no pyproject.toml beside the packages), the overrides alone: the
    catalog fills every other key with its default, which the pyproject list mirrors.
    """
    if not (APP_DIR / "pyproject.toml").exists():
        return dict(overrides)
    return {**pyproject()["tool"]["flwr"]["app"]["config"], **overrides}


def preflight(run_config: dict[str, Any], catalog: Catalog) -> dict[str, Any]:
    """Resolve and check the config, then the environment (output dir usable and holding
    no other config's run, data readable and decodable); raises ConfigError / DataError."""
    return preflight_state(run_config, catalog)[0]


def preflight_state(run_config: dict[str, Any], catalog: Catalog) -> tuple[dict[str, Any], Any]:
    """:func:`preflight` and the run state (``scenarios.preflight.RunState``)."""
    from scenarios.preflight import check_environment

    cfg = catalog.resolve_run_config(run_config)
    return cfg, check_environment(cfg, catalog.completion(catalog.kind(cfg)))


def simulation_command(cfg: dict[str, Any], overrides: Sequence[str], federation: str) -> list[str]:
    """The simulation of ``flwr run . FEDERATION``, in-process and offline
    (``scenarios.simulation_runner``, what ``flower-simulation`` was up to Flower 1.41)."""
    federations = pyproject()["tool"]["flwr"]["federations"]
    options = federations[federation].get("options", {})
    cmd = [
        sys.executable,
        "-m",
        "scenarios.simulation_runner",
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


def add_run_config_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    """The ``--run-config`` / ``-c`` option every command shares (repeatable, Flower syntax)."""
    parser.add_argument("--run-config", "-c", action="append", default=[], help=help_text)


def _run_args(parser: argparse.ArgumentParser) -> None:
    add_run_config_option(parser, "Flower-style overrides, e.g. \"scenario='digits' seed=1\"")
    parser.add_argument(
        "--federation", default="local-simulation", help="local-simulation | local-simulation-gpu"
    )


def to_override(key: str, value: Any) -> str:
    """One ``key=value`` item of Flower's --run-config (TOML values)."""
    if isinstance(value, bool):
        return f"{key}={'true' if value else 'false'}"
    if isinstance(value, str):
        if "'" in value:
            raise ConfigError(key, value, "a value without a single quote")
        return f"{key}='{value}'"
    return f"{key}={value!r}"


def run_config_text(overrides: Mapping[str, Any]) -> str:
    """The one --run-config string of ``overrides`` (each key once: flwr refuses duplicates)."""
    return " ".join(to_override(k, v) for k, v in overrides.items())


def simulate(
    cfg: Mapping[str, Any],
    overrides: Sequence[str],
    federation: str,
    *,
    log_path: Path | None = None,
    echo: str = "fedpriv",
    to_stderr: bool = False,
) -> int:
    """Start the simulation of ``cfg``; its output goes to the console (stderr with
    ``to_stderr``, keeping stdout for a command's answer), or to ``log_path`` with the lines
    starting with ``echo`` (progress lines) also shown on the console."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    if federation.endswith("-gpu"):
        env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    else:
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
    cmd = simulation_command(dict(cfg), overrides, federation)
    if log_path is None:
        out = sys.stderr if to_stderr else None
        return subprocess.run(
            cmd, cwd=os.getcwd(), env=env, stdout=out, stderr=out, check=False
        ).returncode
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with (
        log_path.open("a") as log,
        subprocess.Popen(
            cmd,
            cwd=os.getcwd(),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as proc,
    ):
        for line in proc.stdout:
            log.write(line)
            if line.startswith(echo):
                print(line, end="", flush=True)
    return proc.returncode


def run(args: argparse.Namespace, catalog: Catalog) -> int:
    """``fedpriv run``: checks first (exit 2 on bad input), then the simulation."""
    from fedpriv.data import DataError

    try:
        cfg, state = preflight_state(app_config(parse_overrides(args.run_config)), catalog)
    except (ConfigError, DataError) as err:
        print(f"fedpriv: {err}", file=sys.stderr)
        return 2
    if state.action == "finished":
        print(f"fedpriv: {cfg['output-dir']} holds a finished run of this config; nothing to do")
        return 0
    if state.action == "resume":
        print(f"fedpriv: resuming {cfg['output-dir']} after round {state.round}", flush=True)
    print(f"fedpriv: running scenario {cfg['scenario']!r} -> {cfg['output-dir']}", flush=True)
    returncode = simulate(cfg, args.run_config, args.federation)
    summary = Path(cfg["output-dir"]) / "summary.json"
    if returncode == 0 and cfg["run-plan"]:
        return 0
    if returncode == 0 and not summary.exists():
        print("fedpriv: the simulation ended without a summary.json", file=sys.stderr)
        return 1
    if returncode == 0:
        final = json.loads(summary.read_text()).get("final", {})
        print("fedpriv: final " + json.dumps(final, sort_keys=True), flush=True)
    return returncode


def _keys_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--toml",
        action="store_true",
        help="print the [tool.flwr.app.config] lines (one per key, by feature) for pyproject.toml",
    )


def keys(args: argparse.Namespace, catalog: Catalog) -> int:
    """``fedpriv keys``: every run-config key (``--toml``: pyproject.toml's lines)."""
    if args.toml:
        for feature in catalog.features:
            if feature.keys:
                print(f"# {feature.name}")
                print("\n".join(toml_lines(feature.keys)))
        return 0
    for spec in catalog.keys.values():
        print(f"{spec.name:28s} default {spec.default!r:14} allowed: {spec.allowed}")
    return 0


def _no_args(parser: argparse.ArgumentParser) -> None:
    del parser


def scenarios(args: argparse.Namespace, catalog: Catalog) -> int:
    """``fedpriv scenarios``: every scenario with its kind."""
    del args
    for scenario in catalog.scenarios.values():
        print(f"{scenario.name:20s} [{scenario.kind}] {scenario.description}")
    return 0


COMMANDS = (
    Command("run", _run_args, run, "run a scenario (flwr run . with the checks first)"),
    Command("keys", _keys_args, keys, "list the run-config keys"),
    Command("scenarios", _no_args, scenarios, "list the scenarios"),
)
