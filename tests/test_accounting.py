"""Tests for fedpriv.accounting: Gaussian DP over rounds, GP ledger, HDP amplification."""

from __future__ import annotations

import math
import time

import dp_accounting
import pytest
from scipy import optimize, stats

from fedpriv import accounting as A

DELTA = 1e-5


def analytic_gaussian_epsilon(sigma: float, delta: float) -> float:
    """Exact ε of the Gaussian mechanism (sensitivity 1, std σ), Balle & Wang 2018, Thm 8.

    δ(ε) = Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ); solved for ε by root finding.
    """

    def gap(eps: float) -> float:
        a = stats.norm.cdf(0.5 / sigma - eps * sigma)
        b = math.exp(eps + stats.norm.logcdf(-0.5 / sigma - eps * sigma))
        return a - b - delta

    return optimize.brentq(gap, 0.0, 500.0, xtol=1e-12)


# --- known values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("z", "rounds", "sampling", "sigma_eff"),
    [
        (1.0, 1, "poisson", 1.0),  # add/remove: sensitivity C
        (3.0, 10, "poisson", 3.0 / math.sqrt(10)),  # k Gaussians = one with σ/√k
        (2.0, 1, "without-replacement", 1.0),  # replace-one: sensitivity 2C -> z/2
        (4.0, 5, "without-replacement", 2.0 / math.sqrt(5)),
    ],
)
def test_pld_matches_analytic_gaussian_without_sampling(z, rounds, sampling, sigma_eff) -> None:
    report = A.dp_epsilon(z, rounds=rounds, sampled=7, population=7, delta=DELTA, sampling=sampling)
    exact = analytic_gaussian_epsilon(sigma_eff, DELTA)
    assert report.epsilon_pld == pytest.approx(exact, rel=1e-2)
    assert report.epsilon_pld >= exact * (1 - 1e-6)  # PLD rounds pessimistically
    assert report.epsilon_rdp >= exact * (1 - 1e-6)  # RDP is an upper bound
    assert report.rounds == rounds and report.delta == DELTA and report.sampling == sampling


def test_single_gaussian_z1_value() -> None:
    report = A.dp_epsilon(1.0, rounds=1, sampled=1, population=1, delta=DELTA, sampling="poisson")
    assert report.epsilon_pld == pytest.approx(4.377, abs=2e-3)  # Balle-Wang, σ = 1, δ = 1e-5


# --- monotonicity -----------------------------------------------------------------------------


@pytest.mark.parametrize("sampling", A.SAMPLING_MODES)
def test_epsilon_decreases_with_noise_and_grows_with_rounds(sampling: str) -> None:
    kw = dict(sampled=10, population=100, delta=DELTA, sampling=sampling)
    by_z = [A.dp_epsilon(z, rounds=20, **kw) for z in (0.8, 1.0, 1.5, 3.0)]
    for lo, hi in zip(by_z[1:], by_z[:-1]):
        assert lo.epsilon_pld < hi.epsilon_pld and lo.epsilon_rdp < hi.epsilon_rdp
    by_rounds = [A.dp_epsilon(1.0, rounds=r, **kw) for r in (1, 5, 20)]
    for lo, hi in zip(by_rounds[:-1], by_rounds[1:]):
        assert lo.epsilon_pld < hi.epsilon_pld and lo.epsilon_rdp < hi.epsilon_rdp


@pytest.mark.parametrize("sampling", A.SAMPLING_MODES)
def test_sampling_amplification(sampling: str) -> None:
    reports = [
        A.dp_epsilon(1.0, rounds=10, sampled=m, population=100, delta=DELTA, sampling=sampling)
        for m in (5, 20, 60, 100)
    ]
    for lo, hi in zip(reports[:-1], reports[1:]):
        assert lo.epsilon_pld < hi.epsilon_pld and lo.epsilon_rdp < hi.epsilon_rdp


def test_sampling_never_costs_more_than_full_participation() -> None:
    # The WBK19 without-replacement bound alone exceeds the unsampled value near q = 1
    # (62.8 vs ~26 here); the per-order cap keeps sampling <= full participation.
    kw = dict(rounds=100, population=1000, delta=DELTA)
    near_full = A.dp_epsilon(5.0, sampled=999, **kw)
    full = A.dp_epsilon(5.0, sampled=1000, **kw)
    assert near_full.epsilon_rdp <= full.epsilon_rdp * (1 + 1e-12)
    assert near_full.epsilon_rdp < 30


