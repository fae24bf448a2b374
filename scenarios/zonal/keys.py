"""Run-config keys of the zonal feature (SPEC §3.5, HDP), declared in the feature.

Privacy mode ``zonal``: hierarchical FL with zones and elected super-nodes
(:mod:`fedpriv.zonal`, :mod:`fedpriv.strategies.zonal`).

- ``num-zones`` — s, the number of zones (1..num-clients).
- ``zone-assignment`` — ``blocks`` (contiguous partition ids, ``zone = ⌊p·s/n⌋``),
  ``round-robin`` (``zone = p mod s``) or ``map`` (``zone-map``).
- ``zone-map`` — ``partition:zone`` pairs separated by commas, e.g. ``"0:0,1:0,2:1,3:1"``;
  a JSON object ``{"0": 0, "1": 0}`` or JSON list ``[0, 0, 1, 1]`` (index = partition) is
  accepted too. Every partition 0..n-1 must appear once, zone ids are 0..s-1, no zone may be
  empty. Only with ``zone-assignment = map``.
- ``noise-placement`` — ``none | ldp | hdp | cdp | mixed`` (who adds the Gaussian noise:
  nobody, every client, every super-node, the server; or a mix of zones, HDP Table I).
- ``ldp-fraction`` β, ``hdp-fraction`` α — for ``mixed``: the share of zones whose clients
  add LDP noise (β) and whose super-node adds HDP noise (α); the remaining 1 − α − β of the
  zones are protected by the server (CDP). α, β ∈ [0, 1], α + β ≤ 1. Ignored by the other
  placements. C3 = (α = 1 − β), C5 = (α = 0, β > 0), C6 = (α > 0, β = 0), C7 = (α, β > 0,
  α + β < 1); see :mod:`fedpriv.zonal` for the mapping of the paper's symbols.
- ``zone-weighting`` — ``uniform`` (w_k = 1) or ``samples`` (w_k = min(n_k/ŵ, 1)).
- ``zonal-example-cap`` — ŵ of ``samples`` weighting; 0 = the largest client's train size.
- ``supernode-failure-rate`` — probability in [0, 1) that an elected super-node fails in a
  round (seeded); it is replaced by a re-election among the zone's online clients.
- ``noise-multiplier`` z and ``clipping-norm`` C — σ_i = z·C/(q·W_i) at a
  super-node, z·C at an LDP client, z·C/(q·W) at the server. The keys every mode shares
  (:mod:`fedpriv.scenarios.dp.keys`); left at ``auto`` they take the zonal mode's z = C = 0.5.
- ``dp-delta`` — δ of the ε reports.
- ``zonal-distributed-eval`` — ``all`` clients evaluate each round, only the round's
  ``sampled`` clients, or ``none`` (server test set only; cheaper with many clients).
- ``zonal-compare-placements`` — for the ``zonal-compare`` kind (scenario ``hdp-digits``):
  the placements run one after the other in one simulation, comma-separated.
- ``zonal-sweep-zones`` — for ``zonal-compare``: comma-separated numbers of zones
  (HDP Fig. 3); '' = only ``num-zones``.
- ``zonal-runtime`` — ``zone-nodes`` (default): the federation has one Flower
  SuperNode per zone, holding its clients' partitions; the zone node trains its sampled
  clients, clips, adds the LDP / HDP noise and replies with its zone aggregate only, so the
  ServerApp never holds one client's update under ldp / hdp. ``in-server`` (the earlier
  runtime, kept for comparison): one SuperNode per client, the zone arithmetic runs in the
  ServerApp on behalf of the super-node (ε of HDP holds against no one inside the ServerApp).
- ``zonal-save-replies`` — with zone nodes: write every reply the ServerApp receives (and
  the instruction it answers) to ``output-dir/zone-replies/`` (an audit trail of what left
  the zone nodes; :func:`fedpriv.scenarios.nodes.federation.save_replies`).
- ``min-zone-clients`` — with zone nodes: a zone node refuses a round whose sample
  of its clients has 1 .. ``min-zone-clients`` − 1 clients (its reply would be one client's
  update plus the zone noise only); an empty sample releases only the zone noise and is
  served. Default 2: the smallest zone sample of the HDP paper's settings (s = 2 zones, k = 4
  online clients, §VI); 1 is refused. The zone node reads its own value
  (:func:`fedpriv.scenarios.zonal.zone_node.min_zone_clients`), never the message's.
- ``zonal-secagg`` — secure aggregation inside every zone (HDP §IV): the zone's sampled
  clients mask their fixed-point terms with pairwise masks (SecAgg), the zone aggregator
  (zone node, or the ServerApp with ``in-server``) sees only the masked vectors and the zone
  sum; an HDP zone's noise is the sum of its clients' shares N(0, (z·C)²/t)
  (:mod:`fedpriv.zonal.secure_sum`). The ε against the zone node becomes the sum-level figure
  (``against_zone_node`` of the ε block). Default false (no masking: results as before).
- ``zonal-secagg-dropouts`` — d, the sampled clients of a zone that may drop after sharing
  their keys: threshold t = max(n − d, ⌊n/2⌋ + 1); each HDP noise share is sized for t
  survivors, so d > 0 adds up to √(n/t) more noise. Default 0 (t = n: the zone noise is σ_i
  exactly). Only with ``zonal-secagg``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedpriv.scenarios.config.schema import boolean, choice, integer, key, real, text

from fedpriv.privacy.modes import mode_of
from fedpriv.privacy.modes import zonal as zonal_mode
from fedpriv.zonal import NOISE_PLACEMENTS, WEIGHTINGS, ZONE_ASSIGNMENTS, ZonalPlan
from fedpriv.zonal.secure_sum import ZoneSecAgg

if TYPE_CHECKING:
    from fedpriv.spec import DataSpec


def clients_per_round(cfg: Mapping[str, Any]) -> int:
    """k: ``clients-per-round`` or every client (0)."""
    return int(cfg["clients-per-round"]) or int(cfg["num-clients"])


def parse_placements(text: str) -> list[str]:
    """``"none,ldp,hdp"`` -> list (ValueError on an unknown or missing placement)."""
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    if not items or any(x not in NOISE_PLACEMENTS for x in items):
        raise ValueError(text)
    return items


def parse_zone_counts(text: str, num_clients: int) -> list[int]:
    """``"1,2,5"`` -> [1, 2, 5] ('' -> []); ValueError outside [1, num_clients]."""
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    counts = [int(x) for x in items]
    if any(not 1 <= c <= num_clients for c in counts):
        raise ValueError(text)
    return counts


def plan_from_config(cfg: Mapping[str, Any], data: DataSpec | None = None) -> ZonalPlan:
    """The :class:`ZonalPlan` of a resolved config (train sizes only for samples weighting).

    ``data``: the party's :class:`fedpriv.spec.DataSpec` (its spec's); None (a check of a
    config, before any spec is built): read from ``cfg``.
    """
    counts = None
    if cfg["zone-weighting"] == "samples":
        from fedpriv.clients.partitions import federated_data

        from fedpriv.spec import KEY, DataSpec, keyed_fields

        if (
            data is None
        ):  # a resolved config has every key (fedpriv.scenarios.config.specs.build; not
            # imported here: the node's key declarations import this module)
            data = DataSpec(**{f.name: cfg[f.metadata[KEY]] for f in keyed_fields(DataSpec)})
        counts = [len(c.x_train) for c in federated_data(data).clients]
    return ZonalPlan.build(
        num_clients=int(cfg["num-clients"]),
        num_zones=int(cfg["num-zones"]),
        clients_per_round=int(cfg["clients-per-round"]),
        noise_multiplier=float(cfg["noise-multiplier"]),
        clipping_norm=float(cfg["clipping-norm"]),
        placement=cfg["noise-placement"],
        assignment=cfg["zone-assignment"],
        zone_map=cfg["zone-map"] or None,
        hdp_fraction=float(cfg["hdp-fraction"]),
        ldp_fraction=float(cfg["ldp-fraction"]),
        weighting=cfg["zone-weighting"],
        num_examples=counts,
        example_cap=int(cfg["zonal-example-cap"]),
    )


def secagg_from_config(cfg: Mapping[str, Any]) -> ZoneSecAgg | None:
    """The zones' SecAgg settings of a resolved config (None: ``zonal-secagg`` is false)."""
    if not cfg.get("zonal-secagg", False):
        return None
    return ZoneSecAgg(dropouts=int(cfg.get("zonal-secagg-dropouts", 0)))


