"""(ε, δ) of the server-side Gaussian mechanism over rounds (SPEC §1, §3.1; MP §6).

Convenience functions over :class:`fedpriv.privacy.accounting.accountant.PrivacyAccountant` for
rounds of :func:`fedpriv.privacy.accounting.events.client_round_event`: ``fixed`` client sampling
(m of N without replacement, replace-one adjacency) or ``poisson`` (add/remove-one). The
headline ``epsilon`` of every report is a valid upper bound; ``accountant``,
``adjacency`` and ``sampling`` say what it bounds.

Reference values (δ = 1e-5), tested in ``tests/test_accounting.py``:

* z = 2, all 20 of 20 clients, 20 rounds: the exact replace-one Gaussian, μ = 2√T/z:
  ε = 28.373;
* z = 1, 10 of 100, 100 rounds, fixed: headline 34.2 (RDP 83.94; realisable lower bounds
  10.5 for the ±C·e mixture pair, 31.4 for the one-direction dominating pair);
* z = 1.1, 100 of 10,000, 1000 rounds, fixed: headline 11.0 (RDP 15.57; realisable 9.8).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import dp_accounting
import numpy as np

import fedpriv.privacy.accounting._checks as _checks
import fedpriv.privacy.accounting.pld as pld_mod
import fedpriv.privacy.accounting.rdp as rdp_mod
from fedpriv.privacy.accounting.accountant import EpsilonReport, PrivacyAccountant, gaussian_epsilon
from fedpriv.privacy.accounting.events import client_round_event, labels_for, relation_for
from fedpriv.privacy.accounting.rounds import GaussianRoundsAccountant

__all__ = [
    "server_accountant",
    "dp_epsilon",
    "epsilon_per_round_series",
    "round_rdp",
    "epsilon_for_noise_multipliers",
]

SERIES_POINTS = 200


def server_accountant(
    *, sampled: int, population: int, delta: float, sampling: str = "fixed", note: str = ""
) -> PrivacyAccountant:
    """An empty accountant labelled for client-level DP with this sampling."""
    sampling = _checks.sampling(sampling)
    labels = labels_for(sampling, sampled, population)
    if note:
        labels["note"] = note
    return PrivacyAccountant(delta=delta, relation=relation_for(sampling), labels=labels)


def dp_epsilon(
    noise_multiplier: float,
    *,
    rounds: int,
    sampled: int,
    population: int,
    delta: float,
    sampling: str = "fixed",
) -> EpsilonReport:
    """ε after ``rounds`` equal rounds with noise multiplier z on the sum (std z·C)."""
    rounds = _checks.integer("rounds", rounds)
    event = client_round_event(
        noise_multiplier, sampled=sampled, population=population, sampling=sampling
    )
    accountant = server_accountant(
        sampled=sampled, population=population, delta=delta, sampling=sampling
    )
    return accountant.compose(event, rounds).report()


def epsilon_for_noise_multipliers(
    noise_multipliers: Sequence[float],
    *,
    sampled: int,
    population: int,
    delta: float,
    sampling: str = "fixed",
) -> EpsilonReport:
    """ε after rounds whose noise multipliers on the sum are given (may differ): the report
    of :func:`fedpriv.privacy.accounting.rounds.epsilon_for_rounds` (one composition path)."""
    setting = dict(sampled=sampled, population=population, delta=delta, sampling=sampling)
    return GaussianRoundsAccountant(**setting).extend(noise_multipliers).report()


def series_rounds(rounds: int, points: int = SERIES_POINTS) -> list[int]:
    """Rounds 1..T, or ``points`` of them (evenly spaced, always the last) when T is larger."""
    rounds = _checks.integer("rounds", rounds)
    if rounds <= points:
        return list(range(1, rounds + 1))
    picked = np.unique(np.linspace(1, rounds, points).round().astype(int))
    return [int(r) for r in picked]


def _pld_series(event, relation, rounds: int, ks: list[int], delta: float) -> list:
    """PLD ε after each k in ``ks`` (None where the PLD is not built)."""
    if isinstance(event, dp_accounting.GaussianDpEvent):
        if event.noise_multiplier == 0:
            return [math.inf] * len(ks)
        return [gaussian_epsilon(math.sqrt(k) / event.noise_multiplier, delta) for k in ks]
    try:
        vdi = pld_mod.discretization_for(pld_mod.loss_range(event, rounds))
        single = pld_mod.event_pld(event, relation, vdi)
    except pld_mod.UnsupportedEvent:
        return [None] * len(ks)
    if len(ks) < rounds:  # sparse points: compose each directly
        return [float(single.self_compose(k).get_epsilon_for_delta(delta)) for k in ks]
    out, current = [], single
    for k in range(1, rounds + 1):
        if k > 1:
            current = current.compose(single)
        out.append(float(current.get_epsilon_for_delta(delta)))
    return out


def epsilon_per_round_series(
    noise_multiplier: float,
    *,
    rounds: int,
    sampled: int,
    population: int,
    delta: float,
    sampling: str = "fixed",
    points: int = SERIES_POINTS,
) -> list[EpsilonReport]:
    """Cumulative ε after each round (after each of :func:`series_rounds` if T > ``points``).

    Same figures as :func:`dp_epsilon` for each k (the one-round PLD composed round by
    round, or directly at sparse points; RDP scaled by k; unsampled rounds exactly).
    """
    delta = _checks.delta(delta)
    rounds = _checks.integer("rounds", rounds)
    sampling = _checks.sampling(sampling)
    event = client_round_event(
        noise_multiplier, sampled=sampled, population=population, sampling=sampling
    )
    relation = relation_for(sampling)
    labels = labels_for(sampling, sampled, population)
    ks = series_rounds(rounds, points)
    one = rdp_mod.event_rdp(event, relation)
    out = []
    for k, eps_pld in zip(ks, _pld_series(event, relation, rounds, ks, delta)):
        eps_rdp = rdp_mod.epsilon_from_rdp(rdp_mod.ORDERS, k * one, delta)
        if eps_pld is not None and eps_pld <= eps_rdp:
            head, source = eps_pld, "pld"
        else:
            head, source = eps_rdp, "rdp"
        out.append(EpsilonReport(head, eps_pld, eps_rdp, delta, k, source, **labels))
    return out


def round_rdp(
    noise_multiplier: float, *, sampled: int, population: int, sampling: str = "fixed"
) -> tuple[np.ndarray, np.ndarray]:
    """``(orders, rdp)`` of one round, capped per order (add vectors to compose rounds)."""
    sampling = _checks.sampling(sampling)
    event = client_round_event(
        noise_multiplier, sampled=sampled, population=population, sampling=sampling
    )
    return rdp_mod.ORDERS.copy(), rdp_mod.event_rdp(event, relation_for(sampling))
