"""HDP's amplification-by-averaging ε (SPEC §3.5; HDP §IV-C, §V Table I): a HEURISTIC.

The paper's ε at the central aggregator when noise is added at the clients (LDP), the
super-nodes (HDP) or the server (CDP): ε/√k, ε/√s, ε. It assumes every noising party is
(ε, δ)-DP with the same δ and that ε scales as 1/σ — not a theorem of any accountant; the
accountant figures of the per-level Gaussian mechanisms (``fedpriv.zonal``) are reported
next to it and are the bounds to rely on.
"""

from __future__ import annotations

import math

from fedpriv.privacy.accounting._checks import integer as _integer
from fedpriv.privacy.accounting._checks import number as _number

__all__ = ["PLACEMENTS", "HDP_CONFIGS", "amplified_epsilon", "hdp_config_epsilon"]

_PLACEMENT_ALIASES = {
    "ldp": "ldp",
    "client": "ldp",
    "hdp": "hdp",
    "super-node": "hdp",
    "supernode": "hdp",
    "cdp": "cdp",
    "server": "cdp",
    "none": "none",
}
PLACEMENTS = tuple(_PLACEMENT_ALIASES)


def amplified_epsilon(
    epsilon: float,
    *,
    placement: str,
    num_clients_in_zone: int,
    num_zones: int,
    num_clients: int | None = None,
    secure_aggregation: bool = False,
) -> float:
    """ε seen at the central aggregator, HDP §IV-C (Lemma and "Consequence on HFL").

    Each party that adds noise gets (ε, δ) with the Gaussian mechanism; summing k
    independent Gaussian mechanisms gives the aggregator (ε/√k, δ):

    * ``"ldp"`` / ``"client"``: noise at every client → ``ε/√k``, k = number of clients
      whose noisy updates are summed per round; by default
      ``k = num_clients_in_zone · num_zones`` (HDP §V: s zones of m clients); pass
      ``num_clients`` for unequal zones.
    * ``"hdp"`` / ``"super-node"``: noise at every super-node → ``ε/√s``, s = num_zones.
    * ``"cdp"`` / ``"server"``: noise at the aggregator only → ``ε``.
    * ``"none"``: no noise → ``inf``.

    Assumptions (from the HDP paper, not a formal accountant bound): heuristic
    amplification by averaging of the Gaussian mechanism; the same δ at every level; no
    secure-aggregation/shuffling amplification (with it the paper drops the square roots);
    no sampling or composition over rounds. Report it next to the accountant figures.
    ``secure_aggregation``: HDP §V's note, "Should it be considered, the only change would
    be a removal of the square root over all terms": ``ε/k``, ``ε/s``, ``ε``.
    """
    eps = _number("epsilon", epsilon)
    if placement not in _PLACEMENT_ALIASES:
        raise ValueError(
            f"placement = {placement!r} is not allowed; expected one of {', '.join(PLACEMENTS)}"
        )
    m = _integer("num_clients_in_zone", num_clients_in_zone)
    s = _integer("num_zones", num_zones)
    k = m * s if num_clients is None else _integer("num_clients", num_clients)
    kind = _PLACEMENT_ALIASES[placement]
    if kind == "none":
        return math.inf
    if kind == "ldp":
        return _term(eps, k, secure_aggregation)
    if kind == "hdp":
        return _term(eps, s, secure_aggregation)
    return eps


HDP_CONFIGS = ("C1", "C2", "C3", "C4", "C5", "C6", "C7")


def _term(eps: float, count: float, secure_aggregation: bool = False) -> float:
    """ε/√count (ε/count with ``secure_aggregation``, HDP §V's note), or 0 when no party is
    in the group (count == 0)."""
    if count <= 0:
        return 0.0
    return eps / (count if secure_aggregation else math.sqrt(count))


def hdp_config_epsilon(
    config: str,
    epsilon: float,
    *,
    num_clients_in_zone: int,
    num_zones: int,
    alpha: float = 0.0,
    beta: float = 0.0,
    secure_aggregation: bool = False,
) -> float:
    """ε at the aggregator for the mixed placements C1–C7 of HDP §V, Table I.

    s zones of m clients each, k = s·m online clients; α, β are the paper's fractions
    (their roles differ per configuration, as in the paper):

    * C1 ε/√k; C2 ε/√s; C4 ε
    * C3 ε/√(β·s·m) + ε/√((1−β)·s)   (β·s zones of LDP clients, the rest HDP)
    * C5 ε/√(α·k) + ε                 (fraction α of clients LDP, server adds noise)
    * C6 ε/√(β·s) + ε                 (fraction β of super-nodes HDP, server adds noise)
    * C7 ε/√(β·s·m) + ε/√(α·s) + ε    (β·s zones LDP, α·s zones HDP, rest by the server)

    A group with zero members contributes 0. Same assumptions as
    :func:`amplified_epsilon` (heuristic, no secure-aggregation amplification);
    ``secure_aggregation`` removes the square root from every term (HDP §V's note: C1 ε/k,
    C2 ε/s, C3 ε/(β·s·m) + ε/((1−β)·s), ...).
    """
    eps = _number("epsilon", epsilon)
    m = _integer("num_clients_in_zone", num_clients_in_zone)
    s = _integer("num_zones", num_zones)
    a = _number("alpha", alpha)
    b = _number("beta", beta)
    if a > 1 or b > 1 or (config == "C7" and a + b > 1):
        raise ValueError(
            f"alpha = {alpha!r}, beta = {beta!r} are not allowed; expected fractions in [0, 1]"
            + (" with alpha + beta <= 1" if config == "C7" else "")
        )
    k = s * m

    def term(count: float) -> float:
        return _term(eps, count, secure_aggregation)

    formulas = {
        "C1": lambda: term(k),
        "C2": lambda: term(s),
        "C3": lambda: term(b * s * m) + term((1 - b) * s),
        "C4": lambda: eps,
        "C5": lambda: term(a * k) + eps,
        "C6": lambda: term(b * s) + eps,
        "C7": lambda: term(b * s * m) + term(a * s) + eps,
    }
    if config not in formulas:
        raise ValueError(
            f"config = {config!r} is not allowed; expected one of {', '.join(HDP_CONFIGS)}"
        )
    return float(formulas[config]())
