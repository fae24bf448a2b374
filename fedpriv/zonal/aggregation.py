"""Zonal aggregation of one round: clip, zone averages, noise at the chosen level, server
update (HDP Algorithm 1; SPEC §3.5), and the noise the aggregator sees."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from fedpriv.validation import check_int, check_real
from fedpriv.zonal.plan import ZonalPlan, level_placement
from fedpriv.zonal.secure_sum import ZoneSecAgg, secure_zone_delta

# --- aggregation ------------------------------------------------------------------------------


def _zeros_like(template: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.zeros(np.shape(a), dtype=np.float64) for a in template]


def zone_average(
    updates: Sequence[Sequence[np.ndarray]],
    weights: Sequence[float],
    *,
    sampling_rate: float,
    zone_weight: float,
    template: Sequence[np.ndarray],
) -> list[np.ndarray]:
    """HDP Algorithm 1 line 12 (FlatClip): ``Δ(i) = Σ_k w_k Δ_k / (q·W_i)`` in float64.

    No update gives zeros shaped like ``template``.
    """
    if len(updates) != len(weights):
        raise ValueError(f"{len(updates)} updates but {len(weights)} weights")
    denom = check_real("sampling_rate", sampling_rate, hi=1.0, lo_open=True) * check_real(
        "zone_weight", zone_weight, lo_open=True
    )
    total = _zeros_like(template)
    for update, w in zip(updates, weights):
        if len(update) != len(total):
            raise ValueError(f"an update has {len(update)} layers; expected {len(total)}")
        for acc, layer in zip(total, update):
            acc += float(w) * np.asarray(layer, dtype=np.float64)
    return [acc / denom for acc in total]


def ldp_client_update(
    update: Sequence[np.ndarray],
    *,
    noise_multiplier: float,
    clipping_norm: float,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """What an LDP client sends: ``clip(Δ, C) + N(0, (z·C)²)`` (HDP §IV-C lemma, C1).

    The client placement of the Gaussian mechanism
    (:class:`fedpriv.privacy.protocol.ClientPlacement`: constrain, then noise with
    denominator 1). Returns ``(noised update, info)`` with ``info = {"update_norm",
    "clipped", "sigma", "noise_norm"}``.
    """
    placement = level_placement("ldp", noise_multiplier, clipping_norm)
    return placement.contribute(update, rng=rng)


@dataclass
class ZoneResult:
    """What happened in one zone in one round."""

    zone: int
    level: str
    supernode: int | None
    partitions: list[int]
    weight_sum: float
    sigma: float  # std of the noise the super-node added (0 unless level == "hdp")
    noise_norm: float
    clipped: list[int] = field(default_factory=list)  # clipped by the zone aggregator
    delta: list[np.ndarray] = field(default_factory=list, repr=False)
    secagg: dict[str, int] | None = None  # the zone's SecAgg round (zonal-secagg), else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("delta")
        if out["secagg"] is None:
            out.pop("secagg")
        return out


@dataclass
class RoundResult:
    """One round of zonal aggregation: the server step Σ_i π_i (Δ(i) + noise_i) + server noise."""

    delta: list[np.ndarray]
    zones: list[ZoneResult]
    server_sigma: float
    server_noise_norm: float
    aggregator_noise_multiplier: float

    def zone_dicts(self) -> dict[str, dict[str, Any]]:
        return {str(z.zone): z.to_dict() for z in self.zones}


def aggregate_round(
    plan: ZonalPlan,
    updates: Mapping[int, Sequence[np.ndarray]],
    *,
    template: Sequence[np.ndarray],
    zone_rng: Callable[[int], np.random.Generator],
    server_rng: np.random.Generator,
    supernodes: Mapping[int, int | None] | None = None,
    clip: bool = True,
    secure: ZoneSecAgg | None = None,
    share_rng: Callable[[int], np.random.Generator] | None = None,
    secagg_drop: Collection[int] = (),
) -> RoundResult:
    """HDP Algorithm 1 lines 12–15 for one round; returns the global step ``Δ`` (float64).

    ``updates[p]`` is partition p's update (``θ_p − θ``). Updates from HDP and CDP zones
    are clipped to C here (``clip=True``; a no-op for clients that already clipped, a guard
    for those that did not); LDP updates arrive clipped and noised and are used as sent;
    zones of level ``none`` are neither clipped nor noised (the no-DP baseline).
    ``zone_rng(i)`` is the super-node's Generator (HDP noise), ``server_rng`` the server's
    (CDP noise). A zone whose super-node is ``None`` (no online client) has no updates and
    adds no noise; every other HDP zone adds its noise, even with no sampled client.
    Clipping and noise are the placements of the plan's one Gaussian mechanism
    (:meth:`ZonalPlan.placement`: zone for ``hdp``, server for ``cdp``).

    ``secure`` (``zonal-secagg``): each zone's terms are summed through SecAgg
    (:func:`fedpriv.zonal.secure_sum.secure_zone_delta`), an HDP zone's noise is the sum of
    its clients' shares drawn from ``share_rng(zone)`` (the zone aggregator adds none unless
    no client was sampled); partitions in ``secagg_drop`` drop after sharing their keys.
    """
    zones: list[ZoneResult] = []
    total = _zeros_like(template)
    members = plan.members
    placed = {lv: plan.placement(lv) for lv in set(plan.levels) if lv != "none"}
    ldp_weight_sq = 0.0
    hdp_noised = 0
    for zone in range(plan.num_zones):
        level = plan.levels[zone]
        parts = [p for p in members[zone] if p in updates]
        clipped: list[int] = []
        zone_updates = []
        for p in parts:
            upd = updates[p]
            if clip and level in ("hdp", "cdp"):
                upd, constrained = placed[level].contribute(upd)
                if constrained["clipped"]:
                    clipped.append(p)
            zone_updates.append(upd)
        w = [plan.weights[p] for p in parts]
        supernode = None if supernodes is None else supernodes.get(zone)
        sigma, noise_norm, view = 0.0, 0.0, None
        has_supernode = supernodes is None or supernode is not None
        if secure is not None and parts and has_supernode:
            rng = (share_rng or (lambda _z: np.random.default_rng()))(zone)
            delta_i, view, sigma = secure_zone_delta(
                zone_updates,
                w,
                parts,
                secure,
                level=level,
                noise_multiplier=plan.noise_multiplier,
                clipping_norm=plan.clipping_norm,
                denominator=plan.zone_denominator(zone),
                share_rng=lambda _p, g=rng: g,
                template=template,
                drop=secagg_drop,
                context=f"zone {zone}".encode(),
            )
            parts = view.survivors
            w = [plan.weights[p] for p in parts]
            hdp_noised += int(level == "hdp")
        else:
            delta_i = zone_average(
                zone_updates,
                w,
                sampling_rate=plan.sampling_rate,
                zone_weight=plan.zone_weight(zone),
                template=template,
            )
        if level == "ldp":
            ldp_weight_sq += float(sum(x * x for x in w))
        if level == "hdp" and has_supernode and view is None:  # σ_i = z·C/(q·W_i)
            den = plan.zone_denominator(zone)
            delta_i, noise = placed[level].release(
                delta_i, party="zone", denominator=den, rng=zone_rng(zone)
            )
            sigma, noise_norm = noise["sigma"], noise["noise_norm"]
            hdp_noised += 1
        share = plan.zone_share(zone)
        for acc, layer in zip(total, delta_i):
            acc += share * layer
        zones.append(
            ZoneResult(
                zone,
                level,
                supernode,
                list(parts),
                float(sum(w)),
                sigma,
                noise_norm,
                clipped,
                delta_i,
                None if view is None else view.record(),
            )
        )
    server_noise = "cdp" in plan.levels
    s_sigma, s_norm = 0.0, 0.0
    if server_noise:  # σ_S = z·C/(q·W), once
        total, noise = placed["cdp"].release(
            total, party="server", denominator=plan.server_denominator, rng=server_rng
        )
        s_sigma, s_norm = noise["sigma"], noise["noise_norm"]
    z_agg = aggregator_noise_multiplier(
        plan.noise_multiplier,
        ldp_weight_sq=ldp_weight_sq,
        hdp_zones=hdp_noised,
        server_noise=server_noise,
    )
    return RoundResult(total, zones, s_sigma, s_norm, z_agg)


def apply_update(weights: Sequence[np.ndarray], delta: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``θ + Δ`` in float64, cast back to each layer's dtype."""
    return [
        (np.asarray(w, dtype=np.float64) + d).astype(np.asarray(w).dtype)
        for w, d in zip(weights, delta)
    ]


