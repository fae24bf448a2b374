"""Grids side by side and on a Ray cluster.

Fast tests: the pieces of :mod:`fedpriv.scenarios.cli.ray_cluster` and the options (``--parallel``,
``--ray-address``, the federation's ``ray-address``), each bad value one line, exit 2.
Simulation tests (``-m simulation``):

- a GPU federation on a host where Ray sees no GPU exits 2 with one line (the real check in
  the simulation runner, on this CPU host: no mock of Ray or Flower);
- a TWO-NODE Ray cluster on localhost (``ray start --head`` with resource ``head``, then
  ``ray start --address`` with resource ``worker2``; its own temp dir and ports, torn down by
  killing the processes it started): a 2-cell ``fedpriv grid --parallel 2`` on it places its
  cells on both nodes (recorded per cell) and completes; the same cells run serially on it
  give the same metrics (bands); a grid whose lane process is killed mid-cell records that
  cell as failed and the other cell completes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TINY = "num-server-rounds=2 num-clients=2 model='digits-mlp' local-epochs=1"
ACCURACY_BAND = 0.03  # same seed and config in another process: equal up to float order


# --- fast: the pieces ---------------------------------------------------------------------


def test_a_local_ray_has_no_job_runtime_env_and_its_workers_inherit_the_setup_hook(monkeypatch):
    from fedpriv.scenarios.cli.ray_cluster import WORKER_SETUP_HOOK, worker_env
    from ray._private import ray_constants

    monkeypatch.delenv(ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR, raising=False)
    assert worker_env({}, ["KERAS_BACKEND"]) == {}  # no setup_worker.py interpreter per worker
    assert os.environ[ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR] == WORKER_SETUP_HOOK
    module, _, name = WORKER_SETUP_HOOK.rpartition(".")
    assert callable(getattr(__import__(module, fromlist=[name]), name))


def test_a_local_ray_prestarts_its_workers_only_when_they_are_the_actors(monkeypatch):
    from fedpriv.scenarios.cli.ray_cluster import PRESTART, prestart_env

    for prestart, value in ((True, "1"), (False, "0")):
        monkeypatch.delenv(PRESTART, raising=False)
        prestart_env(prestart)
        assert os.environ[PRESTART] == value
    monkeypatch.setenv(PRESTART, "0")  # the user's (or the federation's) setting wins
    prestart_env(True)
    assert os.environ[PRESTART] == "0"


def test_a_gpu_federations_local_ray_has_its_actors_cpus_only():
    from fedpriv.scenarios.cli.ray_cluster import sized_for_actors

    assert sized_for_actors({"include_dashboard": False}, 2.0, 1) == {
        "include_dashboard": False, "num_cpus": 2}  # fmt: skip
    assert sized_for_actors({}, 2.0, 4)["num_cpus"] == 8
    assert sized_for_actors({}, 0.5, 3)["num_cpus"] == 2  # whole CPUs, at least one
    assert sized_for_actors({"num_cpus": 16}, 2.0, 1)["num_cpus"] == 16  # the user's wins


def test_an_attached_cluster_gets_the_env_and_the_setup_hook_in_the_runtime_env(monkeypatch):
    from fedpriv.scenarios.cli.ray_cluster import WORKER_SETUP_HOOK, worker_env

    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    monkeypatch.setenv("PYTHONPATH", "/app")
    monkeypatch.delenv("FEDPRIV_NOT_SET", raising=False)
    env = worker_env({"address": "auto"}, ["KERAS_BACKEND", "FEDPRIV_NOT_SET"])["runtime_env"]
    assert env["env_vars"] == {"KERAS_BACKEND": "tensorflow", "PYTHONPATH": "/app"}
    assert env["worker_process_setup_hook"] == WORKER_SETUP_HOOK


def test_a_local_ray_starts_without_its_api_server_and_monitor_and_ray_gets_them_back():
    from fedpriv.scenarios.cli.ray_cluster import LEAN_HEAD, lean_local_head
    from ray._private.node import Node

    ray_own = {name: Node.__dict__[name] for name in LEAN_HEAD}
    with lean_local_head({"include_dashboard": False, "_node_ip_address": "127.0.0.1"}) as lean:
        assert lean
        for name, method in ray_own.items():
            assert Node.__dict__[name] is not method
            assert (
                getattr(Node, name)(object(), include_dashboard=False, raise_on_failure=True)
                is None
            )
    assert {name: Node.__dict__[name] for name in LEAN_HEAD} == ray_own


@pytest.mark.parametrize(
    "init_args", [{"address": "auto"}, {"address": "127.0.0.1:6379"}, {"include_dashboard": True}]
)
def test_an_attached_ray_or_a_local_ray_with_its_dashboard_starts_as_ray_starts_it(init_args):
    from fedpriv.scenarios.cli.ray_cluster import LEAN_HEAD, lean_local_head
    from ray._private.node import Node

    ray_own = {name: Node.__dict__[name] for name in LEAN_HEAD}
    with lean_local_head(init_args) as lean:
        assert not lean
        assert {name: Node.__dict__[name] for name in LEAN_HEAD} == ray_own


def test_a_ray_whose_node_methods_moved_or_changed_is_left_alone(monkeypatch):
    from fedpriv.scenarios.cli.ray_cluster import lean_local_head
    from ray._private.node import Node

    monkeypatch.setattr(Node, "start_monitor", lambda self, autoscaling_config: None)
    changed = Node.__dict__["start_monitor"]
    with lean_local_head({}) as lean:  # another signature: not the pinned Ray's method
        assert not lean and Node.__dict__["start_monitor"] is changed
    monkeypatch.delattr(Node, "start_api_server")  # moved away: nothing to stand in for
    with lean_local_head({}) as lean:
        assert not lean and Node.__dict__["start_monitor"] is changed


def test_lanes_deal_cells_round_robin_and_never_exceed_the_cells():
    from fedpriv.scenarios.app.multirun import Cell, split_lanes

    cells = [Cell(f"c{i}", {}) for i in range(5)]
    assert [[c.label for c in lane] for lane in split_lanes(cells, 2)] == [
        ["c0", "c2", "c4"],
        ["c1", "c3"],
    ]
    assert len(split_lanes(cells, 9)) == 5 and len(split_lanes(cells, 0)) == 1
    assert sorted(c.label for lane in split_lanes(cells, 3) for c in lane) == [
        c.label for c in cells
    ]


def test_default_parallel_follows_cpus_and_gpu_memory():
    from fedpriv.scenarios.cli.ray_cluster import default_parallel

    assert default_parallel(2, None, False) == 1  # this box: one cell at a time
    assert default_parallel(16, None, False) == 4
    assert default_parallel(16, 141.0, True) == 4  # H200: CPUs bound it
    assert default_parallel(64, 80.0, True) == 8  # H100: 10 GiB a cell
    assert default_parallel(64, 5.0, True) == 1


def test_gpu_shortage_is_one_line_only_when_clients_want_more_gpus_than_ray_sees():
    from fedpriv.scenarios.cli.ray_cluster import gpu_shortage

    assert gpu_shortage(0.0, {"CPU": 2.0}, "") is None
    assert gpu_shortage(0.25, {"CPU": 16.0, "GPU": 1.0}, "auto") is None
    reason = gpu_shortage(0.25, {"CPU": 2.0}, "")
    assert "num-gpus = 0.25" in reason and "sees 0 GPUs" in reason and "\n" not in reason
    assert "at 10.0.0.1:6379" in gpu_shortage(2.0, {"GPU": 1.0}, "10.0.0.1:6379")


def test_local_gpus_are_what_ray_would_see(monkeypatch):
    """Ray's own detection, without starting Ray: CUDA_VISIBLE_DEVICES decides when set."""
    from fedpriv.scenarios.cli.ray_cluster import local_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert local_gpus() == 0.0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert local_gpus() == 2.0


