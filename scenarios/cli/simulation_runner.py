"""Run the app on Flower's simulation engine (Ray) in this process, offline.

``python -m fedpriv.scenarios.cli.simulation_runner --app DIR --num-supernodes N [--backend-config
JSON]
[--run-config "k=v ..."]`` is what ``flower-simulation`` was up to Flower 1.41: it reads
the app's ``[tool.flwr.app]`` components and config from ``DIR/pyproject.toml``, fuses the
overrides into the run config, and starts the ServerApp and the ClientApps through
``flwr.simulation.run_simulation._run_simulation`` (the function behind ``run_simulation``
that also takes the run config and the app directory).

Why not ``flwr run .`` (Flower 1.42): its default connection auto-starts a detached local
SuperLink that installs the app's dependencies at run time, which needs the network; here
nothing is installed or downloaded, and the exit status is the run's (``flwr run`` exits 0
whatever happens). Ray is initialised here, before Flower's backend would
(:mod:`fedpriv.scenarios.cli.ray_cluster`: attach to ``init-args.address``, forward
``--forward-env`` to
the workers, exit 2 with one line when the clients ask for GPUs Ray does not see, and with
``--share N`` size the actor pool for N simulations on one cluster); a local Ray starts one
at a time on the machine and is retried when it misses Ray's start-up deadlines
(:mod:`fedpriv.scenarios.cli.ray_start`), else the run exits 2 with the reason in one line.

Start-up and exit are kept short (:func:`run`): the ClientApp's module (TensorFlow and Keras)
is imported in a thread while Ray starts, whose processes the runner only waits for; Flower's
simulation module, which imports TensorFlow too, is imported after both. When the simulation
ends, the process exits once its ``atexit`` handlers ran, without the interpreter's own
teardown of TensorFlow's and Ray's modules (seconds on a small machine, nothing left to write).
Uses Flower internals of the pinned simulation stack (flwr 1.42.0); the base install (the
wrappers) does not import this module.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import json
import os
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TextIO

from fedpriv.scenarios.cli.in_process import is_in_process

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m fedpriv.scenarios.cli.simulation_runner")
    parser.add_argument("--app", required=True, help="the Flower app directory")
    parser.add_argument("--num-supernodes", type=int, required=True)
    parser.add_argument("--backend-config", default="{}", help="JSON, as in pyproject")
    parser.add_argument("--run-config", default="", help="Flower --run-config overrides")
    parser.add_argument("--share", type=int, default=1, help="simulations sharing the cluster")
    parser.add_argument("--forward-env", default="", help="comma-separated variables for workers")
    parser.add_argument(
        "--node-config", default="{}", help="JSON: every simulated node's own settings"
    )
    return parser.parse_args(argv)


def _underscored(value: Any) -> Any:
    """``value`` with every dict key's ``-`` replaced by ``_`` (what Flower's
    ``run_simulation._replace_keys`` does; that module imports TensorFlow, here not yet)."""
    if isinstance(value, dict):
        return {str(k).replace("-", "_"): _underscored(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_underscored(v) for v in value]
    return value


def _backend_config(text: str) -> dict[str, Any]:
    """pyproject's backend options with Flower's internal ``_`` keys."""
    return _underscored(json.loads(text)) if text else {}


def _start_ray(args: argparse.Namespace, backend: dict[str, Any]) -> str | None:
    """Initialise Ray (attached to ``init_args.address`` if set; a local one under the
    machine's start lock, retried: :func:`fedpriv.scenarios.cli.ray_start.start_local_ray`)
    and check its GPUs; the one-line reason the run cannot start, or None
    (:mod:`fedpriv.scenarios.cli.ray_cluster`)."""
    import ray
    from fedpriv.scenarios.cli import ray_cluster

    init_args = dict(backend.get("init_args", {}))
    address = str(init_args.get("address", "") or "")
    need = float(backend.get("client_resources", {}).get("num_gpus", 0.0) or 0.0)
    if need > 0 and not address:  # a local Ray: its GPUs are known before it starts
        reason = ray_cluster.gpu_shortage(need, {"GPU": ray_cluster.local_gpus()}, "")
        if reason is not None:
            return reason
    per_client = float(backend.get("client_resources", {}).get("num_cpus", 1) or 1)
    prestart = args.share == 1 and per_client == 1 and need == 0  # actors = workers per CPU
    if not address and args.share == 1 and (need > 0 or _fewer_actors_than_cpus(args, per_client)):
        # a local Ray with the CPUs of its actors: a GPU federation's, or a CPU one of fewer
        # workers than CPUs (else Ray would start a worker per CPU, each importing TensorFlow
        # in its setup hook, for actors that never come: 3.1 CPU-s for one worker on 2 CPUs)
        init_args = ray_cluster.sized_for_actors(init_args, per_client, args.num_supernodes)
    forward = [k for k in args.forward_env.split(",") if k]
    if address:  # someone else's cluster: attach once
        ray_cluster.init_ray(init_args, forward, prestart)
    else:  # a local Ray beside other simulations: one start at a time, retried, or why not
        from fedpriv.scenarios.app.startup import status
        from fedpriv.scenarios.cli.ray_start import start_local_ray

        start_local_ray(
            lambda: ray_cluster.init_ray(init_args, forward, prestart),
            lambda text: status("starting Ray", text),
        )
    reason = ray_cluster.gpu_shortage(need, ray.cluster_resources(), address)
    if reason is not None:
        ray.shutdown()
        return reason
    return None


def _fewer_actors_than_cpus(args: argparse.Namespace, per_client: float) -> bool:
    """Whether this simulation's actors need fewer CPUs than a local Ray takes by default (the
    machine's: Ray counts neither ``$FEDPRIV_CPUS`` nor this process's affinity)."""
    return args.num_supernodes * per_client < (os.cpu_count() or 1)


def _console() -> TextIO:
    """This process's standard error as it is now, on a descriptor of its own: the
    preload's quiet TensorFlow import points descriptor 2 at a capture file for the import's
    seconds (:func:`fedpriv.scenarios.app.quiet.import_quietly`), and a line written there
    then reaches the console only when the import ends, never when the process exits first
    (a Ray that did not start: the reason was lost, and run.log held its header alone)."""
    try:
        return os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
    except (OSError, ValueError, AttributeError):  # no real descriptor (a test's stand-in)
        return sys.stderr


class _Preload(threading.Thread):
    """Import modules in a thread, in order (the ClientApp's and the ServerApp's: TensorFlow,
    Keras, scikit-learn, matplotlib, seconds of CPU) while the main thread waits for Ray's
    processes; :meth:`result` joins and re-raises."""

    def __init__(self, *modules: str) -> None:
        super().__init__(name="fedpriv-preload", daemon=True)
        self.modules = modules
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for module in self.modules:
                importlib.import_module(module)
        except BaseException as err:  # noqa: BLE001 -- re-raised in the main thread
            self.error = err

    def result(self) -> None:
        """Wait for the import; its exception, if any, raised here."""
        self.join()
        if self.error is not None:
            raise self.error


def _engine_started(supernodes: int) -> None:
    """The start-up line of a started Ray: its CPUs, and the workers it starts next."""
    import ray
    from fedpriv.scenarios.app.startup import status

    cpus = int(ray.cluster_resources().get("CPU", 0))
    status("engine started", f"Ray with {cpus} CPUs; starting {supernodes} ClientApp workers")


def _flower_run(args: argparse.Namespace, app_dir: Path) -> tuple[Any, Any]:
    """Flower's ``Run`` of this simulation and the ServerApp's ``Context`` (the app's config
    fused with ``--run-config``); sets the task identity Flower's messages carry."""
    from flwr.app import Context, RecordDict
    from flwr.app.user_config import UserConfig
    from flwr.common.config import get_fused_config_from_dir, parse_config_args
    from flwr.common.constant import RUN_ID_NUM_BYTES, SUPERLINK_NODE_ID, TASK_ID_NUM_BYTES
    from flwr.server.superlink.linkstate.utils import generate_rand_int_from_bytes
    from flwr.supercore.constant import NOOP_FEDERATION_ID
    from flwr.supercore.run import Run
    from flwr.supercore.task_identity import TaskIdentity

    overrides = parse_config_args([args.run_config] if args.run_config else [])
    run_id = generate_rand_int_from_bytes(RUN_ID_NUM_BYTES)
    flower_run = Run.create_empty(run_id=run_id)
    flower_run.override_config = overrides
    flower_run.primary_task_id = generate_rand_int_from_bytes(TASK_ID_NUM_BYTES)
    flower_run.federation_id = NOOP_FEDERATION_ID
    TaskIdentity.task_id = 1
    TaskIdentity.run_id = run_id
    TaskIdentity.node_id = SUPERLINK_NODE_ID
    context = Context(
        run_id=run_id,
        node_id=0,
        node_config=UserConfig(),
        state=RecordDict(),
        run_config=get_fused_config_from_dir(app_dir, overrides),
    )
    return flower_run, context


