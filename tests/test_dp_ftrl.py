"""DP-FTRL (``privacy = dp-ftrl``; Kairouz et al. 2021), without a simulation.

* the online tree's nodes tile every prefix; each round's noise equals the tree's recomputed
  from its seed by an independent decomposition (a seeded test);
* ε equals dp_accounting's RDP accountant of the tree-aggregation events (no amplification);
* each client is asked exactly once per epoch (one tree); noise off and μ = 0 is uniform
  FedAvg of the clipped updates over m; an end-to-end digits run in process, whose records
  name exactly the clients asked (shuffled epochs: ``tests/test_dp_ftrl_epochs.py``).
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.strategies.dp_ftrl import DPFTRL
from flwr.common import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg, FedMedian

from fedpriv.privacy.ftrl import tree_epsilon, tree_nodes
from tests.test_dp_wrappers import act_as_serverapp_task

act_as_serverapp_task()
SHAPES = [(3, 2), (4,)]


class Nodes:
    """The grid a strategy samples from: ``get_node_ids`` only."""

    def __init__(self, nodes) -> None:
        self.nodes = list(nodes)

    def get_node_ids(self):
        return list(self.nodes)


def node_delta(node: int) -> list[np.ndarray]:
    """A fixed update per node, norms from 0.3 to 3 (some clipped at C = 1)."""
    rng = np.random.default_rng(node)
    update = [rng.normal(size=s) for s in SHAPES]
    norm = math.sqrt(sum(float(np.sum(u**2)) for u in update))
    return [u * (0.3 + (node % 10) * 0.3) / norm for u in update]


def answer(messages, model) -> list[Message]:
    """Each sampled node returns ``model + node_delta(node)`` (float64)."""
    out = []
    for msg in messages:
        node = msg.metadata.dst_node_id
        arrays = [a + d for a, d in zip(model, node_delta(node))]
        content = RecordDict(
            {"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 5})}
        )
        out.append(Message(content=content, reply_to=msg))
    return out


def clipped(delta, c: float) -> list[np.ndarray]:
    norm = math.sqrt(sum(float(np.sum(d**2)) for d in delta))
    return [d * min(1.0, c / norm) for d in delta]


def independent_prefix_noise(seed: int, tree: int, t: int, std: float) -> list[np.ndarray]:
    """N_t of tree ``tree``: for each set bit ℓ of t, node (ℓ, 2·(t >> (ℓ+1)))."""
    total = [np.zeros(s) for s in SHAPES]
    for level in range(t.bit_length()):
        if (t >> level) & 1:
            rng = np.random.default_rng([seed, tree, level, 2 * (t >> (level + 1))])
            total = [acc + rng.normal(0.0, std, size=s) for acc, s in zip(total, SHAPES)]
    return total


def run_rounds(wrapper: DPFTRL, rounds: int, nodes: range):
    """Drive configure/aggregate like the engine; returns models, sent nodes per round."""
    model = [np.zeros(s) for s in SHAPES]
    models, sent = [model], []
    for r in range(1, rounds + 1):
        messages = list(
            wrapper.configure_train(r, ArrayRecord(model), ConfigRecord(), Nodes(nodes))
        )
        sent.append(sorted(m.metadata.dst_node_id for m in messages))
        arrays, _ = wrapper.aggregate_train(r, answer(messages, model))
        model = arrays.to_numpy_ndarrays()
        models.append(model)
    return models, sent


def test_tree_nodes_tile_each_prefix_once():
    for t in range(1, 130):
        blocks = [(k * 2**lv + 1, (k + 1) * 2**lv) for lv, k in tree_nodes(t)]
        covered = [i for lo, hi in blocks for i in range(lo, hi + 1)]
        assert covered == list(range(1, t + 1)) and len(blocks) == bin(t).count("1")


def test_each_rounds_noise_equals_the_tree_recomputed_from_its_seed():
    z, c, m, restart, seed = 0.7, 1.0, 3, 4, 1234
    wrapper = DPFTRL(FedAvg(), noise_multiplier=z, clipping_norm=c, num_sampled_clients=m,
                     restart_rounds=restart, seed=seed, estimator="tree")  # fmt: skip
    models, sent = run_rounds(wrapper, 10, range(100, 112))
    for r in range(1, 11):
        tree, t = (r - 1) // restart, (r - 1) % restart + 1
        s = [np.zeros(sh) for sh in SHAPES]
        for node in sent[r - 1]:
            s = [a + b for a, b in zip(s, clipped(node_delta(node), c))]
        now = independent_prefix_noise(seed, tree, t, z * c)
        before = (
            independent_prefix_noise(seed, tree, t - 1, z * c) if t > 1 else [0 * a for a in now]
        )
        expected = [(si + n - b) / m for si, n, b in zip(s, now, before)]
        step = [a - b for a, b in zip(models[r], models[r - 1])]
        for got, want in zip(step, expected):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    # m a round, every one of the 12 clients exactly once per epoch (= tree)
    assert all(len(per) == m for per in sent)
    for tree in range(2):
        asked = [n for per in sent[tree * restart : (tree + 1) * restart] for n in per]
        assert sorted(asked) == list(range(100, 112))
    assert wrapper.ftrl.steps_per_tree == [4, 4, 2]


def test_epsilon_equals_dp_accountings_tree_aggregation_accountant():
    z, delta = 0.9, 1e-5
    wrapper = DPFTRL(FedAvg(), noise_multiplier=z, clipping_norm=1.0, num_sampled_clients=2,
                     restart_rounds=4, delta=delta, seed=7)  # fmt: skip
    run_rounds(wrapper, 10, range(100, 108))
    accountant = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
    )
    accountant.compose(dp_accounting.SingleEpochTreeAggregationDpEvent(z, 4), 2)
    accountant.compose(dp_accounting.SingleEpochTreeAggregationDpEvent(z, 2))
    expected = accountant.get_epsilon(delta)
    report = wrapper.round_metrics()
    assert report["dp-epsilon"] == pytest.approx(expected, rel=1e-9)
    assert "at most once per tree restart" in report["dp-sampling"]
    # depth ⌈log2(T+1)⌉ per tree: 3 + 3 + 2 nodes per client, the Gaussian of μ² = 8/z²
    mu = math.sqrt(8) / z
    gaussian = dp_accounting.rdp.RdpAccountant().compose(dp_accounting.GaussianDpEvent(1 / mu))
    assert expected == pytest.approx(gaussian.get_epsilon(delta), rel=1e-9)
    assert tree_epsilon(z, [4, 4, 2], delta)["epsilon"] == pytest.approx(expected, rel=1e-12)


def test_noise_off_without_momentum_is_uniform_fedavg_of_clipped_updates_over_m():
    wrapper = DPFTRL(FedAvg(), noise_multiplier=0.0, clipping_norm=1.0, num_sampled_clients=4,
                     restart_rounds=1, seed=0)  # fmt: skip
    models, sent = run_rounds(wrapper, 3, range(100, 104))
    for r in range(1, 4):
        mean = [
            sum(parts) / 4 for parts in zip(*(clipped(node_delta(n), 1.0) for n in sent[r - 1]))
        ]
        for got, prev, want in zip(models[r], models[r - 1], mean):
            np.testing.assert_allclose(got - prev, want, rtol=1e-10, atol=1e-12)
    momentum = DPFTRL(FedAvg(), noise_multiplier=0.0, clipping_norm=1.0, num_sampled_clients=4,
                      restart_rounds=1, seed=0, momentum=0.5)  # fmt: skip
    with_momentum, _ = run_rounds(momentum, 2, range(100, 104))
    # round 2's step is its own mean plus half of round 1's (v_2 = 0.5·v_1 + g_2)
    np.testing.assert_allclose(
        with_momentum[2][0] - with_momentum[1][0],
        1.5 * (with_momentum[1][0] - with_momentum[0][0]), rtol=1e-10,
    )  # fmt: skip


def test_config_refusals_in_one_line():
    base = {"privacy": "dp-ftrl", "num-clients": 4, "clients-per-round": 2}
    with pytest.raises(ConfigError, match="strategy = 'fedmedian' is not allowed; expected fedavg"):
        resolve_run_config({**base, "strategy": "fedmedian"})
    with pytest.raises(ConfigError, match="max-epsilon"):
        resolve_run_config({**base, "max-epsilon": 3.0})
    with pytest.raises(ValueError, match="strategy"):
        DPFTRL(FedMedian(), noise_multiplier=1, clipping_norm=1, num_sampled_clients=1)


def test_dp_ftrl_runs_end_to_end_on_digits(tmp_path):
    """digits, 4 clients, 2 a round, restart every epoch (2 rounds): each client exactly once
    per epoch and tree, the records name the clients asked (all of them replied), ε of the
    rounds = the plan = dp_accounting's, and the model learns."""
    from fedpriv.scenarios.config.specs import run_spec

    from fedpriv.privacy.accounting.planning import privacy_plan
    from tests.test_adaptive_clip import run_in_process

    run_config = {
        "scenario": "digits", "privacy": "dp-ftrl", "strategy": "fedavg", "num-clients": 4,
        "clients-per-round": 2, "num-server-rounds": 6, "local-epochs": 1,
        "noise-multiplier": 0.01, "clipping-norm": 5.0, "ftrl-momentum": 0.5, "seed": 2,
        "reproducible-noise": True,
    }  # fmt: skip
    cfg, outcome = run_in_process(run_config, tmp_path, 4)
    trained = [r for r in outcome.rounds if r.get("round", 0) > 0]
    assert [(r["dp-tree"], r["dp-tree-step"]) for r in trained] == [
        (0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (2, 2)
    ]  # fmt: skip
    for tree in range(3):
        asked = [p for r in trained[2 * tree : 2 * tree + 2] for p in r["sampled"]]
        assert sorted(asked) == [0, 1, 2, 3]
    for r in trained:
        assert r["sampled"] == sorted(r["replied"]) and len(r["sampled"]) == 2
        assert r["dp-epoch"] == r["dp-tree"] and r["dp-num-reports"] == 2
        assert r["dp-sigma"] == pytest.approx(0.01 * 5.0 / 2)
    expected = tree_epsilon(0.01, [2, 2, 2], float(cfg["dp-delta"]))["epsilon"]
    assert trained[-1]["dp-epsilon"] == pytest.approx(expected, rel=1e-9)
    block = outcome.summary["privacy"]
    assert block["mode"] == "dp-ftrl" and block["epsilon"]["epsilon"] == pytest.approx(expected)
    assert "at most once per tree restart" in block["epsilon_condition"]
    assert privacy_plan(run_spec(cfg))["epsilon"] == pytest.approx(expected, rel=1e-9)
    assert outcome.summary["final"]["accuracy"] > 0.6  # 0.911 measured (seed 2)


def test_a_checkpoint_holds_no_tree_seed_and_a_restored_tree_restarts():
    import pickle

    wrapper = DPFTRL(FedAvg(), noise_multiplier=0.9, clipping_norm=1.0, num_sampled_clients=2,
                     restart_rounds=4, seed=11)  # fmt: skip
    _, before = run_rounds(wrapper, 3, range(100, 108))
    blob = pickle.dumps(wrapper.ftrl)
    restored = pickle.loads(blob)
    assert b"seed" not in blob and restored.seed != 11 and restored.starts_new_tree()
    wrapper.ftrl = restored
    _, after = run_rounds(wrapper, 2, range(100, 108))
    # the epoch goes on in a new tree: its 4th block, then a new epoch opens a third tree
    assert sorted(n for per in before + after[:1] for n in per) == list(range(100, 108))
    assert wrapper.ftrl.steps_per_tree == [3, 1, 1]  # the 3 released leaves stay accounted
    assert wrapper.round_metrics()["dp-epsilon"] == pytest.approx(
        tree_epsilon(0.9, [3, 1, 1], 1e-5)["epsilon"], rel=1e-12
    )
