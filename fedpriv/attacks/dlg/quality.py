"""Quality of a reconstruction: MSE, PSNR, SSIM and matching of reconstructions to examples.

Why not scikit-image: scikit-image 0.26.0 resolves with the pinned
stack (``pip install --dry-run -c constraints.txt scikit-image``), and its
``structural_similarity(gaussian_weights=True, sigma=1.5, use_sample_covariance=True,
data_range=1)`` equals :func:`ssim` here (28×28 noisy image, seed 0: 0.9368580845330766 both;
``tests/test_attacks.py`` compares them when scikit-image is importable). But it refuses
images smaller than its 11×11 Gaussian window ("win_size exceeds image extent"), and the DLG
experiments reconstruct 8×8 digits; this version averages the SSIM map over every pixel
then. PSNR is one line. So the hand-written versions stay; scikit-image is only in the dev
extra (pinned with the test stack), so that CI runs the comparison instead of skipping it.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import math  # noqa: E402

import numpy as np  # noqa: E402
from scipy import ndimage  # noqa: E402

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
