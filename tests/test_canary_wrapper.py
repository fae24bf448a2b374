"""The canary-inserting Message-API wrapper, on Flower messages, no simulation."""

from __future__ import annotations

import numpy as np
import pytest
from fedpriv.scenarios.config.specs import server_run
from fedpriv.strategies.canaries import CANARY_NODE_ID, CanaryInsertion
from fedpriv.strategies.dp_wrappers import MetricDP, ServerSideFixedClippingDP
from flwr.common import ArrayRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg

from fedpriv.audit.canaries import CanarySet, flatten
from fedpriv.privacy.distance import max_pairwise_layer_distance

SHAPES = [(3, 4), (4,), (5, 2)]


def model(seed: int, scale: float = 1.0, shapes=None) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(scale * rng.normal(size=s)).astype(np.float32) for s in (shapes or SHAPES)]


def replies(models) -> list[Message]:
    out = []
    for i, arrays in enumerate(models):
        content = RecordDict(
            {"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 10})}
        )
        ins = Message(content=content, dst_node_id=100 + i, message_type=MessageType.TRAIN)
        out.append(Message(content=content, reply_to=ins))
    return out


def wrapped(inner, canaries, reference):
    wrapper = CanaryInsertion(inner, canaries=canaries)
    wrapper.current_arrays = ArrayRecord(reference)
    wrapper.models = [reference]
    if hasattr(inner, "current_arrays"):
        inner.current_arrays = ArrayRecord(reference)
    return wrapper


def test_canaries_enter_the_mean_like_average_clients():
    reference = model(0)
    clients = [[g + u for g, u in zip(reference, model(s, 0.1))] for s in (1, 2, 3, 4)]
    canaries = CanarySet(8, 2.0, 0.5, 3, tuple(SHAPES))
    k = int(canaries.included.sum())
    assert 0 < k < 8
    wrapper = wrapped(FedAvg(), canaries, reference)
    arrays, _ = wrapper.aggregate_train(1, replies(clients))
    members = clients + [canaries.model(int(j), reference) for j in canaries.inserted]
    expected = np.mean([flatten(m) for m in members], axis=0)
    assert flatten(arrays.to_numpy_ndarrays()) == pytest.approx(expected, abs=1e-5)
    assert wrapper.round_metrics() == {"audit-canaries-inserted": k, "audit-real-reports": 4}
    assert len(wrapper.models) == 2
    # each canary's update has the configured norm and a unit direction
    for j in canaries.inserted:
        update = flatten(canaries.model(int(j), reference)) - flatten(reference)
        assert np.linalg.norm(update) == pytest.approx(2.0, rel=1e-5)


def test_canaries_are_clipped_and_move_metric_dp_distance():
    reference = model(0)
    clients = [[g + u for g, u in zip(reference, model(s, 0.05))] for s in (1, 2, 3)]
    canaries = CanarySet(6, 50.0, 0.5, 1, tuple(SHAPES))
    metric = MetricDP(
        FedAvg(), noise_multiplier=0.0, clipping_norm=1.0, num_sampled_clients=3,
        distance_on="raw", rng=np.random.default_rng(0),
    )  # fmt: skip
    wrapper = wrapped(metric, canaries, reference)
    wrapper.aggregate_train(1, replies(clients))
    report = metric.round_metrics()
    members = clients + [canaries.model(int(j), reference) for j in canaries.inserted]
    assert report["dp-distance-measured"] == pytest.approx(
        max_pairwise_layer_distance(members), rel=1e-5
    )
    assert report["dp-distance-measured"] > 2 * max_pairwise_layer_distance(clients)
    assert report["dp-num-clipped"] == len(canaries.inserted)  # norm 50 > C = 1


def test_global_dp_noise_reaches_the_model_the_audit_reads():
    reference = model(0)
    clients = [[g + u for g, u in zip(reference, model(s, 0.1))] for s in (1, 2)]
    canaries = CanarySet(6, 5.0, 0.5, 0, tuple(SHAPES))
    dp = ServerSideFixedClippingDP(
        FedAvg(), noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=2,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    wrapper = wrapped(dp, canaries, reference)
    arrays, _ = wrapper.aggregate_train(1, replies(clients))
    assert flatten(wrapper.models[-1]) == pytest.approx(flatten(arrays.to_numpy_ndarrays()))
    assert dp.round_metrics()["dp-sigma"] == pytest.approx(0.5)
    # only the canaries (norm 5 > C = 1) are clipped, and they are reported as canaries
    clipped = dp.round_metrics()["dp-clipped-nodes"]
    assert len(canaries.inserted) > 0 and clipped == [CANARY_NODE_ID] * len(canaries.inserted)


def test_audit_fails_when_the_mechanism_adds_less_noise_than_the_accountant_assumes():
    """The regression check has power: a DP wrapper that adds no noise while the config
    claims z = 10 is caught (lower bound > the accountant's ε for the canary adjacency)."""
    from fedpriv.scenarios.audit.feature import audit_outcome

    cfg = {
        "privacy": "global-dp", "strategy": "fedavg", "noise-multiplier": 10.0,
        "clipping-norm": 1.0, "clients-per-round": 0, "num-clients": 4,
        "num-sampled-clients": 0, "dp-delta": 1e-5, "seed": 0, "audit-canaries": 100,
        "audit-canary-norm": 0.0, "audit-canary-probability": 0.5, "audit-confidence": 0.95,
        "audit-threat-model": "final", "distance-on": "raw", "dp-weighting": "uniform",
        "client-sampling": "fixed",
    }  # fmt: skip
    big = [(100, 50), (50,)]  # 5050 parameters: little cross-talk between 100 canaries
    reference = model(0, shapes=big)
    canaries = CanarySet(100, 1.0, 0.5, 0, tuple(big))
    broken = ServerSideFixedClippingDP(
        FedAvg(), noise_multiplier=0.0, clipping_norm=1.0, num_sampled_clients=4,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    wrapper = wrapped(broken, canaries, reference)
    current = reference
    for rnd in (1, 2):
        clients = [
            [g + u for g, u in zip(current, model(s + 10 * rnd, 0.01, big))] for s in range(4)
        ]
        wrapper.current_arrays = ArrayRecord(current)
        broken.current_arrays = ArrayRecord(current)
        arrays, _ = wrapper.aggregate_train(rnd, replies(clients))
        current = arrays.to_numpy_ndarrays()
    out = audit_outcome(server_run(cfg), wrapper, None, None)
    assert out["epsilon_upper_bound"] < out["epsilon_lower_bound"]
    assert out["audit_failed"] is True
    # the same run with the noise the config claims passes
    cfg_honest = {**cfg, "noise-multiplier": 0.0}
    assert audit_outcome(server_run(cfg_honest), wrapper, None, None)["audit_failed"] is False


def test_canaries_have_a_real_clients_sensitivity_under_fixed_sampling():
    """Beside m clients the global-DP wrapper divides the clipped sum by m (not by
    m + K replies), σ = z·C/m unchanged, and charges the real clients the run's own z; the
    canary accountant is μ = √T/z. Without a privacy wrapper the canaries stay diluted."""
    from fedpriv.audit.audit import canary_upper_bound
    from fedpriv.audit.gaussian_pair import gaussian_mechanism_epsilon

    reference = model(0)
    clients = [[g + u for g, u in zip(reference, model(s, 2.0))] for s in (1, 2, 3, 4)]
    canaries = CanarySet(8, 3.0, 0.5, 3, tuple(SHAPES))
    dp = ServerSideFixedClippingDP(
        FedAvg(), noise_multiplier=0.0, clipping_norm=1.0, num_sampled_clients=4,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    wrapper = wrapped(dp, canaries, reference)
    assert wrapper.denominator == "fixed m" and dp.fixed_denominator
    arrays, _ = wrapper.aggregate_train(1, replies(clients))
    members = clients + [canaries.model(int(j), reference) for j in canaries.inserted]
    deltas = [flatten(m) - flatten(reference) for m in members]
    clipped = [d * min(1.0, 1.0 / np.linalg.norm(d)) for d in deltas]
    expected = flatten(reference) + np.sum(clipped, axis=0) / 4
    assert flatten(arrays.to_numpy_ndarrays()) == pytest.approx(expected, abs=1e-5)
    assert len(members) > 4 and dp.round_metrics()["dp-num-reports"] == len(members)

    diluted = wrapped(FedAvg(), canaries, reference)
    assert diluted.denominator == "all replies"

    bound = canary_upper_bound(
        noise_multiplier=2.0, num_sampled_clients=4, real_reports_per_round=[4] * 9,
        delta=1e-5, fixed_denominator=True,
    )  # fmt: skip
    assert bound["mu"] == pytest.approx(1.5)
    assert bound["epsilon"] == pytest.approx(gaussian_mechanism_epsilon(1.5, 1e-5))


def test_fixed_denominator_charges_the_real_clients_z():
    reference = model(0)
    clients = [[g + u for g, u in zip(reference, model(s, 2.0))] for s in (1, 2)]
    canaries = CanarySet(20, 3.0, 0.5, 3, tuple(SHAPES))
    dp = ServerSideFixedClippingDP(
        FedAvg(), noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=2,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    wrapped(dp, canaries, reference).aggregate_train(1, replies(clients))
    assert dp.round_metrics()["dp-round-noise-multiplier"] == pytest.approx(1.0)
