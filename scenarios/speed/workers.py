"""How many SuperNodes a simulation starts: W worker SuperNodes or one per client (or zone).

:func:`simulation_size` is what ``fedpriv run`` (:mod:`fedpriv.scenarios.cli.launch`) asks before it
starts the simulation. Workers serve the clients as virtual clients
(:mod:`fedpriv.scenarios.nodes.virtual_grid`) where every run kind of the simulation allows it
(:data:`fedpriv.scenarios.speed.keys.WORKER_KINDS`); ``num-workers = auto`` is resolved here and
handed to the ServerApp as ``num-workers = W``, so the server expects exactly W nodes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedpriv.scenarios.config.node_spec import load_snapshot
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.speed.keys import simulation_workers, zone_worker_count
from fedpriv.scenarios.zonal.keys import federation_size, zone_nodes

__all__ = ["available_cpus", "gpu_workers", "scenario_kind", "simulation_size"]

# an explicit ``num-workers = "auto"`` in the overrides (replaced by the resolved count)
AUTO_OVERRIDE = re.compile(r"""(^|\s)num-workers\s*=\s*("auto"|'auto'|auto)(?=\s|$)""")


CPUS_ENV = "FEDPRIV_CPUS"  # the CPUs a simulation is sized for (default: this process's)


def available_cpus() -> int:
    """The CPUs a simulation on this machine is sized for (``num-workers = auto``, ``fedpriv
    grid --parallel auto``, a local Ray's CPUs when its actors need fewer): ``$FEDPRIV_CPUS``
    when set (a positive integer: several simulations side by side share the machine, as the
    test suite's pytest-xdist workers do), else the CPUs this process may run on (its
    affinity: a container's cpuset or ``taskset``), else ``os.cpu_count()``. A bad value:
    ConfigError (one line; checked before a run by
    :func:`fedpriv.scenarios.cli.preflight.check_environment`)."""
    text = os.environ.get(CPUS_ENV, "").strip()
    if text:
        if not text.isdigit() or int(text) < 1:
            raise ConfigError(CPUS_ENV, text, "a positive integer")
        return int(text)
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def scenario_kind(cfg: Mapping[str, Any]) -> str:
    """The run kind of a resolved config (from the scenario catalog snapshot)."""
    return str(load_snapshot()["scenarios"][cfg["scenario"]]["kind"])


def _plan_configs(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The cell configs of the plan ``cfg`` runs (``run-plan``), else ``[cfg]``."""
    if not cfg.get("run-plan"):
        return [dict(cfg)]
    try:
        return [dict(c["config"]) for c in json.loads(Path(cfg["run-plan"]).read_text())["cells"]]
    except (OSError, ValueError, KeyError, TypeError):
        return [dict(cfg)]


def gpu_workers(gpus: float) -> int:
    """Worker SuperNodes of ``num-workers = auto`` on a GPU federation: one per GPU.

    A worker trains its clients as one cohort (:mod:`fedpriv.clients.cohort`: JAX ``vmap`` over the
    clients), one compiled call on the device, instead of one process per client whose
    kernels take turns on the GPU (Ray's fractional ``num-gpus`` shares memory, not compute).
    """
    return max(1, int(gpus))


def simulation_size(
    cfg: Mapping[str, Any], overrides: Sequence[str], backend: Mapping[str, Any]
) -> tuple[int, list[str]]:
    """(SuperNodes, run-config overrides) of the simulation of ``cfg``: one per zone with zone
    nodes, W worker SuperNodes serving the clients as virtual clients where the run kinds
    allow it, else one per client (:func:`fedpriv.scenarios.zonal.keys.federation_size`).

    ``num-workers = auto`` is resolved here: this machine's CPUs (:func:`available_cpus`)
    over the client's ``num-cpus``; with ``num-gpus`` > 0 one worker per GPU
    (:func:`gpu_workers`). It is handed to the ServerApp as ``num-workers = W``."""
    size, overrides = federation_size(cfg), list(overrides)
    configs = _plan_configs(cfg)
    if "scenario" not in cfg or (cfg.get("run-plan") and any(zone_nodes(c) for c in configs)):
        return size, overrides
    workers = {c.get("num-workers", cfg.get("num-workers")) for c in configs}
    own = {**cfg, "num-workers": workers.pop() if len(workers) == 1 else cfg.get("num-workers")}
    resources = backend.get("client-resources", {})
    per_client = float(resources.get("num-cpus", 1) or 1)
    slots = float(available_cpus())
    gpus_per_client = float(resources.get("num-gpus", 0) or 0)
    if gpus_per_client > 0 and own["num-workers"] == "auto":
        from fedpriv.scenarios.cli.ray_cluster import local_gpus

        slots = min(slots, per_client * gpu_workers(local_gpus()))
    if zone_nodes(cfg):
        count = zone_worker_count(own, size, slots, per_client)
    else:
        count = simulation_workers(own, {scenario_kind(c) for c in configs}, slots, per_client)
    if count is None:
        return size, overrides
    if own["num-workers"] != "auto":  # the ServerApp resolves the same number itself
        return count, overrides
    kept = [AUTO_OVERRIDE.sub("", text).strip() for text in overrides]
    return count, [*(t for t in kept if t), f"num-workers={count}"]
