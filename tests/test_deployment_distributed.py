"""Deployment engine, distributed DP: five real SuperNodes on 127.0.0.1 run a round
of ``privacy = distributed-dp`` over Flower messages; one is SIGKILLed mid-round.

The SuperLink and SuperNodes are Flower's own executables, started as in
:mod:`tests.test_deployment` (its :class:`~tests.test_deployment.Federation`, here with five
nodes; every process is stopped at the end and none may be left). The round's four message
exchanges (keys, sealed shares, masked vectors, reveals;
:mod:`fedpriv.strategies.distributed_dp`) run between the ServerApp and the ClientApps, with
X25519 key agreement, AES-256-GCM sealed shares and AES-CTR masks.

Partition 2's SuperNode is killed **in its masked step**: once its own ledger shows the
masked release charged (which happens before it trains), i.e. after the key exchange and
after its sealed shares reached the server. Its masked vector then never arrives: the server
puts it in the dropped set, the four survivors reveal their shares of its masking key (t = 4
of 5) and the server removes the pairwise masks the survivors shared with it. (Had its vector
left before the kill, it would be a survivor that does not answer the unmasking request, and
the other four's shares of its self-mask seed recover the sum: the same protocol's other
case, accepted too; the test prints which one happened.) A client lost before its shares
reached the server leaves the cohort instead (the shares step is repeated without it).

The server's view of the round is written by ``FEDPRIV_DISTRIBUTED_AUDIT_DIR``: each client's
masked vector as received is indistinguishable from uniform on Z_m (a χ² test on 16 bins,
which the unmasked sum, a control, fails by far), the decoded mean has the noise's size (a
wrong unmasking would decode uniform garbage), and the run's records hold no per-client vector.
One round, but every message starts a ClientApp process (five per step, four steps) and the
SuperLink waits for the killed node's heartbeat to lapse: 8.5-9 min on the shared 2-core box
at a load average of 60-80 (2026-12-07; not measured idle).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from fedpriv.strategies.distributed_dp import AUDIT_ENV

from fedpriv.privacy.releases import read_ledger
from fedpriv.reporting.runlog import read_rounds
from tests.localflower import Failure
from tests.test_deployment import BIN, RUN_S, SUBMIT_S, Federation, one_line_failures

pytestmark = [pytest.mark.simulation, pytest.mark.slow, pytest.mark.deployment]
NODES, KILLED = 5, 2
BINS = 16
CHI2_15_AT_1E6 = 50.5  # scipy.stats.chi2.isf(1e-6, 15): a uniform vector fails 1 in a million


def chi2_uniform(values: np.ndarray, bits: int) -> float:
    """χ² of the top 4 bits of ``values`` (elements of Z_(2^bits)) against uniform."""
    top = (np.asarray(values, dtype=np.uint64) >> np.uint64(bits - 4)).astype(np.int64)
    counts = np.bincount(top, minlength=BINS)
    expected = values.size / BINS
    return float(((counts - expected) ** 2 / expected).sum())


def _charged(state: Path) -> bool:
    """Whether the node's masked release is charged (its masked step has begun)."""
    if not (state / "ledger.sqlite3").exists():
        return False
    try:
        return read_ledger(state, "distributed-dp", KILLED).releases >= 1
    except Exception:  # noqa: BLE001 (the node may hold the database's lock right now)
        return False


