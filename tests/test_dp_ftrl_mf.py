"""DP-FTRL's matrix-factorization noise (``ftrl-estimator = mf``;
:mod:`fedpriv.privacy.ftrl_mf`), without a simulation.

* the block sensitivity bound holds for every participation pattern with one round per epoch
  and for any directions of the updates (all patterns enumerated; random directions), and is
  tight at the optimum;
* the optimised factorization beats the Toeplitz square root and no correlation, and B C = A;
* each round's model noise has variance (z·C)² Σ_k B_tk², recomputed from the seed; with
  server momentum, C is optimised for the momentum's workload (η² (W C⁻¹)² per round);
* ε is one ``GaussianDpEvent(z)`` per factorization, equal to dp_accounting's PLD and RDP
  accountants computed here, the same in the server's ledger;
* a run with the wrapper: one factorization across epochs, each client once per epoch, a
  resumed run opens a second one; refusals in one line.
"""

from __future__ import annotations

import itertools
import pickle

import dp_accounting
import numpy as np
import pytest
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.strategies.dp_ftrl import DPFTRL
from flwr.serverapp.strategy import FedAvg

from fedpriv.privacy.ftrl import TreeAggregatedFTRL, tree_charge, tree_epsilon
from fedpriv.privacy.ftrl_mf import (
    _sqrt_toeplitz,
    block_sensitivity,
    epoch_blocks,
    optimal_factorization,
    prefix_weights,
    total_error,
    workload,
)
from fedpriv.privacy.ledger.events import compose_epsilon
from tests.test_dp_ftrl import run_rounds


def exact_sensitivity(c: np.ndarray, blocks: list[list[int]]) -> float:
    """max over every pattern (one round per block) of sqrt(Σ_{i,j∈π} |X_ij|)."""
    gram = np.abs(c.T @ c)
    return max(
        float(np.sqrt(gram[np.ix_(p, p)].sum())) for p in itertools.product(*blocks)
    )  # fmt: skip


def test_epoch_blocks_cut_the_rounds_at_the_epochs():
    assert epoch_blocks(12, 5) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11]]
    assert epoch_blocks(7, 5, blocks_done=3) == [[0, 1], [2, 3, 4, 5, 6]]
    assert epoch_blocks(3, 5, blocks_done=1) == [[0, 1, 2]]
    assert epoch_blocks(4, 1) == [[0], [1], [2], [3]]


@pytest.mark.parametrize("rounds, restart, done", [(8, 4, 0), (7, 3, 2), (6, 6, 0)])
def test_the_bound_holds_for_every_pattern_and_is_tight_at_the_optimum(rounds, restart, done):
    blocks = epoch_blocks(rounds, restart, done)
    c = optimal_factorization(rounds, restart, done)
    assert block_sensitivity(c, blocks) == pytest.approx(1.0, rel=1e-12)
    exact = exact_sensitivity(c, blocks)
    assert exact <= 1.0 + 1e-12 and exact > 0.98  # measured: 1.0 up to 1e-7
    rng = np.random.default_rng(0)
    for _ in range(200):  # any directions of one client's clipped updates: ‖C g‖ <= 1
        pattern = [int(rng.choice(b)) for b in blocks]
        g = np.zeros((rounds, 7))
        g[pattern] = rng.normal(size=(len(pattern), 7))
        g[pattern] /= np.linalg.norm(g[pattern], axis=1, keepdims=True)
        assert np.linalg.norm(c @ g) <= 1.0 + 1e-9
    other = np.tril(rng.uniform(-1, 1, size=(rounds, rounds))) + 3 * np.eye(rounds)
    assert exact_sensitivity(other, blocks) <= block_sensitivity(other, blocks) + 1e-12


def test_the_optimum_beats_the_toeplitz_root_and_no_correlation():
    blocks = epoch_blocks(20, 5)
    c = optimal_factorization(20, 5)
    assert np.allclose(np.tril(c), c)
    assert np.allclose(prefix_weights(c) @ c, np.tril(np.ones((20, 20))))
    best = total_error(c, blocks)
    assert best < 0.62 * total_error(_sqrt_toeplitz(20), blocks)  # 342 vs 598 measured
    assert total_error(np.eye(20), blocks) == pytest.approx(840.0)  # 4 × Σ t
    assert 330 < best < 350
    assert optimal_factorization(20, 5) is c  # cached: one optimisation per process


def test_each_rounds_model_noise_is_the_factorizations_variance():
    z, clip, rounds, dim = 0.8, 0.5, 10, 40_000
    ftrl = TreeAggregatedFTRL(noise_multiplier=z, clipping_norm=clip, num_sampled_clients=1,
                              restart_rounds=5, seed=7, estimator="mf")  # fmt: skip
    ftrl.plan_factorization(rounds)
    ftrl.start([np.zeros(dim)])
    weights = prefix_weights(optimal_factorization(rounds, 5))
    for t in range(1, rounds + 1):
        if t == 6:
            ftrl.request_restart()  # an epoch boundary: the factorization goes on
        theta, metrics = ftrl.step([np.zeros(dim)])
        expected = (z * clip) ** 2 * float(np.sum(weights[t - 1, :t] ** 2))
        assert np.var(theta[0]) == pytest.approx(expected, rel=0.03)
        assert metrics["tree"] == 0 and metrics["tree_step"] == t
        again = sum(  # recomputed from the seed, Z_k = node (0, k - 1)
            weights[t - 1, k] * np.random.default_rng([7, 0, 0, k]).normal(0, z * clip, dim)
            for k in range(t)
        )
        assert np.allclose(theta[0], again)
    assert ftrl.steps_per_tree == [rounds]


