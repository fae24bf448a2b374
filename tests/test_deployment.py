"""Deployment engine: a real SuperLink and four SuperNodes on localhost run the app.

The SuperLink and SuperNodes are Flower's own executables (``flower-superlink``,
``flower-supernode``), started insecure on loopback ports; the run is submitted with
``flwr run . local-deployment`` exactly as a user would, with the address overridden.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.simulate import ROOT

pytestmark = pytest.mark.simulation
BIN = Path(sys.executable).parent


def _free_ports(count: int) -> list[int]:
    socks, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _start(cmd, log: Path, env):
    return subprocess.Popen(
        cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def _stop(procs):
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def test_superlink_and_supernodes_on_localhost(tmp_path):
    env = dict(
        os.environ,
        PATH=f"{BIN}:{os.environ['PATH']}",
        TF_CPP_MIN_LOG_LEVEL="3",
        CUDA_VISIBLE_DEVICES="",
        FLWR_HOME=str(tmp_path / "flwr-home"),
    )
    appio, fleet, control, *node_ports = _free_ports(7)
    out = tmp_path / "out"
    procs = [
        _start(
            [
                str(BIN / "flower-superlink"),
                "--insecure",
                "--serverappio-api-address",
                f"127.0.0.1:{appio}",
                "--fleet-api-address",
                f"127.0.0.1:{fleet}",
                "--control-api-address",
                f"127.0.0.1:{control}",
                "--flwr-dir",
                str(tmp_path / "flwr-link"),
            ],
            tmp_path / "superlink.log",
            env,
        )
    ]
    try:
        time.sleep(3)
        for i in range(4):
            procs.append(
                _start(
                    [
                        str(BIN / "flower-supernode"),
                        "--insecure",
                        "--superlink",
                        f"127.0.0.1:{fleet}",
                        "--clientappio-api-address",
                        f"127.0.0.1:{node_ports[i]}",
                        "--node-config",
                        f"partition-id={i} num-partitions=4",
                        "--flwr-dir",
                        str(tmp_path / f"flwr-node{i}"),
                    ],
                    tmp_path / f"supernode{i}.log",
                    env,
                )
            )
        submit = subprocess.run(
            [
                str(BIN / "flwr"),
                "run",
                ".",
                "local-deployment",
                "--federation-config",
                f"address='127.0.0.1:{control}'",
                "--run-config",
                f"num-server-rounds=2 privacy='none' output-dir='{out}'",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert "Successfully started run" in submit.stdout, submit.stdout + submit.stderr
        deadline = time.monotonic() + 600
        while not (out / "summary.json").exists() and time.monotonic() < deadline:
            time.sleep(2)
        logs = "".join(p.read_text()[-2000:] for p in tmp_path.glob("*.log"))
        assert (out / "summary.json").exists(), logs
        summary = json.loads((out / "summary.json").read_text())
        rounds = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
        assert [r["round"] for r in rounds] == [0, 1, 2]
        assert rounds[-1]["sampled"] == [0, 1, 2, 3]
        assert summary["final"]["accuracy"] > 0.5
    finally:
        _stop(procs)