@pytest.mark.parametrize("value", ["", "auto", "127.0.0.1:6379", "head.example.org:1"])
def test_ray_address_accepts_auto_and_host_port(value):
    from fedpriv.scenarios.cli.ray_cluster import check_address

    assert check_address(value) == value


@pytest.mark.parametrize("value", ["nope", "host:", ":6379", "host:0", "host:99999"])
def test_ray_address_refuses_the_rest(value):
    from fedpriv.scenarios.cli.ray_cluster import check_address

    with pytest.raises(ValueError, match="expected 'auto' or HOST:PORT"):
        check_address(value)


def test_federation_attaches_its_backend_to_the_address(monkeypatch):
    from fedpriv.scenarios.cli import launch
    from fedpriv.scenarios.cli.ray_cluster import Federation
    from fedpriv.scenarios.config.schema import ConfigError

    table = {"cluster": {"ray-address": "auto", "backend": {"init-args": {"x": 1}}}}
    monkeypatch.setattr(launch, "federations", lambda: table)
    assert launch.federation_settings("cluster")["backend"]["init-args"] == {
        "x": 1,
        "address": "auto",
    }
    cmdline = launch.federation_settings(Federation("cluster", "10.0.0.1:6379"))
    assert cmdline["backend"]["init-args"]["address"] == "10.0.0.1:6379"
    table["cluster"]["ray-address"] = "bad"
    with pytest.raises(ConfigError, match="ray-address = 'bad'"):
        launch.federation_settings("cluster")


