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
import re
import shutil
import signal
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
# the single-run variants, in this order: label, run-config overrides, environment. Every
# fedpriv process of an invocation compiles into one JAX compilation cache (:data:`CACHE`,
# emptied at the start): "cold" is the first run (nothing cached, as on a fresh machine),
# "warm" the same run again, as every later run of a user (clients/compile_cache.py).
RUNS = {
    "cold": ("1 worker, the 4 clients as one cohort (default), compile cache empty", "", None),
    "warm": ("the same run again, compile cache warm", "", None),
    "per-client": ("one SuperNode per client (num-workers = 4), cache warm", "num-workers=4", None),
    # not in the default --runs: XLA's autotuning of convolutions and matmuls is part of
    # every cold compilation, and a cohort keeps the GPU a few per cent busy, so the fastest
    # kernels may matter less than the seconds spent finding them (a cache of its own: the
    # flags are part of a program's key)
    "cold-no-autotune": (
        "the cold run with XLA's autotuning off (--xla_gpu_autotune_level=0), cache empty",
        "",
        {
            "XLA_FLAGS": "--xla_gpu_autotune_level=0",
            "FEDPRIV_COMPILE_CACHE": str(ROOT / "runs" / "bench-gpu" / "xla-no-autotune"),
        },
    ),
}
CACHE = ROOT / "runs" / "bench-gpu" / "xla"
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
    env["FEDPRIV_COMPILE_CACHE"] = str(CACHE)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # one cache per invocation: ours
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _run(
    cmd: list[str], env: dict[str, str] | None = None
) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    env = {**_env(), **(env or {})}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, env=env)
    return time.perf_counter() - t0, proc


def _failure(proc: subprocess.CompletedProcess) -> str:
    tail = (proc.stderr or proc.stdout or "").strip().splitlines()
    return tail[-1][-300:] if tail else f"exit {proc.returncode}"


def floor(rounds: int, partition: str, seed: int = 0) -> dict:
    """The plain-Keras floor (JAX, same GPU) of one MP run: wall seconds, final accuracy."""
    cfg = dict(MP_RUN, partition=partition, seed=seed, **{"num-server-rounds": rounds})
    with GpuBusy() as busy:
        wall, proc = _run([sys.executable, "-m", "bench.tf_floor", json.dumps(cfg)])
    if proc.returncode != 0:
        raise RuntimeError(f"plain-Keras floor ({partition}) failed: {_failure(proc)}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall"], out["busy"] = wall, busy.mean()
    return out


def fedpriv_run(
    strategy: str, rounds: int, out: Path, extra: str = "", env: dict[str, str] | None = None
) -> dict:
    """One ``fedpriv run`` on local-simulation-gpu: wall seconds, strategy seconds, accuracy,
    the GPU's mean busy percent. ``extra``: more run-config overrides (``num-workers=4``)."""
    shutil.rmtree(out, ignore_errors=True)  # a finished run directory would be skipped
    folder = Path((env or {}).get("FEDPRIV_COMPILE_CACHE", CACHE))
    cached = len(list(folder.glob("*-cache")))  # compiled programs there before the run
    overrides = (
        f"scenario='synthetic-mri' strategy='{strategy}' privacy='none' "
        f"num-server-rounds={rounds} output-dir='{out}' {extra}"
    ).strip()
    cmd = [
        sys.executable,
        "-m",
        "fedpriv.scenarios.cli.main",
        "run",
        "--federation",
        "local-simulation-gpu",
    ]
    with GpuBusy() as busy:
        wall, proc = _run(cmd + ["--run-config", overrides], env)
    if proc.returncode != 0:
        return {"wall": wall, "error": _failure(proc)}
    summary = json.loads((out / "summary.json").read_text())
    timeline = _timeline(out / "run.log")
    return {
        "wall": wall,
        "strategy_seconds": summary.get(
            "training_seconds", summary.get("wall_seconds", float("nan"))
        ),
        "accuracy": summary.get("final", {}).get("accuracy", float("nan")),
        "busy": busy.mean(),
        "cached": cached,
        "timeline": timeline,
    }


ROUND_SECONDS = re.compile(r"round (\d+)/\d+ .* · ([0-9.]+) s(?: · .*)?$")
BUILT = re.compile(r"start-up · model built: .*\(([0-9.]+) s\)$")


