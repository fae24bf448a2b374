"""Zones: assignment of partitions to zones, zone maps, per-zone noise levels and client
weights (HDP §IV, §V Table I; SPEC §3.5)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np

from fedpriv.validation import check_choice, check_int, check_real

ZONE_ASSIGNMENTS = ("blocks", "round-robin", "map")
NOISE_PLACEMENTS = ("none", "ldp", "hdp", "cdp", "mixed")
ZONE_LEVELS = ("none", "ldp", "hdp", "cdp")
WEIGHTINGS = ("uniform", "samples")


class ZoneMapError(ValueError):
    """A zone map that cannot be used (one-line message)."""


# --- zones ------------------------------------------------------------------------------------


def parse_zone_map(text: str) -> dict[int, int]:
    """Parse a zone map ``partition -> zone``.

    Accepted forms (documented in ``scenarios/zonal/keys.py``):

    * ``"0:0,1:0,2:1"`` — comma-separated ``partition:zone`` pairs (spaces allowed);
    * a JSON object ``{"0": 0, "1": 0, "2": 1}``;
    * a JSON list ``[0, 0, 1]`` — the zone of partition 0, 1, 2, ...

    ``""`` gives ``{}``. Raises :class:`ZoneMapError` on a syntax error or a repeated
    partition.
    """
    if not isinstance(text, str):
        raise ZoneMapError(f"zone-map = {text!r} is not a string")
    text = text.strip()
    if not text:
        return {}
    if text[0] in "{[":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as err:
            raise ZoneMapError(f"zone-map is not valid JSON ({err.msg})") from err
        items = list(enumerate(raw)) if isinstance(raw, list) else list(raw.items())
    else:
        items = []
        for piece in text.replace(";", ",").split(","):
            if not piece.strip():
                continue
            if piece.count(":") != 1:
                raise ZoneMapError(f"zone-map item {piece.strip()!r} is not 'partition:zone'")
            items.append(tuple(x.strip() for x in piece.split(":")))
    mapping: dict[int, int] = {}
    for part, zone in items:
        try:
            p, z = int(str(part)), int(str(zone))
        except ValueError as err:
            raise ZoneMapError(f"zone-map item {part!r}:{zone!r} is not two integers") from err
        if p in mapping:
            raise ZoneMapError(f"zone-map names partition {p} twice")
        mapping[p] = z
    return mapping


def check_zone_map(mapping: Mapping[int, int], *, num_clients: int, num_zones: int) -> list[int]:
    """The zone of each partition 0..n-1 from ``mapping``; every rule checked.

    Every partition 0..n-1 must be mapped, no other partition may be named, zone ids must be
    in [0, s) and every zone must have at least one client. Raises :class:`ZoneMapError`.
    """
    n = check_int("num_clients", num_clients)
    s = check_int("num_zones", num_zones)
    unknown = sorted(p for p in mapping if not 0 <= p < n)
    if unknown:
        raise ZoneMapError(
            f"zone-map names unknown clients {unknown[:5]} (partition ids are 0..{n - 1})"
        )
    missing = sorted(set(range(n)) - set(mapping))
    if missing:
        raise ZoneMapError(f"zone-map leaves clients {missing[:5]} without a zone")
    bad_zones = sorted({z for z in mapping.values() if not 0 <= z < s})
    if bad_zones:
        raise ZoneMapError(f"zone-map uses zone ids {bad_zones[:5]} outside 0..{s - 1}")
    empty = sorted(set(range(s)) - set(mapping.values()))
    if empty:
        raise ZoneMapError(f"zone-map leaves zones {empty[:5]} without clients")
    return [int(mapping[p]) for p in range(n)]


def assign_zones(
    num_clients: int,
    num_zones: int,
    *,
    method: str = "blocks",
    zone_map: Mapping[int, int] | str | None = None,
) -> list[int]:
    """Zone id of each partition id 0..n-1.

    * ``blocks``: contiguous blocks, ``zone(p) = ⌊p·s/n⌋`` (sizes differ by at most one);
    * ``round-robin``: ``zone(p) = p mod s``;
    * ``map``: the explicit ``zone_map`` (dict or text for :func:`parse_zone_map`).

    ``num_zones`` must not exceed ``num_clients`` (every zone needs a client).
    """
    n = check_int("num_clients", num_clients)
    s = check_int("num_zones", num_zones)
    method = check_choice("method", method, ZONE_ASSIGNMENTS)
    if s > n:
        raise ValueError(f"num_zones = {s} is not allowed; expected <= num_clients ({n})")
    if method == "blocks":
        return [p * s // n for p in range(n)]
    if method == "round-robin":
        return [p % s for p in range(n)]
    if zone_map is None:
        raise ZoneMapError("zone-assignment = 'map' needs a zone-map")
    mapping = parse_zone_map(zone_map) if isinstance(zone_map, str) else dict(zone_map)
    return check_zone_map(mapping, num_clients=n, num_zones=s)


def zone_members(zone_of: Sequence[int], num_zones: int | None = None) -> list[list[int]]:
    """``members[i]`` = sorted partition ids of zone i."""
    s = (max(zone_of) + 1 if zone_of else 0) if num_zones is None else int(num_zones)
    members: list[list[int]] = [[] for _ in range(s)]
    for p, z in enumerate(zone_of):
        members[int(z)].append(p)
    return members


def apportion_zones(
    num_zones: int, *, hdp_fraction: float, ldp_fraction: float
) -> tuple[int, int, int]:
    """(#LDP zones, #HDP zones, #CDP zones) for fractions β, α, 1−α−β of s (largest remainder)."""
    s = check_int("num_zones", num_zones)
    alpha = check_real("hdp_fraction", hdp_fraction, hi=1.0)
    beta = check_real("ldp_fraction", ldp_fraction, hi=1.0)
    if alpha + beta > 1.0 + 1e-12:
        raise ValueError(
            f"hdp_fraction + ldp_fraction = {alpha + beta!r} is not allowed; expected <= 1"
        )
    shares = np.array([beta, alpha, max(0.0, 1.0 - alpha - beta)]) * s
    counts = np.floor(shares + 1e-9).astype(int)
    order = np.argsort(-(shares - counts), kind="stable")
    for j in order[: s - int(counts.sum())]:
        counts[j] += 1
    return int(counts[0]), int(counts[1]), int(counts[2])


def zone_levels(
    num_zones: int, placement: str, *, hdp_fraction: float = 0.0, ldp_fraction: float = 0.0
) -> list[str]:
    """The noise level of each zone: ``none | ldp | hdp | cdp``.

    ``none/ldp/hdp/cdp`` give every zone that level; ``mixed`` gives the first
    ``round(β·s)`` zones LDP, the next ``round(α·s)`` HDP and the rest CDP
    (:func:`apportion_zones`).
    """
    s = check_int("num_zones", num_zones)
    placement = check_choice("placement", placement, NOISE_PLACEMENTS)
    if placement != "mixed":
        return [placement] * s
    n_ldp, n_hdp, n_cdp = apportion_zones(s, hdp_fraction=hdp_fraction, ldp_fraction=ldp_fraction)
    return ["ldp"] * n_ldp + ["hdp"] * n_hdp + ["cdp"] * n_cdp


def table_i_config(levels: Sequence[str]) -> str:
    """The HDP Table I row of a set of zone levels (``"none"`` when nothing adds noise)."""
    present = frozenset(x for x in levels if x != "none")
    rows = {
        frozenset({"ldp"}): "C1",
        frozenset({"hdp"}): "C2",
        frozenset({"ldp", "hdp"}): "C3",
        frozenset({"cdp"}): "C4",
        frozenset({"ldp", "cdp"}): "C5",
        frozenset({"hdp", "cdp"}): "C6",
        frozenset({"ldp", "hdp", "cdp"}): "C7",
    }
    return rows.get(present, "none")


def paper_fractions(levels: Sequence[str]) -> dict[str, float]:
    """The paper's (α, β) for :func:`fedpriv.privacy.accounting.hdp_config_epsilon` of these levels.

    Our fractions are realised zone shares (LDP share b, HDP share a); the paper's symbols
    change role per row: C3 β = b; C5 α = b; C6 β = a; C7 α = a, β = b.
    """
    s = len(levels)
    b = sum(x == "ldp" for x in levels) / s
    a = sum(x == "hdp" for x in levels) / s
    row = table_i_config(levels)
    return {
        "C3": {"alpha": 0.0, "beta": b},
        "C5": {"alpha": b, "beta": 0.0},
        "C6": {"alpha": 0.0, "beta": a},
        "C7": {"alpha": a, "beta": b},
    }.get(row, {"alpha": 0.0, "beta": 0.0})


def client_weights(
    num_examples: Sequence[int], *, weighting: str = "uniform", example_cap: float = 0
) -> np.ndarray:
    """Per-client weights ``w_k`` (HDP Algorithm 1 line 4).

    ``uniform``: ``w_k = 1``. ``samples``: ``w_k = min(n_k/ŵ, 1)`` with ŵ = ``example_cap``,
    or the largest n_k when ``example_cap`` is 0 (then ``w_k = n_k / max n``: proportional).
    """
    weighting = check_choice("weighting", weighting, WEIGHTINGS)
    counts = np.asarray(list(num_examples), dtype=np.float64)
    if counts.size == 0 or np.any(counts < 0) or not np.all(np.isfinite(counts)):
        raise ValueError("num_examples must be a non-empty list of counts >= 0")
    if weighting == "uniform":
        return np.ones_like(counts)
    cap = check_real("example_cap", example_cap)
    cap = float(counts.max()) if cap == 0 else cap
    if cap <= 0:
        raise ValueError("num_examples are all 0; samples weighting needs an example cap > 0")
    return np.minimum(counts / cap, 1.0)
