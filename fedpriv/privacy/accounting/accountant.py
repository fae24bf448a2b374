"""One accountant for every mechanism: compose ``DpEvent`` objects, report ε with its labels.

Each mechanism returns the ``dp_accounting`` event of its round (server-side Gaussian:
:func:`fedpriv.privacy.accounting.events.client_round_event`; a zonal level's Gaussian; DP-SGD's
self-composed Poisson-sampled Gaussian of a client's local training) and one
:class:`PrivacyAccountant` per unit of privacy (a client for client-level DP, an example
of one client for DP-SGD) composes them. ε is reported twice, both upper bounds:

* ``epsilon_pld``: PLD composition (:mod:`fedpriv.privacy.accounting.pld`): the dominating pair
  of every round, discretised pessimistically — tight for Poisson/add-remove and for no
  sampling, the symmetrised Dong–Roth–Su bound for fixed-size sampling/replace-one;
* ``epsilon_rdp``: RDP composition (:mod:`fedpriv.privacy.accounting.rdp`), capped per order;

and ``epsilon`` (the headline) is the smaller of the two, named in ``headline_from``.
Unsampled Gaussian rounds are merged exactly first (k Gaussians with multipliers σ_r are
one with ``(Σ σ_r^-2)^-1/2``); with no sampled round ε is the exact Gaussian value
(:func:`gaussian_epsilon`), no discretization.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import dp_accounting
import numpy as np
from scipy import optimize, special

import fedpriv.privacy.accounting._checks as _checks
import fedpriv.privacy.accounting.pld as pld_mod
import fedpriv.privacy.accounting.rdp as rdp_mod
from fedpriv.privacy.accounting.events import NeighborRel

__all__ = ["EpsilonReport", "PrivacyAccountant", "gaussian_epsilon"]


@dataclass
class EpsilonReport:
    """ε at ``delta`` after ``rounds`` events, with the words that say what it bounds."""

    epsilon: float
    epsilon_pld: float | None
    epsilon_rdp: float
    delta: float
    rounds: int
    headline_from: str
    accountant: str = ""
    adjacency: str = ""
    sampling: str = ""
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON; infinities as the string ``"inf"``."""
        out = asdict(self)
        for key in ("epsilon", "epsilon_pld", "epsilon_rdp"):
            value = out[key]
            if isinstance(value, float) and math.isinf(value):
                out[key] = "inf"
        return out