def test_the_momentum_workload_is_the_heavy_ball_recursion():
    rng = np.random.default_rng(1)
    g = rng.normal(size=9)
    v, theta, expected = 0.0, 0.0, []
    for x in g:  # v_t = μ v_{t-1} + g_t, θ_t = θ_{t-1} + v_t
        v = 0.6 * v + x
        theta += v
        expected.append(theta)
    assert np.allclose(workload(9, 0.6) @ g, expected)
    assert np.array_equal(workload(9), np.tril(np.ones((9, 9))))


def test_a_factorization_for_momentum_lowers_the_models_noise_at_the_same_sensitivity():
    blocks = epoch_blocks(20, 5)
    plain, tuned = optimal_factorization(20, 5), optimal_factorization(20, 5, momentum=0.5)
    assert block_sensitivity(tuned, blocks) == pytest.approx(1.0, rel=1e-12)
    exact = exact_sensitivity(tuned, blocks)  # all 5^4 patterns of 20 rounds in 4 epochs
    assert 0.98 < exact <= 1.0 + 1e-12  # measured 0.99993
    # measured: 935 against 961 for the factorization of the prefix sums (η = 1, z = 1)
    assert total_error(tuned, blocks, 0.5) < 0.985 * total_error(plain, blocks, 0.5)
    assert optimal_factorization(20, 5, momentum=0.0) is plain


def test_with_momentum_each_rounds_model_noise_is_the_momentum_workloads_variance():
    z, clip, mu, lr, rounds, dim = 0.8, 0.5, 0.5, 0.7, 8, 40_000
    ftrl = TreeAggregatedFTRL(noise_multiplier=z, clipping_norm=clip, num_sampled_clients=1,
                              learning_rate=lr, momentum=mu, restart_rounds=4, seed=5,
                              estimator="mf")  # fmt: skip
    ftrl.plan_factorization(rounds)
    ftrl.start([np.zeros(dim)])
    model_noise = workload(rounds, mu) @ np.linalg.inv(optimal_factorization(rounds, 4, 0, mu))
    for t in range(1, rounds + 1):
        theta, _ = ftrl.step([np.zeros(dim)])
        expected = (lr * z * clip) ** 2 * float(np.sum(model_noise[t - 1] ** 2))
        assert np.var(theta[0]) == pytest.approx(expected, rel=0.03)


@pytest.mark.parametrize("z", [0.6, 1.08, 2.0])
def test_epsilon_is_one_gaussian_per_factorization_as_dp_accounting_computes_it(z):
    delta = 1e-5
    relation = dp_accounting.NeighboringRelation.REPLACE_SPECIAL
    two = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(z)] * 2)
    pld = dp_accounting.pld.PLDAccountant(neighboring_relation=relation).compose(two)
    rdp = dp_accounting.rdp.RdpAccountant(neighboring_relation=relation).compose(two)
    expected = min(pld.get_epsilon(delta), rdp.get_epsilon(delta))
    report = tree_epsilon(z, [15, 5], delta, "mf")
    assert report["epsilon"] == pytest.approx(expected, rel=1e-9)
    assert report["trees"] == 2 and "GaussianDpEvent" in report["accountant"]
    assert "at most once per epoch" in report["sampling"]
    events = [tree_charge(z, 5, 0, 15, "mf"), tree_charge(z, 5, 2, 5, "mf")]
    assert compose_epsilon(events, delta, relation) == pytest.approx(expected, rel=1e-9)
    if z == 1.08:  # the privacy-utility page's ε 4 (digits, 20 rounds): PLD is the smaller
        assert tree_epsilon(z, [20], delta, "mf")["epsilon"] == pytest.approx(4.0, abs=0.01)


def test_the_wrapper_asks_each_client_once_per_epoch_in_one_factorization():
    wrapper = DPFTRL(FedAvg(), noise_multiplier=0.9, clipping_norm=1.0, num_sampled_clients=2,
                     restart_rounds=2, seed=3, estimator="mf", num_rounds=5)  # fmt: skip
    models, sent = run_rounds(wrapper, 5, range(100, 104))
    for epoch in range(2):
        asked = [n for per in sent[2 * epoch : 2 * epoch + 2] for n in per]
        assert sorted(asked) == list(range(100, 104))
    assert wrapper.ftrl.steps_per_tree == [5]
    metrics = wrapper.round_metrics()
    assert metrics["dp-tree"] == 0 and metrics["dp-epoch"] == 2
    assert metrics["dp-epsilon"] == pytest.approx(tree_epsilon(0.9, [5], 1e-5, "mf")["epsilon"])
    blob = pickle.dumps(wrapper.ftrl)  # a resume: a second factorization, the seed not kept
    restored = pickle.loads(blob)
    assert b"seed" not in blob and restored.starts_new_tree()
    wrapper.ftrl, wrapper.num_rounds = restored, 3
    _, after = run_rounds(wrapper, 3, range(100, 104))
    assert sorted(sent[4] + after[0]) == list(range(100, 104))  # the epoch goes on
    assert wrapper.ftrl.steps_per_tree == [5, 3]


def test_refusals_in_one_line():
    with pytest.raises(ValueError, match="num_rounds = None is not allowed"):
        DPFTRL(FedAvg(), noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=2,
               estimator="mf")  # fmt: skip
    base = {"privacy": "dp-ftrl", "strategy": "fedavg", "num-clients": 100,
            "clients-per-round": 20, "ftrl-estimator": "mf"}  # fmt: skip
    with pytest.raises(ConfigError, match="num-server-rounds = 101 is not allowed") as err:
        resolve_run_config({**base, "num-server-rounds": 101})
    assert "\n" not in str(err.value) and "ftrl-estimator = honaker" in str(err.value)
    resolve_run_config({**base, "num-server-rounds": 100})