def test_simulation_command_shares_the_cluster_and_forwards_the_env():
    from fedpriv.scenarios.cli.launch import simulation_command
    from fedpriv.scenarios.cli.ray_cluster import Federation
    from fedpriv.scenarios.config.registry import resolve_run_config

    cfg = resolve_run_config({})
    cmd = simulation_command(cfg, [], Federation("local-simulation", "127.0.0.1:7"), share=3)
    backend = json.loads(cmd[cmd.index("--backend-config") + 1])
    assert backend["init-args"]["address"] == "127.0.0.1:7"
    assert cmd[cmd.index("--share") + 1] == "3"
    forwarded = cmd[cmd.index("--forward-env") + 1].split(",")
    assert "CUDA_VISIBLE_DEVICES" in forwarded and "TF_CPP_MIN_LOG_LEVEL" in forwarded


@pytest.mark.parametrize(
    "extra,fragment",
    [
        (("--parallel", "0"), "--parallel = '0' is not allowed"),
        (("--parallel", "many"), "--parallel = 'many' is not allowed"),
        (("--ray-address", "nope"), "ray-address = 'nope' is not allowed"),
    ],
)
def test_grid_refuses_bad_parallel_and_address_in_one_line(tmp_path, capsys, extra, fragment):
    from fedpriv.scenarios.cli.main import main

    argv = ["grid", "--scenario", "digits", "--strategies", "fedavg", "--privacy", "none",
            "--seeds", "0", "--output-dir", str(tmp_path / "g"), *extra]  # fmt: skip
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's exit for --ray-address
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "\n" not in err, err
    assert not (tmp_path / "g").exists()


def test_placement_is_recorded_in_the_summary(tmp_path):
    from fedpriv.scenarios.cli.ray_cluster import PLACEMENT_KEY, record_placement

    record_placement(tmp_path, [{"node_id": "a"}])  # no summary: nothing written
    assert not (tmp_path / "summary.json").exists()
    (tmp_path / "summary.json").write_text(json.dumps({"final": {"accuracy": 0.5}}))
    record_placement(tmp_path, [{"node_id": "a", "resources": ["head"]}])
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["final"] == {"accuracy": 0.5}
    assert doc[PLACEMENT_KEY] == [{"node_id": "a", "resources": ["head"]}]


# --- simulation: the GPU check and a two-node cluster ---------------------------------------


