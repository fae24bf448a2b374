"""The inputs of one compiled training call (:mod:`fedpriv.clients.compiled`): its batch schedule,
its DP-SGD step setting and the prepared call (no Keras here).

The schedule (:func:`batch_schedule`): epoch e shuffles with the e-th ``rng.permutation(n)``
of ``np.random.default_rng(seed)`` and cuts it into batches of ``b = min(B, n)`` in order;
the last short batch is padded to ``b`` with a zero mask, so every step has the same shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Schedule:
    """Batch indices of every step of a call: ``idx[s]`` and ``mask[s]`` have width b."""

    idx: np.ndarray  # (steps, b) int32
    mask: np.ndarray  # (steps, b) float32; 0 marks padding
    steps_per_epoch: int


@dataclass(frozen=True)
class TrainCall:
    """One prepared call of the compiled loop: its arguments after (x, y) (see
    ``CompiledTrainer._loop``: idx, mask, steps, last-epoch start, mu, denominator, noise
    seed, trainable, non-trainable, optimizer state), its trace key, the client's (x, y) and
    its batch width."""

    args: tuple
    key: tuple
    x: np.ndarray
    y: np.ndarray
    width: int


@dataclass(frozen=True)
class DpStepConfig:
    """DP-SGD per step: clip each example's gradient to ``l2_norm_clip`` (C), add N(0, (zC)²)."""

    l2_norm_clip: float
    noise_multiplier: float

    def __post_init__(self) -> None:
        if not float(self.l2_norm_clip) > 0:
            raise ValueError(f"l2_norm_clip = {self.l2_norm_clip!r}: expected a float > 0")
        if not float(self.noise_multiplier) >= 0:
            raise ValueError(f"noise_multiplier = {self.noise_multiplier!r}: expected >= 0")


def batch_schedule(
    n: int, batch_size: int, epochs: int, seed: int, *, drop_remainder: bool = False
) -> Schedule:
    """The batches of ``epochs`` seeded epochs over ``n`` examples (see module doc, step 2).

    ``drop_remainder`` keeps only full batches of ``batch_size``; otherwise the width is
    ``min(batch_size, n)`` and the last short batch of an epoch is padded with index 0 and
    mask 0.
    """
    if n < 1 or batch_size < 1 or epochs < 0:
        raise ValueError(f"n = {n}, batch_size = {batch_size}, epochs = {epochs}: expected >= 1")
    width = batch_size if drop_remainder else min(batch_size, n)
    rng = np.random.default_rng(seed)
    full, rest = divmod(n, width)
    per_epoch = full if drop_remainder or rest == 0 else full + 1
    idx = np.zeros((epochs * per_epoch, width), dtype=np.int32)
    mask = np.zeros((epochs * per_epoch, width), dtype=np.float32)
    for e in range(epochs):
        order = rng.permutation(n)
        for j in range(per_epoch):
            part = order[j * width : (j + 1) * width]
            idx[e * per_epoch + j, : len(part)] = part
            mask[e * per_epoch + j, : len(part)] = 1.0
    return Schedule(idx=idx, mask=mask, steps_per_epoch=per_epoch)
