"""Virtual-client rows of ``make bench``: worker SuperNodes vs one SuperNode per client.

- ``virtual``: the cross-device run of :data:`bench.bench_speed.CROSS_DEVICE` (digits, 100
  IID clients all sampled, 5 local epochs, batch 8, digits-mlp, SGD 0.02, 20 rounds) four
  times in one invocation: the plain-Keras floor (:mod:`bench.tf_floor`), ``fedpriv run``
  with one SuperNode per client (``num-workers = 100``, the path before virtual clients) and
  with worker SuperNodes (``num-workers = auto``). For each: the user's whole wait, the
  seconds per round (the slope of the round lines over rounds 1..R, start-up removed) and
  the time outside the rounds (wall − R x slope: start-up, discovery, shutdown).
- ``many-virtual``: start-up (to the round-0 line) and seconds per round of IFCA on
  gp-synthetic with 10,000 clients (+20 validation), 100 per round, on worker SuperNodes,
  against the same run with 100 clients (+20).
"""

from __future__ import annotations

from pathlib import Path

from bench.bench_speed import CROSS_DEVICE, fedpriv_run, tf_floor


def slope(stamps: list[float], first: int = 1) -> float:
    """Seconds per round: the mean gap between the round lines from ``first`` on."""
    tail = stamps[first:]
    return (tail[-1] - tail[0]) / (len(tail) - 1) if len(tail) > 1 else float("nan")


def _describe(name: str, wall: float, per_round: float, rounds: int, floor: dict) -> str:
    outside = wall - rounds * per_round
    return (
        f"{name}: {wall:.1f} s wall (**{wall / floor['wall']:.2f}x** the floor), "
        f"{per_round:.2f} s/round (**{per_round / floor['per_round']:.2f}x**), "
        f"{outside:.1f} s outside the rounds"
    )


def virtual_rows(tmp: Path, quick: bool) -> list[str]:
    """The cross-device run before/after virtual clients, with the floor, one invocation."""
    from fedpriv.scenarios.config.registry import resolve_run_config

    values = dict(CROSS_DEVICE, **({"num-server-rounds": 5} if quick else {}))
    rounds, clients = int(values["num-server-rounds"]), int(values["num-clients"])
    cfg = resolve_run_config(values)
    floor = tf_floor(cfg)
    floor["per_round"] = slope([0.0, *floor["round_stamps"]])
    runs = {}
    variants = (
        ("before", {"num-workers": clients}),
        ("client-by-client", {"num-workers": "auto", "cohort-training": False}),
        ("after", {"num-workers": "auto", "cohort-training": True}),
    )
    for label, extra in variants:
        run = fedpriv_run({**values, **extra}, tmp / f"virtual-{label}", watch_rounds=True)
        run["per_round"] = slope(run["stamps"])
        runs[label] = run
    before, one, after = runs["before"], runs["client-by-client"], runs["after"]
    workers = after["summary"].get("supernodes", "?")
    return [
        f"| virtual clients, cross-device: digits, {clients} IID clients all sampled, 5 epochs, "
        f"batch 8, digits-mlp, SGD 0.02, {rounds} rounds; before = one SuperNode per client "
        f"(num-workers = {clients}), then {workers} worker SuperNodes (num-workers = auto) "
        f"training client by client (cohort-training = false), after = the same workers "
        f"training each message's clients as one cohort "
        f"| {_describe('before', before['wall'], before['per_round'], rounds, floor)}; "
        f"{_describe('client by client', one['wall'], one['per_round'], rounds, floor)}; "
        f"{_describe('after', after['wall'], after['per_round'], rounds, floor)}; final acc "
        + " / ".join(f"{r['summary']['final']['accuracy']:.4f}" for r in runs.values())
        + f" | floor {floor['wall']:.1f} s wall, {floor['per_round']:.2f} s/round, acc "
        f"{floor['accuracy']:.4f} | **{after['wall'] / floor['wall']:.2f}x** wall, "
        f"**{after['per_round'] / floor['per_round']:.2f}x** per round "
        f"(before {before['wall'] / floor['wall']:.2f}x, "
        f"{before['per_round'] / floor['per_round']:.2f}x; goal <= 3x, <= 1.2x) |"
    ]


def many_virtual_row(tmp: Path, quick: bool) -> list[str]:
    """10,000 clients on worker SuperNodes vs 100: start-up and seconds per round."""
    users, rounds = (2_000, 3) if quick else (10_000, 20)
    out = {}
    for n in (100, users):
        values = {
            "scenario": "gp-synthetic",
            "num-clients": n + 20,
            "validation-clients": 20,
            "users-per-round": 100,
            "num-server-rounds": rounds,
            "patience": 1000,
            "num-workers": "auto",
        }
        run = fedpriv_run(values, tmp / f"many-virtual-{n}", watch_rounds=True)
        stamps = run["stamps"]
        out[n] = (stamps[0] if stamps else float("nan"), slope(stamps), run)
    (start_s, round_s, run_s), (start_l, round_l, run_l) = out[100], out[users]
    workers = run_l["summary"].get("supernodes", "?")
    return [
        f"| virtual clients, many: gp-synthetic IFCA (linear), {users:,} clients (+20 "
        f"validation) on {workers} worker SuperNodes, 100 per round, {rounds} rounds | "
        f"start-up (to the round-0 line) {start_l:.1f} s, {round_l:.2f} s/round, "
        f"{run_l['wall']:.1f} s wall, peak memory {run_l['peak_rss'] / 2**30:.2f} GiB | "
        f"100 clients (+20): start-up {start_s:.1f} s, {round_s:.2f} s/round, "
        f"{run_s['wall']:.1f} s wall | per round **{round_l / round_s:.2f}x** of 100 clients "
        f"(goal <= 1.1x); start-up goal <= 15 s |"
    ]
