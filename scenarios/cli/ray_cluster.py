"""Ray for the simulation engine: attach to a cluster, check its GPUs, share it, record placement.

Flower 1.42's simulation engine (``RayBackend``) calls ``ray.init(**backend.init_args)``
unless Ray is already initialised in the process; ``init_args.address`` makes it attach to an
existing cluster (``"auto"`` or ``"HOST:PORT"``) instead of starting one. fedpriv's simulation
runner initialises Ray itself (:func:`init_ray`, the same call Flower makes) so that it can

- forward the federation's environment (``KERAS_BACKEND``, ``CUDA_VISIBLE_DEVICES``, ...) to
  the workers of an attached cluster, whose processes do not inherit the driver's environment;
- refuse, in one line and before any SuperNode starts, a federation whose clients ask for GPUs
  that the cluster does not have (:func:`gpu_shortage`): Ray would otherwise create an empty
  actor pool and the run would wait forever;
- share a cluster between ``N`` simulations run side by side (``fedpriv grid --parallel N``):
  Flower sizes every actor pool to fill the whole cluster (``pool_size_from_resources``), so
  a second simulation's actors would wait for the first one's to end; :func:`share_actor_pool`
  gives each simulation ``max(1, capacity // N)`` actors;
- record which Ray nodes ran a cell's clients (:func:`placement`, written into the cell's
  ``summary.json`` as ``ray_nodes``);
- keep a local Ray closed (:func:`loopback_args`): Ray has no authentication by default, and a
  local Ray started by ``ray.init`` on Linux listens on every interface (its GCS, raylet and
  worker gRPC servers), so any host that reaches the machine could connect a driver and run
  code as the user. A simulation's own Ray binds to 127.0.0.1 instead (docs/multi-machine.md,
  "Network security");
- start a local Ray without the two head processes a simulation never uses, Ray's dashboard
  API server and its autoscaler monitor (:func:`lean_local_head`).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PLACEMENT_KEY = "ray_nodes"
# GPU memory one grid cell of the MP CNN held on an H200 (at most 9.4 GiB for a run of
# four clients), rounded up: the default number of cells side by side on a GPU.
GIB_PER_GPU_CELL = 10.0
CPUS_PER_CELL = 4  # a driver (the ServerApp) and a few client actors; 2 CPUs: one cell at a time
LOOPBACK = "127.0.0.1"
# Ray 2.55 turns a node address of 127.0.0.1 into the machine's network address
# (``services.resolve_ip_for_localhost``) unless "Ray clusters" are off for this platform
# (``ray_constants.ENABLE_RAY_CLUSTER``, read from this variable when ray is imported); with them
# off, the node address is 127.0.0.1 and the GCS, raylet, workers and runtime-env agent listen
# there only (measured: /proc/net/tcp{,6}, tests/test_ray_cluster.py). It changes nothing else
# in ``ray.init`` (only ``ray start`` reads it too).
CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# Ray's worker setup hook (``runtime_env["worker_process_setup_hook"]``, run by every worker
# before it loads an actor class): TensorFlow imported lean and quietly before Flower's actor
# module imports it (fedpriv.scenarios.app.quiet.prepare_worker; ~2 s less per worker start), and
# Flower Arrays sent out of band (fedpriv.scenarios.app.ray_transport).
WORKER_SETUP_HOOK = "fedpriv.scenarios.app.ray_transport.prepare_worker"
# Ray's switch for starting a worker per CPU when the first driver connects (RayConfig
# ``prestart_worker_first_driver``, read by the raylet from its environment)
PRESTART = "RAY_prestart_worker_first_driver"
# Ray's niceness for its workers (RayConfig ``worker_niceness``, default 15, read by the raylet
# from its environment): a local simulation's workers run at this process's priority (0)
WORKER_NICENESS = "RAY_worker_niceness"
# The head processes a local simulation's Ray starts without (:func:`lean_local_head`): the
# methods of the pinned Ray 2.55's ``ray._private.node.Node`` that ``start_head_processes``
# calls to start them, with the parameters they take there (a private API: any other shape
# and Ray starts them as it always did).
LEAN_HEAD = {
    "start_api_server": ("self", "include_dashboard", "raise_on_failure"),
    "start_monitor": ("self",),
}


def address_of(backend: Mapping[str, Any]) -> str:
    """The Ray address a backend config attaches to ('' = start a local Ray)."""
    init = backend.get("init-args", backend.get("init_args", {}))
    return str(init.get("address", "") or "")


def with_address(backend: Mapping[str, Any], address: str) -> dict[str, Any]:
    """``backend`` attached to the Ray cluster at ``address`` (unchanged when it is '')."""
    if not address:
        return dict(backend)
    init = dict(backend.get("init-args", {}))
    init["address"] = address
    return {**backend, "init-args": init}


def gpus_per_client(backend: Mapping[str, Any]) -> float:
    """The GPUs one client actor asks for (``client-resources.num-gpus``, 0 when unset)."""
    resources = backend.get("client-resources", backend.get("client_resources", {}))
    return float(resources.get("num-gpus", resources.get("num_gpus", 0.0)) or 0.0)


def gpu_shortage(num_gpus: float, cluster: Mapping[str, float], address: str) -> str | None:
    """The one-line reason a run cannot start, or None: clients that ask for ``num_gpus`` > 0
    need a cluster with at least that many GPUs (``ray.cluster_resources()``)."""
    seen = float(cluster.get("GPU", 0.0))
    if num_gpus <= 0 or seen >= num_gpus:
        return None
    where = f"the Ray cluster at {address}" if address else "the local Ray"
    return (
        f"client-resources.num-gpus = {num_gpus:g} but {where} sees {seen:g} GPUs; "
        "expected a federation without GPUs (--federation local-simulation) or a host where "
        "Ray sees a GPU (CUDA_VISIBLE_DEVICES, nvidia-smi)"
    )


def local_gpus() -> float:
    """The GPUs a local Ray would give this machine, found the way ``ray.init`` finds them
    (``CUDA_VISIBLE_DEVICES`` when set, else the NVIDIA devices; Ray's accelerator manager),
    without starting Ray: refusing a GPU federation costs no Ray start-up."""
    from ray._private.accelerators import get_accelerator_manager_for_resource

    manager = get_accelerator_manager_for_resource("GPU")
    visible = manager.get_current_process_visible_accelerator_ids()
    if visible is not None:
        return float(len(visible))
    return float(manager.get_current_node_num_accelerators())


def init_ray(
    init_args: Mapping[str, Any], forward_env: Sequence[str], prestart: bool = False
) -> None:
    """``ray.init`` as Flower's ``RayBackend.init_ray`` does it (``PYTHONPATH`` for the
    workers), plus the variables named in ``forward_env`` so that the workers of an attached
    cluster get them too; Ray's start-up banner is not printed (:func:`worker_env`).
    ``prestart``: a local Ray starts its workers as this driver connects (:func:`prestart_env`)."""
    import logging

    import ray

    pythonpath = os.pathsep.join(sys.path)
    if os.environ.get("PYTHONPATH"):
        pythonpath = f"{pythonpath}{os.pathsep}{os.environ['PYTHONPATH']}"
    os.environ["PYTHONPATH"] = pythonpath
    args = {"include_dashboard": False, "logging_level": logging.WARNING, **init_args}
    args = loopback_args(args)
    if not args.get("address"):
        prestart_env(prestart)
        worker_priority_env()
    with lean_local_head(args):
        ray.init(**worker_env(args, forward_env), **args)
    from fedpriv.scenarios.app.ray_transport import register

    register()  # the driver's messages' arrays out of band (the workers': their setup hook)


@contextlib.contextmanager
def lean_local_head(init_args: Mapping[str, Any]) -> Iterator[bool]:
    """While in the block, a ``ray.init`` that starts a local Ray starts neither its dashboard
    API server nor its autoscaler monitor (:data:`LEAN_HEAD`); yields whether it is so.

    - The API server (``ray/dashboard/dashboard.py``) starts even with
      ``include_dashboard=False`` (its minimal modules) and ``ray.init`` waits for it to
      publish its address (``Node.start_api_server``: 1.3 s of a 4.5-6.5 s start, 0.6 CPU-s
      per simulation, measured on 2 busy CPUs). It serves the dashboard, the state API
      (``ray.util.state``, ``ray list``) and job submission (``ray job submit``): neither
      fedpriv nor Flower 1.42 calls them. What they do read goes to the GCS directly:
      ``ray.nodes()``, ``ray.cluster_resources()``, the actor table of :func:`placement`.
    - The autoscaler monitor (``ray/autoscaler/_private/monitor.py``, 0.5 CPU-s per
      simulation) adds and removes the nodes of a cluster launched with ``ray up``; a local
      Ray has one node of a fixed size.

    Measured (``ray.init`` of a local Ray, one task, ``ray.shutdown``; the CPU of the whole
    process tree, 2 CPUs at a load of 6-20, 5-7 starts each): 3.4 CPU-s with them, 2.05
    without; ``ray.shutdown`` 1.4 s with them (stopping the API server), 0.4 s without.

    Kept: the GCS, the raylet and the agents it starts (the raylet waits for their ports),
    and the log monitor, which forwards the workers' output to the driver's console. Nothing
    changes for a Ray this process attaches to (``address``: its head was started by ``ray
    start``), nor for a local Ray asked for its dashboard (``include_dashboard`` true: it gets
    every process, as Ray starts them). The methods are Ray's own again after the block; if
    the pinned Ray's private ``Node`` does not have them in the shape of :data:`LEAN_HEAD`,
    nothing is changed (fail safe: Ray starts them)."""
    node_class = _lean_head_target(init_args)
    if node_class is None:
        yield False
        return
    saved = {name: node_class.__dict__[name] for name in LEAN_HEAD}
    for name in LEAN_HEAD:
        setattr(node_class, name, _not_started)
    try:
        yield True
    finally:
        for name, method in saved.items():
            setattr(node_class, name, method)


def _lean_head_target(init_args: Mapping[str, Any]) -> type | None:
    """Ray's ``Node`` class when :func:`lean_local_head` applies to ``init_args`` and the
    pinned Ray's methods have the expected parameters; else None."""
    if init_args.get("address") or init_args.get("include_dashboard"):
        return None
    try:
        from ray._private.node import Node
    except ImportError:
        return None
    for name, params in LEAN_HEAD.items():
        method = Node.__dict__.get(name)
        if not callable(method) or tuple(inspect.signature(method).parameters) != params:
            return None
    return Node


