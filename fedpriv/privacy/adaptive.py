"""Adaptive clipping with a valid ε: Andrew et al. (2021), "Differentially Private Learning
with Adaptive Clipping" (NeurIPS), Algorithm 1 and §3.1. Flower-free, numpy only.

One round with clipping norm ``C_r`` and m sampled clients:

1. every update is clipped to ``C_r`` (FlatClip, as global DP) and ``b_i = 1[‖Δ_i‖ <= C_r]``;
2. the mean of the clipped updates gets ``N(0, σ_Δ²)``, ``σ_Δ = z_Δ·C_r/m`` (the norm the
   round clipped to, not the next one);
3. the noisy unclipped fraction ``b̃ = (Σ_i (b_i − ½) + m/2 + N(0, σ_b²))/m`` (centred:
   one client moves the sum by at most ½ under add/remove, 1 under replace-one);
4. the geometric step ``C_{r+1} = C_r·exp(−η_C·(b̃ − γ))`` towards the target quantile γ.

Privacy (§3.1). The round releases two Gaussian mechanisms of the same sample: the update
(multiplier z_Δ on the sum, sensitivity C) and the count (std σ_b, sensitivity ½, i.e.
multiplier 2σ_b). Gaussians compose exactly into one Gaussian of multiplier
``z = (z_Δ⁻² + (2σ_b)⁻²)^(−1/2)``, so the update noise is calibrated to the requested z:
``z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2)``, defined only for ``z < 2σ_b`` (refused otherwise, one
line). Both adjacencies scale both sensitivities alike (replace-one: 2C and 1), so the round's
``DpEvent`` is global DP's with multiplier z
(:meth:`AdaptiveClippingGaussian.round_noise_multiplier`),
sampling amplification and budgets included.

With m = n reports the count is Flower's ``Σ b_i + N(0, σ_b²)`` divided by m. Flower 1.42's
``DifferentialPrivacyServerSideAdaptiveClipping`` counts the *clipped* updates in that
fraction (``norm_bit = scaling_factor < 1``) and steps with the same sign, so its C moves away
from the target (all clipped: C shrinks further); ``count = "clipped"`` reproduces it for the
parity test only. Flower also noises with the *updated* C (σ = z_Δ·C_{r+1}/m), which is not
the norm the round clipped to; here σ uses C_r.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional

from fedpriv.privacy.adaptive_noise import compose_multipliers, update_noise_multiplier
from fedpriv.privacy.dp import FixedClippingGaussian
from fedpriv.privacy.modes import adaptive_clip
from fedpriv.validation import Rng, check_choice, check_real

__all__ = ["AdaptiveClippingGaussian", "COUNTS", "compose_multipliers", "update_noise_multiplier"]

COUNTS = ("unclipped", "clipped")  # what b_i counts: Andrew et al. | Flower 1.42 (parity only)


class AdaptiveClippingGaussian(FixedClippingGaussian):
    """Server-side adaptive clipping + Gaussian noise (module docstring).

    ``noise_multiplier`` is the requested z (what ε is computed from); the update noise uses
    ``update_noise_multiplier`` z_Δ (:attr:`noise_multiplier` after construction, as the
    parent's σ = z_Δ·C/m); ``clipping_norm`` is C_0 and changes after each :meth:`adapt`.
    ``count_stddev`` σ_b (None: m/20, Andrew et al.'s recommendation and Flower's default),
    ``target_quantile`` γ ∈ [0, 1], ``learning_rate`` η_C > 0.
    """

    mode = adaptive_clip.MODE.name
    guarantee = "(epsilon, delta)-DP, client level (update and clipped-count releases composed)"

    def __init__(
        self,
        *,
        noise_multiplier: float,
        clipping_norm: float,
        num_sampled_clients: int,
        target_quantile: float = 0.5,
        learning_rate: float = 0.2,
        count_stddev: Optional[float] = None,
        count: str = "unclipped",
    ) -> None:
        m = int(num_sampled_clients)
        sigma_b = m / 20.0 if count_stddev is None else float(count_stddev)
        self.total_noise_multiplier = float(check_real("noise_multiplier", noise_multiplier, lo=0))
        super().__init__(
            noise_multiplier=update_noise_multiplier(noise_multiplier, sigma_b),
            clipping_norm=clipping_norm,
            num_sampled_clients=m,
        )
        self.count_stddev = sigma_b
        self.target_quantile = float(check_real("target_quantile", target_quantile, lo=0, hi=1))
        self.learning_rate = float(
            check_real("clip_learning_rate", learning_rate, lo=0, lo_open=True)
        )
        self.count = check_choice("count", count, COUNTS)
        self.initial_clipping_norm = self.clipping_norm

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(noise_multiplier={self.total_noise_multiplier}, "
            f"update_noise_multiplier={self.noise_multiplier:.6g}, clipping_norm="
            f"{self.clipping_norm:.6g}, count_stddev={self.count_stddev}, target_quantile="
            f"{self.target_quantile}, learning_rate={self.learning_rate}, "
            f"num_sampled_clients={self.num_sampled_clients})"
        )

    def count_multiplier(self) -> float:
        """``2σ_b``: the count release's multiplier (sensitivity ½ add/remove)."""
        return 2.0 * self.count_stddev if self.count_stddev > 0 else 0.0

    def round_noise_multiplier(
        self, stdv: float, num_reports: int, weights: Optional[Sequence[float]] = None
    ) -> float:
        """The round's composed multiplier ``(z_upd⁻² + (2σ_b)⁻²)^(−1/2)``, z_upd the update's
        (the parent's ``σ/(C·w_max)``; z_Δ with m uniform reports): z when n = m."""
        z_update = super().round_noise_multiplier(stdv, num_reports, weights)
        if z_update == self.noise_multiplier and num_reports == self.num_sampled_clients:
            return self.total_noise_multiplier  # the exact z, not its round trip
        return compose_multipliers(z_update, self.count_multiplier())

    def client_noise_multipliers(self, stdv: float, weights: Sequence[float]) -> list[float]:
        """Each client's update multiplier composed with the count's."""
        per = super().client_noise_multipliers(stdv, weights)
        return [compose_multipliers(z, self.count_multiplier()) for z in per]

    def noisy_fraction(self, num_reports: int, num_counted: int, rng: Optional[Rng]) -> float:
        """``b̃ = (Σ (b_i − ½) + m/2 + N(0, σ_b²))/m`` (``num_counted`` = Σ b_i)."""
        centred = num_counted - num_reports / 2.0 + self.num_sampled_clients / 2.0
        if self.count_stddev > 0:
            centred += float(rng.normal(0.0, self.count_stddev))  # type: ignore[union-attr]
        return centred / self.num_sampled_clients

    def adapt(self, *, num_reports: int, num_clipped: int, rng: Optional[Rng]) -> dict[str, Any]:
        """After a released round: ``C ← C·exp(−η_C·(b̃ − γ))``; returns the round's fields
        (``dp-clipping-norm`` used, ``dp-next-clipping-norm``, ``dp-noisy-fraction``)."""
        counted = num_reports - num_clipped if self.count == "unclipped" else num_clipped
        fraction = self.noisy_fraction(num_reports, counted, rng)
        used = self.clipping_norm
        self.clipping_norm = used * math.exp(
            -self.learning_rate * (fraction - self.target_quantile)
        )
        return {
            "dp-clipping-norm": used,
            "dp-next-clipping-norm": self.clipping_norm,
            "dp-noisy-fraction": fraction,
            "dp-update-noise-multiplier": self.noise_multiplier,
            "dp-clipped-count-stddev": self.count_stddev,
        }
