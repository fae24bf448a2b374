"""The randomised Walsh–Hadamard rotation ``U = H·D/√d`` of distributed DP's encoding.

``D`` is a diagonal of random signs drawn from a seed every client shares, ``H`` the d×d
Walsh–Hadamard matrix (d a power of 2; vectors are zero-padded to it), so ``U`` is orthonormal:
``‖Ux‖₂ = ‖x‖₂`` and ``U⁻¹ = D·H/√d``. The rotation spreads a vector's mass evenly over its
coordinates, so that every coordinate of ``Ux`` is small (about ``‖x‖₂/√d``) and the modular
sum rarely wraps around (Kairouz, Liu & Steinke 2021, "The Distributed Discrete Gaussian
Mechanism for Federated Learning with Secure Aggregation", §4 "flattening"; Agarwal, Kairouz
& Liu 2021, "The Skellam Mechanism ...", §4).

The seed is public (the server may know it): privacy does not rest on it, only the wrap-around
probability does. The transform is the fast one, O(d log d), in float64.
"""

from __future__ import annotations

import math

import numpy as np

from fedpriv.validation import check_int

__all__ = ["padded_dimension", "rotation_signs", "walsh_hadamard", "rotate", "unrotate"]


def padded_dimension(dimension: int) -> int:
    """The smallest power of 2 >= ``dimension`` (the length every rotated vector has)."""
    dimension = check_int("dimension", dimension, lo=1)
    return 1 << (dimension - 1).bit_length()


def rotation_signs(seed: int, padded_dim: int) -> np.ndarray:
    """The diagonal of D: ``padded_dim`` signs ±1 from ``default_rng(seed)`` (shared, public)."""
    padded_dim = check_int("padded_dim", padded_dim, lo=1)
    if padded_dim & (padded_dim - 1):
        raise ValueError(f"padded_dim = {padded_dim} is not allowed; expected a power of 2")
    seed = check_int("seed", seed, lo=0)
    bits = np.random.default_rng(seed).integers(0, 2, size=padded_dim)
    return (2 * bits - 1).astype(np.float64)


def walsh_hadamard(vector: np.ndarray) -> np.ndarray:
    """``H·v/√d`` for a vector of power-of-2 length d (orthonormal, its own inverse).

    The butterfly of the fast transform, one stage per bit: pairs (a, b) that are h apart
    become (a + b, a − b); O(d log d), a fresh float64 array.
    """
    out = np.array(vector, dtype=np.float64, copy=True).reshape(-1)
    size = out.size
    if size == 0 or size & (size - 1):
        raise ValueError(f"len(vector) = {size} is not allowed; expected a power of 2")
    half = 1
    while half < size:
        pairs = out.reshape(-1, 2, half)
        first, second = pairs[:, 0, :].copy(), pairs[:, 1, :]
        pairs[:, 0, :] += second
        pairs[:, 1, :] = first - second
        half *= 2
    out /= math.sqrt(size)
    return out


def rotate(vector: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """``U·x = H·D·x/√d``: ``vector`` zero-padded to ``len(signs)``, then rotated."""
    vector = np.asarray(vector, dtype=np.float64).reshape(-1)
    if vector.size > signs.size:
        raise ValueError(
            f"len(vector) = {vector.size} is not allowed; expected <= len(signs) = {signs.size}"
        )
    padded = np.zeros(signs.size, dtype=np.float64)
    padded[: vector.size] = vector
    return walsh_hadamard(padded * signs)


def unrotate(rotated: np.ndarray, signs: np.ndarray, dimension: int) -> np.ndarray:
    """``U⁻¹·y = D·H·y/√d``, cut back to its first ``dimension`` coordinates."""
    rotated = np.asarray(rotated, dtype=np.float64).reshape(-1)
    if rotated.size != signs.size:
        raise ValueError(
            f"len(rotated) = {rotated.size} is not allowed; expected len(signs) = {signs.size}"
        )
    dimension = check_int("dimension", dimension, lo=1, hi=signs.size)
    return (walsh_hadamard(rotated) * signs)[:dimension]
