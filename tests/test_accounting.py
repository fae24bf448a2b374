"""Tests for fedpriv.privacy.accounting: the headline ε is a valid upper bound, one
event accountant, capped RDP, GP leakage ledger, HDP amplification."""

from __future__ import annotations

import math
from collections import defaultdict

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import optimize, stats

from fedpriv.privacy import accounting as A

DELTA = 1e-5


def exact_gaussian_epsilon(mu: float, delta: float) -> float:
    """ε of the μ-GDP Gaussian (Balle & Wang 2018, Thm 8), by root finding:
    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)."""

    def gap(eps: float) -> float:
        a = stats.norm.cdf(-eps / mu + mu / 2)
        b = math.exp(eps + stats.norm.logcdf(-eps / mu - mu / 2))
        return a - b - delta

    return optimize.brentq(gap, 0.0, 500.0, xtol=1e-12)


def mixture_pair_lower_bound(z: float, q: float, rounds: int, delta: float) -> float:
    """Independent lower bound: a realisable pair, composed ``rounds`` times.

    Every other update 0; the changed client's clipped update −C·e (one data set) or +C·e
    (the neighbour), included with probability q; noise std z·C on the sum (C = 1). The
    two output laws P = (1−q)N(0, z²) + qN(−1, z²), Q = (1−q)N(0, z²) + qN(1, z²) are
    tabulated on a fine grid and their privacy loss rounded DOWN (optimistic), so the
    composed ε is below the true ε of this pair, itself below the mechanism's ε.
    """
    x = np.linspace(-1 - 12 * z, 1 + 12 * z, 400_001)
    p = (1 - q) * stats.norm.pdf(x, 0, z) + q * stats.norm.pdf(x, -1, z)
    r = (1 - q) * stats.norm.pdf(x, 0, z) + q * stats.norm.pdf(x, 1, z)
    p, r = p / p.sum(), r / r.sum()
    vdi = 1e-4
    pmf: dict[int, float] = defaultdict(float)
    for k, mass in zip(np.floor(np.log(p / r) / vdi).astype(int), p):
        pmf[int(k)] += float(mass)
    one = pld_pmf.create_pmf(dict(pmf), vdi, 0.0, pessimistic_estimate=False)
    return float(one.self_compose(rounds).get_epsilon_for_delta(delta))


def one_direction_lower_bound(z: float, q: float, rounds: int, delta: float) -> float:
    """A stronger realisable pair: all other updates −C·e, the changed one +C·e.

    Then one output is N(0, z²) every round and the other (1−q)N(0, z²) + qN(2, z²):
    dp_accounting's Poisson-form Gaussian with sensitivity 2C, *one* direction (both data
    sets exist, so each direction's composition is attained), optimistic rounding.
    """
    pld = pld_lib.from_gaussian_mechanism(
        z, sensitivity=2.0, sampling_prob=q, pessimistic_estimate=False,
        value_discretization_interval=1e-3, use_connect_dots=False,
    )  # fmt: skip
    return float(pld.self_compose(rounds).get_epsilon_for_delta(delta))


# --- headline between the realisable lower bound and RDP ----------------------------------------


@pytest.mark.parametrize(
    ("z", "sampled", "population", "rounds", "rdp_value"),
    [(1.0, 10, 100, 100, 83.94), (1.1, 100, 10_000, 1000, 15.57)],
)
def test_fixed_sampling_headline_between_lower_bound_and_rdp(
    z, sampled, population, rounds, rdp_value
) -> None:
    report = A.dp_epsilon(z, rounds=rounds, sampled=sampled, population=population, delta=DELTA)
    q = sampled / population
    issue_pair = mixture_pair_lower_bound(z, q, rounds, DELTA)
    stronger = one_direction_lower_bound(z, q, rounds, DELTA)
    assert report.epsilon_rdp == pytest.approx(rdp_value, abs=0.01)
    assert issue_pair < stronger < report.epsilon < report.epsilon_rdp
    assert report.epsilon == report.epsilon_pld and report.headline_from == "pld"
    assert report.epsilon < 1.25 * stronger  # and close to what is attained
    # the old headline (Poisson / add-remove PLD) is below the realisable lower bound
    poisson = A.dp_epsilon(
        z, rounds=rounds, sampled=sampled, population=population, delta=DELTA, sampling="poisson"
    )
    assert poisson.epsilon < stronger
    assert "replace-one" in report.adjacency and "without replacement" in report.sampling
    assert "add/remove" in poisson.adjacency and "Poisson" in poisson.sampling


def test_all_clients_sampled_equals_exact_replace_one_gaussian() -> None:
    report = A.dp_epsilon(2.0, rounds=20, sampled=20, population=20, delta=DELTA)
    exact = exact_gaussian_epsilon(2 * math.sqrt(20) / 2.0, DELTA)
    assert exact == pytest.approx(28.373, abs=5e-4)
    assert report.epsilon == pytest.approx(exact, rel=1e-4)
    assert report.epsilon >= exact * (1 - 1e-9)  # pessimistic rounding
    assert report.sampling.startswith("none")


@pytest.mark.parametrize("sampling", ["fixed", "poisson"])
def test_no_sampling_matches_analytic_gaussian(sampling: str) -> None:
    sens = 2.0 if sampling == "fixed" else 1.0
    report = A.dp_epsilon(4.0, rounds=5, sampled=7, population=7, delta=DELTA, sampling=sampling)
    assert report.epsilon == pytest.approx(
        exact_gaussian_epsilon(sens * math.sqrt(5) / 4, DELTA), rel=1e-3
    )