def run(argv: list[str] | None = None) -> int:
    """Start the simulation described by ``argv``; 0 when the ServerApp completed."""
    from fedpriv.scenarios.app import startup

    startup.mark("runner started")
    args = _parse(argv)
    app_dir = Path(args.app).resolve()
    with (app_dir / "pyproject.toml").open("rb") as fh:
        components = tomllib.load(fh)["tool"]["flwr"]["app"]["components"]
    backend = _backend_config(args.backend_config)
    if is_in_process(backend):
        return _run_in_process(args, app_dir, components, backend)
    # the ClientApp's and the ServerApp's modules, imported before Flower starts its threads:
    # Flower loads the ClientApp in its engine thread while the ServerApp thread runs, and a
    # resumed ServerApp unpickles its checkpoint (which imports fedpriv.privacy.accounting too)
    # at once; two threads importing the same package cycle get a partially initialised
    # module (ImportError). Imported while Ray starts: the main thread meanwhile imports only
    # Ray's own modules (ray and this package's Ray helpers first), Flower's after the import.
    import ray  # noqa: F401
    from fedpriv.scenarios.cli import ray_cluster  # noqa: F401

    _note_processes_at_shutdown()
    from fedpriv.scenarios.cli.ray_start import one_line

    console = _console()  # before the preload thread captures descriptor 2
    preload = _Preload(*(components[app].split(":")[0] for app in ("clientapp", "serverapp")))
    preload.start()
    try:
        reason = _start_ray(args, backend)
    except Exception as err:  # noqa: BLE001 -- e.g. no Ray cluster at the address: one line
        text = str(err)
        reason = text if text.startswith("Ray did not start") else f"Ray did not start: {text}"
        reason = one_line(reason, 600)
    if reason is not None:
        from fedpriv.scenarios.app.quiet import REFUSAL_PREFIX

        print(f"{REFUSAL_PREFIX}{reason}", file=console, flush=True)
        return 2
    startup.mark("Ray started")
    try:
        preload.result()  # Flower's modules too: imported in the main thread only after it
        startup.mark("apps imported")
        _engine_started(args.num_supernodes)
        from fedpriv.scenarios.cli import ray_cluster

        ray_cluster.share_actor_pool(args.share, args.num_supernodes)
        _simulate(args, app_dir, components, backend)
    except Exception as err:  # noqa: BLE001 -- the run failed: its traceback (run.log), one line
        return _failed(err)
    return 0


