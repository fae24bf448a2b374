"""The core ``fedpriv`` commands (``run``, ``keys``, ``scenarios``) and launch helpers.

``fedpriv run`` is ``flwr run .`` with the checks first: the run config is resolved and
every value checked, and the data source opened, before the simulation starts. A bad
value prints one line and exits with status 2 (``flwr run`` itself exits 0 whatever the run
does). The simulation runs in-process on Flower 1.42's simulation engine
(:mod:`scenarios.simulation_runner`: offline, no SuperLink, nothing installed at run time)
with the federation's options from ``pyproject.toml [tool.fedpriv.federations]``; the
number of SuperNodes is the scenario's ``num-clients``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scenarios.feature import Catalog, Command
from scenarios.ray_cluster import Federation, check_address, federation_of, with_address
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


# Flower's --run-config item: key=value, the value quoted or up to the next space
# (flwr.common.config.parse_config_args).
_ITEM = re.compile(r"(\S+?)=(\'[^\']*\'|\"[^\"]*\"|\S+)")


class DuplicateKeyError(ConfigError):
    """A --run-config key given twice (Flower would fail on it or keep the last silently)."""

    def __init__(self, key: str, first: str, second: str) -> None:
        ValueError.__init__(
            self,
            f"config error: --run-config gives {key} twice ({key}={first}, {key}={second}); "
            "expected each key once",
        )
        self.key, self.value, self.allowed = key, second, "each key once"


def check_unique_keys(items: Sequence[str]) -> None:
    """Refuse a key that appears twice across the ``--run-config`` items."""
    seen: dict[str, str] = {}
    for item in items:
        for key, value in _ITEM.findall(item):
            if key in seen:
                raise DuplicateKeyError(key, seen[key], value)
            seen[key] = value


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Flower's ``--run-config`` syntax (``"a=1 b='x'"``, TOML values) to a dict; a key given
    twice or an item that is not TOML raises :class:`ConfigError` (one line)."""
    if not items:
        return {}
    from flwr.common.config import parse_config_args

    check_unique_keys(items)
    try:
        return dict(parse_config_args(list(items)))
    except Exception as err:  # noqa: BLE001 -- click.ClickException, TOML and file errors
        text = " ".join(items)
        raise ConfigError(
            "--run-config", text, "space-separated key=value pairs with TOML values"
        ) from err


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


def federations() -> dict[str, dict[str, Any]]:
    """pyproject's ``[tool.fedpriv.federations]``: name -> {backend, env} (simulation only)."""
    return pyproject().get("tool", {}).get("fedpriv", {}).get("federations", {})


def federation_settings(federation: str | Federation) -> dict[str, Any]:
    """The federation (a name, or a :class:`Federation` with its ``--ray-address``), its
    backend attached to the Ray cluster of ``ray-address`` when one is set; ConfigError naming
    the federations there are, or the addresses allowed."""
    if isinstance(federation, str):
        federation = Federation(federation)
    table = federations()
    if federation.name not in table:
        raise ConfigError("federation", federation.name, "one of " + " | ".join(table))
    settings = dict(table[federation.name])
    address = federation.ray_address or str(settings.get("ray-address", ""))
    try:
        check_address(address)
    except ValueError as err:
        raise ConfigError("ray-address", address, "'auto' or HOST:PORT") from err
    settings["backend"] = with_address(settings.get("backend", {}), address)
    return settings


