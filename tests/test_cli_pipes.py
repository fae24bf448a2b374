"""The CLI behaves like a Unix tool on a closed pipe: ``fedpriv keys | head -1`` ends quietly.

A reader that exits early (``head -1``) closes the pipe while ``fedpriv`` still writes; the
command must end without a traceback, with status 0 (it had written all before the close)
or 141 (128 + SIGPIPE, the shell's status of ``yes | head -1``'s ``yes``).

Two checks: a stdout whose reader is closed before the command starts (every write fails, so
the closed-pipe path is always taken), and the real shell pipelines, 20 tries each.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FEDPRIV = [sys.executable, "-m", "fedpriv.scenarios.cli.main"]
COMMANDS = {
    "keys": ["keys"],
    "scenarios": ["scenarios"],
    "epsilon": ["epsilon", "-c", "privacy='global-dp'"],
}
TRIES = 20
CLOSED_PIPE = 141


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_closed_reader_ends_the_command_quietly(name):
    """stdout's reader is gone before the first write: status 141, nothing on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            FEDPRIV + COMMANDS[name], cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE,
            text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert proc.stderr == ""
    assert proc.returncode == CLOSED_PIPE


@pytest.mark.slow
def test_head_one_never_shows_a_traceback():
    """``fedpriv CMD | head -1`` through a real shell, 20 tries per command (four at once):
    every try exits 0 or 141 with an empty stderr and the command's first line on stdout."""
    script = "\n".join(
        f"for i in $(seq {TRIES}); do echo {shlex.quote(name)}; done" for name in sorted(COMMANDS)
    )
    one = (
        'case "$0" in ' + " ".join(
            f"{name}) cmd={shlex.quote(shlex.join(FEDPRIV + args))};;"
            for name, args in COMMANDS.items()
        ) + " esac; "
        'err=$(mktemp); out=$(eval "$cmd" 2>"$err" | head -1; exit "${PIPESTATUS[0]}"); '
        'rc=$?; printf "%s\\t%s\\t%s\\t%s\\n" "$0" "$rc" "$(wc -c <"$err")" "${out:0:20}"; '
        'rm -f "$err"'
    )  # fmt: skip
    proc = subprocess.run(
        ["bash", "-c", f"({script}) | xargs -P 4 -n 1 bash -c {shlex.quote(one)}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert len(rows) == TRIES * len(COMMANDS), proc.stdout + proc.stderr
    for name, status, stderr_bytes, first in rows:
        assert status in ("0", str(CLOSED_PIPE)), (name, status)
        assert stderr_bytes.strip() == "0", (name, "stderr not empty")
        assert first.strip(), (name, "no first line")
