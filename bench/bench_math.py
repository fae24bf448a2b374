"""Benchmark of the privacy math (SPEC §8). A script, not a test.

Prints a Markdown table; every ratio is measured side by side in this one run:

1. metric-DP distance d: vectorised per-layer Gram (``fedpriv.privacy.distance``) vs the naive
   double loop over client pairs (the authors' algorithm), 100 clients × 1.2 M params
   (4 layers, float32). If the naive loop is projected to take longer than ``--naive-limit``
   seconds, it is timed on the first k clients and extrapolated linearly in the number of
   pairs (the row says so).
2. Laplace in R^n: ``sample_laplace_rn(n = 1.2 M)`` vs ``rng.standard_normal(1.2 M)``.

Usage: ``python bench/bench_math.py [--quick] [--seed 0] [--naive-limit 60]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from collections.abc import Callable

import numpy as np

from fedpriv.privacy.distance import max_pairwise_layer_distance, naive_max_pairwise_layer_distance
from fedpriv.privacy.mechanisms import sample_laplace_rn

# 4 layers, 1,200,000 parameters: conv kernel, conv bias, dense kernel, dense bias.
FULL_SHAPES = [(3, 3, 32, 64), (64,), (1181, 1000), (504,)]
QUICK_SHAPES = [(3, 3, 8, 16), (16,), (118, 1000), (832,)]  # 120,000 parameters


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _models(num_clients: int, shapes: list[tuple[int, ...]], seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    base = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    return [
        [b + np.float32(0.01) * rng.standard_normal(b.shape, dtype=np.float32) for b in base]
        for _ in range(num_clients)
    ]


def _timed(fn: Callable[[], object]) -> tuple[float, object]:
    """Wall seconds and the result; CPU seconds of the call are kept in ``_timed.cpu``."""
    cpu0, start = time.process_time(), time.perf_counter()
    out = fn()
    wall = time.perf_counter() - start
    _timed.cpu = time.process_time() - cpu0  # type: ignore[attr-defined]
    return wall, out


def bench_distance(num_clients: int, shapes, seed: int, naive_limit: float) -> dict:
    models = _models(num_clients, shapes, seed)
    params = sum(int(np.prod(s)) for s in shapes)
    pairs = num_clients * (num_clients - 1) // 2
    max_pairwise_layer_distance(models[:3])  # warm-up (BLAS threads, imports)
    t_fast, d_fast = _timed(lambda: max_pairwise_layer_distance(models))
    c_fast = _timed.cpu  # type: ignore[attr-defined]
    # Pilot: the naive loop on the first k clients, to project the full run.
    k = min(num_clients, 12)
    pilot_pairs = k * (k - 1) // 2
    t_pilot, _ = _timed(lambda: naive_max_pairwise_layer_distance(models[:k]))
    c_pilot = _timed.cpu  # type: ignore[attr-defined]
    projected = t_pilot * pairs / pilot_pairs
    if projected <= naive_limit or k == num_clients:
        t_naive, d_naive = _timed(lambda: naive_max_pairwise_layer_distance(models))
        c_naive = _timed.cpu  # type: ignore[attr-defined]
        how = f"naive measured on all {pairs} pairs"
        rel = abs(float(d_fast) - float(d_naive)) / float(d_naive)
        how += f"; results agree to {rel:.1e} relative"
    else:
        t_naive, c_naive = projected, c_pilot * pairs / pilot_pairs
        how = (
            f"naive EXTRAPOLATED linearly from {pilot_pairs} pairs (first {k} clients, "
            f"{t_pilot:.2f} s) to {pairs} pairs; projected > {naive_limit:g} s"
        )
    return {
        "name": "metric-DP distance d: vectorised Gram vs naive pair loop",
        "size": f"{num_clients} clients × {params:,} params ({len(shapes)} layers, float32)",
        "fast": t_fast,
        "ref": t_naive,
        "fast_cpu": c_fast,
        "ref_cpu": c_naive,
        "note": how,
    }


def bench_laplace(n: int, seed: int, repeats: int) -> dict:
    rng_a = np.random.default_rng(seed)
    rng_b = np.random.default_rng(seed + 1)
    sample_laplace_rn(n, 1.0, rng_a)  # warm-up
    rng_b.standard_normal(n)
    t_lap, t_norm, c_lap, c_norm = [], [], [], []
    for _ in range(repeats):  # interleaved; best of N (robust on a shared machine)
        t_lap.append(_timed(lambda: sample_laplace_rn(n, 1.0, rng_a))[0])
        c_lap.append(_timed.cpu)  # type: ignore[attr-defined]
        t_norm.append(_timed(lambda: rng_b.standard_normal(n))[0])
        c_norm.append(_timed.cpu)  # type: ignore[attr-defined]
    return {
        "name": "Laplace in R^n: sample_laplace_rn vs rng.standard_normal(n)",
        "size": f"n = {n:,}, best of {repeats}",
        "fast": min(t_lap),
        "ref": min(t_norm),
        "fast_cpu": min(c_lap),
        "ref_cpu": min(c_norm),
        "note": "ratio = Laplace time / normals time (the floor: one normal per coordinate)",
        "slower": True,
    }


def _ratio(fast: float, ref: float, slower: bool) -> str:
    if fast <= 0 or ref <= 0:
        return "n/a"
    return f"{fast / ref:.2f}× the reference" if slower else f"{ref / fast:.1f}× faster"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 clients × 120k params")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--naive-limit",
        type=float,
        default=60.0,
        help="seconds above which the naive loop is extrapolated",
    )
    args = parser.parse_args(argv)
    load = os.getloadavg()
    clients, shapes = (20, QUICK_SHAPES) if args.quick else (100, FULL_SHAPES)
    n = sum(int(np.prod(s)) for s in shapes)

    rows = [bench_distance(clients, shapes, args.seed, args.naive_limit)]
    rows.append(bench_laplace(n, args.seed, repeats=7 if args.quick else 21))

    print(f"# fedpriv privacy-math benchmark{' (--quick)' if args.quick else ''}\n")
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average at start {load[0]:.1f}\n"
    )
    print(
        "| benchmark | size | fedpriv wall (s) | reference wall (s) | ratio (wall) "
        "| fedpriv CPU (s) | reference CPU (s) | ratio (CPU) | note |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        print(
            f"| {row['name']} | {row['size']} | {row['fast']:.4f} | {row['ref']:.4f} | "
            f"{_ratio(row['fast'], row['ref'], row.get('slower', False))} | "
            f"{row['fast_cpu']:.4f} | {row['ref_cpu']:.4f} | "
            f"{_ratio(row['fast_cpu'], row['ref_cpu'], row.get('slower', False))} | "
            f"{row['note']} |"
        )
    print(
        "\nWall time is the headline; CPU time (all threads of this process) is shown because "
        "a shared machine inflates wall time."
    )
    print(f"\npeak RSS {_peak_rss_mib():.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
