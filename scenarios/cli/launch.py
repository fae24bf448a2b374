"""The ``fedpriv run`` command and the launch helpers every simulating command shares.

``fedpriv run`` is ``flwr run .`` with the checks first: the run config is resolved and
every value checked, and the data source opened, before the simulation starts. A bad
value prints one line and exits with status 2 (``flwr run`` itself exits 0 whatever the run
does). The simulation runs in-process on Flower 1.42's simulation engine
(:mod:`fedpriv.scenarios.cli.simulation_runner`: offline, no SuperLink, nothing installed at run
time)
with the federation's options from ``pyproject.toml [tool.fedpriv.federations]``; the
number of SuperNodes is the scenario's ``num-clients``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from fedpriv.scenarios.app import quiet, startup
from fedpriv.scenarios.cli.in_process import check_federation
from fedpriv.scenarios.cli.node_state import (
    SUMMARY_KEY,
    Earlier,
    check_server_folder,
    earlier_releases,
    federation_block,
    federation_line,
    lifetime_lines,
    simulation_server_state,
    simulation_state_root,
)
from fedpriv.scenarios.cli.ray_cluster import Federation, check_address, federation_of, with_address
from fedpriv.scenarios.cli.simulated_nodes import node_settings
from fedpriv.scenarios.config.feature import Catalog, Command
from fedpriv.scenarios.config.overrides import (  # noqa: F401  (re-exported: the commands' parser)
    DuplicateKeyError,
    check_unique_keys,
    parse_overrides,
)
from fedpriv.scenarios.config.schema import ConfigError

from fedpriv.privacy.ledger.server import SERVER_STATE_ENV
from fedpriv.privacy.ledger.store import SYNC_ENV
from fedpriv.privacy.releases import STATE_ROOT_ENV
from fedpriv.reporting.live import RoundBar

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

APP_DIR = Path(__file__).resolve().parents[2]
PREFIX = "fedpriv:"


def pyproject() -> dict[str, Any]:
    """The app's pyproject.toml."""
    with (APP_DIR / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)


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
    """:func:`preflight` and the run state (``fedpriv.scenarios.cli.preflight.RunState``)."""
    from fedpriv.scenarios.cli.preflight import check_environment

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
    check_federation(federation.name, settings["backend"])
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
    node_config: Mapping[str, Any] | None = None,
) -> list[str]:
    """``python -m fedpriv.scenarios.cli.simulation_runner`` for the Flower app in ``app_dir``;
    ``share``
    simulations side by side on one Ray cluster, ``forward_env`` for its workers
    (:mod:`fedpriv.scenarios.cli.ray_cluster`)."""
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.simulation_runner", "--app", str(app_dir)]
    cmd += ["--num-supernodes", str(int(num_supernodes))]
    if share > 1:
        cmd += ["--share", str(int(share))]
    if forward_env:
        cmd += ["--forward-env", ",".join(forward_env)]
    if backend:
        cmd += ["--backend-config", json.dumps(dict(backend))]
    if run_config:
        cmd += ["--run-config", run_config]
    if node_config:
        cmd += ["--node-config", json.dumps(dict(node_config))]
    return cmd


# variables the simulation sets for its own processes that an attached Ray cluster's workers
# need too (they do not inherit the driver's environment;
# fedpriv.scenarios.cli.ray_cluster.init_ray)
WORKER_ENV = ("KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL", "TF_NUM_INTEROP_THREADS",
              "TF_NUM_INTRAOP_THREADS", "PYTHONUNBUFFERED", STATE_ROOT_ENV, SYNC_ENV,
              SERVER_STATE_ENV)  # fmt: skip


