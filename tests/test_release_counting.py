"""Each noising party counts its own releases: replays, restarts, budgets and
the one-client zone.

The real ClientApp (``fedpriv.scenarios.app.client_app.app``) gets real Flower ``Message`` /
``Context``
objects; the client's own config is its ``run_config`` (a fully resolved config) and its
``node_config`` (``partition-id`` and, where a test says so, its own ``client-state-dir``).
A "restart" is a new ``Context`` (empty ``context.state``) with the same node config. What the
curious server tries: the same round's message again and again, a rewound ``server-round``,
a new ``ifca-ledger-tag`` per message, a new ``client-state-dir`` in the message, a zone
sample of one client. The expected counts are counted here independently, from the replies.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from fedpriv.clients.keras_client import federated_data, initial_weights
from fedpriv.scenarios.app.client_app import app
from fedpriv.scenarios.app.wire_config import DIGEST_KEY, digest
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import data_spec, server_run, train_spec
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)

from fedpriv.ifca import HYPOTHESES_KEY, REPLY_KEY, num_params, unpack_hypotheses
from fedpriv.privacy import dpsgd
from fedpriv.privacy.accounting import laplace_leakage
from fedpriv.privacy.ownership import REFUSED_CODE
from fedpriv.privacy.releases import STATE_DIR_KEY, ReleaseCounter

SECRET = {"reproducible-noise": False}
ZONE_NODE = {
    "scenario": "hdp-digits", "noise-placement": "hdp", "num-clients": 4, "num-zones": 2,
    "clients-per-round": 4, "local-epochs": 1, "num-server-rounds": 3, **SECRET,
}  # fmt: skip
DPSGD = {
    "privacy": "dp-sgd", "num-server-rounds": 1, "local-epochs": 1, "num-clients": 4,
    "batch-size": 16, **SECRET,
}  # fmt: skip
IFCA = {"scenario": "gp-synthetic", "unaccounted-metrics": False, **SECRET}


def context(run_config: dict, partition: int = 0, node: dict | None = None, run: int = 1):
    return Context(run, 1, {"partition-id": partition, **(node or {})}, RecordDict(), run_config)


def message(run_config: dict, kind: str, sent: dict, content: dict, server_round: int) -> Message:
    """A server message: ``sent`` plus the round and the digest of the run's ``run_config``."""
    config = ConfigRecord({**sent, "server-round": server_round, DIGEST_KEY: digest(run_config)})
    return Message(RecordDict({**content, "config": config}), 1, kind)


def arrays_of(reply: Message, key: str = "arrays") -> list[np.ndarray]:
    return reply.content[key].to_numpy_ndarrays()


def same_arrays(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b)
    )


def refused(reply: Message) -> bool:
    return reply.has_error() and reply.error.code == REFUSED_CODE and not reply.has_content()


# --- zone nodes -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def zone():
    cfg = resolve_run_config(ZONE_NODE)
    return cfg, initial_weights(train_spec(cfg), federated_data(data_spec(cfg)))


def zone_message(cfg, weights, server_round, clients=(0, 1)) -> Message:
    sent = {"client-task": "zone-node", "privacy": "zonal", "zonal-clients": list(clients)}
    return message(cfg, MessageType.TRAIN, sent, {"arrays": ArrayRecord(weights)}, server_round)


def test_a_zone_node_answers_32_replays_of_a_round_with_one_release(zone, tmp_path):
    """The same round-1 message 32 times yields one release: every reply is the
    first one bit for bit (or refused), so their average has the noise of one release."""
    cfg, weights = zone
    node = {STATE_DIR_KEY: str(tmp_path / "zone-0")}
    replies = [app(zone_message(cfg, weights, 1), context(cfg, 0, node)) for _ in range(32)]
    first = replies[0]
    assert not first.has_error(), first.error
    served = [r for r in replies if not r.has_error()]
    assert all(refused(r) for r in replies if r.has_error())
    assert all(same_arrays(arrays_of(r), arrays_of(first)) for r in served)
    assert len({tuple(np.concatenate([a.ravel() for a in arrays_of(r)])) for r in served}) == 1
    assert ReleaseCounter(tmp_path / "zone-0", "zone-node", 0).load().releases == 1
    # the caching is what makes them equal: another node (own state dir) draws fresh noise
    other = app(zone_message(cfg, weights, 1), context(cfg, 0, {STATE_DIR_KEY: str(tmp_path)}))
    assert not other.has_error() and not same_arrays(arrays_of(other), arrays_of(first))


