"""Keras training and evaluation for one client, with per-process caches.

Each Flower worker process (a Ray actor in simulation, a SuperNode process in deployment)
builds a Keras model once per (model, shape, optimizer) key and one compiled trainer for it
(:mod:`fedpriv.clients.compiled`, Keras 3 on the TensorFlow or JAX backend): every call runs all
epochs in one compiled function from the given weights and a fresh optimizer state.
Partitions are cached per process too.

FedProx (Li et al. 2020): Flower only sends mu; the proximal term
``(mu / 2) * ||w - w_g||^2`` is added to the local loss here.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Several clients share one GPU in `local-simulation-gpu`: never grab all its memory.
os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the same for JAX

import threading  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from functools import lru_cache  # noqa: E402
from pathlib import Path  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
from fedpriv.clients.backend_loop import to_numpy  # noqa: E402
from fedpriv.clients.compiled import CompiledTrainer, build_policy_model, set_op_determinism  # noqa: E402
from fedpriv.clients.partitions import federated_data  # noqa: E402,F401

from fedpriv.data import FederatedData  # noqa: E402
from fedpriv.models import build_model  # noqa: E402
from fedpriv.spec import TrainSpec  # noqa: E402

set_op_determinism(True)
# the clients of a cohort (fedpriv.clients.cohort) run in threads: the process's model and trainer
# are built once, by the first of them, never side by side
BUILD_LOCK = threading.RLock()


@dataclass(frozen=True)
class TrainSettings:
    """What one local training call needs (:class:`fedpriv.spec.TrainSpec` plus the call's seed)."""

    epochs: int
    batch_size: int
    learning_rate: float
    optimizer: str
    proximal_mu: float = 0.0
    seed: int = 0
    jit_compile: bool = False

    @classmethod
    def from_spec(cls, train: TrainSpec, *, seed: int) -> TrainSettings:
        """The settings of one call of ``train`` with the call's ``seed`` (FedProx's μ only
        under ``strategy = fedprox``, :attr:`fedpriv.spec.TrainSpec.fedprox_mu`)."""
        return cls(
            epochs=int(train.local_epochs),
            batch_size=int(train.batch_size),
            learning_rate=float(train.learning_rate),
            optimizer=str(train.optimizer),
            proximal_mu=train.fedprox_mu,
            seed=int(seed),
            jit_compile=bool(train.jit_compile),
        )


@lru_cache(maxsize=8)
def _cached_model(
    name: str,
    input_shape: tuple,
    num_classes: int,
    optimizer: str,
    learning_rate: float,
    mixed_precision: bool = False,
) -> keras.Model:
    return build_policy_model(
        lambda: build_model(
            name,
            input_shape=input_shape,
            num_classes=num_classes,
            optimizer=optimizer,
            learning_rate=learning_rate,
        ),
        mixed_precision=mixed_precision,
    )


def model_for(train: TrainSpec, data: FederatedData) -> keras.Model:
    """The process's model for ``train`` on ``data`` (built once per model, shape, optimizer,
    learning rate and precision; weights are passed per call).

    ``op_determinism`` (default on) is process wide; ``mixed_precision`` (default off) picks a
    model built under ``mixed_float16``.
    """
    with BUILD_LOCK:
        set_op_determinism(bool(train.op_determinism))
        return _cached_model(
            str(train.model),
            tuple(data.input_shape),
            int(data.num_classes),
            str(train.optimizer),
            float(train.learning_rate),
            bool(train.mixed_precision),
        )


def initial_weights(train: TrainSpec, data: FederatedData) -> list[np.ndarray]:
    """Initial global weights: a fresh ``train.model`` seeded with the run seed."""
    model = build_model(
        str(train.model),
        input_shape=tuple(data.input_shape),
        num_classes=data.num_classes,
        seed=int(train.seed),
    )
    return [np.array(to_numpy(v.value), copy=True) for v in model.weights]


def _per_example_loss(model: keras.Model):
    """The model's loss with ``reduction=NONE``: MSE for ``linear``, else sparse CE."""
    if is_regression(model):
        return keras.losses.MeanSquaredError(reduction=None)
    return keras.losses.SparseCategoricalCrossentropy(reduction=None)


def is_regression(model: keras.Model) -> bool:
    """True for the linear (MSE) model, False for the softmax classifiers."""
    return str(getattr(model, "loss", "")) in ("mse", "mean_squared_error")


_TRAINERS: dict[int, CompiledTrainer] = {}


def trainer_for(model: keras.Model, *, jit_compile: bool | None = None) -> CompiledTrainer:
    """The process's compiled trainer of ``model`` (built once; a fresh optimizer of the
    model's compiled kind and learning rate, restored to its initial state every call).

    ``jit_compile=None`` (evaluation) takes the existing trainer whatever its XLA setting.
    """
    with BUILD_LOCK:
        return _trainer_for(model, jit_compile)


def _trainer_for(model: keras.Model, jit_compile: bool | None) -> CompiledTrainer:
    trainer = _TRAINERS.get(id(model))
    if trainer is None or (jit_compile is not None and trainer.jit_compile != jit_compile):
        optimizer = type(model.optimizer).from_config(model.optimizer.get_config())
        trainer = CompiledTrainer(
            model,
            optimizer,
            _per_example_loss(model),
            classifier=not is_regression(model),
            jit_compile=bool(jit_compile),
        )
        _TRAINERS[id(model)] = trainer
    return trainer


def train_local(
    model: keras.Model,
    weights: Sequence[np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    settings: TrainSettings,
) -> tuple[list[np.ndarray], dict[str, float]]:
    """Train ``model`` from ``weights`` on (x, y); return new weights and train metrics.

    All epochs run in one compiled function (:mod:`fedpriv.clients.compiled`); each step minimises
    ``mean loss + (mu/2) * ||w - w_g||^2`` (mu = ``proximal_mu``, 0 unless FedProx).
    """
    trainer = trainer_for(model, jit_compile=settings.jit_compile)
    return trainer.train(
        weights,
        x,
        y,
        epochs=settings.epochs,
        batch_size=settings.batch_size,
        seed=settings.seed,
        proximal_mu=settings.proximal_mu,
    )


def evaluate_local(
    model: keras.Model, weights: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray
) -> dict[str, float]:
    """Loss (and accuracy for classifiers) of ``weights`` on (x, y)."""
    return trainer_for(model).evaluate(weights, x, y)


def predict_proba(model: keras.Model, weights: Sequence[np.ndarray], x: np.ndarray) -> np.ndarray:
    """Class probabilities of ``weights`` on x (for server-side metrics)."""
    return trainer_for(model).predict(weights, x)


def save_final_model(model: keras.Model, weights: list[np.ndarray], path: str | Path) -> None:
    """``model`` with ``weights`` saved to ``path`` (``.keras``), without optimizer state.

    The process's model may have trained: server pretraining, or a JAX trainer, which uses
    the model's own optimizer. Adam's two moments would then triple the file (78 MB, not
    26 MB, for the MP CNN), and they belong to no federated model. In that case a copy with
    the same layers and compile config and an unbuilt optimizer is saved instead.
    """
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or not getattr(optimizer, "built", False):
        model.set_weights(weights)
        model.save(path)
        return
    copy = keras.models.clone_model(model)
    config = model.get_compile_config()
    if config:  # compile, not compile_from_config: that one builds the optimizer again
        copy.compile(**keras.saving.deserialize_keras_object(config))
    copy.set_weights(weights)
    copy.save(path)
