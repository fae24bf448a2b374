"""The ``startup`` row of ``make bench``: where a run's seconds before round 1 go, its whole
wait and its memory, against the plain-Keras floor, in one invocation (fresh processes).

Workload A (:data:`bench.bench_speed.CROSS_DEVICE`: digits, 100 IID clients all sampled, 5
local epochs, batch 8, digits-mlp, SGD 0.02, 20 rounds) as ``fedpriv run`` (worker SuperNodes,
the default) and as the floor (:mod:`bench.tf_floor`, one process). For each: the whole wait
(process start to exit), the start-up to round 1 (to the first round line: the floor's first
round stamp minus its seconds per round, fedpriv's first round line minus its seconds per
round), and the peak resident memory of the process tree (the sum of RSS over the command's
process and every process below it, sampled every 0.1 s). fedpriv's start-up is split by
summary.json's ``startup_steps`` (:mod:`fedpriv.scenarios.app.startup`: ``runner started``
(the interpreter and the CLI), ``Ray started``, ``apps imported`` (TensorFlow/Keras in the
driver, overlapped with Ray's start), ``engine started``, ``data loaded``, ``model built``,
``workers ready`` (the workers' imports and first answer)) and its CPU seconds by process role
(driver, workers, Ray's daemons: :func:`bench.bench_speed.cpu_by_role`); the row also counts
the processes of the run still alive 1 s after the command returned (goal: none).
"""

from __future__ import annotations

from pathlib import Path

from bench.bench_speed import CROSS_DEVICE, _env, fedpriv_run, monitored_run
from bench.bench_virtual import slope

GIB = 2**30


def floor_run(cfg: dict) -> dict:
    """The plain-Keras floor of ``cfg`` in a fresh process: wall, peak tree RSS, its JSON."""
    import json
    import sys

    cmd = [sys.executable, "-m", "bench.tf_floor", json.dumps(cfg)]
    res = monitored_run(cmd, None, _env(), 0.1)
    res.update(json.loads(res["output"].strip().splitlines()[-1]))
    return res


def split_text(steps: dict[str, float]) -> str:
    """``step s`` pairs in the order they happened, each the seconds since the command."""
    return ", ".join(f"{k} {v:.1f} s" for k, v in sorted(steps.items(), key=lambda kv: kv[1]))


def cpu_text(cpu: dict[str, tuple[float, int]]) -> str:
    """``CPU s: role seconds (processes), ...`` of :func:`bench.bench_speed.cpu_by_role`,
    largest first: where a run's CPU goes (the TensorFlow import of the driver and of every
    worker, Ray's daemons)."""
    parts = [
        f"{role} {sec:.1f} ({n})"
        for role, (sec, n) in sorted(cpu.items(), key=lambda kv: -kv[1][0])
    ]
    return f"CPU s {sum(sec for sec, _ in cpu.values()):.1f}: " + ", ".join(parts)


def startup_rows(tmp: Path, quick: bool) -> list[str]:
    """The start-up row (module docstring)."""
    from fedpriv.scenarios.config.registry import resolve_run_config

    values = dict(CROSS_DEVICE, **({"num-server-rounds": 5} if quick else {}))
    rounds = int(values["num-server-rounds"])
    floor = floor_run(resolve_run_config(values))
    floor_stamps = [0.0, *floor["round_stamps"]]
    floor_round = slope(floor_stamps)
    floor_start = floor["round_stamps"][0] - floor_round
    run = fedpriv_run(values, tmp / "startup-A", watch_rounds=True, interval=0.1)
    per_round = slope(run["stamps"])
    # the round-0 line (evaluation of the initial model) comes first: round 1 begins there
    start = run["stamps"][0] if run["stamps"] else float("nan")
    steps = run["summary"].get("startup_steps", {})
    left = len(run["left"])
    return [
        f"| start-up, workload A (digits, 100 IID clients, 5 epochs, batch 8, digits-mlp, "
        f"SGD 0.02, {rounds} rounds), fresh processes | whole wait {run['wall']:.1f} s, "
        f"start-up to round 1 {start:.1f} s ({split_text(steps)}), {per_round:.2f} s/round, "
        f"peak tree RSS {run['peak_rss'] / GIB:.2f} GiB, {cpu_text(run['cpu'])}, "
        f"{left} processes alive 1 s after "
        f"it returned | floor {floor['wall']:.1f} s, start-up {floor_start:.1f} s, "
        f"{floor_round:.2f} s/round, peak RSS {floor['peak_rss'] / GIB:.2f} GiB | "
        f"**{run['wall'] / floor['wall']:.2f}x** wall, memory "
        f"**{run['peak_rss'] / floor['peak_rss']:.2f}x** (goal: <= 1.2x wall, start-up <= 8 s, "
        f"<= 1.5 GB, none left) |"
    ]