def _not_started(self: Any, **_: Any) -> None:
    """Stands in for a ``Node`` method that would start a process a local Ray goes without
    (:data:`LEAN_HEAD`): starts nothing, records nothing (``Node.all_processes`` then has no
    entry for it, so Ray's shutdown has nothing of it to stop)."""


def sized_for_actors(
    init_args: Mapping[str, Any], cpus_per_actor: float, actors: int
) -> dict[str, Any]:
    """``init_args`` of a local Ray with exactly the CPUs of its ``actors`` ClientApp actors
    (``num_cpus``, unless set): a GPU federation's Ray, whose one actor per GPU is all it
    runs (the ServerApp runs in the driver and needs no Ray CPU). Measured on a 16-CPU GPU
    host: Ray sized to its one actor was started 6.6-8.5 s into a run, against 12.6-15.1 s
    with the machine's 16 CPUs."""
    if "num_cpus" in init_args:
        return dict(init_args)
    return {**init_args, "num_cpus": max(1, math.ceil(cpus_per_actor * actors))}


def prestart_env(prestart: bool) -> None:
    """Whether a local Ray starts a worker per CPU as the driver connects
    (:data:`PRESTART`; a value in the environment wins): yes when the ClientApp actors are
    exactly those workers (one CPU per client, no GPU, one simulation on this Ray: Flower's
    pool is one actor per CPU), which then start during ``ray.init`` instead of after it
    (measured: round 0 1.7 s sooner on 2 busy CPUs); else no (idle interpreters that each
    import TensorFlow in the setup hook)."""
    os.environ.setdefault(PRESTART, "1" if prestart else "0")