@pytest.mark.parametrize(
    ("z", "sampled", "population", "sampling"),
    [
        (1.0, 10, 100, "poisson"),
        (1.0, 10, 100, "without-replacement"),
        (0.7, 4, 4, "poisson"),
        (0.7, 4, 4, "without-replacement"),
        (2.0, 30, 50, "poisson"),
        (0.01, 4, 4, "without-replacement"),  # MP's z: huge ε, must stay finite and fast
    ],
)
def test_pld_not_above_rdp(z, sampled, population, sampling) -> None:
    start = time.perf_counter()
    r = A.dp_epsilon(
        z, rounds=20, sampled=sampled, population=population, delta=DELTA, sampling=sampling
    )
    assert time.perf_counter() - start < 20
    assert math.isfinite(r.epsilon_pld) and r.epsilon_pld > 0
    assert r.epsilon_pld <= r.epsilon_rdp * (1 + 1e-3)


def test_replace_one_uses_twice_the_sensitivity() -> None:
    wor = A.dp_epsilon(2.0, rounds=3, sampled=5, population=5, delta=DELTA)
    add_remove = A.dp_epsilon(
        1.0, rounds=3, sampled=5, population=5, delta=DELTA, sampling="poisson"
    )
    assert wor.epsilon_pld == pytest.approx(add_remove.epsilon_pld, rel=1e-9)
    assert wor.epsilon_rdp == pytest.approx(add_remove.epsilon_rdp, rel=1e-9)


def test_round_rdp_composes_to_dp_epsilon_and_handles_mixed_rounds() -> None:
    kw = dict(sampled=10, population=100)
    orders, one = A.round_rdp(1.0, **kw)
    direct = A.dp_epsilon(1.0, rounds=7, delta=DELTA, **kw)
    assert A.epsilon_from_rdp(orders, 7 * one, DELTA) == pytest.approx(
        direct.epsilon_rdp, rel=1e-12
    )
    # Mixed rounds (e.g. a round with fewer reports has a smaller z) sit between the extremes.
    _, weak = A.round_rdp(0.5, **kw)
    mixed = A.epsilon_from_rdp(orders, 6 * one + weak, DELTA)
    assert direct.epsilon_rdp < mixed < A.dp_epsilon(0.5, rounds=7, delta=DELTA, **kw).epsilon_rdp
    _, none = A.round_rdp(0.0, **kw)
    assert A.epsilon_from_rdp(orders, none, DELTA) == math.inf


# --- events, notes, fallbacks -----------------------------------------------------------------


def test_round_events_and_what_the_accountants_support() -> None:
    ev = A.gaussian_round_event(1.2, sampled=10, population=100)
    assert isinstance(ev, dp_accounting.SampledWithoutReplacementDpEvent)
    assert (ev.source_dataset_size, ev.sample_size) == (100, 10)
    assert ev.event.noise_multiplier == pytest.approx(0.6)
    assert A.neighboring_relation() is dp_accounting.NeighboringRelation.REPLACE_ONE
    rdp = dp_accounting.rdp.RdpAccountant(neighboring_relation=A.neighboring_relation())
    assert rdp.supports(ev)
    pld = dp_accounting.pld.PLDAccountant(neighboring_relation=A.neighboring_relation())
    # dp_accounting 0.4.3 PLD cannot do sampling without replacement: hence the fallback.
    assert not pld.supports(ev)

    pe = A.gaussian_round_event(1.2, sampled=10, population=100, sampling="poisson")
    assert isinstance(pe, dp_accounting.PoissonSampledDpEvent)
    assert pe.sampling_probability == pytest.approx(0.1) and pe.event.noise_multiplier == 1.2
    full = A.gaussian_round_event(1.2, sampled=100, population=100, sampling="poisson")
    assert isinstance(full, dp_accounting.GaussianDpEvent)


