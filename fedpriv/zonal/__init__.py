"""Zonal super-node aggregation: hierarchical FL with DP noise at client, zone or server.

SPEC §3.5; HDP §III (Algorithm 1), §IV-A (super-node elections), §IV-B (correctness),
§IV-C (amplification), §V (Table I, configurations C1–C7). Plain numpy, no Flower.

Notation (HDP Algorithm 1, FlatClip): n clients in s zones, zone i holds the clients
``members[i]``; each round the k sampled clients train and clip their update to C.

* Client weights ``w_k = min(n_k/ŵ, 1)`` (``zone-weighting = samples``, ŵ the per-user
  example cap) or ``w_k = 1`` (``uniform``).
* ``q = k/n``: the probability that a client is sampled in a round (Flower samples k of n).
* ``W_i = Σ_{k ∈ zone i} w_k``: the weight of **all** of zone i's clients, and
  ``W = Σ_i W_i``. HDP writes W over the sampled set ``C_i^t``; we follow McMahan et al.
  2018 ([36] of HDP, the source of Algorithm 1), where ``q·W`` is the *expected* sampled
  weight, a fixed denominator: the sensitivity of Δ(i) to one client is then ``C/(q·W_i)``
  whatever was sampled, which is what makes σ_i of line 14 data-independent.
* Zone average (line 12): ``Δ(i) = Σ_{k ∈ C_i} w_k Δ_k / (q·W_i)``.
* Noise (line 14): ``σ_i = z·C/(q·W_i)``.
* Server step (line 15): ``θ ← θ + Σ_i π_i (Δ(i) + noise_i)`` with ``π_i = W_i/W``.
  HDP writes ``1/s``; ``π_i = 1/s`` exactly when the zones have equal weight (equal sizes,
  uniform weights), and ``π_i = W_i/W`` is what keeps HDP's correctness desideratum (§III,
  §IV-B) for unequal zones: with no noise, uniform weights and every sampled client
  replying, ``Σ_i π_i Δ(i) = Σ_{k sampled} Δ_k / (q·n) = mean_k Δ_k``, i.e. plain FedAvg
  (uniform mean) of the same updates, for any zones.
* **Empty zones** (no sampled client this round): ``Δ(i) = 0`` and the zone still counts
  with its share π_i, which is exactly what keeps the identity above (the fixed
  denominator already accounts for the clients that were not sampled). An HDP zone's
  super-node still adds its noise to the zero sum, so that the noise the aggregator sees
  does not depend on the sample (the aggregate noise multiplier is exactly z·√s).

Noise placement per zone (a zone's *level*): ``none`` (no clipping, no noise: the
no-DP baseline of HDP Fig. 2); ``ldp`` — every sampled client adds
``N(0, (z·C)²)`` to its own clipped update (line 14 at the client level: one user, weight
1, no sampling, so q·W → 1); ``hdp`` — the super-node adds ``N(0, σ_i²)`` to Δ(i);
``cdp`` — the server adds ``N(0, σ_S²)`` once to the aggregate, ``σ_S = z·C/(q·W)`` (line
14 at the server level; equal to ``π_i·σ_i`` for every zone). The noise std of a client's
contribution measured in aggregate units is then z·C/(q·W) at every level, so with the same
z the aggregate noise multiplier is ``z·√k`` (LDP, k sampled clients), ``z·√s`` (HDP) and
``z`` (CDP): the amplification of HDP §IV-C, and the utility order CDP ≥ HDP ≥ LDP.

Mixed placements (HDP §V, Table I) use two fractions of the **zones** (zone granularity,
as in C3 and C7, where the paper counts β·s and α·s zones):

* ``ldp-fraction`` β: the share of zones whose clients do not trust anyone and add LDP
  noise themselves;
* ``hdp-fraction`` α: the share of zones that trust their super-node (HDP noise);
* the remaining ``1 − α − β`` of the zones trust the server (CDP noise, added once to the
  aggregate whenever at least one zone is CDP).

Zone counts are apportioned by largest remainder (they sum to s); LDP zones are the first
zone ids, then HDP, then CDP. The paper reuses α and β with different roles per row; in
these terms C1 is β = 1, C2 α = 1, C3 α + β = 1 (both > 0), C4 α = β = 0, C5 β > 0 = α
(the paper's "fraction α of clients" doing LDP is our β), C6 α > 0 = β (the paper's β of
super-nodes is our α), C7 α, β > 0 with α + β < 1. :func:`table_i_config` names the row.

Super-nodes (HDP §IV-A): each zone elects one of its online clients uniformly at random
(seeded Generator); it stays in power until it fails, then a new one is elected from the
zone's online clients (:class:`SuperNodeElection`, with an election log).
"""

from fedpriv.zonal.accounting import EPSILON_ASSUMPTIONS, epsilon_at_aggregator
from fedpriv.zonal.aggregation import (
    RoundResult,
    ZoneResult,
    aggregate_round,
    aggregator_noise_multiplier,
    apply_update,
    ldp_client_update,
    nominal_aggregator_noise_multiplier,
    zone_average,
)
from fedpriv.zonal.elections import ElectionEvent, SuperNodeElection, draw_failures
from fedpriv.zonal.plan import ZonalPlan, client_sigma, server_sigma, zone_sigma
from fedpriv.zonal.release import ZoneRelease, client_contribution, server_step, zone_release
from fedpriv.zonal.secure_sum import ZoneSecAgg, ZoneSecureSum, secure_zone_delta
from fedpriv.zonal.zones import (
    NOISE_PLACEMENTS,
    WEIGHTINGS,
    ZONE_ASSIGNMENTS,
    ZONE_LEVELS,
    ZoneMapError,
    apportion_zones,
    assign_zones,
    check_zone_map,
    client_weights,
    paper_fractions,
    parse_zone_map,
    table_i_config,
    zone_levels,
    zone_members,
)

__all__ = [
    "ZONE_ASSIGNMENTS",
    "NOISE_PLACEMENTS",
    "ZONE_LEVELS",
    "WEIGHTINGS",
    "ZoneMapError",
    "parse_zone_map",
    "check_zone_map",
    "assign_zones",
    "zone_members",
    "apportion_zones",
    "zone_levels",
    "table_i_config",
    "paper_fractions",
    "client_weights",
    "zone_sigma",
    "client_sigma",
    "server_sigma",
    "ZonalPlan",
    "zone_average",
    "ldp_client_update",
    "ZoneResult",
    "RoundResult",
    "aggregate_round",
    "apply_update",
    "aggregator_noise_multiplier",
    "nominal_aggregator_noise_multiplier",
    "ZoneRelease",
    "client_contribution",
    "zone_release",
    "server_step",
    "ZoneSecAgg",
    "ZoneSecureSum",
    "secure_zone_delta",
    "ElectionEvent",
    "SuperNodeElection",
    "draw_failures",
    "EPSILON_ASSUMPTIONS",
    "epsilon_at_aggregator",
]
