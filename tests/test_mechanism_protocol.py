"""The mechanism protocol and its placements (:mod:`fedpriv.privacy.protocol`).

* every mechanism of fedpriv satisfies :class:`Mechanism` (constrain, add_noise, event);
* each placement's output equals the formula computed here in plain numpy for a fixed
  Generator (client: clip, then ``N(0, (z·C)²)`` per client; zone: clip, weighted sum /
  (q·W_i), ``N(0, σ_i²)``; central: noise once on the aggregate, ``σ = z·C/m``);
* the zonal paths (in-server :func:`aggregate_round`, zone nodes + :func:`server_step`) and
  the global-DP / metric-DP rounds are bit-identical to the code before the protocol: the
  reference below re-implements that code's arithmetic in numpy (Flower's clip norm, noise
  cast to the layer dtype), and a few values recorded from it (commit 5dee79d) anchor both;
* each placement's privacy event gives the accountant's ε, and for full participation the
  analytic Gaussian mechanism's (Balle & Wang 2018) δ(ε).
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy.stats import norm

from fedpriv.privacy.accounting.accountant import PrivacyAccountant
from fedpriv.privacy.accounting.events import NeighborRel
from fedpriv.privacy.accounting.rdp import ORDERS
from fedpriv.privacy.dp import FixedClippingGaussian, MetricScaledGaussian, round_report
from fedpriv.privacy.protocol import (
    CentralPlacement,
    ClientPlacement,
    GaussianMechanism,
    Mechanism,
    ZonePlacement,
)
from fedpriv.zonal import ZonalPlan, aggregate_round, ldp_client_update
from fedpriv.zonal.accounting import epsilon_at_aggregator
from fedpriv.zonal.release import client_contribution, server_step, zone_release

SHAPES = [(5, 3), (3,), (2, 2)]
Z, C = 1.3, 0.7
SAMPLED = [0, 1, 3, 4, 6, 8]
REL = dict(rtol=1e-12, atol=1e-15)


def _updates(n: int, seed: int) -> dict[int, list[np.ndarray]]:
    """float64 and float32 updates (odd ids), norms around 2 (most are clipped to C)."""
    rng = np.random.default_rng(seed)
    dtype = {0: np.float64, 1: np.float32}
    return {p: [rng.normal(0, 0.5, s).astype(dtype[p % 2]) for s in SHAPES] for p in range(n)}


# --- the pre-protocol arithmetic, re-implemented in numpy --------------------------------------


def _copy(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return np.array(a, copy=True) if np.issubdtype(a.dtype, np.inexact) else a.astype(np.float64)


def _clip(update, c: float) -> tuple[list[np.ndarray], bool]:
    """FlatClip with Flower's norm (per-layer norms in the layer dtype, squares summed)."""
    out = [_copy(a) for a in update]
    total = float(np.sqrt(sum([np.linalg.norm(a.flat) ** 2 for a in out])))
    factor = min(1.0, c / total)
    if factor < 1.0:
        for a in out:
            a *= factor
    return out, factor < 1.0


def _noise(arrays, sigma: float, rng) -> list[np.ndarray]:
    """``a + N(0, σ²)`` layer by layer, the draw cast to the layer dtype first."""
    out = []
    for a in arrays:
        a = _copy(a)
        a += rng.normal(0.0, sigma, a.shape).astype(a.dtype)
        out.append(a)
    return out


def _norm(arrays) -> float:
    """Flat L2 norm, squares added left to right (Python 3.12's sum() compensates)."""
    total = 0.0
    for a in arrays:
        total += float(np.dot(a.ravel(), a.ravel()))
    return math.sqrt(total)