def test_a_zone_node_refuses_rewound_and_altered_rounds_and_counts_to_its_own_limit(zone, tmp_path):
    cfg, weights = zone
    node = {STATE_DIR_KEY: str(tmp_path / "z")}
    counter = ReleaseCounter(tmp_path / "z", "zone-node", 0)
    assert not app(zone_message(cfg, weights, 2), context(cfg, 0, node)).has_error()
    altered = [w + 1e-3 for w in weights]  # round 2 again with other arrays: no fresh noise
    assert refused(app(zone_message(cfg, altered, 2), context(cfg, 0, node)))
    assert refused(app(zone_message(cfg, weights, 1), context(cfg, 0, node)))  # rewound
    assert counter.load().releases == 1
    assert not app(zone_message(cfg, weights, 3), context(cfg, 0, node)).has_error()
    assert not app(zone_message(cfg, weights, 4), context(cfg, 0, node)).has_error()
    over = app(zone_message(cfg, weights, 5), context(cfg, 0, node))  # num-server-rounds = 3
    assert refused(over) and "limit of 3 releases" in over.error.reason
    assert counter.load().releases == 3
    own = context(cfg, 0, {**node, "num-server-rounds": 1})  # the node's own, smaller limit
    fresh = ReleaseCounter(tmp_path / "z1", "zone-node", 0)
    own.node_config[STATE_DIR_KEY] = str(tmp_path / "z1")
    assert not app(zone_message(cfg, weights, 1), own).has_error()
    assert refused(app(zone_message(cfg, weights, 2), own)) and fresh.load().releases == 1


def test_a_one_client_zone_is_refused(zone, tmp_path):
    """A one-client zone: the zone node refuses a sample of one client, whatever
    ``min-zone-clients`` the message says; an own value of 1 is refused before training."""
    cfg, weights = zone
    node = {STATE_DIR_KEY: str(tmp_path / "z")}
    reply = app(zone_message(cfg, weights, 1, clients=[1]), context(cfg, 0, node))
    assert refused(reply) and "min-zone-clients = 2" in reply.error.reason
    msg = zone_message(cfg, weights, 1, clients=[1])
    msg.content["config"]["min-zone-clients"] = 1  # the server's value is not the node's
    assert refused(app(msg, context(cfg, 0, node)))
    assert ReleaseCounter(tmp_path / "z", "zone-node", 0).load().releases == 0
    with pytest.raises(ConfigError, match="min-zone-clients = 1 is not allowed"):
        resolve_run_config({**ZONE_NODE, "min-zone-clients": 1})
    reply = app(zone_message(cfg, weights, 1), context(cfg, 0, {**node, "min-zone-clients": 1}))
    assert reply.has_error() and not reply.has_content()  # the node's own bad value
    assert "min-zone-clients = 1 is not allowed" in reply.error.reason


# --- IFCA ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ifca():
    from fedpriv.scenarios.ifca.feature import initial_hypotheses
    from fedpriv.strategies.ifca import hypotheses_record

    base = resolve_run_config(IFCA)
    run = server_run(base)
    record = hypotheses_record(initial_hypotheses(run, federated_data(run.spec.data)))
    nu = float(base["ifca-noise-multiplier"])
    cost = laplace_leakage(num_params(unpack_hypotheses(record)[0]), nu)
    return base, record, cost


def ifca_message(cfg, record, server_round, **sent) -> Message:
    return message(
        cfg, "train.ifca", {"client-task": "ifca", **sent}, {HYPOTHESES_KEY: record}, server_round
    )