# --- noise seen by the aggregator -------------------------------------------------------------


def aggregator_noise_multiplier(
    noise_multiplier: float, *, ldp_weight_sq: float, hdp_zones: int, server_noise: bool
) -> float:
    """Noise multiplier of the aggregate relative to one client's sensitivity C/(q·W).

    In aggregate units every LDP client contributes noise of std ``w_k·z·C/(q·W)``, every
    noising super-node ``π_i·σ_i = z·C/(q·W)`` and the server ``z·C/(q·W)``; the sum of
    independent Gaussians gives ``z·√(Σ_LDP w_k² + #HDP zones + [CDP])`` — z√k (LDP, uniform
    weights), z√s (HDP), z (CDP): the amplification of HDP §IV-C, computed exactly.
    """
    z = check_real("noise_multiplier", noise_multiplier)
    units = float(ldp_weight_sq) + int(hdp_zones) + (1 if server_noise else 0)
    return z * math.sqrt(units)


def nominal_aggregator_noise_multiplier(plan: ZonalPlan, clients_per_round: int) -> float:
    """A data-independent lower bound of :func:`aggregator_noise_multiplier` for a round.

    Assumes every sampled client replies. LDP term: the fewest sampled clients that can
    fall in LDP zones, ``max(0, k − #clients outside LDP zones)``, with the smallest
    weights; every HDP zone noises; the server noises if a zone is CDP. For a pure
    placement with uniform weights this is exactly z√k, z√s or z.
    """
    n = plan.num_clients
    k = check_int("clients_per_round", clients_per_round, lo=0)
    k = n if k == 0 or k > n else k
    ldp_parts = [p for p in range(n) if plan.level_of(p) == "ldp"]
    least = max(0, k - (n - len(ldp_parts)))
    w_sq = sorted(plan.weights[p] ** 2 for p in ldp_parts)[:least]
    return aggregator_noise_multiplier(
        plan.noise_multiplier,
        ldp_weight_sq=float(sum(w_sq)),
        hdp_zones=sum(lv == "hdp" for lv in plan.levels),
        server_noise="cdp" in plan.levels,
    )