def _reference_round(plan: ZonalPlan, updates, sampled) -> dict:
    """HDP Algorithm 1 lines 12–15 as the code before the protocol computed them."""
    z, c, q = plan.noise_multiplier, plan.clipping_norm, plan.sampling_rate
    total_w = float(sum(plan.weights))
    step = [np.zeros(s) for s in SHAPES]
    zones = []
    for zone, level in enumerate(plan.levels):
        members = [p for p in range(plan.num_clients) if plan.zone_of[p] == zone]
        w_i = float(sum(plan.weights[p] for p in members))
        acc = [np.zeros(s) for s in SHAPES]
        for p in (p for p in members if p in sampled):
            term = updates[p]
            if level == "ldp":
                term = _noise(_clip(term, c)[0], z * c, np.random.default_rng([3, p]))
            elif level in ("hdp", "cdp"):
                term = _clip(term, c)[0]
            for a, layer in zip(acc, term):
                a += float(plan.weights[p]) * np.asarray(layer, np.float64)
        delta = [a / (q * w_i) for a in acc]
        sigma = 0.0
        if level == "hdp":
            sigma = z * c / (q * w_i)
            delta = _noise(delta, sigma, np.random.default_rng([5, zone]))
        zones.append((delta, sigma))
        for s, layer in zip(step, delta):
            s += (w_i / total_w) * layer
    s_sigma, s_norm = 0.0, 0.0
    if "cdp" in plan.levels:
        s_sigma = z * c / (q * total_w)
        noised = _noise(step, s_sigma, np.random.default_rng(11))
        s_norm = _norm([a - b for a, b in zip(noised, step)])
        step = noised
    return {"delta": step, "zones": zones, "server_sigma": s_sigma, "server_noise_norm": s_norm}


PLANS = {
    "ldp": dict(placement="ldp"),
    "hdp": dict(placement="hdp"),
    "cdp": dict(placement="cdp"),
    "mixed": dict(placement="mixed", hdp_fraction=0.34, ldp_fraction=0.33),
    "mixed-samples": dict(
        placement="mixed", hdp_fraction=0.34, ldp_fraction=0.33, weighting="samples",
        num_examples=[10, 40, 25, 5, 30, 20, 15, 50, 35], example_cap=30,
    ),
}  # fmt: skip
# the first and a last element of the step, recorded from the code before the protocol
RECORDED = {
    "ldp": (0.02358178293917975, 0.060529851222851094),
    "hdp": (0.2751754935002067, -0.2116324924901577),
    "cdp": (0.041036635377075706, -0.29227442619389776),
    "mixed": (0.417854568177082, -0.25420795825870046),
}


def _plan(name: str) -> ZonalPlan:
    return ZonalPlan.build(
        num_clients=9, num_zones=3, clients_per_round=6, noise_multiplier=Z, clipping_norm=C,
        **PLANS[name],
    )  # fmt: skip


def _in_server(plan: ZonalPlan, updates):
    sent = {}
    for p in SAMPLED:
        sent[p] = updates[p]
        if plan.level_of(p) == "ldp":
            sent[p], _ = ldp_client_update(
                updates[p], noise_multiplier=Z, clipping_norm=C, rng=np.random.default_rng([3, p])
            )
    return aggregate_round(
        plan,
        sent,
        template=[np.zeros(s) for s in SHAPES],
        zone_rng=lambda zone: np.random.default_rng([5, zone]),
        server_rng=np.random.default_rng(11),
    )


def _zone_nodes(plan: ZonalPlan, updates):
    releases = {}
    for zone, members in enumerate(plan.members):
        clients = [p for p in members if p in SAMPLED]
        terms = [
            client_contribution(
                updates[p], plan.levels[zone], noise_multiplier=Z, clipping_norm=C,
                rng=lambda p=p: np.random.default_rng([3, p]),
            )[0]
            for p in clients
        ]  # fmt: skip
        releases[zone] = zone_release(
            terms, [plan.weights[p] for p in clients], level=plan.levels[zone],
            sampling_rate=plan.sampling_rate, zone_weight=plan.zone_weight(zone),
            noise_multiplier=Z, clipping_norm=C,
            zone_rng=lambda zone=zone: np.random.default_rng([5, zone]),
            template=[np.zeros(s) for s in SHAPES], clients=clients,
        )  # fmt: skip
    step = server_step(
        plan, releases, template=[np.zeros(s) for s in SHAPES], server_rng=np.random.default_rng(11)
    )
    return step, releases


