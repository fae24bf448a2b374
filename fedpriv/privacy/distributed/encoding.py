"""A client's update into Z_m and the server's modular sum back (distributed DP's encoding).

Client (Agarwal, Kairouz & Liu 2021, "The Skellam Mechanism ...", Algorithm 1; Kairouz, Liu
& Steinke 2021, §4)::

    x̃ = round_β(γ·U·clip_C(x)) + Sk(μ)   mod m,   m = 2^b,

with U the shared randomised Hadamard rotation (:mod:`.rotation`), γ the scale, round_β the
conditional randomised rounding to the bound ``rounded_norm_bound(γC, d, β)`` and Sk(μ) the
client's share of Skellam noise (:mod:`.quantize`). Server: the sum ``s = Σ_i x̃_i mod m`` of
the n survivors is unwrapped to its representative in [−m/2, m/2), divided by γ, rotated back
and cut to d coordinates (:func:`decode_sum`), then divided by n (:func:`decode_mean`).
Decoding is exact up to the rounding error (< √d_pad/γ per client in L2) and the noise,
provided the integer sum never leaves [−m/2, m/2) (choose b with :func:`bits_for`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedpriv.privacy.distributed import quantize, rotation
from fedpriv.validation import check_int, check_random_state, check_real

__all__ = [
    "EncodingParams",
    "EncodedUpdate",
    "self_sample",
    "encode",
    "decode_sum",
    "decode_mean",
    "bits_for",
]


@dataclass(frozen=True)
class EncodingParams:
    """Everything a client and the server agree on to encode and decode.

    ``dimension`` d (the model's size), ``clip_norm`` C, ``scale`` γ, ``bits`` b (m = 2^b),
    ``noise_variance`` μ (per client and coordinate, in integer units: after scaling by γ),
    ``rotation_seed`` (shared and public), ``beta`` β of conditional rounding.
    """

    dimension: int
    clip_norm: float
    scale: float
    bits: int
    noise_variance: float = 0.0
    rotation_seed: int = 0
    beta: float = quantize.DEFAULT_BETA

    def __post_init__(self) -> None:
        check_int("dimension", self.dimension, lo=1)
        check_real("clip_norm", self.clip_norm, lo=0.0, lo_open=True)
        check_real("scale", self.scale, lo=0.0, lo_open=True)
        check_int("bits", self.bits, lo=2, hi=quantize.MAX_BITS)
        check_real("noise_variance", self.noise_variance, lo=0.0)
        check_int("rotation_seed", self.rotation_seed, lo=0)
        check_real("beta", self.beta, lo=0.0, hi=1.0, hi_open=True)

    @property
    def padded_dim(self) -> int:
        """The rotated vector's length: the smallest power of 2 >= d."""
        return rotation.padded_dimension(self.dimension)

    @property
    def norm_bound(self) -> float:
        """The L2 bound of one client's rounded vector (integer units): the sensitivity."""
        return quantize.rounded_norm_bound(self.scale * self.clip_norm, self.padded_dim, self.beta)

    def signs(self) -> np.ndarray:
        """The rotation's shared random signs."""
        return rotation.rotation_signs(self.rotation_seed, self.padded_dim)


@dataclass(frozen=True)
class EncodedUpdate:
    """One client's encoded vector in Z_m (``values``, uint64), whether clipping changed the
    update (``clipped``), the rounding bound it met and the draws it took. Only ``values``
    (masked) leaves the client: the flag and the draws depend on its data."""

    values: np.ndarray
    clipped: bool
    norm_bound: float
    tries: int


def self_sample(update: np.ndarray, rate: float, rng: np.random.Generator) -> np.ndarray:
    """The update with probability ``rate`` q, else zeros: a client's secret Poisson coin.

    The client still encodes, noises and masks the result, so its noise share is in the sum
    either way and secure aggregation hides which vectors are zero (the ``poisson`` sampling
    of :mod:`fedpriv.privacy.distributed.accounting`). Draw the coin from the client's secret
    Generator.
    """
    rng = check_random_state(rng)
    rate = check_real("rate", rate, lo=0.0, hi=1.0)
    update = np.asarray(update, dtype=np.float64)
    return update.copy() if rng.random() < rate else np.zeros_like(update)


def encode(update: np.ndarray, params: EncodingParams, rng: np.random.Generator) -> EncodedUpdate:
    """``round_β(γ·U·clip_C(x)) + Sk(μ) mod 2^b`` (client side; deterministic given ``rng``).

    ``update`` is the flat model update of length ``params.dimension``; ``rng`` draws the
    rounding and the noise (secret to the client: pass an OS-seeded Generator in a run).
    """
    rng = check_random_state(rng)
    update = np.asarray(update, dtype=np.float64).reshape(-1)
    if update.size != params.dimension:
        raise ValueError(
            f"len(update) = {update.size} is not allowed; expected dimension = {params.dimension}"
        )
    clipped = quantize.clip_l2(update, params.clip_norm)
    was_clipped = bool(np.linalg.norm(update) > params.clip_norm)
    scaled = params.scale * rotation.rotate(clipped, params.signs())
    rounded = quantize.conditional_round(scaled, params.norm_bound, rng)
    noisy = rounded.values + quantize.skellam_noise(scaled.size, params.noise_variance, rng)
    ring = quantize.to_ring(noisy, params.bits)
    return EncodedUpdate(ring, was_clipped, rounded.norm_bound, rounded.tries)


def decode_sum(ring_sum: np.ndarray, params: EncodingParams) -> np.ndarray:
    """``U⁻¹·centred(s)/γ`` cut to d: the sum of the survivors' clipped updates, plus noise."""
    ring_sum = np.asarray(ring_sum)
    if ring_sum.shape != (params.padded_dim,):
        raise ValueError(
            f"ring_sum.shape = {ring_sum.shape} is not allowed; expected ({params.padded_dim},)"
        )
    integers = quantize.centred(ring_sum, params.bits).astype(np.float64)
    return rotation.unrotate(integers / params.scale, params.signs(), params.dimension)


def decode_mean(
    ring_sum: np.ndarray, params: EncodingParams, survivors: int, *, rate: float = 1.0
) -> np.ndarray:
    """:func:`decode_sum` divided by ``rate·survivors``: the survivors whose vectors are in
    the sum, times the inclusion rate q of :func:`self_sample` (1: every update included; q:
    an unbiased mean over the expected number of included updates)."""
    survivors = check_int("survivors", survivors, lo=1)
    rate = check_real("rate", rate, lo=0.0, hi=1.0, lo_open=True)
    return decode_sum(ring_sum, params) / (rate * survivors)


def bits_for(params: EncodingParams, clients: int, *, tail_sigmas: float = 6.0) -> int:
    """The smallest b for which the integer sum of ``clients`` vectors fits [−m/2, m/2) with
    margin: ``m/2 > k·√(n·(c²/d + 1/4 + μ))`` per coordinate (c = γC, k = ``tail_sigmas``).

    After the rotation each coordinate of one client's vector has variance about ``c²/d``,
    rounding adds at most 1/4 and the noise μ; a coordinate of the sum wraps with
    probability about ``2·Φ(−k)`` (KLS §4, the modulus choice). A heuristic, not a guarantee.
    """
    clients = check_int("clients", clients, lo=1)
    tail_sigmas = check_real("tail_sigmas", tail_sigmas, lo=0.0, lo_open=True)
    c = params.scale * params.clip_norm
    spread = math.sqrt(clients * (c**2 / params.padded_dim + 0.25 + params.noise_variance))
    needed = 2.0 * (tail_sigmas * spread + 1.0)
    return max(2, math.ceil(math.log2(needed)))
