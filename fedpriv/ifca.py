"""Laplace-sanitizing IFCA, the Flower-free pieces (GP Algorithms 1 and 2; SPEC §3.4).

GP Algorithm 1, one round t:

1. the server samples U users and broadcasts all k hypotheses θ_1..θ_k;
2. user c picks ``j̄ = argmin_j F_c(θ_j; Z_c)`` (:func:`choose_hypothesis`), trains θ_j̄
   locally and releases ``θ̂ = θ_local + ρ``, ρ ~ Laplace_ε in R^n with ``ε = n/(ν‖δ‖)``,
   ``δ = θ_local − θ_j̄`` (``fedpriv.privacy.mechanisms.sanitize_laplace``);
3. the server runs k-means on the U released vectors with the current hypotheses as the
   initial centroids (:func:`kmeans_step`) and sets ``θ_j ← (1/|S_j|) Σ_{c∈S_j} θ̂_c``
   (uniform mean, no sample counts: GP-extended §4 rule 2); an empty cluster keeps θ_j.

Also here: flattening a layer list to one vector and back, the initial hypotheses of GP §5.1
(N(0, I) per component), the early-stopping rule on held-out validation users (GP §5.1:
stop after ``patience`` rounds without improvement, keep the best hypotheses), and the
matching of hypotheses to known optima up to permutation (for the synthetic experiment).

Plain numpy + scikit-learn; no Flower. Randomness only through explicit Generators.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedpriv.validation import check_int

NDArrays = list[np.ndarray]

__all__ = [
    "ACTION",
    "HYPOTHESES_KEY",
    "CONFIG_KEY",
    "REPLY_KEY",
    "METRICS_KEY",
    "LEDGER_KEY",
    "pack_hypotheses",
    "unpack_hypotheses",
    "flatten",
    "unflatten",
    "num_params",
    "choose_hypothesis",
    "gaussian_hypotheses",
    "nearest_centroid",
    "cluster_means",
    "KMeansStep",
    "kmeans_step",
    "EarlyStopping",
    "match_hypotheses",
]


# --- wire format (shared by the client and the server strategy) ----------------------------
#
# Server -> client (message types "train.ifca" / "evaluate.ifca"): the RecordDict holds
#   HYPOTHESES_KEY: ONE ArrayRecord with all k hypotheses, keys "<j>/<layer>" (j = hypothesis
#                   index, layer = position in the model's weight list), in that order;
#   CONFIG_KEY:     the keys of the resolved config that differ from the run's run_config,
#                   its digest, "server-round" and the IFCA keys
# (fedpriv.scenarios.app.wire_config; the
#                   ClientApp merges them into the node's run_config).
# Client -> server, training: exactly one record, REPLY_KEY, an ArrayRecord with the full
#   sanitized parameter vector θ̂ as the model's layer list (GP-extended §4: no sample count,
#   no cluster index, no δ, no metrics). A decline is an EMPTY RecordDict (no parameters).
# Client -> server, evaluation (validation users, final report only): METRICS_KEY.
# Client state: the client's own ledger file (fedpriv.privacy.releases), copied to LEDGER_KEY in
# ``context.state``.

ACTION = "ifca"
HYPOTHESES_KEY = "hypotheses"
CONFIG_KEY = "config"
REPLY_KEY = "theta-hat"
METRICS_KEY = "metrics"
LEDGER_KEY = "ifca-ledger"


def pack_hypotheses(hypotheses: Sequence[Sequence[np.ndarray]]) -> dict[str, np.ndarray]:
    """k layer lists -> one ordered mapping ``"<j>/<layer>" -> array`` (one ArrayRecord)."""
    if len(hypotheses) == 0:
        raise ValueError("hypotheses is empty; expected k >= 1 layer lists")
    shapes = [tuple(np.shape(a) for a in h) for h in hypotheses]
    if any(s != shapes[0] for s in shapes):
        raise ValueError("hypotheses must all have the same layer shapes")
    return {f"{j}/{i}": np.asarray(a) for j, h in enumerate(hypotheses) for i, a in enumerate(h)}


def unpack_hypotheses(named: Any) -> list[NDArrays]:
    """Inverse of :func:`pack_hypotheses`: any mapping of ``"<j>/<layer>"`` to arrays, or to
    objects with a ``numpy()`` method (a Flower ``ArrayRecord`` of ``Array``; no Flower import)."""
    groups: dict[int, dict[int, np.ndarray]] = {}
    for key, array in named.items():
        try:
            j, i = (int(part) for part in str(key).split("/"))
        except ValueError as err:
            raise ValueError(f"hypothesis key {key!r}: expected '<j>/<layer>'") from err
        value = array.numpy() if callable(getattr(array, "numpy", None)) else array
        groups.setdefault(j, {})[i] = np.asarray(value)
    if sorted(groups) != list(range(len(groups))):
        raise ValueError(f"hypothesis indices {sorted(groups)} are not 0..k-1")
    out = []
    for j in range(len(groups)):
        layers = groups[j]
        if sorted(layers) != list(range(len(layers))):
            raise ValueError(f"hypothesis {j}: layer indices {sorted(layers)} are not 0..L-1")
        out.append([layers[i] for i in range(len(layers))])
    return out


# --- validation helpers -------------------------------------------------------------------


def _matrix(name: str, value: Any) -> np.ndarray:
    """A finite 2-D float64 array (rows = vectors)."""
    array = np.asarray(value, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(f"{name} has shape {array.shape}; expected a 2-D array (rows = vectors)")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} has non-finite entries; expected finite numbers")
    return array


# --- parameter vectors ----------------------------------------------------------------------


def num_params(arrays: Sequence[np.ndarray]) -> int:
    """n, the total number of parameters of a layer list."""
    return int(sum(np.asarray(a).size for a in arrays))


def flatten(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """All layers concatenated into one float64 vector θ ∈ R^n (layer order, C order)."""
    if len(arrays) == 0:
        return np.zeros(0, dtype=np.float64)
    return np.concatenate([np.asarray(a, dtype=np.float64).reshape(-1) for a in arrays])


def unflatten(vector: np.ndarray, template: Sequence[np.ndarray]) -> NDArrays:
    """Inverse of :func:`flatten`: ``vector`` cut into the shapes and dtypes of ``template``."""
    vector = np.asarray(vector, dtype=np.float64).reshape(-1)
    n = num_params(template)
    if vector.size != n:
        raise ValueError(f"vector has {vector.size} entries; the template has {n} parameters")
    out: NDArrays = []
    offset = 0
    for layer in template:
        layer = np.asarray(layer)
        piece = vector[offset : offset + layer.size].reshape(layer.shape)
        offset += layer.size
        dtype = layer.dtype if np.issubdtype(layer.dtype, np.inexact) else np.float64
        out.append(piece.astype(dtype))
    return out


# --- client side: hypothesis choice (Algorithm 1, line 5) ------------------------------------


def choose_hypothesis(losses: Sequence[float]) -> int:
    """``j̄ = argmin_j F_c(θ_j; Z_c)``; NaN counts as +inf, ties go to the lowest index.

    ``losses[j]`` is the client's empirical loss of hypothesis j on its local training data.
    """
    values = np.asarray(losses, dtype=np.float64).reshape(-1)
    if values.size == 0:
        raise ValueError("losses is empty; expected one loss per hypothesis (k >= 1)")
    values = np.where(np.isnan(values), np.inf, values)
    return int(np.argmin(values))


# --- initial hypotheses -------------------------------------------------------------------------


def gaussian_hypotheses(
    template: Sequence[np.ndarray], k: int, rng: np.random.Generator
) -> list[NDArrays]:
    """k hypotheses with every parameter ~ N(0, 1) (GP §5.1: "sampled from a Gaussian
    distribution centered in 0 and unit variance"), in the template's shapes/dtypes."""
    k = check_int("k", k, lo=1)
    n = num_params(template)
    return [unflatten(rng.standard_normal(n), template) for _ in range(k)]


# --- server side: k-means step (Algorithm 1, lines 9-10) ---------------------------------------


def nearest_centroid(points: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Index of the nearest centroid (squared L2) of each point; ties -> lowest index."""
    points, centroids = _matrix("points", points), _matrix("centroids", centroids)
    d2 = (
        np.sum(points**2, axis=1)[:, None]
        - 2.0 * points @ centroids.T
        + np.sum(centroids**2, axis=1)[None, :]
    )
    return np.argmin(d2, axis=1).astype(np.int64)


def cluster_means(points: np.ndarray, labels: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """``θ_j ← (1/|S_j|) Σ_{c∈S_j} θ̂_c`` (uniform mean); an empty cluster keeps ``previous[j]``.

    ``points`` U×n, ``labels`` U cluster indices in [0, k), ``previous`` k×n. Float64.
    """
    points, previous = _matrix("points", points), _matrix("previous", previous)
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    if labels.size != points.shape[0]:
        raise ValueError(f"labels has {labels.size} entries for {points.shape[0]} points")
    if points.shape[0] and points.shape[1] != previous.shape[1]:
        raise ValueError(
            f"points have {points.shape[1]} coordinates but centroids have {previous.shape[1]}"
        )
    k = previous.shape[0]
    if labels.size and (labels.min() < 0 or labels.max() >= k):
        raise ValueError(f"labels must be in [0, {k}); got {labels.min()}..{labels.max()}")
    out = previous.copy()
    for j in range(k):
        members = points[labels == j]
        if len(members):
            out[j] = members.mean(axis=0)
    return out


@dataclass
class KMeansStep:
    """Result of :func:`kmeans_step`: labels per point, new centroids, cluster sizes."""

    labels: np.ndarray
    centroids: np.ndarray
    sizes: list[int]
    empty: list[int] = field(default_factory=list)
    passes: int = 1


def kmeans_step(points: np.ndarray, centroids: np.ndarray, *, max_passes: int = 300) -> KMeansStep:
    """GP Algorithm 1 lines 9–10: textbook Lloyd k-means on the released vectors, centroids
    initialised at the current hypotheses, uniform means, an empty cluster keeps its θ_j.

    Every pass assigns each point to its nearest centroid among **all k** (ties -> lowest
    index; a cluster empty at the start takes part like any other) and moves every
    non-empty centroid to the uniform mean of its members; it stops when no label changes
    (at most ``max_passes`` passes). The result is a Lloyd fixed point: every point is in
    its nearest cluster and every non-empty centroid is the mean of its members.

    ``points`` U×n (U may be 0 or < k), ``centroids`` k×n. Float64 throughout.
    """
    centroids = _matrix("centroids", centroids)
    if centroids.shape[0] < 1:
        raise ValueError("centroids has no rows; expected k >= 1 hypotheses")
    points = np.asarray(points, dtype=np.float64)
    if points.size == 0:
        return KMeansStep(
            np.zeros(0, np.int64),
            centroids.copy(),
            [0] * len(centroids),
            list(range(len(centroids))),
            0,
        )
    points = _matrix("points", points)
    if points.shape[1] != centroids.shape[1]:
        raise ValueError(
            f"points have {points.shape[1]} coordinates but centroids have {centroids.shape[1]}"
        )
    current = centroids.copy()
    labels = nearest_centroid(points, current)
    limit, passes = check_int("max_passes", max_passes, lo=1), 0
    while passes < limit:
        passes += 1
        current = cluster_means(points, labels, current)
        nearest = nearest_centroid(points, current)
        if np.array_equal(nearest, labels):
            break
        labels = nearest
    sizes = np.bincount(labels, minlength=len(current)).astype(int).tolist()
    empty = [j for j, s in enumerate(sizes) if s == 0]
    return KMeansStep(labels, current, sizes, empty, passes)


# --- early stopping on validation users (GP §5.1) ----------------------------------------------


@dataclass
class EarlyStopping:
    """Stop when the validation loss has not improved for ``patience`` rounds (GP §5.1).

    :meth:`update` is called once per evaluated round (round 0 = the initial hypotheses may
    be included). ``min_delta`` is the smallest decrease that counts as an improvement.
    """

    patience: int
    min_delta: float = 0.0
    best_loss: float = math.inf
    best_round: int = -1
    since_best: int = 0

    def __post_init__(self) -> None:
        self.patience = check_int("patience", self.patience, lo=1)
        if not isinstance(self.min_delta, (int, float)) or not self.min_delta >= 0:
            raise ValueError(f"min_delta = {self.min_delta!r} is not allowed; expected >= 0")

    def update(self, server_round: int, loss: float) -> bool:
        """Record round ``server_round``'s loss; True iff it is a new best (NaN never is)."""
        loss = float(loss)
        if math.isfinite(loss) and loss < self.best_loss - self.min_delta:
            self.best_loss, self.best_round, self.since_best = loss, int(server_round), 0
            return True
        self.since_best += 1
        return False

    @property
    def should_stop(self) -> bool:
        """True once ``patience`` consecutive updates brought no improvement."""
        return self.since_best >= self.patience


# --- evaluation helper: hypotheses vs known optima -----------------------------------------------


def match_hypotheses(hypotheses: np.ndarray, targets: np.ndarray) -> dict[str, Any]:
    """Match each target (e.g. GP's θ*_i) to a distinct hypothesis, minimising the total L2.

    Returns ``{"assignment": [hypothesis index per target], "distances": [L2 per target],
    "nearest": [distance of each target to its nearest hypothesis, any]}``. With fewer
    hypotheses than targets (k = 1), ``assignment``/``distances`` hold ``None`` for the
    unmatched targets; ``nearest`` is always defined.
    """
    hyps, targ = _matrix("hypotheses", hypotheses), _matrix("targets", targets)
    if hyps.shape[1] != targ.shape[1]:
        raise ValueError(f"hypotheses have {hyps.shape[1]} coordinates, targets {targ.shape[1]}")
    dist = np.linalg.norm(targ[:, None, :] - hyps[None, :, :], axis=2)  # targets × hyps
    t, k = dist.shape
    best, best_cost = None, math.inf
    if k >= t:
        for perm in itertools.permutations(range(k), t):
            cost = float(sum(dist[i, perm[i]] for i in range(t)))
            if cost < best_cost:
                best, best_cost = perm, cost
        assignment = [int(j) for j in best]
        distances = [float(dist[i, best[i]]) for i in range(t)]
    else:
        assignment = [None] * t
        distances = [None] * t
    return {
        "assignment": assignment,
        "distances": distances,
        "nearest": dist.min(axis=1).astype(float).tolist(),
    }
