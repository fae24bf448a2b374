"""Global DP with stateful server optimizers.

The wrapper noises the mean of the clipped updates BEFORE the inner strategy's stateful
update, so FedAvgM's momentum and FedYogi's moments only ever see noised means. The test
recomputes every noised mean independently (clipping by hand in float64, the wrapper's noise
redrawn from the same seed) and runs the server optimizer's update rule written out here
(not Flower's code) on them: the released models must follow. ε is reported for both.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.specs import server_run
from fedpriv.scenarios.dp.feature import build_dp_wrapper
from fedpriv.strategies.array_records import named_record
from fedpriv.strategies.dp_core import NO_EPSILON_NOT_A_MEAN
from fedpriv.strategies.dp_wrappers import ServerSideFixedClippingDP
from flwr.common import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvgM, FedMedian, FedYogi

from fedpriv.privacy.dp import GaussianRoundsAccountant
from tests.flower_reference import act_as_serverapp_task

act_as_serverapp_task()

SHAPES = [(4, 3), (3,), (2, 2)]
Z, C, M, SEED, ROUNDS = 0.7, 1.0, 3, 11, 4
NORMS = [0.4, 2.0, 3.0]  # two of three clipped


class _Grid:
    def get_node_ids(self):
        return [1, 2, 3]


def _keys() -> list[str]:
    return [f"layer{i}" for i in range(len(SHAPES))]


def _record(arrays) -> ArrayRecord:
    return named_record(_keys(), [np.asarray(a, np.float32) for a in arrays])


def _client_models(base, t: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(100 + t)
    out = []
    for norm in NORMS:
        u = [rng.normal(size=s) for s in SHAPES]
        scale = norm / math.sqrt(sum(float(np.sum(x**2)) for x in u))
        out.append([(b + x * scale).astype(np.float32) for b, x in zip(base, u)])
    return out


def _replies(models) -> list[Message]:
    out = []
    for i, arrays in enumerate(models):
        content = RecordDict(
            {"arrays": _record(arrays), "metrics": MetricRecord({"num-examples": 5 * (i + 1)})}
        )
        ask = Message(content=content, dst_node_id=1 + i, message_type=MessageType.TRAIN)
        out.append(Message(content=content, reply_to=ask))
    return out


def _run(inner) -> tuple[list[list[np.ndarray]], list, ServerSideFixedClippingDP]:
    """ROUNDS rounds through the real wrapper; returns the releases and the client models."""
    accountant = GaussianRoundsAccountant(sampled=M, population=10, delta=1e-5)
    wrapper = ServerSideFixedClippingDP(
        inner, noise_multiplier=Z, clipping_norm=C, num_sampled_clients=M,
        rng=np.random.default_rng(SEED), accountant=accountant,
    )  # fmt: skip
    w = [np.random.default_rng(0).normal(size=s).astype(np.float32) for s in SHAPES]
    releases, clients = [w], []
    for t in range(1, ROUNDS + 1):
        list(wrapper.configure_train(t, _record(w), ConfigRecord(), _Grid()))
        models = _client_models(w, t)
        arrays, _ = wrapper.aggregate_train(t, _replies(models))
        w = [arrays[k].numpy() for k in _keys()]
        releases.append(w)
        clients.append(models)
    return releases, clients, wrapper


def _noised_means(releases, clients) -> list[list[np.ndarray]]:
    """Independently: w_t + uniform mean of the clipped updates + the seed's noise draw."""
    noise_rng = np.random.default_rng(SEED)
    out = []
    for w, models in zip(releases[:-1], clients):
        deltas = []
        for model in models:
            d = [a.astype(np.float64) - g.astype(np.float64) for a, g in zip(model, w)]
            norm = math.sqrt(sum(float(np.sum(x**2)) for x in d))
            deltas.append([x * min(1.0, C / norm) for x in d])
        mean = [np.mean([d[i] for d in deltas], axis=0) for i in range(len(SHAPES))]
        sigma = Z * C / M
        out.append([g + x + noise_rng.normal(0.0, sigma, x.shape) for g, x in zip(w, mean)])
    return out


def _fedavgm_rule(w0, means, lr: float, beta: float) -> list[list[np.ndarray]]:
    """SGD with heavy-ball momentum on the pseudo-gradient w − mean (no Nesterov)."""
    w, mom, out = [x.astype(np.float64) for x in w0], None, []
    for mean in means:
        pg = [a - b for a, b in zip(w, mean)]
        mom = pg if mom is None else [beta * v + g for v, g in zip(mom, pg)]
        w = [a - lr * v for a, v in zip(w, mom)]
        out.append(w)
    return out


