"""Flower's simulation engine with the ClientApps in the simulation's own process (no Ray).

A federation whose ``backend.name`` is ``"in-process"`` (``local-in-process`` in pyproject's
``[tool.fedpriv.federations]``) runs the same engine as every other simulation: Flower's
``vce_api.run_api`` with its LinkState, its ``InMemoryGrid`` and its worker loop, the app's
ServerApp in its thread. Only the backend differs: :class:`InProcessBackend` calls the
ClientApp in this process, one message at a time, where Flower's ``RayBackend`` hands each
message to a ``ClientAppActor`` in a Ray worker process. The ClientApp, the messages and the
node contexts are the same objects; exceptions reach Flower as they do from an actor
(``ClientAppException``: the reply becomes Flower's error reply, and fedpriv's round records
name the client failed).

What it saves: Ray's start (GCS, raylet, agents, log monitor: about 2 CPU-s and several
seconds before round 1), and each worker's own interpreter with its TensorFlow (about 850 MB
and 5 CPU-s each). Measured on the 2-CPU machine, the default scenario for 2 rounds: 12.8 s
and 8.1 CPU-s in one process of 0.9 GB, against 15-17 s and about 20 CPU-s over Ray.

What it does not do: run clients side by side (one message at a time: on a machine with
spare cores Ray's workers train in parallel), use a Ray cluster (``ray-address`` is refused
with this backend) or GPUs it is not given. The simulation runner selects it
(:mod:`fedpriv.scenarios.cli.simulation_runner`) and never imports Ray then.

Uses Flower internals of the pinned simulation stack (flwr 1.42.0): ``vce_api.start_vce``
builds its backend from ``flwr.server.superlink.fleet.vce.backend.raybackend.RayBackend``,
looked up when the simulation starts; :func:`use_in_process_backend` points that name at
:class:`InProcessBackend` in this process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

NAME = "in-process"  # the federation's backend.name


def is_in_process(backend: Mapping[str, Any]) -> bool:
    """Whether the backend config (pyproject's ``backend`` table) selects this backend."""
    return str(backend.get("name", "") or "") == NAME


def problem(backend: Mapping[str, Any]) -> tuple[str, Any, str] | None:
    """What an in-process backend config asks for that it cannot do, as (key, value, what is
    allowed), or None: it has no Ray to attach to (``ray-address``) and trains on the CPU
    (``num-gpus`` 0). Keys in pyproject's spelling or Flower's (``init_args``)."""
    init_args = backend.get("init_args", backend.get("init-args", {})) or {}
    if init_args.get("address"):
        allowed = "none: every ClientApp runs in this process (a Ray cluster: ray-cluster)"
        return "ray-address", init_args["address"], allowed
    resources = backend.get("client_resources", backend.get("client-resources", {})) or {}
    gpus = float(resources.get("num_gpus", resources.get("num-gpus", 0.0)) or 0.0)
    if gpus > 0:
        allowed = "0.0: the in-process backend trains on the CPU (GPUs: local-simulation-gpu)"
        return "backend.client-resources.num-gpus", gpus, allowed
    return None


def check_federation(name: str, backend: Mapping[str, Any]) -> None:
    """A federation of this backend asks for no Ray cluster and no GPU (:func:`problem`):
    else ConfigError naming the key, before anything starts."""
    from fedpriv.scenarios.config.schema import ConfigError

    found = problem(backend) if is_in_process(backend) else None
    if found is not None:
        key, value, allowed = found
        raise ConfigError(key, value, f"{allowed} (federation {name!r})")


def in_process_backend_class() -> type:
    """:class:`InProcessBackend`, built on Flower's ``Backend`` (imported here, not at module
    import: the launcher reads :func:`is_in_process` without Flower)."""
    from flwr.clientapp.client_app import ClientApp
    from flwr.server.superlink.fleet.vce.backend.backend import Backend

    class InProcessBackend(Backend):
        """Flower's simulation backend that runs each message's ClientApp in this process."""

        def __init__(self, backend_config: Mapping[str, Any]) -> None:
            super().__init__(dict(backend_config))
            self.app_fn: Callable[[], ClientApp] | None = None

        def build(self, app_fn: Callable[[], ClientApp]) -> None:
            self.app_fn = app_fn

        @property
        def num_workers(self) -> int:
            return 1

        def is_worker_idle(self) -> bool:
            return True

        def terminate(self) -> None:
            self.app_fn = None

        def process_message(self, message: Any, context: Any) -> tuple[Any, Any]:
            return run_client_app(self.app_fn, message, context)

    return InProcessBackend


def run_client_app(app_fn: Callable[[], Any] | None, message: Any, context: Any) -> tuple[Any, Any]:
    """The ClientApp's reply to ``message`` and the node's context after it, as
    ``ClientAppActor.run`` gives them (flwr 1.42): an exception of the ClientApp becomes a
    ``ClientAppException`` (Flower's error reply), a ``LoadClientAppError`` is raised as is."""
    from flwr.clientapp.client_app import ClientAppException, LoadClientAppError

    if app_fn is None:
        raise ValueError("the in-process backend was not built: no ClientApp to call")
    try:
        return app_fn()(message=message, context=context), context
    except LoadClientAppError:
        raise
    except Exception as err:  # noqa: BLE001 -- what Flower's actor does with it
        raise ClientAppException(str(err)) from err


def use_in_process_backend() -> type:
    """Make this process's simulation engine build :class:`InProcessBackend` where it would
    build ``RayBackend``; the class."""
    from flwr.server.superlink.fleet.vce.backend import raybackend

    backend_class = in_process_backend_class()
    raybackend.RayBackend = backend_class
    return backend_class


@contextlib.contextmanager
def in_process_simulation() -> Iterator[type]:
    """While in the block, Flower's simulation engine in this process (``run_simulation``
    included) runs its ClientApps in process (:func:`use_in_process_backend`); Ray's backend
    again after it. Yields the backend class."""
    from flwr.server.superlink.fleet.vce.backend import raybackend

    saved = raybackend.RayBackend
    try:
        yield use_in_process_backend()
    finally:
        raybackend.RayBackend = saved
