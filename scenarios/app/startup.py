"""A run's start-up, said as it happens, and its wall time split in summary.json.

Between ``fedpriv run`` and round 0 a simulation starts Ray and the ClientApp workers (each
imports TensorFlow), loads the data and builds the model: half a minute to a minute on a
small machine. Each step prints one start-up line (:func:`fedpriv.reporting.console.
startup_line`) with the seconds since the command started: ``fedpriv run`` passes its start
time in :data:`RUN_START_ENV` (``flwr run .`` does not: the clock then starts when this
module is first imported, with the ServerApp).

:func:`run_times` gives summary.json's ``wall_seconds`` (the whole run, start-up included),
``startup_seconds`` (until the run's first step), ``training_seconds`` (the rounds and
the run's own final steps) and ``startup_steps``: when each start-up step was done, in
seconds since the command started (:func:`mark`; the simulation runner's ``runner started``
(the interpreter and its first imports), ``Ray started``, ``apps imported`` (the ClientApp's
and ServerApp's modules, TensorFlow among them, imported while Ray starts), then the lines
printed: ``engine started``, ``data loaded``, ``model built``, ``workers ready`` (every
worker has imported its framework and answered); ``make bench``'s ``startup`` row prints the
split). A multi-run simulation's cells each count from the end of the
one before (:func:`run_times` moves the clock on).
"""

from __future__ import annotations

import os
import time
from typing import Any

from fedpriv.reporting.console import startup_line
from fedpriv.spec import RunSpec

RUN_START_ENV = "FEDPRIV_RUN_START"
_IMPORTED = time.time()


def _start() -> float:
    try:
        return float(os.environ[RUN_START_ENV])
    except (KeyError, ValueError):
        return _IMPORTED


_clock = [_start()]  # when the current run's start-up began
_steps: dict[str, float] = {}  # the current run's start-up steps: seconds since its clock


def mark(step: str) -> float:
    """Note that ``step`` of the start-up is done now (summary.json's ``startup_steps``,
    :func:`run_times`); the seconds since the run's clock."""
    elapsed = time.time() - _clock[0]
    _steps[step] = round(elapsed, 3)
    return elapsed


def status(step: str, detail: str = "") -> None:
    """Print the start-up line of ``step`` (flushed: the console sees it at once) and
    :func:`mark` it."""
    print(startup_line(step, detail, mark(step)), flush=True)


def engine_line(supernodes: int, elapsed: float) -> str:
    """The command's own first start-up line, before the simulation process starts."""
    return startup_line(
        "starting the simulation engine", f"Ray and {supernodes} SuperNodes", elapsed
    )


def data_loaded(spec: RunSpec, data: Any) -> None:
    """``data loaded: DATASET, N clients, M training / K test examples``."""
    train = sum(len(c.x_train) for c in data.clients)
    detail = f"{spec.data.dataset}, {len(data.clients)} clients, {train} training / "
    status("data loaded", detail + f"{len(data.x_test)} test examples")


def model_built(spec: RunSpec, weights: list) -> None:
    """``model built: MODEL, P parameters``."""
    size = sum(int(getattr(w, "size", 0)) for w in weights)
    status("model built", f"{spec.train.model}, {size:,} parameters")


def run_times(t0: float) -> dict[str, float]:
    """summary.json's times of a run whose first step began at ``t0``; moves the clock on
    to now (the next cell of a multi-run starts counting here)."""
    now, start = time.time(), _clock[0]
    _clock[0] = now
    steps = dict(_steps)
    _steps.clear()
    return {
        "wall_seconds": now - start,
        "startup_seconds": max(0.0, t0 - start),
        "training_seconds": now - t0,
        "startup_steps": steps,
    }
