"""Classification metrics of the papers' tables (MP §7): server test set and last rounds.

Plain numpy, computed as scikit-learn 1.9 computes them (``tests/test_metrics.py`` checks each
against scikit-learn on random and tied inputs): the ServerApp reports them every round, and
importing scikit-learn for them cost every simulation's driver about 1.5 CPU-seconds.

- accuracy = mean(ŷ = y);
- per label c: precision_c = TP_c / (TP_c + FP_c), F1_c = 2·TP_c / (2·TP_c + FP_c + FN_c),
  0 where the denominator is 0 (``zero_division=0``), over the labels in y ∪ ŷ; "macro" is
  their mean, "weighted" their mean weighted by each label's support in y;
- ROC curve of scores s against binary labels: one point per distinct score, taken as a
  threshold in decreasing order (FPR, TPR of ``s >= t``), collinear points dropped, starting at
  (0, 0) (``roc_curve(drop_intermediate=True)``); AUC = the trapezoidal area under it, which is
  P(s_positive > s_negative) + ½·P(tie);
- micro ROC-AUC: every (example, class) pair is one binary decision (the one-hot labels and the
  probabilities flattened).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def classification_report(y_true: np.ndarray, proba: np.ndarray) -> dict[str, float]:
    """Accuracy, macro/weighted F1 and precision, micro one-vs-rest ROC-AUC.

    ``proba`` is (n, classes). Micro ROC-AUC treats every (example, class) pair as one
    binary decision (sklearn ``average="micro"`` on the binarised labels); NaN when the
    labels hold one class only.
    """
    y_true = np.asarray(y_true).astype(int)
    y_pred = np.asarray(proba).argmax(axis=1)
    precision, f1, support = _per_label(y_true, y_pred)
    out = {
        "accuracy": float(np.mean(y_true == y_pred)),
        "f1_macro": float(np.mean(f1)),
        "f1_weighted": _weighted(f1, support),
        "precision_macro": float(np.mean(precision)),
        "precision_weighted": _weighted(precision, support),
    }
    onehot = _one_hot(y_true, proba.shape[1])
    out["roc_auc_micro"] = roc_auc(onehot.ravel(), np.asarray(proba).ravel())
    return out


def micro_roc_curve(y_true: np.ndarray, proba: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fpr, tpr) of the micro-averaged one-vs-rest ROC curve."""
    onehot = _one_hot(np.asarray(y_true).astype(int), proba.shape[1])
    fpr, tpr, _ = roc_curve(onehot.ravel(), np.asarray(proba).ravel())
    return fpr, tpr


def roc_curve(
    labels: Sequence[int] | np.ndarray, scores: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(FPR, TPR, thresholds) of ``scores`` against binary ``labels`` (1 = positive), as
    ``sklearn.metrics.roc_curve`` with its defaults: the first threshold is +inf (0, 0)."""
    y = np.asarray(labels).ravel() == 1
    s = np.asarray(scores, dtype=np.float64).ravel()
    order = np.argsort(s, kind="mergesort")[::-1]
    y, s = y[order], s[order]
    last_of_each = np.r_[np.where(np.diff(s))[0], y.size - 1]
    tps = np.cumsum(y)[last_of_each].astype(np.float64)
    fps = 1.0 + last_of_each - tps
    thresholds = s[last_of_each]
    if tps.size > 2:  # drop the points on a straight line between their neighbours
        keep = np.where(np.r_[True, np.logical_or(np.diff(fps, 2), np.diff(tps, 2)), True])[0]
        tps, fps, thresholds = tps[keep], fps[keep], thresholds[keep]
    tps, fps = np.r_[0.0, tps], np.r_[0.0, fps]
    thresholds = np.r_[np.inf, thresholds]
    with np.errstate(invalid="ignore", divide="ignore"):
        fpr = fps / fps[-1] if fps[-1] > 0 else np.full(fps.shape, np.nan)
        tpr = tps / tps[-1] if tps[-1] > 0 else np.full(tps.shape, np.nan)
    return fpr, tpr, thresholds


def roc_auc(labels: Sequence[int] | np.ndarray, scores: Sequence[float] | np.ndarray) -> float:
    """Area under :func:`roc_curve` (trapezoidal), NaN unless both classes are present
    (where ``sklearn.metrics.roc_auc_score`` raises)."""
    y = np.asarray(labels).ravel()
    if np.unique(y).size != 2:
        return float("nan")
    fpr, tpr, _ = roc_curve(y, scores)
    return curve_auc(fpr, tpr)


def curve_auc(fpr: Sequence[float] | np.ndarray, tpr: Sequence[float] | np.ndarray) -> float:
    """Area under a ROC curve's points by the trapezoidal rule (``sklearn.metrics.auc``):
    Σ_k (FPR_{k+1} − FPR_k)·(TPR_{k+1} + TPR_k)/2."""
    return float(np.trapezoid(np.asarray(tpr, dtype=float), np.asarray(fpr, dtype=float)))


def last_k_stats(values: Sequence[float], k: int = 5) -> tuple[float, float]:
    """Mean and (population) std of the last ``k`` values (MP's "last 5 rounds")."""
    tail = np.asarray(list(values)[-k:], dtype=float)
    if tail.size == 0:
        return float("nan"), float("nan")
    return float(tail.mean()), float(tail.std())


def _one_hot(y: np.ndarray, num_classes: int) -> np.ndarray:
    """(n, classes) 0/1 labels (``label_binarize`` with both columns kept for two classes)."""
    return (y[:, None] == np.arange(num_classes)[None, :]).astype(int)


def _per_label(y_true: np.ndarray, y_pred: np.ndarray) -> tuple[np.ndarray, ...]:
    """Precision, F1 and support of each label in y ∪ ŷ (0 where undefined)."""
    labels = np.union1d(y_true, y_pred)
    true = y_true[:, None] == labels[None, :]
    pred = y_pred[:, None] == labels[None, :]
    tp = np.sum(true & pred, axis=0).astype(np.float64)
    fp = np.sum(~true & pred, axis=0)
    fn = np.sum(true & ~pred, axis=0)
    return _ratio(tp, tp + fp), _ratio(2 * tp, 2 * tp + fp + fn), np.sum(true, axis=0)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, 0 where den is 0."""
    return np.divide(num, den, out=np.zeros_like(num, dtype=np.float64), where=den > 0)


def _weighted(values: np.ndarray, support: np.ndarray) -> float:
    """Mean of ``values`` weighted by ``support``; 0 when there is no support."""
    total = support.sum()
    return float(np.sum(values * support) / total) if total > 0 else 0.0
