"""A privacy plan's headline in a few lines: what ``fedpriv epsilon`` and ``fedpriv show`` print.

The plan is the dict of :func:`fedpriv.privacy.accounting.planning.privacy_plan` (the figures
before training, SPEC §5: the accountant's ε after the config's rounds, an upper bound, or why
there is none). The headline keeps what a reader decides on: the mode, ε with δ and the
rounds, the worst case the config allows, adjacency and sampling, and whom the noise
protects against. ``fedpriv epsilon --json`` prints the whole plan.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fedpriv.privacy.accounting.strength import warning
from fedpriv.privacy.modes import ModeError, get
from fedpriv.reporting.console import num
from fedpriv.reporting.runlog import from_json_number

WIDTH = 11  # the label column


def _first_sentence(text: str) -> str:
    """``text`` up to its first full stop (a plan's heuristic note is several sentences)."""
    return text.split(". ")[0].rstrip(".")


def epsilon_text(plan: Mapping[str, Any]) -> str:
    """ε, δ and rounds (an upper bound), ∞ without a mechanism, or why there is no ε."""
    eps = from_json_number(plan.get("epsilon"))
    if eps is not None and math.isinf(eps):
        return "∞ (no privacy mechanism)"
    if eps is not None:
        rounds = plan.get("rounds")
        after = f" after {rounds} rounds" if rounds is not None else ""
        bound = f", {plan['headline_from']} accountant" if plan.get("headline_from") else ""
        return f"{num(eps)} (δ {num(plan.get('delta'))}){after}: an upper bound{bound}"
    why = plan.get("heuristic") or "; ".join(str(n) for n in plan.get("notes") or ())
    return f"none ({_first_sentence(str(why))})" if why else "none"


def _against(mode: Any) -> str:
    try:
        return get(str(mode)).against
    except ModeError:
        return ""


def plan_headline(plan: Mapping[str, Any]) -> list[str]:
    """The headline block of a privacy plan: one ``label  value`` line per figure."""
    rows = [("mode", plan.get("mode")), ("epsilon", epsilon_text(plan))]
    eps = from_json_number(plan.get("epsilon"))
    if eps is not None and not math.isinf(eps):  # ∞: the mode adds no noise (said above)
        rows.append(("warning", warning(eps)))
    worst = from_json_number(plan.get("epsilon_worst_case"))
    if worst is not None:
        rows.append(("worst case", f"ε {num(worst)} (every outcome the config allows)"))
    amplified = from_json_number(plan.get("epsilon_with_sampling_amplification"))
    if amplified is not None:
        rows.append(("amplified", f"ε {num(amplified)} if the observer does not know who was "
                     "sampled"))  # fmt: skip
    if plan.get("noise_multiplier") is not None:
        rows.append(("noise", f"z = {num(plan['noise_multiplier'])}"))
    elif plan.get("round_noise_multiplier") is not None:
        rows.append(("noise", f"z = {num(plan['round_noise_multiplier'])} a round"))
    rows += [(k, plan.get(k)) for k in ("adjacency", "sampling")]
    rows.append(("against", _against(plan.get("mode"))))
    return [f"{label:{WIDTH}s}{value}" for label, value in rows if value]
