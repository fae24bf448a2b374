"""Deployment engine: a real SuperLink and four SuperNodes on localhost run the app.

The SuperLink and SuperNodes are Flower 1.42's own executables (``flower-superlink``,
``flower-supernode``), started insecure on free loopback ports (one HTTP port per process) with
``--disable-runtime-dependency-installation`` (offline), once for the module, each SuperNode
with its own ``FLWR_HOME`` as on its own machine. The run is submitted with ``flwr run APP
local-deployment`` as docs/gpu.md says (a SuperLink connection ``local-deployment`` in a
throwaway ``$FLWR_HOME/config.toml``), where APP is a copy of the files ``flwr run .`` in the
repository root would bundle (git's tracked and unignored files, :func:`app_export`): Flower
walks every file under the app folder before it applies .gitignore, and with the checkout's
``.venv`` there that walk alone is 10 CPU-s per submit (measured: 62,061 files). The app's
pyproject.toml must come out of it unchanged. The one run is also the fault test: a SuperNode
is SIGKILLed (with its SuperExec and ClientApp processes) during a round and restarted; every
process is stopped at the end, whatever happens (:mod:`tests.localflower`), and the module's
teardown fails if one is still alive. The SuperNodes the tests kill report a 10 s heartbeat
interval (:mod:`tests.heartbeat_supernode`: Flower's minimum, not its fixed 30 s), so the
SuperLink finds a killed one gone after 16-20 s instead of 40-60 s. (A separate fault-free run
added ~1-2 min of CI and checked nothing this run's round 1 and final summary do not.)

Each SuperNode has its own state folder (``client-state-dir`` in its ``--node-config``, a fresh
0700 folder), as a deployed node that adds noise or keeps a budget must; each run ends with the
server's ε recomputed from the rounds it charged and, where a node keeps a ledger (a zone
node), every node's own ledger read back. Every wait is bounded: a step that fails or runs out
of time fails the test with one line (the processes' logs are printed above it).

CI runs this file in ``make test-deployment`` (marker ``deployment``), one test at a time.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedpriv.privacy.accounting.accountant import gaussian_epsilon
from fedpriv.privacy.releases import read_ledger
from fedpriv.reporting.runlog import read_rounds
from fedpriv.zonal.accounting import lifetime_epsilon
from tests.localflower import Failure, Processes, free_ports, wait_http_ok
from tests.simulate import ROOT

# Flower's deployment runtime (a SuperLink and SuperNode processes, killed and restarted):
# not in `make test` (slow); CI runs it in `make test-deployment` (marker `deployment`).
pytestmark = [pytest.mark.simulation, pytest.mark.slow, pytest.mark.deployment]
BIN = Path(sys.executable).parent
NODES = 4
SUBMIT_S, ROUND_S, RUN_S = 120, 420, 600  # flwr run's submit; a first round; a whole run
KILLED = (1, 3)  # the partitions whose SuperNodes the tests kill
HEARTBEAT_SUPERNODE = [sys.executable, str(ROOT / "tests" / "heartbeat_supernode.py")]


def app_export(folder: Path) -> Path:
    """``folder`` holding the files of the repository that ``flwr run .`` bundles into the
    app's FAB: git's tracked and untracked-but-not-ignored files (the FAB leaves out what
    .gitignore names), without the ignored ``.venv`` that Flower would walk first."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            target = folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    return folder


