"""Client inference attack (CIA), MP §5 and §7.4, plus a loss-threshold detection rate.

Setting (MP §7.4): three clients (MP Table 8, fedpriv partition ``cia``), client 1 the
attacker, client 3 the target (partition ids 0 and 2). The attacker holds a *shadow dataset*
of the target: "a random split of 10% of client 3 training data" (here stratified by class,
:func:`shadow_indices`). After round 1 (20 local epochs) it has the global model and "the
aggregated metrics (accuracy and loss) obtained in each round" that the server sends back.

The score (MP Tables 9–11, D.13–D.16) compares two losses of the round-1 global model:

- ``loss_aggregated`` — "Loss obtained for the aggregated test set": the server's aggregate
  of the clients' evaluation losses on their own test splits, weighted by their number of
  test examples (Flower's ``aggregate_evaluate``; MP: "the relative difference between the
  aggregated result in each client's test sets and the loss for the target client shadow
  dataset"), see :func:`aggregated_loss`;
- ``loss_shadow`` — "the loss obtained with the aggregated model for the shadow train dataset
  of client 3": the mean cross-entropy of the global model on the shadow set;

    Difference (%) = (loss_shadow − loss_aggregated) / loss_shadow × 100.

The denominator is the shadow loss: MP's printed rows only fit this reading, e.g. Table 9,
vanilla FedAvg, (1.182 − 1.032)/1.182 × 100 = 12.69 ≈ 12.719 printed (the losses are rounded
to 3 decimals); dividing by the aggregated loss would give 14.5. MP reads a larger
difference as more protection ("we obtain a greater difference with metric-privacy than with
global-DP, thus providing a greater resistance to the CIA").

What MP lacks, added here: the same attacker's *loss-threshold* membership test on the
global model of every round, members = the shadow set (and, as a larger-sample oracle, all
of the target's training examples), non-members = the target's held-out test split (same
distribution, never trained on). Its AUC and advantage, in a run with the target present and
a run with the target absent, make "protection" a measured detection rate: without the target
the AUC is 0.5 up to sampling noise.

This module is model-agnostic: the caller passes ``predict(weights, x) -> probabilities``.
In ``scenarios/attacks/feature.py`` the attacker's computation runs in the server process for
convenience, using only what the attacker would have (global model, shadow set, aggregated
loss).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fedpriv.attacks.membership import loss_threshold_attack, per_example_loss
from fedpriv.validation import check_real

__all__ = [
    "CIAScore",
    "relative_difference",
    "aggregated_loss",
    "shadow_indices",
    "cia_score",
    "check_cia_roles",
    "CIAAttacker",
]


@dataclass(frozen=True)
class CIAScore:
    """One CIA observation: the two losses and MP's relative difference in %."""

    loss_aggregated: float
    loss_shadow: float
    difference_pct: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def relative_difference(loss_shadow: float, loss_aggregated: float) -> float:
    """MP §7.4: ``(loss_shadow − loss_aggregated) / loss_shadow × 100`` (loss_shadow > 0)."""
    ls = check_real("loss_shadow", loss_shadow)
    la = check_real("loss_aggregated", loss_aggregated)
    if ls <= 0:
        raise ValueError(f"loss_shadow = {ls!r} is not allowed; expected a loss > 0")
    return (ls - la) / ls * 100.0


def aggregated_loss(losses: Sequence[float], num_examples: Sequence[int]) -> float:
    """The aggregated loss the server sends back: ``Σ_i n_i·L_i / Σ_i n_i``.

    ``L_i`` is client i's mean loss on its test split of ``n_i`` examples (Flower's weighted
    ``aggregate_evaluate`` with key ``num-examples``).
    """
    losses = np.asarray(losses, dtype=np.float64)
    counts = np.asarray(num_examples, dtype=np.float64)
    if losses.shape != counts.shape or losses.size == 0 or np.any(counts < 0) or counts.sum() <= 0:
        raise ValueError(
            f"losses {losses.shape} and num_examples {counts.shape}: expected equal, non-empty "
            "lists with counts >= 0 and a positive total"
        )
    return float(np.dot(losses, counts) / counts.sum())


def shadow_indices(y: np.ndarray, fraction: float, *, seed: int) -> np.ndarray:
    """Indices of a stratified ``fraction`` of ``y`` (the attacker's shadow set).

    Size ``n_s = max(1, ⌈fraction·n⌉)``; ``n_s`` is apportioned over the classes in
    proportion to their counts (largest remainder), and each class's examples are drawn
    without replacement with ``numpy.random.default_rng(seed)``. Returns sorted int64
    indices. ``fraction`` must be in (0, 1].
    """
    from fedpriv.data.partition import apportion

    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise ValueError(
            f"shadow-fraction = {fraction!r} is not allowed; expected a float in (0, 1]"
        )
    if not 0 < float(fraction) <= 1:
        raise ValueError(
            f"shadow-fraction = {fraction!r} is not allowed; expected a float in (0, 1]"
        )
    y = np.asarray(y)
    n = len(y)
    if n == 0:
        raise ValueError("the target client has no training examples; expected at least one")
    n_shadow = max(1, int(math.ceil(float(fraction) * n - 1e-9)))
    rng = np.random.default_rng(seed)
    classes, inverse = np.unique(y, return_inverse=True)
    per_class = apportion(n_shadow, np.bincount(inverse, minlength=len(classes)))
    picked = [
        rng.permutation(np.flatnonzero(inverse == c))[:k] for c, k in enumerate(per_class) if k
    ]
    return np.sort(np.concatenate(picked)).astype(np.int64)


