"""What a zone SuperNode releases, and the server step over zone releases.

HDP Algorithm 1 lines 10–15 split between the two parties that run them when every zone is
its own Flower SuperNode (``zonal-runtime = zone-nodes``):

* the zone node (:func:`zone_release`), holding its clients' data, trains each sampled
  client, then per level: ``none`` — Δ_k as trained; ``ldp`` — ``clip(Δ_k, C) + N(0, (z·C)²)``
  per client (line 14 at the client level); ``hdp`` / ``cdp`` — ``clip(Δ_k, C)``. It sums
  ``Δ(i) = Σ_k w_k Δ_k / (q·W_i)`` (line 12, fixed denominator) and, in an HDP zone, adds
  ``N(0, σ_i²)``, ``σ_i = z·C/(q·W_i)`` (line 14 at the zone level). Only Δ(i) leaves it.
* the server (:func:`server_step`) adds the zone releases with their shares
  ``Σ_i π_i Δ(i)`` (line 15) and, when a zone is CDP, ``N(0, σ_S²)``, ``σ_S = z·C/(q·W)``
  once (line 14 at the server level; the server is trusted in CDP).

A zone that did not reply (failed super-node, killed node) contributes 0 with its share: the
fixed denominators keep every σ and the sensitivity as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv.zonal.aggregation import (
    RoundResult,
    ZoneResult,
    _zeros_like,
    aggregator_noise_multiplier,
    ldp_client_update,
    zone_average,
)
from fedpriv.zonal.plan import ZonalPlan, level_placement
from fedpriv.zonal.secure_sum import ZoneSecAgg, ZoneSecureSum, secure_zone_delta

ZONE_CLIENTS_KEY = "zonal-clients"  # a zone message's sampled client ids (server -> zone node)


@dataclass
class ZoneRelease:
    """A zone node's reply: Δ(i) (noised per its level) and what it may say about it."""

    delta: list[np.ndarray]
    clients: list[int]
    weight_sum: float
    ldp_weight_sq: float  # Σ w_k² of its LDP clients (0 outside LDP zones)
    sigma: float  # std of the zone noise (HDP), else 0
    noise_norm: float
    clipped: int  # how many of its clients' updates were clipped
    secagg: ZoneSecureSum | None = None  # the node's view of its SecAgg round (zonal-secagg)

    def metrics(self) -> dict[str, Any]:
        """The reply's numbers (no per-client value; the server knows the counts and weights
        from its own plan)."""
        return {
            "zonal-zone-sigma": float(self.sigma),
            "zonal-zone-noise-norm": float(self.noise_norm),
            "zonal-clipped-count": int(self.clipped),
        }


def client_contribution(
    update: Sequence[np.ndarray],
    level: str,
    *,
    noise_multiplier: float,
    clipping_norm: float,
    rng: Callable[[], np.random.Generator],
) -> tuple[list[np.ndarray], bool]:
    """One client's term of Δ(i) at its zone's ``level``: (Δ_k to sum, clipped?).

    ``none``: Δ_k; ``ldp``: ``clip(Δ_k, C) + N(0, (z·C)²)`` from ``rng()`` (the client's own
    Generator); ``hdp`` / ``cdp``: ``clip(Δ_k, C)`` (the level's placement of the one
    Gaussian mechanism, :func:`fedpriv.zonal.plan.level_placement`).
    """
    if level == "none":
        return [np.asarray(a, np.float64) for a in update], False
    if level == "ldp":
        noised, info = ldp_client_update(
            update, noise_multiplier=noise_multiplier, clipping_norm=clipping_norm, rng=rng()
        )
        return noised, bool(info["clipped"])
    placement = level_placement(level, noise_multiplier, clipping_norm)
    clipped, info = placement.contribute(update)
    return [np.asarray(a, np.float64) for a in clipped], bool(info["clipped"])