def test_ifca_a_budget_of_two_releases_gives_two_whatever_the_server_sends(ifca, tmp_path):
    """IFCA: with a budget of 2 releases, a new ledger tag in every message (it
    selects nothing), a replayed round 2 naming a new state dir (refused: the dir is the
    node's), an identical replay of round 2 and a restart give 2 releases in all; the
    client's own ledger says 2 participations and 2·n/ν spent."""
    base, record, cost = ifca
    cfg = resolve_run_config({**IFCA, "leakage-budget": 2 * cost})
    node = {STATE_DIR_KEY: str(tmp_path / "own")}
    replies = [
        app(ifca_message(cfg, record, r, **{"ifca-ledger-tag": f"t{r}"}), context(cfg, 0, node))
        for r in range(1, 11)
    ]
    elsewhere = ifca_message(cfg, record, 2, **{STATE_DIR_KEY: str(tmp_path / "fresh")})
    reply = app(elsewhere, context(cfg, 0, node))
    assert refused(reply) and f"key={STATE_DIR_KEY} " in reply.error.reason
    replay = ifca_message(cfg, record, 2, **{"ifca-ledger-tag": "t2"})
    replies.append(app(replay, context(cfg, 0, node)))  # round 2 again, identical
    restarted = context(cfg, 0, node)  # a new Context: context.state is empty
    replies.append(app(ifca_message(cfg, record, 11), restarted))
    released = [r for r in replies if not r.has_error() and REPLY_KEY in r.content]
    vectors = [arrays_of(r, REPLY_KEY) for r in released]
    distinct = sum(not any(same_arrays(v, w) for w in vectors[:i]) for i, v in enumerate(vectors))
    assert distinct == 2  # an independent count of what left the client
    assert all(refused(r) or not r.content.keys() for r in replies if r not in released)
    ledger = ReleaseCounter(tmp_path / "own", "ifca", 0).load()
    assert ledger.releases == 2 and ledger.spent == pytest.approx(2 * cost)
    assert not (tmp_path / "fresh").exists()


def test_ifca_rewound_rounds_are_charged_and_an_identical_request_never_gets_fresh_noise(
    ifca, tmp_path
):
    """A rewound round with other hypotheses is a new release, charged; the identical
    request of the last release gets its cached vector; an identical request of an earlier
    release (no longer cached) is refused: no request ever gets fresh noise twice."""
    from fedpriv.strategies.ifca import hypotheses_record

    base, record, cost = ifca
    node = {STATE_DIR_KEY: str(tmp_path / "own")}
    altered = hypotheses_record([[a + 1e-3 for a in h] for h in unpack_hypotheses(record)])
    sent = [(1, record), (2, record), (2, record), (1, record), (1, altered), (3, record)]
    replies = [app(ifca_message(base, rec, r), context(base, 3, node)) for r, rec in sent]
    assert refused(replies[3]) and "already answered" in replies[3].error.reason
    answered = [r for r in replies if not r.has_error()]
    assert len(answered) == 5
    vectors = [arrays_of(r, REPLY_KEY) for r in answered]
    assert same_arrays(vectors[2], vectors[1])  # the identical repeat: no fresh noise
    distinct = sum(not any(same_arrays(v, w) for w in vectors[:i]) for i, v in enumerate(vectors))
    assert distinct == 4  # an independent count of the releases
    ledger = ReleaseCounter(tmp_path / "own", "ifca", 3).load()
    assert ledger.releases == distinct and ledger.spent == pytest.approx(distinct * cost)


# --- DP-SGD ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dp():
    cfg = resolve_run_config(DPSGD)
    return cfg, initial_weights(train_spec(cfg), federated_data(data_spec(cfg)))


def dpsgd_message(cfg, weights, server_round, **sent) -> Message:
    content = {"arrays": ArrayRecord(weights)}
    return message(cfg, MessageType.TRAIN, {"client-task": "dp-sgd", **sent}, content, server_round)


def expected_epsilon(cfg: dict, n: int, participations: int) -> float:
    return dpsgd.client_epsilon(
        num_examples=n,
        batch_size=int(cfg["batch-size"]),
        local_epochs=int(cfg["local-epochs"]),
        participations=participations,
        noise_multiplier=float(cfg["noise-multiplier"]),
        delta=float(cfg["dp-delta"]),
    ).epsilon


