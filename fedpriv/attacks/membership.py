"""Loss-threshold membership inference (Yeom et al. 2018) with scikit-learn's ROC tools.

The attacker scores an example by its loss under the model, ``ℓ(x, y) = −log p_θ(y | x)``,
and calls it a member when ``ℓ <= τ``. Sweeping τ gives a ROC curve of members (positives)
against non-members (negatives):

- AUC = ``roc_auc(is_member, −ℓ)`` (:mod:`fedpriv.metrics`) = P(ℓ_member < ℓ_non-member)
  (+½ for ties);
  0.5 = no information;
- attacker advantage = ``max_τ (TPR(τ) − FPR(τ))`` (Yeom et al.'s membership advantage;
  0 = none, 1 = perfect), from ``roc_curve``;
- TPR at a low FPR (0.1 %, 1 %): the largest TPR of a threshold whose FPR is at most the
  target (no interpolation between thresholds), the measure Carlini et al. (LiRA, S&P 2022)
  argue for — an attack that is confident on a few examples matters even at AUC ≈ 0.5.
  With n non-members the FPR resolution is 1/n: below it the figure is the TPR at FPR = 0
  (``fpr_resolution`` says which). :func:`roc_points` gives the curve for log-scale plots
  (``fedpriv.reporting.plots.plot_roc(..., log_scale=True)``).

tensorflow-privacy (whose membership-inference module this replaced) is not part of the stack
(SPEC §1), so this is the plain loss-threshold attack; its model side is Keras 3 and runs on
either backend (``KERAS_BACKEND=tensorflow`` or ``jax``). :func:`membership_from_run`
applies it to the final global model of a run directory: members = the clients' training
examples, non-members = the clients' held-out test examples (same distribution, never trained
on).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.metrics import roc_auc, roc_curve
from fedpriv.spec import DataSpec, RunSpec

# Keras' epsilon: sparse categorical cross-entropy clips probabilities to [eps, 1 - eps].
EPSILON = 1e-7

__all__ = [
    "LOW_FPRS",
    "tpr_at_fpr",
    "roc_points",
    "MembershipResult",
    "per_example_loss",
    "loss_threshold_attack",
    "membership_from_run",
]


LOW_FPRS = (0.001, 0.01)


def tpr_at_fpr(
    labels: Sequence[int], scores: Sequence[float], fprs: Sequence[float] = LOW_FPRS
) -> dict[str, float]:
    """``{"tpr_at_0.1pct_fpr": …, "tpr_at_1pct_fpr": …}``: max TPR with FPR <= target.

    ``labels`` 1 = member, ``scores`` higher = more likely member.
    """
    fpr, tpr, _ = roc_curve(np.asarray(labels), np.asarray(scores, dtype=np.float64))
    out = {}
    for target in fprs:
        if not 0 <= target <= 1:
            raise ValueError(f"fpr = {target!r} is not allowed; expected a number in [0, 1]")
        ok = fpr <= target + 1e-12
        out[f"tpr_at_{_pct(target)}pct_fpr"] = float(tpr[ok].max()) if ok.any() else 0.0
    return out


def _pct(target: float) -> str:
    return f"{100 * target:g}"


def roc_points(labels: Sequence[int], scores: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) of ``roc_curve`` for a (log-scale) ROC plot."""
    fpr, tpr, _ = roc_curve(np.asarray(labels), np.asarray(scores, dtype=np.float64))
    return fpr, tpr