def zone_release(
    contributions: Sequence[Sequence[np.ndarray]],
    weights: Sequence[float],
    *,
    level: str,
    sampling_rate: float,
    zone_weight: float,
    noise_multiplier: float,
    clipping_norm: float,
    zone_rng: Callable[[], np.random.Generator],
    template: Sequence[np.ndarray],
    clients: Sequence[int] = (),
    clipped: int = 0,
    secure: ZoneSecAgg | None = None,
    share_rng: Callable[[int], np.random.Generator] | None = None,
    drop: Collection[int] = (),
    context: bytes = b"",
) -> ZoneRelease:
    """HDP Algorithm 1 lines 12 and 14 in the zone node: ``Δ(i)`` (+ ``N(0, σ²)`` if hdp).

    ``contributions``: the clients' terms (:func:`client_contribution`). When ``level ==
    "hdp"`` the zone placement of the Gaussian mechanism (z, C) adds ``N(0, σ_i²)``,
    ``σ_i = z·C/(q·W_i)``; the zone noise is drawn even when no client was sampled, so that
    what the server sees does not depend on the sample.

    ``secure`` (``zonal-secagg``, a sampled cohort): the node sums the terms through SecAgg
    (:func:`fedpriv.zonal.secure_sum.secure_zone_delta`; client p's share of the HDP noise
    from ``share_rng(p)``, the clients in ``drop`` leave after sharing their keys) and sees
    only the masked vectors and the sum; it adds no zone noise (``noise_norm`` 0: unknown
    to it).
    """
    view = None
    noise_norm, used_sigma = 0.0, 0.0
    if secure is not None and len(clients):
        delta, view, used_sigma = secure_zone_delta(
            contributions,
            weights,
            list(clients),
            secure,
            level=level,
            noise_multiplier=noise_multiplier,
            clipping_norm=clipping_norm,
            denominator=sampling_rate * zone_weight,
            share_rng=share_rng or (lambda _p: np.random.default_rng()),
            template=template,
            drop=drop,
            context=context,
        )
        kept = {p: w for p, w in zip(clients, weights)}
        clients, weights = view.survivors, [kept[p] for p in view.survivors]
    else:
        delta = zone_average(
            contributions,
            weights,
            sampling_rate=sampling_rate,
            zone_weight=zone_weight,
            template=template,
        )
    if level == "hdp" and view is None:
        noised, noise = level_placement(level, noise_multiplier, clipping_norm).release(
            delta, party="zone", denominator=sampling_rate * zone_weight, rng=zone_rng()
        )
        used_sigma, noise_norm = float(noise["sigma"]), noise["noise_norm"]
        delta = [np.asarray(a, np.float64) for a in noised]
    ldp_sq = float(sum(w * w for w in weights)) if level == "ldp" else 0.0
    return ZoneRelease(
        delta,
        list(clients),
        float(sum(weights)),
        ldp_sq,
        used_sigma,
        noise_norm,
        int(clipped),
        view,
    )


def server_step(
    plan: ZonalPlan,
    releases: Mapping[int, ZoneRelease],
    *,
    template: Sequence[np.ndarray],
    server_rng: np.random.Generator,
    supernodes: Mapping[int, int | None] | None = None,
) -> RoundResult:
    """HDP Algorithm 1 line 15 (+ line 14 at the server): ``Σ_i π_i Δ(i)`` (+ CDP noise).

    ``releases[i]``: what zone i's node sent (zones that did not reply are absent and add 0).
    The realised aggregate noise multiplier counts the LDP clients and HDP zones that replied.
    """
    total = _zeros_like(template)
    zones: list[ZoneResult] = []
    ldp_sq, hdp_zones = 0.0, 0
    for zone in range(plan.num_zones):
        rel = releases.get(zone)
        if rel is not None:
            share = plan.zone_share(zone)
            for acc, layer in zip(total, rel.delta):
                acc += share * np.asarray(layer, np.float64)
            ldp_sq += rel.ldp_weight_sq
            hdp_zones += int(rel.sigma > 0 or plan.levels[zone] == "hdp")
        zones.append(
            ZoneResult(
                zone,
                plan.levels[zone],
                None if supernodes is None else supernodes.get(zone),
                [] if rel is None else list(rel.clients),
                0.0 if rel is None else rel.weight_sum,
                0.0 if rel is None else rel.sigma,
                0.0 if rel is None else rel.noise_norm,
                [],
            )
        )
    s_sigma, s_norm = 0.0, 0.0
    if "cdp" in plan.levels:  # the server placement: σ_S = z·C/(q·W), once
        noised, noise = plan.placement("cdp").release(
            total, party="server", denominator=plan.server_denominator, rng=server_rng
        )
        s_sigma, s_norm = noise["sigma"], noise["noise_norm"]
        total = [np.asarray(a, np.float64) for a in noised]
    z_agg = aggregator_noise_multiplier(
        plan.noise_multiplier,
        ldp_weight_sq=ldp_sq,
        hdp_zones=hdp_zones,
        server_noise="cdp" in plan.levels,
    )
    return RoundResult(total, zones, s_sigma, s_norm, z_agg)
