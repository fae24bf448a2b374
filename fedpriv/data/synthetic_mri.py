"""synthetic-mri: a procedural, seeded 128×128×1, 4-class stand-in for the Alzheimer MRI data.

A pipeline test, not a medical result: it has the shapes, class order and (roughly) the class
imbalance of the real data (MP §7.1), so the MP pipeline runs end to end with no download.

Each image is an axial "slice": a bright skull ring, a dark CSF gap, a textured brain ellipse and
two dark "ventricles" either side of the midline, plus Gaussian pixel noise. The class sets a
severity level s (0 Non_Demented, 1 Very_Mild, 2 Mild, 3 Moderate); each image draws a continuous
severity s + N(0, 0.3²) that grows the ventricles, darkens them and widens the CSF gap (atrophy).
Adjacent classes overlap, so a small CNN learns it (well above chance) but not perfectly.

Class counts: ``num_images`` (default 400) apportioned like the Alzheimer training totals
(724, 49, 2566, 1781) by largest remainder, then every class raised to at least 8 images (taken
from the largest class): 400 → (57, 8, 196, 139).

Splits (same scheme as ``alzheimer``): the server holds a stratified 20% (half validation, half
final test); the rest is the training pool. Partitions ``homogeneous`` / ``non-iid`` / ``cia`` use
the MP tables scaled to the pool: each column is apportioned over the clients proportionally to the
table's column (largest remainder, :func:`fedpriv.data.partition.largest_remainder_scale`), since
the pool is far smaller than the 5120 images the tables describe. ``iid`` is a stratified equal
split, ``dirichlet`` a label-Dirichlet(α) split. Each client then splits stratified 80/20.
"""

from __future__ import annotations

import numpy as np

from fedpriv import seeds
from fedpriv.data.alzheimer import four_class_mri
from fedpriv.data.partition import (
    TRAIN_TOTALS,
    apportion,
    check_partition,
    check_table_clients,
    server_split,
)
from fedpriv.data.types import DataError, FederatedData

PARTITIONS = ("homogeneous", "non-iid", "cia", "iid", "dirichlet")
SIZE = 128
MIN_PER_CLASS = 8
# class id -> severity (0 Mild, 1 Moderate, 2 Non, 3 Very mild demented)
SEVERITY = np.array([2.0, 3.0, 0.0, 1.0], dtype=np.float32)
SEVERITY_JITTER = 0.3
PIXEL_NOISE = 0.08
_CHUNK = 100


def synthetic_class_counts(num_images: int) -> np.ndarray:
    """Images per class: largest-remainder share of ``TRAIN_TOTALS``, each class >= 8."""
    if num_images < 4 * MIN_PER_CLASS:
        raise DataError("num_images", num_images, f"an integer >= {4 * MIN_PER_CLASS}")
    counts = apportion(num_images, np.array(TRAIN_TOTALS))
    for c in np.flatnonzero(counts < MIN_PER_CLASS):
        deficit = MIN_PER_CLASS - counts[c]
        counts[c] = MIN_PER_CLASS
        counts[int(np.argmax(counts))] -= deficit
    return counts


def _ellipse(u: np.ndarray, v: np.ndarray, a, b, edge: float) -> np.ndarray:
    """Soft indicator of the ellipse (u/a)² + (v/b)² <= 1, edge width ~``edge``."""
    r = np.sqrt((u / a) ** 2 + (v / b) ** 2)
    return 1.0 / (1.0 + np.exp(np.clip((r - 1.0) / edge, -30.0, 30.0)))


