"""Privacy mechanisms on lists of numpy arrays (one array per model layer).

Everything here is plain numpy (no Flower import) so that the Flower wrappers of both APIs,
the zonal aggregation and the clients share one implementation:

* FlatClip and the server-side fixed-clipping Gaussian mechanism (SPEC §3.1, MP §6; the
  arithmetic of ``flwr.common.differential_privacy``): ``σ = z·C/m``.
* The metric-privacy noise scale (SPEC §3.2, MP §6, the authors' code): ``σ = z·C/(m·d)``.
* The Laplace mechanism in R^n (SPEC §3.3, GP §3.1 Prop. 3.1) and the client-side
  ``SanitizeUpdate`` of GP Algorithm 2 (SPEC §3.4).

Randomness only through an explicit ``numpy.random.Generator`` argument.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedpriv.validation import check_int, check_random_state, check_real

NDArrays = list[np.ndarray]

__all__ = [
    "NDArrays",
    "flat_norm",
    "clip_update",
    "clip_model_to_reference",
    "gaussian_stdv",
    "metric_stdv",
    "clipped_distance_bound",
    "metric_sigma_lower_bound",
    "add_gaussian_noise",
    "sample_laplace_rn",
    "laplace_epsilon",
    "sanitize_laplace",
]


# --- validation helpers -----------------------------------------------------------------------


def _check_pairs(
    arrays: Sequence[np.ndarray], reference: Sequence[np.ndarray], what: str
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Both sequences as arrays, same number of layers and same shapes (else ValueError)."""
    a = [np.asarray(x) for x in arrays]
    b = [np.asarray(x) for x in reference]
    if len(a) != len(b):
        raise ValueError(f"{what}: {len(a)} layers but the reference has {len(b)} layers")
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape:
            raise ValueError(
                f"{what}: layer {i} has shape {x.shape} but the reference has {y.shape}"
            )
    return a, b


def _float_copy(array: np.ndarray) -> np.ndarray:
    """A writable copy; integer/bool arrays become float64 (scaling needs a float dtype)."""
    array = np.asarray(array)
    if np.issubdtype(array.dtype, np.inexact):
        return np.array(array, copy=True)
    return array.astype(np.float64)


# --- FlatClip and the Gaussian mechanism (SPEC §3.1) -----------------------------------------


def flat_norm(arrays: Sequence[np.ndarray]) -> float:
    """L2 norm of all layers flattened into one vector: ``sqrt(Σ_ℓ ‖a_ℓ‖²)``.

    Computed in float64 (each layer is cast before squaring), so it is accurate for float32
    models with millions of parameters. An empty list has norm 0.0.
    """
    total = 0.0
    for array in arrays:
        flat = np.asarray(array).reshape(-1).astype(np.float64, copy=False)
        total += float(np.dot(flat, flat))
    return math.sqrt(total)


def _flower_norm(arrays: Sequence[np.ndarray]) -> float:
    """The norm exactly as ``flwr.common.differential_privacy.get_norm`` computes it.

    Per-layer norms in each layer's own dtype, summed in squares. Using the same arithmetic
    makes :func:`clip_update` bit-identical to Flower's ``clip_inputs_inplace``; the value
    differs from :func:`flat_norm` only by float32 rounding (~1e-7 relative).
    """
    array_norms = [np.linalg.norm(np.asarray(a).flat) for a in arrays]
    return float(np.sqrt(sum([norm**2 for norm in array_norms])))


