"""One call from a run's settings to the parameters of every party: μ for a target ε, then b.

:func:`plan_round` fixes the rounded-norm bound B from (d, C, γ, β), finds the smallest
per-client Skellam variance μ whose ε over the rounds meets the target when only the
guaranteed t − colluders clients' noise is in the sum
(:mod:`fedpriv.privacy.distributed.accounting`), then the bits b for which the sum of all n
clients' vectors fits Z_{2^b} (:func:`.encoding.bits_for`). The
result carries the :class:`.encoding.EncodingParams` every client and the server use and
builds each round's :class:`.secagg.SecAggParams`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from fedpriv.privacy.distributed import accounting, encoding, quantize, secagg
from fedpriv.validation import check_int, check_real

__all__ = ["DistributedPlan", "plan_round"]


@dataclass(frozen=True)
class DistributedPlan:
    """The parameters of a distributed-DP run and the ε they give (against the server when
    ``sampled == population``)."""

    encoding: encoding.EncodingParams
    clients: int
    threshold: int
    noisy_clients: int
    epsilon: float
    delta: float
    rounds: int

    def secagg(
        self, context: bytes, *, neighbours: Optional[int] = None, **options
    ) -> secagg.SecAggParams:
        """The round's :class:`.secagg.SecAggParams` (``context``: the round's label)."""
        return secagg.SecAggParams(
            num_clients=self.clients,
            threshold=self.threshold,
            bits=self.encoding.bits,
            size=self.encoding.padded_dim,
            neighbours=neighbours,
            context=context,
            **options,
        )


def plan_round(
    *,
    dimension: int,
    clip_norm: float,
    scale: float,
    clients: int,
    threshold: int,
    rounds: int,
    target_epsilon: float,
    delta: float,
    colluders: int = 0,
    population: Optional[int] = None,
    rotation_seed: int = 0,
    beta: float = quantize.DEFAULT_BETA,
) -> DistributedPlan:
    """:class:`DistributedPlan` for fixed cohorts of ``clients`` (out of ``population``; None:
    the same, no amplification: the figure against the server) with Shamir ``threshold`` t
    over ``rounds`` rounds, replace-one. For Poisson self-sampling call
    :func:`.accounting.noise_variance_for_epsilon` with ``sampling = "poisson"``."""
    clients = check_int("clients", clients, lo=1)
    threshold = check_int("threshold", threshold, lo=1, hi=clients)
    check_real("target_epsilon", target_epsilon, lo=0.0, lo_open=True)
    params = encoding.EncodingParams(
        dimension, clip_norm, scale, bits=2, rotation_seed=rotation_seed, beta=beta
    )
    noisy = accounting.guaranteed_noisy_clients(threshold, colluders)
    mu, epsilon = accounting.noise_variance_for_epsilon(
        target_epsilon,
        noisy_clients=noisy,
        norm_bound=params.norm_bound,
        dimension=params.padded_dim,
        sampled=clients,
        population=clients if population is None else population,
        sampling="fixed",
        rounds=rounds,
        delta=delta,
    )
    noisy_params = replace(params, noise_variance=mu)
    bits = encoding.bits_for(noisy_params, clients)
    if bits > quantize.MAX_BITS:
        raise ValueError(
            f"scale = {scale!r} is not allowed; expected a scale whose sum fits "
            f"{quantize.MAX_BITS} bits ({bits} needed)"
        )
    final = replace(noisy_params, bits=bits)
    return DistributedPlan(final, clients, threshold, noisy, epsilon, delta, rounds)