@pytest.mark.parametrize("name", sorted(PLANS))
def test_zonal_paths_are_bit_identical_to_before(name):
    """In-server and zone-node rounds equal the pre-protocol arithmetic bit for bit."""
    plan, updates = _plan(name), _updates(9, 1)
    want = _reference_round(plan, updates, SAMPLED)
    got = _in_server(plan, updates)
    step, releases = _zone_nodes(plan, updates)
    for result in (got, step):
        for a, b in zip(result.delta, want["delta"]):
            assert a.dtype == np.float64 and np.array_equal(a, b)
        assert result.server_sigma == want["server_sigma"]
        assert result.server_noise_norm == want["server_noise_norm"]
    for zone, (delta, sigma) in enumerate(want["zones"]):
        assert got.zones[zone].sigma == releases[zone].sigma == sigma
        assert all(np.array_equal(a, b) for a, b in zip(got.zones[zone].delta, delta))
        assert all(np.array_equal(a, b) for a, b in zip(releases[zone].delta, delta))
        if plan.levels[zone] == "hdp":  # the zone placement's σ is the plan's σ_i
            assert sigma == plan.sigma_zone(zone) > 0
    if "cdp" in plan.levels:
        assert got.server_sigma == plan.sigma_server > 0
    if name in RECORDED:  # recorded on another machine: SIMD paths differ in the last bits
        assert (got.delta[0][0, 0], got.delta[2][1, 1]) == pytest.approx(RECORDED[name], rel=1e-9)


def test_ldp_client_update_is_the_client_placement():
    update = _updates(2, 4)[1]  # float32: the noise is cast to float32 as before
    sent, info = ldp_client_update(
        update, noise_multiplier=Z, clipping_norm=C, rng=np.random.default_rng(8)
    )
    clipped, was = _clip(update, C)
    want = _noise(clipped, Z * C, np.random.default_rng(8))
    assert all(a.dtype == np.float32 and np.array_equal(a, b) for a, b in zip(sent, want))
    assert list(info) == ["update_norm", "clipped", "sigma", "noise_norm"]
    assert info["clipped"] is was is True and info["sigma"] == Z * C
    diff = [np.asarray(a, np.float64) - np.asarray(b, np.float64) for a, b in zip(want, clipped)]
    assert info["noise_norm"] == _norm(diff)
    assert info["update_norm"] == pytest.approx(_norm([a.astype(np.float64) for a in update]))


# --- global DP and metric DP on the server ------------------------------------------------------


def _server_models(m: int = 4):
    ref = [np.full(s, 0.1, np.float32) for s in SHAPES]
    updates = _updates(m, 2)
    return [[r + u.astype(np.float32) for r, u in zip(ref, updates[p])] for p in range(m)], ref


RECORDED_SERVER = {  # noised mean [0][0, 0], recorded before the protocol (Generator(4))
    "global": -0.13714641332626343,
    "metric-clipped": -0.19925561547279358,
    "metric-raw": -0.06242576241493225,
}


@pytest.mark.parametrize("name", sorted(RECORDED_SERVER))
def test_server_rounds_are_bit_identical_to_before(name):
    """Clip to w_g, mean over m, σ = z·C/m (global) or z·C/(m·d) (metric), one draw."""
    kw = dict(noise_multiplier=1.1, clipping_norm=0.9, num_sampled_clients=4)
    if name == "global":
        mech = FixedClippingGaussian(**kw)
    else:
        mech = MetricScaledGaussian(**kw, distance_on=name.split("-")[1])
    models, ref = _server_models()
    rnd = mech.process(models, ref)
    clipped = []
    for model in models:
        delta, _ = _clip([np.subtract(w, g) for w, g in zip(model, ref)], 0.9)
        clipped.append([g + d for g, d in zip(ref, delta)])
    assert all(np.array_equal(a, b) for x, y in zip(rnd.models, clipped) for a, b in zip(x, y))
    d = 1.0 if name == "global" else rnd.info["distance"]
    assert rnd.stdv == float(((1.1 / d) * 0.9) / 4)
    mean = [np.mean([mm[i] for mm in rnd.models], axis=0) for i in range(len(SHAPES))]
    old = _noise(mean, rnd.stdv, np.random.default_rng(4))
    cohort = ([[np.asarray(a) for a in m] for m in models], rnd.models)
    new, metrics = mech.add_noise(mean, denominator=4, rng=np.random.default_rng(4), cohort=cohort)
    stdv_path = mech.add_noise_stdv(mean, rnd.stdv, np.random.default_rng(4))
    for a, b, e in zip(new, stdv_path, old):
        assert a.dtype == np.float32 and np.array_equal(a, e) and np.array_equal(b, e)
    assert metrics["sigma"] == rnd.stdv  # recorded elsewhere (float32): a tolerance, not bits
    assert float(new[0][0, 0]) == pytest.approx(RECORDED_SERVER[name], rel=1e-6)
    legacy = mech.add_noise_stdv(mean, rnd.stdv, np.random.RandomState(4))  # Flower's stream
    assert all(
        np.array_equal(a, b)
        for a, b in zip(legacy, _noise(mean, rnd.stdv, np.random.RandomState(4)))
    )


