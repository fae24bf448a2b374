"""DP-SGD local training for one client (MP §4, untrusted server; SPEC §4; Abadi et al. 2016).

Every step of a call (``fedpriv.privacy.dpsgd`` for the batching and the accounting):

    w ← opt(w, g̃),   g̃ = (Σ_i m_i·clip(∇ℓ_i(w), C) + N(0, (zC)² I)) / D

with Poisson-sampled batches (q = min(1, B/n), round(1/q) steps per local epoch, padded and
masked to a static width), D = q·n fixed, and ``fedpriv.clients.dp_grads.private_grads`` for the
clipped noised gradient (jax-privacy on JAX, a vectorized per-example tape on TF). With
FedProx the proximal term (μ/2)‖w − w_g‖² is part of every example's loss, so it is clipped
and noised with the data term (it carries no data: no privacy cost).

The compiled trainer (:class:`fedpriv.clients.compiled.CompiledTrainer` with ``dp=DpStepConfig``)
runs all steps in one compiled call; this module hands it the call's Poisson schedule
(``schedule=``: ``idx``, ``mask``, ``steps_per_epoch`` and ``denominator`` D) and the
call's noise seed (``noise_seed=``, int32 of shape (2,); the trainer folds in the step).

Randomness: the schedule and the noise seed come from the client's OS entropy (secret from
the server and every other client), unless the run opts in with ``reproducible-noise =
true``: then both derive from the call's public seed (tests, paper reproductions; the ε is
then valid only while that seed is secret from every party).

ε: computed here from the client's own config (C does not enter; z, B, δ, local epochs) and
its own count of the rounds it trained in (``participations``, from its own release ledger,
:mod:`fedpriv.privacy.releases`, kept by the ClientApp task; never read from the server's message).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from functools import lru_cache  # noqa: E402

import numpy as np  # noqa: E402
from fedpriv.clients.compiled import CompiledTrainer, DpStepConfig  # noqa: E402
from fedpriv.clients.keras_client import BUILD_LOCK, TrainSettings  # noqa: E402

from fedpriv.models import CLASSIFIERS, build_model, make_optimizer  # noqa: E402
from fedpriv.privacy.dpsgd import (  # noqa: E402
    PoissonSchedule,
    call_randomness,
    client_epsilon,
    per_example_loss,
    poisson_schedule,
)
from fedpriv.privacy.modes.dp_sgd import DPSGDParams  # noqa: E402
from fedpriv.spec import TrainSpec  # noqa: E402


@dataclass(frozen=True)
class DpSgdSettings:
    """The client's own DP-SGD mechanism: C, z, δ (its :class:`DPSGDParams`) and whether its
    noise is seeded (``reproducible-noise``, an opt-in of its own spec)."""

    l2_norm_clip: float
    noise_multiplier: float
    delta: float
    reproducible: bool = False

    @classmethod
    def from_params(cls, params: DPSGDParams, *, reproducible: bool) -> DpSgdSettings:
        """The settings of the node's DP-SGD ``params``."""
        return cls(
            l2_norm_clip=float(params.l2_norm_clip),
            noise_multiplier=float(params.noise_multiplier),
            delta=float(params.delta),
            reproducible=bool(reproducible),
        )


DpTrainer = (
    CompiledTrainer  # a compiled trainer with ``dp=DpStepConfig`` (fedpriv.clients.compiled)
)


@lru_cache(maxsize=4)
def _cached_trainer(
    name: str,
    input_shape: tuple,
    num_classes: int,
    optimizer: str,
    learning_rate: float,
    l2_norm_clip: float,
    noise_multiplier: float,
) -> DpTrainer:
    model = build_model(name, input_shape=input_shape, num_classes=num_classes)
    dp = DpStepConfig(l2_norm_clip=l2_norm_clip, noise_multiplier=noise_multiplier)
    return CompiledTrainer(
        model,
        make_optimizer(optimizer, learning_rate),
        per_example_loss(name),
        classifier=name in CLASSIFIERS,
        dp=dp,
    )


def dp_trainer_for(
    train: TrainSpec, params: DPSGDParams, input_shape: tuple, num_classes: int
) -> DpTrainer:
    """The process's DP trainer of ``train``'s model under ``params`` (C, z): built and traced
    once per (model, shape, optimizer, learning rate, C, z), reused every round.

    Built under the process's build lock: a worker's virtual clients ask for it from their
    cohort's threads at once (:mod:`fedpriv.clients.cohort`), and ``lru_cache`` does not hold
    its callers back while one builds, so each thread built and traced a trainer of its own
    (measured: 4 clients, digits CNN, 4 traces in round 1 instead of 1, which also split the
    cohort's one compiled call into four; round 1 13-18 s, then 0.1 s)."""
    with BUILD_LOCK:
        return _cached_trainer(
            str(train.model),
            tuple(input_shape),
            int(num_classes),
            str(train.optimizer),
            float(train.learning_rate),
            float(params.l2_norm_clip),
            float(params.noise_multiplier),
        )


def dp_schedule(n: int, settings: TrainSettings, rng: np.random.Generator) -> PoissonSchedule:
    """The call's Poisson batches (``fedpriv.privacy.dpsgd.poisson_schedule``)."""
    return poisson_schedule(
        num_examples=n, batch_size=settings.batch_size, epochs=settings.epochs, rng=rng
    )


def train_dpsgd(
    trainer: DpTrainer,
    weights: Sequence[np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    settings: TrainSettings,
    dp: DpSgdSettings,
    *,
    participations: int = 1,
    epsilon: float | None = None,
) -> tuple[list[np.ndarray], dict[str, float]]:
    """DP-SGD training from ``weights``; returns new weights and metrics with ε.

    ``participations`` counts the rounds this client has trained in, this one included
    (the client's own count); ε covers ``settings.epochs * participations`` Poisson epochs.
    ``epsilon``: that ε when the caller already has it (the node's ledger composes its
    stored releases' events: :meth:`fedpriv.privacy.releases.Ledger.lifetime_epsilon`), so a
    release is accounted once; None: :func:`fedpriv.privacy.dpsgd.client_epsilon` here.
    """
    if participations < 1:
        raise ValueError(f"participations = {participations!r}: expected an integer >= 1")
    n = len(x)
    rng, noise_seed = call_randomness(settings.seed, reproducible=dp.reproducible)
    schedule = dp_schedule(n, settings, rng)
    new_weights, train_metrics = trainer.train(
        weights,
        x,
        y,
        epochs=settings.epochs,
        batch_size=settings.batch_size,
        seed=settings.seed,
        proximal_mu=settings.proximal_mu,
        schedule=schedule,
        noise_seed=noise_seed,
    )
    if epsilon is None:
        epsilon = client_epsilon(
            num_examples=n,
            batch_size=settings.batch_size,
            local_epochs=settings.epochs,
            participations=participations,
            noise_multiplier=dp.noise_multiplier,
            delta=dp.delta,
        ).epsilon
    metrics = {
        "train-loss": train_metrics["train-loss"],
        "dp-sgd-epsilon": float(epsilon),
        "dp-sgd-epochs": float(settings.epochs * participations),
        "dp-sgd-steps": float(len(schedule.idx)),
        "dp-sgd-sampling-rate": float(schedule.sampling_rate),
        "dp-sgd-batch-size": float(schedule.denominator),
    }
    return new_weights, metrics
