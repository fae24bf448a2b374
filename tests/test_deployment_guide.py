"""docs/deployment.md, followed on one machine: a hospital network over TLS with node auth.

The certificates, node keys and every command come from ``examples/deployment/hospital.py``,
the script the page walks through: a CA and the SuperLink's certificate (openssl), an ECDSA
P-384 key pair per SuperNode (ssh-keygen), the SuperLink with TLS and
``--enable-supernode-auth``, each node's public key registered with ``flwr supernode
register``, each SuperNode with its private key, the CA and its own ``--node-config`` (its
privacy keys and its own 0700 ``client-state-dir``), and ``flwr run`` on a connection with
``root-certificates``. The page's two federations run one after the other, each on its own
SuperLink (one federation cannot mix DP-SGD nodes and zone nodes: the ServerApp runs one
privacy mode and maps nodes by ``partition-id``): 3 DP-SGD SuperNodes, then 2 zone nodes of an
HDP run with 4 clients each. Each run goes to its end (2 rounds, 1 local epoch, digits);
then each node's ε is what its own ledger (``<client-state-dir>/ledger.sqlite3``) composes,
with the z its own node config set (the run config asks for another z: the server cannot set
it). A node whose key was not registered cannot connect.

Every wait is bounded; every process is ended (:mod:`tests.localflower`) and none may be left.
CI runs this file in ``make test-deployment`` (marker ``deployment``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fedpriv.privacy.accounting.accountant import gaussian_epsilon
from fedpriv.privacy.releases import read_ledger
from fedpriv.reporting.runlog import read_rounds
from fedpriv.zonal.accounting import lifetime_epsilon
from tests.localflower import Failure, Processes, free_ports
from tests.simulate import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.deployment]
BIN = Path(sys.executable).parent
UP_S, SUBMIT_S, RUN_S = 120, 120, 420  # a SuperLink's start; flwr run's submit; a whole run

_spec = importlib.util.spec_from_file_location(
    "hospital", ROOT / "examples" / "deployment" / "hospital.py"
)
hospital = sys.modules.setdefault("hospital", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(hospital)


def _bin(cmd: list[str]) -> list[str]:
    """The page's command, with the executable of this environment."""
    return [str(BIN / cmd[0]), *cmd[1:]]