def test_metric_dp_without_a_cohort_uses_the_largest_sigma():
    mech = MetricScaledGaussian(noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=2)
    _, metrics = mech.add_noise([np.zeros(3)], denominator=2, rng=np.random.default_rng(0))
    assert metrics["fallback"] == "fewer-than-2-clients"
    assert metrics["sigma"] == 1.0 / (2 * mech.min_distance)


# --- the protocol ------------------------------------------------------------------------------


MECHANISMS = {
    "gaussian": lambda: GaussianMechanism(noise_multiplier=Z, clipping_norm=C),
    "global-dp": lambda: FixedClippingGaussian(
        noise_multiplier=Z, clipping_norm=C, num_sampled_clients=3
    ),
    "metric-dp": lambda: MetricScaledGaussian(
        noise_multiplier=Z, clipping_norm=C, num_sampled_clients=3
    ),
}


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_every_mechanism_satisfies_the_protocol(name):
    mech = MECHANISMS[name]()
    assert isinstance(mech, Mechanism)
    update = _updates(1, 3)[0]
    out, metrics = mech.constrain(update)
    assert metrics["clipped"] and _norm(out) == pytest.approx(C, rel=1e-12)
    ref = [np.ones(s) for s in SHAPES]
    moved, metrics = mech.constrain([r + u for r, u in zip(ref, update)], ref)
    assert metrics["clipped"] and _norm([a - r for a, r in zip(moved, ref)]) == pytest.approx(C)
    noised, metrics = mech.add_noise(out, denominator=3, rng=np.random.default_rng(1))
    assert metrics["sigma"] > 0 and metrics["noise_norm"] > 0
    event = mech.event(sampled=3, population=30)
    assert (event is not None) is mech.accountable is (name != "metric-dp")
    with pytest.raises(TypeError):  # a pre-protocol call add_noise(arrays, stdv, rng) fails
        mech.add_noise(out, 0.5, np.random.default_rng(1))  # type: ignore[misc]


def test_round_report_asks_the_mechanism_not_its_class():
    eps = {"epsilon": 1.5, "delta": 1e-5}
    for name, mech in ((n, f()) for n, f in MECHANISMS.items() if n != "gaussian"):
        rep = round_report(mech, stdv=0.1, info={"distance": 2.0}, num_reports=3, noised=True,
                           epsilon=eps)  # fmt: skip
        assert ("dp-epsilon" in rep) is mech.accountable
        assert ("dp-distance" in rep) is (name == "metric-dp")
        assert rep.get("dp-distance") == (2.0 if name == "metric-dp" else None)


def test_placement_takes_a_mechanism_only():
    with pytest.raises(ValueError, match="mechanism"):
        ZonePlacement(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="party"):
        CentralPlacement(GaussianMechanism(noise_multiplier=1, clipping_norm=1)).release(
            [np.zeros(2)], party="cloud", denominator=1.0
        )


# --- each placement against the formula --------------------------------------------------------


def _weighted(terms, weights, den):
    acc = [np.zeros(s) for s in SHAPES]
    for term, w in zip(terms, weights):
        for a, layer in zip(acc, term):
            a += w * np.asarray(layer, np.float64)
    return [a / den for a in acc]


def test_client_placement_noises_each_client():
    """LDP: ``clip(Δ_k, C) + N(0, (z·C)²)`` per client, then the weighted sum, no more noise."""
    updates, weights = list(_updates(3, 5).values()), [1.0, 0.5, 2.0]
    placement = ClientPlacement(GaussianMechanism(noise_multiplier=Z, clipping_norm=C))
    got, metrics = placement.run(updates, weights, denominator=2.0, rng=np.random.default_rng(6))
    draws = np.random.default_rng(6)
    sent = [_noise(_clip(u, C)[0], Z * C, draws) for u in updates]
    for a, b in zip(got, _weighted(sent, weights, 2.0)):
        np.testing.assert_allclose(a, b, **REL)
    assert metrics["sigma"] == 0.0 and metrics["clipped"] == [True, True, True]


