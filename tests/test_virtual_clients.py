"""Virtual clients on worker SuperNodes: packing, the worker's trust rules, the VirtualGrid.

The real ClientApp (``fedpriv.scenarios.app.client_app.app``) gets real Flower messages and
contexts. A worker is a node whose own ``node_config`` says ``partition-id = w``,
``num-partitions = W`` < ``num-clients``: it serves the partitions ``p mod W = w`` and nothing
else. The curious-server attacks of ``tests/test_curious_server.py`` are sent again inside
packed messages: each client's part is checked against that client's own spec, a packed
message that names another worker's partition is refused whole, and the DP-SGD ledgers and
states stay per client. The :class:`fedpriv.scenarios.nodes.virtual_grid.VirtualGrid` is driven by a
loop-back grid that hands every message to the real ClientApp with its node's Context.
"""

from __future__ import annotations

import json
import os
import pickle
import uuid

import numpy as np
import pytest
from fedpriv.scenarios.app.client_app import app
from fedpriv.scenarios.app.task_names import DPSGD_STATE_KEY
from fedpriv.scenarios.nodes.packing import (
    PACK_KEY,
    pack,
    pack_replies,
    unpack,
    unpack_errors,
    worker_clients,
)
from fedpriv.scenarios.nodes.virtual_grid import VirtualGrid
from fedpriv.scenarios.nodes.worker import STATES_KEY, client_state
from fedpriv.scenarios.speed.keys import simulation_workers
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict

from fedpriv.privacy.ownership import REFUSED_CODE
from tests.test_curious_server import (
    AUTO_RUN_CONFIG,
    DPSGD_ATTACKS,
    DPSGD_AUTO,
    dpsgd_weights,  # noqa: F401  (a fixture)
    server_message,
)

WORKERS = 2  # digits: 4 clients, worker 0 serves {0, 2}, worker 1 serves {1, 3}


def worker_context(run_config: dict, worker: int, node: dict | None = None) -> Context:
    """A worker SuperNode's Context as the simulation engine builds it."""
    config = {"partition-id": worker, "num-partitions": WORKERS, **(node or {})}
    return Context(7, 100 + worker, config, RecordDict(), run_config)


def packed(messages: dict[int, Message], message_type: str = MessageType.TRAIN) -> Message:
    """The packed message of ``messages`` (partition -> its own message)."""
    content = pack({p: m.content for p, m in messages.items()})
    msg = Message(content, 100, message_type)
    msg.metadata.__dict__["_message_id"] = str(uuid.uuid4())
    return msg


def replies_of(reply: Message) -> tuple[dict[int, RecordDict], dict[int, tuple[int, str]]]:
    assert not reply.has_error(), reply.error
    return unpack(reply.content), unpack_errors(reply.content)


def test_worker_clients_deal_partitions_round_robin_and_cover_each_once():
    for n, w in [(4, 2), (100, 3), (7, 7), (5, 9)]:
        served = [worker_clients(k, min(w, n), n) for k in range(min(w, n))]
        assert sorted(p for s in served for p in s) == list(range(n))
        assert max(map(len, served)) - min(map(len, served)) <= 1
    assert worker_clients(3, 10, 10) == [3]  # one SuperNode per client: its own partition


def test_pack_sends_identical_arrays_once_and_unpack_gives_each_its_own_records():
    rng = np.random.default_rng(0)
    weights = ArrayRecord([rng.normal(size=(30, 10)).astype(np.float32)])
    same = ArrayRecord([np.array(a.numpy()) for a in weights.values()])  # equal, not identical
    contents = {
        p: RecordDict(
            {"arrays": weights if p != 2 else same, "config": ConfigRecord({"lr": 0.1, "p": p})}
        )
        for p in (0, 2, 4)
    }
    content = pack(contents)
    assert sum(isinstance(r, ArrayRecord) for r in content.values()) == 1  # the model once
    assert list(content[PACK_KEY]["clients"]) == [0, 2, 4]
    back = unpack(content)
    assert sorted(back) == [0, 2, 4]
    for p, record in back.items():
        assert dict(record["config"]) == {"lr": 0.1, "p": p}
        np.testing.assert_array_equal(record["arrays"].to_numpy_ndarrays()[0], weights["0"].numpy())
    different = {**contents, 4: RecordDict({"arrays": ArrayRecord([np.zeros(3, np.float32)])})}
    content = pack(different)
    assert sum(isinstance(r, ArrayRecord) for r in content.values()) == 3
    assert unpack(content)[4]["arrays"].to_numpy_ndarrays()[0].shape == (3,)
    assert "config" not in unpack(content)[4]
    reply = pack_replies({0: RecordDict({"m": ConfigRecord({"a": 1})})}, {2: (7, "no")})
    assert unpack_errors(reply) == {2: (7, "no")} and list(unpack(reply)) == [0]


