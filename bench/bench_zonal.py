"""``hdp-paper`` with zone SuperNodes vs a plain loop doing the same trainings.

``fedpriv run scenario=hdp-paper`` trains, per placement (none, ldp, hdp, cdp) and round, the
k = 100 sampled clients of s = 10 zones: ``4 × rounds × 100`` client trainings (80,000 at the
scenario's 200 rounds). With ``zonal-runtime = zone-nodes`` the 10 zones are served by
``num-workers`` worker SuperNodes (``auto``: the CPUs, 2 here): each round is one packed
message per worker, whose zones' clients (50 each) train as one compiled cohort, instead of
100 client messages. The reference is :mod:`bench.tf_floor` on the same shards in one
process, FedAvg over all 100 clients for ``4 × rounds`` rounds, server test set only
(hdp-paper evaluates no client): the same number of trainings of the same sizes, without
Flower, zones, clipping or noise.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.bench_speed import fedpriv_run, tf_floor

PLACEMENTS = 4


def hdp_paper_row(tmp: Path, quick: bool, rounds: int = 200) -> list[str]:
    """One row: wall time of hdp-paper (``rounds`` rounds per placement) vs the floor."""
    from fedpriv.scenarios.config.registry import resolve_run_config

    rounds = 3 if quick else int(rounds)
    values = {"scenario": "hdp-paper", "num-server-rounds": rounds}
    cfg = resolve_run_config(values)
    clients = int(cfg["clients-per-round"])
    floor_cfg = {
        **cfg,
        "num-server-rounds": PLACEMENTS * rounds,
        "floor-client-eval": False,
    }
    floor = tf_floor(floor_cfg)
    run = fedpriv_run(values, tmp / "hdp-paper")
    runs = run["summary"]["runs"]
    strategy = sum(float(r.get("training_seconds", r.get("wall_seconds", 0.0))) for r in runs)
    per_round = strategy / (PLACEMENTS * rounds)
    trainings = PLACEMENTS * rounds * clients
    first = json.loads((tmp / "hdp-paper" / "none" / "summary.json").read_text())
    nodes = first.get("supernodes", cfg["num-zones"])
    return [
        f"| hdp-paper: `fedpriv run` {PLACEMENTS} placements x {rounds} rounds x {clients} "
        f"clients = {trainings:,} trainings, {cfg['num-zones']} zones on {nodes} SuperNodes "
        f"(start-up included) vs plain-Keras compiled loop (TensorFlow) doing the same "
        f"trainings in one process | {run['wall']:.1f} s ({per_round:.3f} s per round, "
        f"strategy {strategy:.1f} s) | {floor['wall']:.1f} s "
        f"(training {floor['train_seconds']:.1f} s) | "
        f"**{run['wall'] / floor['wall']:.2f}x** wall (goal: hdp-paper <= 300 s) |"
    ]
