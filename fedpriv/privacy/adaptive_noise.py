"""The noise calibration of adaptive clipping (Andrew et al. 2021, §3.1), numpy-free math.

Gaussian mechanisms of multipliers z_k run on the same sample compose exactly into one
Gaussian of multiplier ``(Σ_k z_k⁻²)^(−1/2)`` (their privacy-loss distributions are Gaussian
with μ_k = 1/z_k and μ² adds). Adaptive clipping releases the update (z_Δ) and the
clipped count (2σ_b), so the update gets ``z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2)`` for a total z.
"""

from __future__ import annotations

import math

from fedpriv.validation import check_real

__all__ = ["compose_multipliers", "update_noise_multiplier"]


def update_noise_multiplier(noise_multiplier: float, count_stddev: float) -> float:
    """``z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2)`` (Andrew et al. 2021, §3.1); z = 0 gives 0.

    :class:`ValueError` (one line) unless ``z < 2σ_b``.
    """
    z = float(check_real("noise_multiplier", noise_multiplier, lo=0.0))
    sigma_b = float(check_real("clipped_count_stddev", count_stddev, lo=0.0))
    if z == 0.0:
        return 0.0
    if z >= 2.0 * sigma_b:
        raise ValueError(
            f"noise-multiplier = {z:g} is not allowed with clipped-count-stddev = {sigma_b:g}; "
            f"expected noise-multiplier < 2*clipped-count-stddev = {2 * sigma_b:g} "
            "(Andrew et al. 2021: z_update = (z^-2 - (2*sigma_b)^-2)^-1/2)"
        )
    return (z**-2 - (2.0 * sigma_b) ** -2) ** -0.5


def compose_multipliers(*multipliers: float) -> float:
    """``(Σ_k z_k⁻²)^(−1/2)``: Gaussian mechanisms of multipliers z_k on one sample are one
    Gaussian of this multiplier (their PLDs compose exactly; 0 if any z_k is 0)."""
    if any(z <= 0.0 for z in multipliers):
        return 0.0
    finite = [z for z in multipliers if math.isfinite(z)]
    return math.inf if not finite else sum(z**-2 for z in finite) ** -0.5
