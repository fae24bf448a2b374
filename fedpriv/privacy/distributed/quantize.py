"""Clipping, conditional randomised rounding, Skellam noise and the modular ring Z_m.

* L2 clipping: ``x·min(1, C/‖x‖₂)``.
* Conditional randomised rounding (Kairouz, Liu & Steinke 2021, "The Distributed Discrete
  Gaussian Mechanism ...", §4.1 and Thm 1's norm bound): each coordinate goes to ``⌊x⌋ + 1``
  with probability ``x − ⌊x⌋`` (else ``⌊x⌋``), and the draw is repeated until the rounded
  vector's norm is <= the bound

      ‖x̃‖₂ <= min{ c + √d,  √(c² + d/4 + √(2·ln(1/β))·(c + √d/2)) },   c = ‖x‖₂,

  which one unconditioned draw meets with probability >= 1 − β (β = 0: the first, always
  true, bound). The bound, not c, is the L2 sensitivity the accountant uses.
* Skellam noise (Agarwal, Kairouz & Liu 2021, "The Skellam Mechanism ...", Def. 2.1):
  ``Sk(μ) = Poisson(μ/2) − Poisson(μ/2)``, integer, mean 0, variance μ; independent
  shares add up, ``Σ_i Sk(μ_i) = Sk(Σ_i μ_i)``.
* Z_m with m = 2^b: values are kept as ``uint64`` in [0, m); :func:`centred` maps them back
  to the representatives in [−m/2, m/2).

Randomness only through an explicit ``numpy.random.Generator``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedpriv.validation import check_int, check_random_state, check_real

__all__ = [
    "MAX_BITS",
    "DEFAULT_BETA",
    "clip_l2",
    "rounded_norm_bound",
    "RoundedVector",
    "conditional_round",
    "skellam_noise",
    "to_ring",
    "centred",
]

MAX_BITS = 62  # m = 2^b with b <= 62: sums of two ring elements never overflow uint64/int64
DEFAULT_BETA = math.exp(-0.5)  # KLS's default: about 1.6 draws per client on average
MAX_TRIES = 1000


def clip_l2(vector: np.ndarray, clip_norm: float) -> np.ndarray:
    """``x·min(1, C/‖x‖₂)`` as a fresh float64 vector (a zero vector stays zero)."""
    clip_norm = check_real("clip_norm", clip_norm, lo=0.0, lo_open=True)
    vector = np.array(vector, dtype=np.float64, copy=True).reshape(-1)
    if not np.all(np.isfinite(vector)):
        raise ValueError("vector is not allowed: it holds NaN or Inf; expected finite values")
    norm = float(np.linalg.norm(vector))
    if norm > clip_norm:
        vector *= clip_norm / norm
    return vector


def rounded_norm_bound(norm: float, dimension: int, beta: float = DEFAULT_BETA) -> float:
    """The L2 bound conditional rounding enforces on a vector of norm ``norm`` (KLS Thm 1).

    ``min{c + √d, √(c² + d/4 + √(2 ln(1/β))·(c + √d/2))}``; β = 0 gives ``c + √d``, which
    any rounding of the vector meets.
    """
    norm = check_real("norm", norm, lo=0.0)
    dimension = check_int("dimension", dimension, lo=1)
    beta = check_real("beta", beta, lo=0.0, hi=1.0, hi_open=True)
    always = norm + math.sqrt(dimension)
    if beta == 0.0:
        return always
    squared = norm**2 + dimension / 4.0
    squared += math.sqrt(2.0 * math.log(1.0 / beta)) * (norm + math.sqrt(dimension) / 2.0)
    return min(always, math.sqrt(squared))


@dataclass(frozen=True)
class RoundedVector:
    """A conditionally rounded vector: ``values`` (int64), the ``norm_bound`` it met, the
    number of draws it took (``tries``)."""

    values: np.ndarray
    norm_bound: float
    tries: int


def conditional_round(
    scaled: np.ndarray,
    norm_bound: float,
    rng: np.random.Generator,
    *,
    max_tries: int = MAX_TRIES,
) -> RoundedVector:
    """Randomised rounding of ``scaled``, redrawn until ``‖x̃‖₂ <= norm_bound`` (KLS §4.1).

    Unbiased per draw (``E x̃ = x``); the conditioning adds a bias of order β. Refuses a bound
    below ``‖x‖₂`` (no draw could meet it for long) and gives up after ``max_tries`` draws.
    """
    rng = check_random_state(rng)
    scaled = np.asarray(scaled, dtype=np.float64).reshape(-1)
    norm_bound = check_real("norm_bound", norm_bound, lo=float(np.linalg.norm(scaled)))
    max_tries = check_int("max_tries", max_tries, lo=1)
    floor = np.floor(scaled)
    fraction = scaled - floor
    base = floor.astype(np.int64)
    for tries in range(1, max_tries + 1):
        values = base + (rng.random(scaled.size) < fraction)
        if math.sqrt(float(np.dot(values, values))) <= norm_bound:
            return RoundedVector(values, norm_bound, tries)
    raise RuntimeError(
        f"conditional rounding did not meet norm_bound = {norm_bound:g} in {max_tries} draws"
    )


def skellam_noise(size: int, variance: float, rng: np.random.Generator) -> np.ndarray:
    """``size`` draws of ``Sk(μ) = Poisson(μ/2) − Poisson(μ/2)`` (int64, variance μ = variance).

    ``variance = 0`` gives zeros (no noise).
    """
    rng = check_random_state(rng)
    size = check_int("size", size, lo=0)
    variance = check_real("variance", variance, lo=0.0)
    if variance == 0.0:
        return np.zeros(size, dtype=np.int64)
    half = variance / 2.0
    return rng.poisson(half, size).astype(np.int64) - rng.poisson(half, size).astype(np.int64)


def _modulus(bits: int) -> int:
    return 1 << check_int("bits", bits, lo=1, hi=MAX_BITS)


def to_ring(values: np.ndarray, bits: int) -> np.ndarray:
    """``values mod 2^bits`` as uint64 in [0, m) (two's complement: −1 becomes m − 1)."""
    modulus = _modulus(bits)
    values = np.asarray(values)
    if not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f"values.dtype = {values.dtype} is not allowed; expected integers")
    return values.astype(np.int64).view(np.uint64) & np.uint64(modulus - 1)


def centred(ring: np.ndarray, bits: int) -> np.ndarray:
    """The representatives in [−m/2, m/2) of ring elements (int64): the modular unwrap."""
    modulus = _modulus(bits)
    half = np.uint64(modulus // 2)
    ring = np.asarray(ring, dtype=np.uint64)
    shifted = (ring + half) & np.uint64(modulus - 1)
    return shifted.astype(np.int64) - np.int64(modulus // 2)
