"""Secure aggregation inside a zone: the zone node learns only its zone's sum (HDP §IV).

HDP §IV: "we advocate for the usage of secure aggregation [37], [38] protocols (within zones)
to ensure that the super-node gets an aggregate view of the gradients from individual
clients"; §IV-C: "nodes in the zone utilize secure aggregation to share an aggregated view
of the gradients with the super-node". With ``zonal-secagg = true`` each zone's sampled
clients (the cohort, n of them; ids 0..n−1 in partition order) run the SecAgg round of
:mod:`fedpriv.privacy.distributed.secagg` (Bonawitz et al. 2017: X25519 pairwise masks,
self masks, Shamir shares of both, threshold t) among themselves. Client k:

1. its term as today (:func:`fedpriv.zonal.release.client_contribution`): ``clip(Δ_k, C)``
   (hdp, cdp), ``clip(Δ_k, C) + N(0, (z·C)²)`` (ldp) or ``Δ_k`` (none), times its public
   weight w_k; in an HDP zone plus its share of the zone noise, ``N(0, (z·C)²/t)``
   (:func:`noise_share_std`): the zone node cannot add noise to a sum it must not see
   un-noised, so the noise is in the sum before it is unmasked;
2. fixed point: ``x̃_k = rint(γ·x_k) mod 2^b``, γ = 2^f (:func:`encode_fixed_point`;
   default b = 62, f = 30: a rounding error of at most 2^−31 per coordinate and client);
3. masks ``x̃_k`` and sends only ``y_k`` (uniform on Z_m to anyone without the seeds).

The zone node sums the survivors' y, has the shareholders reveal what recovers the dropped
clients' pairwise masks and the survivors' self masks, and gets ``Σ_{k∈S} x̃_k mod m``
exactly (:func:`secure_zone_sum`); decoded (``centred/γ``) that is ``Σ_{k∈S} w_k x_k`` up to
the rounding. Δ(i) is that over ``q·W_i`` (HDP Algorithm 1 line 12), as without SecAgg.

Noise. t = ``max(n − d, ⌊n/2⌋ + 1)`` with d = ``zonal-secagg-dropouts`` (default 0: t = n);
the summed shares have variance ``(z·C)²·|S|/t ≥ (z·C)²`` whenever the sum can be unmasked
(``|S| ≥ t``), so Δ(i) carries noise of std ``σ_i·√(|S|/t)`` ≥ σ_i = z·C/(q·W_i), exactly σ_i
when nobody drops (d = 0: the released noise has the distribution it has without SecAgg).
A zone with no sampled client has no cohort: its node adds σ_i itself, as without SecAgg.

Simulated parties: the protocol's arithmetic (keys, masks, shares, reveals, unmasking) is
the real one, but the cohort runs in the process that aggregates (the zone node that hosts
its clients' training, or the ServerApp with ``zonal-runtime = in-server``), so what this
module models is the aggregator's *view* (:class:`ZoneSecureSum`), not a separation between
processes; see docs/privacy.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedpriv.privacy.distributed import quantize
from fedpriv.privacy.distributed.masks import Entropy
from fedpriv.privacy.distributed.secagg import SecAggClient, SecAggParams, SecAggServer
from fedpriv.validation import check_int

DEFAULT_BITS = quantize.MAX_BITS  # m = 2^62
DEFAULT_FRACTION_BITS = 30  # γ = 2^30


@dataclass(frozen=True)
class ZoneSecAgg:
    """The zones' SecAgg settings: ``bits`` b (m = 2^b), ``fraction_bits`` f (γ = 2^f) and
    ``dropouts`` d, the sampled clients of a zone that may drop after sharing their keys."""

    bits: int = DEFAULT_BITS
    fraction_bits: int = DEFAULT_FRACTION_BITS
    dropouts: int = 0

    def __post_init__(self) -> None:
        check_int("bits", self.bits, lo=8, hi=quantize.MAX_BITS)
        check_int("fraction_bits", self.fraction_bits, lo=0, hi=self.bits - 2)
        check_int("dropouts", self.dropouts, lo=0)

    @property
    def scale(self) -> float:
        """γ = 2^f."""
        return float(2**self.fraction_bits)

    def threshold(self, cohort: int) -> int:
        """t = ``max(n − d, ⌊n/2⌋ + 1)`` for a cohort of n (SecAgg needs t > n/2)."""
        n = check_int("cohort", cohort, lo=1)
        return max(n - self.dropouts, n // 2 + 1)


def noise_share_std(
    level: str, noise_multiplier: float, clipping_norm: float, threshold: int
) -> float:
    """A client's share of its zone's noise, in sum units: ``z·C/√t`` in an HDP zone (t
    shares give the zone noise z·C on ``Σ w_k x_k``, i.e. σ_i = z·C/(q·W_i) on Δ(i)), else 0
    (LDP clients noise their own term; CDP noise is the server's; none has none)."""
    if level != "hdp" or noise_multiplier <= 0:
        return 0.0
    return float(noise_multiplier) * float(clipping_norm) / math.sqrt(check_int("t", threshold))


def flatten(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The layers of one update as one float64 vector."""
    return np.concatenate([np.asarray(a, np.float64).reshape(-1) for a in arrays])


def unflatten(vector: np.ndarray, template: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``vector`` cut into float64 layers shaped like ``template``."""
    out, start = [], 0
    for layer in template:
        size = int(np.size(layer))
        out.append(np.asarray(vector[start : start + size], np.float64).reshape(np.shape(layer)))
        start += size
    return out


def encode_fixed_point(vector: np.ndarray, settings: ZoneSecAgg, cohort: int) -> np.ndarray:
    """``rint(γ·x) mod 2^b`` (uint64). Refused when a sum of ``cohort`` such vectors could
    leave [−m/2, m/2) (then the modular sum would not decode)."""
    scaled = np.rint(settings.scale * np.asarray(vector, np.float64))
    limit = 2.0 ** (settings.bits - 1) / max(1, int(cohort))
    if scaled.size and not float(np.max(np.abs(scaled))) < limit:
        raise ValueError(
            f"a client's vector = {float(np.max(np.abs(vector))):.3g} (max |x|) is not allowed; "
            f"expected |x| < 2^{settings.bits - 1 - settings.fraction_bits}/{cohort} to fit Z_m"
        )
    return quantize.to_ring(scaled.astype(np.int64), settings.bits)


def decode_fixed_point(ring: np.ndarray, settings: ZoneSecAgg) -> np.ndarray:
    """``centred(s)/γ``: the real sum of a modular sum of :func:`encode_fixed_point` vectors."""
    return quantize.centred(ring, settings.bits).astype(np.float64) / settings.scale


@dataclass
class ZoneSecureSum:
    """What the zone node sees of one zone's SecAgg round, and the decoded sum.

    ``masked``: partition -> its masked vector y (uint64, uniform on Z_m); ``ring_sum``:
    ``Σ_{k∈S} x̃_k mod m``; ``survivors`` S and ``dropped`` (partitions); ``threshold`` t;
    ``total``: the decoded sum as float64 layers."""

    masked: dict[int, np.ndarray]
    ring_sum: np.ndarray
    survivors: list[int]
    dropped: list[int]
    threshold: int
    total: list[np.ndarray] = field(repr=False, default_factory=list)

    def record(self) -> dict[str, int]:
        """The round record's numbers (no value of any vector)."""
        return {
            "cohort": len(self.survivors) + len(self.dropped),
            "threshold": self.threshold,
            "survivors": len(self.survivors),
        }


def secure_zone_sum(
    encoded: Sequence[np.ndarray],
    clients: Sequence[int],
    settings: ZoneSecAgg,
    *,
    drop: Collection[int] = (),
    context: bytes = b"",
    entropy: Entropy | None = None,
) -> ZoneSecureSum:
    """One SecAgg round among ``clients`` (partition ids, one encoded vector each, uint64 in
    Z_m): keys, shares, masking; the clients in ``drop`` leave after sharing (their y never
    arrives); the survivors reveal; the zone node unmasks. Fewer than t survivors:
    :class:`fedpriv.privacy.distributed.secagg.InsufficientShares`. ``entropy`` (n -> n
    bytes) replaces OS entropy for keys, seeds and shares: seeded tests only."""
    n = len(clients)
    if n != len(encoded) or n == 0:
        raise ValueError(f"{len(encoded)} encoded vectors for {n} clients; expected one each, >= 1")
    size = int(np.size(encoded[0]))
    t = settings.threshold(n)
    params = SecAggParams(n, t, settings.bits, size, context=context)
    parties = [SecAggClient(i, params, entropy=entropy) for i in range(n)]
    public = {i: c.public_key for i, c in enumerate(parties)}
    held: dict[int, dict] = {i: {} for i in range(n)}
    for i, party in enumerate(parties):
        for holder, pair in party.make_shares(public).items():
            held[holder][i] = pair
    for i, party in enumerate(parties):
        party.receive_shares(held[i])
    gone = {i for i, p in enumerate(clients) if p in set(drop)}
    masked = {i: parties[i].mask(encoded[i]) for i in range(n) if i not in gone}
    alive = sorted(masked)
    reveals = {i: parties[i].reveal(alive, sorted(gone)) for i in alive}
    ring_sum = SecAggServer(params, public).unmask(masked, reveals)
    return ZoneSecureSum(
        {clients[i]: y for i, y in masked.items()},
        ring_sum,
        [clients[i] for i in alive],
        [clients[i] for i in sorted(gone)],
        t,
    )


def secure_zone_total(
    terms: Sequence[Sequence[np.ndarray]],
    weights: Sequence[float],
    clients: Sequence[int],
    settings: ZoneSecAgg,
    *,
    level: str,
    noise_multiplier: float,
    clipping_norm: float,
    share_rng: Callable[[int], np.random.Generator],
    template: Sequence[np.ndarray],
    drop: Collection[int] = (),
    context: bytes = b"",
    entropy: Entropy | None = None,
) -> tuple[ZoneSecureSum, float]:
    """``Σ_{k∈S} w_k x_k`` (+ the survivors' noise shares in an HDP zone) through SecAgg.

    ``terms[k]``: client ``clients[k]``'s term (clipped, LDP-noised per its level);
    ``share_rng(p)``: client p's Generator for its noise share. Returns the view (its
    ``total`` set) and the std of the summed noise shares on the sum, ``z·C·√(|S|/t)``."""
    n = len(clients)
    t = settings.threshold(n)
    share = noise_share_std(level, noise_multiplier, clipping_norm, t)
    vectors = []
    for p, term, w in zip(clients, terms, weights):
        x = float(w) * flatten(term)
        if share > 0:
            x = x + share_rng(p).normal(0.0, share, size=x.size)
        vectors.append(x)
    encoded = [encode_fixed_point(x, settings, n) for x in vectors]
    view = secure_zone_sum(encoded, clients, settings, drop=drop, context=context, entropy=entropy)
    view.total = unflatten(decode_fixed_point(view.ring_sum, settings), template)
    return view, share * math.sqrt(len(view.survivors))


def secure_zone_delta(
    terms: Sequence[Sequence[np.ndarray]],
    weights: Sequence[float],
    clients: Sequence[int],
    settings: ZoneSecAgg,
    *,
    level: str,
    noise_multiplier: float,
    clipping_norm: float,
    denominator: float,
    share_rng: Callable[[int], np.random.Generator],
    template: Sequence[np.ndarray],
    drop: Collection[int] = (),
    context: bytes = b"",
) -> tuple[list[np.ndarray], ZoneSecureSum, float]:
    """HDP Algorithm 1 line 12 through SecAgg: ``Δ(i) = Σ_{k∈S} w_k x_k / (q·W_i)``
    (``denominator`` q·W_i), the view, and the std of the noise shares in Δ(i),
    ``σ_i·√(|S|/t)`` in an HDP zone (0 elsewhere)."""
    view, share_std = secure_zone_total(
        terms,
        weights,
        clients,
        settings,
        level=level,
        noise_multiplier=noise_multiplier,
        clipping_norm=clipping_norm,
        share_rng=share_rng,
        template=template,
        drop=drop,
        context=context,
    )
    return [a / denominator for a in view.total], view, share_std / denominator
