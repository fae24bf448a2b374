"""Offline LiRA: a reference-model membership attack (Carlini et al., S&P 2022, §IV, "offline").

Per target example (x, y) the statistic is the logit-scaled confidence of the true class,
``φ = log p_y − log(1 − p_y)`` (their §IV-B: it makes the distribution over models close to
Gaussian). R reference models are trained *without* any target example (OUT models); their
φ values on each target give ``N(μ_out(x), σ_out²)``. The offline test is one-sided: a member
has a higher confidence than the OUT models predict, so the membership score is

    score(x) = Φ((φ_target(x) − μ_out(x)) / σ_out),

with a global σ_out (pooled over examples; Carlini et al. recommend it below ~64 reference
models). Unlike the loss threshold, this calibrates each example's difficulty, which is what
raises the TPR at low FPR.

Cost (stated because it is the point of choosing an attack): R trainings of the model on the
reference data for E epochs each, plus R + 1 prediction passes over the targets. In
:func:`lira_from_run` the reference data is the server's validation split (never a client's
example), R random halves of it; on digits with R = 4, E = 10 this is 4 trainings on ~90
examples (seconds), against one federated run for the target.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from fedpriv.attacks.membership import LOW_FPRS, roc_points, tpr_at_fpr
from fedpriv.spec import RunSpec

__all__ = ["logit_confidence", "offline_lira_scores", "lira_result", "lira_from_run"]

_CLIP = 1e-12


def logit_confidence(proba: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``log p_y − log(1 − p_y)`` per example, probabilities clipped to [1e-12, 1 − 1e-12]."""
    proba = np.asarray(proba, dtype=np.float64)
    y = np.asarray(y)
    if proba.ndim != 2 or len(proba) != len(y):
        raise ValueError(f"proba shape {proba.shape} and labels shape {y.shape} do not match")
    p = np.clip(proba[np.arange(len(y)), y], _CLIP, 1 - _CLIP)
    return np.log(p) - np.log1p(-p)


def offline_lira_scores(target_phi: np.ndarray, reference_phi: np.ndarray) -> np.ndarray:
    """Membership scores of the offline test (module docstring); higher = more likely member.

    ``reference_phi`` is (R, n): φ of each of R OUT models on the n targets, R >= 2.
    """
    target_phi = np.asarray(target_phi, dtype=np.float64).reshape(-1)
    ref = np.asarray(reference_phi, dtype=np.float64)
    if ref.ndim != 2 or ref.shape[1] != target_phi.size or ref.shape[0] < 2:
        raise ValueError(
            f"reference_phi shape {ref.shape} is not allowed; expected (R >= 2, {target_phi.size})"
        )
    mu = ref.mean(axis=0)
    sigma = max(float(np.sqrt(np.mean(ref.var(axis=0, ddof=1)))), 1e-6)
    return stats.norm.cdf((target_phi - mu) / sigma)


def lira_result(scores: np.ndarray, is_member: np.ndarray) -> dict[str, Any]:
    """AUC, TPR at 0.1 % / 1 % FPR and the ROC points of a score vector."""
    from fedpriv.metrics import roc_auc

    labels = np.asarray(is_member).astype(int)
    fpr, tpr = roc_points(labels, scores)
    return {
        "auc": roc_auc(labels, scores),
        **tpr_at_fpr(labels, scores, LOW_FPRS),
        "fpr_resolution": 1.0 / max(1, int((labels == 0).sum())),
        "roc": {"fpr": fpr.tolist(), "tpr": tpr.tolist()},
    }


Predict = Callable[[list[np.ndarray], np.ndarray], np.ndarray]
Train = Callable[[np.ndarray, np.ndarray, int], list[np.ndarray]]


def lira_attack(
    *,
    target_weights: list[np.ndarray],
    predict: Predict,
    train_reference: Train,
    x_targets: np.ndarray,
    y_targets: np.ndarray,
    is_member: np.ndarray,
    x_reference: np.ndarray,
    y_reference: np.ndarray,
    references: int = 4,
    seed: int = 0,
) -> dict[str, Any]:
    """Offline LiRA with ``references`` OUT models, each on a random half of the reference data.

    ``train_reference(x, y, seed) -> weights`` trains one reference model;
    ``predict(weights, x) -> probabilities``.
    """
    if references < 2:
        raise ValueError(f"references = {references!r} is not allowed; expected an integer >= 2")
    from fedpriv import seeds

    rng = seeds.stream(seed, "audit-lira")
    ref_phi = []
    for r in range(references):
        half = rng.permutation(len(x_reference))[: max(1, len(x_reference) // 2)]
        weights = train_reference(x_reference[half], y_reference[half], seed * 1000 + r)
        ref_phi.append(logit_confidence(predict(weights, x_targets), y_targets))
    target_phi = logit_confidence(predict(target_weights, x_targets), y_targets)
    scores = offline_lira_scores(target_phi, np.stack(ref_phi))
    out = lira_result(scores, is_member)
    out.update(
        attack="offline LiRA (Carlini et al. 2022), global variance",
        references=references,
        reference_examples=int(len(x_reference) // 2),
        n_members=int(np.sum(is_member)),
        n_nonmembers=int(np.sum(~np.asarray(is_member, dtype=bool))),
    )
    return out


def lira_from_run(
    run_dir: str | Path, spec: RunSpec, *, references: int = 4, epochs: int = 10, seed: int = 0
) -> dict[str, Any]:
    """Offline LiRA on a finished run's final model (members = clients' training splits,
    non-members = their test splits, reference data = the server's validation split).

    ``spec``: the run's spec, built from its recorded config by the caller (``scenarios``);
    the reference models use its model, optimizer, learning rate and batch size."""
    from fedpriv.attacks.membership import _keras_predict, _load_weights, load_run_data
    from fedpriv.models import build_model

    data = load_run_data(spec.data)
    train_spec = spec.train
    x_t = np.concatenate([c.x_train for c in data.clients] + [c.x_test for c in data.clients])
    y_t = np.concatenate([c.y_train for c in data.clients] + [c.y_test for c in data.clients])
    n_mem = sum(len(c.x_train) for c in data.clients)
    is_member = np.arange(len(x_t)) < n_mem

    def predict(weights: list[np.ndarray], x: np.ndarray) -> np.ndarray:
        return _keras_predict(str(train_spec.model), data, weights, x)

    def train(x: np.ndarray, y: np.ndarray, s: int) -> list[np.ndarray]:
        model = build_model(
            str(train_spec.model), input_shape=tuple(data.input_shape),
            num_classes=data.num_classes, optimizer=str(train_spec.optimizer),
            learning_rate=float(train_spec.learning_rate), seed=s,
        )  # fmt: skip
        model.fit(x, y, epochs=epochs, batch_size=int(train_spec.batch_size), verbose=0)
        return model.get_weights()

    out = lira_attack(
        target_weights=_load_weights(Path(run_dir)), predict=predict, train_reference=train,
        x_targets=x_t, y_targets=y_t, is_member=is_member, x_reference=data.x_val,
        y_reference=data.y_val, references=references, seed=seed,
    )  # fmt: skip
    out.update(run_dir=str(run_dir), privacy=spec.mode_name, reference_epochs=epochs)
    return out