def _failed(err: Exception) -> int:
    """The failed run's traceback (run.log) and its one line; exit status 1."""
    traceback.print_exc(file=sys.stderr)
    print(f"fedpriv: the simulation failed: {err}", file=sys.stderr)
    return 1


def _simulate(
    args: argparse.Namespace, app_dir: Path, components: dict[str, str], backend: dict[str, Any]
) -> None:
    """Flower's simulation engine on this process's backend (Ray's, or the in-process one)."""
    from fedpriv.scenarios.cli import engine_polling
    from fedpriv.scenarios.cli.simulated_nodes import use_node_settings
    from flwr.simulation.run_simulation import _run_simulation
    from flwr.supercore.telemetry import EventType

    flower_run, context = _flower_run(args, app_dir)
    use_node_settings(args.node_config)
    engine_polling.use_fast_polling(args.num_supernodes)
    _run_simulation(
        num_supernodes=args.num_supernodes,
        exit_event=EventType.PYTHON_API_RUN_SIMULATION_LEAVE,
        server_app_attr=components["serverapp"],
        client_app_attr=components["clientapp"],
        server_app_context=context,
        backend_config=backend,
        app_dir=str(app_dir),
        run=flower_run,
        is_app=True,
    )


def _run_in_process(
    args: argparse.Namespace, app_dir: Path, components: dict[str, str], backend: dict[str, Any]
) -> int:
    """The simulation with every ClientApp in this process (:mod:`fedpriv.scenarios.cli.
    in_process`): no Ray is imported or started; 2 with one line when the federation asks
    for what it cannot do (a Ray cluster, GPUs)."""
    from fedpriv.scenarios.app import startup
    from fedpriv.scenarios.app.quiet import REFUSAL_PREFIX
    from fedpriv.scenarios.cli.in_process import check_federation, use_in_process_backend
    from fedpriv.scenarios.config.schema import ConfigError

    try:  # the launcher checked its federation already; a backend config given here directly
        check_federation("--backend-config", backend)
    except ConfigError as err:
        print(f"{REFUSAL_PREFIX}{err}", file=_console(), flush=True)
        return 2
    for module in (components[app].split(":")[0] for app in ("clientapp", "serverapp")):
        importlib.import_module(module)  # before Flower's threads (see run)
    startup.mark("apps imported")
    startup.status("engine started", "in-process: every ClientApp in this process, one at a time")
    try:
        use_in_process_backend()
        _simulate(args, app_dir, components, backend)
    except Exception as err:  # noqa: BLE001 -- the run failed: its traceback (run.log), one line
        return _failed(err)
    return 0


