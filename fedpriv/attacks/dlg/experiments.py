"""The DLG experiments: Laplace noise sweep (GP Fig. 5) and zonal placements (HDP Table IV).

TensorFlow backend only, like the attack they run (:mod:`.attack`).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from collections.abc import Sequence  # noqa: E402
from typing import Any  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

from fedpriv.attacks.dlg.attack import dlg_reconstruct  # noqa: E402
from fedpriv.attacks.dlg.model import PLACEMENTS, build_dlg_cnn, check_image_model  # noqa: E402
from fedpriv.attacks.dlg.quality import match_reconstructions, mse, psnr, ssim  # noqa: E402
from fedpriv.attacks.dlg.views import (  # noqa: E402
    gradient_from_update,
    laplace_sanitized_update,
    sgd_update,
    zonal_level0_view,
)

# --- experiments (GP Fig. 5, HDP Table IV) ----------------------------------------------------


def _attacked_model(model: Any, x: np.ndarray, y: np.ndarray, seed: int) -> Any:
    """``model``, or the DLG CNN sized for ``x`` / ``y`` (seeded); checked either way."""
    if model is None:
        shape, classes = tuple(np.shape(x)[1:]), int(np.max(y)) + 1
        model = build_dlg_cnn(input_shape=shape, num_classes=classes, seed=seed)
    check_image_model(model)
    return model


def laplace_experiment(
    x: np.ndarray,
    y: np.ndarray,
    *,
    indices: Sequence[int],
    nus: Sequence[float] = (0.001, 0.01, 0.1, 1.0, 10.0),
    learning_rate: float = 0.1,
    model_seed: int = 0,
    seed: int = 0,
    max_iter: int = 300,
    restarts: int = 1,
    per_layer: bool = True,
    model: keras.Model | None = None,
) -> tuple[list[dict], dict[str, np.ndarray]]:
    """DLG vs GP's Laplace sanitization (GP §4.3, Fig. 5) on examples ``x[indices]``.

    For each example: one SGD step (batch 1, ``learning_rate``) from the model's weights;
    the attacker sees the raw update (row ``nu`` None) or the ``sanitize_laplace``-d update
    for each ν, infers ``g = −δ̂/η`` and runs :func:`dlg_reconstruct`. Returns table rows
    (per ν: lists of SSIM, PSNR, MSE, label_ok over the examples) and the reconstructions per
    setting label (for :func:`fedpriv.attacks.report.plot_reconstructions`).
    """
    model = _attacked_model(model, x, y, model_seed)
    reference = [v.numpy() for v in model.trainable_variables]
    settings: list[float | None] = [None, *[float(n) for n in nus]]
    rows = [
        {"nu": nu, "ssim": [], "psnr": [], "mse": [], "label_ok": [], "epsilon": []}
        for nu in settings
    ]
    images: dict[str, list[np.ndarray]] = {_nu_label(nu): [] for nu in settings}
    for t, idx in enumerate(indices):
        xi, yi = np.asarray(x[idx : idx + 1]), np.asarray(y[idx : idx + 1])
        update = sgd_update(model, xi, yi, learning_rate)
        for row, nu in zip(rows, settings):
            rng = np.random.default_rng([seed, t, 0 if nu is None else int(round(nu * 1e6))])
            if nu is None:
                seen, infos = update, []
            else:
                seen, infos = laplace_sanitized_update(
                    update, reference, nu, rng, per_layer=per_layer
                )
            res = dlg_reconstruct(
                model,
                gradient_from_update(seen, learning_rate),
                seed=seed + t,
                max_iter=max_iter,
                restarts=restarts,
            )
            rec = res.images[0]
            row["ssim"].append(ssim(xi[0], rec))
            row["psnr"].append(psnr(xi[0], rec))
            row["mse"].append(mse(xi[0], rec))
            row["label_ok"].append(bool(res.labels[0] == yi[0]))
            row["epsilon"].append([i.get("epsilon") for i in infos])
            images[_nu_label(nu)].append(rec)
    return rows, {k: np.stack(v) for k, v in images.items()}


def _nu_label(nu: float | None) -> str:
    return "no defence" if nu is None else f"ν = {nu:g}"


def zonal_experiment(
    x: np.ndarray,
    y: np.ndarray,
    *,
    groups: Sequence[Sequence[int]],
    zs: Sequence[float] = (0.003, 0.01, 0.03),
    zones: Sequence[int] = (0, 0, 1, 1),
    attacker: int = 0,
    target: int = 1,
    learning_rate: float = 0.1,
    clipping_norm: float | None = None,
    model_seed: int = 0,
    seed: int = 0,
    max_iter: int = 500,
    restarts: int = 2,
    model: keras.Model | None = None,
) -> tuple[list[dict], dict[str, np.ndarray]]:
    """DLG by a level-0 adversary in the zonal setting (HDP §VII-B, Table IV shape).

    Each group is k = len(zones) example indices, one per client (batch 1, one SGD step);
    s zones (default 2 zones × 2 clients, HDP's s = 2, k = 4). The adversary (client
    ``attacker``) gets :func:`zonal_level0_view` of the round, rescaled to the mean update of
    the other k − 1 clients, runs :func:`dlg_reconstruct` with a batch of k − 1 dummies and
    is scored on the target's example (its best-matching dummy). ``clipping_norm`` None uses
    the largest update norm of the group (HDP: C from the norms seen without DP), so clipping
    is inactive and placements differ only by their noise. Returns rows (per z: per placement
    lists of SSIM/PSNR/MSE) and the target reconstructions per setting.
    """
    from fedpriv.privacy.mechanisms import flat_norm

    k = len(zones)
    model = _attacked_model(model, x, y, model_seed)
    if not 0 <= target < k or target == attacker:
        raise ValueError(
            f"target = {target!r} is not allowed; expected a client in [0, {k - 1}] "
            f"other than attacker = {attacker}"
        )
    others = [i for i in range(k) if i != attacker]
    rows: list[dict] = []
    images: dict[str, list[np.ndarray]] = {}
    settings = [(0.0, "none")] + [(float(z), p) for z in zs for p in ("ldp", "hdp", "cdp")]
    for z in zs:
        rows.append(
            {
                "z": float(z),
                **{p: {"ssim": [], "psnr": [], "mse": []} for p in ("ldp", "hdp", "cdp", "none")},
            }
        )
    for g, group in enumerate(groups):
        if len(group) != k:
            raise ValueError(f"group {list(group)} has {len(group)} examples; expected {k}")
        updates = [sgd_update(model, x[i : i + 1], y[i : i + 1], learning_rate) for i in group]
        c = clipping_norm if clipping_norm is not None else max(flat_norm(u) for u in updates)
        original = np.asarray(x[group[target]])
        for z, placement in settings:
            rng = np.random.default_rng([seed, g, int(round(z * 1e6)), PLACEMENTS.index(placement)])
            rest, _ = zonal_level0_view(
                updates,
                zones=zones,
                placement=placement,
                noise_multiplier=z,
                clipping_norm=c,
                attacker=attacker,
                rng=rng,
            )
            res = dlg_reconstruct(
                model,
                gradient_from_update(rest, learning_rate),
                batch=len(others),
                seed=seed + g,
                max_iter=max_iter,
                restarts=restarts,
            )
            best = match_reconstructions(original[None], res.images)[0]
            targets = rows if placement == "none" else [r for r in rows if r["z"] == z]
            for row in targets:
                for key in ("ssim", "psnr", "mse"):
                    row[placement][key].append(best[key])
            label = "No DP" if placement == "none" else f"{placement.upper()} z={z:g}"
            images.setdefault(label, []).append(res.images[best["index"]])
    return rows, {k_: np.stack(v) for k_, v in images.items()}
