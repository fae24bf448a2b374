"""Laplace-sanitizing IFCA (GP Algorithms 1-2, SPEC §3.4): what a client sends, the k-means
step, the leakage ledger and the decline path, the strategy's round logic. No Ray: the
client handlers are called directly (an in-process grid for the loop test)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from fedpriv.clients.ifca_client import (
    evaluate_handler,
    read_ledger,
    train_handler,
)
from fedpriv.clients.keras_client import federated_data
from fedpriv.scenarios.app.client_app import with_config
from fedpriv.scenarios.app.client_tasks import ifca_evaluate_handler, ifca_train_handler, train_ifca
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import data_spec, node_call, run_spec, server_run
from fedpriv.scenarios.ifca.feature import config_record, parse_sweep
from fedpriv.scenarios.ifca.outputs import sweep_table
from fedpriv.strategies.ifca import (
    TRAIN_TYPE,
    LaplaceIFCA,
    hypotheses_from_record,
    hypotheses_record,
)
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from fedpriv.ifca import (
    ACTION,
    CONFIG_KEY,
    HYPOTHESES_KEY,
    LEDGER_KEY,
    REPLY_KEY,
    EarlyStopping,
    choose_hypothesis,
    cluster_means,
    flatten,
    kmeans_step,
    match_hypotheses,
    nearest_centroid,
    pack_hypotheses,
    unflatten,
    unpack_hypotheses,
)
from fedpriv.privacy.accounting import laplace_leakage
from fedpriv.privacy.releases import ReleaseCounter

HYPS = [[np.array([[5.5], [5.0]], np.float32)], [np.array([[3.0], [-4.0]], np.float32)]]


def gp_cfg(**over) -> dict:
    cfg = resolve_run_config(
        {
            "scenario": "gp-synthetic",
            "num-clients": 10,
            "validation-clients": 0,
            "users-per-round": 5,
            **over,
        }
    )
    return {**cfg, "server-round": 1}


def node_context(partition: int) -> Context:
    """A client node of run 1 (its ledger: the default per-run state directory)."""
    return Context(
        run_id=1, node_id=100 + partition, node_config={"partition-id": partition},
        state=RecordDict(), run_config={},
    )  # fmt: skip


def ifca_round(cfg: dict, partition: int, context: Context | None) -> RecordDict:
    """:func:`ifca_train` of the node spec of ``cfg`` in its round, with the node's own state
    directory as the ClientApp resolves it
    (:func:`fedpriv.scenarios.app.client_tasks.train_ifca`)."""
    return train_ifca(train_message(cfg), node_call(cfg), partition, context)


def train_message(cfg: dict, hyps=HYPS, node: int = 1) -> Message:
    content = RecordDict({HYPOTHESES_KEY: hypotheses_record(hyps), CONFIG_KEY: ConfigRecord(cfg)})
    return Message(content, node, TRAIN_TYPE)


def plain_sgd_step(theta: np.ndarray, x: np.ndarray, y: np.ndarray, lr: float) -> np.ndarray:
    """One full-batch SGD step on the MSE (B = 10 >= 8 local samples, E = 1), in numpy."""
    x, y = x.astype(np.float64), y.astype(np.float64)
    return theta - lr * 2.0 / len(x) * x.T @ (x @ theta - y)


# --- what the client sends ------------------------------------------------------------------


def test_client_reply_is_exactly_one_array_record_with_the_parameter_vector():
    cfg = gp_cfg()
    node = node_context(0)
    content = ifca_round(cfg, 0, node)
    assert list(content.array_records) == [REPLY_KEY]
    assert len(content.metric_records) == 0 and len(content.config_records) == 0
    arrays = content.array_records[REPLY_KEY].to_numpy_ndarrays()
    assert [a.shape for a in arrays] == [(2, 1)]  # the full vector, n = 2, nothing else
    released = flatten(arrays)
    assert np.all(np.isfinite(released))
    assert not any(np.allclose(released, flatten(h)) for h in HYPS)  # trained + noised
    assert read_ledger(node.state, LEDGER_KEY) == {
        "spent": 0.4, "participations": 1, "declined": 0
    }  # fmt: skip


def test_nu_zero_reply_is_local_sgd_from_the_best_hypothesis():
    """Independent check of argmin choice + LocalUpdate: numpy MSE and one SGD step."""
    cfg = gp_cfg(**{"ifca-noise-multiplier": 0.0})
    client = federated_data(data_spec(cfg)).clients[3]
    x, y = client.x_train.astype(np.float64), client.y_train.astype(np.float64)
    thetas = [flatten(h) for h in HYPS]
    best = int(np.argmin([np.mean((x @ t - y) ** 2) for t in thetas]))
    expected = plain_sgd_step(thetas[best], x, y, cfg["learning-rate"])
    content = ifca_round(cfg, 3, node_context(3))
    got = flatten(content.array_records[REPLY_KEY].to_numpy_ndarrays())
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_noise_norm_is_nu_times_delta_norm_on_average():
    """E‖ρ‖ = n/ε = ν‖δ‖ (GP §3.2) with δ measured from the CHOSEN hypothesis."""
    cfg0 = gp_cfg(**{"ifca-noise-multiplier": 0.0})
    client = federated_data(data_spec(cfg0)).clients[5]
    x, y = client.x_train, client.y_train
    thetas = [flatten(h) for h in HYPS]
    best = int(np.argmin([np.mean((x @ t - y) ** 2) for t in thetas]))
    local = plain_sgd_step(thetas[best], x, y, cfg0["learning-rate"])
    delta = np.linalg.norm(local - thetas[best])
    ratios = []
    for r in range(1, 25):
        cfg = {**gp_cfg(), "server-round": r}
        got = flatten(ifca_round(cfg, 5, None).array_records[REPLY_KEY].to_numpy_ndarrays())
        ratios.append(np.linalg.norm(got - local) / delta)
    # ‖ρ‖/‖δ‖ ~ Gamma(2, ν/2): mean ν = 5, std 5/√2/√24 ≈ 0.72 for the mean of 24
    assert 5.0 - 2.2 < np.mean(ratios) < 5.0 + 2.2


def test_handler_keeps_a_copy_of_its_own_ledger_in_context_state():
    """Three rounds are three releases; the same round-3 message again is the cached reply
    (a replay is answered once, not charged again)."""
    context = Context(
        run_id=1, node_id=7, node_config={"partition-id": 2}, state=RecordDict(), run_config={}
    )
    replies = []
    for r in (1, 2, 3, 3):
        cfg = {**gp_cfg(), "server-round": r}
        msg = train_message(cfg, node=7)
        replies.append(train_handler(msg, run_spec(cfg), context, server_round=r))
        assert list(replies[-1].content.array_records) == [REPLY_KEY]
    last, again = (flatten(r.content[REPLY_KEY].to_numpy_ndarrays()) for r in replies[2:])
    np.testing.assert_array_equal(again, last)
    ledger = read_ledger(context.state, LEDGER_KEY)
    assert ledger["participations"] == 3 and ledger["spent"] == pytest.approx(1.2, abs=1e-12)


def test_leakage_per_participation_is_n_over_nu():
    assert laplace_leakage(2, 5.0) == 0.4
    node = node_context(1)
    cfg = gp_cfg()
    ifca_round(cfg, 1, node)
    assert read_ledger(node.state, LEDGER_KEY)["spent"] == 0.4


def test_budget_one_allows_two_participations_then_declines_with_empty_content():
    cfg = gp_cfg(**{"leakage-budget": 1.0})
    node = node_context(4)
    replies = [ifca_round({**cfg, "server-round": r}, 4, node) for r in range(1, 6)]
    sent = [REPLY_KEY in c.array_records for c in replies]
    assert sent == [True, True, False, False, False]
    for declined in replies[2:]:  # a decline carries nothing at all
        assert not declined.array_records and not declined.metric_records
        assert not declined.config_records
    assert read_ledger(node.state, LEDGER_KEY) == {
        "spent": 0.8, "participations": 2, "declined": 3
    }  # fmt: skip


def test_the_plain_train_task_keeps_the_same_ledger():
    """Client task ``ifca`` on a plain train message: the node's own ledger and budget too."""
    cfg = gp_cfg(**{"leakage-budget": 0.4})
    node = node_context(0)
    first = train_ifca(train_message(cfg), node_call(cfg), 0, node)
    cfg2 = {**cfg, "server-round": 2}
    second = train_ifca(train_message(cfg2), node_call(cfg2), 0, node)
    assert list(first.array_records) == [REPLY_KEY] and not second.array_records
    assert read_ledger(node.state, LEDGER_KEY) == {
        "spent": 0.4, "participations": 1, "declined": 1
    }  # fmt: skip


