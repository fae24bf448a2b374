"""Secure aggregation inside HDP's zones (``zonal-secagg``; HDP §IV, §V's square-root note).

* the zone node's view: each masked client vector is uniform on Z_m (chi-square on its top
  byte, KS on value/m) even when every client sends zeros; the unmasked sum equals the plain
  modular sum of the quantised (noisy) vectors exactly, with up to n − t sampled clients
  dropped after sharing their keys, and fewer than t survivors cannot be unmasked;
* the quantisation error is negligible at the default width (≤ 2^−31 per coordinate and
  client): with no noise the SecAgg zone step equals the plain one in both runtimes;
* an HDP zone's noise under SecAgg is the clients' shares: its std is σ_i when nobody drops;
* ε against the zone node: HDP's is ∞ without SecAgg and the sum-level Gaussian (z, no
  sampling amplification) with it, equal to dp_accounting's figures; LDP's rises to z√t_min;
  the paper's heuristic loses its square roots;
* an hdp-paper-shaped seeded run (softmax regression on digits, 20 clients in 4 zones, 8 per
  round, HDP) reaches the same accuracy with and without SecAgg, within a band.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedpriv.privacy.distributed import quantize
from fedpriv.privacy.distributed.secagg import InsufficientShares
from fedpriv.zonal import ZonalPlan, aggregate_round, epsilon_at_aggregator, zone_release
from fedpriv.zonal.accounting import epsilon_against_zone_node
from fedpriv.zonal.secure_sum import (
    ZoneSecAgg,
    decode_fixed_point,
    encode_fixed_point,
    flatten,
    secure_zone_sum,
    secure_zone_total,
)


def _entropy(seed: int):
    rng = np.random.default_rng(seed)
    return lambda n: rng.bytes(n)


def _ring_sum(vectors, bits: int) -> np.ndarray:
    total = np.zeros_like(vectors[0])
    for v in vectors:
        total = total + v
    return total & np.uint64((1 << bits) - 1)


# --- the zone node's view ---------------------------------------------------------------------


def test_each_masked_vector_is_uniform_on_z_m_even_for_zero_updates():
    settings = ZoneSecAgg()
    size, n = 4096, 5
    zeros = [np.zeros(size, np.uint64)] * n
    view = secure_zone_sum(zeros, [10, 11, 12, 13, 14], settings, entropy=_entropy(1))
    m = float(2**settings.bits)
    for y in view.masked.values():
        top = (y >> np.uint64(settings.bits - 8)).astype(np.int64)  # the top byte: 256 bins
        counts = np.bincount(top, minlength=256)
        assert stats.chisquare(counts).pvalue > 1e-4
        assert stats.kstest(y.astype(np.float64) / m, "uniform").pvalue > 1e-4
        low = (y & np.uint64(255)).astype(np.int64)  # and the low byte
        assert stats.chisquare(np.bincount(low, minlength=256)).pvalue > 1e-4
    assert not np.any(view.ring_sum)  # and yet the zeros sum to zero exactly


@pytest.mark.parametrize("dropped", [(), (12,), (11, 14, 16)])
def test_unmasked_sum_is_the_plain_sum_of_the_survivors_with_up_to_n_minus_t_drops(dropped):
    settings = ZoneSecAgg(dropouts=3)
    clients = [10, 11, 12, 13, 14, 15, 16]  # n = 7, t = max(7 - 3, 4) = 4
    assert settings.threshold(len(clients)) == 4
    rng = np.random.default_rng(2)
    terms = [[rng.normal(0, 0.3, (8, 5)), rng.normal(0, 0.3, 5)] for _ in clients]
    template = [np.zeros((8, 5)), np.zeros(5)]
    weights = list(rng.uniform(0.2, 1.0, len(clients)))
    z, c = 0.7, 0.5
    seed_of = {p: 100 + p for p in clients}
    view, share_std = secure_zone_total(
        terms,
        weights,
        clients,
        settings,
        level="hdp",
        noise_multiplier=z,
        clipping_norm=c,
        share_rng=lambda p: np.random.default_rng(seed_of[p]),
        template=template,
        drop=dropped,
        entropy=_entropy(3),
    )
    survivors = [p for p in clients if p not in dropped]
    assert view.survivors == survivors and view.dropped == sorted(dropped)
    # the plain quantised noisy vectors, rebuilt from the same draws
    encoded = {}
    for p, term, w in zip(clients, terms, weights):
        noise = np.random.default_rng(seed_of[p]).normal(0.0, z * c / 2.0, size=45)  # z*C/sqrt(4)
        encoded[p] = encode_fixed_point(w * flatten(term) + noise, settings, len(clients))
    plain = _ring_sum([encoded[p] for p in survivors], settings.bits)
    np.testing.assert_array_equal(view.ring_sum, plain)  # exactly, in Z_m
    assert set(view.masked) == set(survivors)  # a dropped client's y never arrived
    for p in survivors:
        assert not np.array_equal(view.masked[p], encoded[p])
    decoded = decode_fixed_point(view.ring_sum, settings)
    want = sum(
        w * flatten(term) + np.random.default_rng(seed_of[p]).normal(0.0, z * c / 2.0, 45)
        for p, term, w in zip(clients, terms, weights)
        if p in survivors
    )
    assert np.max(np.abs(decoded - want)) <= len(survivors) * 2.0**-31
    assert share_std == pytest.approx(z * c * math.sqrt(len(survivors) / 4))


def test_fewer_than_t_survivors_cannot_unmask():
    settings = ZoneSecAgg(dropouts=3)
    encoded = [np.arange(16, dtype=np.uint64)] * 7
    with pytest.raises(InsufficientShares):
        secure_zone_sum(encoded, list(range(7)), settings, drop=(0, 1, 2, 3))  # 3 < t = 4


def test_a_vector_that_would_wrap_the_ring_is_refused():
    with pytest.raises(ValueError, match="fit Z_m"):
        encode_fixed_point(np.array([2.0**30]), ZoneSecAgg(), 4)
    assert quantize.MAX_BITS == ZoneSecAgg().bits


# --- the zone step in both runtimes -----------------------------------------------------------


def _plan(placement: str, z: float = 0.0, weighting_counts=None) -> ZonalPlan:
    return ZonalPlan.build(
        num_clients=12,
        num_zones=3,
        clients_per_round=6,
        noise_multiplier=z,
        clipping_norm=1.0,
        placement=placement,
        weighting="samples" if weighting_counts else "uniform",
        num_examples=weighting_counts,
    )


def _updates(parts, seed=4):
    rng = np.random.default_rng(seed)
    return {p: [rng.normal(0, 0.4, (6, 3)), rng.normal(0, 0.4, 3)] for p in parts}


@pytest.mark.parametrize("placement", ["none", "hdp", "cdp"])
def test_in_server_zone_sums_equal_the_plain_ones_without_noise(placement):
    plan = _plan(placement, weighting_counts=[5, 9, 12, 3, 7, 10, 4, 8, 11, 6, 2, 9])
    updates = _updates([0, 1, 2, 5, 6, 9, 10, 11])
    template = [np.zeros((6, 3)), np.zeros(3)]
    kw = dict(template=template, zone_rng=np.random.default_rng, server_rng=np.random.default_rng())
    plain = aggregate_round(plan, updates, **kw)
    secure = aggregate_round(plan, updates, secure=ZoneSecAgg(), **kw)
    for a, b in zip(plain.delta, secure.delta):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-8)
    assert [z.secagg for z in secure.zones] == [
        {"cohort": 3, "threshold": 3, "survivors": 3},
        {"cohort": 2, "threshold": 2, "survivors": 2},
        {"cohort": 3, "threshold": 3, "survivors": 3},
    ]
    assert "secagg" not in plain.zones[0].to_dict()


def test_zone_node_release_equals_the_plain_one_and_drops_are_left_out():
    template = [np.zeros((6, 3)), np.zeros(3)]
    terms = list(_updates(range(4)).values())
    common = dict(
        level="cdp",
        sampling_rate=0.5,
        zone_weight=4.0,
        noise_multiplier=0.0,
        clipping_norm=1.0,
        zone_rng=np.random.default_rng,
        template=template,
    )
    plain = zone_release(terms, [1.0] * 4, clients=[0, 1, 2, 3], **common)
    secure = zone_release(
        terms, [1.0] * 4, clients=[0, 1, 2, 3], secure=ZoneSecAgg(dropouts=1), **common
    )
    for a, b in zip(plain.delta, secure.delta):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-8)
    dropped = zone_release(
        terms, [1.0] * 4, clients=[0, 1, 2, 3], secure=ZoneSecAgg(dropouts=1), drop=[2], **common
    )
    three = zone_release(
        [terms[i] for i in (0, 1, 3)], [1.0] * 3, clients=[0, 1, 3], **common
    )  # the plain sum of the survivors, over the same fixed denominator
    for a, b in zip(three.delta, dropped.delta):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-8)
    assert dropped.clients == [0, 1, 3] and dropped.secagg.dropped == [2]


def test_hdp_noise_under_secagg_is_the_clients_shares_with_std_sigma_i():
    """No client drops (d = 0, t = n): the shares sum to σ_i on Δ(i), as the zone noise does
    without SecAgg; the zone aggregator adds nothing itself."""
    plan = _plan("hdp", z=0.8)
    zeros = {p: [np.zeros((60, 50)), np.zeros(50)] for p in (0, 1, 2, 3)}  # zone 0 holds 0..3
    template = [np.zeros((60, 50)), np.zeros(50)]
    result = aggregate_round(
        plan,
        zeros,
        template=template,
        zone_rng=lambda z: pytest.fail("the zone aggregator must not draw noise"),
        server_rng=np.random.default_rng(),
        secure=ZoneSecAgg(),
        share_rng=lambda z: np.random.default_rng(7 + z),
        supernodes={0: 0, 1: None, 2: None},
    )
    zone0 = result.zones[0]
    assert zone0.sigma == pytest.approx(plan.sigma_zone(0))
    got = flatten(zone0.delta).std()
    assert got == pytest.approx(plan.sigma_zone(0), rel=0.03)  # 3,050 draws


# --- ε against the zone node ------------------------------------------------------------------


def _dp_accounting_epsilon(z: float, rounds: int, delta: float) -> tuple[float, float]:
    """(PLD, RDP) ε of the Gaussian with multiplier z composed ``rounds`` times, straight from
    dp_accounting (no sampling). Replace-one adjacency, as fedpriv's zonal figures: two
    clipped updates differ by up to 2C, so the event is dp_accounting's Gaussian with
    multiplier z/2 (its unit-sensitivity convention)."""
    import dp_accounting
    from dp_accounting import pld, rdp

    from fedpriv.privacy.accounting import rdp as fedpriv_rdp

    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z / 2.0), rounds)
    pld_eps = pld.PLDAccountant().compose(event).get_epsilon(delta)
    rdp_eps = rdp.RdpAccountant(list(fedpriv_rdp.ORDERS)).compose(event).get_epsilon(delta)
    return pld_eps, rdp_eps


def _exact_gaussian_epsilon(mu: float, delta: float) -> float:
    """Balle & Wang 2018 Thm 8: the ε at δ of μ-GDP, by bisection (independent of fedpriv)."""
    from scipy.stats import norm

    def delta_of(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)

    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if delta_of(mid) > delta else (lo, mid)
    return hi


@pytest.mark.parametrize("z", [1.0, 2.5])
def test_epsilon_against_the_zone_node_is_the_sum_level_gaussian(z):
    plan = ZonalPlan.build(
        num_clients=20, num_zones=4, clients_per_round=8, noise_multiplier=z, clipping_norm=0.5
    )
    rounds, delta = 6, 1e-5
    without = epsilon_against_zone_node(
        plan, round_=rounds, total_rounds=rounds, delta=delta, secure_aggregation=False
    )
    assert without["epsilon"]["hdp"] == {"pld": math.inf, "rdp": math.inf}
    with_sa = epsilon_against_zone_node(
        plan, round_=rounds, total_rounds=rounds, delta=delta, secure_aggregation=True
    )
    assert with_sa["noise_multiplier"] == {"hdp": z}
    pld_eps, rdp_eps = _dp_accounting_epsilon(z, rounds, delta)
    got = with_sa["epsilon"]["hdp"]
    assert got["rdp"] == pytest.approx(rdp_eps, rel=1e-9)
    assert got["pld"] == pytest.approx(min(pld_eps, rdp_eps), rel=1e-3)
    exact = _exact_gaussian_epsilon(2.0 * math.sqrt(rounds) / z, delta)  # replace-one μ
    assert exact <= got["pld"] <= exact * 1.01  # a bound, and a tight one


def test_ldp_against_the_zone_node_gains_sqrt_t_and_the_heuristic_loses_its_roots():
    plan = ZonalPlan.build(
        num_clients=20, num_zones=4, clients_per_round=8, noise_multiplier=1.0,
        clipping_norm=0.5, placement="ldp",
    )  # fmt: skip
    eps = epsilon_at_aggregator(
        plan, round_=3, total_rounds=3, clients_per_round=8, delta=1e-5,
        secure_aggregation=True, min_cohort=5, secagg_dropouts=1,
    )  # fmt: skip
    t_min = ZoneSecAgg(dropouts=1).threshold(5)  # 4
    assert eps["against_zone_node"]["noise_multiplier"] == {"ldp": pytest.approx(math.sqrt(t_min))}
    _, rdp_eps = _dp_accounting_epsilon(math.sqrt(t_min), 3, 1e-5)
    assert eps["against_zone_node"]["epsilon"]["ldp"]["rdp"] == pytest.approx(rdp_eps, rel=1e-9)
    level = eps["level"]["rdp"]
    assert eps["aggregator_heuristic"]["rdp"] == pytest.approx(level / math.sqrt(8))  # ε/√k
    assert eps["aggregator_heuristic_secagg"]["rdp"] == pytest.approx(level / 8)  # ε/k
    plain = epsilon_at_aggregator(plan, round_=3, total_rounds=3, clients_per_round=8, delta=1e-5)
    assert "aggregator_heuristic_secagg" not in plain
    assert plain["against_zone_node"]["noise_multiplier"] == {"ldp": 1.0}


# --- an hdp-paper-shaped seeded run, with and without SecAgg -----------------------------------


def _softmax_grad(theta, x, y):
    logits = x @ theta
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    return x.T @ p / len(y)


def _hdp_run(secure: ZoneSecAgg | None, seed: int) -> float:
    """Softmax regression on digits: 20 clients in 4 zones, 8 sampled per round, HDP noise
    (z = 0.5, C = 0.5), 5 local SGD steps at 0.5, 15 rounds (HDP §VII's shape, small)."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = np.hstack([data.data / 16.0, np.ones((len(data.data), 1))])
    y = data.target
    order = np.random.default_rng(0).permutation(len(y))
    x, y = x[order], y[order]
    x_test, y_test, x, y = x[1400:], y[1400:], x[:1400], y[:1400]
    shards = np.array_split(np.arange(len(y)), 20)
    plan = ZonalPlan.build(
        num_clients=20, num_zones=4, clients_per_round=8, noise_multiplier=0.5, clipping_norm=0.5
    )
    theta = np.zeros((65, 10))
    rng = np.random.default_rng(seed)
    for r in range(15):
        sampled = sorted(rng.choice(20, 8, replace=False).tolist())
        updates = {}
        for p in sampled:
            local = theta.copy()
            for _ in range(5):
                local -= 0.5 * _softmax_grad(local, x[shards[p]], y[shards[p]])
            updates[p] = [local - theta]
        result = aggregate_round(
            plan,
            updates,
            template=[theta],
            zone_rng=lambda z, r=r: np.random.default_rng([seed, r, z, 1]),
            server_rng=np.random.default_rng([seed, r, 2]),
            secure=secure,
            share_rng=lambda z, r=r: np.random.default_rng([seed, r, z, 3]),
        )
        theta = theta + result.delta[0]
    return float(np.mean(np.argmax(x_test @ theta, axis=1) == y_test))


def test_hdp_accuracy_is_unchanged_by_secagg_in_zones():
    plain = [_hdp_run(None, s) for s in (0, 1)]
    secure = [_hdp_run(ZoneSecAgg(), s) for s in (0, 1)]
    assert min(plain) > 0.6  # the model learns through the HDP noise
    assert abs(np.mean(plain) - np.mean(secure)) <= 0.05


# --- the zone node (the real ClientApp) -------------------------------------------------------


def test_a_zone_node_with_secagg_replies_the_plain_zone_sum_and_owns_the_key(tmp_path):
    """A cdp zone node (clip, no zone noise) replies the same θ + Δ(i) with and without
    SecAgg inside it (the fixed-point error is far below float32's); the node owns
    ``zonal-secagg``: a message that sets another value than its own is refused."""
    from fedpriv.clients.keras_client import federated_data, initial_weights
    from fedpriv.scenarios.app.client_app import app
    from fedpriv.scenarios.app.wire_config import DIGEST_KEY, digest
    from fedpriv.scenarios.config.registry import resolve_run_config
    from fedpriv.scenarios.config.specs import data_spec, train_spec
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict

    from fedpriv.privacy.ownership import REFUSED_CODE
    from fedpriv.privacy.releases import STATE_DIR_KEY

    base = {
        "scenario": "hdp-digits", "noise-placement": "cdp", "num-clients": 6, "num-zones": 2,
        "clients-per-round": 6, "local-epochs": 1, "num-server-rounds": 2,
        "reproducible-noise": False,
    }  # fmt: skip
    plain_cfg = resolve_run_config(base)
    secure_cfg = resolve_run_config({**base, "zonal-secagg": True})
    weights = initial_weights(train_spec(plain_cfg), federated_data(data_spec(plain_cfg)))

    def ask(run_config, node_config, folder, **extra):
        sent = {"client-task": "zone-node", "privacy": "zonal", "zonal-clients": [0, 1, 2]}
        sent.update({key.replace("_", "-"): value for key, value in extra.items()})
        config = ConfigRecord({**sent, "server-round": 1, DIGEST_KEY: digest(run_config)})
        msg = Message(
            RecordDict({"arrays": ArrayRecord(weights), "config": config}), 1, MessageType.TRAIN
        )
        node = {"partition-id": 0, STATE_DIR_KEY: str(tmp_path / folder)}
        return app(msg, Context(1, 1, node, RecordDict(), node_config))

    plain = ask(plain_cfg, plain_cfg, "plain")
    secure = ask(secure_cfg, secure_cfg, "secure")
    assert not plain.has_error() and not secure.has_error(), (plain.error, secure.error)
    for a, b in zip(
        plain.content["arrays"].to_numpy_ndarrays(), secure.content["arrays"].to_numpy_ndarrays()
    ):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    unmasked = ask(secure_cfg, secure_cfg, "asked", zonal_secagg=False)  # "send it in the clear"
    assert unmasked.has_error() and unmasked.error.code == REFUSED_CODE
    assert "zonal-secagg" in unmasked.error.reason


def test_the_in_server_strategy_sums_each_zone_through_secagg():
    """ZonalAggregation (``zonal-runtime = in-server``) with SecAgg and no noise == Flower's
    FedAvg on the same replies; each zone's round is recorded (cohort, threshold, survivors)."""
    from fedpriv.strategies.zonal import ZonalAggregation
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.serverapp.strategy import FedAvg

    from tests.test_zonal import SHAPES, FakeGrid

    grid = FakeGrid(12)
    plan = ZonalPlan.build(
        num_clients=12, num_zones=3, clients_per_round=6, noise_multiplier=0.0,
        clipping_norm=1e6, placement="hdp",
    )  # fmt: skip
    common = dict(min_train_nodes=1, min_evaluate_nodes=1, min_available_nodes=1)
    strategy = ZonalAggregation(FedAvg(**common), plan=plan, seed=0, secure=ZoneSecAgg())
    rng = np.random.default_rng(7)
    glob = [rng.normal(size=sh).astype(np.float32) for sh in SHAPES]
    grid.offer([0, 1, 2, 3, 9, 10])
    sent = list(strategy.configure_train(1, ArrayRecord(glob), ConfigRecord({"a": 1}), grid))
    replies = []
    for msg in sent:
        new = [g + rng.normal(scale=0.1, size=g.shape).astype(np.float32) for g in glob]
        metrics = MetricRecord({"num-examples": 10, "train-loss": 1.0})
        replies.append(
            Message(RecordDict({"arrays": ArrayRecord(new), "metrics": metrics}), reply_to=msg)
        )
    arrays, _ = strategy.aggregate_train(1, replies)
    stock, _ = FedAvg(**common).aggregate_train(1, replies)
    for a, b in zip(arrays.to_numpy_ndarrays(), stock.to_numpy_ndarrays()):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    zones = strategy.round_metrics()["zonal"]["zones"]
    assert zones["0"]["secagg"] == {"cohort": 4, "threshold": 4, "survivors": 4}
    assert "secagg" not in zones["1"]  # nobody sampled: no cohort