def simulation_command(
    cfg: dict[str, Any], overrides: Sequence[str], federation: str | Federation, share: int = 1
) -> list[str]:
    """The simulation of ``cfg`` on ``federation``
    (:func:`fedpriv.scenarios.speed.workers.simulation_size`
    SuperNodes), in-process and offline (``fedpriv.scenarios.cli.simulation_runner``)."""
    from fedpriv.scenarios.speed.workers import simulation_size

    settings = federation_settings(federation)
    size, overrides = simulation_size(cfg, overrides, settings.get("backend", {}))
    forward = sorted({*settings.get("env", {}), *WORKER_ENV})
    return runner_command(
        APP_DIR, size, settings.get("backend", {}), " ".join(overrides),
        share=share, forward_env=forward, node_config=node_settings(cfg),
    )  # fmt: skip


def simulation_supernodes(
    cfg: dict[str, Any], overrides: Sequence[str], federation: str | Federation
) -> int:
    """The SuperNodes the simulation of ``cfg`` starts (workers, zones or one per client)."""
    from fedpriv.scenarios.speed.workers import simulation_size

    backend = federation_settings(federation).get("backend", {})
    return simulation_size(cfg, overrides, backend)[0]


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
        help="where the clients run: local-simulation (CPU, the default), "
        "local-simulation-gpu (GPUs) or ray-cluster (an existing Ray cluster)",
    )
    parser.add_argument(
        "--ray-address",
        default="",
        action=_RayAddressAction,
        help="attach to this Ray cluster: auto | HOST:PORT (default: the federation's "
        "ray-address, else a local Ray); see docs/multi-machine.md",
    )


def _run_args(parser: argparse.ArgumentParser) -> None:
    add_run_config_option(
        parser, "settings that replace the defaults, e.g. \"scenario='digits' seed=1\""
    )
    add_federation_option(parser)
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show every line of TensorFlow, Ray and Flower too (also: FEDPRIV_LOG=debug); "
        "the full log is always in <output-dir>/run.log",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (final metrics, privacy figures, output folder) on "
        "stdout and everything else on stderr",
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