class Federation:
    """A SuperLink and ``count`` SuperNodes on loopback; ``nodes[i]`` serves partition i."""

    def __init__(self, root: Path, count: int = NODES) -> None:
        self.root, self.count = root, count
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
        self.submits = 0
        self.app = app_export(root / "app")
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
        try:
            wait_http_ok(f"http://127.0.0.1:{self.port}/health", timeout_s=120, procs=self.procs)
        except BaseException:
            self.procs.stop()
            raise
        self.nodes: dict[int, subprocess.Popen] = {}
        self.states = {i: root / f"state-node{i}" for i in range(count)}
        for folder in self.states.values():
            folder.mkdir(mode=0o700)  # the node's own, as on its own machine

    def start_node(self, i: int) -> None:
        """Start (or restart) the SuperNode of partition ``i``."""
        (port,) = free_ports(1)
        home = self.root / f"flwr-node{i}"
        home.mkdir(exist_ok=True)
        # a node a test kills reports Flower's shortest heartbeat interval (10 s, not 30 s):
        # the SuperLink finds it gone 16-20 s after the kill, not 40-60 s
        supernode = HEARTBEAT_SUPERNODE if i in KILLED else [str(BIN / "flower-supernode")]
        self.nodes[i] = self.procs.start(
            f"supernode{i}",
            [*supernode, "--insecure",
             "--superlink", f"127.0.0.1:{self.port}", "--port", str(port),
             "--node-config",
             f'partition-id={i} num-partitions={self.count} '
             f'client-state-dir="{self.states[i]}"'],
            env={"FLWR_HOME": str(home)},
        )  # fmt: skip

    def kill_node(self, i: int) -> None:
        """SIGKILL the SuperNode of partition ``i`` and its ClientApp processes (a crash)."""
        self.procs.kill(self.nodes.pop(i))

    def submit(self, run_config: str) -> None:
        """``flwr run . local-deployment`` in the app's folder (:func:`app_export`)."""
        before = (self.app / "pyproject.toml").read_bytes()
        self.submits += 1
        output = self.procs.run(
            f"flwr-run{self.submits}",
            [str(BIN / "flwr"), "run", ".", "local-deployment", "--run-config", run_config],
            cwd=self.app, timeout_s=SUBMIT_S,
        )  # fmt: skip
        if "Successfully started run" not in output:
            raise Failure(f"flwr run did not start the run: {output.strip()[-300:]!r}")
        rewritten = (self.app / "pyproject.toml").read_bytes() != before
        assert not rewritten, "flwr run rewrote pyproject.toml"

    def live(self) -> dict[str, subprocess.Popen]:
        """The processes that must stay up: the SuperLink and the current SuperNodes."""
        return {
            "superlink": self.procs.procs[0],
            **{f"supernode{i}": p for i, p in self.nodes.items()},
        }

    def logs(self) -> str:
        return self.procs.logs()

    def stop(self) -> None:
        self.procs.stop()


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    root = tmp_path_factory.mktemp("deployment")
    procs: list[Processes] = []
    try:  # the finalizer always runs: every process started is ended, then none may be left
        with one_line_failures(None):
            fed = Federation(root)
            procs.append(fed.procs)
            for i in range(NODES):
                fed.start_node(i)
        yield fed
    finally:
        for p in procs:
            p.stop()
            left = p.leftovers()
            assert not left, f"{len(left)} processes outlived the federation's stop: {left}"


@contextlib.contextmanager
def one_line_failures(fed: Federation | None):
    """A :class:`Failure` (a step that failed or ran out of time) fails the test with its one
    line; the processes' logs go to the test's captured output."""
    try:
        yield
    except Failure as err:
        if fed is not None:
            print(fed.logs())
        pytest.fail(str(err), pytrace=False)


