"""Keras training and evaluation for one client, with per-process caches.

Each Flower worker process (a Ray actor in simulation, a SuperNode process in deployment)
builds a Keras model once per (model, shape, optimizer) key and reuses it: every call only
sets weights, resets the optimizer state and trains. Partitions are cached per process too.

FedProx (Li et al. 2020): Flower only sends mu; the proximal term
``(mu / 2) * ||w - w_g||^2`` is added to the local loss here.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Several clients share one GPU in `local-simulation-gpu`: never grab all its memory.
os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")

from collections.abc import Mapping, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from functools import lru_cache  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from fedpriv.data import FederatedData, load_federated  # noqa: E402
from fedpriv.models import build_model  # noqa: E402

tf.config.experimental.enable_op_determinism()


@dataclass(frozen=True)
class TrainSettings:
    """What local training needs from the resolved run config."""

    epochs: int
    batch_size: int
    learning_rate: float
    optimizer: str
    proximal_mu: float = 0.0
    seed: int = 0

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], *, seed: int) -> TrainSettings:
        mu = float(cfg["proximal-mu"]) if cfg["strategy"] == "fedprox" else 0.0
        return cls(
            epochs=int(cfg["local-epochs"]),
            batch_size=int(cfg["batch-size"]),
            learning_rate=float(cfg["learning-rate"]),
            optimizer=str(cfg["optimizer"]),
            proximal_mu=mu,
            seed=seed,
        )


def data_key(cfg: Mapping[str, Any]) -> tuple:
    """The config values that determine the federated data (the cache key)."""
    return (
        cfg["dataset"],
        cfg["partition"],
        int(cfg["num-clients"]),
        int(cfg["seed"]),
        cfg["data-path"],
        cfg["data-format"],
        float(cfg["dirichlet-alpha"]),
    )


@lru_cache(maxsize=4)
def _cached_data(key: tuple) -> FederatedData:
    dataset, partition, num_clients, seed, path, fmt, alpha = key
    return load_federated(
        dataset,
        partition=partition,
        num_clients=num_clients,
        seed=seed,
        data_path=path,
        data_format=fmt,
        dirichlet_alpha=alpha,
    )


def federated_data(cfg: Mapping[str, Any]) -> FederatedData:
    """Load (once per process) the federated data the config describes."""
    return _cached_data(data_key(cfg))


@lru_cache(maxsize=8)
def _cached_model(
    name: str, input_shape: tuple, num_classes: int, optimizer: str, learning_rate: float
) -> tf.keras.Model:
    return build_model(
        name,
        input_shape=input_shape,
        num_classes=num_classes,
        optimizer=optimizer,
        learning_rate=learning_rate,
    )


def model_for(cfg: Mapping[str, Any], data: FederatedData) -> tf.keras.Model:
    """The process's model for this config (built once; weights are set per call)."""
    return _cached_model(
        cfg["model"],
        tuple(data.input_shape),
        data.num_classes,
        cfg["optimizer"],
        float(cfg["learning-rate"]),
    )


def initial_weights(cfg: Mapping[str, Any], data: FederatedData) -> list[np.ndarray]:
    """Initial global weights: a fresh model seeded with the run seed."""
    model = build_model(
        cfg["model"],
        input_shape=tuple(data.input_shape),
        num_classes=data.num_classes,
        seed=int(cfg["seed"]),
    )
    return [w.copy() for w in model.get_weights()]


def _loss_fn(model: tf.keras.Model):
    return model.loss if callable(model.loss) else tf.keras.losses.get(model.loss)


def _prepare(model: tf.keras.Model, settings: TrainSettings) -> None:
    """Fresh optimizer state each call (a client keeps no optimizer state between rounds).

    The optimizer's variables (step count, moments) are zeroed in place instead of
    building a new optimizer, so the traced train function is reused across calls.
    """
    for var in model.optimizer.variables:
        var.assign(tf.zeros_like(var))
    tf.keras.utils.set_random_seed(settings.seed)  # also resets traced random ops (Dropout)


def train_local(
    model: tf.keras.Model,
    weights: Sequence[np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    settings: TrainSettings,
) -> tuple[list[np.ndarray], dict[str, float]]:
    """Train ``model`` from ``weights`` on (x, y); return new weights and train metrics.

    With ``proximal_mu > 0`` each step minimises ``loss + (mu/2) * ||w - w_g||^2``.
    """
    model.set_weights(list(weights))
    _prepare(model, settings)
    if settings.proximal_mu > 0:
        return _train_proximal(model, weights, x, y, settings)
    history = model.fit(
        x, y, epochs=settings.epochs, batch_size=settings.batch_size, verbose=0, shuffle=True
    )
    metrics = {"train-loss": float(history.history["loss"][-1])}
    if "accuracy" in history.history:
        metrics["train-accuracy"] = float(history.history["accuracy"][-1])
    return model.get_weights(), metrics


def _train_proximal(
    model: tf.keras.Model,
    global_weights: Sequence[np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    settings: TrainSettings,
) -> tuple[list[np.ndarray], dict[str, float]]:
    """Minibatch training with the FedProx proximal term (a custom ``tf.function`` step)."""
    step, anchors, mu = _proximal_step(model)
    trainable = {id(v) for v in model.trainable_variables}
    trainable_weights = [w for v, w in zip(model.weights, global_weights) if id(v) in trainable]
    for anchor, w in zip(anchors, trainable_weights):
        anchor.assign(w)
    mu.assign(settings.proximal_mu)
    rng = np.random.default_rng(settings.seed)
    last = 0.0
    for _ in range(settings.epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x), settings.batch_size):
            idx = order[start : start + settings.batch_size]
            last = float(step(x[idx], y[idx]))
    return model.get_weights(), {"train-loss": last}


_PROX_STEPS: dict[int, tuple] = {}


def _proximal_step(model: tf.keras.Model) -> tuple:
    """A traced FedProx train step for ``model``, built once per model object.

    The global weights (anchors) and mu are variables, so one trace serves every round.
    """
    if id(model) in _PROX_STEPS:
        return _PROX_STEPS[id(model)]
    loss_fn = _loss_fn(model)
    anchors = [tf.Variable(v, trainable=False) for v in model.trainable_variables]
    mu = tf.Variable(0.0, dtype=tf.float32, trainable=False)
    optimizer = model.optimizer

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            pred = model(xb, training=True)
            base = tf.reduce_mean(loss_fn(yb, pred))
            prox = tf.add_n(
                [
                    tf.reduce_sum(tf.square(v - a))
                    for v, a in zip(model.trainable_variables, anchors)
                ]
            )
            loss = base + 0.5 * mu * prox
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return base

    _PROX_STEPS[id(model)] = (step, anchors, mu)
    return _PROX_STEPS[id(model)]


def evaluate_local(
    model: tf.keras.Model, weights: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray
) -> dict[str, float]:
    """Loss (and accuracy for classifiers) of ``weights`` on (x, y)."""
    model.set_weights(list(weights))
    out = model.evaluate(x, y, verbose=0, batch_size=256, return_dict=True)
    metrics = {"loss": float(out["loss"])}
    if "accuracy" in out:
        metrics["accuracy"] = float(out["accuracy"])
    return metrics


def predict_proba(
    model: tf.keras.Model, weights: Sequence[np.ndarray], x: np.ndarray
) -> np.ndarray:
    """Class probabilities of ``weights`` on x (for server-side metrics)."""
    model.set_weights(list(weights))
    return model.predict(x, verbose=0, batch_size=256)
