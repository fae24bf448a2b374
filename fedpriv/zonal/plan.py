"""The plan of a zonal run and the noise scale at each level (HDP Algorithm 1 line 14)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv.privacy.protocol import (
    CentralPlacement,
    ClientPlacement,
    GaussianMechanism,
    Placement,
    ZonePlacement,
)
from fedpriv.validation import check_choice, check_int, check_real
from fedpriv.zonal.zones import (
    ZONE_LEVELS,
    assign_zones,
    client_weights,
    table_i_config,
    zone_levels,
    zone_members,
)

# --- noise scales (HDP Algorithm 1 line 14 at each level) -------------------------------------


def zone_sigma(
    noise_multiplier: float, clipping_norm: float, *, sampling_rate: float, zone_weight: float
) -> float:
    """Super-node noise std, HDP Algorithm 1 line 14 (FlatClip): ``σ_i = z·C/(q·W_i)``."""
    z = check_real("noise_multiplier", noise_multiplier)
    c = check_real("clipping_norm", clipping_norm, lo_open=True)
    q = check_real("sampling_rate", sampling_rate, hi=1.0, lo_open=True)
    w = check_real("zone_weight", zone_weight, lo_open=True)
    return z * c / (q * w)


def client_sigma(noise_multiplier: float, clipping_norm: float) -> float:
    """LDP noise std on one clipped client update: ``z·C`` (line 14 with q·W → 1)."""
    z = check_real("noise_multiplier", noise_multiplier)
    c = check_real("clipping_norm", clipping_norm, lo_open=True)
    return z * c


def server_sigma(
    noise_multiplier: float, clipping_norm: float, *, sampling_rate: float, total_weight: float
) -> float:
    """CDP noise std on the aggregate: ``σ_S = z·C/(q·W)`` (line 14 with all zones as one)."""
    return zone_sigma(
        noise_multiplier, clipping_norm, sampling_rate=sampling_rate, zone_weight=total_weight
    )


# a zone's noise level as the placement of the one Gaussian mechanism (none: no mechanism)
LEVEL_PLACEMENT: dict[str, type[Placement]] = {
    "ldp": ClientPlacement,
    "hdp": ZonePlacement,
    "cdp": CentralPlacement,
}


def level_placement(level: str, noise_multiplier: float, clipping_norm: float) -> Placement:
    """The placement of ``level`` around ONE Gaussian mechanism (z, C): ``ldp`` → client
    (``clip(Δ_k, C) + N(0, (z·C)²)``), ``hdp`` → zone (``σ_i = z·C/(q·W_i)`` on Δ(i)),
    ``cdp`` → server (``σ_S = z·C/(q·W)`` on the aggregate); HDP Algorithm 1 line 14."""
    check_choice("level", level, tuple(LEVEL_PLACEMENT))
    mechanism = GaussianMechanism(noise_multiplier=noise_multiplier, clipping_norm=clipping_norm)
    return LEVEL_PLACEMENT[level](mechanism)


# --- the plan of a run ------------------------------------------------------------------------


@dataclass(frozen=True)
class ZonalPlan:
    """Zones, levels, weights and noise parameters of a zonal run (fixed for the run).

    ``zone_of[p]``: zone of partition p; ``levels[i]``: noise level of zone i;
    ``weights[p]``: w_p; ``sampling_rate``: q = k/n.
    """

    zone_of: tuple[int, ...]
    levels: tuple[str, ...]
    weights: tuple[float, ...]
    noise_multiplier: float
    clipping_norm: float
    sampling_rate: float

    def __post_init__(self) -> None:
        if len(self.weights) != len(self.zone_of):
            raise ValueError(
                f"weights has {len(self.weights)} entries; expected one per client "
                f"({len(self.zone_of)})"
            )
        for level in self.levels:
            check_choice("level", level, ZONE_LEVELS)
        if sorted(set(self.zone_of)) != list(range(len(self.levels))):
            raise ValueError("zone_of must use every zone id 0..s-1 (no empty zone)")
        check_real("noise_multiplier", self.noise_multiplier)
        check_real("clipping_norm", self.clipping_norm, lo_open=True)
        check_real("sampling_rate", self.sampling_rate, hi=1.0, lo_open=True)
        if any(w <= 0 for w in self.weights):
            raise ValueError("every client weight must be > 0")

    @classmethod
    def build(
        cls,
        *,
        num_clients: int,
        num_zones: int,
        clients_per_round: int,
        noise_multiplier: float,
        clipping_norm: float,
        placement: str = "hdp",
        assignment: str = "blocks",
        zone_map: Mapping[int, int] | str | None = None,
        hdp_fraction: float = 0.0,
        ldp_fraction: float = 0.0,
        weighting: str = "uniform",
        num_examples: Sequence[int] | None = None,
        example_cap: float = 0,
    ) -> ZonalPlan:
        """A plan from run-config style arguments (``clients_per_round`` 0 = all clients)."""
        n = check_int("num_clients", num_clients)
        k = check_int("clients_per_round", clients_per_round, lo=0)
        k = n if k == 0 or k > n else k
        zone_of = assign_zones(n, num_zones, method=assignment, zone_map=zone_map)
        levels = zone_levels(
            num_zones, placement, hdp_fraction=hdp_fraction, ldp_fraction=ldp_fraction
        )
        counts = [1] * n if num_examples is None else list(num_examples)
        weights = client_weights(counts, weighting=weighting, example_cap=example_cap)
        if np.any(weights <= 0):
            raise ValueError("samples weighting gives a client with 0 examples weight 0")
        return cls(
            tuple(zone_of),
            tuple(levels),
            tuple(float(w) for w in weights),
            float(noise_multiplier),
            float(clipping_norm),
            k / n,
        )

    @property
    def num_clients(self) -> int:
        return len(self.zone_of)

    @property
    def num_zones(self) -> int:
        return len(self.levels)

    @property
    def members(self) -> list[list[int]]:
        return zone_members(self.zone_of, self.num_zones)

    def zone_weight(self, zone: int) -> float:
        """``W_i``: the summed weight of all of zone i's clients."""
        return float(sum(self.weights[p] for p in self.members[zone]))

    @property
    def total_weight(self) -> float:
        """``W = Σ_i W_i``."""
        return float(sum(self.weights))

    def zone_share(self, zone: int) -> float:
        """``π_i = W_i/W`` (= 1/s for equal zones, HDP line 15)."""
        return self.zone_weight(zone) / self.total_weight

    def placement(self, level: str) -> Placement:
        """:func:`level_placement` of ``level`` with the plan's z and C."""
        return level_placement(level, self.noise_multiplier, self.clipping_norm)

    def zone_denominator(self, zone: int) -> float:
        """``q·W_i``: Δ(i)'s fixed denominator (HDP Algorithm 1 line 12)."""
        return self.sampling_rate * self.zone_weight(zone)

    @property
    def server_denominator(self) -> float:
        """``q·W``: the aggregate's fixed denominator (all zones as one)."""
        return self.sampling_rate * self.total_weight

    def sigma_zone(self, zone: int) -> float:
        """``σ_i = z·C/(q·W_i)`` (HDP Algorithm 1 line 14)."""
        return zone_sigma(
            self.noise_multiplier,
            self.clipping_norm,
            sampling_rate=self.sampling_rate,
            zone_weight=self.zone_weight(zone),
        )

    @property
    def sigma_client(self) -> float:
        """LDP std on one clipped update: ``z·C``."""
        return client_sigma(self.noise_multiplier, self.clipping_norm)

    @property
    def sigma_server(self) -> float:
        """CDP std on the aggregate: ``z·C/(q·W)``."""
        return server_sigma(
            self.noise_multiplier,
            self.clipping_norm,
            sampling_rate=self.sampling_rate,
            total_weight=self.total_weight,
        )

    def level_of(self, partition: int) -> str:
        return self.levels[self.zone_of[partition]]

    @property
    def table_i(self) -> str:
        return table_i_config(self.levels)

    def describe(self) -> dict[str, Any]:
        """JSON-ready description (zones, levels, σ per level) for logs."""
        return {
            "num_zones": self.num_zones,
            "zones": {str(i): m for i, m in enumerate(self.members)},
            "levels": {str(i): lv for i, lv in enumerate(self.levels)},
            "table_i": self.table_i,
            "sampling_rate": self.sampling_rate,
            "zone_weight": {str(i): self.zone_weight(i) for i in range(self.num_zones)},
            "zone_share": {str(i): self.zone_share(i) for i in range(self.num_zones)},
            "sigma_zone": {str(i): self.sigma_zone(i) for i in range(self.num_zones)},
            "sigma_client": self.sigma_client,
            "sigma_server": self.sigma_server,
        }
