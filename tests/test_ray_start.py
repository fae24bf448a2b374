"""A local Ray started beside other simulations, or one line saying why not (issue "node state").

The start's own logic (:mod:`fedpriv.scenarios.cli.ray_start`) with stand-in starts: a start
that missed Ray's deadlines is tried again, one that can never work is not; the machine's start
lock makes a second starter wait and say so; the raylet's fatal line is read from a session log
written in Ray 2.55's format (copied from a failed start of four at once on 2 busy CPUs). Then
a real ``fedpriv run`` whose Ray cannot start (its temp folder is a file) prints the reason on
the console and in run.log, and exits 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fedpriv.scenarios.cli import ray_start
from fedpriv.scenarios.cli.ray_start import RayStartError, start_local_ray

from tests.simulate import ROOT

RACE = "The current node timed out during startup. This could happen because some of the raylet failed to startup or the GCS has become overloaded."  # noqa: E501  (Ray 2.55's text)
RAYLET_FATAL = (
    "[2026-12-07 01:45:09,829 C 29985 29985] (raylet) node_manager.cc:3362:  An unexpected "
    "system state has occurred. You have likely discovered a bug in Ray. Please report this "
    "issue at https://github.com/ray-project/ray/issues and we'll work with you to fix it. "
    "Check failed: statussetor3362.has_value() Timed out waiting for file "
    "/tmp/ray/session_2026-12-07_01-44-07_150995_28608/metrics_agent_port_90edb7c0"
)


class Starts:
    """A stand-in ``ray.init``: raises the given errors in turn, then returns."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)


def _start(starts: Starts, tmp_path: Path, said: list[str], attempts: int = 3,
           stops: list[int] | None = None) -> int:  # fmt: skip
    stops = [] if stops is None else stops
    return start_local_ray(
        starts, said.append, attempts, stop=lambda: stops.append(1), lock_folder=str(tmp_path)
    )


def test_a_start_that_missed_rays_deadlines_is_tried_again(tmp_path):
    said: list[str] = []
    starts, stops = Starts(Exception(RACE), TimeoutError("Timed out after 60 seconds")), []
    assert _start(starts, tmp_path, said, stops=stops) == 3 and starts.calls == 3
    assert len(stops) == 2  # what each failed start left was ended before the next
    assert len(said) == 2 and "starting it again (2/3)" in said[0] and "(3/3)" in said[1]
    assert "timed out during startup" in said[0]


def test_a_start_that_can_never_work_fails_at_once_with_its_reason(tmp_path):
    said: list[str] = []
    starts = Starts(NotADirectoryError(20, "Not a directory", "/x/ray"))
    with pytest.raises(RayStartError) as err:
        _start(starts, tmp_path, said)
    assert starts.calls == 1 and said == []
    text = str(err.value)
    assert text.startswith("Ray did not start: [Errno 20] Not a directory") and "\n" not in text
    assert "1 attempt" in text


def test_the_last_failed_attempt_gives_up_with_one_line(tmp_path):
    starts = Starts(*(Exception(RACE) for _ in range(5)))
    with pytest.raises(RayStartError) as err:
        _start(starts, tmp_path, [], attempts=2)
    assert starts.calls == 2 and "2 attempts" in str(err.value) and "\n" not in str(err.value)


def test_the_raylets_fatal_line_is_the_cause(tmp_path):
    session = tmp_path / f"session_2026-12-07_01-44-07_150995_{os.getpid()}"
    (session / "logs").mkdir(parents=True)
    (session / "logs" / "raylet.out").write_text(
        "[2026-12-07 01:44:46,515 I 29985 29985] (raylet) main.cc:279: Setting cluster ID\n"
        + RAYLET_FATAL
        + "\n*** StackTrace Information ***\n"
    )
    older = tmp_path / "session_2026-12-07_01-40-00_000001_1"
    older.mkdir()
    assert ray_start.session_dir(temp_dir=str(tmp_path)) == session
    cause = ray_start.raylet_cause(session)
    assert cause == "Timed out waiting for file metrics_agent_port_90edb7c0"
    text = ray_start.reason(Exception(RACE), 3, session)
    assert "raylet: Timed out waiting for file metrics_agent_port" in text
    assert "the machine is busy" in text and "3 attempts" in text
    assert f"Ray's logs: {session / 'logs'}" in text and "\n" not in text
    assert ray_start.raylet_cause(older) is None


def test_a_second_starter_waits_for_the_lock_and_says_so(tmp_path):
    said: list[str] = []
    order: list[str] = []

    def second() -> None:
        with ray_start.start_lock(said.append, str(tmp_path)):
            order.append("second")

    with ray_start.start_lock(lambda text: None, str(tmp_path)):
        thread = threading.Thread(target=second)
        thread.start()
        deadline = time.monotonic() + 30
        while not said and time.monotonic() < deadline:
            time.sleep(0.01)
        order.append("first")
    thread.join(30)
    assert order == ["first", "second"]
    assert said == ["another simulation on this machine is starting its Ray: waiting for it"]


def test_the_processes_of_a_failed_start_are_found_below_this_one():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert child.pid in ray_start.descendants(os.getpid())
    finally:
        child.kill()
        child.wait()


@pytest.mark.simulation
def test_a_run_whose_ray_cannot_start_says_why_on_the_console_and_in_run_log(tmp_path):
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    out = tmp_path / "run"
    env = dict(os.environ, RAY_TMPDIR=str(not_a_folder), CUDA_VISIBLE_DEVICES="")
    env["FEDPRIV_STATE_ROOT"] = str(tmp_path / "nodes")
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.main", "run", "-c",
           f"scenario='digits' num-clients=2 num-server-rounds=1 output-dir='{out}'"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    console = proc.stdout + proc.stderr
    assert proc.returncode == 2, console[-3000:]
    why = f"Ray did not start: [Errno 20] Not a directory: '{not_a_folder}/ray'"
    reason = f"fedpriv: cannot start: {why}"
    assert reason in console, console[-3000:]
    assert "exit status" not in console  # the reason, not a bare status
    assert console.count(reason) == 1  # once: the line the runner printed
    log = (out / "run.log").read_text().splitlines()
    assert any(line.startswith(reason) for line in log), log
    assert len(log) <= 3  # its header and the reason: no traceback
    assert not (out / "summary.json").exists()