def test_zone_placement_noises_the_zone_sum():
    """HDP: ``Σ w_k clip(Δ_k)/(q·W_i) + N(0, σ_i²)``, ``σ_i = z·C/(q·W_i)``."""
    updates, weights, q, w_i = list(_updates(3, 5).values()), [1.0, 0.5, 2.0], 0.4, 5.0
    placement = ZonePlacement(GaussianMechanism(noise_multiplier=Z, clipping_norm=C))
    got, metrics = placement.run(
        updates, weights, denominator=q * w_i, rng=np.random.default_rng(6)
    )
    mean = _weighted([_clip(u, C)[0] for u in updates], weights, q * w_i)
    draws = np.random.default_rng(6)
    sigma = Z * C / (q * w_i)
    for a, b in zip(got, mean):
        np.testing.assert_allclose(a, b + draws.normal(0.0, sigma, b.shape), **REL)
    assert metrics["sigma"] == sigma


def test_central_placement_noises_once_on_the_server():
    """CDP / global DP: the mean of m clipped updates + ``N(0, (z·C/m)²)`` once; the zones
    (``party="zone"``) release their sums as they are."""
    updates, m = list(_updates(4, 7).values()), 4
    placement = CentralPlacement(GaussianMechanism(noise_multiplier=Z, clipping_norm=C))
    got, metrics = placement.run(updates, [1.0] * m, denominator=m, rng=np.random.default_rng(2))
    mean = _weighted([_clip(u, C)[0] for u in updates], [1.0] * m, m)
    draws = np.random.default_rng(2)
    for a, b in zip(got, mean):
        np.testing.assert_allclose(a, b + draws.normal(0.0, Z * C / m, b.shape), **REL)
    assert metrics["sigma"] == Z * C / m
    at_zone, zone_metrics = placement.release(mean, party="zone", denominator=m)
    assert zone_metrics["sigma"] == 0.0 and all(np.array_equal(a, b) for a, b in zip(at_zone, mean))


# --- the privacy event -------------------------------------------------------------------------


LEVEL_OF = {ClientPlacement: "ldp", ZonePlacement: "hdp", CentralPlacement: "cdp"}


@pytest.mark.parametrize("placement", list(LEVEL_OF))
def test_the_event_of_each_placement_is_the_accountants(placement):
    """k = 10 of n = 100 per round, 20 rounds, replace-one: the placement's event composed by
    dp_accounting's RDP accountant gives the zonal accountant's level ε (RDP), and fedpriv's
    accountant on the same event its PLD ε."""
    wrapped = placement(GaussianMechanism(noise_multiplier=1.1, clipping_norm=C))
    event = wrapped.event(sampled=10, population=100)
    assert event == dp_accounting.SampledWithoutReplacementDpEvent(
        100, 10, dp_accounting.GaussianDpEvent(0.55)
    )  # sensitivity 2C (replace-one) against noise z·C on the sum: z/2
    rdp = dp_accounting.rdp.RdpAccountant(list(ORDERS), NeighborRel.REPLACE_ONE)
    plan = ZonalPlan.build(
        num_clients=100, num_zones=5, clients_per_round=10, noise_multiplier=1.1,
        clipping_norm=C, placement=LEVEL_OF[placement],
    )  # fmt: skip
    level = epsilon_at_aggregator(
        plan, round_=20, total_rounds=20, clients_per_round=10, delta=1e-5
    )["level"]
    assert rdp.compose(event, 20).get_epsilon(1e-5) == pytest.approx(level["rdp"], rel=1e-9)
    ours = PrivacyAccountant(delta=1e-5, relation=NeighborRel.REPLACE_ONE).compose(event, 20)
    assert ours.report().epsilon_pld == pytest.approx(level["pld"], rel=1e-6)
    assert 0 < level["pld"] < level["rdp"]


def test_full_participation_event_is_the_analytic_gaussian():
    """All clients every round, replace-one: sensitivity 2C on a sum with noise z·C, so
    μ = 2/z; the analytic δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ) (Balle & Wang 2018) at
    the accountant's ε is δ. Metric DP has no event."""
    z, delta = 2.0, 1e-5
    event = ZonePlacement(GaussianMechanism(noise_multiplier=z, clipping_norm=C)).event(
        sampled=10, population=10
    )
    assert event == dp_accounting.GaussianDpEvent(z / 2)
    eps = PrivacyAccountant(delta=delta, relation=NeighborRel.REPLACE_ONE).compose(event).epsilon()
    mu = 2.0 / z
    analytic = norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu)
    assert analytic == pytest.approx(delta, rel=1e-6)
    metric = MetricScaledGaussian(noise_multiplier=z, clipping_norm=C, num_sampled_clients=10)
    assert metric.round_event(0.1, num_reports=10, sampled=10, population=10) is None