def test_evaluate_reply_reports_the_best_hypothesis():
    cfg = {**gp_cfg(), "ifca-eval-split": "all"}
    data = federated_data(data_spec(cfg))
    cluster = data.info["cluster_of_client"][0]
    hyps = [[np.array([[5.0], [6.0]], np.float32)], [np.array([[4.0], [-4.5]], np.float32)]]
    context = Context(
        run_id=1, node_id=3, node_config={"partition-id": 0}, state=RecordDict(), run_config={}
    )
    msg = train_message(cfg, hyps, node=3)
    metrics = evaluate_handler(msg, run_spec(cfg), context, eval_split="all").content["metrics"]
    assert metrics["hypothesis"] == cluster  # θ*_cluster fits its own data best
    assert metrics["rmse"] == pytest.approx(math.sqrt(metrics["loss"]))
    assert 0.2 < metrics["rmse"] < 1.0  # residual u ~ U[0, 1]: RMSE ≈ sqrt(1/3)


# --- hypothesis encoding and the client's choice -----------------------------------------------


def test_hypotheses_roundtrip_one_array_record_keys_prefixed_by_index():
    hyps = [[np.ones((2, 3), np.float32) * j, np.arange(3, dtype=np.float32) + j] for j in range(3)]
    record = hypotheses_record(hyps)
    assert list(record) == ["0/0", "0/1", "1/0", "1/1", "2/0", "2/1"]
    back = hypotheses_from_record(record)
    for a, b in zip(hyps, back):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    assert unpack_hypotheses(pack_hypotheses(hyps))[2][1].tolist() == [2.0, 3.0, 4.0]
    with pytest.raises(ValueError):
        unpack_hypotheses({"0/0": np.zeros(1), "2/0": np.zeros(1)})


