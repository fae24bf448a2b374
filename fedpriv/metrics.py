"""Classification metrics of the papers' tables (MP §7): server test set and last rounds."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.metrics import (
    accuracy_score,
    f1_score,
    precision_score,
    roc_auc_score,
    roc_curve,
)
from sklearn.preprocessing import label_binarize


def classification_report(y_true: np.ndarray, proba: np.ndarray) -> dict[str, float]:
    """Accuracy, macro/weighted F1 and precision, micro one-vs-rest ROC-AUC.

    ``proba`` is (n, classes). Micro ROC-AUC treats every (example, class) pair as one
    binary decision (sklearn ``average="micro"`` on the binarised labels).
    """
    y_true = np.asarray(y_true).astype(int)
    num_classes = proba.shape[1]
    y_pred = proba.argmax(axis=1)
    onehot = label_binarize(y_true, classes=list(range(num_classes)))
    if num_classes == 2:
        onehot = np.hstack([1 - onehot, onehot])
    out = {
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "f1_macro": float(f1_score(y_true, y_pred, average="macro", zero_division=0)),
        "f1_weighted": float(f1_score(y_true, y_pred, average="weighted", zero_division=0)),
        "precision_macro": float(precision_score(y_true, y_pred, average="macro", zero_division=0)),
        "precision_weighted": float(
            precision_score(y_true, y_pred, average="weighted", zero_division=0)
        ),
    }
    try:
        out["roc_auc_micro"] = float(roc_auc_score(onehot, proba, average="micro"))
    except ValueError:
        out["roc_auc_micro"] = float("nan")
    return out


def micro_roc_curve(y_true: np.ndarray, proba: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fpr, tpr) of the micro-averaged one-vs-rest ROC curve."""
    onehot = label_binarize(np.asarray(y_true).astype(int), classes=list(range(proba.shape[1])))
    fpr, tpr, _ = roc_curve(onehot.ravel(), proba.ravel())
    return fpr, tpr


def last_k_stats(values: Sequence[float], k: int = 5) -> tuple[float, float]:
    """Mean and (population) std of the last ``k`` values (MP's "last 5 rounds")."""
    tail = np.asarray(list(values)[-k:], dtype=float)
    if tail.size == 0:
        return float("nan"), float("nan")
    return float(tail.mean()), float(tail.std())


def weighted_mean(values: Sequence[float], weights: Sequence[float]) -> float:
    """Example-weighted mean (Flower's distributed metric aggregation)."""
    w = np.asarray(weights, dtype=float)
    return float(np.dot(np.asarray(values, dtype=float), w) / w.sum()) if w.sum() else float("nan")