def test_reports_label_the_poisson_approximation() -> None:
    wor = A.dp_epsilon(1.0, rounds=5, sampled=10, population=100, delta=DELTA)
    assert "APPROXIMATION" in wor.accountant_note and "Poisson" in wor.pld_method
    assert "without replacement" in wor.rdp_method
    pois = A.dp_epsilon(1.0, rounds=5, sampled=10, population=100, delta=DELTA, sampling="poisson")
    assert "APPROXIMATION" in pois.accountant_note
    assert pois.epsilon_pld == pytest.approx(wor.epsilon_pld, rel=1e-9)  # same PLD event
    assert pois.epsilon_rdp < wor.epsilon_rdp  # replace-one (2C) is the stricter adjacency
    d = wor.to_dict()
    assert d["sampled"] == 10 and d["population"] == 100 and d["noise_multiplier"] == 1.0


def test_zero_noise_is_infinite_epsilon() -> None:
    r = A.dp_epsilon(0.0, rounds=3, sampled=2, population=10, delta=DELTA)
    assert r.epsilon_pld == math.inf and r.epsilon_rdp == math.inf
    series = A.epsilon_per_round_series(0.0, rounds=3, sampled=2, population=10, delta=DELTA)
    assert [s.epsilon_pld for s in series] == [math.inf] * 3


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        (dict(sampled=11, population=10), "sampled"),
        (dict(sampled=0, population=10), "sampled"),
        (dict(delta=0.0), "delta"),
        (dict(delta=1.0), "delta"),
        (dict(rounds=0), "rounds"),
        (dict(sampling="uniform"), "sampling"),
        (dict(noise_multiplier=-1.0), "noise_multiplier"),
        (dict(noise_multiplier=float("nan")), "noise_multiplier"),
    ],
)
def test_argument_errors(kwargs: dict, word: str) -> None:
    args = dict(noise_multiplier=1.0, rounds=2, sampled=2, population=10, delta=DELTA)
    args.update(kwargs)
    z = args.pop("noise_multiplier")
    with pytest.raises(ValueError, match=word):
        A.dp_epsilon(z, **args)


# --- series -----------------------------------------------------------------------------------


@pytest.mark.parametrize("sampling", A.SAMPLING_MODES)
def test_series_is_cumulative_and_matches_dp_epsilon(sampling: str) -> None:
    kw = dict(sampled=10, population=100, delta=DELTA, sampling=sampling)
    start = time.perf_counter()
    series = A.epsilon_per_round_series(1.1, rounds=100, **kw)
    elapsed = time.perf_counter() - start
    assert elapsed < 15  # ~1 s here; loose for a shared 2-core machine
    assert [s.rounds for s in series] == list(range(1, 101))
    pld = [s.epsilon_pld for s in series]
    rdp = [s.epsilon_rdp for s in series]
    assert all(b >= a for a, b in zip(pld, pld[1:])) and pld[-1] > pld[0]
    assert all(b >= a for a, b in zip(rdp, rdp[1:])) and rdp[-1] > rdp[0]
    for k in (1, 37, 100):
        direct = A.dp_epsilon(1.1, rounds=k, **kw)
        assert series[k - 1].epsilon_rdp == pytest.approx(direct.epsilon_rdp, rel=1e-12)
        assert series[k - 1].epsilon_pld == pytest.approx(direct.epsilon_pld, rel=1e-3)


# --- GP leakage ledger ------------------------------------------------------------------------


def test_laplace_leakage() -> None:
    assert A.laplace_leakage(2, 5.0) == 0.4
    assert A.laplace_leakage(206_590, 1.0) == 206_590.0
    with pytest.raises(ValueError, match="noise_multiplier"):
        A.laplace_leakage(2, 0.0)
    with pytest.raises(ValueError, match="dim"):
        A.laplace_leakage(0, 1.0)


def test_ledger_refuses_past_budget() -> None:
    ledger = A.LeakageLedger(budget=1.0)
    joined = 0
    for _ in range(5):
        if ledger.can_participate(7, 0.4):
            ledger.charge(7, 0.4)
            joined += 1
    assert joined == 2 and ledger.participations[7] == 2
    assert ledger.spent[7] == pytest.approx(0.8)
    assert ledger.remaining(7) == pytest.approx(0.2)
    # Exactly reaching the budget is allowed despite float sums (0.4 * 3 != 1.2 in floats).
    exact = A.LeakageLedger(budget=1.2)
    count = 0
    while exact.can_participate(1, 0.4) and count < 10:
        exact.charge(1, 0.4)
        count += 1
    assert count == 3


