"""Privacy loss distributions (PLD) of fedpriv's round events, including the one
dp_accounting 0.4.3 cannot compose: the Gaussian sampled **without replacement** under
**replace-one** adjacency.

Subsampled Gaussian, fixed-size sampling without replacement (m of N, q = m/N),
replace-one. Let ``f = G_μ`` be the trade-off function of the unsampled Gaussian (μ = 2C/σ
for the sum, i.e. ``1/noise_multiplier`` of ``GaussianDpEvent(z/2)``). Dong, Roth & Su
(2022, *Gaussian differential privacy*, JRSS-B, Thm 4.2) show the sampled mechanism is
``C_q(f) = min{f_q, f_q^{-1}}**``-DP with ``f_q = q·f + (1−q)·Id`` (datasets of equal
size, one individual replaced). ``f_q`` is the trade-off function of the pair
(``N(0,1)``, ``q·N(μ,1) + (1−q)·N(0,1)``) and ``f_q^{-1}`` the one of the swapped pair: the
two directions of dp_accounting's Poisson-sampled Gaussian (``AdjacencyType.ADD`` and
``REMOVE``). The privacy profile (hockey-stick divergence δ(ε)) of the convex hull of a
minimum is the maximum of the profiles, so one round's symmetric profile is

    δ_round(ε) = max(δ_remove(ε), δ_add(ε))   for every ε,

which we discretise with dp_accounting's pessimistic connect-the-dots
(``pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap``, Doroshenko et al. 2022) into a
*symmetric* PLD and compose round by round (composition of f-DP is the tensor product;
composing the symmetric profile is what avoids the pitfall of composing each direction
separately, Lebeda et al. 2024). The result is an upper bound. Each direction alone is
realisable (all other clients' updates equal −C·e, the changed client's +C·e), so ε of the
composed one-direction PLD is a lower bound; the two are within ~10% in the tested regimes.

Poisson sampling, add/remove-one: dp_accounting's own PLD (both directions composed
separately, then the maximum) is tight for this event.
"""

from __future__ import annotations

import functools
import math

import dp_accounting
import numpy as np
from dp_accounting.pld import pld_pmf, privacy_loss_mechanism
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from fedpriv.privacy.accounting.events import NeighborRel

__all__ = ["event_pld", "discretization_for", "loss_range", "UnsupportedEvent"]

BASE_DISCRETIZATION = 1e-3
MAX_BINS = 1e6
_LOG_MASS_TRUNCATION = -50.0


MAX_MU = 10.0  # beyond μ = 1/σ = 10 per round ε is in the hundreds: RDP only (fast)


class UnsupportedEvent(ValueError):
    """The PLD accountant has no construction for this event (RDP still may)."""


def _gaussian_mu(event: dp_accounting.DpEvent) -> float:
    """μ = sensitivity/σ of the Gaussian inside ``event`` (inf for σ = 0)."""
    base = event
    if isinstance(event, (dp_accounting.PoissonSampledDpEvent,)):
        base = event.event
    elif isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent):
        base = event.event
    if not isinstance(base, dp_accounting.GaussianDpEvent):
        raise UnsupportedEvent(f"event = {event!r} is not a (sampled) Gaussian")
    return math.inf if base.noise_multiplier == 0 else 1.0 / base.noise_multiplier


def loss_range(event: dp_accounting.DpEvent, count: int = 1) -> float:
    """Rough width of the privacy-loss support of ``count`` rounds (sizes the grid).

    Mean + 10 standard deviations of the composed loss: per round the mean is at most
    ``q·μ²/2`` (KL of a q-mixture, by convexity) and the standard deviation at most μ.
    """
    mu = _gaussian_mu(event)
    q = 1.0
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        q = event.sampling_probability
    elif isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent):
        q = event.sample_size / event.source_dataset_size
    return count * q * mu * mu / 2.0 + 10.0 * math.sqrt(count) * mu + 2.0 * mu


