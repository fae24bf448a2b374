"""Run ``fedpriv run`` (a real Flower 1.42 simulation, fedpriv.scenarios.cli.simulation_runner) in
tests.

Every run here opts in to seeded noise and sampling (``reproducible-noise = true``,
:data:`REPRODUCIBLE`): the tests compare runs with each other and with recorded baselines.
A test of the default (secret, OS-entropy) randomness passes ``reproducible-noise = False``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
REPRODUCIBLE = {"reproducible-noise": True}


STATE_ROOT_ENV = "FEDPRIV_STATE_ROOT"  # fedpriv.privacy.releases.STATE_ROOT_ENV
# ``fedpriv run`` on the in-process backend (federation local-in-process; its seeded run equals
# the Ray run's records and model: tests/test_in_process_simulation.py), for a test whose subject
# is not the engine (node state, ledgers, budgets, what a run writes): one process of about
# 8 CPU-s for a tiny run, where a Ray start and its worker interpreters take 16-20 CPU-s
IN_PROCESS = ("--federation", "local-in-process")


def nodes_of(output_dir: str | Path) -> str:
    """The simulated nodes' own state root of a test simulation: beside its output folder
    (never in it), the same for the run and its resume, so each simulation of a test is a
    federation of its own whose nodes keep lifetime ledgers (``fedpriv.privacy.releases``)."""
    out = Path(output_dir)
    return str(out.parent / f"{out.name}.nodes")


def ledgers_in(root: str | Path, party: str) -> dict[str, Any]:
    """``{"node-<key>/<party>-<identity>": Ledger}``: every ledger of ``party`` in the state
    folders under ``root`` (one SQLite database per folder, fedpriv.privacy.ledger.store)."""
    import sqlite3

    from fedpriv.privacy.releases import read_ledger

    out: dict[str, Any] = {}
    for db in sorted(Path(root).glob("node-*/ledger.sqlite3")):
        with sqlite3.connect(db) as conn:
            rows = conn.execute(
                "SELECT DISTINCT identity FROM releases WHERE party = ? ORDER BY identity",
                (party,),
            ).fetchall()
        for (identity,) in rows:
            out[f"{db.parent.name}/{party}-{identity}"] = read_ledger(db.parent, party, identity)
    return out


def with_reproducible(overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` with ``reproducible-noise = true`` unless they set it themselves."""
    return {**REPRODUCIBLE, **overrides}


def to_override(key: str, value: Any) -> str:
    """One ``key=value`` item in Flower's --run-config (TOML) syntax."""
    if isinstance(value, bool):
        return f"{key}={'true' if value else 'false'}"
    if isinstance(value, str):
        return f"{key}='{value}'"
    return f"{key}={value!r}"


def run_fedpriv(
    overrides: dict[str, Any],
    output_dir: Path,
    timeout: int = 600,
    extra_args: tuple = (),
    *,
    default_state: bool = False,
):
    """Run one simulation; return (returncode, summary or None, rounds, its whole output).

    The whole output, not a tail: checks such as the resume line must not depend on how
    much Ray, TensorFlow or Python print after it. ``default_state``: no
    ``FEDPRIV_STATE_ROOT`` (the launcher's own default: ``<output-dir>/node-state``, or the
    run's ``federation-dir``), else :func:`nodes_of` the output folder."""
    overrides = {**with_reproducible(overrides), "output-dir": str(output_dir)}
    items = [to_override(k, v) for k, v in overrides.items()]
    cmd = [
        sys.executable,
        "-m",
        "fedpriv.scenarios.cli.main",
        "run",
        "--run-config",
        " ".join(items),
    ]
    cmd += list(extra_args)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env[STATE_ROOT_ENV] = nodes_of(output_dir)
    if default_state:
        env.pop(STATE_ROOT_ENV)
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    summary, rounds = run_outputs(output_dir)
    return proc.returncode, summary, rounds, proc.stdout + proc.stderr


def run_outputs(output_dir: str | Path) -> tuple[Any, list[dict[str, Any]]]:
    """A run directory's summary.json (None if absent) and round lines (the operator's view:
    rounds.jsonl merged with operator.jsonl, :func:`fedpriv.reporting.runlog.read_rounds`)."""
    from fedpriv.reporting.runlog import read_rounds

    summary_path = Path(output_dir) / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
    return summary, read_rounds(output_dir)