def test_dp_sgd_counts_every_release_across_restarts_and_replays(dp, tmp_path):
    """DP-SGD: 7 participations, 3 before a restart and 4 after it, where the
    restarted node first gets every message naming a new state dir (refused: the dir is the
    node's, nothing is charged or created), then a rewound round and an identical repeat: the
    client's count and ε are those of an independent count of the distinct releases."""
    cfg, weights = dp
    node = {STATE_DIR_KEY: str(tmp_path / "own")}
    first = context(cfg, 2, node)
    replies = [app(dpsgd_message(cfg, weights, r), first) for r in (1, 2, 3)]
    restarted = context(cfg, 2, node)
    fresh = {STATE_DIR_KEY: str(tmp_path / "fresh")}
    for r in (4, 5, 6, 7):
        reply = app(dpsgd_message(cfg, weights, r, **fresh), restarted)
        assert refused(reply) and f"key={STATE_DIR_KEY} " in reply.error.reason
    assert ReleaseCounter(tmp_path / "own", "dp-sgd", 2).load().releases == 3
    replies += [app(dpsgd_message(cfg, weights, r), restarted) for r in (4, 5, 6, 7)]
    replies.append(app(dpsgd_message(cfg, weights, 7), context(cfg, 2, node)))
    rewound = app(dpsgd_message(cfg, weights, 2), context(cfg, 2, node))  # round 2 again
    assert refused(rewound) and "already answered" in rewound.error.reason  # no fresh noise
    altered = [w + 1e-3 for w in weights]  # a rewound round 2 with other arrays: charged
    replies.append(app(dpsgd_message(cfg, altered, 2), context(cfg, 2, node)))
    assert all(not r.has_error() for r in replies), [r.error for r in replies if r.has_error()]
    vectors = [arrays_of(r) for r in replies]
    assert same_arrays(vectors[7], vectors[6])  # the identical repeat of round 7
    distinct = sum(not any(same_arrays(v, w) for w in vectors[:i]) for i, v in enumerate(vectors))
    assert distinct == 8
    n = int(replies[0].content["metrics"]["num-examples"])
    eps = [float(r.content["metrics"]["dp-sgd-epsilon"]) for r in replies]
    counts = [1, 2, 3, 4, 5, 6, 7, 7, 8]
    assert eps == pytest.approx([expected_epsilon(cfg, n, k) for k in counts])
    assert ReleaseCounter(tmp_path / "own", "dp-sgd", 2).load().releases == distinct
    assert not (tmp_path / "fresh").exists()


# --- the server: charge and checkpoint before the release ------------------------------------


class Killed(BaseException):
    """The process dies (nothing in the engine catches it)."""


class AnsweringGrid:
    """The federation of a test: every sampled client answers a train message with a seeded
    local step from the arrays it received, an evaluate message with its metrics; every
    global model the server sends out is recorded (``released``). ``kill_at``: the round whose
    evaluate messages (the new global model) leave the server just before the process dies."""

    def __init__(self, nodes: list[int], kill_at: int | None = None) -> None:
        self.nodes, self.kill_at = nodes, kill_at
        self.released: list[bytes] = []

    def get_node_ids(self):
        return list(self.nodes)

    def send_and_receive(self, messages, timeout=None):
        messages = list(messages)
        replies = []
        for msg in messages:
            if "arrays" in msg.content:
                arrays = msg.content["arrays"].to_numpy_ndarrays()
                self.released.append(b"".join(a.tobytes() for a in arrays))
            server_round = int(msg.content["config"]["server-round"])
            if msg.metadata.message_type == MessageType.EVALUATE:
                if server_round == self.kill_at:
                    raise Killed(f"killed after configure_evaluate of round {server_round}")
                metrics = {"num-examples": 10, "accuracy": 0.5, "loss": 1.0}
                content = RecordDict({"metrics": MetricRecord(metrics)})
            else:
                rng = np.random.default_rng([server_round, msg.metadata.dst_node_id])
                local = [(a + rng.normal(0, 0.5, a.shape)).astype(a.dtype) for a in arrays]
                content = RecordDict(
                    {"arrays": ArrayRecord(local), "metrics": MetricRecord({"num-examples": 10})}
                )
            replies.append(Message(content=content, reply_to=msg))
        return replies


