"""Server-side adaptive clipping with a valid ε, for both Flower APIs (Andrew et al. 2021).

The fixed-clipping wrappers (:class:`fedpriv.strategies.dp_wrappers.ServerSideFixedClippingDP`,
:class:`fedpriv.strategies.legacy_dp.LegacyServerSideFixedClippingDP`) with
:class:`fedpriv.privacy.adaptive.AdaptiveClippingGaussian` swapped in: a round clips to C_r,
noises the mean with ``σ = z_Δ·C_r/m`` and is charged the composed multiplier z by the same
accountant (budgets, Poisson sampling and failure rules unchanged); after a released round the
clipping norm takes the geometric step from the noisy unclipped count,
``C_{r+1} = C_r·exp(−η_C·(b̃ − γ))``. ``round_metrics()`` adds ``dp-clipping-norm`` (C_r),
``dp-next-clipping-norm``, ``dp-noisy-fraction`` (b̃), ``dp-update-noise-multiplier`` (z_Δ)
and ``dp-clipped-count-stddev`` (σ_b).

Usage::

    strategy = ServerSideAdaptiveClippingDP(FedAvg(), noise_multiplier=0.5,
                                            clipping_norm=0.1, num_sampled_clients=10,
                                            rng=np.random.default_rng())
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from fedpriv.strategies.dp_wrappers import ServerSideFixedClippingDP
from fedpriv.strategies.legacy_dp import FitFailures, FitResults, LegacyServerSideFixedClippingDP
from flwr.common import ArrayRecord, Message, MetricRecord, Parameters, Scalar

from fedpriv.privacy.adaptive import AdaptiveClippingGaussian

__all__ = ["AdaptiveClipOptions", "LegacyServerSideAdaptiveClippingDP",
           "ServerSideAdaptiveClippingDP"]  # fmt: skip


class AdaptiveClipOptions:
    """The explicit signature of both adaptive wrappers (put first in the bases).

    ``noise_multiplier`` z (of the update and count releases together), ``clipping_norm``
    C_0, ``target_quantile`` γ (0.5), ``clip_learning_rate`` η_C (0.2),
    ``clipped_count_stddev`` σ_b (None: m/20); ``count = "clipped"`` reproduces Flower 1.42's
    count for parity tests only (see :mod:`fedpriv.privacy.adaptive`). The rest as
    :class:`fedpriv.strategies.dp_core.DPWrapperCore`.
    """

    mechanism_class = AdaptiveClippingGaussian
    mechanism: AdaptiveClippingGaussian
    last_round: dict[str, Any]

    def __init__(
        self,
        strategy: Any,
        *,
        noise_multiplier: float,
        clipping_norm: float,
        num_sampled_clients: int,
        target_quantile: float = 0.5,
        clip_learning_rate: float = 0.2,
        clipped_count_stddev: Optional[float] = None,
        count: str = "unclipped",
        **options: Any,
    ) -> None:
        super().__init__(  # type: ignore[call-arg]
            strategy, noise_multiplier=noise_multiplier, clipping_norm=clipping_norm,
            num_sampled_clients=num_sampled_clients, target_quantile=target_quantile,
            learning_rate=clip_learning_rate, count_stddev=clipped_count_stddev, count=count,
            **options,
        )  # fmt: skip

    @property
    def clipping_norm(self) -> float:
        """The clipping norm the next round clips to."""
        return self.mechanism.clipping_norm

    def adapt(self) -> None:
        """After a released round: the geometric step, its fields added to the round's
        record (nothing released, nothing counted, C unchanged)."""
        record = self.last_round
        if not record.get("dp-noised"):
            return
        step = self.mechanism.adapt(
            num_reports=int(record.get("dp-num-reports", 0)),
            num_clipped=int(record.get("dp-num-clipped", 0)),
            rng=self.rng,  # type: ignore[attr-defined]
        )
        record.update(step)


class ServerSideAdaptiveClippingDP(AdaptiveClipOptions, ServerSideFixedClippingDP):
    """Adaptive clipping around a Message-API strategy (module docstring)."""

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """The fixed-clipping round at C_r, then the clipping norm's step."""
        out = super().aggregate_train(server_round, replies)
        self.adapt()
        return out


class LegacyServerSideAdaptiveClippingDP(AdaptiveClipOptions, LegacyServerSideFixedClippingDP):
    """Adaptive clipping around a legacy ``flwr.server.strategy.Strategy``."""

    def aggregate_fit(
        self, server_round: int, results: FitResults, failures: FitFailures
    ) -> tuple[Optional[Parameters], dict[str, Scalar]]:
        """The fixed-clipping round at C_r, then the clipping norm's step."""
        out = super().aggregate_fit(server_round, results, failures)
        self.adapt()
        return out
