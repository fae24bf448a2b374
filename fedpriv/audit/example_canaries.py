"""Example-level canaries for auditing client-side DP-SGD.

DP-SGD (``privacy = dp-sgd``) protects *examples*, not clients, so its audit inserts canary
examples (Steinke et al. 2023 §6, "input space" canaries): ``count`` examples with pixels
uniform in [lo, hi] (the data's range) and a uniformly random label, canary j owned by
client ``j mod num_clients`` and included in that client's training data with probability
``probability`` (seeded, the same on server and clients). Included canaries are appended to
the owner's training split before every DP-SGD call. After training the attacker scores
each canary by the final model's logit-scaled confidence in its label
(:func:`fedpriv.audit.lira.logit_confidence`; members are fitted, so their confidence is
higher). Adjacency: add/remove one example of one client, the adjacency of the clients'
DP-SGD accountant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedpriv import seeds
from fedpriv.spec import RunSpec

__all__ = ["ExampleCanaries", "with_example_canaries"]


@dataclass
class ExampleCanaries:
    """``count`` random-pixel, random-label canary examples spread over the clients."""

    count: int
    seed: int
    input_shape: tuple[int, ...]
    num_classes: int
    num_clients: int
    probability: float = 0.5
    lo: float = 0.0
    hi: float = 1.0
    x: np.ndarray = field(init=False, repr=False)
    y: np.ndarray = field(init=False, repr=False)
    included: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.count < 2 or self.num_clients < 1 or self.num_classes < 2:
            raise ValueError(
                f"count = {self.count}, num_clients = {self.num_clients}, num_classes = "
                f"{self.num_classes} are not allowed; expected count >= 2, clients >= 1, "
                "classes >= 2"
            )
        rng = seeds.stream(int(self.seed), "audit-example-canaries")
        shape = (int(self.count), *self.input_shape)
        self.x = rng.uniform(self.lo, self.hi, size=shape).astype(np.float32)
        self.y = rng.integers(0, self.num_classes, size=int(self.count))
        self.included = rng.random(int(self.count)) < self.probability

    def owner(self) -> np.ndarray:
        """Client (partition id) of every canary."""
        return np.arange(self.count) % self.num_clients

    def for_client(self, partition: int) -> tuple[np.ndarray, np.ndarray]:
        """The included canaries of client ``partition`` (x, y)."""
        mask = self.included & (self.owner() == int(partition))
        return self.x[mask], self.y[mask]


def example_canaries(spec: RunSpec, data: Any) -> ExampleCanaries:
    """The run's example canaries (``audit-canaries``, ``audit-canary-probability``, seed)."""
    return ExampleCanaries(
        count=int(spec.audit_canaries),
        seed=int(spec.seed),
        input_shape=tuple(data.input_shape),
        num_classes=int(data.num_classes),
        num_clients=int(spec.data.num_clients),
        probability=float(spec.audit_canary_probability),
    )


def with_example_canaries(
    spec: RunSpec, data: Any, partition: int, x: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``x, y`` plus this client's included canaries when the run audits (else unchanged)."""
    if int(spec.audit_canaries) <= 0:
        return x, y
    cx, cy = example_canaries(spec, data).for_client(partition)
    if not len(cx):
        return x, y
    return np.concatenate([x, cx.astype(x.dtype)]), np.concatenate([y, cy.astype(y.dtype)])
