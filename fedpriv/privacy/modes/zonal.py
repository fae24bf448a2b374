"""``privacy = zonal``: zones with their own noise level (LDP, HDP, CDP or none), HDP paper.

Noise N(0, (z·C)²) is added at the client (LDP), the zone aggregator (HDP) or the server
(CDP). A client in an LDP zone and a zone node (``zonal-runtime = zone-nodes``) own the
keys that decide their zone, level, z, C and δ. Planning: one noising level's Gaussian for
a client in every round, with and without amplification by sampling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedpriv.privacy.modes.base import OPT_INS, PUBLIC, Mode
from fedpriv.spec import RunSpec
from fedpriv.spec import key as config_key

NAME = "zonal"
# the keys that decide a zonal client's zone, level, z, C and δ (owned by clients and zone nodes)
ZONE_DECIDING = (
    "privacy",
    "noise-placement",
    "ldp-fraction",
    "hdp-fraction",
    "num-zones",
    "zone-assignment",
    "zone-map",
    "num-clients",
    "noise-multiplier",
    "clipping-norm",
    "dp-delta",
)
UNACCOUNTED = (
    "train-loss: un-noised training loss",
    "zonal-update-norm: the update norm before clipping",
    "zonal-clipped: whether the update was clipped",
    "zonal-noise-norm: the norm of the drawn noise",
    "zonal-zone-noise-norm, zonal-clipped-count: a zone node's noise norm and clip count",
    "distributed evaluation metrics on each client's test split",
)


@dataclass(frozen=True)
class ZonalParams:
    """z, C, δ and the placement of the zonal noise."""

    noise_multiplier: float = config_key("noise-multiplier", mode_default=0.5)
    clipping_norm: float = config_key("clipping-norm", mode_default=0.5)
    delta: float = config_key("dp-delta")
    placement: str = config_key("noise-placement")


def plan(spec: RunSpec, examples_per_client: int | None = None) -> dict[str, Any]:
    """A level's Gaussian (z, k of n per round), with and without amplification by sampling
    (the latter is what holds against the party that samples)."""
    from fedpriv.privacy.accounting.planning import gaussian_plan

    del examples_per_client
    part = spec.participation
    params: ZonalParams = spec.params
    z, delta = params.noise_multiplier, params.delta
    rounds = spec.rounds
    unsampled = gaussian_plan(z, rounds, part.population, part.population, delta, "fixed")
    amplified = gaussian_plan(z, rounds, part.per_round, part.population, delta, "fixed")
    if part.per_round < part.population:  # the sampling that happens; the headline ignores it
        unsampled["sampling"] = (
            f"{amplified['sampling']}; headline not amplified by it (it holds against the "
            "party that samples)"
        )
    return {
        "mode": NAME,
        "placement": params.placement,
        **unsampled,
        "epsilon_with_sampling_amplification": amplified["epsilon"],
        "notes": [
            "headline: one noising level's Gaussian (z) for a client in every round, without "
            "amplification by sampling - what holds against the party that samples",
            "epsilon_with_sampling_amplification assumes the observer does not know who was "
            "sampled; HDP's eps/sqrt(k) aggregator figures are heuristics (see docs/scenarios.md)",
            "against whom: LDP noise (at the client) holds against everyone; HDP noise (at the "
            "zone) only against the server beyond the zone aggregator, none against the zone "
            "aggregator, which runs in the ServerApp; CDP noise only against observers of the "
            "global model",
        ],
    }


def epsilon_of_z(spec: RunSpec, examples: int | None = None):
    """ε(z) of one level's Gaussian (:func:`fedpriv.privacy.accounting.target.zonal_of_z`)."""
    from fedpriv.privacy.accounting.target import zonal_of_z

    del examples
    return zonal_of_z(spec)


MODE = Mode(
    name=NAME,
    params=ZonalParams,
    threat_model={
        "zone aggregator": "with zonal-runtime = zone-nodes (default) each zone is its own "
        "SuperNode that hosts its clients' training (it stands for their devices) and adds "
        "the HDP noise inside: trusted with its clients' data and updates in every placement. "
        "With zonal-runtime = in-server the zone arithmetic and the HDP noise run in the "
        "ServerApp: no guarantee against the ServerApp there.",
        "server": "zone-nodes: receives one aggregate per zone (noised in the clients' step "
        "under ldp, by the zone node under hdp), never one client's update; under cdp it "
        "receives clipped un-noised zone sums and adds the noise (trusted).",
        "LDP clients": "noise their own updates in their training step: only the zone node "
        "hosting them sees them un-noised.",
    },
    epsilon_against={
        "zone aggregator": "LDP zones: the client's Gaussian; HDP and CDP zones: none. With "
        "zonal-secagg (secure aggregation inside zones, HDP IV) it sees only the zone sum: "
        "HDP zones the Gaussian z of the clients' noise shares, LDP zones z*sqrt(t_min)",
        "server": "LDP and HDP zones (zone-nodes): the zone's Gaussian; CDP: none",
        "observers": "every noising level's Gaussian",
    },
    plan=plan,
    # zonal-zone-sigma: a zone node's σ_i = z·C/(q·W_i), public
    disclosure={"train": PUBLIC | {"zonal-noise-std", "zonal-zone-sigma"}, "evaluate": PUBLIC},
    unaccounted=UNACCOUNTED,
    owned_keys={
        "client": (*ZONE_DECIDING, *OPT_INS),
        "zone-node": (*ZONE_DECIDING, "zonal-runtime", "max-epsilon", *OPT_INS),
    },
    summary_key="zonal",
    report_label="Zonal",
    noise_field="noise_multiplier",
    epsilon_of_z=epsilon_of_z,
    client_task=NAME,
)