@dataclass(frozen=True)
class MembershipResult:
    """Loss-threshold attack outcome."""

    auc: float
    advantage: float
    threshold: float
    n_members: int
    n_nonmembers: int
    member_loss_mean: float
    nonmember_loss_mean: float
    tpr_at_low_fpr: dict[str, float] = field(default_factory=dict)
    fpr_resolution: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def per_example_loss(proba: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Cross-entropy per example, ``−log clip(p[i, y_i], 1e-7, 1 − 1e-7)`` (Keras' clipping).

    ``proba`` is (n, K) class probabilities, ``y`` n integer labels in [0, K).
    """
    proba = np.asarray(proba, dtype=np.float64)
    y = np.asarray(y)
    if proba.ndim != 2 or len(proba) != len(y):
        raise ValueError(
            f"proba shape {proba.shape} and labels shape {y.shape} do not match; "
            "expected (n, classes) and (n,)"
        )
    if not np.issubdtype(y.dtype, np.integer) or (
        len(y) and (y.min() < 0 or y.max() >= proba.shape[1])
    ):
        raise ValueError(f"labels must be integers in [0, {proba.shape[1]}); got {y.dtype}")
    p = np.clip(proba[np.arange(len(y)), y], EPSILON, 1.0 - EPSILON)
    return -np.log(p)


def _losses(name: str, values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size == 0:
        raise ValueError(f"{name} is empty; expected at least one loss value")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} holds non-finite losses; expected finite values")
    return arr


def loss_threshold_attack(
    member_losses: Sequence[float], nonmember_losses: Sequence[float]
) -> MembershipResult:
    """AUC and advantage of the rule "member iff loss <= τ" (module docstring).

    ``threshold`` is the τ that attains the advantage (members are predicted for losses
    <= τ). Raises ValueError for an empty or non-finite side.
    """
    mem = _losses("member_losses", member_losses)
    non = _losses("nonmember_losses", nonmember_losses)
    labels = np.concatenate([np.ones(mem.size), np.zeros(non.size)])
    scores = -np.concatenate([mem, non])
    auc = roc_auc(labels, scores)
    fpr, tpr, thresholds = roc_curve(labels, scores)
    j = int(np.argmax(tpr - fpr))
    tau = -float(thresholds[j]) if math.isfinite(thresholds[j]) else float("-inf")
    return MembershipResult(
        auc=auc,
        advantage=float(tpr[j] - fpr[j]),
        threshold=tau,
        n_members=int(mem.size),
        n_nonmembers=int(non.size),
        member_loss_mean=float(mem.mean()),
        nonmember_loss_mean=float(non.mean()),
        tpr_at_low_fpr=tpr_at_fpr(labels, scores),
        fpr_resolution=1.0 / non.size,
    )


def _load_weights(run_dir: Path) -> list[np.ndarray]:
    npz = run_dir / "final_weights.npz"
    if npz.exists():
        with np.load(npz) as data:
            return [data[f"arr_{i}"] for i in range(len(data.files))]
    keras_path = run_dir / "final_model.keras"
    if keras_path.exists():
        import keras

        return keras.models.load_model(keras_path).get_weights()
    raise ValueError(
        f"run directory {str(run_dir)!r} has no final_weights.npz or final_model.keras; "
        "expected the output-dir of a finished `fedpriv run`"
    )


def read_run_config(run_dir: str | Path) -> dict[str, Any]:
    """The resolved config recorded in ``summary.json`` of a run directory."""
    path = Path(run_dir) / "summary.json"
    if not path.exists():
        raise ValueError(
            f"run directory {str(run_dir)!r} has no summary.json; expected the output-dir of "
            "a finished `fedpriv run`"
        )
    return dict(json.loads(path.read_text())["config"])


def load_run_data(spec: DataSpec) -> Any:
    """The federated data of a run's :class:`fedpriv.spec.DataSpec` (the same seed gives the
    same splits as in the run)."""
    from fedpriv.data import load_spec

    return load_spec(spec)


Predict = Callable[[str, Any, list[np.ndarray], np.ndarray], np.ndarray]


def membership_from_run(
    run_dir: str | Path, spec: RunSpec, *, predict: Predict | None = None
) -> dict[str, Any]:
    """Loss-threshold attack on the final global model of a finished run.

    ``spec``: the run's spec, built from its recorded config (``read_run_config``) by the
    caller (``scenarios``). Members: every client's training split; non-members: every
    client's test split (held out by the client, never trained on). The data are rebuilt
    from ``spec.data`` (:func:`load_run_data`). ``predict(model, data, weights, x)``: class
    probabilities (default: the Keras model ``model``). Returns the result plus ``scenario``,
    ``strategy``, ``privacy``, ``seed``, ``run_dir``.
    """
    run_dir = Path(run_dir)
    weights = _load_weights(run_dir)
    data = load_run_data(spec.data)
    if data.num_classes < 2 or not np.issubdtype(data.clients[0].y_train.dtype, np.integer):
        raise ValueError(
            f"dataset {spec.data.dataset!r} is not a classification task; the loss-threshold "
            "attack needs class labels"
        )
    predict = predict or _keras_predict
    model = str(spec.train.model)
    member_losses, nonmember_losses = [], []
    for client in data.clients:
        member_losses.append(
            per_example_loss(predict(model, data, weights, client.x_train), client.y_train)
        )
        nonmember_losses.append(
            per_example_loss(predict(model, data, weights, client.x_test), client.y_test)
        )
    mem, non = np.concatenate(member_losses), np.concatenate(nonmember_losses)
    result = loss_threshold_attack(mem, non)
    fpr, tpr = roc_points(np.r_[np.ones(mem.size), np.zeros(non.size)], -np.r_[mem, non])
    return {
        "roc": {"fpr": fpr.tolist(), "tpr": tpr.tolist()},
        "run_dir": str(run_dir),
        "scenario": spec.scenario,
        "strategy": spec.strategy.strategy,
        "privacy": spec.mode_name,
        "seed": spec.seed,
        **result.as_dict(),
    }


_MODELS: dict[tuple, Any] = {}


def _keras_predict(model: str, data: Any, weights: list[np.ndarray], x: np.ndarray):
    """Class probabilities of ``weights`` with the run's ``model`` (built once per model and
    data shape)."""
    from fedpriv.models import build_model

    key = (model, tuple(data.input_shape), data.num_classes)
    if key not in _MODELS:
        _MODELS[key] = build_model(
            model, input_shape=tuple(data.input_shape), num_classes=data.num_classes
        )
    keras_model = _MODELS[key]
    keras_model.set_weights(weights)
    return keras_model.predict(x, verbose=0, batch_size=256)