def test_simulation_workers_resolves_auto_and_keeps_other_kinds_one_node_per_client():
    cfg = {"num-workers": "auto", "num-clients": 100}
    assert simulation_workers(cfg, {"standard"}, cpus=8, cpus_per_client=2) == 4
    assert simulation_workers(cfg, {"standard"}, cpus=2, cpus_per_client=1) == 2
    assert simulation_workers({**cfg, "num-clients": 1}, {"standard"}, 8, 1) == 1
    assert simulation_workers({**cfg, "num-workers": 7}, {"standard"}, 2, 1) == 7
    assert simulation_workers(cfg, {"standard", "zonal-compare"}, 8, 1) is None
    assert simulation_workers({"num-clients": 4}, {"standard"}, 8, 1) is None


@pytest.mark.parametrize("key", sorted(DPSGD_ATTACKS))
def test_each_curious_server_attack_inside_a_packed_message_is_refused_for_its_client(
    dpsgd_weights,  # noqa: F811
    key,
):
    """Client 2's part carries the attack, client 0's is legit: client 2 is refused naming
    the key and nothing of it ran; the worker answers for both in one reply."""
    extra = {"client-task": "dp-sgd"}
    legit = server_message(DPSGD_AUTO, extra, dpsgd_weights, {})
    attack = server_message(DPSGD_AUTO, extra, dpsgd_weights, {key: DPSGD_ATTACKS[key]})
    ctx = worker_context(DPSGD_AUTO, 0)
    contents, errors = replies_of(app(packed({0: legit, 2: attack}), ctx))
    assert set(errors) == {2} and set(contents) == {0}
    code, reason = errors[2]
    assert code == REFUSED_CODE and f"key={key} " in reason, reason
    assert not any(k.endswith("@2") for k in ctx.state.keys())  # nothing of client 2 ran
    assert "arrays" in contents[0]


def test_a_packed_message_naming_another_workers_partition_is_refused_whole(dpsgd_weights):  # noqa: F811
    msg = server_message(AUTO_RUN_CONFIG, {}, dpsgd_weights, {})
    ctx = worker_context(AUTO_RUN_CONFIG, 0)
    reply = app(packed({0: msg, 1: msg}), ctx)  # partition 1 is worker 1's
    assert reply.has_error() and reply.error.code == REFUSED_CODE
    assert "partition(s) [1]" in reply.error.reason
    assert not list(ctx.state.keys())
    plain = app(msg, ctx)  # a plain message would run as the worker's own partition-id
    assert plain.has_error() and "packed messages only" in plain.error.reason


def test_dp_sgd_clients_of_one_worker_keep_their_own_ledgers_and_states(dpsgd_weights, tmp_path):  # noqa: F811
    """Two rounds for clients 0 and 2 on one worker with its own state folder: each client
    has its own folder and ledger, counts its own 2 releases, and its ε equals that of a
    SuperNode of its own after 2 participations. Between the rounds the worker's Context
    travels as the simulation moves it (pickled to any Ray actor and back): its state is the
    one record of the clients' states, whatever the number of clients."""
    node = {"client-state-dir": str(tmp_path / "state")}
    ctx = worker_context(DPSGD_AUTO, 0, node)
    eps = {}
    for rnd in (1, 2):
        ctx = pickle.loads(pickle.dumps(ctx))
        msgs = {
            p: server_message(
                DPSGD_AUTO, {"client-task": "dp-sgd"}, dpsgd_weights, {"server-round": rnd}
            )
            for p in (0, 2)
        }
        contents, errors = replies_of(app(packed(msgs), ctx))
        assert not errors, errors
        eps[rnd] = {p: float(c["metrics"]["dp-sgd-epsilon"]) for p, c in contents.items()}
    assert list(ctx.state.keys()) == [STATES_KEY]
    assert sorted(ctx.state[STATES_KEY]) == ["0", "2"]
    assert not client_state(ctx, 4).keys()  # a client of this worker that never trained
    for p in (0, 2):
        ledgers = list((tmp_path / "state" / f"client-{p}").rglob("ledger.sqlite3"))
        assert ledgers, p
        assert int(client_state(ctx, p)[DPSGD_STATE_KEY]["participations"]) == 2
        assert eps[2][p] > eps[1][p]
    alone = Context(7, 5, {"partition-id": 2, **node}, RecordDict(), DPSGD_AUTO)
    alone.node_config["client-state-dir"] = str(tmp_path / "alone")
    for rnd in (1, 2):
        msg = server_message(
            DPSGD_AUTO, {"client-task": "dp-sgd"}, dpsgd_weights, {"server-round": rnd}
        )
        reply = app(msg, alone)
    assert float(reply.content["metrics"]["dp-sgd-epsilon"]) == pytest.approx(eps[2][2])


