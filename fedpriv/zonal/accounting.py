"""ε at the aggregator for each noise placement (HDP §IV-C, §V Table I, §VII-A Table III)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fedpriv.validation import check_int
from fedpriv.zonal.aggregation import nominal_aggregator_noise_multiplier
from fedpriv.zonal.plan import ZonalPlan
from fedpriv.zonal.zones import paper_fractions

# --- ε at the aggregator (HDP §IV-C, §V Table I, §VII-A Table III) ----------------------------

EPSILON_BOUNDS = (  # next to every zonal epsilon in rounds.jsonl and summary.json
    "bounds, replace-one client: level/aggregator_accountant amplified by sampling (invalid "
    "against the sampler), vs_curious_aggregator not; aggregator_heuristic: not a bound"
)
EPSILON_ASSUMPTIONS = (
    "{'pld': headline bound (dominating-pair PLD, or RDP if smaller), 'rdp': RDP}. level: "
    "a party's Gaussian (z, k of n without replacement; HDP Table I's 'epsilon'). "
    "aggregator_accountant: the same accountant on the aggregated update, whose noise (every "
    "client, super-node and server draw) has multiplier aggregator_noise_multiplier = "
    "z*sqrt(sum_LDP w_k^2 + #HDP zones + [CDP]) per client's clipped contribution (nominal: "
    "every sampled client replies; mixed rows: the fewest clients from LDP zones); it holds "
    "for whoever sees only the global model. aggregator_heuristic: HDP IV-C / Table I on the "
    "level epsilon: eps/sqrt(k) LDP, eps/sqrt(s) HDP, eps CDP, summed over a mixed row's "
    "groups (k clients per round, s zones, m = k/s), assuming every noising party is (eps, "
    "delta)-DP with one delta, epsilon ~ 1/sigma, no secure aggregation or shuffling. "
    "vs_curious_aggregator: what the aggregator infers receiving each zone's output "
    "separately and knowing who was sampled (no amplification): the Gaussian with multiplier "
    "z for a client in every round - HDP zones (sqrt(s) needs the zones combined first) and "
    "LDP zones (worst: one sampled client in a zone); CDP zones: inf (the server adds noise)."
)

# Whom each placement's ε protects against with ``zonal-runtime = in-server``: the zone
# aggregators (super-nodes) run inside the ServerApp and see HDP clients' clipped un-noised
# updates. Next to every zonal ε of such a run.
EPSILON_AGAINST_IN_SERVER = {
    "ldp": "everyone, the zone aggregator and the server included: each client noises its own "
    "update before it leaves the client",
    "hdp": "the server beyond the zone aggregator and observers of the global model; none "
    "against the zone aggregator, which runs in the ServerApp and sees the clients' clipped "
    "un-noised updates",
    "cdp": "observers of the global model only; none against the server, which adds the noise "
    "and sees the clients' clipped un-noised updates",
}
# With ``zonal-runtime = zone-nodes`` each zone is a SuperNode of its own that hosts
# its clients' training and adds the HDP noise inside: the ServerApp receives zone aggregates.
EPSILON_AGAINST = {
    "ldp": "everyone outside the client's own training step: the zone node's aggregate, the "
    "ServerApp and observers of the global model (each client noises its own update inside "
    "the zone node that hosts it)",
    "hdp": "the ServerApp and observers of the global model: the zone node adds the noise "
    "before its aggregate leaves it; none against the zone node, which hosts its clients "
    "and sees their clipped un-noised updates",
    "cdp": "observers of the global model only; none against the server, which adds the noise "
    "and sees the zones' clipped un-noised sums",
}
NO_NOISE_AGAINST = "nobody: no noise is added"
# With ``zonal-secagg`` (HDP §IV) the zone aggregator sees masked vectors and the zone sum
# only, and an HDP zone's noise is in that sum (the clients' shares), in either runtime.
EPSILON_AGAINST_SECAGG = {
    "hdp": "the zone node (it sees only masked vectors and the zone sum, which carries its "
    "clients' noise shares: against_zone_node), the ServerApp and observers of the global "
    "model",
}
RUNTIME_AGAINST = {"zone-nodes": EPSILON_AGAINST, "in-server": EPSILON_AGAINST_IN_SERVER}


def epsilon_against(
    levels: Sequence[str], runtime: str = "zone-nodes", secure_aggregation: bool = False
) -> dict[str, str]:
    """Level -> whom its ε protects against for the noised levels of a plan run with
    ``runtime`` (``zone-nodes``: :data:`EPSILON_AGAINST`; ``in-server``:
    :data:`EPSILON_AGAINST_IN_SERVER`; ``secure_aggregation``: HDP as
    :data:`EPSILON_AGAINST_SECAGG`); ``{"none": NO_NOISE_AGAINST}`` when no level adds
    noise."""
    table = {**RUNTIME_AGAINST[runtime], **(EPSILON_AGAINST_SECAGG if secure_aggregation else {})}
    present = sorted({lv for lv in levels if lv != "none"})
    return {lv: table[lv] for lv in present} or {"none": NO_NOISE_AGAINST}


def _finite_or_inf(x: float) -> float:
    return float(x) if math.isfinite(x) else math.inf


_SERIES_CACHE: dict[tuple, list] = {}


def _epsilon_series(z: float, rounds: int, sampled: int, population: int, delta: float) -> list:
    """Cumulative (ε headline, ε_rdp, note) per round for multiplier z (cached per process)."""
    key = (round(float(z), 12), rounds, sampled, population, delta)
    if key not in _SERIES_CACHE:
        from fedpriv.privacy.accounting import epsilon_per_round_series

        reports = epsilon_per_round_series(
            float(z), rounds=rounds, sampled=sampled, population=population, delta=delta
        )
        note = "{0.accountant}; adjacency: {0.adjacency}; sampling: {0.sampling}".format
        _SERIES_CACHE[key] = [
            (_finite_or_inf(r.epsilon), _finite_or_inf(r.epsilon_rdp), note(r)) for r in reports
        ]
    return _SERIES_CACHE[key]


def epsilon_at_aggregator(
    plan: ZonalPlan,
    *,
    round_: int,
    total_rounds: int,
    clients_per_round: int,
    delta: float,
    with_text: bool = False,
    runtime: str = "zone-nodes",
    secure_aggregation: bool = False,
    min_cohort: int = 1,
    secagg_dropouts: int = 0,
) -> dict[str, Any]:
    """ε after ``round_`` rounds, per placement, as seen at the aggregator (see module doc).

    Returns ``{"table_i", "round", "delta", "noise_multiplier", "aggregator_noise_multiplier",
    "epsilon-against", "level", "aggregator_accountant", "aggregator_heuristic",
    "heuristic_per_level", "vs_curious_aggregator"}``; each ε entry is
    ``{"pld": ε, "rdp": ε}``. A plan without noise (placement none or z = 0) gives ``inf``
    everywhere. ``epsilon-against``: whom each noised level's ε protects against
    (:func:`epsilon_against` of ``runtime``). ``with_text`` adds the ``assumptions`` and the
    accountant's ``accountant_note``. ``against_zone_node``: :func:`epsilon_against_zone_node`
    (``secure_aggregation``, ``min_cohort``, ``secagg_dropouts``: ``zonal-secagg``, the
    smallest zone sample, ``zonal-secagg-dropouts``); with ``secure_aggregation`` also
    ``aggregator_heuristic_secagg``, HDP Table I without the square roots (HDP §V's note).
    """
    from fedpriv.privacy.accounting import amplified_epsilon, hdp_config_epsilon

    n, s = plan.num_clients, plan.num_zones
    k = check_int("clients_per_round", clients_per_round, lo=0)
    k = n if k == 0 or k > n else k
    t = check_int("round_", round_)
    total = max(check_int("total_rounds", total_rounds), t)
    row = plan.table_i
    present = sorted({lv for lv in plan.levels if lv != "none"})
    z = plan.noise_multiplier
    z_agg = nominal_aggregator_noise_multiplier(plan, k)
    inf = {"pld": math.inf, "rdp": math.inf}
    out: dict[str, Any] = {
        "table_i": row,
        "bounds": EPSILON_BOUNDS,
        "round": t,
        "delta": delta,
        "noise_multiplier": z,
        "aggregator_noise_multiplier": z_agg,
        "epsilon-against": epsilon_against(plan.levels if z else (), runtime, secure_aggregation),
        "against_zone_node": epsilon_against_zone_node(
            plan,
            round_=t,
            total_rounds=total,
            delta=delta,
            secure_aggregation=secure_aggregation,
            min_cohort=min_cohort,
            secagg_dropouts=secagg_dropouts,
        ),
    }
    if not present or z == 0.0:
        out.update(
            level=inf,
            aggregator_accountant=inf,
            aggregator_heuristic=inf,
            heuristic_per_level={},
            vs_curious_aggregator={},
        )
        if with_text:
            out.update(assumptions=EPSILON_ASSUMPTIONS, accountant_note="no noise: epsilon = inf")
        return out
    lvl_pld, lvl_rdp, note = _epsilon_series(z, total, k, n, delta)[t - 1]
    agg_pld, agg_rdp, _ = _epsilon_series(z_agg, total, k, n, delta)[t - 1]
    m = max(1, round(k / s))

    def heuristic(eps: float, level: str) -> float:
        if not math.isfinite(eps):  # e.g. q = 1 over many rounds: nothing to amplify
            return math.inf
        return amplified_epsilon(
            eps, placement=level, num_clients_in_zone=m, num_zones=s, num_clients=k
        )

    def table(eps: float, secure: bool = False) -> float:
        if not math.isfinite(eps):
            return math.inf
        if row in ("C1", "C2", "C4"):
            level = {"C1": "ldp", "C2": "hdp", "C4": "cdp"}[row]
            return amplified_epsilon(
                eps,
                placement=level,
                num_clients_in_zone=m,
                num_zones=s,
                num_clients=k,
                secure_aggregation=secure,
            )
        return hdp_config_epsilon(
            row,
            eps,
            num_clients_in_zone=m,
            num_zones=s,
            secure_aggregation=secure,
            **paper_fractions(plan.levels),
        )

    out["level"] = {"pld": lvl_pld, "rdp": lvl_rdp}
    out["aggregator_accountant"] = {"pld": agg_pld, "rdp": agg_rdp}
    out["aggregator_heuristic"] = {"pld": table(lvl_pld), "rdp": table(lvl_rdp)}
    if secure_aggregation:
        out["aggregator_heuristic_secagg"] = {
            "pld": table(lvl_pld, True),
            "rdp": table(lvl_rdp, True),
        }
    out["heuristic_per_level"] = {
        lv: {"pld": heuristic(lvl_pld, lv), "rdp": heuristic(lvl_rdp, lv)} for lv in present
    }
    seen_pld, seen_rdp, _ = _epsilon_series(z, total, n, n, delta)[t - 1]
    seen = {"pld": seen_pld, "rdp": seen_rdp}
    out["vs_curious_aggregator"] = {lv: (inf if lv == "cdp" else seen) for lv in present}
    if with_text:
        out.update(assumptions=EPSILON_ASSUMPTIONS, accountant_note=note)
    return out


# --- ε against the zone node (HDP §IV: secure aggregation within zones) ----------------------

AGAINST_ZONE_NODE_NOTE = (
    "the Gaussian of what the zone aggregator sees of one client over the rounds, composed "
    "without amplification by sampling (it knows its zone's sample); bounds, replace-one "
    "client. Without SecAgg: LDP z (it sees each noised update), HDP and CDP inf (clipped "
    "un-noised updates). With zonal-secagg it sees only the zone sum: HDP z (the clients' "
    "shares sum to at least the zone noise z*C whenever the sum can be unmasked, |S| >= t), "
    "LDP z*sqrt(t_min)*w_min/w_max (the noise of the t_min >= threshold of the smallest "
    "cohort clients in the sum), CDP inf"
)


def zone_node_noise_multipliers(
    plan: ZonalPlan, *, secure_aggregation: bool, min_cohort: int = 1, secagg_dropouts: int = 0
) -> dict[str, float]:
    """Level -> the noise multiplier of the zone aggregator's view of one client (0: none).

    Without SecAgg: ``ldp`` z, ``hdp`` / ``cdp`` 0. With SecAgg (HDP §IV) the view is the
    zone sum ``Σ_{k∈S} w_k x_k``, a client's sensitivity ``w_k·C ≤ w_max·C``: ``hdp`` — the
    noise shares ``N(0, (z·C)²/t)`` of ``|S| ≥ t`` survivors, std ≥ z·C: multiplier z (the
    sum-level figure; HDP §V's note drops the square root for the same reason); ``ldp`` —
    ``|S| ≥ t_min`` noised terms, std ≥ z·C·w_min·√t_min: ``z·√t_min·w_min/w_max`` with t_min the
    SecAgg threshold of the smallest cohort ``min_cohort``; ``cdp`` 0.
    """
    from fedpriv.zonal.secure_sum import ZoneSecAgg

    z = plan.noise_multiplier
    present = sorted({lv for lv in plan.levels if lv != "none"})
    out = {lv: 0.0 for lv in present}
    if "ldp" in out:
        out["ldp"] = z
    if not secure_aggregation:
        return out
    if "hdp" in out:
        out["hdp"] = z
    if "ldp" in out:
        t_min = ZoneSecAgg(dropouts=secagg_dropouts).threshold(max(1, int(min_cohort)))
        ldp_w = [plan.weights[p] for p in range(plan.num_clients) if plan.level_of(p) == "ldp"]
        out["ldp"] = z * math.sqrt(t_min) * min(ldp_w) / max(ldp_w)
    return out


def epsilon_against_zone_node(
    plan: ZonalPlan,
    *,
    round_: int,
    total_rounds: int,
    delta: float,
    secure_aggregation: bool,
    min_cohort: int = 1,
    secagg_dropouts: int = 0,
) -> dict[str, Any]:
    """ε against the zone aggregator after ``round_`` rounds, per noised level:
    ``{"secure_aggregation", "noise_multiplier": {level: z_eff}, "epsilon": {level: {"pld",
    "rdp"}}, "note"}`` (:func:`zone_node_noise_multipliers`, composed over ``round_`` rounds
    with q = 1: :data:`AGAINST_ZONE_NODE_NOTE`)."""
    n = plan.num_clients
    total = max(int(total_rounds), int(round_))
    multipliers = zone_node_noise_multipliers(
        plan,
        secure_aggregation=secure_aggregation,
        min_cohort=min_cohort,
        secagg_dropouts=secagg_dropouts,
    )
    epsilon = {}
    for level, z_eff in multipliers.items():
        if z_eff <= 0:
            epsilon[level] = {"pld": math.inf, "rdp": math.inf}
            continue
        pld, rdp, _ = _epsilon_series(z_eff, total, n, n, delta)[int(round_) - 1]
        epsilon[level] = {"pld": pld, "rdp": rdp}
    return {
        "secure_aggregation": bool(secure_aggregation),
        "noise_multiplier": multipliers,
        "epsilon": epsilon,
        "note": AGAINST_ZONE_NODE_NOTE,
    }


# --- a zone node's lifetime ε over its releases -----------------------------------------------


def release_mu_squared(level: str, noise_multiplier: float) -> float:
    """``μ²`` of one zone-node release: the level's Gaussian event, multiplier ``z`` on one
    client's clipped contribution (HDP §III: LDP noise ``z·C`` per client, HDP zone noise
    ``σ_i = z·C/(q·W_i)``), with NO amplification by sampling (the ServerApp that receives
    it chooses the sample: :data:`EPSILON_ASSUMPTIONS`, ``vs_curious_aggregator``). μ-GDP
    composes exactly: ``μ² = Σ_r 1/z_r²`` over a node's releases. ``inf`` when the level adds
    no noise against the ServerApp (``cdp``, ``none``) or ``z = 0``."""
    z = float(noise_multiplier)
    if level not in ("ldp", "hdp") or z <= 0:
        return math.inf
    return 1.0 / (z * z)


def lifetime_epsilon(mu_squared: float, delta: float) -> float:
    """ε at δ of a node's releases composed: the Gaussian ``μ = √(Σ_r 1/z_r²)`` (Balle & Wang
    2018, Thm 8; :func:`fedpriv.privacy.accounting.accountant.gaussian_epsilon`)."""
    from fedpriv.privacy.accounting.accountant import gaussian_epsilon

    if mu_squared <= 0:
        return 0.0
    return gaussian_epsilon(math.sqrt(mu_squared), float(delta))


def mu_squared_budget(max_epsilon: float, delta: float) -> float:
    """The largest ``Σ 1/z²`` whose :func:`lifetime_epsilon` at δ is within ``max_epsilon``
    (root finding on the increasing ε(μ), rounded down by 1e-9 relative)."""
    from scipy import optimize

    target = float(max_epsilon)
    if not target > 0:
        raise ValueError(f"max-epsilon = {max_epsilon!r} is not allowed; expected a float > 0")
    hi = 1.0
    while lifetime_epsilon(hi * hi, delta) <= target:
        hi *= 2.0
    mu = optimize.brentq(
        lambda m: lifetime_epsilon(m * m, delta) - target, 0.0, hi, xtol=1e-13, rtol=1e-12
    )
    return (mu * (1.0 - 1e-9)) ** 2