# the processes below this one when Ray was shut down (:func:`_note_processes_at_shutdown`)
_BEFORE_SHUTDOWN: dict[int, int] = {}


def _note_processes_at_shutdown() -> None:
    """Make ``ray.shutdown`` note the processes below this one first (a local Ray's GCS,
    raylet, agents and workers, with their start times) in :data:`_BEFORE_SHUTDOWN`: Flower's
    backend shuts Ray down when the simulation ends, and its workers, their raylet gone, are
    then no longer below this process; :func:`end_process` ends the ones still running."""
    import ray
    from fedpriv.scenarios.cli.ray_start import descendants, snapshot

    shutdown = ray.shutdown

    def noted(*args: Any, **kwargs: Any) -> Any:
        _BEFORE_SHUTDOWN.update(snapshot(descendants(os.getpid())))
        return shutdown(*args, **kwargs)

    ray.shutdown = noted


def end_process(code: int, exit_now: Callable[[int], Any] = os._exit) -> NoReturn:
    """Exit with ``code`` once the other non-daemon threads ended and the ``atexit`` handlers
    ran (Ray's shutdown among them), with stdout and stderr flushed; without the
    interpreter's teardown of every module (TensorFlow's, Ray's: seconds, nothing written).
    No process this one started outlives it: what runs below it before the shutdown (a
    local Ray's GCS, raylet, agents and workers) and still runs after it is ended
    (:func:`fedpriv.scenarios.cli.ray_start.end_processes`)."""
    from fedpriv.scenarios.cli.ray_start import descendants, end_processes, snapshot

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    started = {**_BEFORE_SHUTDOWN, **snapshot(descendants(os.getpid()))}
    atexit._run_exitfuncs()
    end_processes(started)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    exit_now(code)
    raise SystemExit(code)  # only reached when exit_now returns (a test's stand-in)


if __name__ == "__main__":
    end_process(run())