def test_a_worker_trains_its_clients_as_one_cohort_with_the_results_of_one_by_one(
    dpsgd_weights,  # noqa: F811
):
    """Standard training of clients 0 and 2 on one worker: with ``cohort-training`` their
    Keras calls ran as one compiled call (the trainer has a cohort trace), and each client's
    reply is the one it gets client by client (to float tolerance)."""
    from fedpriv.clients import keras_client

    replies = {}
    for cohort in (False, True):
        run_config = {**AUTO_RUN_CONFIG, "cohort-training": cohort}
        msgs = {p: server_message(run_config, {}, dpsgd_weights, {}) for p in (0, 2)}
        replies[cohort], errors = replies_of(app(packed(msgs), worker_context(run_config, 0)))
        assert not errors, errors
    pooled = [k for t in keras_client._TRAINERS.values() for k in t._compiled if k[0] == "cohort"]
    assert pooled
    for p in (0, 2):
        one, many = (replies[c][p]["arrays"].to_numpy_ndarrays() for c in (False, True))
        for a, b in zip(one, many):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert not np.allclose(one[0], dpsgd_weights[0])  # each client trained
    moved = [replies[True][p]["arrays"].to_numpy_ndarrays()[0] for p in (0, 2)]
    assert not np.allclose(moved[0], moved[1])  # on its own data


class LoopbackGrid:
    """A grid whose SuperNodes are the real ClientApp with their own Contexts (in-process)."""

    def __init__(self, contexts: dict[int, Context]) -> None:
        self.contexts = contexts
        self.sent: list[Message] = []

    def get_node_ids(self) -> list[int]:
        return sorted(self.contexts)

    def send_and_receive(self, messages, *, timeout=None) -> list[Message]:
        out = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            self.sent.append(msg)
            reply = app(msg, self.contexts[msg.metadata.dst_node_id])
            reply.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            out.append(reply)
        return out[::-1]  # replies in any order


def test_the_virtual_grid_shows_one_node_per_client_and_answers_as_each(dpsgd_weights):  # noqa: F811
    """Evaluate messages to the 4 clients of digits go out as 2 packed messages (the model
    once each); the replies are one per client, sorted by partition, from the client's node
    id, replying to its own message, with the metrics a SuperNode of its own computes."""
    workers = {101: worker_context(AUTO_RUN_CONFIG, 0), 102: worker_context(AUTO_RUN_CONFIG, 1)}
    loop = LoopbackGrid(workers)
    grid = VirtualGrid(loop, {101: [0, 2], 102: [1, 3]})
    assert list(grid.get_node_ids()) == [0, 1, 2, 3]
    base = server_message(AUTO_RUN_CONFIG, {}, dpsgd_weights, {})
    messages = [Message(base.content, node, MessageType.EVALUATE) for node in grid.get_node_ids()]
    replies = grid.send_and_receive(messages)
    assert len(loop.sent) == 2
    assert all(sum(isinstance(r, ArrayRecord) for r in m.content.values()) == 1 for m in loop.sent)
    assert [r.metadata.src_node_id for r in replies] == [0, 1, 2, 3]
    assert [r.metadata.reply_to_message_id for r in replies] == [
        m.metadata.message_id for m in messages
    ]
    assert [grid.partition_of(r) for r in replies] == [0, 1, 2, 3]
    for p, reply in enumerate(replies):
        alone = app(
            Message(base.content, 1, MessageType.EVALUATE),
            Context(7, 1, {"partition-id": p}, RecordDict(), AUTO_RUN_CONFIG),
        )
        assert json.dumps(dict(reply.content["metrics"]), sort_keys=True) == json.dumps(
            dict(alone.content["metrics"]), sort_keys=True
        )


def test_a_replayed_packed_round_is_one_release_per_client(dpsgd_weights, tmp_path):  # noqa: F811
    """The same packed DP-SGD round sent 3 times: each client charges it once in its own
    ledger and answers the repeats with its cached reply (no fresh noise), as a SuperNode of
    its own does (``tests/test_release_counting.py``)."""
    node = {"client-state-dir": str(tmp_path / "state")}
    ctx = worker_context(DPSGD_AUTO, 1, node)
    msg = server_message(DPSGD_AUTO, {"client-task": "dp-sgd"}, dpsgd_weights, {})
    replies = [replies_of(app(packed({1: msg, 3: msg}), ctx)) for _ in range(3)]
    assert all(not errors for _, errors in replies)
    for p in (1, 3):
        first = replies[0][0][p]["arrays"].to_numpy_ndarrays()
        for contents, _ in replies[1:]:
            for a, b in zip(first, contents[p]["arrays"].to_numpy_ndarrays()):
                np.testing.assert_array_equal(a, b)
        assert int(client_state(ctx, p)[DPSGD_STATE_KEY]["participations"]) == 1
    spent = [replies[0][0][p]["arrays"].to_numpy_ndarrays()[0] for p in (1, 3)]
    assert np.max(np.abs(spent[0] - spent[1])) > 0  # each client its own noise