def _poll(predicate, timeout: float, fed: Federation, what: str, every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise Failure(f"no {what} within {timeout:.0f} s")
        dead = [name for name, proc in fed.live().items() if proc.poll() is not None]
        if dead:
            raise Failure(f"{', '.join(dead)} exited while waiting for {what}")
        time.sleep(every)


def _summary_or_failure(fed: Federation, out: Path) -> bool:
    """Whether summary.json is there; :class:`Failure` with the ServerApp's last lines when
    its task finished without one (the ServerApp raised: ``flwr log`` has its traceback)."""
    if (out / "summary.json").exists():
        return True
    if "Finished task" not in (fed.root / "superlink.log").read_text(errors="replace"):
        return False
    time.sleep(2)
    if (out / "summary.json").exists():
        return True
    started = (fed.root / "flwr-run1.log").read_text(errors="replace")
    run_id = started.rsplit("Successfully started run", 1)[-1].split()[0]
    log = fed.procs.run("flwr-log", [str(BIN / "flwr"), "log", run_id, "local-deployment",
                                     "--show"], timeout_s=SUBMIT_S, cwd=fed.root)  # fmt: skip
    print(log[-6000:])
    raise Failure(f"the ServerApp finished without summary.json: {log.strip()[-300:]!r}")


def _long_numeric_lists(value, limit: int = 100) -> list[int]:
    """Lengths of the numeric lists longer than ``limit`` anywhere in a JSON value."""
    if isinstance(value, dict):
        return [n for v in value.values() for n in _long_numeric_lists(v, limit)]
    if isinstance(value, list):
        numeric = value and all(isinstance(v, (int, float)) for v in value)
        own = [len(value)] if numeric and len(value) > limit else []
        return own + [n for v in value for n in _long_numeric_lists(v, limit)]
    return []


def test_distributed_dp_round_survives_a_supernode_killed_mid_round(tmp_path, monkeypatch):
    audit, out = tmp_path / "audit", tmp_path / "out"
    monkeypatch.setenv(AUDIT_ENV, str(audit))  # the ServerApp inherits the SuperLink's env
    (tmp_path / "fed").mkdir()
    fed = None
    try:
        with one_line_failures(fed):
            fed = Federation(tmp_path / "fed", NODES)
        with one_line_failures(fed):
            for i in range(NODES):
                fed.start_node(i)
            fed.submit(
                f"privacy='distributed-dp' num-clients={NODES} model='digits-mlp' "
                "num-server-rounds=1 local-epochs=3 evaluate-in-train=false "
                f"accept-failures=true noise-multiplier=1.0 output-dir='{out}'"
            )
            _poll(lambda: _charged(fed.states[KILLED]), SUBMIT_S + 300, fed,
                  f"masked step on partition {KILLED}")  # fmt: skip
            fed.kill_node(KILLED)
            _poll(lambda: _summary_or_failure(fed, out), RUN_S, fed, "summary.json", 0.5)
    finally:
        if fed is not None:
            fed.stop()
            left = fed.procs.leftovers()
            assert not left, f"{len(left)} processes outlived the federation's stop: {left}"
    view = np.load(audit / "round-1.npz")
    cohort, survivors = view["cohort"].tolist(), view["survivors"].tolist()
    dropped, revealed = view["dropped"].tolist(), view["revealed"].tolist()
    case = "dropped before its masked vector" if dropped else "survivor that did not reveal"
    print(f"killed node: {case}; survivors {survivors}, dropped {dropped}, revealed {revealed}")
    assert len(cohort) == NODES  # every node sent its keys and sealed shares
    if dropped:  # its pairwise masks removed with its key rebuilt from 4 shares
        assert len(dropped) == 1 and len(survivors) == NODES - 1 and revealed == survivors
    else:  # its self mask removed with its seed rebuilt from the other 4 shares
        assert len(survivors) == NODES and len(revealed) == NODES - 1
    rounds = {r["round"]: r for r in read_rounds(out)}
    first = rounds[1]
    assert first["aggregated"] and not first["distributed-skipped"], first
    assert first["distributed-survivors"] == len(survivors)
    assert first["distributed-dropped"] == ([KILLED] if dropped else [])  # partitions
    # what the server received per client: uniform on Z_m; the unmasked sum is not
    bits = int(view["bits"])
    masked = {k: view[k] for k in view.files if k.startswith("masked-")}
    assert sorted(int(k.split("-")[1]) for k in masked) == survivors
    stats = {k: chi2_uniform(v, bits) for k, v in masked.items()}
    assert all(s < CHI2_15_AT_1E6 for s in stats.values()), stats
    assert chi2_uniform(view["sum"], bits) > 20 * CHI2_15_AT_1E6  # the control fails the test
    # the decoded mean is the clipped mean (norm <= C = 1) plus the noise: of the noise's size
    noise = first["distributed-noise-std"] / len(survivors)
    rms = float(np.sqrt(np.mean(view["mean"] ** 2)))
    print(f"mean rms {rms:.4g}; noise std {noise:.4g}; chi2 {stats}")
    assert 0.5 * noise < rms < 2 * noise, (rms, noise)
    # the server's records hold no per-client vector (nor any vector of the model's size)
    for path in (out / "rounds.jsonl", out / "operator.jsonl"):
        for line in path.read_text().splitlines():
            assert not _long_numeric_lists(json.loads(line)), path
    assert not _long_numeric_lists(json.loads((out / "summary.json").read_text()))