def _wait_for(predicate, timeout: float, fed: Federation, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise Failure(f"no {what} within {timeout:.0f} s")
        dead = [name for name, proc in fed.live().items() if proc.poll() is not None]
        if dead:
            raise Failure(f"{', '.join(dead)} exited while waiting for {what}")
        time.sleep(0.5)


def _log_tail(fed: Federation, name: str, tail: int = 1500) -> str:
    """The end of one process's log (an assertion's context)."""
    path = fed.root / f"{name}.log"
    return path.read_text(errors="replace")[-tail:] if path.exists() else "(none)"


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
    with one_line_failures(federation):
        federation.submit(
            f"num-server-rounds=3 privacy='global-dp' accept-failures=true local-epochs=1 "
            f"evaluate-in-train=false noise-multiplier=0.01 output-dir='{out}'"  # MP's z: it learns
        )
        _wait_for(lambda: len(_rounds(out)) >= 2, ROUND_S, federation, "round 1 record")
        federation.kill_node(3)
        federation.start_node(3)
        _wait_for(lambda: (out / "summary.json").exists(), RUN_S, federation, "summary.json")
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
    third = {k: rounds[3].get(k) for k in ("rejoined", "sampled", "replied", "failed")}
    rejoin = f"round 3: {third}; node 3's log: {_log_tail(federation, 'supernode3')}"
    assert third["rejoined"] == [3] and third["replied"] == [0, 1, 2, 3], rejoin
    assert rounds[3]["dp-noised-rounds"] == 3
    assert rounds[1]["sampled"] == [0, 1, 2, 3]
    assert summary["final"]["accuracy"] > 0.5
    # the server's ε: the exact Gaussian ε of the rounds it charged (replace-one, sensitivity 2C
    # on the sum: mu_r = 2/z_r, composed), growing, and the summary's headline
    charged = [rounds[r]["dp-round-noise-multiplier"] for r in (1, 2, 3)]
    mu = math.sqrt(sum((2 / z) ** 2 for z in charged))
    delta = rounds[3]["dp-delta"]
    assert rounds[3]["dp-epsilon"] == pytest.approx(gaussian_epsilon(mu, delta), rel=1e-6)
    assert 0 < rounds[1]["dp-epsilon"] < rounds[2]["dp-epsilon"] < rounds[3]["dp-epsilon"]
    assert summary["privacy_figures"]["epsilon"] == pytest.approx(rounds[3]["dp-epsilon"])
    # global DP: the server adds the noise; no node keeps a release ledger for this run
    assert not [p.name for f in federation.states.values() for p in f.glob("ledger.sqlite3*")]


def test_zone_supernodes_survive_a_killed_zone_node(federation, tmp_path):
    """The same SuperNodes serve as s = 4 zone nodes (partition-id =
    zone) of an HDP run over 8 clients (2 per zone, blocks). Zone 1's SuperNode is SIGKILLed
    after round 1 and not restarted: from the round it misses on, that zone's message gets
    Flower's node-unavailable error; the round records the zone as missing and its clients as
    failed, the other zones' aggregates are still applied, the zone's super-node is re-elected
    next round (``no-reply``), and the run completes."""
    out = tmp_path / "zones"
    with one_line_failures(federation):
        federation.submit(
            "privacy='zonal' noise-placement='hdp' num-clients=8 num-zones=4 clients-per-round=8 "
            "model='digits-mlp' num-server-rounds=4 local-epochs=1 accept-failures=true "
            f"zonal-distributed-eval='none' output-dir='{out}'"
        )
        _wait_for(lambda: len(_rounds(out)) >= 2, ROUND_S, federation, "round 1 record")
        federation.kill_node(1)
        try:
            _wait_for(lambda: (out / "summary.json").exists(), RUN_S, federation, "summary.json")
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
    summary = json.loads((out / "summary.json").read_text())
    assert summary["zonal"]["reelections"] >= 1
    _check_zone_ledgers(federation, rounds, summary)


def _check_zone_ledgers(fed: Federation, rounds: dict, summary: dict) -> None:
    """The server's ε and each zone node's own ledger (party ``zone-node``, its zone id, in
    the ``ledger.sqlite3`` of its ``client-state-dir``).

    The server's ε of a zone's release (HDP level, against the aggregator: replace-one,
    sensitivity 2C, no amplification) after 4 rounds is the exact Gaussian ε of
    mu = 2*sqrt(4)/z. Each node charged one release per round it served (the killed one:
    the rounds before it died, and at most the one it was killed in), ``1/z²`` spent per
    release; its own lifetime ε (mu = sqrt(spent)) is no larger than the server's."""
    cfg = summary["config"]
    z, delta = float(cfg["noise-multiplier"]), float(cfg["dp-delta"])
    eps = summary["zonal"]["epsilon"]
    assert eps["round"] == 4 and eps["delta"] == delta
    server = eps["vs_curious_aggregator"]["hdp"]["pld"]
    assert server == pytest.approx(gaussian_epsilon(2 * math.sqrt(4) / z, delta), rel=1e-6)
    for zone, folder in fed.states.items():
        ledger = read_ledger(folder, "zone-node", zone)
        served = sum(zone not in rounds[r]["zonal"]["missing_zones"] for r in (1, 2, 3, 4))
        if zone == 1:
            assert served <= ledger.releases <= served + 1, (zone, served, ledger.releases)
        else:
            assert ledger.releases == served == 4, (zone, ledger.releases)
        assert ledger.spent == pytest.approx(ledger.releases / z**2, rel=1e-9), ledger
        own = lifetime_epsilon(ledger.spent, delta)
        assert own == pytest.approx(gaussian_epsilon(math.sqrt(ledger.releases) / z, delta))
        assert 0 < own <= server, (zone, own, server)
