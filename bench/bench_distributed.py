"""The distributed-DP row of ``make bench``: one round of ``privacy = distributed-dp`` against
the same round with ``global-dp``, at 20 and at 100 clients a round, and what each client sends.

Both sides run the digits scenario with ``digits-mlp`` (4,810 weights), 100 clients in all,
one round, one local epoch, z = 1, C = 1, ``evaluate-in-train = false`` and only the sampled
clients evaluated, in the simulation engine (worker SuperNodes), one run after the other in
this process's order (global first, then distributed, at each cohort size). The figure is the
ratio of the runs' ``training_seconds`` (the round: for distributed DP its four message
exchanges, the clients' encoding and masking and the server's unmasking; for global DP one
train exchange and the server's noise), so start-up (Ray, workers, the model) is out; the goal
is <= 1.5x the central-DP round.

The bytes a client sends are the payloads of its messages as the client builds them
(:class:`fedpriv.privacy.distributed.party.RoundParty` at the run's resolved μ, b, t and padded
dimension d', a cohort of n on the wiring's SecAgg+ graph, ``party.cohort_params``): the two
public keys, its Shamir shares sealed to each of its k + 1 holders (AES-256-GCM), the masked
vector as sent (uint64: 8·d' bytes; packed to b bits it would be
⌈b·d'/8⌉, :func:`fedpriv.privacy.distributed.cost.client_upload_bytes`) and its reveal at
unmasking (no client dropped); against global DP's float32 update (4·d bytes). Flower's
message framing is not counted on either side.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

TOTAL_CLIENTS = 100
COMMON = (
    "scenario='digits' model='digits-mlp' num-server-rounds=1 local-epochs=1 "
    "noise-multiplier=1.0 clipping-norm=1.0 evaluate-in-train=false evaluate-sampled-only=true"
)
DIMENSION = 4810  # digits-mlp's weights (checked against the run's summary where it says)


def client_bytes(cohort: int, dimension: int = DIMENSION) -> dict[str, int]:
    """The payload bytes one client of a cohort of ``cohort`` sends in one distributed-DP
    round, by step (built with the client's own code at the resolved parameters)."""
    from fedpriv.scenarios.config.features import CATALOG
    from fedpriv.scenarios.config.specs import run_spec

    from fedpriv.privacy.distributed import cost, masks, party
    from fedpriv.privacy.modes import distributed_dp

    spec = run_spec(
        CATALOG.resolve_run_config(
            {"privacy": "distributed-dp", "num-clients": TOTAL_CLIENTS,
             "clients-per-round": cohort, "noise-multiplier": 1.0, "clipping-norm": 1.0,
             "num-server-rounds": 1}
        )
    )  # fmt: skip
    r = distributed_dp.resolve(spec, dimension)
    label = b"bench/round-1"
    secrets = [bytes([i % 251 + 1]) * party.SECRET_BYTES for i in range(cohort)]
    keys = [party.RoundParty.public_keys_of(s, label, masks.DEFAULT_AGREEMENT) for s in secrets]
    mask_keys, channel_keys = [k.mask for k in keys], [k.channel for k in keys]
    params = party.cohort_params(
        threshold=r.threshold, bits=r.encoding.bits, size=r.encoding.padded_dim,
        context=label, mask_keys=mask_keys,
    )  # fmt: skip
    sealed = {
        i: party.RoundParty(secrets[i], label, i, params).sealed_shares(mask_keys, channel_keys)
        for i in range(cohort)
    }
    me = party.RoundParty(secrets[0], label, 0, params)
    masked = me.mask(np.zeros(params.size, dtype=np.uint64), mask_keys)
    held = {owner: blobs[0] for owner, blobs in sealed.items() if 0 in blobs}
    reveal = me.reveal(channel_keys, held, list(range(cohort)), [])
    packed = cost.client_upload_bytes(params.size, params.bits, params.degree).masked_vector
    return {
        "keys": len(keys[0].mask) + len(keys[0].channel),
        "shares": sum(len(b) for b in sealed[0].values()),
        "masked": int(masked.nbytes),
        "masked-packed": packed,
        "reveal": len(reveal),
        "bits": params.bits,
        "neighbours": params.degree,
        "padded": params.size,
        "float32": 4 * dimension,
    }


def run_cell(overrides: str, out: Path) -> dict:
    """The summary of one ``fedpriv run`` into an emptied ``out``
    (:func:`bench.simrun.run_simulation`)."""
    from bench.simrun import run_simulation

    return run_simulation(overrides, out)[1]


def _run_retrying(overrides: str, out: Path, tries: int = 6) -> dict:
    """One run's summary; a run refused before its start (exit status 2: on a loaded machine,
    "Ray did not start": its raylet has 30 s to register) is tried again, up to ``tries``
    times."""
    for attempt in range(tries):
        try:
            return run_cell(overrides, out)
        except RuntimeError as err:
            refused = "exit status 2" in str(err) or "Ray did not start" in str(err)
            if not refused or attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def distributed_rows(
    tmp: Path, quick: bool, sizes: tuple[int, ...] = (20, 100), repeats: int = 1
) -> list[str]:
    """Rows: at each cohort size, distributed-dp's round vs global-dp's, and the bytes.

    ``repeats`` > 1 runs the pair that many times in alternating order (global first, then
    distributed first, ...: a load that drifts during the pair hits both sides alike) and
    reports each side's median and the ratio of the medians."""
    total = 20 if quick else TOTAL_CLIENTS
    rows = []
    for per_round in (10, 20) if quick else sizes:
        cells: dict[str, list[float]] = {"global-dp": [], "distributed-dp": []}
        for attempt in range(repeats):
            order = ("global-dp", "distributed-dp")
            for mode in order if attempt % 2 == 0 else order[::-1]:
                summary = _run_retrying(
                    f"{COMMON} privacy='{mode}' num-clients={total} clients-per-round={per_round}",
                    tmp / f"distributed-{mode}-{per_round}",
                )
                cells[mode].append(float(summary["training_seconds"]))
        ddp, gdp = (float(np.median(cells[m])) for m in ("distributed-dp", "global-dp"))
        pairs = ", ".join(
            f"{d / g:.2f}" for d, g in zip(cells["distributed-dp"], cells["global-dp"])
        )
        runs = f" (median of {repeats}; each pair {pairs})" if repeats > 1 else ""
        sent = client_bytes(per_round)
        total_sent = sent["keys"] + sent["shares"] + sent["masked"] + sent["reveal"]
        rows.append(
            f"| distributed DP: 1 round, {total} clients, {per_round} per round, digits-mlp | "
            f"{ddp:.1f} s; a client sends {total_sent:,} B (masked "
            f"{sent['masked']:,} B = 8·{sent['padded']:,} as uint64, {sent['masked-packed']:,} "
            f"B packed at b = {sent['bits']}; keys {sent['keys']} B; sealed shares to "
            f"k + 1 = {sent['neighbours'] + 1} holders {sent['shares']:,} B; reveal "
            f"{sent['reveal']:,} B) | "
            f"global DP {gdp:.1f} s; a client sends {sent['float32']:,} B "
            "(float32 update) | "
            f"{ddp / gdp:.2f}x time{runs} (goal <= 1.5x); "
            f"{total_sent / sent['float32']:.2f}x bytes |"
        )
    return rows


if __name__ == "__main__":  # `python -m bench.bench_distributed [--quick] [--repeats=N] [20 100]`
    out = ROOT / "runs" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    chosen = tuple(int(a) for a in sys.argv[1:] if a.isdigit()) or (20, 100)
    repeats = next((int(a.split("=")[1]) for a in sys.argv if a.startswith("--repeats=")), 1)
    for row in distributed_rows(out, "--quick" in sys.argv, chosen, repeats):
        print(row, flush=True)
