"""Distributed DP's utility: final accuracy against the target ε, against central
``global-dp`` and client-level LDP at the same ε.

``python -m bench.distributed_utility --out D`` runs every (method, ε, seed) cell of
:data:`METHODS` × ``--epsilons`` × ``--seeds`` on the privacy-utility page's setting
(:data:`bench.privacy_utility.BASE`: digits, 100 IID clients, 20 a round, 20 rounds) with
that page's machinery (:func:`bench.privacy_utility.run`: one simulation for every cell,
complete cells skipped). Each cell runs at the planner's z for its own config at the target
ε (:func:`fedpriv.privacy.accounting.target.noise_for_target`, what ``fedpriv epsilon
--target-epsilon`` prints), kept in ``D/planned-z.json``.

Like for like. Distributed DP with ``distributed-relation = poisson``: every client in the
SecAgg cohort, each includes its update on a secret coin of rate q = 0.2 (20 expected a
round, the sum divided by 20), its ε against the server (Skellam RDP, Agarwal, Kairouz & Liu
2021, Thm 3.5, amplified by Zhu & Wang 2019, Thm 6), relation "update present or absent,
noise share in both". Central DP: ``global-dp`` with Poisson sampling at q = 0.2, the sum
divided by 20, add/remove, which for a fixed-denominator sum equals replacing a client's
update by zero: the same relation, the same expected clients per round, the same
denominator. ``distributed-threshold`` = 100 (t = n): the noise added is the noise
accounted (with t < n the sum carries n/t times the accounted variance, the price of
tolerating dropouts). LDP: ``zonal`` with ``noise-placement = ldp`` (each sampled client adds
its Gaussian N(0, (zC)²) to its own clipped update, replace-one), at the z whose ε without
sampling amplification (``vs_curious_aggregator``: against the server, which sees each noised
update and picks the cohort) meets the target. :mod:`bench.distributed_utility_page` writes
the page and the plot.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from bench.privacy_utility import NO_DP, Method, run, slug
from fedpriv.privacy.modes import distributed_dp, global_dp, zonal

CENTRAL = Method(
    "central DP (global-dp, Poisson q = 0.2)",
    global_dp.MODE.name,
    "Gaussian on the server's sum of clipped updates, each client sampled with q = 0.2, the sum "
    "divided by 20; add/remove (sensitivity C) ≡ an update replaced by zero; PLD, amplified; "
    "trusts the server with every update",
    {"client-sampling": "poisson"},
)


def distributed(bits: int) -> Method:
    """Distributed DP at ``bits`` bits a coordinate (γ = 2^(bits − 6): the sum of 100 clients'
    noisy integers fits the ring Z_(2^bits) at 16 bits with γ = 1024)."""
    return Method(
        f"distributed DP, {bits} bits",
        distributed_dp.MODE.name,
        f"Skellam noise shares under SecAgg, {bits} bits a coordinate (γ = {scale_for(bits):g}),"
        " all 100 clients in the cohort, each includes its update on a secret coin q = 0.2, "
        "the sum divided by 20; update present or absent with its noise share in both sums; "
        "Skellam RDP amplified by the secret coin: holds against the server; t = n = 100",
        {
            "clients-per-round": 0,
            "distributed-relation": "poisson",
            "distributed-inclusion-rate": 0.2,
            "distributed-bits": bits,
            "distributed-scale": scale_for(bits),
            "distributed-threshold": 100,
        },
    )


def scale_for(bits: int) -> float:
    """γ for ``bits`` bits: 2^(bits − 6) (1024 at 16 bits, 64 at 12)."""
    return float(2 ** (bits - 6))


DISTRIBUTED_16 = distributed(16)
LDP = Method(
    "LDP (zonal, noise-placement = ldp)",
    zonal.MODE.name,
    "each sampled client adds N(0, (zC)²) to its clipped update before it leaves (replace-one, "
    "sensitivity 2C); z for the target ε without amplification by sampling "
    "(`vs_curious_aggregator`: against the server, which sees every noised update); one zone "
    "in the ServerApp",
    {"noise-placement": "ldp", "zonal-runtime": "in-server", "num-zones": 1},
)
# Diagnostic row: the same distributed-DP config at central DP's z (noise std on the sum / B =
# central's noise std / C; B = 1.0045·γC here), so its noise matches central DP's. Its ε (by
# the Skellam accountant, reported by the run) is above the column's target: the row measures
# what the mechanism itself (rotation, rounding, Skellam noise, the ring) costs at equal noise,
# apart from the accountant (docs/distributed-dp.md, "Why distributed DP needs more noise").
DISTRIBUTED_16_CENTRAL_Z = Method(
    "distributed DP, 16 bits, at central DP's z",
    DISTRIBUTED_16.mode,
    "as distributed DP, 16 bits, but at central DP's z for the column (not the planner's z "
    "for the target): equal noise, so its ε against the server, reported by the run, is "
    "above the target",
    DISTRIBUTED_16.overrides,
    z_from=(CENTRAL.mode, CENTRAL.overrides),
)
METHODS: tuple[Method, ...] = (DISTRIBUTED_16, CENTRAL, LDP, DISTRIBUTED_16_CENTRAL_Z)


def main(argv: Sequence[str] | None = None) -> int:
    from bench.privacy_utility import parse_grid

    args, epsilons, seeds, only = parse_grid(
        "Run the distributed-DP utility grid (complete cells skipped).", argv
    )
    methods = [m for m in (NO_DP, *METHODS) if only is None or slug(m.name) in only]
    return run(args.out, epsilons, seeds, args.rounds, args, methods)


if __name__ == "__main__":
    sys.exit(main())