def test_flatten_unflatten_and_choice():
    template = [np.zeros((2, 2), np.float32), np.zeros(3, np.float32)]
    v = np.arange(7.0)
    back = unflatten(v, template)
    assert back[0].dtype == np.float32 and back[1].tolist() == [4.0, 5.0, 6.0]
    np.testing.assert_array_equal(flatten(back), v)
    assert choose_hypothesis([3.0, 1.0, 1.0]) == 1  # tie -> lowest index
    assert choose_hypothesis([math.nan, 2.0]) == 1  # NaN never wins
    with pytest.raises(ValueError):
        unflatten(np.arange(6.0), template)


# --- k-means step (server) ------------------------------------------------------------------------


def test_kmeans_uniform_means_match_sklearn_when_no_cluster_is_empty():
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(0)
    points = np.concatenate([rng.normal(0, 1, (6, 3)), rng.normal(8, 1, (3, 3))])
    init = np.array([[1.0, 1.0, 1.0], [6.0, 6.0, 6.0]])
    step = kmeans_step(points, init)
    ref = KMeans(2, init=init, n_init=1, tol=0.0).fit(points)
    np.testing.assert_array_equal(step.labels, ref.labels_)
    assert step.sizes == [6, 3]
    np.testing.assert_allclose(step.centroids[0], points[:6].mean(axis=0))  # uniform, unweighted
    np.testing.assert_allclose(step.centroids[1], points[6:].mean(axis=0))


def test_empty_cluster_keeps_its_hypothesis():
    points = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    init = np.array([[0.5, 0.5], [100.0, -100.0], [-50.0, 50.0]])
    step = kmeans_step(points, init)
    assert step.sizes == [3, 0, 0] and step.empty == [1, 2]
    np.testing.assert_array_equal(step.centroids[1:], init[1:])  # kept exactly
    np.testing.assert_allclose(step.centroids[0], points.mean(axis=0))
    none = kmeans_step(np.zeros((0, 2)), init)  # everyone declined: nothing moves
    np.testing.assert_array_equal(none.centroids, init)


def test_kept_cluster_rejoins_when_a_point_becomes_nearer():
    """A Lloyd fixed point over all k: the kept centroid -6.9 wins the point 0 once the
    other centroid moved to 7 (scikit-learn alone would relocate, not keep)."""
    points = np.array([[0.0], [10.0], [11.0]])
    step = kmeans_step(points, np.array([[6.0], [-6.9]]))
    assert step.labels.tolist() == [1, 0, 0]
    np.testing.assert_allclose(step.centroids, [[10.5], [0.0]])
    assert step.passes >= 2