def test_a_kill_between_configure_evaluate_and_the_checkpoint_never_releases_uncharged(tmp_path):
    """A global-DP run under ``max-epsilon`` killed after round 3's new model left
    the server (``configure_evaluate``) and before its round was recorded resumes without a
    second, fresh round 3: the reported ε equals an independent accountant over every distinct
    model that left the server, and never exceeds the budget."""
    from fedpriv.scenarios.app.engine import train_run
    from fedpriv.scenarios.config.features import CATALOG
    from fedpriv.scenarios.nodes.federation import PartitionGrid

    from fedpriv.privacy.accounting.rounds import GaussianRoundsAccountant

    base = {
        "privacy": "global-dp", "num-clients": 6, "clients-per-round": 3, "local-epochs": 1,
        "noise-multiplier": 1.0, "clipping-norm": 1.0, "num-server-rounds": 6, "seed": 3,
        "output-dir": str(tmp_path / "run"), **SECRET,
    }  # fmt: skip
    probe = resolve_run_config(base)

    def independent(releases: int) -> float:
        acc = GaussianRoundsAccountant(
            sampled=3, population=6, delta=float(probe["dp-delta"]),
            sampling=str(probe["client-sampling"]),
        )  # fmt: skip
        for _ in range(releases):
            acc.step(float(probe["noise-multiplier"]))
        return float(acc.report().epsilon) if releases else 0.0

    budget = (independent(3) + independent(4)) / 2  # 3 rounds fit, a 4th does not
    run = server_run(resolve_run_config({**base, "max-epsilon": budget}))
    data = federated_data(run.spec.data)
    nodes = {100 + p: p for p in range(6)}
    killed = AnsweringGrid(list(nodes), kill_at=3)
    with pytest.raises(Killed):
        train_run(PartitionGrid(killed, nodes), run, data, CATALOG, resumable=True)
    resumed = AnsweringGrid(list(nodes))
    outcome = train_run(PartitionGrid(resumed, nodes), run, data, CATALOG, resumable=True)
    initial = killed.released[0]
    left = {r for r in killed.released + resumed.released if r != initial}
    assert len(left) == 3  # rounds 1-3, round 3 once (its resend is the same model)
    reported = [r for r in outcome.rounds if r.get("round", 0) > 0]
    assert [r["round"] for r in reported] == [1, 2, 3]
    eps = float(reported[-1]["dp-epsilon"])
    assert reported[-1]["dp-noised-rounds"] == len(left)
    assert eps == pytest.approx(independent(len(left)), rel=1e-9)
    assert eps <= budget
    assert "max-epsilon" in outcome.summary.get("stopped", "")


# --- the ledger itself ---------------------------------------------------------------------


def test_the_state_dir_is_the_nodes_own():
    """The node's ledger folder and identity come from its own Context: its node config's
    folder, else the per-node default of its own data settings; never the run id, the Flower
    node id, the run's output-dir or the run config's folder (a server's)."""
    from fedpriv.scenarios.config.node_spec import node_ledger

    from fedpriv.privacy.releases import STATE_ROOT_ENV, node_dir

    def ledger(node: dict, run_config: dict, run: int, node_id: int = 1):
        ctx = Context(run, node_id, {"partition-id": 3, **node}, RecordDict(), run_config)
        return node_ledger(ctx)

    own = ledger({STATE_DIR_KEY: "/n"}, {STATE_DIR_KEY: "/r", "output-dir": "/o"}, 4)
    assert own.folder == Path("/n") and own.identity == 3
    root = Path(os.environ[STATE_ROOT_ENV])  # tests/conftest.py: one root per test
    digits = {"scenario": "digits", "seed": 1}
    default = ledger({}, {**digits, "output-dir": "/o"}, 4)
    assert default.folder.parent == root and default.folder.name.startswith("node-")
    same = [
        ledger({}, {**digits, "output-dir": "/p", STATE_DIR_KEY: "/r"}, 9, 7),
        ledger({STATE_DIR_KEY: "auto"}, digits, 5),
        # other spellings of the same resolved data: one node (its folder, its ledger)
        ledger({}, {**digits, "dataset": "digits", "partition": "iid", "seed": 1.0}, 6),
        ledger({}, {**digits, "num-clients": "auto", "dataset": "auto"}, 6),
    ]
    assert all(x == default for x in same)  # another run id, node id, output-dir: one ledger
    other_data = ledger({}, {**digits, "seed": 2}, 4)
    assert other_data.folder != default.folder  # other data: another node
    assert node_dir("/n", "k") == Path("/n") and node_dir("", "k") == root / "node-k"


