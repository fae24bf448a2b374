"""The ``DpEvent`` of one round of a client-level Gaussian mechanism, and its labels.

Every mechanism of fedpriv describes what it spent in a round as a ``dp_accounting``
``DpEvent`` (the tensorflow-privacy ``dp_query`` convention); one
:class:`fedpriv.privacy.accounting.accountant.PrivacyAccountant` composes them. This module builds
the events of the server-side Gaussian mechanism (SPEC §3.1, MP §6) and names the
accountant, the adjacency and the sampling that every reported ε carries.

Setting: the noise std on the *sum* of C-clipped client updates is ``z·C`` (``σ = z·C/m``
on the mean of m updates). Two client-sampling schemes (``client-sampling``):

* ``fixed`` (Flower's default, m of N without replacement): the honest relation is
  **replace-one** (the population has a fixed size; one client's data is replaced). The
  sum's L2 sensitivity is **2C** (old and new update may point in opposite directions), so
  the event is ``GaussianDpEvent(z/2)`` relative to that sensitivity, wrapped in
  ``SampledWithoutReplacementDpEvent(N, m, ·)`` when m < N.
* ``poisson`` (each client joins a round independently with q = m/N): **add/remove-one**
  adjacency, sensitivity C: ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``. For this
  event the PLD accountant is tight (Zhu, Dong & Wang 2022).

Weighted aggregation: if the aggregate is ``Σ w_i·Δ_i`` with weights w (Σ w = 1) instead of
the uniform mean, client i's contribution has sensitivity ``w_i·C`` on the mean, i.e.
``m·w_i·C`` relative to σ = z·C/m: the noise multiplier of the round is
``z/(m·w_max)`` (:func:`effective_noise_multiplier`); uniform weights give z.
"""

from __future__ import annotations

from collections.abc import Sequence

import dp_accounting

import fedpriv.privacy.accounting._checks as _checks

__all__ = [
    "NeighborRel",
    "client_round_event",
    "relation_for",
    "effective_noise_multiplier",
    "labels_for",
    "ACCOUNTANT_LABEL",
]

NeighborRel = dp_accounting.NeighboringRelation

ACCOUNTANT_LABEL = (
    "PLD of the dominating pair (dp_accounting PLD, pessimistic connect-the-dots) and "
    "RDP (dp_accounting RdpAccountant); the headline is the smaller, both are upper bounds"
)


def relation_for(sampling: str) -> NeighborRel:
    """Replace-one for ``fixed`` sampling, add/remove-one for ``poisson``."""
    if _checks.sampling(sampling) == "fixed":
        return NeighborRel.REPLACE_ONE
    return NeighborRel.ADD_OR_REMOVE_ONE


def client_round_event(
    noise_multiplier: float, *, sampled: int, population: int, sampling: str = "fixed"
) -> dp_accounting.DpEvent:
    """The ``DpEvent`` of one round (z = noise std on the sum / C), see the module docstring."""
    z = _checks.number("noise_multiplier", noise_multiplier)
    sampled, population = _checks.population(sampled, population)
    if _checks.sampling(sampling) == "fixed":
        base = dp_accounting.GaussianDpEvent(z / 2.0)
        if sampled < population:
            return dp_accounting.SampledWithoutReplacementDpEvent(population, sampled, base)
        return base
    base = dp_accounting.GaussianDpEvent(z)
    if sampled < population:
        return dp_accounting.PoissonSampledDpEvent(sampled / population, base)
    return base


def effective_noise_multiplier(
    noise_multiplier: float, weights: Sequence[float] | None, num_sampled: int
) -> float:
    """``z/(m·w_max)``: the noise multiplier the largest aggregation weight leaves.

    ``weights`` are the round's aggregation weights (normalised here; None or all equal:
    the uniform mean, which gives z). σ = z·C/m is calibrated to the uniform mean of m
    updates; a client weighted w contributes ``w·Δ`` with ‖w·Δ‖ <= w·C, so relative to σ its
    noise multiplier is ``(z·C/m)/(w·C) = z/(m·w)`` (MP non-IID, w_max = 0.40, m = 4:
    0.625·z). With n < m reports the uniform weight 1/n gives ``z·n/m`` (the underfilled
    round of :class:`fedpriv.privacy.dp.FixedClippingGaussian`).
    """
    z = _checks.number("noise_multiplier", noise_multiplier)
    m = _checks.integer("num_sampled", num_sampled)
    if not weights:
        return z
    values = [_checks.number("weight", w) for w in weights]
    total = sum(values)
    if total <= 0.0:
        raise ValueError(f"weights = {list(weights)!r} are not allowed; expected a positive sum")
    w_max = max(values) / total
    return z / (m * w_max)


def labels_for(sampling: str, sampled: int, population: int) -> dict[str, str]:
    """``{"accountant", "adjacency", "sampling"}`` words reported next to every ε."""
    sampling = _checks.sampling(sampling)
    sampled, population = _checks.population(sampled, population)
    if sampling == "poisson":
        adjacency = "add/remove-one client (client level; sum sensitivity C)"
        how = (
            "none (every client every round)"
            if sampled == population
            else f"Poisson, each client independently with q = {sampled}/{population}"
        )
    else:
        adjacency = "replace-one client (client level; sum sensitivity 2C)"
        how = (
            "none (every client every round)"
            if sampled == population
            else f"fixed size without replacement, {sampled} of {population} per round"
        )
    return {"accountant": ACCOUNTANT_LABEL, "adjacency": adjacency, "sampling": how}
