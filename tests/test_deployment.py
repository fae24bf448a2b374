"""Deployment engine: a real SuperLink and four SuperNodes on localhost run the app.

The SuperLink and SuperNodes are Flower 1.42's own executables (``flower-superlink``,
``flower-supernode``), started insecure on free loopback ports (one HTTP port per process)
with ``--disable-runtime-dependency-installation`` (offline), once for the module, each
SuperNode with its own ``FLWR_HOME`` as on its own machine. The run is submitted with
``flwr run . local-deployment`` from the repository root exactly as docs/gpu.md says: a
SuperLink connection ``local-deployment`` in a throwaway ``$FLWR_HOME/config.toml``; the
repository's pyproject.toml must come out of it unchanged. The one run is also the fault test:
a SuperNode is SIGKILLed (with its SuperExec and ClientApp processes) during a round and
restarted; every process is stopped at the end, whatever happens (:mod:`tests.localflower`).
(A separate fault-free run added ~1-2 min of CI and checked nothing this run's round 1 and
final summary do not.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedpriv.reporting.runlog import read_rounds
from tests.localflower import Processes, free_ports, wait_http_ok
from tests.simulate import ROOT

# Flower's deployment runtime (a SuperLink and SuperNode processes, killed and restarted):
# the slow tier (make test-all); the app's results are guarded on the simulation engine.
pytestmark = [pytest.mark.simulation, pytest.mark.slow]
BIN = Path(sys.executable).parent
NODES = 4


class Federation:
    """A SuperLink and SuperNodes on loopback; ``nodes[i]`` serves partition i."""

    def __init__(self, root: Path) -> None:
        self.root = root
        home = root / "flwr-home"
        home.mkdir()
        self.env = dict(
            os.environ,
            PATH=f"{BIN}:{os.environ['PATH']}",
            TF_CPP_MIN_LOG_LEVEL="3",
            CUDA_VISIBLE_DEVICES="",
            FLWR_HOME=str(home),
            FLWR_DISABLE_UPDATE_CHECK="1",
            RAY_DISABLE_USAGE_STATS="1",
        )
        self.procs = Processes(root, self.env)
        (self.port,) = free_ports(1)
        (home / "config.toml").write_text(
            '[superlink]\ndefault = "local-deployment"\n\n'
            f'[superlink.local-deployment]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n'
        )
        self.procs.start(
            "superlink",
            [str(BIN / "flower-superlink"), "--insecure",
             "--disable-runtime-dependency-installation",
             "--host", "127.0.0.1", "--port", str(self.port),
             "--database", str(root / "superlink.db")],
        )  # fmt: skip
        wait_http_ok(f"http://127.0.0.1:{self.port}/health", timeout_s=120, procs=self.procs)
        self.nodes: dict[int, subprocess.Popen] = {}

    def start_node(self, i: int) -> None:
        """Start (or restart) the SuperNode of partition ``i``."""
        (port,) = free_ports(1)
        home = self.root / f"flwr-node{i}"
        home.mkdir(exist_ok=True)
        self.nodes[i] = self.procs.start(
            f"supernode{i}",
            [str(BIN / "flower-supernode"), "--insecure",
             "--superlink", f"127.0.0.1:{self.port}", "--port", str(port),
             "--node-config", f"partition-id={i} num-partitions={NODES}"],
            env={"FLWR_HOME": str(home)},
        )  # fmt: skip

    def kill_node(self, i: int) -> None:
        """SIGKILL the SuperNode of partition ``i`` and its ClientApp processes (a crash)."""
        self.procs.kill(self.nodes[i])

    def submit(self, run_config: str) -> None:
        """``flwr run . local-deployment`` from the repository root."""
        before = (ROOT / "pyproject.toml").read_bytes()
        submit = subprocess.run(
            [str(BIN / "flwr"), "run", ".", "local-deployment", "--run-config", run_config],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert "Successfully started run" in submit.stdout, submit.stdout + submit.stderr
        assert (ROOT / "pyproject.toml").read_bytes() == before, "flwr run rewrote pyproject.toml"

    def logs(self) -> str:
        return self.procs.logs()

    def stop(self) -> None:
        self.procs.stop()


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    fed = Federation(tmp_path_factory.mktemp("deployment"))
    try:
        for i in range(NODES):
            fed.start_node(i)
        yield fed
    finally:
        fed.stop()


def _wait_for(predicate, timeout: float, fed: Federation, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}\n{fed.logs()}"
        time.sleep(0.5)


def _rounds(out: Path) -> list[dict]:
    return read_rounds(out)  # rounds.jsonl + operator.jsonl (sampled, replied)


def test_superlink_and_supernodes_run_and_survive_a_killed_supernode(federation, tmp_path):
    """One deployment run of the app (``flwr run . local-deployment``), three rounds.

    Round 1 is a normal round: every SuperNode serves its partition. Partition 3's SuperNode
    is SIGKILLed as round 2 starts and restarted at once (it registers with a new node id).
    Round 2 gets Flower's node-unavailable error for it once the SuperLink's heartbeat check
    expires; with accept-failures the round aggregates the three replies, global DP keeps
    sigma calibrated to m = 4 and records (and charges) the under-filled round; from round 3
    the restarted node serves partition 3 again."""
    out = tmp_path / "out"
    # two messages per round: with evaluate-in-train (auto: on for 4 of 4 clients) round 1's
    # record is written only once round 2's train replies are in, too late to kill in round 2
    federation.submit(
        f"num-server-rounds=3 privacy='global-dp' accept-failures=true local-epochs=1 "
        f"evaluate-in-train=false noise-multiplier=0.01 output-dir='{out}'"  # MP's z: it learns
    )
    _wait_for(lambda: len(_rounds(out)) >= 2, 600, federation, "round 1")
    federation.kill_node(3)
    federation.start_node(3)
    _wait_for(lambda: (out / "summary.json").exists(), 600, federation, "summary.json")
    rounds = {r["round"]: r for r in _rounds(out)}
    assert sorted(rounds) == [0, 1, 2, 3]
    assert rounds[1]["replied"] == [0, 1, 2, 3] and rounds[1]["dp-num-reports"] == 4
    failed = rounds[2]
    assert failed["failed"] == [3] and failed["replied"] == [0, 1, 2], failed
    assert failed["aggregated"] and failed["dp-noised"] and failed["dp-num-reports"] == 3
    assert "dp-underfilled" in failed
    summary = json.loads((out / "summary.json").read_text())
    clip = summary["config"]["clipping-norm"]
    sigma = rounds[1]["dp-sigma"]
    assert failed["dp-sigma"] == pytest.approx(sigma)  # still z*C/m with m = 4
    assert failed["dp-sum-noise-multiplier"] == pytest.approx(sigma * 3 / clip)  # sigma*n/C
    assert failed["dp-round-noise-multiplier"] == pytest.approx(sigma * 3 / clip)  # charged
    assert rounds[3]["rejoined"] == [3] and rounds[3]["replied"] == [0, 1, 2, 3]
    assert rounds[3]["dp-noised-rounds"] == 3
    assert rounds[1]["sampled"] == [0, 1, 2, 3]
    assert summary["final"]["accuracy"] > 0.5


def test_zone_supernodes_survive_a_killed_zone_node(federation, tmp_path):
    """The same SuperNodes serve as s = 4 zone nodes (partition-id =
    zone) of an HDP run over 8 clients (2 per zone, blocks). Zone 1's SuperNode is SIGKILLed
    after round 1 and not restarted: from the round it misses on, that zone's message gets
    Flower's node-unavailable error; the round records the zone as missing and its clients as
    failed, the other zones' aggregates are still applied, the zone's super-node is re-elected
    next round (``no-reply``), and the run completes."""
    out = tmp_path / "zones"
    federation.submit(
        "privacy='zonal' noise-placement='hdp' num-clients=8 num-zones=4 clients-per-round=8 "
        "model='digits-mlp' num-server-rounds=4 local-epochs=1 accept-failures=true "
        f"zonal-distributed-eval='none' output-dir='{out}'"
    )
    _wait_for(lambda: len(_rounds(out)) >= 2, 600, federation, "round 1")
    federation.kill_node(1)
    try:
        _wait_for(lambda: (out / "summary.json").exists(), 900, federation, "summary.json")
    finally:
        federation.start_node(1)  # back for any later test of the module
    rounds = {r["round"]: r for r in _rounds(out)}
    assert sorted(rounds) == [0, 1, 2, 3, 4]
    first = rounds[1]["zonal"]
    assert first["runtime"] == "zone-nodes" and first["zone_messages"] == 4
    assert first["missing_zones"] == [] and rounds[1]["replied"] == list(range(8))
    missed = [r for r in (2, 3, 4) if rounds[r]["zonal"]["missing_zones"]]
    assert missed and missed[0] <= 3, [rounds[r]["zonal"]["missing_zones"] for r in (2, 3, 4)]
    assert missed == list(range(missed[0], 5))  # the killed node never answers again
    for r in missed:
        record = rounds[r]
        assert record["zonal"]["missing_zones"] == [1]
        assert record["failed"] == [2, 3] and record["replied"] == [0, 1, 4, 5, 6, 7]
        assert record["aggregated"]  # the three live zones' aggregates were applied
        assert record["zonal"]["unreachable"]  # zone 1's super-node did not answer
    reelected = rounds[missed[0] + 1]["zonal"]["elections"]
    assert [(e["zone"], e["reason"]) for e in reelected] == [(1, "no-reply")]
    assert json.loads((out / "summary.json").read_text())["zonal"]["reelections"] >= 1
