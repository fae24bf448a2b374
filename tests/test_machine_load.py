"""tests/machine_load.py: the spinners of a loaded-machine test pause while other runnable
processes stand in for them, and all run while the target is out of reach."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.machine_load import LoadKeeper

SPIN = [sys.executable, "-c", "while True: pass"]


def _state(pid: int) -> str:
    """The process state letter of ``/proc/<pid>/stat`` (R running, T stopped, ...)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def _spinners(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen(SPIN) for _ in range(count)]


def _end(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait()


def test_spinners_pause_while_other_processes_load_the_machine():
    others, own = _spinners(3), _spinners(2)
    try:
        with LoadKeeper([p.pid for p in own], target=2) as keeper:
            time.sleep(2.0)
            states = [_state(p.pid) for p in own]
        assert states == ["T", "T"], states  # 3 other spinners are more than the target
        assert keeper.mean_runnable >= 2
    finally:
        _end(others + own)


def test_spinners_all_run_while_the_target_is_out_of_reach():
    own = _spinners(2)
    try:
        with LoadKeeper([p.pid for p in own], target=10_000) as keeper:
            time.sleep(1.0)
            states = [_state(p.pid) for p in own]
        assert set(states) <= {"R", "S"} and "T" not in states, states
        assert keeper.samples and keeper.mean_runnable >= 2  # its own two at least
    finally:
        _end(own)
