"""The MP-CNN per-round overhead row of ``make bench``: fedpriv's seconds per round
above the plain-Keras floor's, with almost no compute per round.

Both sides run synthetic-mri with the MP CNN (6.4 M weights, 25.7 MB in float32), 4 clients,
ONE local step per client and round (one epoch of one batch: ``batch-size`` is larger than
every client's training split), no pretraining, FedAvg, no privacy:

- fedpriv: ``fedpriv run`` (the simulation engine, one Ray actor per client; per round a train
  and an evaluate message per client, the replies, aggregation, server-side evaluation, the
  round record and the checkpoint), in two variants run one after the other (:data:`VARIANTS`):
  ``evaluate-in-train = false`` (the model goes out twice per round) and ``true`` (one message
  per client and round carries train and evaluate, :mod:`fedpriv.scenarios.app.fused`);
- the floor: :mod:`bench.tf_floor` in one process (the same shards, one compiled call per
  client, FedAvg in numpy, each client's test split and the server test set evaluated).

Start-up (imports, Ray, compilation, round 0) is taken out by the slope over rounds
``1..R``: ``(t_R - t_1) / (R - 1)`` for the wall clock at the end of each round, and the same
for CPU seconds (the floor's process; fedpriv's whole process tree, Ray workers included,
read from /proc when each round's record appears). CPU seconds are reported beside wall
seconds because the CI machine is shared: wall time grows with the load, CPU time much less.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.bench_speed import ROOT, _env, _overrides, tf_floor

ROUND_RUN = {
    "scenario": "synthetic-mri",
    "privacy": "none",
    "strategy": "fedavg",
    "local-epochs": 1,
    "batch-size": 1024,  # > every client's training split: one step per client and round
    "pretrain-epochs": 0,
    "num-server-rounds": 6,
}
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    own: dict[int, float] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        own[int(entry)] = (int(fields[11]) + int(fields[12])) / TICKS
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        total += own.get(current, 0.0)
    return total


def watched_run(cmd: list[str], rounds_file: Path) -> dict:
    """Run ``cmd``; its wall seconds and, per line of ``rounds_file`` as it appears, the wall
    seconds since the start and the process tree's CPU seconds."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT)
        stamps: list[float] = []
        cpu: list[float] = []
        while proc.poll() is None:
            lines = rounds_file.read_text().count("\n") if rounds_file.exists() else 0
            if lines > len(stamps):
                now, used = time.perf_counter() - t0, tree_cpu(proc.pid)
                stamps += [now] * (lines - len(stamps))
                cpu += [used] * (lines - len(cpu))
            time.sleep(0.1)
        wall = time.perf_counter() - t0
        log.seek(0)
        output = log.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed: {output[-1500:]}")
    return {"wall": wall, "stamps": stamps, "cpu": cpu}


def per_round(points: Sequence[float]) -> float:
    """``(p[-1] - p[0]) / (len(p) - 1)``: the slope of a per-round series (start-up removed)."""
    if len(points) < 2:
        raise ValueError(f"{len(points)} round stamps: expected >= 2 to take a slope")
    return (points[-1] - points[0]) / (len(points) - 1)


def fedpriv_rounds(values: dict, out: Path) -> dict:
    """``fedpriv run`` of ``values`` into an emptied ``out``: wall and CPU seconds per round
    over rounds 1..R (``rounds.jsonl`` line 0 is the round-0 evaluation)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.main", "run", "--run-config"]
    cmd.append(_overrides({**values, "output-dir": str(out)}))
    res = watched_run(cmd, out / "rounds.jsonl")
    rounds = int(values["num-server-rounds"])
    if len(res["stamps"]) < rounds + 1:
        raise RuntimeError(f"{len(res['stamps'])} round records seen, expected {rounds + 1}")
    res["wall_per_round"] = per_round(res["stamps"][1 : rounds + 1])
    res["cpu_per_round"] = per_round(res["cpu"][1 : rounds + 1])
    res["summary"] = json.loads((out / "summary.json").read_text())
    return res


# the row's variants: train and evaluate in two messages per round (the model sent
# twice), and in one (``evaluate-in-train``, :mod:`fedpriv.scenarios.app.fused`), side by side in
# one call
VARIANTS = {"two messages": False, "one message": True}


def round_measure(tmp: Path, quick: bool) -> dict:
    """The floor and every variant of the row: ``{"floor": ..., "variants": {name: run},
    "rounds": R}`` (the variants run one after the other, after the floor)."""
    from fedpriv.scenarios.config.registry import resolve_run_config

    values = dict(ROUND_RUN, **({"num-server-rounds": 3} if quick else {}))
    cfg = resolve_run_config(values)
    floor = tf_floor(cfg)
    floor["wall_per_round"] = per_round(floor["round_stamps"])
    floor["cpu_per_round"] = per_round(floor["round_cpu"])
    variants = {
        name: fedpriv_rounds({**values, "evaluate-in-train": fused}, tmp / f"round-{fused}")
        for name, fused in VARIANTS.items()
    }
    return {"floor": floor, "variants": variants, "rounds": int(cfg["num-server-rounds"])}


def round_rows(tmp: Path, quick: bool) -> list[str]:
    """One row per variant: fedpriv's seconds per round above the floor's (wall and CPU)."""
    m = round_measure(tmp, quick)
    floor, rows = m["floor"], []
    for name, run in m["variants"].items():
        above_wall = run["wall_per_round"] - floor["wall_per_round"]
        above_cpu = run["cpu_per_round"] - floor["cpu_per_round"]
        rows.append(
            f"| MP-CNN round overhead, {name} per round (`evaluate-in-train = "
            f"{str(VARIANTS[name]).lower()}`): `fedpriv run` synthetic-mri, MP CNN (25.7 MB), "
            f"4 clients, one local step per client and round, {m['rounds']} rounds, slope over "
            f"rounds 1..{m['rounds']} vs the plain-Keras floor doing the same in one process | "
            f"{run['wall_per_round']:.2f} s/round wall, {run['cpu_per_round']:.2f} CPU-s/round "
            f"(process tree; final acc {run['summary']['final']['accuracy']:.3f}) | "
            f"{floor['wall_per_round']:.2f} s/round wall, {floor['cpu_per_round']:.2f} "
            f"CPU-s/round (acc {floor['accuracy']:.3f}) | **{above_wall:.2f} s/round above the "
            f"floor** wall, {above_cpu:.2f} CPU-s/round |"
        )
    return rows
