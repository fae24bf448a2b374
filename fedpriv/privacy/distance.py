"""Pairwise model distance of metric privacy (SPEC §3.2, MP §6)::

    d = max_{i<j} (1/|L|) Σ_ℓ ‖w_i(ℓ) − w_j(ℓ)‖_F

i.e. for every pair of clients, the mean over layers of the Frobenius norm of the per-layer
difference, maximised over pairs. The authors compute it with a double loop in O(m²·P).

Here each layer ℓ is handled as a matrix X_ℓ (m clients × P_ℓ parameters, float64) and the
squared distances come from the Gram identity ``‖a−b‖² = ‖a‖² + ‖b‖² − 2a·b`` with one BLAS
product ``G = X Xᵀ`` (clamped at 0 before the square root). Two details keep it exact and
bounded:

* Precision: the identity cancels catastrophically when models are nearly identical
  (‖a‖² ≫ ‖a−b‖²). Each column is centred first (the per-parameter mean over clients is
  subtracted); pairwise distances are invariant to that shift, and after centring the terms
  are of the size of the distances themselves.
* Memory: a layer is processed in column chunks of at most ``chunk_elements`` float64
  values in total (m × chunk), accumulating G. Centring is per column, so chunking does not
  change the result. Peak extra memory is one chunk plus a few m × m matrices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "max_pairwise_layer_distance",
    "pairwise_layer_distances",
    "naive_max_pairwise_layer_distance",
]

DEFAULT_CHUNK_ELEMENTS = 1 << 22  # 4 Mi float64 values = 32 MiB per chunk


def _validate(models: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
    """Arrays per client; ValueError naming the client and layer on ragged input."""
    out = [[np.asarray(layer) for layer in model] for model in models]
    if len(out) < 2:
        return out
    ref = out[0]
    if len(ref) == 0:
        raise ValueError("models have no layers; expected at least one layer per model")
    for i, model in enumerate(out[1:], start=1):
        if len(model) != len(ref):
            raise ValueError(
                f"ragged models: client {i} has {len(model)} layers but client 0 has {len(ref)}"
            )
        for layer_index, (a, b) in enumerate(zip(model, ref)):
            if a.shape != b.shape:
                raise ValueError(
                    f"ragged models: client {i} layer {layer_index} has shape {a.shape} "
                    f"but client 0 layer {layer_index} has shape {b.shape}"
                )
    return out


def _layer_gram(flats: list[np.ndarray], chunk_elements: int) -> np.ndarray:
    """``G = Xc Xcᵀ`` (float64) of the column-centred client matrix of one layer, in chunks."""
    m = len(flats)
    size = flats[0].size
    gram = np.zeros((m, m), dtype=np.float64)
    step = max(1, chunk_elements // m)
    buf = np.empty((m, min(step, max(size, 1))), dtype=np.float64)
    for start in range(0, size, step):
        stop = min(start + step, size)
        block = buf[:, : stop - start]
        for i, flat in enumerate(flats):
            block[i] = flat[start:stop]  # casts to float64
        block -= block.mean(axis=0)
        gram += np.dot(block, block.T)  # numpy uses BLAS syrk for X·Xᵀ
    return gram


def _first_non_finite(models: list[list[np.ndarray]]) -> str:
    for i, model in enumerate(models):
        for layer_index, layer in enumerate(model):
            if not np.all(np.isfinite(layer)):
                return f"client {i} layer {layer_index}"
    return "an intermediate result (overflow)"


def pairwise_layer_distances(
    models: Sequence[Sequence[np.ndarray]], *, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS
) -> np.ndarray:
    """The m × m matrix D with ``D[i, j] = (1/|L|) Σ_ℓ ‖w_i(ℓ) − w_j(ℓ)‖_F`` (float64).

    Symmetric with an exact zero diagonal; an empty (0×0) or 1×1 zero matrix for fewer than
    two models. ``ValueError`` on ragged input (names client and layer) or non-finite values.
    """
    bad = isinstance(chunk_elements, bool) or not isinstance(chunk_elements, int)
    if bad or chunk_elements < 1:
        raise ValueError(
            f"chunk_elements = {chunk_elements!r} is not allowed; expected an int >= 1"
        )
    checked = _validate(models)
    m = len(checked)
    if m < 2:
        return np.zeros((m, m), dtype=np.float64)
    num_layers = len(checked[0])
    total = np.zeros((m, m), dtype=np.float64)
    for layer_index in range(num_layers):
        flats = [model[layer_index].reshape(-1) for model in checked]
        gram = _layer_gram(flats, chunk_elements)
        sq = np.diag(gram)
        d2 = sq[:, None] + sq[None, :] - 2.0 * gram
        np.maximum(d2, 0.0, out=d2)
        total += np.sqrt(d2)
    total /= num_layers
    total = 0.5 * (total + total.T)
    np.fill_diagonal(total, 0.0)
    if not np.all(np.isfinite(total)):
        raise ValueError(f"non-finite model values in {_first_non_finite(checked)}")
    return total


def max_pairwise_layer_distance(
    models: Sequence[Sequence[np.ndarray]], *, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS
) -> float:
    """``d = max_{i<j} (1/|L|) Σ_ℓ ‖w_i(ℓ) − w_j(ℓ)‖_F`` (SPEC §3.2), vectorised.

    Returns 0.0 for fewer than two models (and for identical models); the caller applies
    the ``min-distance`` floor. ``ValueError`` on ragged input naming the client and layer.
    """
    dist = pairwise_layer_distances(models, chunk_elements=chunk_elements)
    if dist.shape[0] < 2:
        return 0.0
    return float(dist[np.triu_indices(dist.shape[0], k=1)].max())


def naive_max_pairwise_layer_distance(models: Sequence[Sequence[np.ndarray]]) -> float:
    """Reference double loop over pairs i<j and layers (the authors' O(m²·P) algorithm).

    Differences are taken in float64 (``np.subtract(..., dtype=float64)``), so this is also
    the accuracy reference for the vectorised version. Same validation and edge cases.
    """
    checked = _validate(models)
    m = len(checked)
    if m < 2:
        return 0.0
    num_layers = len(checked[0])
    best = 0.0
    for i in range(m):
        for j in range(i + 1, m):
            acc = 0.0
            for a, b in zip(checked[i], checked[j]):
                acc += float(np.linalg.norm(np.subtract(a, b, dtype=np.float64).reshape(-1)))
            if not math.isfinite(acc):
                raise ValueError(f"non-finite model values in client {i} or client {j}")
            best = max(best, acc / num_layers)
    return best
