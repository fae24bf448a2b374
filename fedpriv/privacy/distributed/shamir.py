"""Shamir's t-of-n secret sharing over the prime field GF(p), p = 2^521 − 1.

A secret s < p (a 32-byte seed or private key read as an integer) is the constant term of a
random polynomial ``f(z) = s + a_1·z + ... + a_{t−1}·z^{t−1} mod p``; shareholder k gets
``(x_k, f(x_k))`` with x_k >= 1 distinct. Any t shares give ``s = f(0)`` by Lagrange
interpolation, ``s = Σ_k y_k·Π_{l≠k} x_l/(x_l − x_k) mod p``; any t − 1 shares are
independent of s (Shamir 1979, "How to share a secret"; the sharing step of SecAgg, Bonawitz
et al. 2017 §4, and SecAgg+, Bell et al. 2020). p is the Mersenne prime M521, wide enough for
any 64-byte secret. The coefficients come from :mod:`secrets` (OS entropy).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Optional

from fedpriv.validation import check_int

__all__ = ["PRIME", "SHARE_BYTES", "Share", "share_secret", "reconstruct_secret"]

PRIME = (1 << 521) - 1
SHARE_BYTES = 4 + (PRIME.bit_length() + 7) // 8  # x as uint32, y as 66 bytes


@dataclass(frozen=True)
class Share:
    """One share ``(x, y = f(x))`` of a secret; ``x >= 1``."""

    x: int
    y: int


def _check_secret(secret: int) -> int:
    if isinstance(secret, bool) or not isinstance(secret, int) or not 0 <= secret < PRIME:
        raise ValueError(f"secret = {secret!r} is not allowed; expected an integer in [0, PRIME)")
    return secret


def _coefficient(entropy: Optional[Callable[[int], bytes]]) -> int:
    if entropy is None:
        return secrets.randbelow(PRIME)
    return int.from_bytes(entropy(82), "big") % PRIME  # 656 bits: bias < 2^-134


def share_secret(
    secret: int,
    threshold: int,
    xs: Iterable[int],
    entropy: Optional[Callable[[int], bytes]] = None,
) -> dict[int, Share]:
    """Shares of ``secret`` at the points ``xs`` (distinct, >= 1), any ``threshold`` of which
    reconstruct it: ``{x: Share(x, f(x))}``. The coefficients come from :mod:`secrets`, or
    from ``entropy`` (n -> n random bytes; seeded tests only)."""
    secret = _check_secret(secret)
    points = [check_int("x", x, lo=1, hi=PRIME - 1) for x in xs]
    if len(set(points)) != len(points):
        raise ValueError(f"xs = {points} is not allowed; expected distinct points")
    threshold = check_int("threshold", threshold, lo=1, hi=max(len(points), 1))
    coefficients = [secret] + [_coefficient(entropy) for _ in range(threshold - 1)]
    return {x: Share(x, _evaluate(coefficients, x)) for x in points}


def _evaluate(coefficients: list[int], x: int) -> int:
    """``f(x) mod p`` by Horner's rule."""
    value = 0
    for coefficient in reversed(coefficients):
        value = (value * x + coefficient) % PRIME
    return value


def reconstruct_secret(shares: Mapping[int, Share] | Iterable[Share], threshold: int) -> int:
    """``f(0)`` from at least ``threshold`` shares (Lagrange at 0); fewer are refused.

    Only the first ``threshold`` shares (in order of x) are used: a polynomial of degree
    t − 1 is fixed by t points.
    """
    threshold = check_int("threshold", threshold, lo=1)
    items = list(shares.values()) if isinstance(shares, Mapping) else list(shares)
    unique = {share.x: share for share in items}
    if len(unique) != len(items):
        raise ValueError("shares are not allowed: two shares have the same x")
    if len(unique) < threshold:
        raise ValueError(
            f"shares = {len(unique)} are not allowed; expected at least threshold = {threshold} "
            "shares to reconstruct a secret"
        )
    chosen = [unique[x] for x in sorted(unique)[:threshold]]
    secret = 0
    for k, share in enumerate(chosen):
        numerator, denominator = 1, 1
        for m, other in enumerate(chosen):
            if m != k:
                numerator = numerator * other.x % PRIME
                denominator = denominator * (other.x - share.x) % PRIME
        secret = (secret + share.y * numerator * pow(denominator, -1, PRIME)) % PRIME
    return secret
