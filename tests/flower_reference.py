"""Flower's own DP code, found wherever the installed Flower keeps it.

The wrapper and mechanism tests compare fedpriv against Flower's reference implementation
on the Flower release CI tests (1.42, in the simulation environment and in the base install)
and on any other release of the base install's range (1.23 up to 1.42). Flower has moved these
pieces between releases:

* the helpers (``compute_stdv``, ``compute_clip_model_update``, ``get_norm``) lived in
  ``flwr.common.differential_privacy`` up to 1.2x and are in
  ``flwr.supercore.differential_privacy`` in newer releases;
* ``DifferentialPrivacyServerSideFixedClipping`` is exported by ``flwr.serverapp.strategy``
  (Message API) and ``flwr.server.strategy`` (legacy API), defined in their
  ``dp_fixed_clipping`` modules.

A test that needs one of them gets it from here; when none of the places has it, the lookup
raises ``ImportError`` naming every place it looked (a real failure, not a skip).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

HELPER_MODULES = ("flwr.common.differential_privacy", "flwr.supercore.differential_privacy")
WRAPPER_MODULES = {
    "message": ("flwr.serverapp.strategy", "flwr.serverapp.strategy.dp_fixed_clipping"),
    "legacy": ("flwr.server.strategy", "flwr.server.strategy.dp_fixed_clipping"),
}
WRAPPER_NAME = "DifferentialPrivacyServerSideFixedClipping"


def _first_with(modules: tuple[str, ...], attribute: str) -> tuple[ModuleType, Any]:
    """The first importable module of ``modules`` that has ``attribute``, and the attribute."""
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, attribute):
            return module, getattr(module, attribute)
    raise ImportError(f"{attribute} not found in any of {', '.join(modules)}")


def dp_helpers() -> ModuleType:
    """Flower's DP helper module (``compute_stdv``, ``compute_clip_model_update``, ...)."""
    return _first_with(HELPER_MODULES, "compute_clip_model_update")[0]


def compute_stdv(noise_multiplier: float, clipping_norm: float, num_sampled_clients: int) -> float:
    """Flower's σ = z·C/m, from wherever this Flower keeps it."""
    return dp_helpers().compute_stdv(noise_multiplier, clipping_norm, num_sampled_clients)


def server_side_fixed_clipping(api: str) -> type:
    """Flower's ``DifferentialPrivacyServerSideFixedClipping`` for ``api`` = message | legacy."""
    if api not in WRAPPER_MODULES:
        raise ValueError(f"api = {api!r} is not allowed; expected one of {list(WRAPPER_MODULES)}")
    return _first_with(WRAPPER_MODULES[api], WRAPPER_NAME)[1]


def act_as_serverapp_task(run_id: int = 1, node_id: int = 0, task_id: int = 1) -> None:
    """Let tests build instruction ``Message`` objects outside a running ServerApp.

    Newer Flower takes an instruction's run id, source node and task from the identity of
    the process's running task (``flwr.supercore.task_identity.TaskIdentity``, set by the
    SuperLink/simulation runtime) and refuses to build one when it is unset; Flower 1.23 has
    no such identity. The unit tests build replies from instructions directly, so they set
    the identity the runtime would set. No-op on Flower releases without it.
    """
    try:
        from flwr.supercore.task_identity import TaskIdentity
    except ImportError:
        return
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, node_id, task_id
