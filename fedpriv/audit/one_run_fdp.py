"""One-run bounds side by side: ε-DP (Steinke et al. 2023) and f-DP (Mahloujifar et al. 2024).

Same guessing game as :mod:`fedpriv.audit.one_run`: ``m`` canaries, each with a secret bit
``S_j ∈ {−1, +1}`` (uniform), the attacker guesses +1 on its ``r/2`` highest and −1 on its
``r − r/2`` lowest scores, ``v`` of the ``r`` guesses are right.

- **ε-DP bound** (Steinke, Nasr & Jagielski, NeurIPS 2023, Cor. 5.4 / App. D): the largest ε
  for which "(ε, δ)-DP" has p-value < β (:func:`fedpriv.audit.one_run.epsilon_lower_bound`,
  our own implementation).
- **f-DP bound** (Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-Differential Privacy in
  One Run", §4, ``audit_rh_with_cap``): the largest ε for which "the mechanism is as private
  as the Gaussian mechanism whose privacy curve passes through (ε, δ)" (μ-GDP with
  ``μ = 1/σ(ε, δ)``) is rejected at level β. It is a lower bound on ε at δ for a mechanism
  whose privacy curve is Gaussian-shaped — exactly the claim the accountant makes for the
  Gaussian mechanism without subsampling — and close to tight for it. Computed by
  jax-privacy 2.0 (``jax_privacy.auditing._epsilon_one_run_fdp``, the count-level function
  behind ``CanaryScoreAuditor.epsilon_one_run_fdp``; the public method is one-sided only, the
  count function is the paper's and takes two-sided guesses), imported lazily so that
  :mod:`fedpriv` imports without jax.

Multiple testing. Every guess count r of :func:`fedpriv.audit.one_run.guess_counts` is tried
with both statistics; each test runs at ``β / (2·len(counts))`` (Bonferroni over counts and
the two statistics), so the reported best of both holds at confidence ``1 − β``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fedpriv.audit.one_run import (
    DEFAULT_GUESS_FRACTIONS,
    epsilon_lower_bound,
    guess_counts,
    p_value,
)

__all__ = [
    "FDP_METHOD",
    "EPS_METHOD",
    "POWER_FRACTIONS",
    "fdp_epsilon_lower_bound",
    "OneRunBounds",
    "one_run_bounds",
    "exceeds",
    "fdp_one_run_audit",
    "FDP_CLAIM",
]

FDP_METHOD = "Mahloujifar et al. 2024, one-run f-DP (Gaussian trade-off), via jax-privacy"
FDP_CLAIM = (
    "mu-GDP (the Gaussian trade-off curve through (epsilon, delta)); a lower bound on the "
    "(epsilon, delta) of mechanisms whose privacy curve is Gaussian"
)
EPS_METHOD = "Steinke, Nasr & Jagielski 2023, one-run eps-DP (Cor. 5.4, App. D)"
# Guess fractions tuned for many (>= 10^4) canaries: the best r is a few percent of m.
POWER_FRACTIONS = (0.005, 0.01, 0.02, 0.05, 0.1)


def _jax_fdp():
    try:
        from jax_privacy.auditing import _epsilon_one_run_fdp
    except ImportError as exc:  # base install: no jax-privacy
        raise ImportError(
            "the f-DP one-run bound needs jax-privacy (pip install 'fedpriv[simulation]')"
        ) from exc
    return _epsilon_one_run_fdp


def fdp_epsilon_lower_bound(
    m: int, r: int, v: int, *, delta: float, confidence: float = 0.95, floor: float = 0.0
) -> float:
    """Largest ε whose Gaussian trade-off curve (at δ) is rejected by v of r right guesses.

    Returns ``floor`` when the claim at ``floor`` is not rejected (so ``floor = ε_claimed``
    makes this a one-evaluation test of the claim).
    """
    if not 0 <= v <= r <= m or r < 1:
        raise ValueError(f"(m, r, v) = ({m}, {r}, {v}) is not allowed; expected 0 <= v <= r <= m")
    return float(_jax_fdp()(float(floor), int(m), int(r), int(v), 1.0 - confidence, delta))


@dataclass(frozen=True)
class OneRunBounds:
    """Both bounds (each the best over guess counts), their counts, and the best of the two."""

    epsilon_dp: float
    epsilon_fdp: float
    confidence: float
    delta: float
    num_canaries: int
    guesses_dp: int
    correct_dp: int
    guesses_fdp: int
    correct_fdp: int
    guess_counts_tried: tuple[int, ...]

    @property
    def best(self) -> float:
        """The larger of the two bounds (valid at ``confidence``: Bonferroni over both)."""
        return max(self.epsilon_dp, self.epsilon_fdp)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["guess_counts_tried"] = list(self.guess_counts_tried)
        out["best"] = self.best
        out["methods"] = {"epsilon_dp": EPS_METHOD, "epsilon_fdp": FDP_METHOD}
        return out


def _counts(scores: Any, signs: Any, fractions: Sequence[float]) -> list[tuple[int, int]]:
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    truth = np.where(np.asarray(signs).reshape(-1) > 0, 1, -1)
    if truth.size != scores.size or scores.size < 2:
        raise ValueError(
            f"{scores.size} scores and {truth.size} secret bits are not allowed; expected "
            "the same number, at least 2"
        )
    # guesses_from_scores' rule (stable sort, +1 on the r/2 highest, −1 on the rest of r
    # lowest) with one sort for all r: prefix counts of right guesses from each end.
    ranked = truth[np.argsort(scores, kind="stable")]
    low_right = np.concatenate([[0], np.cumsum(ranked == -1)])
    high_right = np.concatenate([[0], np.cumsum(ranked[::-1] == 1)])
    counts = guess_counts(scores.size, fractions)
    return [(r, int(high_right[r // 2] + low_right[r - r // 2])) for r in counts]


def one_run_bounds(
    scores: Any,
    signs: Any,
    *,
    delta: float,
    confidence: float = 0.95,
    fractions: Sequence[float] = POWER_FRACTIONS,
) -> OneRunBounds:
    """ε-DP and f-DP one-run lower bounds from scores and secret bits (+1 / True = in)."""
    pairs = _counts(scores, signs, fractions)
    per_test = 1.0 - (1.0 - confidence) / (2 * len(pairs))
    m = int(np.asarray(scores).size)
    dp, fdp = (0.0, 0, 0), (0.0, 0, 0)
    for r, v in pairs:
        e = epsilon_lower_bound(m, r, v, delta=delta, confidence=per_test)
        f = fdp_epsilon_lower_bound(m, r, v, delta=delta, confidence=per_test)
        dp = max(dp, (e, r, v))
        fdp = max(fdp, (f, r, v))
    return OneRunBounds(
        dp[0], fdp[0], confidence, float(delta), m, dp[1], dp[2], fdp[1], fdp[2],
        tuple(r for r, _ in pairs),
    )  # fmt: skip


def exceeds(
    scores: Any,
    signs: Any,
    epsilon: float,
    *,
    delta: float,
    confidence: float = 0.95,
    fractions: Sequence[float] = POWER_FRACTIONS,
) -> bool:
    """Whether :func:`one_run_bounds`' best would exceed ``epsilon`` (one test per bound).

    Equivalent to ``one_run_bounds(...).best > epsilon`` (both bounds are monotone in ε) but
    needs no search: the ε-DP claim is rejected iff its p-value at ε is < β, the f-DP claim
    iff the f-DP search starting at ε moves above it.
    """
    pairs = _counts(scores, signs, fractions)
    beta = (1.0 - confidence) / (2 * len(pairs))
    m = int(np.asarray(scores).size)
    for r, v in pairs:
        if p_value(m, r, v, epsilon, delta) < beta:
            return True
        if fdp_epsilon_lower_bound(m, r, v, delta=delta, confidence=1 - beta, floor=epsilon) > (
            epsilon
        ):
            return True
    return False


def fdp_one_run_audit(
    scores: Any,
    signs: Any,
    *,
    delta: float,
    confidence: float = 0.95,
    fractions: Sequence[float] = DEFAULT_GUESS_FRACTIONS,
) -> dict[str, Any]:
    """The f-DP bound alone, Bonferroni over the guess counts (each at β/len(counts)).

    The figure ``fedpriv audit`` reports beside its ε-DP bound: a lower bound on the ε of a
    Gaussian privacy curve (μ-GDP), so it is compared with an accountant only where that
    accountant's claim is a Gaussian curve (global DP without client sampling).
    """
    pairs = _counts(scores, signs, fractions)
    per_test = 1.0 - (1.0 - confidence) / len(pairs)
    m = int(np.asarray(scores).size)
    best = max(
        (fdp_epsilon_lower_bound(m, r, v, delta=delta, confidence=per_test), r, v) for r, v in pairs
    )
    return {
        "epsilon_lower_bound": best[0],
        "confidence": confidence,
        "delta": float(delta),
        "num_canaries": m,
        "num_guesses": best[1],
        "num_correct": best[2],
        "guess_counts_tried": [r for r, _ in pairs],
        "method": FDP_METHOD,
        "claim_tested": FDP_CLAIM,
    }