def worker_priority_env() -> None:
    """A local Ray's workers at the driver's priority (:data:`WORKER_NICENESS` 0; a value in
    the environment wins).

    Ray starts every worker at nice 15 so that its own processes stay responsive; in a
    simulation the workers (the ClientApp actors) are the work and the driver mostly waits
    for them. At nice 15 a worker gets ~1/28 of a core's share beside each busy process of
    default priority: on 2 CPUs beside 3 busy processes a tiny run (digits CNN, 4 clients,
    2 rounds) took 320 s and 35 CPU-s at nice 15, 25-33 s and 17-22 CPU-s at 0 (11-15 s and
    15-20 CPU-s idle), measured; on a loaded CI machine every simulation stalled the same
    way. Ray's own daemons (GCS, raylet, agents) are not workers: unchanged."""
    os.environ.setdefault(WORKER_NICENESS, "0")


def worker_env(init_args: Mapping[str, Any], forward_env: Sequence[str]) -> dict[str, Any]:
    """``ray.init``'s ``runtime_env`` for the workers, with :data:`WORKER_SETUP_HOOK`.

    Attached to a cluster (``address``: its workers do not inherit this process's
    environment): ``PYTHONPATH``, the ``forward_env`` variables and the hook. A local Ray:
    none; its workers inherit this process's environment from the raylet it starts, the
    hook in Ray's variable for it. A job runtime env makes every worker start through Ray's
    ``setup_worker.py`` (one more interpreter importing Ray: ~0.5 s per worker, measured)."""
    if not init_args.get("address"):
        from ray._private import ray_constants

        os.environ[ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR] = WORKER_SETUP_HOOK
        return {}
    env_vars = {k: os.environ[k] for k in (*forward_env, "PYTHONPATH") if k in os.environ}
    return {"runtime_env": {"env_vars": env_vars, "worker_process_setup_hook": WORKER_SETUP_HOOK}}