def textbook_lloyd(points: np.ndarray, init: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Independent naive Lloyd: loops over points and clusters; empty clusters keep θ_j."""
    cents = init.astype(np.float64).copy()
    labels = None
    for _ in range(1000):
        new = np.array([int(np.argmin([np.sum((p - c) ** 2) for c in cents])) for p in points])
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        for j in range(len(cents)):
            if np.any(labels == j):
                cents[j] = points[labels == j].mean(axis=0)
    return labels, cents


def test_kmeans_is_textbook_lloyd_including_initially_empty_clusters():
    """Clusters that start empty take part (the old step left them out and reached
    another fixed point in ~1% of small cases)."""
    rng = np.random.default_rng(11)
    started_empty = 0
    for _ in range(400):
        k, u = int(rng.integers(2, 5)), int(rng.integers(2, 9))
        points = rng.normal(0, 3, (u, 2))
        init = rng.normal(0, 6, (k, 2))
        started_empty += len(set(range(k)) - set(nearest_centroid(points, init).tolist())) > 0
        labels, cents = textbook_lloyd(points, init)
        step = kmeans_step(points, init)
        np.testing.assert_array_equal(step.labels, labels)
        np.testing.assert_allclose(step.centroids, cents, atol=1e-12)
        np.testing.assert_array_equal(nearest_centroid(points, step.centroids), step.labels)
    assert started_empty > 50  # the initially empty case is well covered


def test_cluster_means_rejects_bad_labels():
    with pytest.raises(ValueError):
        cluster_means(np.zeros((2, 2)), np.array([0, 3]), np.zeros((2, 2)))


def test_k_equal_one_is_the_uniform_mean():
    points = np.array([[1.0, 2.0], [3.0, 6.0], [5.0, 1.0]])
    step = kmeans_step(points, np.array([[100.0, 100.0]]))
    np.testing.assert_allclose(step.centroids[0], [3.0, 3.0])


# --- early stopping, matching ---------------------------------------------------------------------


def test_early_stopping_patience_and_best_round():
    stop = EarlyStopping(3)
    flags = [stop.update(r, v) for r, v in enumerate([5.0, 4.0, 4.5, 4.2, math.nan])]
    assert flags == [True, True, False, False, False]
    assert stop.best_round == 1 and stop.should_stop
    with pytest.raises(ValueError):
        EarlyStopping(0)


def test_match_hypotheses_up_to_permutation():
    star = np.array([[5.0, 6.0], [4.0, -4.5]])
    out = match_hypotheses(np.array([[4.1, -4.4], [5.0, 6.3]]), star)
    assert out["assignment"] == [1, 0]
    np.testing.assert_allclose(out["distances"], [0.3, math.hypot(0.1, 0.1)])
    single = match_hypotheses(np.array([[4.5, 0.75]]), star)
    assert single["distances"] == [None, None] and len(single["nearest"]) == 2


# --- the server strategy --------------------------------------------------------------------------


def make_strategy(nu: float = 5.0, budget: float = 0.0, k: int = 2, users: int = 4):
    return LaplaceIFCA(
        num_hypotheses=k,
        users_per_round=users,
        train_partitions=range(6),
        validation_partitions=[],
        node_of_partition={p: 100 + p for p in range(6)},
        noise_multiplier=nu,
        leakage_budget=budget,
        patience=3,
        rng=np.random.default_rng(0),
    )


def reply(to: Message, vector=None) -> Message:
    """A client's reply to ``to``: θ̂ as the model's layer list, or a decline (empty)."""
    if vector is None:
        return Message(RecordDict(), reply_to=to)
    arrays = ArrayRecord([np.asarray(vector, np.float32).reshape(2, 1)])
    return Message(RecordDict({REPLY_KEY: arrays}), reply_to=to)


def test_strategy_round_kmeans_ledger_declines_and_invalid():
    strategy = make_strategy(users=5)
    arrays = hypotheses_record(HYPS)
    messages = list(strategy.configure_train(1, arrays, ConfigRecord({"seed": 0}), None))
    assert len(messages) == 5 and all(m.metadata.message_type == "train.ifca" for m in messages)
    for m in messages:  # every hypothesis goes to every sampled user, in one ArrayRecord
        assert list(m.content.array_records) == [HYPOTHESES_KEY]
        assert len(m.content[HYPOTHESES_KEY]) == 2
    # two near θ_0, a decline, a NaN vector, and a reply that also leaks a sample count
    vectors = [[5.0, 6.0], [6.0, 5.0], None, [np.nan, 1.0], [5.0, 5.0]]
    replies = [reply(m, v) for m, v in zip(messages, vectors)]
    replies[4].content["metrics"] = MetricRecord({"num-examples": 8})
    new, metrics = strategy.aggregate_train(1, replies)
    parts = [m.metadata.dst_node_id - 100 for m in messages]
    report = strategy.current
    assert report["participants"] == parts[:2] and report["declined"] == [parts[2]]
    assert sorted(report["invalid"]) == sorted([str(parts[3]), str(parts[4])])
    assert report["cluster_sizes"] == [2, 0]
    hyps = hypotheses_from_record(new)
    np.testing.assert_allclose(flatten(hyps[0]), [5.5, 5.5])  # uniform mean
    np.testing.assert_array_equal(flatten(hyps[1]), flatten(HYPS[1]))  # empty: kept
    assert {p: strategy.ledger.spent[p] for p in parts[:2]} == {parts[0]: 0.4, parts[1]: 0.4}
    assert metrics["participants"] == 2 and metrics["declined"] == 1


class LocalGrid:
    """In-process stand-in for the simulation grid: calls the ClientApp handlers directly
    (config resolved as the ClientApp does), one persistent ``context.state`` per node (what
    Flower keeps between rounds). ``run_config``: what every node's ``context.run_config``
    holds, the run's own (each node resolves its own spec from it and refuses a
    message whose privacy keys differ; a node with an empty run config is a ``digits`` node).
    Each grid is a run of its own (its own run id); ``state_dir``: the nodes' own
    ``client-state-dir`` (their ledgers survive a restart there; without it, the ledgers are in
    the per-node default folder of this test's ``$FEDPRIV_STATE_ROOT``: lifetime ledgers, the
    same for every grid of the test). ``released``: partition -> the vectors it sent
    (bytes)."""

    runs = itertools.count(1)

    def __init__(self, partitions, run_config, state_dir=None):
        self.states = {100 + p: RecordDict() for p in partitions}
        self.run_config = dict(run_config)
        self.run_id = next(LocalGrid.runs)
        self.own = {"client-state-dir": str(state_dir)} if state_dir else {}
        self.released: dict[int, list[bytes]] = {}

    def partition_of(self, message: Message) -> int:
        """The partition a reply comes from (its sender node)."""
        return message.metadata.src_node_id - 100

    def send_and_receive(self, messages, timeout=None):
        out = []
        for m in messages:
            node = m.metadata.dst_node_id
            ctx = Context(
                run_id=self.run_id,
                node_id=node,
                node_config={"partition-id": node - 100, **self.own},
                state=self.states[node],
                run_config=self.run_config,
            )
            train = m.metadata.message_type == TRAIN_TYPE  # registered as the ClientApp does
            kind, handler = (
                ("train", ifca_train_handler) if train else ("evaluate", ifca_evaluate_handler)
            )
            reply = with_config(handler, kind, ACTION)(m, ctx)
            if not reply.has_error() and REPLY_KEY in reply.content:
                vector = flatten(reply.content[REPLY_KEY].to_numpy_ndarrays()).tobytes()
                self.released.setdefault(node - 100, []).append(vector)
            out.append(reply)
        return out


def test_budget_loop_no_client_participates_more_than_twice(tmp_path):
    """The nodes hold the run's config (their own leakage budget 1.0) and the server sends the
    whole config it resolved from it; each node's ledger is in its own run's folder."""
    run_config = gp_run_config(tmp_path, **{"leakage-budget": 1.0, **NO_OPT_IN})
    cfg = resolve_run_config(run_config)
    strategy = make_strategy(budget=1.0)
    grid = LocalGrid(range(6), run_config)
    config = config_record(cfg, "")  # what the IFCA runner sends (no wire base: all of cfg)
    result = strategy.start(grid, hypotheses_record(HYPS), num_rounds=8, train_config=config)
    assert max(strategy.participations.values()) <= 2
    assert all(v <= 1.0 + 1e-12 for v in strategy.ledger.spent.values())
    for node, state in grid.states.items():  # the clients' own ledgers agree with the mirror
        own = read_ledger(state, LEDGER_KEY)
        assert own["participations"] == strategy.participations.get(node - 100, 0) <= 2
        assert own["spent"] == pytest.approx(0.4 * own["participations"])
    # 6 users x 2 participations = 12 <= 4 per round: the run ends by exhausting the budget
    assert strategy.stopped == "leakage-budget" and result.arrays is not None


def gp_run_config(tmp_path, **over) -> dict:
    """What ``context.run_config`` holds (pyproject's config + the overrides) for a small
    gp-synthetic run."""
    from fedpriv.scenarios.cli.launch import app_config

    over = {"num-clients": 6, "validation-clients": 0, "users-per-round": 4, **over}
    return app_config({"scenario": "gp-synthetic", "output-dir": str(tmp_path), **over})


# A server without a wire base (library use) sends the whole config it resolved, the
# scenario's opt-ins included (gp-synthetic: unaccounted-metrics = true for GP's final
# evaluation). A node resolves "auto" to false and refuses that message, so the
# runs below that send the whole config set the opt-in in the run config both sides hold.
NO_OPT_IN = {"unaccounted-metrics": False}


@pytest.fixture()
def wire_base():
    """``fedpriv.scenarios.app.wire_config``'s server base, cleared afterwards (library default:
    none)."""
    from fedpriv.scenarios.app import wire_config

    yield wire_config.set_base
    wire_config._BASE.clear()
    wire_config._SEEN.clear()


def test_same_seed_same_rounds_in_process(tmp_path, wire_base):
    """SPEC §7: seeded sampling, training and noise -> identical released vectors; the
    second run's messages carry only the wire config: the same rounds."""
    # compared exactly: seeded noise, an explicit opt-in (gp-synthetic is secret)
    run_config = gp_run_config(tmp_path, **{"reproducible-noise": True, **NO_OPT_IN})
    cfg = resolve_run_config(run_config)
    runs = []
    for wire in (False, True):
        if wire:
            wire_base(run_config)
        records = []
        strategy = make_strategy()
        strategy.on_round_end = records.append
        result = strategy.start(  # two federations: each its own nodes and ledgers
            LocalGrid(range(6), run_config, tmp_path / f"nodes-{wire}"),
            hypotheses_record(HYPS),
            num_rounds=3,
            train_config=config_record(cfg, ""),
        )
        runs.append((flatten(hypotheses_from_record(result.arrays)[0]), records))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert [r.get("released") for r in runs[0][1]] == [r.get("released") for r in runs[1][1]]
    assert len(runs[0][1][1]["released"]) == 4


