"""``make bench``: every figure is a ratio measured side by side in one run (SPEC §8).

Rows:
1. metric-DP distance and Laplace R^n sampling (``bench/bench_math.py``);
2. cross-device work vs the plain-Keras floor (TensorFlow backend), and fedpriv's per-call
   cost vs Flower's null-message floor (``bench/bench_speed.py``, ``bench/tf_floor.py``,
   ``bench/nullapp``);
3. the MP CNN step time of fedpriv's trainer vs plain Keras on the same backend, once on
   TensorFlow and once on JAX, each in its own process (``bench/bench_step.py``);
4. scale: one round with 100 total clients at several clients-per-round, and 10,000
   virtual clients with 100 per round (seconds per round, peak memory);
5. audit: ``fedpriv audit`` vs ``fedpriv run`` of the default config (``bench/bench_audit.py``).
6. ``hdp-paper`` with zone SuperNodes vs a plain loop doing the same client trainings
   (``bench/bench_zonal.py``; ``--hdp-rounds`` shortens it).
7. round: the MP-CNN per-round overhead, one local step per round, fedpriv's seconds per round
   above the plain-Keras floor's (``bench/bench_round.py``).
8. CLI response: ``fedpriv --help``, ``fedpriv run --help`` and a config error vs the
   interpreter's start and ``import flwr`` (``bench/bench_cli.py``; goal <= 1 s each).
9. grid cells side by side (``fedpriv grid --parallel N``) vs the same cells serially
   (``bench/bench_parallel.py``).
10. virtual clients: the cross-device run on worker SuperNodes vs one SuperNode per client vs
    the plain-Keras floor, and 10,000 clients vs 100 on worker SuperNodes
    (``bench/bench_virtual.py``).
11. distributed DP: one round of ``distributed-dp`` vs the same round with ``global-dp`` at
    20 and 100 clients a round, and the bytes each client sends (``bench/bench_distributed.py``;
    goal <= 1.5x).
12. start-up: workload A's whole wait, start-up to round 1 split by step, peak process-tree
    memory and the processes left after it, vs the plain-Keras floor (``bench/bench_startup.py``).
13. peers: workloads A, B (global DP, 20 a round) and scale (1,000 clients) as fedpriv, the
    Keras and numpy floors, vanilla Flower 1.42 and pfl 0.6.0 (``.venv-peers``), and pfl's
    Keras 3 caveat (``bench/bench_peers.py``).

Writes ``bench/results.md`` and prints it. ``--quick`` shrinks every size.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.simrun import run_simulation  # noqa: E402


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
        strategy = summary.get("training_seconds", summary.get("wall_seconds", float("nan")))
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


def _rows(name: str, make) -> list[str]:
    """The rows of one benchmark; a failure becomes a row saying so (the others still run)."""
    try:
        return list(make())
    except Exception as err:  # noqa: BLE001  (one failing row must not lose the others)
        reason = " ".join(str(err).split())[-300:]
        return [f"| {name} | failed: {type(err).__name__}: {reason} | — | — |"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated subset: math,cross-device,step,scale,grid,many,load,audit,"
        "hdp-paper,round,cli,parallel,virtual,many-virtual,distributed,startup,peers (written to "
        "runs/bench/results-only.md; the full run writes bench/results.md)",
    )
    parser.add_argument(
        "--hdp-rounds", type=int, default=200, help="rounds per placement of the hdp-paper row"
    )
    args = parser.parse_args()
    tmp = ROOT / "runs" / "bench"
    tmp.mkdir(parents=True, exist_ok=True)
    from bench import (
        bench_audit,
        bench_cli,
        bench_distributed,
        bench_load,
        bench_parallel,
        bench_peers,
        bench_round,
        bench_speed,
        bench_startup,
        bench_step,
        bench_virtual,
        bench_zonal,
    )

    benches = {
        "math": lambda: math_rows(args.quick),
        "cross-device": lambda: bench_speed.cross_device_rows(tmp, args.quick)[0],
        "step": lambda: bench_step.step_rows(args.quick),
        "scale": lambda: scale_rows(tmp, args.quick),
        "grid": lambda: bench_speed.grid_row(tmp, args.quick),
        "parallel": lambda: bench_parallel.parallel_row(tmp, args.quick),
        "many": lambda: bench_speed.many_clients_row(tmp, args.quick),
        "load": lambda: bench_load.load_row(args.quick),
        "audit": lambda: bench_audit.audit_row(tmp, args.quick),
        "hdp-paper": lambda: bench_zonal.hdp_paper_row(tmp, args.quick, args.hdp_rounds),
        "round": lambda: bench_round.round_rows(tmp, args.quick),
        "cli": lambda: bench_cli.cli_rows(args.quick),
        "virtual": lambda: bench_virtual.virtual_rows(tmp, args.quick),
        "many-virtual": lambda: bench_virtual.many_virtual_row(tmp, args.quick),
        "distributed": lambda: bench_distributed.distributed_rows(tmp, args.quick),
        "startup": lambda: bench_startup.startup_rows(tmp, args.quick),
        "peers": lambda: bench_peers.peer_rows(tmp, args.quick),
    }
    chosen = [x for x in args.only.split(",") if x] or list(benches)
    lines = ["| benchmark | fedpriv | reference | ratio |", "|---|---|---|---|"]
    unknown = sorted(set(chosen) - set(benches))
    if unknown:
        parser.error(f"--only {unknown[0]!r} is not allowed; expected some of {','.join(benches)}")
    for name in chosen:
        lines += _rows(name, benches[name])
        print(lines[-1], flush=True)
    text = (
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}.\n\n" + "\n".join(lines) + "\n"
    )
    # a partial run (--only) must not replace the record of the full one
    target = ROOT / "bench" / "results.md" if not args.only else tmp / "results-only.md"
    target.write_text(text)
    print(text)
    print(f"written to {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
