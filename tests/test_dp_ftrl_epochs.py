"""DP-FTRL's shuffled epochs (Kairouz et al. 2021), without a simulation.

* every round asks ``clients-per-round`` clients, every client exactly once per epoch, from a
  fresh permutation per epoch drawn from the secret sampling Generator; nobody is dropped;
* the step divides by the updates aggregated (the block size when nobody fails);
* ε of a planned run equals an independent dp_accounting computation of what the code does;
* ``ftrl-momentum`` (default 0) is DP-FTRL's own: FedAvgM's ``server-momentum`` is not read;
* the recorder's ``sampled`` names exactly the clients asked.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import run_spec
from fedpriv.strategies.dp_ftrl import DPFTRL
from flwr.common import ArrayRecord, ConfigRecord, Error, Message
from flwr.serverapp.strategy import FedAvg

from fedpriv import seeds
from fedpriv.privacy.ftrl import ShuffledEpochs
from fedpriv.privacy.modes import dp_ftrl
from tests.test_dp_ftrl import SHAPES, Nodes, answer, clipped, node_delta, run_rounds

BASE = {"privacy": "dp-ftrl", "scenario": "digits", "num-clients": 100, "clients-per-round": 20}


def test_every_client_exactly_once_per_epoch_and_the_same_number_every_round():
    schedule, rng = ShuffledEpochs(per_round=20, rounds_per_epoch=5), np.random.default_rng(3)
    epochs = []
    for _ in range(4):
        blocks = [schedule.next_block(range(100), rng) for _ in range(5)]
        assert [new for _, new in blocks] == [True, False, False, False, False]
        assert all(len(block) == 20 for block, _ in blocks)
        asked = [p for block, _ in blocks for p in block]
        assert sorted(asked) == list(range(100))  # nobody twice, nobody left out
        epochs.append(tuple(p for block, _ in blocks for p in block))
    assert len(set(epochs)) == 4  # a fresh permutation each epoch


def test_a_short_epoch_leaves_the_rest_out_and_an_epoch_too_long_is_refused():
    schedule, rng = ShuffledEpochs(per_round=3, rounds_per_epoch=3), np.random.default_rng(0)
    asked = [p for _ in range(3) for p in schedule.next_block(range(10), rng)[0]]
    assert len(asked) == len(set(asked)) == 9
    with pytest.raises(ValueError, match="12 is not allowed; expected at most the 10 clients"):
        ShuffledEpochs(per_round=4, rounds_per_epoch=3).next_block(range(10), rng)
    with pytest.raises(ConfigError, match="ftrl-restart-rounds = 6 is not allowed; expected 0 or"):
        resolve_run_config({**BASE, "ftrl-restart-rounds": 6})
    assert resolve_run_config({**BASE, "ftrl-restart-rounds": 5})["ftrl-restart-rounds"] == 5


def test_the_permutation_comes_from_the_secret_sampling_generator():
    """Default: OS entropy (two wrappers ask different blocks); reproducible only on request."""
    first = [
        DPFTRL(FedAvg(), noise_multiplier=1, clipping_norm=1, num_sampled_clients=5,
               restart_rounds=4, rng=seeds.privacy_rng(0, reproducible=False)).sample_round(
            range(20))
        for _ in range(2)
    ]  # fmt: skip
    assert first[0] != first[1]
    twice = [
        DPFTRL(FedAvg(), noise_multiplier=1, clipping_norm=1, num_sampled_clients=5,
               restart_rounds=4, rng=np.random.default_rng(9)).sample_round(range(20))
        for _ in range(2)
    ]  # fmt: skip
    assert twice[0] == twice[1]
    alone = DPFTRL(FedAvg(), noise_multiplier=1, clipping_norm=1, num_sampled_clients=5,
                   restart_rounds=4)  # fmt: skip
    assert isinstance(alone.rng, seeds.SecretGenerator)
    # a checkpoint of the wrapper holds no secret Generator (nor the node ids of the tree)
    from fedpriv.checkpoint import capture_state

    alone.sample_round(range(20))
    (state,) = capture_state([alone])
    assert "rng" not in state and "in_tree" not in state and "block" not in state
    assert state["schedule"].epoch == 0 and state["schedule"].block == 1


def test_no_client_dropped_and_the_step_divides_by_the_updates_aggregated():
    """16 clients, 4 a round, 4 rounds an epoch, noise off: all 4 of each block are asked;
    a round where one reply fails steps by the mean of the 3 that arrived."""
    wrapper = DPFTRL(FedAvg(), noise_multiplier=0.0, clipping_norm=1.0, num_sampled_clients=4,
                     restart_rounds=4, seed=0)  # fmt: skip
    models, sent = run_rounds(wrapper, 8, range(100, 116))
    assert all(len(per) == 4 for per in sent) and wrapper.ftrl.steps_per_tree == [4, 4]
    model = models[-1]
    messages = list(wrapper.configure_train(9, ArrayRecord(model), ConfigRecord(),
                                            Nodes(range(100, 116))))  # fmt: skip
    replies = answer(messages, model)
    failed = messages[0].metadata.dst_node_id
    replies[0] = _error_reply(messages[0])
    arrays, _ = wrapper.aggregate_train(9, replies)
    kept = [m.metadata.dst_node_id for m in messages if m.metadata.dst_node_id != failed]
    mean = [sum(parts) / 3 for parts in zip(*(clipped(node_delta(n), 1.0) for n in kept))]
    for got, prev, want in zip(arrays.to_numpy_ndarrays(), model, mean):
        np.testing.assert_allclose(got - prev, want, rtol=1e-10, atol=1e-12)
    report = wrapper.round_metrics()
    assert report["dp-num-reports"] == 3 and report["dp-num-failures"] == 1
    assert report["dp-sigma"] == 0.0


def _error_reply(message: Message) -> Message:
    return Message(Error(code=0, reason="gone"), reply_to=message)


def test_a_step_with_noise_divides_the_tree_increment_by_k():
    """z > 0, one reply failed: θ_t − θ_{t−1} = (s_t + N_t − N_{t−1})/k, k = 3 of 4."""
    z, c, seed = 0.5, 1.0, 5
    wrapper = DPFTRL(FedAvg(), noise_multiplier=z, clipping_norm=c, num_sampled_clients=4,
                     restart_rounds=2, seed=seed, estimator="tree")  # fmt: skip
    model = [np.zeros(s) for s in SHAPES]
    messages = list(wrapper.configure_train(1, ArrayRecord(model), ConfigRecord(),
                                            Nodes(range(100, 108))))  # fmt: skip
    replies = answer(messages, model)[1:] + [_error_reply(messages[0])]
    arrays, _ = wrapper.aggregate_train(1, replies)
    kept = [m.metadata.dst_node_id for m in messages[1:]]
    s = [sum(parts) for parts in zip(*(clipped(node_delta(n), c) for n in kept))]
    rng = np.random.default_rng([seed, 0, 0, 0])  # tree 0, t = 1: the leaf node (0, 0)
    noise = [rng.normal(0.0, z * c, size=sh) for sh in SHAPES]
    for got, si, n in zip(arrays.to_numpy_ndarrays(), s, noise):
        np.testing.assert_allclose(got, (si + n) / 3, rtol=1e-10, atol=1e-12)
    assert wrapper.round_metrics()["dp-sigma"] == pytest.approx(z * c / 3)


def test_planned_epsilon_equals_dp_accounting_for_shuffled_epochs():
    """digits, 100 clients, 20 a round, 20 rounds: 4 epochs = 4 trees of 5 leaves; each
    client is in one leaf per tree, so in ⌈log2 6⌉ = 3 nodes per tree: 12 Gaussian nodes of
    std z·C on a contribution of norm <= C, replace-special: μ = √12 / z."""
    from fedpriv.privacy.accounting.planning import privacy_plan

    for z in (2.21, 4.01):
        cfg = resolve_run_config({**BASE, "num-server-rounds": 20, "noise-multiplier": z})
        plan = privacy_plan(run_spec(cfg))
        assert plan["restart_rounds"] == 5 and plan["trees"] == 4 and plan["rounds"] == 20
        special = dp_accounting.rdp.RdpAccountant(
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
        )
        special.compose(dp_accounting.SingleEpochTreeAggregationDpEvent(z, 5), 4)
        expected = special.get_epsilon(1e-5)
        assert plan["epsilon"] == pytest.approx(expected, rel=1e-9)
        gaussian = dp_accounting.rdp.RdpAccountant()
        gaussian.compose(dp_accounting.GaussianDpEvent(z / math.sqrt(12)))
        assert plan["epsilon"] == pytest.approx(gaussian.get_epsilon(1e-5), rel=1e-9)
        assert "replace-special" in plan["adjacency"]


def test_momentum_is_dp_ftrls_own_key_default_zero():
    spec = run_spec(resolve_run_config(BASE))
    assert spec.params.momentum == 0.0  # not FedAvgM's server-momentum default (0.5)
    assert resolve_run_config(BASE)["server-momentum"] == 0.5
    spec = run_spec(resolve_run_config({**BASE, "server-momentum": 0.9}))
    assert spec.params.momentum == 0.0
    spec = run_spec(resolve_run_config({**BASE, "ftrl-momentum": 0.9}))
    assert spec.params.momentum == 0.9
    with pytest.raises(ConfigError, match="ftrl-momentum = 1.0 is not allowed"):
        resolve_run_config({**BASE, "ftrl-momentum": 1.0})
    assert dp_ftrl.MODE.params.__dataclass_fields__["momentum"] is not None


def test_the_recorder_samples_the_wrappers_block_and_records_it():
    """The engine's recorder asks the wrapper for the round's partitions: ``sampled`` is the
    block, every node of it gets a message, and the epoch covers every partition once."""
    from fedpriv.scenarios.app.recorder import RoundRecorder
    from fedpriv.scenarios.nodes.federation import PartitionGrid

    nodes = {500 + p: p for p in range(12)}
    grid = PartitionGrid(Nodes(nodes), nodes)
    wrapper = DPFTRL(FedAvg(), noise_multiplier=0.0, clipping_norm=1.0, num_sampled_clients=3,
                     restart_rounds=4, seed=1, rng=np.random.default_rng(4))  # fmt: skip
    recorder = RoundRecorder(wrapper, grid=grid, num_clients=12, clients_per_round=3,
                             rng=np.random.default_rng(0))  # fmt: skip
    model = [np.zeros(s) for s in SHAPES]
    epoch = []
    for r in range(1, 5):
        messages = list(recorder.configure_train(r, ArrayRecord(model), ConfigRecord(), grid))
        sampled = recorder.current["sampled"]
        assert len(sampled) == 3
        assert sorted(nodes[m.metadata.dst_node_id] for m in messages) == sampled
        recorder.aggregate_train(r, answer(messages, model))
        assert sorted(recorder.current["replied"]) == sampled
        epoch += sampled
    assert sorted(epoch) == list(range(12))


def test_honaker_estimate_is_the_inverse_variance_combination_of_the_nodes():
    """``ftrl-estimator = honaker``, one tree of 5 leaves, written out: a level-1 node is
    (2·n + left + right)/3, the level-2 node (4·n + 3·(its children's estimates))/7; each
    step's increment is (s_t + H_t − H_{t−1})/m; ε is the tree estimator's."""
    z, c, seed, m = 0.8, 1.0, 21, 2
    wrapper = DPFTRL(FedAvg(), noise_multiplier=z, clipping_norm=c, num_sampled_clients=m,
                     restart_rounds=5, seed=seed, estimator="honaker")  # fmt: skip
    models, sent = run_rounds(wrapper, 5, range(100, 110))

    def n(level: int, index: int) -> list[np.ndarray]:
        rng = np.random.default_rng([seed, 0, level, index])
        return [rng.normal(0.0, z * c, size=sh) for sh in SHAPES]

    def level1(k: int) -> list[np.ndarray]:
        return [(2 * a + b + d) / 3 for a, b, d in zip(n(1, k), n(0, 2 * k), n(0, 2 * k + 1))]

    root = [(4 * a + 3 * (b + d)) / 7 for a, b, d in zip(n(2, 0), level1(0), level1(1))]
    prefix = {
        0: [np.zeros(sh) for sh in SHAPES], 1: n(0, 0), 2: level1(0),
        3: [a + b for a, b in zip(level1(0), n(0, 2))], 4: root,
        5: [a + b for a, b in zip(root, n(0, 4))],
    }  # fmt: skip
    for t in range(1, 6):
        s = [sum(p) for p in zip(*(clipped(node_delta(node), c) for node in sent[t - 1]))]
        want = [(si + a - b) / m for si, a, b in zip(s, prefix[t], prefix[t - 1])]
        for got, prev, w in zip(models[t], models[t - 1], want):
            np.testing.assert_allclose(got - prev, w, rtol=1e-10, atol=1e-12)
    plain = DPFTRL(FedAvg(), noise_multiplier=z, clipping_norm=c, num_sampled_clients=m,
                   restart_rounds=5, seed=seed, estimator="tree")  # fmt: skip
    run_rounds(plain, 5, range(100, 110))
    assert wrapper.round_metrics()["dp-epsilon"] == plain.round_metrics()["dp-epsilon"]
    assert run_spec(resolve_run_config(BASE)).params.estimator == "honaker"  # the default
    assert run_spec(resolve_run_config({**BASE, "ftrl-estimator": "tree"})).params.estimator
    with pytest.raises(ConfigError, match="ftrl-estimator = 'x' is not allowed"):
        resolve_run_config({**BASE, "ftrl-estimator": "x"})
