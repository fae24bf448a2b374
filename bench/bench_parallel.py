"""``make bench`` row: grid cells side by side against the same cells serially.

The same ``fedpriv grid`` (digits, FedAvg, privacy none, seeds ``0..N-1``, a few rounds each)
twice, side by side in one run of the bench: ``--parallel 1`` (every cell in one simulation,
one after another) and ``--parallel N`` (N simulations at once, each with its own Ray, its own
cells and seeds). The ratio is side-by-side wall / serial wall (below 1 = faster). Two CPUs
leave little room: each simulation has its own driver and client actors competing for them;
the gain is on a GPU, whose per-round idle gaps the other cells fill (``make bench-gpu``).
The final accuracies of the two grids are reported too: the same cells, the same results.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from bench.bench_speed import monitored_run

CELL = "num-server-rounds={rounds} model='digits-mlp' local-epochs=1"


def grid_wall(out: Path, seeds: int, rounds: int, parallel: int) -> tuple[float, list[float]]:
    """Wall seconds of one ``fedpriv grid`` into an emptied ``out``; each cell's final
    server accuracy (seed order)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.main", "grid", "--scenario", "digits"]
    cmd += ["--strategies", "fedavg", "--privacy", "none", "--output-dir", str(out)]
    cmd += ["--seeds", ",".join(str(s) for s in range(seeds)), "--parallel", str(parallel)]
    cmd += ["--run-config", CELL.format(rounds=rounds)]
    wall = monitored_run(cmd)["wall"]
    finals = [
        json.loads((out / "fedavg" / "none" / f"seed{s}" / "summary.json").read_text())["final"]
        for s in range(seeds)
    ]
    return wall, [float(f["accuracy"]) for f in finals]


def parallel_row(tmp: Path, quick: bool) -> list[str]:
    """The row: N cells with ``--parallel N`` vs the same N cells with ``--parallel 1``."""
    cells, rounds = (2, 2) if quick else (4, 3)
    serial, acc_serial = grid_wall(tmp / "parallel-1", cells, rounds, 1)
    side, acc_side = grid_wall(tmp / "parallel-n", cells, rounds, cells)
    gap = max(abs(a - b) for a, b in zip(acc_serial, acc_side))
    return [
        f"| grid side by side: `fedpriv grid --parallel {cells}` digits, {cells} cells "
        f"({rounds} rounds each, digits-mlp) vs `--parallel 1` (the same cells serially in "
        f"one simulation) | {side:.1f} s | {serial:.1f} s | **{side / serial:.2f}x** of serial "
        f"(largest final-accuracy gap between the two: {gap:.3f}) |"
    ]