def test_ifca_messages_carry_only_what_differs_from_run_config(tmp_path, wire_base):
    """An IFCA message's ConfigRecord holds the keys whose resolved value differs
    from the node's ``run_config`` (here: the scenario's values of pyproject's ``"auto"``
    keys), the digest, the round and the IFCA keys, not the whole resolved config (88 keys
    before); the ClientApp rebuilds the config the old code sent, with the node's own values
    for what it owns."""
    run_config = gp_run_config(tmp_path, seed=3)
    cfg = resolve_run_config(run_config)
    whole = {**config_record(cfg, "2"), "server-round": 1}  # no base: what was sent before
    wire_base(run_config)
    arrays = hypotheses_record(HYPS)
    msg = make_strategy().make_messages([0], arrays, config_record(cfg, "2"), TRAIN_TYPE, 1, {})[0]
    sent = dict(msg.content[CONFIG_KEY])
    ifca = {"config-digest", "server-round", "client-task", "ifca-ledger-tag"}
    assert ifca <= set(sent) and sent["client-task"] == "ifca" and sent["ifca-ledger-tag"] == "2"
    assert {"dataset", "model", "learning-rate", "ifca-noise-multiplier"} <= set(sent)  # "auto"
    same = {"scenario", "seed", "output-dir", "num-clients", "validation-clients"}
    assert not same & set(sent) and "users-per-round" not in sent  # as in run_config
    assert len(sent) <= len(whole) - 35
    seen = []
    context = Context(
        run_id=1, node_id=100, node_config={"partition-id": 0}, state=RecordDict(),
        run_config=run_config,
    )  # fmt: skip
    handler = with_config(
        lambda m, c, ctx: seen.append(c.record) or ifca_train_handler(m, c, ctx), "train", ACTION
    )
    assert list(handler(msg, context).content.array_records) == [REPLY_KEY]
    # the node runs the old config except what it owns: its opt-in, which the run
    # config leaves at "auto" (the scenario's true is not sent: the node's secure false), and
    # its evaluation split (partition 0 trains: "test")
    assert run_config["unaccounted-metrics"] == "auto" and whole["unaccounted-metrics"] is True
    assert "unaccounted-metrics" not in sent
    assert seen == [{**whole, "unaccounted-metrics": False, "ifca-eval-split": "test"}]