def test_ledger_stats_and_unbounded_budget() -> None:
    ledger = A.LeakageLedger()
    assert ledger.stats()["clients"] == 0
    for client, times in ((0, 1), (1, 2), (2, 5)):
        for _ in range(times):
            assert ledger.can_participate(client, 0.4)
            ledger.charge(client, 0.4)
    st = ledger.stats()
    assert st["clients"] == 3 and st["participations"] == 8
    assert st["median"] == pytest.approx(0.8) and st["max"] == pytest.approx(2.0)
    assert st["mean"] == pytest.approx(3.2 / 3) and st["min"] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="budget"):
        A.LeakageLedger(budget=-1.0)
    with pytest.raises(ValueError, match="cost"):
        ledger.charge(0, -0.1)


# --- HDP amplification ------------------------------------------------------------------------


def test_amplified_epsilon_per_placement() -> None:
    kw = dict(num_clients_in_zone=5, num_zones=4)
    assert A.amplified_epsilon(2.0, placement="ldp", **kw) == pytest.approx(2.0 / math.sqrt(20))
    assert A.amplified_epsilon(2.0, placement="client", **kw) == pytest.approx(2.0 / math.sqrt(20))
    assert A.amplified_epsilon(2.0, placement="hdp", **kw) == pytest.approx(1.0)
    assert A.amplified_epsilon(2.0, placement="super-node", **kw) == pytest.approx(1.0)
    assert A.amplified_epsilon(2.0, placement="cdp", **kw) == 2.0
    assert A.amplified_epsilon(2.0, placement="none", **kw) == math.inf
    assert A.amplified_epsilon(2.0, placement="ldp", num_clients=9, **kw) == pytest.approx(2 / 3)
    # Lower placement, more amplification (HDP §IV-C: s < k).
    eps = [A.amplified_epsilon(1.0, placement=p, **kw) for p in ("ldp", "hdp", "cdp")]
    assert eps[0] < eps[1] < eps[2]
    with pytest.raises(ValueError, match="placement"):
        A.amplified_epsilon(1.0, placement="zone", **kw)
    with pytest.raises(ValueError, match="num_zones"):
        A.amplified_epsilon(1.0, placement="hdp", num_clients_in_zone=5, num_zones=0)


def test_hdp_table1_configurations() -> None:
    kw = dict(num_clients_in_zone=4, num_zones=9)  # k = 36
    eps = 3.0
    assert A.hdp_config_epsilon("C1", eps, **kw) == pytest.approx(0.5)
    assert A.hdp_config_epsilon("C2", eps, **kw) == pytest.approx(1.0)
    assert A.hdp_config_epsilon("C4", eps, **kw) == pytest.approx(3.0)
    # C3: β·s zones LDP + (1-β)·s zones HDP; β = 1/3 -> 3 zones of 4 clients, 6 HDP zones.
    c3 = A.hdp_config_epsilon("C3", eps, beta=1 / 3, **kw)
    assert c3 == pytest.approx(eps / math.sqrt(12) + eps / math.sqrt(6))
    assert A.hdp_config_epsilon("C3", eps, beta=0.0, **kw) == pytest.approx(1.0)  # = C2
    assert A.hdp_config_epsilon("C5", eps, alpha=0.25, **kw) == pytest.approx(eps / 3 + eps)
    assert A.hdp_config_epsilon("C6", eps, beta=1 / 9, **kw) == pytest.approx(eps + eps)
    c7 = A.hdp_config_epsilon("C7", eps, alpha=1 / 3, beta=1 / 3, **kw)
    assert c7 == pytest.approx(eps / math.sqrt(12) + eps / math.sqrt(3) + eps)
    with pytest.raises(ValueError, match="alpha"):
        A.hdp_config_epsilon("C7", eps, alpha=0.7, beta=0.5, **kw)
    with pytest.raises(ValueError, match="config"):
        A.hdp_config_epsilon("C8", eps, **kw)