def check_cia_roles(*, attacker: Any, target: Any, num_clients: int) -> tuple[int, int]:
    """``(attacker, target)`` as ints, or a one-line ValueError naming the key.

    Both must be partition ids in [0, num_clients) and differ.
    """
    for key, value in (("target-client", target), ("attacker-client", attacker)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(
                f"{key} = {value!r} is not allowed; expected a partition id in "
                f"[0, {num_clients - 1}]"
            )
        if not 0 <= int(value) < num_clients:
            raise ValueError(
                f"{key} = {value!r} is not allowed; expected a partition id in "
                f"[0, {num_clients - 1}] (there is no client {value} among {num_clients})"
            )
    if int(attacker) == int(target):
        raise ValueError(
            f"attacker-client = {attacker!r} is not allowed; expected a client other than "
            f"target-client = {target!r}"
        )
    return int(attacker), int(target)


Predict = Callable[[list[np.ndarray], np.ndarray], np.ndarray]


def cia_score(
    predict: Predict,
    weights: list[np.ndarray],
    x_shadow: np.ndarray,
    y_shadow: np.ndarray,
    loss_aggregated: float,
) -> CIAScore:
    """MP's CIA score of a global model (module docstring): shadow loss vs aggregated loss."""
    loss_shadow = float(np.mean(per_example_loss(predict(weights, x_shadow), y_shadow)))
    return CIAScore(
        loss_aggregated=float(loss_aggregated),
        loss_shadow=loss_shadow,
        difference_pct=relative_difference(loss_shadow, loss_aggregated),
    )


class CIAAttacker:
    """The attacker's view of each round: MP's score and the loss-threshold detection rate.

    ``x_shadow``/``y_shadow``: the shadow set (the attacker's knowledge). ``x_nonmember``/
    ``y_nonmember``: held-out examples of the target's distribution (the target's test split).
    ``x_members``/``y_members`` (optional): all of the target's training examples, an oracle
    with more samples for the AUC (not attacker knowledge; reported separately).
    """

    def __init__(
        self,
        predict: Predict,
        *,
        x_shadow: np.ndarray,
        y_shadow: np.ndarray,
        x_nonmember: np.ndarray,
        y_nonmember: np.ndarray,
        x_members: np.ndarray | None = None,
        y_members: np.ndarray | None = None,
    ) -> None:
        if len(x_shadow) == 0 or len(x_nonmember) == 0:
            raise ValueError("the shadow set and the non-member set must not be empty")
        self.predict = predict
        self.x_shadow, self.y_shadow = x_shadow, np.asarray(y_shadow)
        self.x_non, self.y_non = x_nonmember, np.asarray(y_nonmember)
        self.x_mem, self.y_mem = x_members, y_members

    def observe(self, weights: list[np.ndarray], loss_aggregated: float | None) -> dict[str, Any]:
        """Scores of one global model; ``loss_aggregated`` None (round 0) skips MP's score."""
        shadow_losses = per_example_loss(self.predict(weights, self.x_shadow), self.y_shadow)
        non_losses = per_example_loss(self.predict(weights, self.x_non), self.y_non)
        attack = loss_threshold_attack(shadow_losses, non_losses)
        out: dict[str, Any] = {
            "loss_shadow": float(shadow_losses.mean()),
            "loss_nonmember": float(non_losses.mean()),
            "auc": attack.auc,
            "advantage": attack.advantage,
            **attack.tpr_at_low_fpr,
            "n_shadow": int(len(shadow_losses)),
            "n_nonmember": int(len(non_losses)),
        }
        if loss_aggregated is not None and math.isfinite(float(loss_aggregated)):
            out["loss_aggregated"] = float(loss_aggregated)
            out["difference_pct"] = relative_difference(out["loss_shadow"], loss_aggregated)
        if self.x_mem is not None and self.y_mem is not None and len(self.x_mem):
            mem_losses = per_example_loss(self.predict(weights, self.x_mem), self.y_mem)
            oracle = loss_threshold_attack(mem_losses, non_losses)
            out["auc_all_members"] = oracle.auc
            out["advantage_all_members"] = oracle.advantage
            out["tpr_at_1pct_fpr_all_members"] = oracle.tpr_at_low_fpr["tpr_at_1pct_fpr"]
            out["n_members"] = int(len(mem_losses))
        return out
