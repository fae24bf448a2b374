"""A run shows it is alive: start-up lines, and on a terminal a bar of rounds with an ETA.

The simulation check runs ``fedpriv run`` on a pseudo-terminal (the ``pty`` module): the
start-up lines (engine, workers, data, model) come before round 0, and rich's bar of rounds
is drawn. Without a terminal, the default run of ``tests/test_console.py`` checks one plain
line per round and no bar. The pieces are checked here without a simulation: the bar on a
terminal stream, what a multi-run command shows, and summary.json's time split.
"""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from fedpriv.scenarios.app import quiet, startup
from fedpriv.scenarios.cli.launch import progress_line

from fedpriv.reporting.console import PER_RUN_STEPS, is_startup_line, startup_line
from fedpriv.reporting.live import RoundBar

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("starting the simulation engine", "engine started", "data loaded", "workers ready",
         "model built")  # fmt: skip
BAR = "━"  # rich's bar
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_prints_each_line_and_follows_the_round_lines():
    stream = _Terminal()
    with RoundBar(stream) as bar:
        bar.line(startup_line("data loaded", "digits", 1.0) + "\n")
        assert bar.state()["description"] == "start-up" and bar.state()["total"] is None
        bar.line("fedpriv: round 0/3 · server acc 0.1\n")
        assert bar.state() == {"description": "rounds", "completed": 0, "total": 3}
        bar.line("\x1b[93mfedpriv: round 2/3 · server acc 0.8\x1b[0m\n")  # colours are fine
        assert bar.state() == {"description": "rounds", "completed": 2, "total": 3}
    text = _CONTROL.sub("", stream.getvalue())
    assert "start-up · data loaded: digits (1.0 s)" in text
    assert "fedpriv: round 0/3" in text and "fedpriv: round 2/3" in text


def test_a_multi_run_shows_the_engine_lines_not_each_cells_start_up():
    assert progress_line(startup_line("workers ready", "4 SuperNodes answered", 3.0))
    for step in PER_RUN_STEPS:
        line = startup_line(step, "x", 1.0)
        assert is_startup_line(line) and not progress_line(line)
    assert not progress_line("fedpriv: round 1/2 · server acc 0.5")


def test_run_times_split_the_wall_time_and_move_the_clock(monkeypatch):
    start = time.time() - 10.0
    monkeypatch.setattr(startup, "_clock", [start])
    times = startup.run_times(time.time() - 4.0)
    assert times["wall_seconds"] == pytest.approx(10.0, abs=0.5)
    assert times["startup_seconds"] == pytest.approx(6.0, abs=0.5)
    assert times["wall_seconds"] == pytest.approx(
        times["startup_seconds"] + times["training_seconds"], abs=1e-6
    )
    assert startup.run_times(time.time())["wall_seconds"] < 1.0  # the next cell: from here


def _on_pty(args: list[str], timeout: float) -> tuple[int, str]:
    """Run ``python -m fedpriv.scenarios.cli.main ARGS`` with stdout and stderr on a 120x40
    pseudo-terminal; (exit status, everything it wrote)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in quiet.QUIET_ENV and k != quiet.LOG_ENV}
    env.update(CUDA_VISIBLE_DEVICES="", TERM="xterm-256color")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedpriv.scenarios.cli.main", *args],
        cwd=ROOT, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other end closed
                break
            if not data:
                break
            chunks.append(data)
    finally:
        if proc.poll() is None and time.monotonic() >= deadline:
            os.killpg(proc.pid, signal.SIGKILL)
        os.close(master)
    return proc.wait(timeout=60), b"".join(chunks).decode(errors="replace")


@pytest.mark.simulation
def test_a_run_on_a_terminal_shows_its_start_up_and_a_bar_of_rounds(tmp_path):
    out = tmp_path / "tty"
    items = f"num-server-rounds=2 local-epochs=1 reproducible-noise=true output-dir='{out}'"
    status, raw = _on_pty(["run", "--run-config", items], timeout=900)
    text = _CONTROL.sub("\n", raw)
    assert status == 0, text[-3000:]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    found = [next(i for i, x in enumerate(lines) if f"start-up · {step}" in x) for step in STEPS]
    first_round = next(i for i, x in enumerate(lines) if x.startswith("fedpriv: round 0/2"))
    assert max(found) < first_round, lines[: first_round + 1]
    assert re.search(r"start-up · workers ready: \d+ SuperNodes answered[^(]*\([\d.]+ s\)", text)
    assert BAR in raw and "rounds" in raw and "ETA" in raw  # rich's bar, drawn on the terminal
    assert re.search(r"\b[12]/2\b", _CONTROL.sub(" ", raw.split("fedpriv: round 0/2", 1)[1]))
    for k in range(3):
        assert sum(x.startswith(f"fedpriv: round {k}/2 ") for x in lines) == 1
    assert "fedpriv: final " in text
