"""A privacy budget: stop before ε passes ``max-epsilon``; the noise that meets a target ε.

:class:`EpsilonBudget` answers "ε if one more round is charged" against an accountant that
composes ``DpEvent`` s (:class:`fedpriv.privacy.accounting.rounds.GaussianRoundsAccountant`): a
round is allowed only when the cumulative headline ε *after* it stays <= ``max_epsilon``, so the
reported ε of a run that honours the answer never exceeds the budget.

:func:`smallest_noise_multiplier` inverts a decreasing ε(z) by bisection: the smallest z
(to a relative tolerance) with ε(z) <= target — ``fedpriv epsilon --target-epsilon``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["EpsilonBudget", "smallest_noise_multiplier", "REL_TOL"]

REL_TOL = 1e-3  # bisection stops when (hi - lo) <= REL_TOL * hi / 2
Z_MAX = 1e6  # no z above this is searched (ε of z = 1e6 is ~0 for any practical run)


@dataclass(frozen=True)
class EpsilonBudget:
    """``max_epsilon`` > 0: no round may be charged whose ε after it would exceed it."""

    max_epsilon: float

    def __post_init__(self) -> None:
        value = self.max_epsilon
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"max_epsilon = {value!r} is not allowed; expected a float > 0")
        if not math.isfinite(value):
            raise ValueError(f"max_epsilon = {value!r} is not allowed; expected a finite float")

    def message(self, server_round: int, epsilon: float) -> str:
        """The one-line reason a run stops (round records, summary.json, the log)."""
        return (
            f"max-epsilon {self.max_epsilon:g} would be exceeded at round {server_round} "
            f"(epsilon {epsilon:.4g})"
        )

    def check(self, accountant: Any, event: Any, server_round: int) -> Optional[str]:
        """None when charging ``event`` keeps ε <= max_epsilon; else :meth:`message`.

        ``accountant`` is left unchanged (``epsilon_if`` composes on a copy).
        """
        epsilon = float(accountant.epsilon_if(event))
        if epsilon <= self.max_epsilon:
            return None
        return self.message(server_round, epsilon)


def _bracket(epsilon_of: Callable[[float], float], target: float) -> tuple[float, float]:
    """(lo, hi) with ε(lo) > target >= ε(hi) (lo = 0 when ε(z) <= target for every z > 0)."""
    hi = 1.0
    while epsilon_of(hi) > target:
        hi *= 2.0
        if hi > Z_MAX:
            raise ValueError(f"target epsilon {target:g} needs a noise multiplier above {Z_MAX:g}")
    lo = hi / 2.0
    while epsilon_of(lo) <= target:
        hi, lo = lo, lo / 2.0
        if lo < 1e-9:
            return 0.0, hi
    return lo, hi


def smallest_noise_multiplier(
    epsilon_of: Callable[[float], float], target: float, *, rel_tol: float = REL_TOL
) -> tuple[float, float]:
    """The smallest z with ε(z) <= ``target`` (within ``rel_tol``), and ε(z).

    ε(z) is decreasing in z (more noise, less privacy loss). Bisection keeps
    ε(lo) > target >= ε(hi) and stops when ``hi − lo <= rel_tol·hi/2``; it returns hi, so
    ε(z) <= target and every z' <= z·(1 − rel_tol) has ε(z') > target.
    """
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not target > 0:
        raise ValueError(f"target epsilon = {target!r} is not allowed; expected a float > 0")
    if not math.isfinite(target):
        raise ValueError(f"target epsilon = {target!r} is not allowed; expected a finite float")
    if not 0 < rel_tol < 1:
        raise ValueError(f"rel_tol = {rel_tol!r} is not allowed; expected a float in (0, 1)")
    lo, hi = _bracket(epsilon_of, float(target))
    while hi - lo > rel_tol * hi / 2.0:
        mid = (lo + hi) / 2.0
        if epsilon_of(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi, float(epsilon_of(hi))