def test_poisson_pld_is_dp_accountings_exact_event() -> None:
    event = dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.0))
    acc = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(event, 50)
    ours = A.dp_epsilon(1.0, rounds=50, sampled=10, population=100, delta=DELTA, sampling="poisson")
    assert ours.epsilon == pytest.approx(acc.get_epsilon(DELTA), rel=2e-3)


# --- composition of unequal rounds, one accountant ---------------------------------------------


def test_unequal_rounds_do_not_jump() -> None:
    kw = dict(sampled=4, population=4, delta=DELTA)
    equal = A.epsilon_for_noise_multipliers([1.0] * 20, **kw)
    one_lower = A.epsilon_for_noise_multipliers([1.0] * 19 + [0.99], **kw)
    assert equal.epsilon_rdp == pytest.approx(81.1, abs=0.05)
    assert equal.epsilon_rdp < one_lower.epsilon_rdp < equal.epsilon_rdp + 0.5  # was 100.1
    assert equal.epsilon < one_lower.epsilon < equal.epsilon + 0.5
    sampled = dict(sampled=10, population=100, delta=DELTA)
    a = A.epsilon_for_noise_multipliers([1.0] * 20, **sampled)
    b = A.epsilon_for_noise_multipliers([1.0] * 19 + [0.99], **sampled)
    assert a.epsilon_rdp < b.epsilon_rdp < a.epsilon_rdp + 0.5
    orders, one = A.round_rdp(1.0, **{k: sampled[k] for k in ("sampled", "population")})
    assert A.epsilon_from_rdp(orders, 20 * one, DELTA) == pytest.approx(a.epsilon_rdp)


def test_weighted_aggregation_effective_noise_multiplier() -> None:
    weights = [0.35, 0.15, 0.40, 0.10]  # MP non-IID example counts, normalised
    z_eff = A.effective_noise_multiplier(1.0, weights, 4)
    assert z_eff == pytest.approx(0.625)
    assert A.effective_noise_multiplier(1.0, [1, 1, 1, 1], 4) == 1.0
    assert A.effective_noise_multiplier(1.0, [1, 1, 1], 4) == pytest.approx(0.75)  # underfilled
    kw = dict(rounds=20, sampled=4, population=4, delta=DELTA)
    assert A.dp_epsilon(1.0, **kw).epsilon == pytest.approx(77.3, abs=0.05)
    assert A.dp_epsilon(z_eff, **kw).epsilon == pytest.approx(162.6, abs=0.1)


def test_accountant_composes_mixed_events_and_labels() -> None:
    acc = A.server_accountant(sampled=10, population=100, delta=DELTA)
    for z in (1.0, 1.0, 2.0):
        acc.compose(A.client_round_event(z, sampled=10, population=100))
    acc.compose(
        dp_accounting.SelfComposedDpEvent(A.client_round_event(1.0, sampled=10, population=100), 2)
    )
    report = acc.report()
    assert report.rounds == 5
    ref = A.epsilon_for_noise_multipliers([1, 1, 1, 1, 2], sampled=10, population=100, delta=DELTA)
    assert report.epsilon == pytest.approx(ref.epsilon, rel=1e-9)
    assert report.to_dict()["accountant"].startswith("PLD of the dominating pair")
    zero = A.server_accountant(sampled=1, population=1, delta=DELTA)
    zero.compose(A.client_round_event(0.0, sampled=1, population=1))
    assert zero.epsilon() == math.inf and zero.report().to_dict()["epsilon"] == "inf"


def test_monotone_in_noise_rounds_and_sampling() -> None:
    kw = dict(population=100, delta=DELTA)
    by_z = [A.dp_epsilon(z, rounds=5, sampled=10, **kw).epsilon for z in (0.8, 1.0, 2.0)]
    assert by_z[0] > by_z[1] > by_z[2]
    by_m = [A.dp_epsilon(1.0, rounds=5, sampled=m, **kw).epsilon for m in (5, 20, 100)]
    assert by_m[0] < by_m[1] < by_m[2]
    series = A.epsilon_per_round_series(1.0, rounds=5, sampled=10, **kw)
    values = [r.epsilon for r in series]
    assert values == sorted(values)
    assert values[-1] == pytest.approx(A.dp_epsilon(1.0, rounds=5, sampled=10, **kw).epsilon)


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        (dict(z=-1.0), "noise_multiplier"),
        (dict(rounds=0), "rounds"),
        (dict(sampled=11), "sampled"),
        (dict(delta=1.0), "delta"),
        (dict(sampling="bernoulli"), "sampling"),
    ],
)
def test_argument_errors(kwargs: dict, word: str) -> None:
    args = dict(rounds=3, sampled=2, population=10, delta=DELTA)
    z = kwargs.pop("z", 1.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=word):
        A.dp_epsilon(z, **args)


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


def test_the_package_loads_dp_accounting_only_for_the_names_built_on_it():
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys\n"
        "from fedpriv.privacy.accounting import LeakageLedger, laplace_leakage, SAMPLING_MODES\n"
        "print('dp_accounting' in sys.modules)\n"
        "from fedpriv.privacy.accounting import dp_epsilon\n"
        "print('dp_accounting' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()  # fmt: skip
    assert out == ["False", "True"]
    assert all(getattr(A, name) is not None for name in A.__all__)
    assert A.gaussian_round_event is A.client_round_event
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        A.nothing  # noqa: B018