def single_threaded_tf(cfg: Mapping[str, Any]) -> dict[str, str]:
    """TensorFlow thread pools of one thread per process for a run with zone nodes (issue
    21): a zone node trains its clients one tiny call after another, and with two workers on
    two cores the default pools only contend (measured: 100 hdp-paper client trainings 0.26 s
    against 0.38 s per worker). Variables set in the environment win."""
    from fedpriv.scenarios.zonal.keys import zone_nodes

    if not zone_nodes(cfg):
        return {}
    return {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def _is_round_line(line: str) -> bool:
    return line.startswith(f"{PREFIX} round ")


def progress_line(line: str) -> bool:
    """What a multi-run command (grid, audit, attack) shows of its simulation: the progress
    lines with their ETA, the engine's start-up lines and the driver's warnings, not each
    cell's round lines or its own start-up lines (data loaded, model built)."""
    from fedpriv.reporting.console import PER_RUN_STEPS, is_startup_line

    text = quiet.plain(line)
    return (quiet.is_console_line(line) and not _is_round_line(text)
            and not is_startup_line(text, PER_RUN_STEPS))  # fmt: skip


def simulate(
    cfg: Mapping[str, Any],
    overrides: Sequence[str],
    federation: str | Federation,
    *,
    log_path: Path | None = None,
    show: Callable[[str], bool] = progress_line,
    to_stderr: bool = False,
    loud: bool | None = None,
    share: int = 1,
    bar: bool = False,
    start: float | None = None,
) -> int:
    """Start the simulation of ``cfg``; framework noise off unless ``loud`` (default:
    ``FEDPRIV_LOG=debug``, :mod:`fedpriv.scenarios.app.quiet`).

    Without ``log_path`` its output goes to the console (stderr with ``to_stderr``, keeping
    stdout for a command's answer); with it, every line goes to ``log_path`` and the lines
    ``show`` accepts (every line when ``loud``) also to the console, above a progress bar of
    the rounds with an ETA when ``bar`` and the console is a terminal
    (:class:`fedpriv.reporting.live.RoundBar`; a pipe or a file gets the lines alone).
    ``start``: when the command started (default now), for the start-up lines' seconds and
    summary.json's ``wall_seconds`` (:mod:`fedpriv.scenarios.app.startup`).
    """
    loud = quiet.verbose() if loud is None else loud
    env = federation_env(federation, quiet.simulation_env(dict(os.environ), loud=loud))
    env["PYTHONUNBUFFERED"] = "1"
    env[startup.RUN_START_ENV] = repr(time.time() if start is None else start)  # its clock
    env = {**single_threaded_tf(cfg), **env}
    env[STATE_ROOT_ENV] = simulation_state_root(cfg, env)
    env[SERVER_STATE_ENV] = simulation_server_state(cfg, env)
    env.setdefault(SYNC_ENV, "normal")  # a simulated federation: survives kills, not power loss
    cmd = simulation_command(dict(cfg), overrides, federation, share)
    out = sys.stderr if to_stderr else sys.stdout
    if log_path is None:
        pipe = sys.stderr if to_stderr else None
        return subprocess.run(
            cmd, cwd=os.getcwd(), env=env, stdout=pipe, stderr=pipe, check=False
        ).returncode
    with (
        quiet.open_log(log_path) as log,  # the operator's: a notice, then line-buffered lines
        subprocess.Popen(
            cmd,
            cwd=os.getcwd(),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as proc,
    ):
        _relay(proc.stdout, log, out, lambda x: loud or show(x), bar and not loud)
    return proc.returncode


def _relay(lines: Iterable[str], log: TextIO, out: TextIO, shown: Callable[[str], bool],
           bar: bool) -> None:  # fmt: skip
    """Every line to ``log``, the ``shown`` ones to ``out``: plain text unless ``out`` is a
    terminal, there above the rounds bar when ``bar``; the reason a run could not start
    (:func:`fedpriv.scenarios.app.quiet.is_refusal_line`) to standard error."""
    tty = out.isatty()
    with RoundBar(out) if bar and tty else contextlib.nullcontext() as live:
        for line in lines:
            log.write(line)
            if not shown(line):
                continue
            if quiet.is_refusal_line(line):  # why the run could not start: an error
                print(quiet.plain(line), end="", file=sys.stderr, flush=True)
            elif live is not None:
                live.line(line)
            else:
                print(line if tty else quiet.plain(line), end="", file=out, flush=True)


def log_tail(log_path: Path, lines: int = 15) -> list[str]:
    """The last ``lines`` lines of a run's log (for a failed run's message)."""
    if not log_path.is_file():
        return []
    return [quiet.plain(x) for x in log_path.read_text(errors="replace").splitlines()[-lines:]]


def _report_failure(returncode: int, log_path: Path, loud: bool) -> None:
    """A refusal before the start (exit status 2: the runner printed one ``fedpriv:`` line,
    e.g. a GPU federation on a host where Ray sees no GPU, or a Ray that did not start),
    which the console already showed (a ``fedpriv`` line), is that line alone, once; any
    other failure is the status, the end of the log and where the log is."""
    refusal = [x for x in log_tail(log_path) if quiet.is_refusal_line(x)]
    if returncode == 2 and refusal:  # the runner's one line: already on standard error
        return
    print(f"fedpriv: the simulation failed (exit status {returncode})", file=sys.stderr)
    if not loud:  # the console showed only the run's lines: give the end of the log
        for line in log_tail(log_path):
            print(f"  | {line}", file=sys.stderr)
    print(f"fedpriv: full log: {log_path}", file=sys.stderr)


def _finish(
    cfg: Mapping[str, Any],
    summary_path: Path,
    args: argparse.Namespace,
    t0: float,
    earlier: Earlier | None = None,
):
    """The summary of a finished run, then its machine-readable last line. summary.json's
    ``wall_seconds`` becomes the command's whole time (the simulation wrote it before its
    last outputs and its shutdown): the figure "done in" shows."""
    from fedpriv.reporting.console import summary_lines

    summary = json.loads(summary_path.read_text())
    summary["wall_seconds"] = wall = time.time() - t0
    earlier = earlier or Earlier(0, 0, None)
    summary["federation"] = federation_block(cfg, earlier, summary.get(SUMMARY_KEY))
    tmp = summary_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=True))
    tmp.replace(summary_path)
    final = summary.get("final", {})
    if args.json:  # stdout: one JSON object (the console lines went to stderr)
        doc = {"final": final, "output_dir": str(cfg["output-dir"])}
        doc["privacy_figures"] = summary.get("privacy_figures")
        print(json.dumps(doc, sort_keys=True), flush=True)
        return
    for line in [*summary_lines(summary, cfg["output-dir"], wall),
                 *lifetime_lines(summary["federation"])]:  # fmt: skip
        print(line, flush=True)
    print(f"{PREFIX} final " + json.dumps(final, sort_keys=True), flush=True)