def test_a_release_is_charged_before_it_is_computed(tmp_path):
    """A crash while the release is computed keeps the charge; the next request of that round
    is not the cached repeat (there is none): refused (zone) or charged again (DP-SGD, IFCA)."""
    from fedpriv.clients.releases import ReleaseRefused, guarded_release

    counter = ReleaseCounter(tmp_path, "zone-node", 1)

    def crash(ticket):
        assert counter.load().releases == ticket.releases == 1  # on disk before the work
        raise RuntimeError("killed while training")

    with pytest.raises(RuntimeError):
        guarded_release(counter, "s", 1, "d", crash)
    assert counter.load().releases == 1
    with pytest.raises(ReleaseRefused, match="already answered"):
        guarded_release(counter, "s", 1, "d", lambda t: RecordDict())
    charged = ReleaseCounter(tmp_path, "dp-sgd", 1)
    with pytest.raises(RuntimeError):
        guarded_release(charged, "s", 1, "d", crash, rewind="charge")
    with pytest.raises(ReleaseRefused, match="already answered"):  # charged, never answered
        guarded_release(charged, "s", 1, "d", lambda t: RecordDict(), rewind="charge")
    guarded_release(charged, "s", 1, "d2", lambda t: RecordDict(), rewind="charge")
    assert charged.load().releases == 2
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporary file


def test_a_reply_cache_lost_or_damaged_is_no_cache_and_never_fresh_noise(tmp_path):
    """A crash between the committed charge and the cached reply leaves no reply; a damaged
    blob is no reply either: the identical request is refused, not answered with fresh
    noise, and the charge stands."""
    import sqlite3

    from fedpriv.clients.releases import ReleaseRefused, guarded_release

    from fedpriv.privacy.ledger.store import DB_NAME

    counter = ReleaseCounter(tmp_path, "zone-node", 1)
    guarded_release(counter, "s", 1, "d", lambda t: RecordDict())
    assert guarded_release(counter, "s", 1, "d", lambda t: RecordDict()) is not None  # cached
    db = sqlite3.connect(tmp_path / DB_NAME, isolation_level=None)
    for damage in ("UPDATE replies SET reply = x'80059500'", "DELETE FROM replies"):
        db.execute(damage)
        assert counter.cached("s", 1, "d") is None
        with pytest.raises(ReleaseRefused, match="already answered"):
            guarded_release(counter, "s", 1, "d", lambda t: RecordDict())
    assert counter.load().releases == 1


def test_the_counter_is_monotonic_and_per_sequence(tmp_path):
    counter = ReleaseCounter(tmp_path, "zone-node", 0)
    kinds = [counter.begin("a", r, f"d{r}", max_releases=2).kind for r in (1, 2, 3)] + [
        counter.begin("b", 1, "d1", max_releases=2).kind
    ]
    assert kinds == ["fresh", "fresh", "refused", "fresh"]
    ledger = counter.load()
    assert ledger.releases == 3 and ledger.sequences["a"]["count"] == 2
    with pytest.raises(ValueError, match="rewind = 'sometimes' is not allowed"):
        counter.begin("a", 4, "d4", rewind="sometimes")
