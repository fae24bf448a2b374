"""CLI response time: ``fedpriv --help``, ``fedpriv run --help`` and a config error.

Each is a fresh interpreter (``python -m fedpriv.scenarios.cli.main ...``), best of N wall times,
side by
side with the interpreter's own start (``python -c pass``: the floor) and with what the CLI
used to pay before its first line, ``import flwr`` (a fresh interpreter too). The goal is
<= 1 s each: nothing heavy (Flower, SciPy, dp-accounting, TensorFlow, Ray) is imported before
a command needs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_SECONDS = 1.0
CASES = (
    ("fedpriv --help", ["--help"], 0),
    ("fedpriv run --help", ["run", "--help"], 0),
    ("config error (fedpriv run -c \"scenario='nope'\")", ["run", "-c", "scenario='nope'"], 2),
)


def best_wall(cmd: list[str], repeats: int, expected_rc: int = 0) -> float:
    """The fastest of ``repeats`` runs of ``cmd`` (seconds); a wrong exit status raises."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        if proc.returncode != expected_rc:
            raise RuntimeError(f"{cmd}: exit {proc.returncode}: {proc.stderr[-500:]}")
        best = min(best, wall)
    return best


def cli_rows(quick: bool) -> list[str]:
    """One row per case: fedpriv's time, the interpreter floor and ``import flwr``."""
    repeats = 3 if quick else 7
    floor = best_wall([sys.executable, "-c", "pass"], repeats)
    flwr = best_wall([sys.executable, "-c", "import flwr.serverapp"], repeats)
    rows = []
    for label, args, rc in CASES:
        wall = best_wall([sys.executable, "-m", "fedpriv.scenarios.cli.main", *args], repeats, rc)
        verdict = "yes" if wall <= GOAL_SECONDS else "NO"
        rows.append(
            f"| CLI: {label}, best of {repeats} | {wall:.2f} s | interpreter start {floor:.2f} s; "
            f"`import flwr.serverapp` {flwr:.2f} s | {wall / floor:.1f}x the interpreter; "
            f"<= {GOAL_SECONDS:.0f} s: {verdict} |"
        )
    return rows


if __name__ == "__main__":
    print("\n".join(cli_rows(quick="--quick" in sys.argv)))
