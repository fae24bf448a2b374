"""One ``fedpriv run`` timed from a fresh process: the bench rows' shared runner."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_simulation(overrides: str, out: Path) -> tuple[float, dict]:
    """Wall time of one ``fedpriv run`` and its summary (into an emptied ``out``: a finished
    run left there would be resumed and time nothing)."""
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    cmd = [
        sys.executable,
        "-m",
        "fedpriv.scenarios.cli.main",
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