def clip_update(update: Sequence[np.ndarray], clipping_norm: float) -> tuple[NDArrays, bool]:
    """FlatClip (MP §6 / Andrew et al.): ``Δ · min(1, C/‖Δ‖)`` over all layers flattened.

    Returns ``(clipped copy, was_clipped)``; the input is never modified. The scaling factor
    is computed with Flower's arithmetic (see :func:`_flower_norm`) and applied in place in
    each layer's dtype, as Flower does, so results are bit-identical to
    ``flwr.common.differential_privacy.clip_inputs_inplace``. ``‖Δ‖ = 0`` returns an
    unchanged copy and ``False`` (Flower would divide by zero there). Integer layers are
    returned as float64.
    """
    clipping_norm = check_real("clipping_norm", clipping_norm, lo=0.0, lo_open=True)
    out = [_float_copy(a) for a in update]
    norm = _flower_norm(out)
    if not math.isfinite(norm):
        raise ValueError(f"update has a non-finite norm ({norm}); refusing to clip NaN/Inf")
    if norm == 0.0:
        return out, False
    scaling_factor = min(1.0, clipping_norm / norm)
    was_clipped = scaling_factor < 1.0
    if was_clipped:
        for array in out:
            array *= scaling_factor
    return out, was_clipped


def clip_model_to_reference(
    model: Sequence[np.ndarray], reference: Sequence[np.ndarray], clipping_norm: float
) -> tuple[NDArrays, bool]:
    """``w_g + clip(w − w_g)``: Flower's ``compute_clip_model_update`` without mutation.

    ``model`` is the client's returned weights w, ``reference`` the global weights w_g of the
    round (SPEC §3.1). The update is ``np.subtract(w, w_g)``, clipped with
    :func:`clip_update`, and added back as ``w_g + Δ`` even when nothing was clipped, exactly
    as Flower does (so the result is bit-identical to Flower's in-place version; note that
    ``w_g + (w − w_g)`` may differ from ``w`` in the last bit). Returns
    ``(new arrays, was_clipped)``.
    """
    w, w_g = _check_pairs(model, reference, "clip_model_to_reference")
    update = [np.subtract(x, y) for x, y in zip(w, w_g)]
    clipped, was_clipped = clip_update(update, clipping_norm)
    return [y + d for y, d in zip(w_g, clipped)], was_clipped


def gaussian_stdv(noise_multiplier: float, clipping_norm: float, num_sampled_clients: int) -> float:
    """Noise std of server-side fixed clipping, SPEC §3.1: ``σ = z·C/m``.

    Same expression as ``flwr.common.differential_privacy.compute_stdv``:
    ``float((noise_multiplier * clipping_norm) / num_sampled_clients)``.
    """
    z = check_real("noise_multiplier", noise_multiplier, lo=0.0)
    c = check_real("clipping_norm", clipping_norm, lo=0.0, lo_open=True)
    m = check_int("num_sampled_clients", num_sampled_clients, lo=1)
    return float((z * c) / m)


def metric_stdv(
    noise_multiplier: float, clipping_norm: float, num_sampled_clients: int, distance: float
) -> float:
    """Noise std of metric privacy, SPEC §3.2 (MP §6, authors' code): ``σ = z·C/(m·d)``.

    The authors' code divides the noise multiplier by the distance d and then applies
    Flower's ``compute_stdv``; this evaluates the same expression in the same order,
    ``((z/d)·C)/m``. Larger d means less noise (the code's behaviour; the paper's sentence
    "if d > 1 we add more noise" contradicts it). ``distance`` must be finite and > 0: the
    floor/fallback for d = 0 or fewer than two clients belongs to the caller (SPEC §3.2).
    """
    z = check_real("noise_multiplier", noise_multiplier, lo=0.0)
    d = check_real("distance", distance, lo=0.0, lo_open=True)
    return gaussian_stdv(z / d, clipping_norm, num_sampled_clients)


def clipped_distance_bound(clipping_norm: float, num_layers: int) -> float:
    """Largest metric-DP distance two C-clipped models can have: ``d <= 2C/√L``.

    Clipped models are ``w_g + Δ_i`` with ``‖Δ_i‖ <= C`` (flat norm over the L layers), so
    ``d = (1/L) Σ_ℓ ‖Δ_i(ℓ) − Δ_j(ℓ)‖_F <= (1/L) Σ_ℓ (‖Δ_i(ℓ)‖ + ‖Δ_j(ℓ)‖) <= 2C√L/L``
    (Cauchy–Schwarz: ``Σ_ℓ ‖Δ(ℓ)‖ <= √L·‖Δ‖``).
    """
    c = check_real("clipping_norm", clipping_norm, lo=0.0, lo_open=True)
    layers = check_int("num_layers", num_layers, lo=1)
    return 2.0 * c / math.sqrt(layers)