# --- config ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "over,key",
    [
        ({"users-per-round": 200}, "users-per-round"),
        ({"validation-clients": 120}, "validation-clients"),
        ({"leakage-budget": 1.0, "ifca-noise-multiplier": 0.0}, "leakage-budget"),
        ({"ifca-sweep": "num-clients=4"}, "ifca-sweep"),
        ({"ifca-sweep": "seed"}, "ifca-sweep"),
        ({"ifca-sweep": "num-hypotheses=0"}, "num-hypotheses"),
        ({"ifca-noise-multiplier": -1.0}, "ifca-noise-multiplier"),
        ({"patience": 0}, "patience"),
    ],
)
def test_bad_ifca_config_is_one_line_error(over, key):
    with pytest.raises(ConfigError) as info:
        resolve_run_config({"scenario": "gp-synthetic", **over})
    assert f"{key} = " in str(info.value) and "\n" not in str(info.value)


def test_sweep_parsing_and_table():
    assert parse_sweep("ifca-noise-multiplier=0.1,seed=2;num-hypotheses=1, model='linear'") == [
        {"ifca-noise-multiplier": 0.1, "seed": 2},
        {"num-hypotheses": 1, "model": "linear"},
    ]
    summaries = [
        {
            "final": {"accuracy_weighted": acc, "objective": 0.3},
            "best_round": 4,
            "leakage": {"per_participation": 4810.0, "stats": {"median": 9620.0, "max": 2e4}},
        }
        for acc in (0.9, 0.8)
    ]
    table = sweep_table([({"ifca-noise-multiplier": 1, "seed": s}, summaries[s]) for s in (0, 1)])
    assert "| ifca-noise-multiplier=1 | 2 | 0.850 ± 0.050 | 0.300 | 4810 | 9620 | 2e+04 |" in table


