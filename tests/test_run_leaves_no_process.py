"""No process of a finished run outlives it (:func:`fedpriv.scenarios.cli.simulation_runner.
end_process`, :func:`fedpriv.scenarios.cli.ray_start.end_processes`).

A local Ray's workers (the ClientApp actors, each holding its TensorFlow) are children of
its raylet; once Flower's backend has shut Ray down they are no longer below the runner and
used to exit only when they noticed their raylet was gone (up to 10 s after the run). The
runner notes the processes below it when Ray is shut down and ends the ones still running
before it exits.

The same default run (one simulation, sampled while it runs) also shows that its own Ray is
closed to the network and that its workers run at the run's priority
(:mod:`tests.test_ray_closed`, whose helpers read the sockets and the niceness).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fedpriv.scenarios.cli.ray_start import alive, born, descendants, end_processes, snapshot

from tests.test_ray_closed import is_loopback, listening, niceness

ROOT = Path(__file__).resolve().parent.parent
IGNORES_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(120)"
)


def _ignoring_term() -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", IGNORES_TERM], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_end_processes_kills_what_ignores_sigterm_after_the_grace():
    stubborn, polite = _ignoring_term(), subprocess.Popen(["sleep", "120"])
    processes = snapshot([stubborn.pid, polite.pid])
    assert sorted(processes) == sorted([stubborn.pid, polite.pid])
    t0 = time.monotonic()
    killed = end_processes(processes, grace=0.5)
    took = time.monotonic() - t0
    assert killed == [stubborn.pid]  # sleep ended on SIGTERM; python ignored it
    assert stubborn.wait(timeout=5) == -9 and polite.wait(timeout=5) == -15
    assert took >= 0.5  # the grace was given before SIGKILL


def test_a_reused_pid_is_not_the_process_of_the_snapshot():
    proc = subprocess.Popen(["sleep", "120"])
    try:
        start = born(proc.pid)
        assert start is not None and alive({proc.pid: start}) == [proc.pid]
        assert alive({proc.pid: start + 1}) == []  # same pid, another start: not ours
        assert end_processes({proc.pid: start + 1}, grace=0.1) == []
        assert proc.poll() is None  # a stranger with our old pid is left alone
    finally:
        proc.kill()
        proc.wait()
    assert alive({proc.pid: start}) == []


ENDS_WITH_ORPHANS = """
import subprocess, sys
import ray
from fedpriv.scenarios.cli import simulation_runner as runner

runner._note_processes_at_shutdown()
mid = subprocess.Popen(["sh", "-c", "sleep 120 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
orphan = int(mid.stdout.readline())
stubborn = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
stubborn.stdout.readline()
ray.shutdown()  # what Flower's backend does when the simulation ends: the tree is noted
mid.kill(); mid.wait()  # its sleep leaves this process's tree, as a worker whose raylet ended
print(orphan, stubborn.pid, flush=True)
runner.end_process(0)
"""


def test_end_process_ends_what_ran_below_it_at_shutdown_even_once_reparented():
    proc = subprocess.run(
        [sys.executable, "-c", ENDS_WITH_ORPHANS, IGNORES_TERM],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2
    assert [p for p in pids if _running(p)] == []  # already gone when the process returned


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> dict:
    """One default ``fedpriv run`` (1 round) through the CLI, every process of its tree sampled
    every 0.1 s while it runs: its exit status, console, the processes seen (pid -> start and
    command line) and those still alive a second after it returned; every 0.3 s the listening
    TCP sockets of the tree and the niceness of its Ray workers."""
    tmp_path = tmp_path_factory.mktemp("run")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.main", "run", "--run-config",
           f"num-server-rounds=1 local-epochs=1 output-dir='{out}'"]  # fmt: skip
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", FEDPRIV_STATE_ROOT=str(tmp_path / "state"))
    seen: dict[int, int] = {}
    names: dict[int, str] = {}
    commands: set[str] = set()  # every command line a process of the run had
    sockets: set[tuple[str, str, int]] = set()  # (process, address, port) listening
    workers: dict[str, int] = {}  # "<pid> ray::<name>" -> nice
    scans = 0
    with (tmp_path / "console.txt").open("w+") as console:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=console, stderr=subprocess.STDOUT)
        while proc.poll() is None:  # every process of the run's tree, sampled every 0.1 s
            below = descendants(proc.pid)
            seen.update(snapshot([p for p in below if p not in seen]))
            # read again each time: a process seen between its fork and its exec still has
            # its parent's command line, and Ray's agents rename themselves once started
            now = {p: name for p in below if (name := _name(p))}
            names.update(now)
            commands.update(now.values())
            if scans % 3 == 0:
                tree = {proc.pid, *below}
                sockets |= listening(tree)
                workers.update(niceness(tree))
            scans += 1
            time.sleep(0.1)
        console.seek(0)
        output = console.read()
    time.sleep(1.0)
    left = {p: names.get(p, "") for p in alive(seen)}
    return {"returncode": proc.returncode, "output": output, "names": names, "left": left,
            "commands": commands, "sockets": sockets, "workers": workers}  # fmt: skip


@pytest.mark.simulation
def test_no_process_of_a_finished_run_is_alive_a_second_after_the_cli_returns(finished_run):
    assert finished_run["returncode"] == 0, finished_run["output"][-3000:]
    names = finished_run["names"]
    assert any("raylet" in n for n in names.values()), names  # the run's Ray was seen
    assert finished_run["left"] == {}, finished_run["left"]


@pytest.mark.simulation
def test_a_local_simulation_starts_no_dashboard_api_server_or_autoscaler_monitor(finished_run):
    """A local Ray starts without the two head processes no simulation uses
    (:func:`fedpriv.scenarios.cli.ray_cluster.lean_local_head`) and the run still finishes;
    the raylet's own agents and the log monitor still run."""
    assert finished_run["returncode"] == 0, finished_run["output"][-3000:]
    assert "fedpriv: final" in finished_run["output"]
    commands = sorted(finished_run["commands"])
    words = {Path(w).name for c in commands for w in c.split() if not w.startswith("-")}
    assert {"raylet", "log_monitor.py"} <= words, commands
    # each agent by the name it gives itself once started, or (a short run on a loaded
    # machine may end first) by its script
    agents = {"ray::DashboardAgent": "ray/dashboard/agent.py",
              "ray::RuntimeEnvAgent": "ray/_private/runtime_env/agent/main.py"}  # fmt: skip
    for name, script in agents.items():
        assert name in words or any(script in c for c in commands), (name, commands)
    assert not {"dashboard.py", "monitor.py"} & words, commands


@pytest.mark.simulation
def test_a_default_simulation_listens_on_loopback_only_and_its_workers_are_not_niced(
    finished_run,
):
    """Every listening TCP socket of the run's tree is on a loopback address, and every Ray
    worker runs at this process's priority (:mod:`tests.test_ray_closed`)."""
    assert finished_run["returncode"] == 0, finished_run["output"][-3000:]
    seen = finished_run["sockets"]
    assert {"gcs_server", "raylet"} <= {name for name, _, _ in seen}, seen  # Ray's servers seen
    assert [s for s in seen if not is_loopback(s[1])] == [], seen
    # Ray's default would be nice 15 (+15 on the run's): beside any busy process of the
    # run's priority a worker got ~1/28 of its share (a tiny run 320 s instead of 30)
    workers = finished_run["workers"]
    assert workers, "no Ray worker seen"
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert {name: nice for name, nice in workers.items() if nice != own} == {}, own


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:400]
    except OSError:
        return ""
