"""GP's leakage ledger (SPEC §3.4; GP §3.2, Thm 3.1): a HEURISTIC, not an (ε, δ) guarantee.

Each participation of a client in Laplace-sanitising IFCA adds ``ρ ~ Laplace_ε`` in R^n with
``ε = n/(ν‖δ‖₂)`` and charges the "leakage" ``ε‖δ‖₂ = n/ν``; leakages add (GP Thm 3.1).
What this number is and is not:

* it is GP's d-privacy figure *relative to the scale ‖δ‖* of the client's own update: ε is
  computed from the private ‖δ‖ (a data-dependent scale), so the released vector's noise
  level is itself a function of the data; the noise norm (E‖ρ‖ = n/ε = ν‖δ‖) reveals ‖δ‖
  to within a few percent. No neighbouring relation on data sets is fixed in advance, so
  it is not differential privacy and not a formal d-privacy guarantee either;
* it is reported as ``leakage (heuristic, relative to the data-dependent scale ‖δ‖)`` and
  never as ε. Budgets (:class:`LeakageLedger`) cap this heuristic count per client.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from fedpriv.privacy.accounting._checks import integer as _integer
from fedpriv.privacy.accounting._checks import number as _number

__all__ = ["LEAKAGE_LABEL", "laplace_leakage", "LeakageLedger"]

LEAKAGE_LABEL = (
    "GP leakage n/nu per participation: a heuristic relative to the data-dependent scale "
    "||delta|| of the client's own update (GP section 3.2), not an (epsilon, delta) or formal "
    "d-privacy guarantee"
)


def laplace_leakage(dim: int, noise_multiplier: float) -> float:
    """GP §3.2: the heuristic leakage of one participation, ``ε‖δ‖₂ = n/ν`` (see module doc).

    ``dim`` = n parameters, ``noise_multiplier`` = ν > 0 (ν = 0 means no sanitization and
    no finite guarantee: refused here, handle it before calling).
    """
    n = _integer("dim", dim)
    nu = _number("noise_multiplier", noise_multiplier, lo_open=True)
    return n / nu


@dataclass
class LeakageLedger:
    """Per-client heuristic leakage ledger of GP (§3.2, Thm 3.1: leakages of participations add).

    ``budget`` is the per-client cap (``inf`` = none). A client checks
    :meth:`can_participate` before releasing parameters and :meth:`charge` s the cost when
    it does (GP §4.1: "whether to participate ... can be decided right before releasing").
    """

    budget: float = math.inf
    spent: dict[int, float] = field(default_factory=dict)
    participations: dict[int, int] = field(default_factory=dict)

    _REL_TOL = 1e-9

    def __post_init__(self) -> None:
        if isinstance(self.budget, bool) or not isinstance(self.budget, (int, float)):
            raise ValueError(f"budget = {self.budget!r} is not allowed; expected a number >= 0")
        if math.isnan(self.budget) or self.budget < 0:
            raise ValueError(f"budget = {self.budget!r} is not allowed; expected a number >= 0")
        self.budget = float(self.budget)

    @staticmethod
    def _cost(cost: Any) -> float:
        return _number("cost", cost)

    def remaining(self, client: int) -> float:
        """Budget left for ``client`` (``inf`` without a budget)."""
        return self.budget - self.spent.get(client, 0.0)

    def can_participate(self, client: int, cost: float) -> bool:
        """True iff ``spent + cost <= budget`` (relative tolerance 1e-9 for float sums)."""
        cost = self._cost(cost)
        if math.isinf(self.budget):
            return True
        total = self.spent.get(client, 0.0) + cost
        return total <= self.budget + self._REL_TOL * max(1.0, self.budget)

    def charge(self, client: int, cost: float) -> None:
        """Record one participation of ``client`` costing ``cost`` (no budget check here)."""
        cost = self._cost(cost)
        self.spent[client] = self.spent.get(client, 0.0) + cost
        self.participations[client] = self.participations.get(client, 0) + 1

    def stats(self) -> dict[str, float | int]:
        """Leakage over clients that participated: median, max, mean, min, plus counts.

        GP Table 1 reports the median and maximum over clients.
        """
        values = [self.spent[c] for c, n in self.participations.items() if n > 0]
        total = int(sum(self.participations.values()))
        if not values:
            return {
                "clients": 0,
                "participations": total,
                "median": 0.0,
                "max": 0.0,
                "mean": 0.0,
                "min": 0.0,
            }
        return {
            "clients": len(values),
            "participations": total,
            "median": float(statistics.median(values)),
            "max": float(max(values)),
            "mean": float(statistics.fmean(values)),
            "min": float(min(values)),
        }