def test_sweep_table_regression_has_no_accuracy_column_value():
    """GP's synthetic data reports RMSE only: the accuracy cell is '-', not 'nan ± nan'."""
    summaries = [
        {
            "final": {"objective": rmse, "rmse": rmse},
            "best_round": 9,
            "leakage": {"per_participation": None, "stats": {}},
        }
        for rmse in (4.0, 5.0)
    ]
    table = sweep_table([({"num-hypotheses": 1, "seed": s}, summaries[s]) for s in (0, 1)])
    assert "| num-hypotheses=1 | 2 | - | 4.500 | - | - | - | 9, 9 |" in table
    assert "nan" not in table


def test_plots_write_pngs(tmp_path):
    from fedpriv.reporting.ifca_plots import (
        plot_leakage_histogram,
        plot_leakage_per_cluster,
        plot_params_scatter,
        plot_validation_loss,
    )

    rng = np.random.default_rng(1)
    paths = [
        plot_leakage_histogram([0.0, 0.4, 0.8, 0.4], tmp_path / "h.png", per_participation=0.4),
        plot_params_scatter(
            [(1, rng.normal(size=(7, 2)))],
            [(0, rng.normal(size=(2, 2))), (1, rng.normal(size=(2, 2)))],
            tmp_path / "s.png",
            theta_star=np.array([[5, 6], [4, -4.5]]),
        ),
        plot_leakage_per_cluster([1, 2], [[0.4, 0.0], [0.8, 0.4]], tmp_path / "c.png"),
        plot_validation_loss({"rmse": ([0, 1], [3.0, 1.0])}, tmp_path / "v.png", best_round=1),
    ]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_killed_run_resumes_from_its_checkpoint_and_the_clients_own_ledgers(tmp_path):
    """A run checkpointed after round 2 and killed after its clients
    answered round 3 continues in a new strategy and a new run (new ``context.state``, new run
    id; the nodes keep their own ``client-state-dir``). Round 3 runs again: every client
    that released a vector in it before the kill answers the identical request with that
    vector (cached, not charged again): each client's own ledger counts exactly the distinct
    vectors it released (an independent count over both runs), never more than the budget
    allows, and nothing is lost by the restart."""
    from fedpriv.scenarios.app.engine import RoundState
    from fedpriv.scenarios.app.resume import checkpoint_hook, keyed_arrays, load_resumable, restore

    rounds, state_dir = 6, tmp_path / "client-state"  # the nodes' own folder (node config)
    (tmp_path / "run").mkdir()

    run_config = gp_run_config(tmp_path / "run", **{"leakage-budget": 1.0, **NO_OPT_IN})

    def run(first=1, last=rounds, checkpoint_until=0, strategy=None):
        cfg = resolve_run_config(run_config)
        config = config_record(cfg, "")
        strategy = strategy or make_strategy(budget=1.0)
        grid = LocalGrid(range(6), run_config, state_dir)
        save = checkpoint_hook(server_run({**cfg, "num-server-rounds": rounds}))

        def hook(r, arrays):
            if r <= checkpoint_until:
                save(RoundState(r, arrays, {}, strategy))

        initial = hypotheses_record(HYPS)
        run_ = server_run({**cfg, "num-server-rounds": rounds})
        checkpoint = load_resumable(run_) if first > 1 else None
        if checkpoint is not None:
            restore(strategy, checkpoint)
            initial = keyed_arrays(checkpoint, initial)
        strategy.start(
            grid, initial, num_rounds=last, train_config=config, first_round=first,
            after_round=(hook,),
        )  # fmt: skip
        return strategy, grid, cfg

    _, killed, cfg = run(last=3, checkpoint_until=2)  # round 3 answered, not checkpointed
    assert load_resumable(server_run({**cfg, "num-server-rounds": rounds}))["round"] == 2
    resumed, grid, _ = run(first=3, strategy=make_strategy(budget=1.0))
    for p in range(6):
        sent = killed.released.get(p, []) + grid.released.get(p, [])
        own = ReleaseCounter(state_dir, "ifca", p).load()
        # round 3 sent again: the identical request gets the cached vector, not charged
        assert own.releases == len(set(sent)) <= 2 and len(sent) >= own.releases
        assert own.spent == pytest.approx(0.4 * own.releases)
        assert read_ledger(grid.states[100 + p], LEDGER_KEY)["participations"] == own.releases
    assert sum(len(v) for v in killed.released.values()) > 0  # the kill did cost releases
    mirror = resumed.ledger.participations  # the server's mirror, restored from round 2
    assert sum(mirror.values()) <= sum(len(v) for v in killed.released.values()) + sum(
        len(v) for v in grid.released.values()
    )