def metric_sigma_lower_bound(
    noise_multiplier: float,
    clipping_norm: float,
    num_sampled_clients: int,
    num_layers: int,
    *,
    distance_on: str = "clipped",
    max_distance: float | None = None,
) -> float:
    """The smallest σ metric DP can add in a round, whatever the clients send.

    ``σ = z·C/(m·d)`` with d the distance actually used. With ``distance_on="clipped"``
    (the default) ``d <= 2C/√L`` (:func:`clipped_distance_bound`), so ``σ >= z·√L/(2m)``;
    a ``max_distance`` cap lowers d further (``σ >= z·C/(m·cap)``). With ``"raw"`` and no
    cap one client can make d arbitrarily large: the bound is 0 (no floor at all).
    """
    z = check_real("noise_multiplier", noise_multiplier, lo=0.0)
    c = check_real("clipping_norm", clipping_norm, lo=0.0, lo_open=True)
    m = check_int("num_sampled_clients", num_sampled_clients, lo=1)
    if distance_on not in ("raw", "clipped"):
        raise ValueError(f"distance_on = {distance_on!r} is not allowed; expected raw | clipped")
    caps = (
        []
        if max_distance is None
        else [check_real("max_distance", max_distance, lo=0.0, lo_open=True)]
    )
    if distance_on == "clipped":
        caps.append(clipped_distance_bound(c, num_layers))
    if not caps:
        return 0.0
    return z * c / (m * min(caps))


def add_gaussian_noise(
    arrays: Sequence[np.ndarray], stdv: float, rng: np.random.Generator
) -> NDArrays:
    """Return new arrays ``a + N(0, stdv²)`` elementwise; the inputs are not modified.

    Noise is drawn layer by layer, in order, with ``rng.normal(0, stdv, shape)`` (float64)
    and cast to each layer's dtype before the addition, like Flower's
    ``add_gaussian_noise_inplace`` (which uses the global ``np.random``). The draws happen
    even when ``stdv == 0`` so that the generator's stream does not depend on σ. Integer
    layers are returned as float64.
    """
    stdv = check_real("stdv", stdv, lo=0.0)
    rng = check_random_state(rng)
    out: NDArrays = []
    for array in arrays:
        noisy = _float_copy(array)
        noisy += rng.normal(0.0, stdv, noisy.shape).astype(noisy.dtype)
        out.append(noisy)
    return out


# --- Laplace mechanism in R^n (SPEC §3.3, GP Prop. 3.1) --------------------------------------


