"""fedpriv.metrics (numpy) against scikit-learn's own functions, on random, tied and
degenerate inputs: the classification report, the ROC curve and its AUC."""

from __future__ import annotations

import numpy as np
import pytest

sk = pytest.importorskip("sklearn.metrics")
from sklearn.preprocessing import label_binarize  # noqa: E402

from fedpriv import metrics  # noqa: E402


def sklearn_report(y_true: np.ndarray, proba: np.ndarray) -> dict[str, float]:
    """The report as the earlier scikit-learn implementation computed it."""
    y_pred = proba.argmax(axis=1)
    onehot = label_binarize(y_true, classes=list(range(proba.shape[1])))
    if proba.shape[1] == 2:
        onehot = np.hstack([1 - onehot, onehot])
    out = {"accuracy": sk.accuracy_score(y_true, y_pred)}
    for name, fn in (("f1", sk.f1_score), ("precision", sk.precision_score)):
        for avg in ("macro", "weighted"):
            out[f"{name}_{avg}"] = fn(y_true, y_pred, average=avg, zero_division=0)
    try:
        out["roc_auc_micro"] = sk.roc_auc_score(onehot, proba, average="micro")
    except ValueError:
        out["roc_auc_micro"] = float("nan")
    return out


def cases():
    rng = np.random.default_rng(7)
    for classes, n, decimals in ((10, 180, None), (2, 50, None), (4, 40, 1), (3, 30, 0)):
        y = rng.integers(0, classes, n)
        proba = rng.dirichlet(np.ones(classes), n)
        if decimals is not None:  # coarse scores: many ties
            proba = np.round(proba, decimals)
        yield y, proba
    yield np.zeros(20, int), rng.dirichlet(np.ones(3), 20)  # one class in y: AUC still defined
    yield np.array([0, 1, 2, 2]), np.eye(4)[[3, 3, 3, 3]][:, :3] + 0.1  # no prediction right


@pytest.mark.parametrize("case", list(cases()), ids=lambda c: f"{c[1].shape}")
def test_the_report_equals_scikit_learns(case):
    y, proba = case
    ours, theirs = metrics.classification_report(y, proba), sklearn_report(y, proba)
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert ours[key] == pytest.approx(theirs[key], rel=1e-12, abs=1e-15, nan_ok=True), key


@pytest.mark.parametrize("seed", range(6))
def test_roc_curve_and_auc_equal_scikit_learns(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    labels = rng.integers(0, 2, n)
    scores = rng.normal(size=n)
    if seed % 2:
        scores = np.round(scores, 1)  # ties
    if labels.min() == labels.max():
        labels[0] = 1 - labels[0]
    fpr, tpr, thr = metrics.roc_curve(labels, scores)
    sfpr, stpr, sthr = sk.roc_curve(labels, scores)
    np.testing.assert_allclose(fpr, sfpr)
    np.testing.assert_allclose(tpr, stpr)
    np.testing.assert_array_equal(thr, sthr)
    assert metrics.roc_auc(labels, scores) == pytest.approx(sk.roc_auc_score(labels, scores))


def test_auc_of_one_class_is_nan_and_ties_count_half():
    assert np.isnan(metrics.roc_auc([1, 1, 1], [0.1, 0.2, 0.3]))
    assert metrics.roc_auc([0, 1], [0.5, 0.5]) == 0.5
    assert metrics.roc_auc([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4]) == 1.0


def test_micro_roc_curve_equals_scikit_learns():
    rng = np.random.default_rng(3)
    y, proba = rng.integers(0, 5, 60), rng.dirichlet(np.ones(5), 60)
    fpr, tpr = metrics.micro_roc_curve(y, proba)
    onehot = label_binarize(y, classes=list(range(5)))
    sfpr, stpr, _ = sk.roc_curve(onehot.ravel(), proba.ravel())
    np.testing.assert_allclose(fpr, sfpr)
    np.testing.assert_allclose(tpr, stpr)


def test_curve_auc_is_scikit_learns_auc_of_the_points():
    rng = np.random.default_rng(11)
    fpr, tpr = np.sort(rng.random(30)), np.sort(rng.random(30))
    assert metrics.curve_auc(fpr, tpr) == pytest.approx(sk.auc(fpr, tpr), rel=1e-12)
