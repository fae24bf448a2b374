"""``make bench-gpu``: the MP runs on one GPU (JAX backend) against plain Keras on that GPU.

Every row is measured side by side in one invocation, on ``KERAS_BACKEND=jax`` with
``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (each process takes GPU memory as it needs it, so
Flower's four ClientApp workers and the floor can share the device):

- one MP run: ``fedpriv run --federation local-simulation-gpu`` of ``synthetic-mri`` (4
  clients, 20 rounds, 5 local epochs, batch 32, the MP 128×128 CNN, Adam 1e-3), FedAvg,
  no privacy; against the plain-Keras floor of the same rounds in one process
  (:mod:`bench.tf_floor`: each client's epochs in one ``jax.jit``, FedAvg in numpy);
- the MP grid: ``fedpriv grid`` of 6 strategies × {none, global-dp, metric-dp} × 5 seeds ×
  {homogeneous, non-iid} = 180 runs (the cells of ``make mp-grid-alzheimer``, on
  synthetic-mri); against 180 × the floor run of the cell's partition.

Wall seconds include start-up (interpreter, JAX, Ray); the ratio is fedpriv / floor.
Writes ``bench/results-gpu.md`` and prints it. ``--rounds``, ``--strategies``, ``--privacy``,
``--seeds``, ``--partitions`` shrink the grid; ``--no-grid`` times the single run only.

Without a GPU (``nvidia-smi -L`` lists none and there is no ``/dev/nvidia<k>``) it exits 2
with one line, before JAX or TensorFlow is imported (no start-up noise, no traceback). A GPU
host needs ``pip install -e ".[simulation,gpu]"``: JAX with its CUDA 13 plugin
(``jax[cuda13]``) under Keras 3; TensorFlow is not used on the GPU.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STRATEGIES = ("fedavg", "fedavgm", "fedmedian", "fedprox", "fedopt", "fedyogi")
PRIVACY = ("none", "global-dp", "metric-dp")
PARTITIONS = ("homogeneous", "non-iid")
MP_RUN = {
    "dataset": "synthetic-mri",
    "num-clients": 4,
    "model": "mp-cnn",
    "optimizer": "adam",
    "learning-rate": 1e-3,
    "local-epochs": 5,
    "batch-size": 32,
}
NO_GPU = (
    "bench-gpu: no GPU visible (nvidia-smi -L lists none); run it on a CUDA host with "
    'pip install -e ".[simulation,gpu]"'
)


def gpu_names() -> list[str]:
    """The GPUs ``nvidia-smi -L`` lists (``/dev/nvidia<k>`` as a fallback); no JAX import."""
    if shutil.which("nvidia-smi"):
        try:
            proc = subprocess.run(
                ["nvidia-smi", "-L"], capture_output=True, text=True, check=False, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            proc = None
        if proc is not None and proc.returncode == 0:
            return [line.strip() for line in proc.stdout.splitlines() if line.startswith("GPU")]
    return sorted(glob.glob("/dev/nvidia[0-9]*"))


def _env() -> dict[str, str]:
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3")
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _run(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, env=_env())
    return time.perf_counter() - t0, proc


def _failure(proc: subprocess.CompletedProcess) -> str:
    tail = (proc.stderr or proc.stdout or "").strip().splitlines()
    return tail[-1][-300:] if tail else f"exit {proc.returncode}"


def floor(rounds: int, partition: str, seed: int = 0) -> dict:
    """The plain-Keras floor (JAX, same GPU) of one MP run: wall seconds, final accuracy."""
    cfg = dict(MP_RUN, partition=partition, seed=seed, **{"num-server-rounds": rounds})
    wall, proc = _run([sys.executable, "-m", "bench.tf_floor", json.dumps(cfg)])
    if proc.returncode != 0:
        raise RuntimeError(f"plain-Keras floor ({partition}) failed: {_failure(proc)}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall"] = wall
    return out


def fedpriv_run(strategy: str, rounds: int, out: Path) -> dict:
    """One ``fedpriv run`` on local-simulation-gpu: wall seconds, strategy seconds, accuracy."""
    shutil.rmtree(out, ignore_errors=True)  # a finished run directory would be skipped
    overrides = (
        f"scenario='synthetic-mri' strategy='{strategy}' privacy='none' "
        f"num-server-rounds={rounds} output-dir='{out}'"
    )
    cmd = [
        sys.executable,
        "-m",
        "scenarios.cli.main",
        "run",
        "--federation",
        "local-simulation-gpu",
    ]
    wall, proc = _run(cmd + ["--run-config", overrides])
    if proc.returncode != 0:
        return {"wall": wall, "error": _failure(proc)}
    summary = json.loads((out / "summary.json").read_text())
    return {
        "wall": wall,
        "strategy_seconds": summary.get(
            "training_seconds", summary.get("wall_seconds", float("nan"))
        ),
        "accuracy": summary.get("final", {}).get("accuracy", float("nan")),
    }


def fedpriv_grid(args: argparse.Namespace, partition: str, out: Path) -> dict:
    """``fedpriv grid`` of the chosen cells for one partition: wall seconds, cell count."""
    shutil.rmtree(out, ignore_errors=True)  # complete cells would be skipped
    cmd = [sys.executable, "-m", "scenarios.cli.main", "grid", "--scenario", "synthetic-mri"]
    cmd += ["--strategies", ",".join(args.strategies), "--privacy", ",".join(args.privacy)]
    cmd += ["--seeds", ",".join(map(str, args.seeds)), "--federation", "local-simulation-gpu"]
    cmd += ["--output-dir", str(out), "--run-config"]
    cmd += [f"partition='{partition}' num-server-rounds={args.rounds}"]
    wall, proc = _run(cmd)
    cells = len(args.strategies) * len(args.privacy) * len(args.seeds)
    done = len(list(out.glob("*/*/seed*/summary.json")))
    return {"wall": wall, "cells": cells, "done": done, "ok": proc.returncode == 0}


def _csv(text: str, allowed: tuple[str, ...], name: str) -> list[str]:
    items = [x for x in text.split(",") if x]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise SystemExit(f"bench-gpu: {name} = {text!r} is not allowed; expected some of {allowed}")
    return items


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--privacy", default=",".join(PRIVACY))
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--partitions", default=",".join(PARTITIONS))
    parser.add_argument("--no-grid", action="store_true", help="time the single MP run only")
    args = parser.parse_args(argv)
    args.strategies = _csv(args.strategies, STRATEGIES, "strategies")
    args.privacy = _csv(args.privacy, PRIVACY, "privacy")
    args.partitions = _csv(args.partitions, PARTITIONS, "partitions")
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s]
    except ValueError:
        message = f"bench-gpu: seeds = {args.seeds!r} is not allowed; expected integers"
        raise SystemExit(message) from None
    if args.rounds < 1 or not args.seeds:
        raise SystemExit(f"bench-gpu: rounds = {args.rounds}: expected >= 1 and some seeds")
    return args


def _grid_rows(args: argparse.Namespace, floors: dict[str, dict], tmp: Path) -> list[str]:
    rows, total_wall, total_floor, cells, done = [], 0.0, 0.0, 0, 0
    for partition in args.partitions:
        got = fedpriv_grid(args, partition, tmp / "grid" / partition)
        ref = got["cells"] * floors[partition]["wall"]
        total_wall, total_floor = total_wall + got["wall"], total_floor + ref
        cells, done = cells + got["cells"], done + got["done"]
        status = "" if got["ok"] else f" ({got['cells'] - got['done']} cells failed)"
        rows.append(
            f"| grid, {partition}: {got['cells']} runs{status} | {got['wall']:.1f} | "
            f"{got['cells']} x {floors[partition]['wall']:.1f} = {ref:.1f} | "
            f"{got['wall'] / ref:.2f}x |"
        )
    rows.append(
        f"| **grid, all: {cells} runs ({done} complete)** | {total_wall:.1f} | "
        f"{total_floor:.1f} | **{total_wall / total_floor:.2f}x** |"
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    gpus = gpu_names()
    if not gpus:
        print(NO_GPU)
        return 2
    args = parse_args(argv)
    tmp = ROOT / "runs" / "bench-gpu"
    floors = {p: floor(args.rounds, p) for p in dict.fromkeys(["homogeneous", *args.partitions])}
    one = fedpriv_run("fedavg", args.rounds, tmp / "one-run")
    ref = floors["homogeneous"]
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {gpus[0]} ({len(gpus)} GPU), "
        "KERAS_BACKEND=jax. synthetic-mri, 4 clients, "
        f"{args.rounds} rounds x 5 local epochs, batch 32, mp-cnn 128x128, Adam 1e-3; wall "
        "seconds include start-up; the floor is plain Keras on the same GPU "
        "(bench/tf_floor.py: one jax.jit per client call, FedAvg in numpy).",
        "",
        "| benchmark | fedpriv wall s | plain Keras wall s | ratio |",
        "|---|---|---|---|",
    ]
    if "error" in one:
        lines.append(f"| one MP run, fedavg | failed: {one['error']} | {ref['wall']:.1f} | — |")
    else:
        lines.append(
            f"| one MP run, fedavg, no privacy (strategy {one['strategy_seconds']:.1f} s; "
            f"accuracy {one['accuracy']:.3f} / floor {ref['accuracy']:.3f}) | {one['wall']:.1f} "
            f"| {ref['wall']:.1f} (training+eval {ref['train_seconds']:.1f}) | "
            f"**{one['wall'] / ref['wall']:.2f}x** |"
        )
    print(lines[-1], flush=True)
    if not args.no_grid:
        lines += _grid_rows(args, floors, tmp)
    text = "\n".join(lines) + "\n"
    (ROOT / "bench" / "results-gpu.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