def loopback_args(init_args: Mapping[str, Any]) -> dict[str, Any]:
    """``init_args`` for a local Ray bound to loopback: ``_node_ip_address = 127.0.0.1`` and
    Ray's node-address lookup kept on loopback (:data:`CLUSTER_SWITCH`, in this process and
    the Ray processes it starts). Unchanged when they attach to a cluster (``address``) or
    name a node address themselves (``_node_ip_address``: opened on purpose)."""
    if init_args.get("address") or init_args.get("_node_ip_address"):
        return dict(init_args)
    from ray._private import ray_constants

    os.environ[CLUSTER_SWITCH] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False  # read at import; ray may be imported already
    return {**init_args, "_node_ip_address": LOOPBACK}


def share_actor_pool(share: int, supernodes: int | None = None) -> None:
    """Make this process's Flower actor pool ``max(1, min(capacity // share, supernodes))``
    actors, where ``capacity`` is Flower's own count (actors that fit the whole cluster), so
    ``share`` simulations on one cluster run side by side instead of waiting for each other's
    actors, and a simulation of fewer SuperNodes than that (a GPU federation's one worker per
    GPU: 4 quarter-GPU actors would fit) starts no actor that never gets a message (each one a
    process importing Keras and the backend, on a GPU its own device context).
    Patches ``flwr.simulation.ray_transport.ray_actor.pool_size_from_resources`` (the pinned
    flwr 1.42.0, read by ``BasicActorPool.__init__``)."""
    if share <= 1 and supernodes is None:
        return
    from flwr.simulation.ray_transport import ray_actor

    full = ray_actor.pool_size_from_resources
    cap = supernodes if supernodes is not None and supernodes > 0 else None

    def shared(client_resources: dict[str, int | float]) -> int:
        size = full(client_resources) // max(1, share)
        return max(1, min(size, cap) if cap is not None else size)

    ray_actor.pool_size_from_resources = shared