def _fedyogi_rule(w0, means, eta, b1, b2, tau) -> list[list[np.ndarray]]:
    """Yogi (Reddi et al. 2021, Alg. 2) on Δ_t = mean − w, m_0 = v_0 = 0."""
    w = [x.astype(np.float64) for x in w0]
    m = [np.zeros_like(x) for x in w]
    v = [np.zeros_like(x) for x in w]
    out = []
    for mean in means:
        d = [a - b for a, b in zip(mean, w)]
        m = [b1 * a + (1 - b1) * x for a, x in zip(m, d)]
        v = [a - (1 - b2) * x**2 * np.sign(a - x**2) for a, x in zip(v, d)]
        w = [a + eta * mm / (np.sqrt(vv) + tau) for a, mm, vv in zip(w, m, v)]
        out.append(w)
    return out


def _assert_follow(releases, expected) -> None:
    for got, want in zip(releases[1:], expected):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_fedavgm_releases_are_momentum_sgd_on_the_noised_means_and_epsilon_is_reported():
    inner = FedAvgM(server_learning_rate=1.0, server_momentum=0.5, min_available_nodes=1)
    releases, clients, wrapper = _run(inner)
    means = _noised_means(releases, clients)
    _assert_follow(releases, _fedavgm_rule(releases[0], means, lr=1.0, beta=0.5))
    # with momentum the release is NOT the last noised mean (the rule matters) ...
    assert not np.allclose(releases[-1][0], means[-1][0], atol=1e-3)
    # ... and ε is the accountant's, growing round by round
    eps = [r["dp-epsilon"] for r in wrapper.history]
    assert all(math.isfinite(e) and e > 0 for e in eps) and eps == sorted(eps)
    assert "dp-no-epsilon" not in wrapper.round_metrics()


def test_fedyogi_releases_are_yogi_on_the_noised_means_and_epsilon_is_reported():
    inner = FedYogi(eta=0.05, beta_1=0.9, beta_2=0.99, tau=1e-3, min_available_nodes=1)
    releases, clients, wrapper = _run(inner)
    means = _noised_means(releases, clients)
    _assert_follow(releases, _fedyogi_rule(releases[0], means, 0.05, 0.9, 0.99, 1e-3))
    assert math.isfinite(wrapper.round_metrics()["dp-epsilon"])


def test_fedmedian_is_noised_after_its_aggregate_and_reports_no_epsilon():
    releases, clients, wrapper = _run(FedMedian(min_available_nodes=1))
    record = wrapper.round_metrics()
    assert record["dp-no-epsilon"] == NO_EPSILON_NOT_A_MEAN
    assert "dp-epsilon" not in record and record["dp-noised"]
    # the release is the coordinate-wise median of the clipped models plus the seed's noise
    noise_rng = np.random.default_rng(SEED)
    for w, models, out in zip(releases[:-1], clients, releases[1:]):
        clipped = []
        for model in models:
            d = [a.astype(np.float64) - g for a, g in zip(model, w)]
            norm = math.sqrt(sum(float(np.sum(x**2)) for x in d))
            clipped.append([g + x * min(1.0, C / norm) for g, x in zip(w, d)])
        for i, got in enumerate(out):
            med = np.median([c[i] for c in clipped], axis=0)
            want = med + noise_rng.normal(0.0, Z * C / M, med.shape)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("strategy", ["fedavgm", "fedprox", "fedopt", "fedyogi"])
def test_the_run_config_path_reports_epsilon_for_every_mean_strategy(strategy):
    from fedpriv.scenarios.config.specs import run_spec
    from fedpriv.strategies.factory import build_stock_strategy

    cfg = resolve_run_config({"privacy": "global-dp", "strategy": strategy, "num-clients": 3})
    wrapper = build_dp_wrapper(build_stock_strategy(run_spec(cfg).strategy), server_run(cfg), None)
    assert wrapper.noise_first
    list(wrapper.configure_train(1, _record(_client_models([np.zeros(s) for s in SHAPES], 0)[0]),
                                 ConfigRecord(), _Grid()))  # fmt: skip
    base = [wrapper.current_arrays[k].numpy() for k in _keys()]
    arrays, _ = wrapper.aggregate_train(1, _replies(_client_models(base, 1)))
    assert arrays is not None
    assert math.isfinite(wrapper.round_metrics()["dp-epsilon"])