def kill_after_round(
    overrides: dict[str, Any],
    output_dir: Path,
    after: int,
    timeout: float = 600,
    *,
    between_rounds: bool = False,
) -> int:
    """Start ``fedpriv run``; SIGKILL its whole process group once round ``after`` is
    checkpointed (``output_dir/checkpoint.pkl``). Returns the round of the checkpoint left
    behind. ``between_rounds``: the ServerApp holds after round ``after``'s checkpoint
    (``fedpriv.scenarios.app.resume.hold_after``) and the kill lands there, never inside round
    ``after`` + 1 (whose clients, charged, would rightly refuse its identical request on
    resume)."""
    # unpickling a checkpoint in the poll loop must not import what it references (the DP
    # wrapper's state: fedpriv.privacy.dp, with scipy and dp-accounting, seconds on a loaded
    # machine, while rounds of the tiny run take half a second)
    import flwr.app  # noqa: F401

    import fedpriv.privacy.dp  # noqa: F401
    from fedpriv.checkpoint import load_checkpoint

    overrides = {**with_reproducible(overrides), "output-dir": str(output_dir)}
    items = " ".join(to_override(k, v) for k, v in overrides.items())
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env[STATE_ROOT_ENV] = nodes_of(output_dir)
    # Flower's 0.1 s engine polling: the kill below, right after round ``after``'s checkpoint,
    # lands before round ``after`` + 1 reaches the clients (scenarios/cli/engine_polling.py)
    env["FEDPRIV_ENGINE_POLL"] = "0.1"
    held = Path(nodes_of(output_dir)) / "held-after-round"
    if between_rounds:
        held.parent.mkdir(parents=True, exist_ok=True)
        held.unlink(missing_ok=True)
        env["FEDPRIV_HOLD_AFTER_ROUND"] = f"{int(after)}:{held}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedpriv.scenarios.cli.main", "run", "--run-config", items],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if between_rounds:
                if held.exists():
                    break
            else:
                checkpoint = load_checkpoint(output_dir) if output_dir.is_dir() else None
                if checkpoint is not None and checkpoint["round"] >= after:
                    break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # Ray's processes are in this group too
        proc.wait(timeout=60)
    return int(load_checkpoint(output_dir)["round"])


def run_fedpriv_cells(
    runs: dict[str, tuple[dict[str, Any], Path]],
    plan_dir: Path,
    federation: str = "local-simulation",
) -> dict[str, tuple[int, Any, list, str]]:
    """Run several ``fedpriv run`` configs as cells of ONE simulation (``run-plan``).

    ``runs`` maps a label to (overrides, output dir); every config must resolve to the same
    ``num-clients``. Each cell runs with its kind's runner exactly as a single run would
    (same rounds.jsonl for the same seed), but N cells pay one Ray/TensorFlow start-up.
    Returns label -> (0 or 1 for the cell's status, summary or None, rounds, the whole log).
    ``federation``: ``local-in-process`` for the in-process backend (:data:`IN_PROCESS`).
    """
    from fedpriv.scenarios.app import multirun
    from fedpriv.scenarios.cli import launch
    from fedpriv.scenarios.config.features import CATALOG

    cells = [
        multirun.Cell(
            label,
            CATALOG.resolve_run_config(
                launch.app_config({**with_reproducible(o), "output-dir": str(out)})
            ),
        )
        for label, (o, out) in runs.items()
    ]
    top = {"scenario": cells[0].cfg["scenario"], "num-clients": cells[0].cfg["num-clients"]}
    plan_dir = Path(plan_dir)
    before = os.environ.get(STATE_ROOT_ENV)
    os.environ[STATE_ROOT_ENV] = nodes_of(plan_dir)
    try:
        multirun.launch_plan(plan_dir, cells, top, federation, CATALOG)
    finally:
        if before is None:
            os.environ.pop(STATE_ROOT_ENV, None)
        else:
            os.environ[STATE_ROOT_ENV] = before
    log = (plan_dir / multirun.LOG_NAME).read_text()
    manifest = plan_dir / multirun.MANIFEST
    status = (
        {c["label"]: c["status"] for c in json.loads(manifest.read_text())["cells"]}
        if manifest.exists()
        else {}
    )
    results = {}
    for label, (_, out) in runs.items():
        summary, rounds = run_outputs(out)
        rc = 0 if status.get(label) == "ok" and summary is not None else 1
        results[label] = (rc, summary, rounds, log)
    return results


def assert_close(a: Any, b: Any, path: str, *, rel: float, abs_tol: float, ignore=()) -> None:
    """``a`` equals ``b`` (round records, summaries: nested dicts and lists) with floats within
    ``rel`` / ``abs_tol`` and the dict keys of ``ignore`` (timings) left out; the assertion
    names the path of the first difference."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) - set(ignore) == set(b) - set(ignore), (path, sorted(set(a) ^ set(b)))
        for k in (set(a) | set(b)) - set(ignore):
            assert_close(a[k], b[k], f"{path}.{k}", rel=rel, abs_tol=abs_tol, ignore=ignore)
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{path}[{i}]", rel=rel, abs_tol=abs_tol, ignore=ignore)
    elif isinstance(a, float) or isinstance(b, float):
        if not (math.isnan(a) and math.isnan(b)):
            assert a == pytest.approx(b, rel=rel, abs=abs_tol), (path, a, b)
    else:
        assert a == b, (path, a, b)


def final_weights(output_dir: Path) -> list[np.ndarray]:
    """A run's ``final_weights.npz``, its arrays in layer order."""
    with np.load(Path(output_dir) / "final_weights.npz") as data:
        return [data[k] for k in sorted(data.files, key=lambda k: int(k.split("_")[1]))]