def _wait_https(url: str, ca: Path, procs: Processes, timeout_s: float) -> None:
    """Poll ``url`` over TLS (the CA's certificate checked, host name included)."""
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dead = [p for p in procs.procs if p.poll() is not None]
        if dead:
            raise Failure(f"{dead[0].args[0]} exited with {dead[0].returncode}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=2, context=context) as response:  # noqa: S310
                if 200 <= response.status < 300:
                    return
        time.sleep(0.5)
    raise Failure(f"{url} did not answer within {timeout_s:.0f} s")


class Deployment:
    """One federation of the page: its SuperLink, registered keys and SuperNodes."""

    def __init__(self, root: Path, certs: Path, name: str, env: dict[str, str]) -> None:
        self.root, self.certs, self.name = root, certs, name
        self.run_config, self.nodes = hospital.FEDERATIONS[name]
        self.home = root / "operator"  # the operator's FLWR_HOME
        self.home.mkdir(parents=True)
        self.procs = Processes(root, {**env, "FLWR_HOME": str(self.home)})
        (self.port,) = free_ports(1)
        self.address = f"127.0.0.1:{self.port}"
        (self.home / "config.toml").write_text(hospital.connection_toml(name, self.address, certs))
        self.states = {n.name: root / "state" / n.name for n in self.nodes}
        self.supernodes: dict[str, subprocess.Popen] = {}

    def start(self) -> None:
        cmd = hospital.superlink_command(
            self.certs, host="127.0.0.1", port=self.port, database=str(self.root / "link.db")
        )
        self.procs.start("superlink", _bin(cmd))
        _wait_https(
            f"https://localhost:{self.port}/health", self.certs / "ca.crt", self.procs, UP_S
        )
        for node in self.nodes:
            cmd = hospital.register_command(self.certs, node.name, self.name)
            out = self.procs.run(f"register-{node.name}", _bin(cmd), timeout_s=SUBMIT_S)
            if "registered successfully" not in out:
                raise Failure(f"{node.name}'s key was not registered: {out.strip()[-300:]!r}")
        for node in self.nodes:
            folder = self.states[node.name]
            folder.parent.mkdir(exist_ok=True)
            folder.mkdir(mode=0o700)  # the page: a folder the node owns, 0700
            self.start_node(node, folder)

    def start_node(self, node, folder: Path, key: str | None = None, **kw) -> subprocess.Popen:
        (port,) = free_ports(1)
        cmd = hospital.supernode_command(
            self.certs, node, self.address, port=port, state_dir=str(folder)
        )
        if key is not None:  # another key file (an unregistered one)
            cmd[cmd.index("--auth-supernode-private-key") + 1] = key
        home = self.root / f"flwr-{node.name}"
        home.mkdir(exist_ok=True)
        proc = self.procs.start(
            kw.get("log", node.name), [*_bin(cmd), *kw.get("extra", [])],
            env={"FLWR_HOME": str(home)},
        )  # fmt: skip
        if key is None:
            self.supernodes[node.name] = proc
        return proc

    def submit(self, overrides: str) -> None:
        before = (ROOT / "pyproject.toml").read_bytes()
        cmd = hospital.run_command(self.name, f"{self.run_config} {overrides}", stream=False)
        assert cmd[:3] == ["flwr", "run", "."]
        out = self.procs.run("flwr-run", _bin(cmd), cwd=ROOT, timeout_s=SUBMIT_S)
        if "Successfully started run" not in out:
            raise Failure(f"flwr run did not start the run: {out.strip()[-300:]!r}")
        assert (ROOT / "pyproject.toml").read_bytes() == before, "flwr run rewrote pyproject.toml"

    def wait_for(self, path: Path, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        live = {"superlink": self.procs.procs[0], **self.supernodes}
        while not path.exists():
            if time.monotonic() > deadline:
                raise Failure(f"no {path.name} within {timeout_s:.0f} s")
            dead = [name for name, proc in live.items() if proc.poll() is not None]
            if dead:
                raise Failure(f"{', '.join(dead)} exited while waiting for {path.name}")
            time.sleep(0.5)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("guide") / "certs"
    nodes = [n.name for f in ("dpsgd", "zones") for n in hospital.FEDERATIONS[f][1]]
    hospital.make_certs(folder, ["localhost", "127.0.0.1"], [*nodes, "stranger"])
    return folder


@pytest.fixture
def deployment(tmp_path, certs):
    env = dict(
        os.environ,
        PATH=f"{BIN}:{os.environ['PATH']}",
        TF_CPP_MIN_LOG_LEVEL="3",
        CUDA_VISIBLE_DEVICES="",
        FLWR_DISABLE_UPDATE_CHECK="1",
        RAY_DISABLE_USAGE_STATS="1",
    )
    env.pop("FEDPRIV_STATE_ROOT", None)  # each node's folder is its node config's
    made: list[Deployment] = []

    def make(name: str) -> Deployment:
        dep = Deployment(tmp_path / name, certs, name, env)
        made.append(dep)
        try:
            dep.start()
        except Failure as err:
            print(dep.procs.logs())
            pytest.fail(str(err), pytrace=False)
        return dep

    try:
        yield make
    finally:
        for dep in made:
            dep.procs.stop()
            left = dep.procs.leftovers()
            assert not left, f"{len(left)} processes outlived the deployment's stop: {left}"


@contextlib.contextmanager
def one_line_failures(dep: Deployment):
    try:
        yield
    except Failure as err:
        print(dep.procs.logs())
        pytest.fail(str(err), pytrace=False)


def test_dpsgd_hospitals_over_tls_with_node_auth(deployment, tmp_path):
    """3 DP-SGD SuperNodes: a run to its end; each node's ε is its own ledger's, at its own z."""
    dep = deployment("dpsgd")
    out = tmp_path / "dpsgd-out"
    with one_line_failures(dep):
        # an unregistered key is refused by the SuperLink (node authentication)
        stranger = dep.start_node(
            dep.nodes[0], tmp_path / "stranger-state", key=str(dep.certs / "stranger"),
            log="stranger", extra=["--max-retries", "1"],
        )  # fmt: skip
        # the operator's run config asks for z = 0.3: every node keeps its own 1.1
        dep.run_config = dep.run_config.replace("noise-multiplier=1.1", "noise-multiplier=0.3")
        dep.submit(f"output-dir='{out}'")
        dep.wait_for(out / "summary.json", RUN_S)
        assert stranger.wait(timeout=60) != 0, "an unregistered SuperNode connected"
    link = (dep.root / "superlink.log").read_text(errors="replace")
    assert "running on https://" in link  # TLS
    assert "No SuperNode found with the given public key" in link  # the stranger, refused
    summary = json.loads((out / "summary.json").read_text())
    reported = summary["privacy"]["dp_sgd"]["epsilon_per_client"]
    # the server reports the nodes' own z (their replies), not its run config's 0.3
    assert summary["privacy"]["dp_sgd"]["noise_multiplier"] == pytest.approx(1.1)
    assert summary["privacy_figures"]["noise_multiplier"] == pytest.approx(1.1)
    rounds = read_rounds(out)
    assert max(r["round"] for r in rounds) == 2
    for i, node in enumerate(dep.nodes):
        delta = 1e-05  # the node's own dp-delta
        ledger = read_ledger(dep.states[node.name], "dp-sgd", i)
        assert ledger.releases == 2, (node.name, ledger.to_json())
        for event in map(json.loads, ledger.events):  # DP-SGD's steps, replace-one: z / 2
            gaussian = event["event"]["event"]
            assert gaussian["noise_multiplier"] == pytest.approx(1.1 / 2), event
        own = ledger.lifetime_epsilon(delta)
        assert float(reported[str(i)]) == pytest.approx(own, rel=1e-9), (node.name, reported)
        assert 0 < own < math.inf
        mode = (dep.states[node.name] / "ledger.sqlite3").stat().st_mode & 0o777
        assert mode == 0o600 and dep.states[node.name].stat().st_mode & 0o777 == 0o700


def test_zone_nodes_over_tls_with_node_auth(deployment, tmp_path):
    """2 zone nodes (HDP), 4 clients each: a run to its end; each zone node's ledger holds one
    release per round at its own z, and its lifetime ε is the Gaussian of √(Σ 1/z²)."""
    dep = deployment("zones")
    out = tmp_path / "zones-out"
    with one_line_failures(dep):
        dep.submit(f"output-dir='{out}'")
        dep.wait_for(out / "summary.json", RUN_S)
    rounds = {r["round"]: r for r in read_rounds(out)}
    assert sorted(rounds) == [0, 1, 2]
    for r in (1, 2):
        zonal = rounds[r]["zonal"]
        assert zonal["runtime"] == "zone-nodes" and zonal["zone_messages"] == 2
        assert zonal["missing_zones"] == [] and rounds[r]["replied"] == list(range(8))
    z, delta = 1.0, 1e-05  # the zone nodes' own noise-multiplier and dp-delta
    for zone, node in enumerate(dep.nodes):
        ledger = read_ledger(dep.states[node.name], "zone-node", zone)
        assert ledger.releases == 2, (node.name, ledger.to_json())
        assert ledger.spent == pytest.approx(2 / z**2, rel=1e-9)
        own = lifetime_epsilon(ledger.spent, delta)
        assert own == pytest.approx(gaussian_epsilon(math.sqrt(2) / z, delta), rel=1e-9)