def _env() -> dict[str, str]:
    """The environment of the cluster's ``ray start`` and its runs: without
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER = 0``, which a local simulation started earlier in
    this test process sets (``fedpriv.scenarios.cli.ray_cluster.loopback_args``) and which
    makes a joining ``ray start`` panic ("Multi-node Ray clusters are not supported"): the
    two errors ``make test`` showed when such a test ran before this module's fixture."""
    from fedpriv.scenarios.cli.ray_cluster import CLUSTER_SWITCH, WORKER_NICENESS

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    env.pop(CLUSTER_SWITCH, None)
    env.setdefault(WORKER_NICENESS, "0")  # as docs/multi-machine.md says for a shared machine
    return env


def _fedpriv(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.main", *args]
    return subprocess.run(cmd, cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip


@pytest.mark.simulation
def test_gpu_federation_without_a_gpu_exits_2_in_one_line(tmp_path):
    out = tmp_path / "run"
    proc = _fedpriv("run", "--federation", "local-simulation-gpu", "--run-config",
                    f"{TINY} output-dir='{out}'", timeout=600)  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "num-gpus = 0.25 but the local Ray sees 0 GPUs" in lines[0], lines
    assert not (out / "summary.json").exists()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _processes_with(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline:
                found.append(int(entry.name))
    return found


def _stop(pids: list[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(3)


START_TRIES = 3  # a node whose raylet misses Ray's 30 s start-up window (a busy CI box) retries


def _ray_start(temp: str, *args: str) -> None:
    """``ray start`` with ``args``; on a failed start, the processes it left are stopped and it
    is tried again (Ray gives a starting raylet 30 s, hard-coded in ``ray._private.node``)."""
    ray = str(Path(sys.executable).parent / "ray")
    cmd = [ray, "start", "--disable-usage-stats", "--num-gpus", "0", *args]
    for attempt in range(1, START_TRIES + 1):
        before = set(_processes_with(temp))
        proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
        if proc.returncode == 0:
            return
        if attempt == START_TRIES:
            raise AssertionError(proc.stdout[-2000:] + proc.stderr[-2000:])
        _stop(sorted(set(_processes_with(temp)) - before))


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes on localhost (1 CPU each; resources ``head`` and ``worker2``)."""
    temp = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's socket paths are limited
    port = _free_port()
    address = f"127.0.0.1:{port}"
    try:
        _ray_start(temp, "--head", "--port", str(port), "--node-ip-address", "127.0.0.1",
                   "--num-cpus", "1", "--resources", '{"head": 1}', "--temp-dir", temp,
                   "--include-dashboard", "false", "--dashboard-port", str(_free_port()),
                   "--ray-client-server-port", str(_free_port()),
                   "--dashboard-agent-listen-port", str(_free_port()))  # fmt: skip
        _ray_start(temp, "--address", address, "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
                   "--resources", '{"worker2": 1}',
                   "--dashboard-agent-listen-port", str(_free_port()))  # fmt: skip
        _wait_for_nodes(address, 2)
        yield address
    finally:
        _stop(_processes_with(temp))


def _wait_for_nodes(address: str, count: int, timeout: float = 300.0) -> None:
    probe = (
        "import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
        "print(sum(1 for n in ray.nodes() if n['Alive']))"
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = subprocess.run([sys.executable, "-c", probe, address], env=_env(),
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        if proc.stdout.strip().endswith(str(count)):
            return
        time.sleep(2)
    raise AssertionError(f"{count} Ray nodes did not come up at {address}")


def _grid_argv(out: Path, address: str, parallel: int) -> list[str]:
    return ["grid", "--scenario", "digits", "--strategies", "fedavg", "--privacy", "none",
            "--seeds", "0,1", "--output-dir", str(out), "--parallel", str(parallel),
            "--ray-address", address, "--run-config", TINY]  # fmt: skip


@pytest.fixture(scope="module")
def side_by_side(cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("parallel")
    return out, _fedpriv(*_grid_argv(out, cluster, 2))


def _rounds(cell: Path) -> list[dict]:
    return [json.loads(x) for x in (cell / "rounds.jsonl").read_text().splitlines()]


@pytest.mark.simulation
def test_grid_on_two_nodes_places_cells_on_both_and_completes(side_by_side):
    out, proc = side_by_side
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 to run in 2 simulations side by side" in proc.stdout
    assert "2 ran, 0 skipped, 0 failed" in proc.stdout
    rows = json.loads((out / "grid.json").read_text())["cells"]
    labels = set()
    for row in rows:
        summary = json.loads((Path(row["path"]) / "summary.json").read_text())
        assert summary["ray_nodes"] == row["ray_nodes"] and row["ray_nodes"], row
        labels |= {label for node in row["ray_nodes"] for label in node["resources"]}
        assert all(node["node_id"] and node["hostname"] for node in row["ray_nodes"])
    assert labels == {"head", "worker2"}  # one simulation's actor on each 1-CPU node


@pytest.mark.simulation
def test_cells_side_by_side_match_the_same_cells_run_serially(cluster, side_by_side, tmp_path):
    out, proc = side_by_side
    assert proc.returncode == 0, proc.stderr[-3000:]
    serial = _fedpriv(*_grid_argv(tmp_path / "serial", cluster, 1))
    assert serial.returncode == 0, serial.stdout[-3000:] + serial.stderr[-3000:]
    assert "2 to run in one simulation" in serial.stdout
    for seed in (0, 1):
        a = _rounds(out / "fedavg" / "none" / f"seed{seed}")
        b = _rounds(tmp_path / "serial" / "fedavg" / "none" / f"seed{seed}")
        assert [r["round"] for r in a] == [r["round"] for r in b]
        for ra, rb in zip(a, b):
            for side in ("server", "distributed"):
                if side in ra or side in rb:
                    gap = abs(ra[side]["accuracy"] - rb[side]["accuracy"])
                    assert gap <= ACCURACY_BAND, (seed, side, ra, rb)
    # the seeds differ, so the two cells of one grid do differ (the bands are not trivial)
    finals = [_rounds(out / "fedavg" / "none" / f"seed{s}")[-1]["server"] for s in (0, 1)]
    assert finals[0] != finals[1]


@pytest.mark.slow
@pytest.mark.simulation
def test_a_cell_whose_process_dies_does_not_stop_the_grid(cluster, tmp_path):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.main", *_grid_argv(out, cluster, 2)]
    grid = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    victim = out / "lanes" / "1"
    deadline = time.monotonic() + 600
    killed = False
    while grid.poll() is None and time.monotonic() < deadline and not killed:
        log = victim / "run.log"
        if log.exists() and "running ..." in log.read_text(errors="replace"):
            for pid in _processes_with(str(victim / "plan.json")):
                os.kill(pid, signal.SIGKILL)  # the lane's simulation process (an OOM kill)
                killed = True
        time.sleep(0.5)
    stdout, stderr = grid.communicate(timeout=900)
    assert killed, stdout[-2000:]
    assert grid.returncode == 1, stdout[-3000:] + stderr[-3000:]
    assert "1 ran, 0 skipped, 1 failed" in stdout
    assert "FAILED fedavg/none/seed1" in stderr
    rows = {r["seed"]: r for r in json.loads((out / "grid.json").read_text())["cells"]}
    assert rows[0]["status"] == "ok" and rows[0]["ray_nodes"]
    assert rows[1]["status"] == "failed" and rows[1]["ray_nodes"] is None


@pytest.mark.parametrize(
    ("share", "supernodes", "actors"),
    [(1, 1, 1), (1, 10, 8), (2, 10, 4), (2, 3, 3), (4, None, 2), (1, None, 8), (16, 5, 1)],
)
def test_the_actor_pool_is_never_larger_than_the_supernodes(monkeypatch, share, supernodes, actors):
    """Flower would fit 8 actors; ``share`` simulations split them, and a simulation of fewer
    SuperNodes (one GPU worker) starts only as many actors as it has SuperNodes."""
    from fedpriv.scenarios.cli.ray_cluster import share_actor_pool
    from flwr.simulation.ray_transport import ray_actor

    monkeypatch.setattr(ray_actor, "pool_size_from_resources", lambda resources: 8)
    share_actor_pool(share, supernodes)
    assert ray_actor.pool_size_from_resources({"num_cpus": 1}) == actors
