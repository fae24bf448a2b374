"""Deep Leakage from Gradients (DLG) against one client's shared update (GP §4.3, HDP §VII-B).

Threat model (GP-extended §5.3; Zhu et al. 2019): an honest-but-curious party sees the update
a client shares after ONE local SGD step on a batch of ONE example with a known learning rate
η, so the update is ``δ = −η·∇_W L(x, y)`` and the gradient is ``g* = −δ/η``. It recreates the
example by *gradient matching*:

    (x̂, ŷ) = argmin  Σ_ℓ ‖∇_{W_ℓ} L(x̂, softmax(ŷ)) − g*_ℓ‖²  /  Σ_ℓ ‖g*_ℓ‖²

over a dummy image x̂ (box-constrained to the data range, the attacker knows the pixel range)
and dummy label logits ŷ (DLG's soft label; ``label="idlg"`` instead reads the label off the
sign of the output-bias gradient, Zhao et al. 2020, exact for batch 1 without noise). The
problem is solved with L-BFGS (scipy ``L-BFGS-B``; value and gradient from nested TensorFlow
``GradientTape``s: the gradient of a gradient, which is why the model must be twice
differentiable — sigmoid activations, as in DLG and GP's modified CNN). Normalising by
``‖g*‖²`` makes the objective scale-free (the same solver settings work for any η).

Defences measured (what the attacker sees instead of δ):

- ``sanitize_laplace`` (GP Algorithm 2, Prop. 3.1) at noise multiplier ν: θ̂ = θ + δ + ρ with
  ``ρ ~ Laplace_ε`` in R^n, ``ε = n/(ν‖δ‖)``; GP applies it *per layer* (GP-extended §5.3:
  "we apply the Laplace mechanism independently on the parameter vector of each NN layer").
- a level-0 adversary in the zonal setting (HDP §VII-B, Table IV): it receives the noisy
  global update of s zones × (k/s) clients, subtracts its own contribution and matches the rest
  (the other k − 1 clients' examples) with a batch of k − 1 dummies; see
  :func:`zonal_level0_view`.

Quality of a reconstruction: MSE, PSNR and SSIM (Gaussian-window SSIM of Wang et al. 2004,
implemented here because scikit-image is not installed). LPIPS (HDP's metric) needs downloaded
network weights and is not available.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import math  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from scipy import ndimage, optimize  # noqa: E402

from fedpriv.mechanisms import clip_update, sanitize_laplace  # noqa: E402

NDArrays = list[np.ndarray]
LABEL_MODES = ("optimize", "idlg")
PLACEMENTS = ("none", "ldp", "hdp", "cdp")

__all__ = [
    "DLGResult",
    "build_dlg_cnn",
    "check_image_model",
    "client_gradient",
    "sgd_update",
    "gradient_from_update",
    "laplace_sanitized_update",
    "zonal_level0_view",
    "dlg_reconstruct",
    "mse",
    "psnr",
    "ssim",
    "match_reconstructions",
    "laplace_experiment",
    "zonal_experiment",
]


# --- the model DLG attacks --------------------------------------------------------------------


def build_dlg_cnn(
    *, input_shape: tuple[int, ...] = (8, 8, 1), num_classes: int = 10, seed: int = 0
) -> tf.keras.Model:
    """A small twice-differentiable CNN of the kind DLG attacks (sigmoid activations).

    Conv2D(12, 3×3, same, sigmoid) → Conv2D(12, 3×3, same, sigmoid) → Flatten → Dense(K)
    (logits). Weights and biases ~ U(−0.5, 0.5), the initialisation of the DLG reference code
    (larger weights give the attacker more informative gradients). For 8×8×1 digits this is
    9 118 parameters.
    """
    if len(input_shape) != 3:
        raise ValueError(
            f"input_shape = {input_shape!r} is not allowed; expected (height, width, channels)"
        )
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes = {num_classes!r} is not allowed; expected an int >= 2")
    tf.keras.utils.set_random_seed(int(seed))
    init = tf.keras.initializers.RandomUniform(-0.5, 0.5, seed=int(seed))
    layers = tf.keras.layers
    common = dict(kernel_initializer=init, bias_initializer=init)
    return tf.keras.Sequential(
        [
            layers.Input(shape=tuple(input_shape)),
            layers.Conv2D(12, 3, padding="same", activation="sigmoid", **common),
            layers.Conv2D(12, 3, padding="same", activation="sigmoid", **common),
            layers.Flatten(),
            layers.Dense(num_classes, **common),
        ],
        name="dlg_cnn",
    )


def check_image_model(model: Any) -> tuple[tuple[int, int, int], int]:
    """``(input_shape, num_classes)`` of an image classifier, or a one-line ValueError.

    DLG reconstructs an image: the model must take (H, W, C) inputs and output class scores.
    """
    if not isinstance(model, tf.keras.Model):
        raise ValueError(f"model = {model!r} is not allowed; expected a tf.keras image model")
    shape = tuple(model.input_shape)
    out = tuple(model.output_shape)
    if len(shape) != 4 or any(s is None for s in shape[1:]):
        raise ValueError(
            f"model {model.name!r} has input shape {shape[1:]}; DLG needs an image model with "
            "inputs (height, width, channels)"
        )
    if len(out) != 2 or out[1] is None or out[1] < 2:
        raise ValueError(
            f"model {model.name!r} has output shape {out[1:]}; DLG needs a classifier with "
            ">= 2 class outputs"
        )
    return (int(shape[1]), int(shape[2]), int(shape[3])), int(out[1])


def _outputs_are_probabilities(model: tf.keras.Model) -> bool:
    last = model.layers[-1]
    return getattr(last, "activation", None) is tf.keras.activations.softmax


def _soft_ce(model: tf.keras.Model, x: tf.Tensor, y_soft: tf.Tensor) -> tf.Tensor:
    """Mean cross-entropy of soft targets; works for logit or softmax outputs."""
    out = model(x, training=False)
    if _outputs_are_probabilities(model):
        logp = tf.math.log(tf.clip_by_value(out, 1e-7, 1.0))
    else:
        logp = tf.nn.log_softmax(out, axis=-1)
    return tf.reduce_mean(-tf.reduce_sum(y_soft * logp, axis=-1))


# --- what the client shares ---------------------------------------------------------------------


def client_gradient(model: tf.keras.Model, x: np.ndarray, y: np.ndarray) -> NDArrays:
    """``∇_W L`` of the mean cross-entropy on (x, y) (integer labels), one array per weight."""
    _, k = check_image_model(model)
    x = tf.convert_to_tensor(np.asarray(x, dtype=np.float32))
    y_soft = tf.one_hot(np.asarray(y, dtype=np.int64), k)
    with tf.GradientTape() as tape:
        loss = _soft_ce(model, x, y_soft)
    return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


def sgd_update(
    model: tf.keras.Model, x: np.ndarray, y: np.ndarray, learning_rate: float
) -> NDArrays:
    """The update ``δ = θ_local − θ = −η·∇_W L(x, y)`` of one SGD step (what FedAvg sends)."""
    lr = _positive("learning_rate", learning_rate)
    return [-lr * g for g in client_gradient(model, x, y)]


def gradient_from_update(update: Sequence[np.ndarray], learning_rate: float) -> NDArrays:
    """The gradient the attacker infers from a one-step update with known η: ``g = −δ/η``."""
    lr = _positive("learning_rate", learning_rate)
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

    Calls :func:`fedpriv.mechanisms.sanitize_laplace` on ``θ_local = θ + δ`` with reference
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
    z_mult = _non_negative("noise_multiplier", noise_multiplier)
    c = _positive("clipping_norm", clipping_norm)
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


# --- the attack ---------------------------------------------------------------------------------


@dataclass
class DLGResult:
    """A DLG reconstruction: dummy images, soft labels, predicted labels, matching loss."""

    images: np.ndarray
    soft_labels: np.ndarray
    labels: np.ndarray
    matching_loss: float
    iterations: int
    restarts: int
    history: list[float] = field(default_factory=list)


def _idlg_label(target_grads: Sequence[np.ndarray], model: tf.keras.Model) -> int:
    """iDLG (Zhao et al. 2020): for batch 1, ∂L/∂b_j = p_j − y_j is negative only at the label."""
    bias = [g for v, g in zip(model.trainable_variables, target_grads) if "bias" in v.name][-1]
    return int(np.argmin(np.asarray(bias)))


def _matching_fn(model: tf.keras.Model, target: Sequence[np.ndarray], batch: int, shape, k: int):
    """A traced function: flat variables -> (normalised matching loss, its gradient)."""
    target_t = [tf.constant(np.asarray(t, dtype=np.float32)) for t in target]
    norm = float(sum(np.sum(np.square(np.asarray(t, dtype=np.float64))) for t in target))
    norm_t = tf.constant(max(norm, 1e-30), dtype=tf.float32)
    n_x = batch * int(np.prod(shape))

    @tf.function(reduce_retracing=True)
    def value_and_grad(flat: tf.Tensor, fixed_label: tf.Tensor, use_fixed: tf.Tensor):
        with tf.GradientTape() as outer:
            outer.watch(flat)
            x = tf.reshape(flat[:n_x], (batch, *shape))
            logits = tf.reshape(flat[n_x:], (batch, k))
            y_soft = tf.where(use_fixed, fixed_label, tf.nn.softmax(logits, axis=-1))
            with tf.GradientTape() as inner:
                loss = _soft_ce(model, x, y_soft)
            grads = inner.gradient(loss, model.trainable_variables)
            dist = tf.add_n([tf.reduce_sum(tf.square(g - t)) for g, t in zip(grads, target_t)])
            dist = dist / norm_t
        return dist, outer.gradient(dist, flat)

    return value_and_grad, n_x


def dlg_reconstruct(
    model: tf.keras.Model,
    target_gradient: Sequence[np.ndarray],
    *,
    batch: int = 1,
    label: str = "optimize",
    seed: int = 0,
    max_iter: int = 300,
    restarts: int = 1,
    data_range: tuple[float, float] = (0.0, 1.0),
    box: bool = True,
) -> DLGResult:
    """Recover ``batch`` examples and labels whose gradient matches ``target_gradient``.

    ``target_gradient`` is the gradient of the MEAN cross-entropy over the unknown batch
    (what :func:`client_gradient` returns; from an update use :func:`gradient_from_update`).
    Dummies start from U(data_range) images and N(0, 1) label logits (seeded), and L-BFGS-B
    minimises the normalised matching distance with the images boxed to ``data_range``.
    With ``restarts > 1`` the run with the lowest matching distance wins (a criterion the
    attacker can evaluate; the true image is never used). ``label="idlg"`` fixes the label
    from the output-bias gradient (batch 1 only). ``box=False`` leaves the dummy images
    unconstrained, as in Zhu et al.'s code (measured: slightly weaker under noise, e.g. mean
    SSIM 0.72 instead of 0.75 at Laplace ν = 1).
    """
    shape, k = check_image_model(model)
    batch = _int_at_least("batch", batch, 1)
    restarts = _int_at_least("restarts", restarts, 1)
    max_iter = _int_at_least("max_iter", max_iter, 1)
    if label not in LABEL_MODES:
        raise ValueError(f"label = {label!r} is not allowed; expected one of {LABEL_MODES}")
    if label == "idlg" and batch != 1:
        raise ValueError(f"label = 'idlg' needs batch = 1, got batch = {batch}")
    variables = model.trainable_variables
    if len(target_gradient) != len(variables) or any(
        tuple(np.shape(g)) != tuple(v.shape) for g, v in zip(target_gradient, variables)
    ):
        raise ValueError(
            "target_gradient does not match the model's trainable weights "
            f"({len(target_gradient)} arrays vs {len(variables)} weights)"
        )
    lo, hi = float(data_range[0]), float(data_range[1])
    fn, n_x = _matching_fn(model, target_gradient, batch, shape, k)
    fixed = np.zeros((batch, k), dtype=np.float32)
    use_fixed = label == "idlg"
    if use_fixed:
        fixed[0, _idlg_label(target_gradient, model)] = 1.0
    fixed_t = tf.constant(fixed)
    use_t = tf.constant(use_fixed)
    rng = np.random.default_rng(seed)
    bounds = [(lo, hi) if box else (None, None)] * n_x + [(None, None)] * (batch * k)
    best: DLGResult | None = None
    for attempt in range(restarts):
        x0 = np.concatenate([rng.uniform(lo, hi, n_x), rng.standard_normal(batch * k)]).astype(
            np.float64
        )
        history: list[float] = []

        def fun(v: np.ndarray, history: list[float] = history) -> tuple[float, np.ndarray]:
            val, grad = fn(tf.constant(v, dtype=tf.float32), fixed_t, use_t)
            history.append(float(val))
            return float(val), grad.numpy().astype(np.float64)

        res = optimize.minimize(
            fun,
            x0,
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"maxiter": max_iter, "ftol": 1e-12, "gtol": 1e-10, "maxcor": 50},
        )
        result = _result_from(res, batch, shape, k, fixed if use_fixed else None, history)
        result.restarts = attempt + 1
        if best is None or result.matching_loss < best.matching_loss:
            best = result
    assert best is not None
    best.restarts = restarts
    return best


def _result_from(res, batch, shape, k, fixed, history) -> DLGResult:
    n_x = batch * int(np.prod(shape))
    images = res.x[:n_x].reshape(batch, *shape).astype(np.float32)
    logits = res.x[n_x:].reshape(batch, k)
    if fixed is not None:
        soft = fixed.astype(np.float64)
    else:
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        soft = e / e.sum(axis=1, keepdims=True)
    return DLGResult(
        images=images,
        soft_labels=soft,
        labels=np.argmax(soft, axis=1).astype(np.int64),
        matching_loss=float(res.fun),
        iterations=int(res.nit),
        restarts=1,
        history=history,
    )


# --- image quality ----------------------------------------------------------------------------


def _pair(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"images have shapes {x.shape} and {y.shape}; expected equal shapes")
    return x, y


def mse(x: np.ndarray, y: np.ndarray) -> float:
    """Mean squared error ``mean((x − y)²)``."""
    x, y = _pair(x, y)
    return float(np.mean((x - y) ** 2))


def psnr(x: np.ndarray, y: np.ndarray, *, data_range: float = 1.0) -> float:
    """Peak signal-to-noise ratio ``10·log10(R²/MSE)`` in dB (inf for identical images)."""
    err = mse(x, y)
    return math.inf if err == 0 else float(10.0 * math.log10(data_range**2 / err))


def ssim(
    x: np.ndarray,
    y: np.ndarray,
    *,
    data_range: float = 1.0,
    sigma: float = 1.5,
    truncate: float = 3.5,
    k1: float = 0.01,
    k2: float = 0.03,
) -> float:
    """Mean structural similarity, Gaussian-window SSIM (Wang et al. 2004, eq. 13).

    Local statistics with a Gaussian window (std ``sigma`` = 1.5, radius ``⌈truncate·σ⌉``):
    μ_x = G∗x, σ_x² = G∗x² − μ_x², σ_xy = G∗(xy) − μ_xμ_y, with sample-covariance correction
    N/(N−1), N = window size, as scikit-image does; then

        SSIM = (2μ_xμ_y + C1)(2σ_xy + C2) / ((μ_x² + μ_y² + C1)(σ_x² + σ_y² + C2)),

    C1 = (k1·R)², C2 = (k2·R)², R = ``data_range``. Borders are reflected (``mode="reflect"``)
    and the map is averaged over the pixels at least one window radius from the border when the
    image is larger than the window (scikit-image's crop), else over every pixel (8×8 digits
    are smaller than the 11×11 window). 2-D images, or (H, W, C): the mean over channels.
    """
    x, y = _pair(x, y)
    if x.ndim == 3:
        return float(
            np.mean(
                [
                    ssim(
                        x[..., c],
                        y[..., c],
                        data_range=data_range,
                        sigma=sigma,
                        truncate=truncate,
                        k1=k1,
                        k2=k2,
                    )
                    for c in range(x.shape[2])
                ]
            )
        )
    if x.ndim != 2:
        raise ValueError(f"image shape {x.shape}; expected (H, W) or (H, W, C)")
    radius = int(truncate * sigma + 0.5)
    win = 2 * radius + 1

    def filt(a: np.ndarray) -> np.ndarray:
        return ndimage.gaussian_filter(a, sigma=sigma, truncate=truncate, mode="reflect")

    cov_norm = win * win / (win * win - 1.0)
    mu_x, mu_y = filt(x), filt(y)
    vx = cov_norm * (filt(x * x) - mu_x * mu_x)
    vy = cov_norm * (filt(y * y) - mu_y * mu_y)
    vxy = cov_norm * (filt(x * y) - mu_x * mu_y)
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    smap = ((2 * mu_x * mu_y + c1) * (2 * vxy + c2)) / ((mu_x**2 + mu_y**2 + c1) * (vx + vy + c2))
    if x.shape[0] > win and x.shape[1] > win:
        smap = smap[radius:-radius, radius:-radius]
    return float(np.mean(smap))


def match_reconstructions(
    originals: np.ndarray, reconstructions: np.ndarray, *, data_range: float = 1.0
) -> list[dict[str, float]]:
    """For each original, the reconstruction with the highest SSIM and its MSE/PSNR/SSIM.

    For batch 1 this is just the one pair. For a batch reconstruction (the zonal case) each
    original is scored against its best dummy (the usual batch-DLG evaluation).
    """
    out = []
    for orig in np.asarray(originals):
        scores = [ssim(orig, rec, data_range=data_range) for rec in np.asarray(reconstructions)]
        j = int(np.argmax(scores))
        rec = np.asarray(reconstructions)[j]
        out.append(
            {
                "index": j,
                "ssim": scores[j],
                "mse": mse(orig, rec),
                "psnr": psnr(orig, rec, data_range=data_range),
            }
        )
    return out


# --- small validators -----------------------------------------------------------------------


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} = {value!r} is not allowed; expected a number > 0")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name} = {value!r} is not allowed; expected a finite number > 0")
    return float(value)


def _non_negative(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} = {value!r} is not allowed; expected a number >= 0")
    return float(value)


def _int_at_least(name: str, value: Any, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ValueError(f"{name} = {value!r} is not allowed; expected an integer >= {lo}")
    return int(value)


# --- experiments (GP Fig. 5, HDP Table IV) ----------------------------------------------------


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
    model: tf.keras.Model | None = None,
) -> tuple[list[dict], dict[str, np.ndarray]]:
    """DLG vs GP's Laplace sanitization (GP §4.3, Fig. 5) on examples ``x[indices]``.

    For each example: one SGD step (batch 1, ``learning_rate``) from the model's weights;
    the attacker sees the raw update (row ``nu`` None) or the ``sanitize_laplace``-d update
    for each ν, infers ``g = −δ̂/η`` and runs :func:`dlg_reconstruct`. Returns table rows
    (per ν: lists of SSIM, PSNR, MSE, label_ok over the examples) and the reconstructions per
    setting label (for :func:`fedpriv.attacks.report.plot_reconstructions`).
    """
    model = (
        model
        if model is not None
        else build_dlg_cnn(
            input_shape=tuple(np.shape(x)[1:]), num_classes=int(np.max(y)) + 1, seed=model_seed
        )
    )
    check_image_model(model)
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
    model: tf.keras.Model | None = None,
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
    from fedpriv.mechanisms import flat_norm

    k = len(zones)
    model = (
        model
        if model is not None
        else build_dlg_cnn(
            input_shape=tuple(np.shape(x)[1:]), num_classes=int(np.max(y)) + 1, seed=model_seed
        )
    )
    check_image_model(model)
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