def test_a_zone_supernode_is_not_a_worker():
    """A zone SuperNode's ``num-partitions`` is the number of zones (< num-clients): it serves
    its zone's plain messages, not a share of the clients."""
    from fedpriv.scenarios.nodes.worker import served_clients

    zone = Context(7, 1, {"partition-id": 3, "num-partitions": 10}, RecordDict(),
                   {**AUTO_RUN_CONFIG, "scenario": "hdp-digits"})  # fmt: skip
    assert served_clients(zone) == [3]
    worker = Context(7, 1, {"partition-id": 3, "num-partitions": 10}, RecordDict(),
                     {**AUTO_RUN_CONFIG, "scenario": "digits", "num-clients": 100})  # fmt: skip
    assert served_clients(worker) == list(range(3, 100, 10))


@pytest.mark.parametrize(("gpus", "workers"), [(1.0, 1), (2.0, 2), (0.5, 1)])
def test_gpu_federation_runs_one_worker_per_gpu(monkeypatch, gpus, workers):
    """On a GPU federation ``num-workers = auto`` is one worker per GPU (its clients train as
    one cohort on the device), not the CPU count over a client's CPUs (4 on 8 CPUs here)."""
    from fedpriv.scenarios.cli import ray_cluster
    from fedpriv.scenarios.config.registry import resolve_run_config
    from fedpriv.scenarios.speed import workers as speed_workers

    monkeypatch.setattr(ray_cluster, "local_gpus", lambda: gpus)
    monkeypatch.setenv("FEDPRIV_CPUS", "8")
    cfg = resolve_run_config({"scenario": "synthetic-mri"})
    gpu = {"client-resources": {"num-cpus": 2, "num-gpus": 0.25}}
    size, overrides = speed_workers.simulation_size(cfg, ["num-workers='auto'"], gpu)
    assert size == workers and overrides == [f"num-workers={workers}"]
    cpu_size, _ = speed_workers.simulation_size(cfg, [], {"client-resources": {"num-cpus": 2}})
    assert cpu_size == 4  # 8 CPUs over 2 per client, at most the 4 clients


def test_a_simulation_is_sized_for_the_cpus_it_may_use(monkeypatch):
    """``num-workers = auto`` counts ``$FEDPRIV_CPUS`` when set (pytest-xdist's workers set
    their share), else this process's CPU affinity; a bad value is refused in one line; a
    local Ray is sized to actors needing fewer CPUs than that (no idle worker per CPU)."""
    import argparse

    from fedpriv.scenarios.cli.simulation_runner import _fewer_actors_than_cpus
    from fedpriv.scenarios.config.registry import resolve_run_config
    from fedpriv.scenarios.speed import workers as speed_workers

    cfg = resolve_run_config({"scenario": "digits", "num-clients": 10})
    monkeypatch.setenv("FEDPRIV_CPUS", "3")
    assert speed_workers.available_cpus() == 3
    assert speed_workers.simulation_size(cfg, [], {})[0] == 3
    # a local Ray takes the machine's CPUs by default: sized down below that only
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert _fewer_actors_than_cpus(argparse.Namespace(num_supernodes=2), 1.0)
    assert not _fewer_actors_than_cpus(argparse.Namespace(num_supernodes=3), 1.0)
    assert not _fewer_actors_than_cpus(argparse.Namespace(num_supernodes=2), 2.0)
    monkeypatch.setenv("FEDPRIV_CPUS", "0")
    with pytest.raises(ValueError, match="FEDPRIV_CPUS = '0' is not allowed; expected a positive"):
        speed_workers.available_cpus()
    monkeypatch.delenv("FEDPRIV_CPUS")
    monkeypatch.setattr(speed_workers.os, "sched_getaffinity", lambda pid: {0, 5})
    assert speed_workers.available_cpus() == 2


def test_a_bad_cpu_count_is_refused_in_one_line_before_the_run(tmp_path):
    """``FEDPRIV_CPUS=abc``: ``fedpriv run`` exits 2 with one line naming it, nothing run."""
    import subprocess
    import sys

    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "fedpriv.scenarios.cli.main", "run", "--run-config",
         f"num-server-rounds=1 output-dir='{out}'"],
        env={**os.environ, "FEDPRIV_CPUS": "abc"}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert lines == [
        "fedpriv: config error: FEDPRIV_CPUS = 'abc' is not allowed; expected a positive integer"
    ]
    assert not (out / "rounds.jsonl").exists()
