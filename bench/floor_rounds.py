"""The server side of a floor's round (:mod:`bench.tf_floor`, :mod:`bench.numpy_floor`).

Who trains (``clients-per-round`` of the clients, seeded, without replacement) and how the
updates become the next global model: FedAvg weighted by examples, ``Σ_k (n_k / n) w_k``; with
``privacy = global-dp`` (SPEC §3.1, Flower's ``DifferentialPrivacyServerSideFixedClipping``)
each update clipped to ``C`` first and ``N(0, (z·C/m)²)`` added to every averaged parameter.
numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def fedavg(updates: Sequence[Sequence[Any]], sizes: Sequence[int]) -> list[Any]:
    """``Σ_k (n_k / n) w_k`` per layer (FedAvg, example weights)."""
    total = float(sum(sizes))
    return [sum(u[i] * (n / total) for u, n in zip(updates, sizes)) for i in range(len(updates[0]))]


def sample_clients(num_clients: int, per_round: int, seed: int, rnd: int) -> list[int]:
    """The round's cohort: all clients when ``per_round`` is 0 or >= ``num_clients``, else
    ``per_round`` of them drawn without replacement by ``default_rng(seed·1_000_003 + rnd)``."""
    import numpy as np

    if per_round <= 0 or per_round >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng(seed * 1_000_003 + rnd)
    return sorted(int(k) for k in rng.choice(num_clients, per_round, replace=False))


def clip_update(local: Sequence[Any], base: Sequence[Any], clip: float) -> list[Any]:
    """``w_g + Δ · min(1, C/‖Δ‖)`` with ``Δ = local − base`` (flat L2 norm, SPEC §3.1)."""
    import numpy as np

    delta = [np.asarray(a) - np.asarray(b) for a, b in zip(local, base)]
    norm = float(np.sqrt(sum(float((d.astype(np.float64) ** 2).sum()) for d in delta)))
    scale = min(1.0, clip / norm) if norm > 0 else 1.0
    return [np.asarray(b) + d * scale for b, d in zip(base, delta)]


def aggregate(
    updates: Sequence[Sequence[Any]],
    sizes: Sequence[int],
    base: Sequence[Any],
    dp: tuple[float, float] | None,
    rng: Any,
) -> list[Any]:
    """FedAvg of ``updates`` (example weights); with ``dp = (z, C)`` each update clipped to
    ``C`` first and ``N(0, (z·C/m)²)`` added to every averaged parameter (SPEC §3.1)."""
    import numpy as np

    if dp is None:
        return [np.asarray(w, dtype=np.float32) for w in fedavg(updates, sizes)]
    z, clip = dp
    clipped = [clip_update(u, base, clip) for u in updates]
    sigma = z * clip / len(updates)
    return [
        (w + rng.normal(0.0, sigma, size=np.shape(w))).astype(np.float32)
        for w in fedavg(clipped, sizes)
    ]


def dp_setting(cfg: dict) -> tuple[float, float] | None:
    """``(noise-multiplier, clipping-norm)`` for ``privacy = global-dp``; None for ``none``."""
    privacy = str(cfg.get("privacy", "none"))
    if privacy == "none":
        return None
    if privacy == "global-dp":
        return float(cfg["noise-multiplier"]), float(cfg["clipping-norm"])
    raise ValueError(
        f"privacy = {privacy!r} is not allowed for the floors; expected none | global-dp"
    )
