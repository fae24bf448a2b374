"""How much an ε protects: the thresholds a run's ε is labelled by (docs/privacy.md, "What an ε
protects").

(ε, δ)-DP bounds every membership test of one client: TPR <= e^ε · FPR + δ. The bound binds
only for tests run at FPR < e^-ε.

- ε <= 10: no label. Ponomareva et al. 2023 ("How to DP-fy ML", §5.2) call ε <= 1 strong and
  ε <= 10 a reasonable guarantee, the range of published DP deployments.
- 10 < ε <= 100: ``weak``. This is their tier 3: the bound binds only below FPR e^-10 ≈ 4.5e-5.
- ε > 100: ``none``, no meaningful protection. The bound binds only below FPR e^-100 ≈ 4e-44,
  an error rate no experiment can run.
"""

from __future__ import annotations

import math
from typing import Any, Optional

WEAK_EPSILON = 10.0
MEANINGLESS_EPSILON = 100.0
WEAK = "weak"
NONE = "none"
DOC = "docs/privacy.md, What an ε protects"


def protection(epsilon: Any) -> Optional[str]:
    """``"weak"`` for 10 < ε <= 100, ``"none"`` above 100 or ε = ∞, else None (no label, or no
    ε to label)."""
    try:
        value = float(epsilon)
    except (TypeError, ValueError):
        return None
    if math.isnan(value) or value <= WEAK_EPSILON:
        return None
    return WEAK if value <= MEANINGLESS_EPSILON else NONE


def warning(epsilon: Any) -> Optional[str]:
    """One sentence about an ε above a threshold, else None. Example: ``ε = 39.4 > 10: weak
    protection (raise ...)``."""
    label = protection(epsilon)
    if label is None:
        return None
    value = float(epsilon)
    shown = "∞" if math.isinf(value) else f"{value:.3g}"
    if label == WEAK:
        what = f"ε = {shown} > {WEAK_EPSILON:g}: weak protection"
    else:
        what = f"ε = {shown} > {MEANINGLESS_EPSILON:g}: no meaningful protection"
    return f"{what} (raise noise-multiplier; fedpriv epsilon --target-epsilon; see {DOC})"