def _is_plain_gaussian(event: dp_accounting.DpEvent) -> bool:
    return isinstance(event, dp_accounting.GaussianDpEvent)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact ε at δ of the μ-GDP Gaussian mechanism (Balle & Wang 2018, Thm 8).

    ``δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2)`` is decreasing in ε; solved by root finding
    (log-space for the second term). k Gaussian rounds with μ_r compose to μ = √(Σ μ_r²).
    """
    if mu == math.inf:
        return math.inf

    def gap(eps: float) -> float:
        a = special.ndtr(-eps / mu + mu / 2)
        b = math.exp(eps + special.log_ndtr(-eps / mu - mu / 2))
        return a - b - delta

    if gap(0.0) <= 0:
        return 0.0
    hi = 1.0
    while gap(hi) > 0:
        hi *= 2.0
    return float(optimize.brentq(gap, 0.0, hi, xtol=1e-12, rtol=1e-12))


class PrivacyAccountant:
    """Composes round events under one neighbouring relation; see the module docstring.

    ``labels`` (``accountant``, ``adjacency``, ``sampling``, optional ``note``) are copied
    into every :class:`EpsilonReport`. ``compose(event, count)`` accepts Gaussian,
    Poisson-sampled Gaussian (add/remove), WOR-sampled Gaussian (replace-one) and
    ``SelfComposedDpEvent`` of those.
    """

    def __init__(
        self, *, delta: float, relation: NeighborRel, labels: dict[str, str] | None = None
    ) -> None:
        self.delta = _checks.delta(delta)
        if not isinstance(relation, NeighborRel):
            raise ValueError(f"relation = {relation!r} is not allowed; expected a NeighborRel")
        self.relation = relation
        self.labels = dict(labels or {})
        self.counts: Counter[dp_accounting.DpEvent] = Counter()
        self.order: list[dp_accounting.DpEvent] = []
        self.rounds = 0

    def compose(self, event: dp_accounting.DpEvent, count: int = 1) -> PrivacyAccountant:
        """Record ``count`` rounds of ``event`` (a ``SelfComposedDpEvent`` is unpacked)."""
        count = _checks.integer("count", count, lo=0)
        while isinstance(event, dp_accounting.SelfComposedDpEvent):
            event, count = event.event, count * event.count
        if count == 0 or isinstance(event, dp_accounting.NoOpDpEvent):
            return self
        if event not in self.counts:
            self.order.append(event)
        self.counts[event] += count
        self.rounds += count
        return self

    # --- ε ---------------------------------------------------------------------------------

    def _rdp(self) -> np.ndarray:
        total = np.zeros_like(rdp_mod.ORDERS)
        for event, count in self.counts.items():
            total = total + count * rdp_mod.event_rdp(event, self.relation)
        return total

    def _pld_epsilon(self) -> float | None:
        """PLD ε, or None when an event has no PLD construction."""
        gauss_precision = 0.0
        sampled: list[tuple[dp_accounting.DpEvent, int]] = []
        for event, count in self.counts.items():
            if _is_plain_gaussian(event):
                if event.noise_multiplier == 0:
                    return math.inf
                gauss_precision += count / event.noise_multiplier**2
            else:
                sampled.append((event, count))
        if not sampled:  # Gaussians only: exact, no discretization
            return gaussian_epsilon(math.sqrt(gauss_precision), self.delta)
        try:
            width = sum(pld_mod.loss_range(e, k) for e, k in sampled)
            if gauss_precision:
                merged = dp_accounting.GaussianDpEvent(1.0 / math.sqrt(gauss_precision))
                width += pld_mod.loss_range(merged)
            vdi = pld_mod.discretization_for(width)
            parts = [pld_mod.event_pld(e, self.relation, vdi, k) for e, k in sampled]
            if gauss_precision:
                parts.append(pld_mod.event_pld(merged, self.relation, vdi))
        except pld_mod.UnsupportedEvent as err:
            if "noise multiplier 0" in str(err):
                return math.inf
            return None
        composed = parts[0]
        for part in parts[1:]:
            composed = composed.compose(part)
        return float(composed.get_epsilon_for_delta(self.delta))

    def report(self, delta: float | None = None, *, with_pld: bool = True) -> EpsilonReport:
        """ε so far at ``delta`` (default: the accountant's δ); ``with_pld=False``: RDP only."""
        delta = self.delta if delta is None else _checks.delta(delta)
        saved, self.delta = self.delta, delta
        try:
            if not self.counts:
                return EpsilonReport(0.0, 0.0, 0.0, delta, 0, "no rounds", **self._labels())
            eps_rdp = rdp_mod.epsilon_from_rdp(rdp_mod.ORDERS, self._rdp(), delta)
            eps_pld = self._pld_epsilon() if with_pld else None
        finally:
            self.delta = saved
        if eps_pld is not None and eps_pld <= eps_rdp:
            headline, source = eps_pld, "pld"
        else:
            headline, source = eps_rdp, "rdp"
        return EpsilonReport(
            headline, eps_pld, eps_rdp, delta, self.rounds, source, **self._labels()
        )

    def _labels(self) -> dict[str, str]:
        keys = ("accountant", "adjacency", "sampling", "note")
        return {k: self.labels[k] for k in keys if k in self.labels}

    def epsilon(self) -> float:
        """The headline ε (a valid upper bound) at the accountant's δ."""
        return self.report().epsilon