def placement() -> list[dict[str, Any]]:
    """The Ray nodes that host this job's live client actors (``ClientAppActor``): node id,
    host name, address and the node's custom resource labels (what ``ray start --resources``
    gave it). Reads the cluster's actor table (``ray._private.state.actors``, the GCS: no
    dashboard needed, pinned Ray 2.55); empty when Ray is not initialised here or the table
    does not have that shape (placement is a record, never a reason to fail a cell)."""
    if "ray" not in sys.modules:  # the in-process backend: no Ray imported, no actors
        return []
    import ray

    if not ray.is_initialized():
        return []
    try:
        return _placement(ray)
    except (AttributeError, ImportError, KeyError, TypeError):
        return []


def _placement(ray: Any) -> list[dict[str, Any]]:
    from ray._private import state

    job = ray.get_runtime_context().get_job_id()
    nodes = {n["NodeID"]: n for n in ray.nodes()}
    used: set[str] = set()
    for actor in state.actors().values():
        alive = actor.get("State") in ("ALIVE", 2)
        if (
            alive
            and actor.get("JobID") == job
            and "ClientAppActor" in actor.get("ActorClassName", "")
        ):
            used.add(actor["Address"]["NodeID"])
    return [_node_record(nodes[n]) for n in sorted(used) if n in nodes]


def _node_record(node: Mapping[str, Any]) -> dict[str, Any]:
    builtin = ("CPU", "GPU", "memory", "object_store_memory", "accelerator_type")
    labels = sorted(
        k
        for k in node.get("Resources", {})
        if not k.startswith(builtin) and not k.startswith("node:")
    )
    return {
        "node_id": node["NodeID"],
        "hostname": node.get("NodeManagerHostname", ""),
        "address": node.get("NodeManagerAddress", ""),
        "resources": labels,
    }


def record_placement(output_dir: str | Path, nodes: list[dict[str, Any]]) -> None:
    """Add ``ray_nodes`` to the cell's ``summary.json`` (atomically; nothing when the cell
    wrote no summary)."""
    path = Path(output_dir) / "summary.json"
    if not path.is_file():
        return
    doc = json.loads(path.read_text())
    doc[PLACEMENT_KEY] = nodes
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True))
    tmp.replace(path)


def gpu_memory_gib() -> float | None:
    """Total memory of the first GPU ``nvidia-smi`` lists (GiB); None without one."""
    if shutil.which("nvidia-smi") is None or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout  # fmt: skip
        return float(out.split()[0]) / 1024.0
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def default_parallel(cpus: int, gpu_gib: float | None, uses_gpu: bool) -> int:
    """How many grid cells run side by side by default: one per ``CPUS_PER_CELL`` CPUs, and,
    when the clients use a GPU, at most one per ``GIB_PER_GPU_CELL`` GiB of its memory.
    On 2 CPUs: 1 (measured in ``make bench``: two cells side by side on 2 CPUs gain nothing)."""
    lanes = max(1, cpus // CPUS_PER_CELL)
    if uses_gpu and gpu_gib is not None:
        lanes = min(lanes, max(1, int(gpu_gib // GIB_PER_GPU_CELL)))
    return lanes


@dataclass(frozen=True)
class Federation:
    """A ``[tool.fedpriv.federations]`` name and the ``--ray-address`` given with it ('' =
    the federation's own ``ray-address``, if any)."""

    name: str
    ray_address: str = ""


def federation_of(args: Any) -> Federation:
    """The federation a command's ``--federation`` / ``--ray-address`` options chose."""
    return Federation(str(args.federation), str(getattr(args, "ray_address", "") or ""))


def check_address(value: str) -> str:
    """``value`` if it is '' (start a local Ray), ``auto`` or ``HOST:PORT``; else ValueError
    with the one-line reason."""
    host, _, port = value.rpartition(":")
    if value in ("", "auto") or (host and port.isdigit() and 0 < int(port) < 65536):
        return value
    raise ValueError(f"ray-address = {value!r} is not allowed; expected 'auto' or HOST:PORT")