def _timeline(run_log: Path) -> str:
    """Where the run's time went, from its console lines in ``run.log``: the start-up until
    the model was built, rounds 0 and 1 (compilation), the median of the later rounds."""
    try:
        lines = run_log.read_text().splitlines()
    except OSError:
        return ""
    rounds: dict[int, float] = {}
    built = ""
    for line in lines:
        if match := BUILT.search(line):
            built = f"start-up {float(match.group(1)):.1f} s, "
        elif match := ROUND_SECONDS.search(line):
            rounds[int(match.group(1))] = float(match.group(2))
    later = sorted(v for k, v in rounds.items() if k >= 2)
    if not later:
        return built.rstrip(", ")
    median = later[len(later) // 2]
    return (
        f"{built}round 0 {rounds.get(0, float('nan')):.1f} s, round 1 "
        f"{rounds.get(1, float('nan')):.1f} s, rounds 2+ {median:.1f} s (median)"
    )


def _grid_cmd(args: argparse.Namespace, partition: str, out: Path) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "fedpriv.scenarios.cli.main",
        "grid",
        "--scenario",
        "synthetic-mri",
    ]
    cmd += ["--strategies", ",".join(args.strategies), "--privacy", ",".join(args.privacy)]
    cmd += ["--seeds", ",".join(map(str, args.seeds)), "--federation", "local-simulation-gpu"]
    if args.parallel:
        cmd += ["--parallel", str(args.parallel)]
    cmd += ["--output-dir", str(out), "--run-config"]
    return cmd + [f"partition='{partition}' num-server-rounds={args.rounds}"]


def fedpriv_grids(args: argparse.Namespace, out: Path) -> dict:
    """``fedpriv grid`` of the chosen cells, one grid per partition, all partitions side by
    side on the GPU; stopped after ``args.grid_budget`` seconds (0: no limit). Returns the
    wall seconds, cells, complete cells, the GPU's mean busy percent and ``stopped``."""
    shutil.rmtree(out, ignore_errors=True)  # complete cells would be skipped
    procs, t0 = [], time.perf_counter()
    with GpuBusy() as busy:
        for partition in args.partitions:
            (out / partition).mkdir(parents=True, exist_ok=True)
            log = (out / f"{partition}.log").open("w")
            cmd = _grid_cmd(args, partition, out / partition)
            procs.append(
                subprocess.Popen(
                    cmd, cwd=ROOT, env=_env(), stdout=log, stderr=log, start_new_session=True
                )
            )
        stopped = _wait_all(procs, args.grid_budget, t0)
    wall = time.perf_counter() - t0
    cells = len(args.strategies) * len(args.privacy) * len(args.seeds) * len(args.partitions)
    done = len(list(out.glob("*/*/*/seed*/summary.json")))
    ok = not stopped and all(p.returncode == 0 for p in procs)
    return {
        "wall": wall,
        "cells": cells,
        "done": done,
        "ok": ok,
        "stopped": stopped,
        "busy": busy.mean(),
    }


def _wait_all(procs: list[subprocess.Popen], budget: float, t0: float) -> bool:
    """Wait for ``procs``; past ``budget`` seconds (> 0) stop their process groups. True when
    they were stopped."""
    while any(p.poll() is None for p in procs):
        if budget > 0 and time.perf_counter() - t0 > budget:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            for p in procs:
                p.wait()
            return True
        time.sleep(1.0)
    return False