def federation_env(name: str | Federation, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with the federation's ``env`` added where ``base`` does not set the variable
    (a user's ``KERAS_BACKEND=tensorflow`` wins over the GPU federation's ``jax``)."""
    extra = {k: str(v) for k, v in federation_settings(name).get("env", {}).items()}
    return {**extra, **base}


def runner_command(
    app_dir: Path,
    num_supernodes: int,
    backend: Mapping[str, Any],
    run_config: str,
    *,
    share: int = 1,
    forward_env: Sequence[str] = (),
) -> list[str]:
    """``python -m scenarios.simulation_runner`` for the Flower app in ``app_dir``; ``share``
    simulations side by side on one Ray cluster, ``forward_env`` for its workers
    (:mod:`scenarios.ray_cluster`)."""
    cmd = [sys.executable, "-m", "scenarios.simulation_runner", "--app", str(app_dir)]
    cmd += ["--num-supernodes", str(int(num_supernodes))]
    if share > 1:
        cmd += ["--share", str(int(share))]
    if forward_env:
        cmd += ["--forward-env", ",".join(forward_env)]
    if backend:
        cmd += ["--backend-config", json.dumps(dict(backend))]
    if run_config:
        cmd += ["--run-config", run_config]
    return cmd


# variables the simulation sets for its own processes that an attached Ray cluster's workers
# need too (they do not inherit the driver's environment; scenarios.ray_cluster.init_ray)
WORKER_ENV = ("KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL", "TF_NUM_INTEROP_THREADS",
              "TF_NUM_INTRAOP_THREADS", "PYTHONUNBUFFERED")  # fmt: skip


def simulation_command(
    cfg: dict[str, Any], overrides: Sequence[str], federation: str | Federation, share: int = 1
) -> list[str]:
    """The simulation of ``cfg`` on ``federation``: ``num-clients`` SuperNodes (one per zone
    with zone nodes, :func:`scenarios.keys_zonal.federation_size`), in-process
    and offline (``scenarios.simulation_runner``; ``flower-simulation`` up to Flower 1.41)."""
    settings = federation_settings(federation)
    from scenarios.keys_zonal import federation_size

    forward = sorted({*settings.get("env", {}), *WORKER_ENV})
    return runner_command(APP_DIR, federation_size(cfg), settings.get("backend", {}),
                          " ".join(overrides), share=share, forward_env=forward)  # fmt: skip


def add_run_config_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    """The ``--run-config`` / ``-c`` option every command shares (repeatable, Flower syntax)."""
    parser.add_argument("--run-config", "-c", action="append", default=[], help=help_text)


class _FederationAction(argparse.Action):
    """``--federation NAME``: a name of ``[tool.fedpriv.federations]``, else one line, exit 2."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001
        try:
            federation_settings(str(values))
        except ConfigError as err:
            parser.exit(2, f"fedpriv: {err}\n")
        setattr(namespace, self.dest, values)


class _RayAddressAction(argparse.Action):
    """``--ray-address auto | HOST:PORT``, else one line, exit 2."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001
        try:
            setattr(namespace, self.dest, check_address(str(values)))
        except ValueError as err:
            parser.exit(2, f"fedpriv: {err}\n")


def add_federation_option(parser: argparse.ArgumentParser) -> None:
    """The ``--federation`` option of every command that starts simulations."""
    parser.add_argument(
        "--federation",
        default="local-simulation",
        action=_FederationAction,
        help="a [tool.fedpriv.federations] name: local-simulation (CPU) | local-simulation-gpu | "
        "ray-cluster (an existing Ray cluster)",
    )
    parser.add_argument(
        "--ray-address",
        default="",
        action=_RayAddressAction,
        help="attach to this Ray cluster: auto | HOST:PORT (default: the federation's "
        "ray-address, else a local Ray); see docs/multi-machine.md",
    )


def _run_args(parser: argparse.ArgumentParser) -> None:
    add_run_config_option(parser, "Flower-style overrides, e.g. \"scenario='digits' seed=1\"")
    add_federation_option(parser)


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


def single_threaded_tf(cfg: Mapping[str, Any]) -> dict[str, str]:
    """TensorFlow thread pools of one thread per process for a run with zone nodes (issue
    21): a zone node trains its clients one tiny call after another, and with two workers on
    two cores the default pools only contend (measured: 100 hdp-paper client trainings 0.26 s
    against 0.38 s per worker). Variables set in the environment win."""
    from scenarios.keys_zonal import zone_nodes

    if not zone_nodes(cfg):
        return {}
    return {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def simulate(
    cfg: Mapping[str, Any],
    overrides: Sequence[str],
    federation: str | Federation,
    *,
    log_path: Path | None = None,
    echo: str = "fedpriv",
    to_stderr: bool = False,
    share: int = 1,
) -> int:
    """Start the simulation of ``cfg``; its output goes to the console (stderr with
    ``to_stderr``, keeping stdout for a command's answer), or to ``log_path`` with the lines
    starting with ``echo`` (progress lines) also shown on the console."""
    env = federation_env(federation, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    env["PYTHONUNBUFFERED"] = "1"
    env = {**single_threaded_tf(cfg), **env}
    cmd = simulation_command(dict(cfg), overrides, federation, share)
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
    returncode = simulate(cfg, args.run_config, federation_of(args))
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