def discretization_for(total_range: float) -> float:
    """Value-discretization interval: 1e-3, coarsened so the grid stays <= ~1e6 bins.

    dp_accounting rounds pessimistically, so a coarser grid only loosens ε upward (it
    matters only for tiny noise multipliers, whose ε is huge anyway).
    """
    return max(BASE_DISCRETIZATION, total_range / MAX_BINS)


def _losses(sigma: float, q: float):
    kinds = (privacy_loss_mechanism.AdjacencyType.REMOVE, privacy_loss_mechanism.AdjacencyType.ADD)
    return [
        privacy_loss_mechanism.GaussianPrivacyLoss(
            sigma,
            sensitivity=1.0,
            sampling_prob=q,
            adjacency_type=kind,
            log_mass_truncation_bound=_LOG_MASS_TRUNCATION,
        )
        for kind in kinds
    ]


@functools.lru_cache(maxsize=128)
def symmetric_wor_pmf(sigma: float, q: float, vdi: float) -> pld_pmf.PLDPmf:
    """Symmetric PMF of one round of the WOR-sampled Gaussian under replace-one.

    ``sigma`` is the noise multiplier relative to the replace-one sensitivity (z/2),
    ``q = m/N``. Profile ``max(δ_remove, δ_add)`` on a grid of step ``vdi``, discretised
    by pessimistic connect-the-dots (see the module docstring).
    """
    losses = _losses(sigma, q)
    bounds = [loss.connect_dots_bounds() for loss in losses]
    lo = math.floor(min(b.epsilon_lower for b in bounds) / vdi)
    hi = math.ceil(max(b.epsilon_upper for b in bounds) / vdi)
    grid = np.arange(lo, hi + 1) * vdi
    deltas = np.maximum(
        losses[0].get_delta_for_epsilon(grid), losses[1].get_delta_for_epsilon(grid)
    )
    # The profile is non-increasing; round-off in the far tail is lifted (pessimistic).
    deltas = np.maximum.accumulate(deltas[::-1])[::-1]
    return pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(vdi, lo, hi, deltas)


@functools.lru_cache(maxsize=128)
def _single_pld(
    event: dp_accounting.DpEvent, relation: NeighborRel, vdi: float
) -> pld_lib.PrivacyLossDistribution:
    """PLD of one (possibly sampled) Gaussian event."""
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return pld_lib.from_gaussian_mechanism(
            event.noise_multiplier, value_discretization_interval=vdi
        )
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        if relation != NeighborRel.ADD_OR_REMOVE_ONE:
            raise UnsupportedEvent("Poisson sampling is accounted under add/remove-one only")
        return pld_lib.from_gaussian_mechanism(
            event.event.noise_multiplier,
            value_discretization_interval=vdi,
            sampling_prob=event.sampling_probability,
        )
    if isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent):
        if relation != NeighborRel.REPLACE_ONE:
            raise UnsupportedEvent("sampling without replacement is accounted under replace-one")
        q = event.sample_size / event.source_dataset_size
        pmf = symmetric_wor_pmf(event.event.noise_multiplier, q, vdi)
        return pld_lib.PrivacyLossDistribution(pmf)
    raise UnsupportedEvent(f"event = {event!r} has no PLD construction here")


def event_pld(
    event: dp_accounting.DpEvent, relation: NeighborRel, vdi: float, count: int = 1
) -> pld_lib.PrivacyLossDistribution:
    """PLD of ``count`` rounds of ``event`` (σ > 0; a σ = 0 event has no finite PLD)."""
    if _gaussian_mu(event) == math.inf:
        raise UnsupportedEvent("noise multiplier 0: no privacy (epsilon = inf)")
    if _gaussian_mu(event) > MAX_MU and not isinstance(event, dp_accounting.GaussianDpEvent):
        raise UnsupportedEvent(f"noise multiplier below 1/{MAX_MU:g}: PLD grid too large")
    single = _single_pld(event, relation, vdi)
    return single if count == 1 else single.self_compose(count)