def _render(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Render images for labels ``y`` (vectorized over the batch); float32 (n, 128, 128)."""
    n = len(y)
    col = lambda a: a.astype(np.float32)[:, None, None]  # noqa: E731
    grid = np.linspace(-1.0, 1.0, SIZE, dtype=np.float32)
    gy, gx = grid[None, :, None], grid[None, None, :]
    sev = col(SEVERITY[y] + SEVERITY_JITTER * rng.standard_normal(n))
    cx, cy = col(rng.uniform(-0.06, 0.06, n)), col(rng.uniform(-0.06, 0.06, n))
    ang = col(rng.uniform(-0.2, 0.2, n))
    u = (gx - cx) * np.cos(ang) + (gy - cy) * np.sin(ang)
    v = -(gx - cx) * np.sin(ang) + (gy - cy) * np.cos(ang)
    sa, sb = col(rng.uniform(0.68, 0.78, n)), col(rng.uniform(0.82, 0.92, n))
    skull = _ellipse(u, v, sa, sb, 0.01) - _ellipse(u, v, sa - 0.05, sb - 0.05, 0.01)
    shrink = 1.0 - 0.02 * np.clip(sev, 0.0, None) - 0.03
    brain = _ellipse(u, v, (sa - 0.05) * shrink, (sb - 0.05) * shrink, 0.015)
    # low-frequency tissue texture: a few random plane waves per image
    texture = np.zeros((n, SIZE, SIZE), dtype=np.float32)
    for _ in range(4):
        fx, fy = col(rng.uniform(-6, 6, n)), col(rng.uniform(-6, 6, n))
        phase = col(rng.uniform(0, 2 * np.pi, n))
        texture += 0.035 * np.sin(fx * u + fy * v + phase)
    vw = 0.06 + 0.03 * sev  # ventricle half-width
    vh = 0.15 + 0.05 * sev  # ventricle half-height
    dx = 0.09 + 0.01 * sev + col(rng.uniform(-0.01, 0.01, n))
    vents = np.maximum(
        _ellipse(u - dx, v + 0.05, vw, vh, 0.05), _ellipse(u + dx, v + 0.05, vw, vh, 0.05)
    )
    tissue = col(rng.uniform(0.55, 0.7, n)) + texture
    vent_level = 0.35 - 0.05 * sev
    img = 0.9 * skull + brain * (tissue * (1.0 - vents) + vent_level * vents)
    img = img * col(rng.uniform(0.85, 1.15, n))
    img += PIXEL_NOISE * rng.standard_normal((n, SIZE, SIZE), dtype=np.float32)
    return np.clip(img, 0.0, 1.0).astype(np.float32)


def make_synthetic_mri(*, num_images: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``num_images`` seeded images, float32 (n, 128, 128, 1) in [0, 1], and int64 labels.

    Labels are shuffled; class counts are :func:`synthetic_class_counts`.
    """
    rng = seeds.stream(seed, "synthetic-mri")
    counts = synthetic_class_counts(num_images)
    y = rng.permutation(np.repeat(np.arange(4, dtype=np.int64), counts))
    x = np.empty((num_images, SIZE, SIZE, 1), dtype=np.float32)
    for start in range(0, num_images, _CHUNK):
        x[start : start + _CHUNK, ..., 0] = _render(y[start : start + _CHUNK], rng)
    return x, y


def load_synthetic_mri_federated(
    *,
    partition: str,
    num_clients: int,
    seed: int,
    dirichlet_alpha: float = 0.5,
    num_images: int = 400,
) -> FederatedData:
    """synthetic-mri split over ``num_clients`` clients (see the module docstring)."""
    check_partition("synthetic-mri", partition, PARTITIONS)
    check_table_clients(partition, num_clients)
    x, y = make_synthetic_mri(num_images=num_images, seed=seed)
    x_pool, y_pool, x_val, y_val, x_test, y_test = server_split(x, y, seed)
    return four_class_mri(
        (x_pool, y_pool), (x_val, y_val, x_test, y_test), dataset="synthetic-mri",
        partition=partition, num_clients=num_clients, seed=seed,
        dirichlet_alpha=dirichlet_alpha,
        source=f"procedural synthetic-mri ({num_images} images, seed {seed})",
        scaling=(
            "MP table columns apportioned to the training pool by largest remainder"
            if partition in ("homogeneous", "non-iid", "cia")
            else ""
        ),
    )  # fmt: skip
