"""``make bench``: every figure is a ratio measured side by side in one run (SPEC §8).

Rows:
1. framework overhead: a ``fedpriv run`` simulation (flower-simulation, Ray) of the digits
   scenario vs the same local training done by plain Keras ``fit``/``evaluate`` calls in one
   process (the floor for that work on this machine);
2. metric-DP distance and Laplace R^n sampling (``bench/bench_math.py``);
3. scale: one round with 100 total clients at several clients-per-round.

Writes ``bench/results.md`` and prints it. ``--quick`` shrinks every size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def run_simulation(overrides: str, out: Path) -> tuple[float, dict]:
    """Wall time of one ``fedpriv run`` and its summary."""
    t0 = time.perf_counter()
    cmd = [
        sys.executable,
        "-m",
        "scenarios.cli",
        "run",
        "--run-config",
        f"{overrides} output-dir='{out}'",
    ]
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return wall, json.loads((out / "summary.json").read_text())


def plain_keras(cfg: dict) -> float:
    """The same rounds of local fit/evaluate + numpy FedAvg in one process (fresh process)."""
    code = f"""
import json, time
t0 = time.perf_counter()
import numpy as np
from clients.keras_client import (TrainSettings, federated_data, initial_weights, model_for,
                                  train_local, evaluate_local)
cfg = json.loads({json.dumps(json.dumps(cfg))})
data = federated_data(cfg)
w = initial_weights(cfg, data)
model = model_for(cfg, data)
for rnd in range(1, cfg["num-server-rounds"] + 1):
    updates, sizes = [], []
    for p, c in enumerate(data.clients):
        s = TrainSettings.from_config(cfg, seed=rnd * 100 + p)
        nw, _ = train_local(model, w, c.x_train, c.y_train, s)
        updates.append(nw); sizes.append(len(c.x_train))
    tot = sum(sizes)
    w = [sum(u[i] * n / tot for u, n in zip(updates, sizes)) for i in range(len(w))]
    for c in data.clients:
        evaluate_local(model, w, c.x_test, c.y_test)
print(time.perf_counter() - t0)
"""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
    )
    return float(proc.stdout.strip().splitlines()[-1])


def framework_rows(tmp: Path, rounds: int) -> list[str]:
    from scenarios.registry import resolve_run_config

    overrides = f"scenario='digits' privacy='none' num-server-rounds={rounds}"
    t_plain_start = time.perf_counter()
    cfg = resolve_run_config({"scenario": "digits", "privacy": "none", "num-server-rounds": rounds})
    plain_inner = plain_keras(cfg)
    plain_wall = time.perf_counter() - t_plain_start
    sim_wall, summary = run_simulation(overrides, tmp / "overhead")
    strategy_time = summary.get("wall_seconds", float("nan"))
    return [
        f"| framework overhead: `fedpriv run` digits ({rounds} rounds, 4 clients) vs plain Keras "
        f"in one process | {sim_wall:.1f} s (strategy {strategy_time:.1f} s) | "
        f"{plain_wall:.1f} s (training {plain_inner:.1f} s) | "
        f"{sim_wall / plain_wall:.2f}x wall, {strategy_time / plain_inner:.2f}x strategy/training |"
    ]


def scale_rows(tmp: Path, quick: bool) -> list[str]:
    total = 20 if quick else 100
    rows = []
    base = None
    for per_round in [5, 20] if quick else [10, 50, 100]:
        wall, summary = run_simulation(
            f"scenario='digits' privacy='none' model='digits-mlp' num-clients={total} "
            f"clients-per-round={per_round} num-server-rounds=1 local-epochs=1",
            tmp / f"scale{per_round}",
        )
        strategy = summary.get("wall_seconds", float("nan"))
        base = base or strategy
        rows.append(
            f"| scale: 1 round, {total} clients, {per_round} per round | "
            f"{strategy:.1f} s strategy ({wall:.1f} s wall) | — | "
            f"{strategy / base:.2f}x of the smallest |"
        )
    return rows


def math_rows(quick: bool) -> list[str]:
    from bench import bench_math

    shapes = bench_math.QUICK_SHAPES if quick else bench_math.FULL_SHAPES
    rows = [
        bench_math.bench_distance(20 if quick else 100, shapes, 0, naive_limit=120.0),
        bench_math.bench_laplace(120_000 if quick else 1_200_000, 0, 11),
    ]
    return [
        f"| {r['name']}, {r['size']} | {r['fast']:.4f} s (CPU {r['fast_cpu']:.4f} s) | "
        f"{r['ref']:.4f} s (CPU {r['ref_cpu']:.4f} s) | "
        f"{r['ref'] / r['fast']:.2f}x ({'reference/fedpriv' if not r.get('slower') else 'n/a'}); "
        f"fedpriv/reference {r['fast'] / r['ref']:.2f} — {r['note']} |"
        for r in rows
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    tmp = ROOT / "runs" / "bench"
    tmp.mkdir(parents=True, exist_ok=True)
    lines = [
        "| benchmark | fedpriv | reference | ratio |",
        "|---|---|---|---|",
        *math_rows(args.quick),
        *framework_rows(tmp, 2 if args.quick else 3),
        *scale_rows(tmp, args.quick),
    ]
    text = (
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}.\n\n" + "\n".join(lines) + "\n"
    )
    (ROOT / "bench" / "results.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
