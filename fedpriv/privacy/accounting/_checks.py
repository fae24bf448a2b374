"""Argument checks shared by the accounting modules (one-line errors naming the value)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

SAMPLING_MODES = ("fixed", "poisson")
SAMPLING_ALIASES = {"fixed": "fixed", "without-replacement": "fixed", "poisson": "poisson"}


def number(name: str, value: Any, *, lo: float = 0.0, lo_open: bool = False) -> float:
    """``float(value)`` if it is a finite real >= lo (> lo when ``lo_open``), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} = {value!r} is not allowed; expected a finite number")
    value = float(value)
    if not math.isfinite(value) or value < lo or (lo_open and value == lo):
        rel = ">" if lo_open else ">="
        raise ValueError(f"{name} = {value!r} is not allowed; expected a finite number {rel} {lo}")
    return value


def integer(name: str, value: Any, *, lo: int = 1) -> int:
    """``int(value)`` if it is an integer >= lo, else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ValueError(f"{name} = {value!r} is not allowed; expected an integer >= {lo}")
    return int(value)


def sampling(value: Any) -> str:
    """Canonical client-sampling name: ``fixed`` (alias ``without-replacement``) | ``poisson``."""
    if value not in SAMPLING_ALIASES:
        raise ValueError(
            f"sampling = {value!r} is not allowed; expected one of {', '.join(SAMPLING_MODES)}"
        )
    return SAMPLING_ALIASES[value]


def population(sampled: Any, total: Any) -> tuple[int, int]:
    """``(sampled, population)`` with 1 <= sampled <= population."""
    total = integer("population", total)
    sampled = integer("sampled", sampled)
    if sampled > total:
        raise ValueError(
            f"sampled = {sampled} is not allowed; expected an integer in [1, population={total}]"
        )
    return sampled, total


def delta(value: Any) -> float:
    """δ in (0, 1)."""
    value = number("delta", value, lo_open=True)
    if value >= 1.0:
        raise ValueError(f"delta = {value!r} is not allowed; expected a number in (0, 1)")
    return value