def _variant_label(placement: str, zones: int, sweep: bool) -> str:
    return f"s{zones}-{placement}" if sweep else placement


def compare_variants(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One config per (number of zones, placement) of a ``zonal-compare`` run."""
    placements = parse_placements(cfg["zonal-compare-placements"])
    sweep = parse_zone_counts(cfg["zonal-sweep-zones"], int(cfg["num-clients"]))
    zone_counts = sweep or [int(cfg["num-zones"])]
    out = []
    for zones in zone_counts:
        for placement in placements:
            label = _variant_label(placement, zones, bool(sweep))
            out.append(
                {
                    **cfg,
                    "noise-placement": placement,
                    "num-zones": zones,
                    "output-dir": str(Path(cfg["output-dir"]) / label),
                    "_label": label,
                }
            )
    return out


ZONE_NODES, IN_SERVER = "zone-nodes", "in-server"
ZONAL_RUNTIMES = (ZONE_NODES, IN_SERVER)


def zone_nodes(cfg: Mapping[str, Any]) -> bool:
    """True when the run's zones are SuperNodes of their own (``zonal-runtime = zone-nodes``)."""
    zonal = mode_of(cfg) is zonal_mode.MODE
    return zonal and cfg.get("zonal-runtime", ZONE_NODES) == ZONE_NODES


def federation_size(cfg: Mapping[str, Any]) -> int:
    """How many SuperNodes the run needs: one per zone (the largest zone count of a sweep)
    with zone nodes, else one per client (``num-clients``)."""
    if not zone_nodes(cfg):
        return int(cfg["num-clients"])
    sweep = parse_zone_counts(cfg.get("zonal-sweep-zones", ""), int(cfg["num-clients"]))
    return max([int(cfg["num-zones"]), *sweep])


KEYS = (
    key("num-zones", 4, integer(1), "an integer >= 1 (<= num-clients)", "s, the number of zones"),
    key(
        "zone-assignment",
        "blocks",
        choice(ZONE_ASSIGNMENTS),
        " | ".join(ZONE_ASSIGNMENTS),
        "how partitions are grouped into zones",
    ),
    key(
        "zone-map",
        "",
        text,
        "'partition:zone,...' (e.g. '0:0,1:0,2:1'), a JSON object or list",
        "explicit zone of each partition (zone-assignment = map)",
    ),
    key(
        "noise-placement",
        "hdp",
        choice(NOISE_PLACEMENTS),
        " | ".join(NOISE_PLACEMENTS),
        "who adds the Gaussian noise (HDP Table I)",
    ),
    key(
        "ldp-fraction",
        0.0,
        real(0, 1),
        "a float in [0, 1] (ldp-fraction + hdp-fraction <= 1)",
        "beta: share of zones whose clients add LDP noise (mixed)",
    ),
    key(
        "hdp-fraction",
        0.0,
        real(0, 1),
        "a float in [0, 1] (ldp-fraction + hdp-fraction <= 1)",
        "alpha: share of zones whose super-node adds HDP noise (mixed)",
    ),
    key(
        "zone-weighting",
        "uniform",
        choice(WEIGHTINGS),
        " | ".join(WEIGHTINGS),
        "client weights w_k: 1, or min(n_k/cap, 1)",
    ),
    key(
        "zonal-example-cap",
        0,
        integer(0),
        "an integer >= 0 (0 = largest client train size)",
        "w-hat of samples weighting",
    ),
    key(
        "supernode-failure-rate",
        0.0,
        real(0, 1, hi_open=True),
        "a float in [0, 1)",
        "probability that an elected super-node fails in a round",
    ),
    key(
        "zonal-distributed-eval",
        "all",
        choice(("all", "sampled", "none")),
        "all | sampled | none",
        "which clients run distributed evaluation each round",
    ),
    key(
        "zonal-compare-placements",
        "none,ldp,hdp,cdp",
        text,
        "comma-separated placements out of " + " | ".join(NOISE_PLACEMENTS),
        "placements of a zonal-compare run",
    ),
    key(
        "zonal-sweep-zones",
        "",
        text,
        "'' or comma-separated zone counts, e.g. '1,2,5,10'",
        "numbers of zones of a zonal-compare sweep (HDP Fig. 3)",
    ),
    key(
        "zonal-runtime",
        ZONE_NODES,
        choice(ZONAL_RUNTIMES),
        " | ".join(ZONAL_RUNTIMES),
        "one SuperNode per zone (zone-nodes) or per client (in-server: zones in the ServerApp)",
    ),
    key(
        "zonal-save-replies",
        False,
        boolean,
        "true | false",
        "write every reply the ServerApp receives to output-dir/zone-replies (zone nodes)",
    ),
    key(
        "min-zone-clients",
        2,
        integer(2),
        "an integer >= 2 (1 would release one client's update)",
        "a zone node refuses a sample of 1 .. min-zone-clients - 1 of its clients (HDP: s=2, k=4)",
    ),
    key(
        "zonal-secagg",
        False,
        boolean,
        "true | false",
        "secure aggregation inside zones: the zone aggregator sees only the zone's sum (HDP IV)",
    ),
    key(
        "zonal-secagg-dropouts",
        0,
        integer(0),
        "an integer >= 0",
        "sampled clients of a zone that may drop in its SecAgg round (threshold n - d)",
    ),
)