def test_unwritable_state_dir_refuses_the_release(tmp_path):
    """A client that cannot write its ledger does not release: charge before release."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cfg = gp_cfg()
    ctx = Context(
        run_id=1, node_id=1, node_config={"partition-id": 0, "client-state-dir": str(blocker)},
        state=RecordDict(), run_config={},
    )  # fmt: skip
    from fedpriv.privacy.releases import StateFolderError

    with pytest.raises(StateFolderError, match="is not a folder"):
        ifca_round(cfg, 0, ctx)
    assert read_ledger(ctx.state, LEDGER_KEY)["participations"] == 0


@pytest.mark.parametrize("node_opt_in", [False, True])
def test_final_evaluation_counts_the_users_whose_own_opt_in_is_off(
    tmp_path, wire_base, node_opt_in
):
    """gp-synthetic opts in to GP's final test evaluation on the server; each node decides its
    own. Nodes that leave ``unaccounted-metrics`` at auto answer with an empty reply:
    the run counts them as declined instead of failing; nodes that opt in report metrics."""
    from fedpriv.scenarios.ifca.feature import final_evaluation

    run_config = gp_run_config(tmp_path, **({"unaccounted-metrics": True} if node_opt_in else {}))
    cfg = resolve_run_config(run_config)
    assert cfg["unaccounted-metrics"] is True  # the scenario's opt-in, on the server
    wire_base(run_config)
    strategy = make_strategy()
    grid = LocalGrid(range(6), run_config)
    final, rows = final_evaluation(
        grid, strategy, hypotheses_record(HYPS), server_run(cfg).spec, config_record(cfg, "")
    )
    users = len(list(strategy.train_partitions))
    if node_opt_in:
        assert final["declined"] == 0 and final["clients"] == users and len(rows) == users
        assert sum(final["choices"]) == users
    else:
        assert final == {"clients": 0, "declined": users} and rows == {}
