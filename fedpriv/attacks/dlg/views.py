"""What the client shares: gradients, SGD updates, Laplace-sanitized updates, the zonal
level-0 view (GP §3, HDP §IV).

:func:`client_gradient` (and :func:`sgd_update`) differentiate with ``tf.GradientTape``:
TensorFlow backend only, like the attack (:func:`.model.tensorflow_backend`).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import math  # noqa: E402
from collections.abc import Sequence  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

from fedpriv.attacks.dlg.model import (  # noqa: E402
    PLACEMENTS,
    NDArrays,
    _soft_ce,
    check_image_model,
    tensorflow_backend,
)
from fedpriv.privacy.mechanisms import clip_update, sanitize_laplace  # noqa: E402
from fedpriv.validation import check_real  # noqa: E402

# --- what the client shares ---------------------------------------------------------------------


def client_gradient(model: keras.Model, x: np.ndarray, y: np.ndarray) -> NDArrays:
    """``∇_W L`` of the mean cross-entropy on (x, y) (integer labels), one array per weight."""
    tf = tensorflow_backend()
    _, k = check_image_model(model)
    x = tf.convert_to_tensor(np.asarray(x, dtype=np.float32))
    y_soft = tf.one_hot(np.asarray(y, dtype=np.int64), k)
    with tf.GradientTape() as tape:
        loss = _soft_ce(model, x, y_soft)
    return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


def sgd_update(model: keras.Model, x: np.ndarray, y: np.ndarray, learning_rate: float) -> NDArrays:
    """The update ``δ = θ_local − θ = −η·∇_W L(x, y)`` of one SGD step (what FedAvg sends)."""
    lr = check_real("learning_rate", learning_rate, lo=0, lo_open=True)
    return [-lr * g for g in client_gradient(model, x, y)]


def gradient_from_update(update: Sequence[np.ndarray], learning_rate: float) -> NDArrays:
    """The gradient the attacker infers from a one-step update with known η: ``g = −δ/η``."""
    lr = check_real("learning_rate", learning_rate, lo=0, lo_open=True)
    return [-np.asarray(u, dtype=np.float32) / lr for u in update]


def laplace_sanitized_update(
    update: Sequence[np.ndarray],
    reference: Sequence[np.ndarray],
    noise_multiplier: float,
    rng: np.random.Generator,
    *,
    per_layer: bool = True,
) -> tuple[NDArrays, list[dict]]:
    """What the server sees of ``θ + δ`` after GP's ``SanitizeUpdate``, as an update ``θ̂ − θ``.

    Calls :func:`fedpriv.privacy.mechanisms.sanitize_laplace` on ``θ_local = θ + δ`` with reference
    θ: once per layer (``per_layer=True``, GP-extended §5.3) or once on all layers. Returns
    the noisy update and the mechanism's info dict(s) (ε, ‖δ‖, leakage n/ν, ‖ρ‖).
    """
    ref = [np.asarray(r, dtype=np.float64) for r in reference]
    local = [r + np.asarray(u, dtype=np.float64) for r, u in zip(ref, update)]
    if not per_layer:
        noisy, info = sanitize_laplace(local, ref, noise_multiplier, rng)
        return [n - r for n, r in zip(noisy, ref)], [info]
    out: NDArrays = []
    infos: list[dict] = []
    for loc, r in zip(local, ref):
        noisy, info = sanitize_laplace([loc], [r], noise_multiplier, rng)
        out.append(noisy[0] - r)
        infos.append(info)
    return out, infos


def zonal_level0_view(
    updates: Sequence[Sequence[np.ndarray]],
    *,
    zones: Sequence[int],
    placement: str,
    noise_multiplier: float,
    clipping_norm: float,
    attacker: int,
    rng: np.random.Generator,
) -> tuple[NDArrays, dict]:
    """The noisy update a level-0 adversary can attribute to the OTHER clients (HDP §VII-B).

    One round of :func:`fedpriv.zonal.aggregate_round` (SPEC §3.5, HDP Algorithm 1, every
    client sampled, uniform weights) with every zone at level ``placement``:

    - ``ldp``: each client sends :func:`fedpriv.zonal.ldp_client_update`,
      ``clip(Δ_k, C) + N(0, (z·C)²)``;
    - ``hdp``: each super-node adds ``N(0, σ_i²)``, ``σ_i = z·C/W_i``, to its zone average;
    - ``cdp``: the server adds ``N(0, (z·C/k)²)`` once to the aggregate;
    - ``none``: no noise.

    The global step is ``Δ = Σ_i π_i (Δ(i) + noise_i) (+ server noise)`` with
    ``Δ(i) = Σ_{k∈i} Δ_k / W_i`` and ``π_i = W_i/k``, i.e. ``Δ = mean_k Δ_k + noise``. With
    the same z its noise std is z·C/√k (LDP) > z·C·√s/k (HDP) > z·C/k (CDP) (HDP §IV-C).
    The adversary (client ``attacker``) knows what it sent (its clipped update, plus its own
    noise under LDP), subtracts its share ``sent_a/k`` and rescales the rest to the mean
    update of the other k − 1 clients: ``R = (Δ − sent_a/k) · k/(k − 1)``.
    """
    from fedpriv import zonal

    if placement not in PLACEMENTS:
        raise ValueError(f"placement = {placement!r} is not allowed; expected one of {PLACEMENTS}")
    k = len(updates)
    zones = [int(z) for z in zones]
    if len(zones) != k or k < 2:
        raise ValueError(
            f"zones = {zones!r} is not allowed; expected one zone id per client (>= 2)"
        )
    if not 0 <= attacker < k:
        raise ValueError(
            f"attacker = {attacker!r} is not allowed; expected a client in [0, {k - 1}]"
        )
    z_mult = check_real("noise_multiplier", noise_multiplier, lo=0)
    c = check_real("clipping_norm", clipping_norm, lo=0, lo_open=True)
    s = len(set(zones))
    plan = zonal.ZonalPlan.build(
        num_clients=k,
        num_zones=s,
        clients_per_round=0,
        noise_multiplier=z_mult,
        clipping_norm=c,
        placement=placement,
        assignment="map",
        zone_map={p: zones[p] for p in range(k)},
    )
    sent: dict[int, NDArrays] = {}
    for p, update in enumerate(updates):
        if placement == "ldp":
            sent[p] = zonal.ldp_client_update(
                update, noise_multiplier=z_mult, clipping_norm=c, rng=rng
            )[0]
        else:
            sent[p] = clip_update(update, c)[0]
    result = zonal.aggregate_round(
        plan, sent, template=list(updates[0]), zone_rng=lambda _zone: rng, server_rng=rng
    )
    own = sent[attacker]
    rest = [
        (np.asarray(g) - np.asarray(o, dtype=np.float64) / k) * k / (k - 1)
        for g, o in zip(result.delta, own)
    ]
    global_std = {
        "none": 0.0,
        "ldp": z_mult * c / math.sqrt(k),
        "hdp": z_mult * c * math.sqrt(s) / k,
        "cdp": z_mult * c / k,
    }
    info = {
        "placement": placement,
        "zones": s,
        "clients": k,
        "table_i": plan.table_i,
        "sigma_client": plan.sigma_client if placement == "ldp" else 0.0,
        "sigma_zone": [z.sigma for z in result.zones],
        "sigma_server": result.server_sigma,
        "noise_std_global": global_std[placement],
        "aggregator_noise_multiplier": result.aggregator_noise_multiplier,
    }
    return [r.astype(np.float32) for r in rest], info