class GpuBusy:
    """The GPU's busy percent sampled every 0.5 s by ``nvidia-smi`` while the block runs
    (``utilization.gpu``: the share of time a kernel was running)."""

    def __enter__(self) -> GpuBusy:
        self.samples: list[float] = []
        cmd = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
        try:
            self._proc = subprocess.Popen(
                [*cmd, "-lms", "500"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        except OSError:
            self._proc = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        out, _ = self._proc.communicate()
        for line in out.splitlines():
            try:
                self.samples.append(float(line.split(",")[0]))
            except ValueError:
                continue

    def mean(self) -> float:
        return sum(self.samples) / len(self.samples) if self.samples else float("nan")


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
    parser.add_argument("--runs", default="cold,warm,per-client", help=f"some of {tuple(RUNS)}")
    parser.add_argument("--parallel", default="", help="fedpriv grid --parallel (per partition)")
    parser.add_argument(
        "--grid-budget",
        type=float,
        default=0.0,
        help="stop the grid after this many seconds and extrapolate from the complete cells",
    )
    parser.add_argument("--out", default="", help="also copy the results table here")
    args = parser.parse_args(argv)
    args.strategies = _csv(args.strategies, STRATEGIES, "strategies")
    args.privacy = _csv(args.privacy, PRIVACY, "privacy")
    args.partitions = _csv(args.partitions, PARTITIONS, "partitions")
    args.runs = _csv(args.runs, tuple(RUNS), "runs")
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s]
    except ValueError:
        message = f"bench-gpu: seeds = {args.seeds!r} is not allowed; expected integers"
        raise SystemExit(message) from None
    if args.rounds < 1 or not args.seeds:
        raise SystemExit(f"bench-gpu: rounds = {args.rounds}: expected >= 1 and some seeds")
    return args


def _grid_rows(args: argparse.Namespace, floors: dict[str, dict], tmp: Path) -> list[str]:
    got = fedpriv_grids(args, tmp / "grid")
    per_cell = sum(floors[p]["wall"] for p in args.partitions) / len(args.partitions)
    ref = got["cells"] * per_cell
    if got["stopped"] and got["done"]:
        est = got["wall"] * got["cells"] / got["done"]
        what = (
            f"stopped at the {args.grid_budget:.0f} s budget with {got['done']} of "
            f"{got['cells']} cells complete; {got['cells']} cells extrapolated: "
            f"{est:.0f} s = {est / 60:.1f} min"
        )
    else:
        est = got["wall"]
        what = f"{got['done']} of {got['cells']} cells complete" + (
            "" if got["ok"] else ", some failed"
        )
    return [
        f"| MP grid ({' + '.join(args.partitions)} side by side, {what}; GPU busy "
        f"{got['busy']:.0f} %) | {est:.1f} | {got['cells']} x {per_cell:.1f} = {ref:.1f} | "
        f"**{est / ref:.2f}x** |"
    ]


def _run_row(label: str, got: dict, ref: dict) -> str:
    if "error" in got:
        return f"| one MP run, fedavg, {label} | failed: {got['error']} | {ref['wall']:.1f} | — |"
    return (
        f"| one MP run, fedavg, no privacy, {label} (strategy {got['strategy_seconds']:.1f} s; "
        f"accuracy {got['accuracy']:.3f} / floor {ref['accuracy']:.3f}; GPU busy "
        f"{got['busy']:.0f} %; {got['cached']} compiled programs cached before; "
        f"{got['timeline']}) | "
        f"{got['wall']:.1f} | {ref['wall']:.1f} (training+eval "
        f"{ref['train_seconds']:.1f}; GPU busy {ref.get('busy', float('nan')):.0f} %) | "
        f"**{got['wall'] / ref['wall']:.2f}x** |"
    )


def main(argv: list[str] | None = None) -> int:
    gpus = gpu_names()
    if not gpus:
        print(NO_GPU)
        return 2
    args = parse_args(argv)
    tmp = ROOT / "runs" / "bench-gpu"
    floors = {p: floor(args.rounds, p) for p in dict.fromkeys(["homogeneous", *args.partitions])}
    runs = {}
    for name in (n for n in RUNS if n in args.runs):  # in RUNS' order: "cold" before "warm"
        if name.startswith("cold"):  # nothing compiled yet in the cache the run uses
            own = (RUNS[name][2] or {}).get("FEDPRIV_COMPILE_CACHE")
            shutil.rmtree(own or CACHE, ignore_errors=True)
        runs[name] = fedpriv_run("fedavg", args.rounds, tmp / f"one-run-{name}", *RUNS[name][1:])
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
    for name, got in runs.items():
        lines.append(_run_row(RUNS[name][0], got, ref))
        print(lines[-1], flush=True)
    if not args.no_grid:
        lines += _grid_rows(args, floors, tmp)
    text = "\n".join(lines) + "\n"
    (ROOT / "bench" / "results-gpu.md").write_text(text)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