def finished_hint(output_dir: str, verbose: bool) -> str:
    """What to do about a config whose run is finished: its outputs, and how to run again."""
    out = Path(output_dir)
    again = f"to run it again, remove {out} or pass another -c \"output-dir='...'\""
    text = f"fedpriv: {out} holds a finished run of this config; nothing to do ({again})"
    if verbose:  # --verbose asks for the framework lines of a run: this one's are in its log
        log = out / quiet.LOG_NAME
        text += f"\nfedpriv: --verbose shows every line of a new run; this run's are in {log}"
    return text


def run(args: argparse.Namespace, catalog: Catalog) -> int:
    """``fedpriv run``: checks first (exit 2 on bad input), then the simulation."""
    from fedpriv.data import DataError

    t0 = time.time()
    try:
        federation_settings(federation_of(args))  # with its --ray-address
        cfg, state = preflight_state(app_config(parse_overrides(args.run_config)), catalog)
    except (ConfigError, DataError) as err:
        print(f"fedpriv: {err}", file=sys.stderr)
        return 2
    say = sys.stderr if args.json else sys.stdout
    if state.action == "finished":
        print(finished_hint(cfg["output-dir"], args.verbose), file=say)
        return 0
    if state.action == "resume":
        print(f"fedpriv: resuming {cfg['output-dir']} after round {state.round}", file=say)
    print(f"fedpriv: running scenario {cfg['scenario']!r} -> {cfg['output-dir']}", file=say)
    refused = check_server_folder(cfg)
    if refused:
        print(refused, file=sys.stderr)
        return 2
    earlier = earlier_releases(cfg)
    notice = federation_line(cfg, earlier)
    if notice:
        print(notice, file=say)
    supernodes = simulation_supernodes(cfg, args.run_config, federation_of(args))
    print(startup.engine_line(supernodes, time.time() - t0), file=say, flush=True)
    loud = args.verbose or quiet.verbose()
    log_path = Path(cfg["output-dir"]) / quiet.LOG_NAME
    returncode = simulate(
        cfg,
        args.run_config,
        federation_of(args),
        log_path=log_path,
        show=quiet.is_console_line,
        to_stderr=args.json,
        loud=loud,
        bar=True,
        start=t0,
    )
    summary = Path(cfg["output-dir"]) / "summary.json"
    if returncode != 0:
        _report_failure(returncode, log_path, loud)
        return returncode
    if cfg["run-plan"]:
        return 0
    if not summary.exists():
        print("fedpriv: the simulation ended without a summary.json", file=sys.stderr)
        return 1
    _finish(cfg, summary, args, t0, earlier)
    return 0


COMMANDS = (
    Command(
        "run",
        _run_args,
        run,
        "Train a scenario with its privacy mode and print one line per round.",
        "fedpriv run\nfedpriv run -c \"scenario='digits' privacy='global-dp' num-server-rounds=5\"",
    ),
)
