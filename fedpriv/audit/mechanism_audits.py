"""Mechanism-level audits of zonal aggregation (HDP) and GP's Laplace sanitizer, no training.

The zonal (LDP / HDP / CDP) and Laplace-IFCA mechanisms add their noise inside their own
aggregation (at the client, at a zone's super-node, or as the client's sanitizer), so a
canary a server inserts into the standard run would bypass it. These audits instead run
the project's own mechanism code — :func:`fedpriv.zonal.aggregate_round` with
:func:`fedpriv.zonal.ldp_client_update`, and :func:`fedpriv.privacy.mechanisms.sample_laplace_rn`
with GP's ``ε = n/(ν‖δ‖)`` — on canary updates only (every client is a canary: a canary's
``norm·c_j`` update, included with probability 1/2; excluded canaries send nothing). Other
clients' updates would only add a fixed offset, which does not change what the noise hides.
T rounds repeat the same updates with fresh noise; the attacker sees the sum of the rounds'
steps (the final model's delta). Scores, lower bound and estimate are those of
:mod:`fedpriv.audit.audit`.

Views (threat models of HDP §IV-C):

- ``aggregator``: the server's step ``Σ_i π_i (Δ(i) + noise_i) (+ server noise)``;
- ``supernode``: zone 0's super-node, which receives its zone's updates as sent (LDP:
  client-noised; HDP / CDP: clipped, un-noised — the super-node adds or forwards the noise);
  scored on the zone's summed updates (a weaker attacker than one reading each update).

Reference figures: ``epsilon_level`` — one level's Gaussian mechanism alone (sensitivity C,
noise z·C in update units; μ = √T/z, add/remove, fixed denominators q·W_i), a valid bound
for every view that includes that level's noise; ``epsilon_aggregator_accountant`` — the
exact Gaussian figure with the realised noise at the aggregator (μ = √T/z_agg,
:func:`fedpriv.zonal.aggregator_noise_multiplier`: z√k LDP, z√s HDP, z CDP), which holds only
while the other clients' / zones' noise is really added.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedpriv import seeds
from fedpriv.audit.audit import audit_scores
from fedpriv.audit.canaries import CanarySet
from fedpriv.audit.gaussian_pair import gaussian_mechanism_epsilon

__all__ = [
    "BlockCanaries",
    "audit_zonal_mechanism",
    "audit_laplace_sanitizer",
    "ZONAL_PLACEMENTS",
    "GUARANTEES",
]

ZONAL_PLACEMENTS = ("ldp", "hdp", "cdp")
# The guarantee each audit tests (HDP §IV-C; GP Thm 3.1), as written in audit.md.
GUARANTEES = {
    "ldp": "local DP: epsilon one level (mu = sqrt(T)/z, add/remove one client) against the "
    "super-node and the aggregator; epsilon aggregator (z*sqrt(k)) against the aggregator",
    "hdp": "epsilon one level against the aggregator (the super-node's noise) and epsilon "
    "aggregator (z*sqrt(s)); none against the client's own super-node (trusted)",
    "cdp": "epsilon one level = epsilon aggregator against the aggregator (server noise); none "
    "against the super-node (trusted)",
    "laplace": "GP's d-privacy leakage n/nu per participation (not an (epsilon, delta)): "
    "no bound to exceed; the figure is the empirical epsilon",
}


class BlockCanaries:
    """Canaries on disjoint blocks of ``block`` coordinates (exactly orthogonal).

    The interface of :class:`fedpriv.audit.canaries.CanarySet` that the zonal audit uses:
    ``direction(j)`` is a random-sign unit vector on coordinates ``[j·b, (j+1)·b)``,
    ``included`` the same seeded Bernoulli(1/2) bits, ``cosines`` the score. ``dim = K·b``.
    """

    def __init__(self, count: int, block: int, seed: int) -> None:
        self.count, self.block, self.dim = int(count), int(block), int(count) * int(block)
        self.included = CanarySet(count, 1.0, 0.5, seed, ((1,),)).included
        rng = seeds.stream(int(seed), "audit-mechanism", 5)
        self.signs = rng.choice([-1.0, 1.0], size=(self.count, self.block)) / math.sqrt(block)

    @property
    def inserted(self) -> np.ndarray:
        return np.flatnonzero(self.included)

    def direction(self, j: int) -> np.ndarray:
        out = np.zeros(self.dim)
        out[j * self.block : (j + 1) * self.block] = self.signs[j]
        return out

    def cosines(self, delta: np.ndarray) -> np.ndarray:
        delta = np.asarray(delta, dtype=np.float64).reshape(self.count, self.block)
        norm = float(np.linalg.norm(delta))
        return np.sum(delta * self.signs, axis=1) / norm if norm > 0 else np.zeros(self.count)


def _scores(canaries: CanarySet, view: np.ndarray, subset: np.ndarray, **kw) -> dict[str, Any]:
    cos = canaries.cosines(view)[subset]
    return audit_scores(cos, canaries.included[subset], probability=0.5, **kw)


def audit_zonal_mechanism(
    *,
    placement: str,
    noise_multiplier: float,
    num_canaries: int = 200,
    num_zones: int = 2,
    rounds: int = 5,
    dim: int = 20_000,
    clipping_norm: float = 1.0,
    delta: float = 1e-5,
    confidence: float = 0.95,
    seed: int = 0,
    block: int = 0,
) -> dict[str, Any]:
    """Lower bound and estimate at the aggregator and at zone 0's super-node (module doc).

    ``block`` > 0: :class:`BlockCanaries` (orthogonal, ``dim = num_canaries·block``) instead
    of random dense directions in ``dim`` coordinates.
    """
    from fedpriv.zonal import ZonalPlan, aggregate_round, ldp_client_update, zone_average

    if placement not in ZONAL_PLACEMENTS:
        raise ValueError(f"placement = {placement!r} is not allowed; expected ldp | hdp | cdp")
    canaries: Any = CanarySet(num_canaries, clipping_norm, 0.5, seed, ((dim,),))
    if block > 0:
        canaries = BlockCanaries(num_canaries, block, seed)
        dim = canaries.dim
    plan = ZonalPlan.build(
        num_clients=num_canaries, num_zones=num_zones, clients_per_round=0,
        noise_multiplier=noise_multiplier, clipping_norm=clipping_norm, placement=placement,
    )  # fmt: skip
    rng = seeds.stream(seed, "audit-mechanism", 1)
    template = [np.zeros(dim)]
    aggregator, supernode = np.zeros(dim), np.zeros(dim)
    zone0 = plan.members[0]
    z_agg = 0.0
    for t in range(rounds):
        updates = {}
        for j in canaries.inserted:
            upd = [clipping_norm * canaries.direction(int(j))]
            if placement == "ldp":
                upd, _ = ldp_client_update(
                    upd, noise_multiplier=noise_multiplier, clipping_norm=clipping_norm, rng=rng
                )
            updates[int(j)] = upd
        result = aggregate_round(
            plan, updates, template=template,
            zone_rng=lambda z, t=t: seeds.stream(seed, "audit-mechanism", 2, t, z),
            server_rng=seeds.stream(seed, "audit-mechanism", 3, t),
        )  # fmt: skip
        aggregator += result.delta[0]
        z_agg = result.aggregator_noise_multiplier
        parts = [p for p in zone0 if p in updates]
        supernode += zone_average(
            [updates[p] for p in parts], [plan.weights[p] for p in parts],
            sampling_rate=plan.sampling_rate, zone_weight=plan.zone_weight(0), template=template,
        )[0]  # fmt: skip
    kw = dict(delta=delta, confidence=confidence)
    everyone = np.ones(num_canaries, dtype=bool)
    in_zone0 = np.isin(np.arange(num_canaries), zone0)
    mu_level = math.sqrt(rounds) / noise_multiplier if noise_multiplier > 0 else math.inf
    mu_agg = math.sqrt(rounds) / z_agg if z_agg > 0 else math.inf
    return {
        "mechanism": f"zonal {placement} (HDP Algorithm 1), {num_zones} zones",
        "noise_multiplier": noise_multiplier,
        "rounds": rounds,
        "canaries": {
            "count": num_canaries,
            "inserted": int(canaries.included.sum()),
            "dim": dim,
            "norm": clipping_norm,
            "layout": f"disjoint blocks of {block}" if block > 0 else "random dense",
        },  # fmt: skip
        "adjacency": "add/remove one client (a canary) of the zonal round, fixed q*W_i",
        "guarantee_tested": GUARANTEES[placement],
        "aggregator": _scores(canaries, aggregator, everyone, **kw),
        "supernode": _scores(canaries, supernode, in_zone0, **kw),
        "epsilon_level": _eps(mu_level, delta),
        "aggregator_noise_multiplier": z_agg,
        "epsilon_aggregator_accountant": _eps(mu_agg, delta),
        "delta": delta,
    }


def _eps(mu: float, delta: float) -> Any:
    if not math.isfinite(mu):
        return "inf"
    value = gaussian_mechanism_epsilon(mu, delta)
    return value if math.isfinite(value) else "inf"


def audit_laplace_sanitizer(
    *,
    noise_multiplier: float,
    num_canaries: int = 200,
    rounds: int = 1,
    dim: int = 20_000,
    norm: float = 1.0,
    delta: float = 1e-5,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """GP's Laplace sanitizer (ν) with k = 1 (the cluster mean of the sanitized replies).

    Each included canary client sends ``δ_j + ρ_j``, ``ρ_j ~ Laplace_ε`` in R^n with
    ``ε = n/(ν‖δ_j‖)`` (GP Algorithm 2); the attacker sees the mean of the replies over
    ``rounds`` rounds. GP's accounting: leakage ``ε‖δ‖ = n/ν`` per participation, composed
    additively (GP Thm 3.1) — a d-privacy figure, reported next to the empirical ε.
    """
    from fedpriv.privacy.mechanisms import laplace_epsilon, sample_laplace_rn

    canaries = CanarySet(num_canaries, norm, 0.5, seed, ((dim,),))
    rng = seeds.stream(seed, "audit-mechanism", 4)
    eps_client = laplace_epsilon(dim, noise_multiplier, norm)
    view = np.zeros(dim)
    inserted = canaries.inserted
    for _ in range(rounds):
        total = np.zeros(dim)
        for j in inserted:
            total += norm * canaries.direction(int(j)) + sample_laplace_rn(dim, eps_client, rng)
        view += total / max(1, len(inserted))
    kw = dict(delta=delta, confidence=confidence)
    return {
        "mechanism": f"GP Laplace sanitizer, nu = {noise_multiplier}, k = 1 (mean of replies)",
        "noise_multiplier": noise_multiplier,
        "rounds": rounds,
        "canaries": {
            "count": num_canaries,
            "inserted": int(len(inserted)),
            "dim": dim,
            "norm": norm,
        },  # fmt: skip
        "adjacency": "add/remove one canary client (its sanitized reply)",
        "guarantee_tested": GUARANTEES["laplace"],
        "aggregator": _scores(canaries, view, np.ones(num_canaries, dtype=bool), **kw),
        "gp_leakage_claimed": rounds * dim / noise_multiplier,
        "gp_leakage_note": "GP's d-privacy leakage n/nu per participation (not an (eps, delta) "
        "figure)",
        "delta": delta,
    }
