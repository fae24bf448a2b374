"""Per-client privacy budgets: each client its own Poisson rate (individualized DP-FedAvg).

Client i owns a budget ε_i. The server samples it each round independently with its own
probability q_i, clips every update to C, sums, adds N(0, (z·C)²) and divides by the expected
count m = round(Σ_i q_i) (a fixed denominator). Client i's round is then the Poisson-sampled
Gaussian ``PoissonSampledDpEvent(q_i, GaussianDpEvent(z))`` (add/remove-one client), and
after r rounds its ε is the r-fold composition (:func:`client_epsilon`, dp_accounting's PLD,
tight for this event). The server picks the largest q_i whose ε after the run's T rounds is
<= ε_i (:func:`sampling_rate_for`, bisection); the client recomputes the same q_i from its own
budget and refuses a message that asks it at a higher rate, and declines to release once its
own ε would pass its budget. Amplification needs the sampling to stay secret (the server's
OS-entropy generator), as for global DP.

**What the accounting assumes, and what the client enforces.** ε_i holds if the server samples
client i honestly (Poisson at q_i, secretly). A client cannot see the sampling, but it can count
its own participations in its lifetime ledger (:mod:`fedpriv.privacy.releases`): it refuses
past :func:`participation_bound` k*, the smallest k with P[Binomial(T, q_i) > k] ≤ β
(:data:`HONEST_TAIL`, 1e-9): honest sampling passes the bound with probability ≥ 1 − β, and a
server that asks the client every round (or replays runs) gets at most k* releases over the
client's lifetime. Against such a server the amplification does not hold; the guarantee is then
the k*-fold composition of ``GaussianDpEvent(z)`` (:func:`worst_case_epsilon`), which the
client also reports. Flower-free.
"""

from __future__ import annotations

import math
from functools import lru_cache

from fedpriv.validation import check_int, check_real

__all__ = [
    "HONEST_TAIL",
    "budget_of",
    "client_epsilon",
    "client_round_event",
    "parse_groups",
    "participation_bound",
    "sampling_rate_for",
    "worst_case_epsilon",
]

RATE_TOLERANCE = 1e-3  # bisection stops at this relative width of q
DISCRETIZATION = 1e-3  # PLD value discretization (pessimistic: an upper bound)
HONEST_TAIL = 1e-9  # β: honest Poisson sampling passes the participation bound w.p. >= 1 - β


def parse_groups(text: str) -> tuple[float, ...]:
    """``"1,3,10"`` -> (1.0, 3.0, 10.0); ValueError (one line) unless every value is > 0."""
    try:
        values = tuple(float(v) for v in str(text).split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or not all(v > 0 and math.isfinite(v) for v in values):
        raise ValueError(
            f"client-epsilon-groups = {text!r} is not allowed; expected comma-separated "
            "floats > 0, e.g. '1,3,10'"
        )
    return values


def budget_of(groups: str, partition: int, own: float = 0.0) -> float:
    """Client ``partition``'s budget: its own ``client-epsilon`` when > 0, else group
    ``partition % len(groups)`` of ``client-epsilon-groups``."""
    if float(own) > 0:
        return float(own)
    values = parse_groups(groups)
    return values[int(partition) % len(values)]


def client_round_event(q: float, noise_multiplier: float):
    """Client i's ``DpEvent`` of one release, sampled or not: ``PoissonSampledDpEvent(q_i,
    GaussianDpEvent(z))``; ``GaussianDpEvent(z)`` at q_i = 1; ``NoOpDpEvent`` at q_i = 0."""
    import dp_accounting

    q = check_real("q", q, lo=0.0, hi=1.0)
    z = check_real("noise_multiplier", noise_multiplier, lo=0.0)
    if q == 0.0:
        return dp_accounting.NoOpDpEvent()
    event = dp_accounting.GaussianDpEvent(z)
    return event if q >= 1.0 else dp_accounting.PoissonSampledDpEvent(q, event)


@lru_cache(maxsize=4096)
def client_epsilon(q: float, noise_multiplier: float, rounds: int, delta: float) -> float:
    """ε after ``rounds`` rounds of ``PoissonSampled(q, Gaussian(z))`` (dp_accounting PLD,
    add/remove-one); 0 for no rounds or q = 0, inf for z = 0."""
    import dp_accounting

    q = check_real("q", q, lo=0.0, hi=1.0)
    z = check_real("noise_multiplier", noise_multiplier, lo=0.0)
    rounds = check_int("rounds", rounds, lo=0)
    if rounds == 0 or q == 0.0:
        return 0.0
    if z == 0.0:
        return math.inf
    event = client_round_event(q, z)
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=DISCRETIZATION)
    return float(accountant.compose(event, rounds).get_epsilon(delta))


@lru_cache(maxsize=1024)
def sampling_rate_for(budget: float, noise_multiplier: float, rounds: int, delta: float) -> float:
    """The largest q in (0, 1] with :func:`client_epsilon` (q, z, T, δ) <= ``budget`` (to
    :data:`RATE_TOLERANCE`, rounded down); ValueError when not even q = 1e-6 fits."""
    budget = check_real("client budget", budget, lo=0.0, lo_open=True)

    def fits(q: float) -> bool:
        return client_epsilon(q, noise_multiplier, rounds, delta) <= budget

    if fits(1.0):
        return 1.0
    lo, hi = 1e-6, 1.0
    if not fits(lo):
        raise ValueError(
            f"client budget = {budget:g} is not allowed with noise-multiplier = "
            f"{noise_multiplier:g} and {rounds} rounds; expected a budget above "
            f"{client_epsilon(lo, noise_multiplier, rounds, delta):.4g} (q = 1e-6)"
        )
    while hi - lo > RATE_TOLERANCE * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def participation_bound(q: float, rounds: int, beta: float = HONEST_TAIL) -> int:
    """k*: the smallest k with P[Binomial(rounds, q) > k] <= ``beta`` (the most releases a
    client sampled honestly at rate q over ``rounds`` rounds makes, but with probability β)."""
    from scipy.stats import binom

    q = check_real("q", q, lo=0.0, hi=1.0)
    rounds = check_int("rounds", rounds, lo=0)
    beta = check_real("beta", beta, lo=0.0, lo_open=True, hi=1.0, hi_open=True)
    for k in range(rounds + 1):
        if float(binom.sf(k, rounds, q)) <= beta:
            return k
    return rounds


def worst_case_epsilon(releases: int, noise_multiplier: float, delta: float) -> float:
    """ε of ``releases`` un-amplified ``GaussianDpEvent(z)`` releases (a server that did not
    sample honestly): the client's guarantee at its participation bound, whatever the sampling."""
    return client_epsilon(1.0, noise_multiplier, releases, delta)