def sample_laplace_rn(dim: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """One draw ρ ∈ R^dim from the Laplace mechanism under the Euclidean metric (GP Prop. 3.1).

    Density ``K·exp(−ε‖ρ‖₂)``. Sampled as ``ρ = r·u`` with radius
    ``r ~ Gamma(shape=dim, scale=1/ε)`` (GP Prop. 3.1 item 2; drawn first, in float64) and a
    direction ``u = g/‖g‖₂``, ``g ~ N(0, I_dim)`` (drawn second), uniform on the sphere.
    Properties: ``E‖ρ‖ = dim/ε``, per-component variance ``(dim+1)/ε²``, isotropic. For
    ``dim = 1`` this is the classic Laplace(0, 1/ε). Returns a float64 vector.
    """
    dim = check_int("dim", dim, lo=1)
    epsilon = check_real("epsilon", epsilon, lo=0.0, lo_open=True)
    rng = check_random_state(rng)
    radius = rng.gamma(shape=float(dim), scale=1.0 / epsilon)
    direction = rng.standard_normal(dim)
    norm = float(np.sqrt(np.dot(direction, direction)))
    while norm == 0.0:  # probability zero; redraw rather than divide by zero
        direction = rng.standard_normal(dim)
        norm = float(np.sqrt(np.dot(direction, direction)))
    direction *= radius / norm
    return direction


def laplace_epsilon(dim: int, noise_multiplier: float, delta_norm: float) -> float:
    """GP Algorithm 2: ``ε = n/(ν‖δ‖₂)``, so that the leakage ``ε‖δ‖₂ = n/ν``.

    ``dim`` is n (total number of parameters), ``noise_multiplier`` is ν > 0, ``delta_norm``
    is ‖δ‖₂ = ‖θ_local − θ_ref‖₂ >= 0. ``delta_norm == 0`` returns ``math.inf`` (a point
    mass: no noise, see :func:`sanitize_laplace`).
    """
    n = check_int("dim", dim, lo=1)
    nu = check_real("noise_multiplier", noise_multiplier, lo=0.0, lo_open=True)
    norm = check_real("delta_norm", delta_norm, lo=0.0)
    if norm == 0.0:
        return math.inf
    return n / (nu * norm)


def sanitize_laplace(
    params: Sequence[np.ndarray],
    reference: Sequence[np.ndarray],
    noise_multiplier: float,
    rng: np.random.Generator,
) -> tuple[NDArrays, dict[str, Any]]:
    """GP Algorithm 2 (``SanitizeUpdate``), client side (SPEC §3.4).

    ``δ = θ_local − θ_ref`` flattened over all layers, ``n`` = total number of parameters,
    ``ε = n/(ν‖δ‖₂)``, ``θ̂ = θ_local + ρ`` with ``ρ ~ Laplace_ε`` in R^n
    (:func:`sample_laplace_rn`). The noise is added in float64 and the result cast back to
    each layer's dtype and shape. Returns ``(θ̂ arrays, info)`` with
    ``info = {"epsilon": ε, "delta_norm": ‖δ‖, "leakage": ε‖δ‖ = n/ν, "dim": n,
    "noise_norm": ‖ρ‖}``.

    Special cases (documented choices):

    * ``ν = 0`` means no sanitization (plain IFCA): the params are returned unchanged
      (copies), ``epsilon`` and ``leakage`` are ``None`` (no d-privacy guarantee at all, not
      a finite cost), ``noise_norm`` is 0.0, and the generator is not used.
    * ``‖δ‖ = 0`` (training did not move the parameters): ε would be infinite, i.e. a point
      mass. Nothing about the data moved the model, so no noise is added; ``epsilon`` is
      ``math.inf`` but the leakage ``n/ν`` is still reported (and should still be charged),
      so the ledger does not depend on the data. The generator is not used.
    * Non-finite parameters raise ``ValueError``.
    """
    nu = check_real("noise_multiplier", noise_multiplier, lo=0.0)
    local, ref = _check_pairs(params, reference, "sanitize_laplace")
    n = int(sum(a.size for a in local))
    if n < 1:
        raise ValueError("sanitize_laplace: params have no elements; expected at least one")
    delta_norm = flat_norm([np.subtract(x, y, dtype=np.float64) for x, y in zip(local, ref)])
    if not math.isfinite(delta_norm):
        raise ValueError(f"sanitize_laplace: non-finite parameters (‖δ‖ = {delta_norm})")
    info: dict[str, Any] = {"epsilon": None, "delta_norm": delta_norm, "leakage": None, "dim": n}
    if nu == 0.0:
        info["noise_norm"] = 0.0
        return [np.array(a, copy=True) for a in local], info
    info["leakage"] = n / nu
    epsilon = laplace_epsilon(n, nu, delta_norm)
    info["epsilon"] = epsilon
    if math.isinf(epsilon):
        info["noise_norm"] = 0.0
        return [np.array(a, copy=True) for a in local], info
    rho = sample_laplace_rn(n, epsilon, check_random_state(rng))
    info["noise_norm"] = float(np.sqrt(np.dot(rho, rho)))
    out: NDArrays = []
    offset = 0
    for array in local:
        piece = rho[offset : offset + array.size].reshape(array.shape)
        offset += array.size
        dtype = array.dtype if np.issubdtype(array.dtype, np.inexact) else np.float64
        out.append((array.astype(np.float64) + piece).astype(dtype))
    return out, info
