"""The plain-Keras floor of ``make bench`` (one process, no Flower), on either Keras backend.

The floor is the fastest plain Keras 3 loop we know for a client's local training: every
epoch of one client call runs inside ONE compiled call, selected by ``KERAS_BACKEND``:

- ``tensorflow``: one ``tf.function`` (fixed input signature, no retracing) that loops over
  the batches with ``tf.GradientTape`` and ``optimizer.apply_gradients``;
- ``jax``: one ``jax.jit`` of a ``lax.scan`` over the batches, each step
  ``jax.value_and_grad`` of ``model.stateless_call`` and ``optimizer.stateless_apply``
  (weights, optimizer state and the Dropout seed state are loop carries). On the CPU the scan
  is fully unrolled: measured on this project's 2-core CPU machine (JAX 0.12, MP CNN, batch
  32), a convolution step inside an XLA:CPU while loop took 26-56 s against 0.9-1.6 s
  unrolled (or as one jitted step per batch); on a GPU the loop stays rolled.

Each step minimises the masked mean sparse cross-entropy of its batch,
``L_b = Σ_i m_i ℓ(x_i, y_i) / Σ_i m_i``, over seeded batches (:func:`batch_schedule`: one
permutation per epoch, batches of ``min(B, n)``, the last one padded with mask 0, the same
rule as the clients' trainer), from the optimizer's initial state at every call.

``python -m bench.tf_floor '<json config>'`` does the work of one ``fedpriv run`` of the
standard kind: the same shards (``fedpriv.data.load_federated`` with the run's seed), every
client trained each round by one floor call, FedAvg weighted by the number of examples in
numpy (``clients-per-round`` sampled, ``global-dp`` clipping and noise:
:mod:`bench.floor_rounds`), then each client's test split (unless ``floor-client-eval`` is
false) and the server test set evaluated by a compiled forward pass. It prints one JSON
line: ``seconds`` (from interpreter start, imports and data loading included),
``train_seconds``, ``round_stamps`` and ``round_cpu`` (wall seconds from interpreter start and
process CPU seconds at the end of each round), ``calls`` (client train + evaluate calls),
``backend``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

T0 = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
EVAL_CHUNK = 256


def batch_schedule(n: int, batch_size: int, epochs: int, seed: int) -> tuple[Any, Any]:
    """``(idx, mask)``, both (steps, width): the batches of ``epochs`` seeded epochs.

    ``width = min(batch_size, n)``; epoch e is ``rng.permutation(n)`` cut in ⌈n/width⌉
    batches, the last one padded with index 0 and mask 0 (``rng = default_rng(seed)``).
    """
    import numpy as np

    if n < 1 or batch_size < 1 or epochs < 0:
        raise ValueError(f"n = {n}, batch_size = {batch_size}, epochs = {epochs}: expected >= 1")
    width = min(batch_size, n)
    per_epoch = -(-n // width)
    rng = np.random.default_rng(seed)
    idx = np.zeros((epochs * per_epoch, width), dtype=np.int32)
    mask = np.zeros((epochs * per_epoch, width), dtype=np.float32)
    for e in range(epochs):
        order = rng.permutation(n)
        for j in range(per_epoch):
            part = order[j * width : (j + 1) * width]
            idx[e * per_epoch + j, : len(part)] = part
            mask[e * per_epoch + j, : len(part)] = 1.0
    return idx, mask


class _TensorFlowFloor:
    """All epochs in one ``tf.function`` (module doc)."""

    def __init__(self, model: Any, optimizer: Any) -> None:
        import keras

        self.model, self.optimizer = model, optimizer
        optimizer.build(model.trainable_variables)
        self.initial = [v.numpy() for v in optimizer.variables]  # iteration 0, lr, zeros
        self.loss = keras.losses.SparseCategoricalCrossentropy(reduction=None)
        self._train = self._eval = None

    def _trace(self, x: Any, y: Any) -> None:
        import tensorflow as tf

        model, optimizer, loss_fn = self.model, self.optimizer, self.loss
        x_spec = tf.TensorSpec((None, *x.shape[1:]), tf.as_dtype(x.dtype))
        y_spec = tf.TensorSpec((None,), tf.as_dtype(y.dtype))
        plan = [tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, None), tf.float32)]

        @tf.function(input_signature=[x_spec, y_spec, *plan])
        def train(x, y, idx, mask):
            for s in tf.range(tf.shape(idx)[0]):
                xb, yb, mb = tf.gather(x, idx[s]), tf.gather(y, idx[s]), mask[s]
                with tf.GradientTape() as tape:
                    per_example = loss_fn(yb, model(xb, training=True))
                    loss = tf.reduce_sum(per_example * mb) / tf.reduce_sum(mb)
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))

        @tf.function(input_signature=[x_spec, y_spec])
        def evaluate(x, y):
            pred = model(x, training=False)
            hits = tf.equal(tf.argmax(pred, axis=-1), tf.cast(y, tf.int64))
            return tf.reduce_sum(loss_fn(y, pred)), tf.reduce_sum(tf.cast(hits, tf.float32))

        self._train, self._eval = train, evaluate

    def train(self, weights: Sequence[Any], x: Any, y: Any, idx: Any, mask: Any) -> list[Any]:
        if self._train is None:
            self._trace(x, y)
        self.model.set_weights(weights)
        for var, value in zip(self.optimizer.variables, self.initial):
            var.assign(value)
        self._train(x, y, idx, mask)
        return self.model.get_weights()

    def evaluate(self, x: Any, y: Any) -> tuple[float, float]:
        if self._eval is None:
            self._trace(x, y)
        loss, hits = self._eval(x, y)
        return float(loss), float(hits)


class _JaxFloor:
    """All epochs in one ``jax.jit`` of a ``lax.scan`` (module doc; unrolled on the CPU)."""

    def __init__(self, model: Any, optimizer: Any) -> None:
        import jax
        import keras

        self.model, self.optimizer = model, optimizer
        optimizer.build(model.trainable_variables)
        self.initial = [v.value for v in optimizer.variables]
        loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction=None)
        ops = keras.ops

        def batch_loss(tv, ntv, xb, yb, mb):
            pred, ntv = model.stateless_call(tv, ntv, xb, training=True)
            return ops.sum(loss_fn(yb, pred) * mb) / ops.sum(mb), ntv

        grad = jax.value_and_grad(batch_loss, has_aux=True)

        unroll = jax.default_backend() == "cpu"

        def loop(tv, ntv, ov, x, y, idx, mask):
            def step(carry, batch):
                (tv, ntv, ov), (rows, mb) = carry, batch
                (_, ntv), g = grad(tv, ntv, x[rows], y[rows], mb)
                tv, ov = optimizer.stateless_apply(ov, g, tv)
                return (tv, ntv, ov), None

            return jax.lax.scan(step, (tv, ntv, ov), (idx, mask), unroll=unroll)[0]

        def evaluate(tv, ntv, x, y):
            pred, _ = model.stateless_call(tv, ntv, x, training=False)
            hits = ops.sum(ops.cast(ops.argmax(pred, axis=-1) == y, "float32"))
            return ops.sum(loss_fn(y, pred)), hits

        self._loop, self._eval = jax.jit(loop), jax.jit(evaluate)

    def _state(self) -> tuple[list[Any], list[Any]]:
        model = self.model
        return [v.value for v in model.trainable_variables], [
            v.value for v in model.non_trainable_variables
        ]

    def train(self, weights: Sequence[Any], x: Any, y: Any, idx: Any, mask: Any) -> list[Any]:
        self.model.set_weights(weights)
        tv, ntv = self._state()
        tv, ntv, _ = self._loop(tv, ntv, self.initial, x, y.astype("int32"), idx, mask)
        for var, value in zip(self.model.trainable_variables, tv):
            var.assign(value)
        for var, value in zip(self.model.non_trainable_variables, ntv):
            var.assign(value)
        return self.model.get_weights()

    def evaluate(self, x: Any, y: Any) -> tuple[float, float]:
        tv, ntv = self._state()
        loss, hits = self._eval(tv, ntv, x, y.astype("int32"))
        return float(loss), float(hits)


def make_floor(model: Any, optimizer: Any) -> _TensorFlowFloor | _JaxFloor:
    """The floor trainer of ``model`` on the process's Keras backend (tensorflow | jax)."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        return _TensorFlowFloor(model, optimizer)
    if backend == "jax":
        return _JaxFloor(model, optimizer)
    raise ValueError(
        f"KERAS_BACKEND = {backend!r} is not allowed for the floor; expected tensorflow | jax"
    )


def make_optimizer(name: str, learning_rate: float) -> Any:
    """A fresh plain Keras optimizer (adam | sgd)."""
    import keras

    kinds = {"adam": keras.optimizers.Adam, "sgd": keras.optimizers.SGD}
    if name not in kinds:
        raise ValueError(f"optimizer = {name!r} is not allowed; expected adam | sgd")
    return kinds[name](learning_rate=float(learning_rate))


def evaluate_all(floor: Any, x: Any, y: Any) -> tuple[float, float]:
    """Summed loss and hits over ``x`` in chunks of ``EVAL_CHUNK`` examples."""
    loss = hits = 0.0
    for start in range(0, len(x), EVAL_CHUNK):
        part_loss, part_hits = floor.evaluate(
            x[start : start + EVAL_CHUNK], y[start : start + EVAL_CHUNK]
        )
        loss, hits = loss + part_loss, hits + part_hits
    return loss, hits


def run(cfg: dict) -> dict:
    """The floor run for ``cfg`` (a resolved fedpriv run config of the standard kind)."""
    import keras
    import numpy as np

    from fedpriv.data import load_federated
    from fedpriv.models import build_model

    data = load_federated(
        cfg["dataset"],
        partition=cfg["partition"],
        num_clients=int(cfg["num-clients"]),
        seed=int(cfg["seed"]),
        dirichlet_alpha=float(cfg.get("dirichlet-alpha", 0.5)),
    )
    shape, classes = tuple(data.input_shape), data.num_classes
    weights = build_model(
        cfg["model"], input_shape=shape, num_classes=classes, seed=int(cfg["seed"])
    ).get_weights()
    model = build_model(cfg["model"], input_shape=shape, num_classes=classes)
    optimizer = make_optimizer(cfg.get("optimizer", "sgd"), cfg["learning-rate"])
    floor = make_floor(model, optimizer)
    epochs, batch = int(cfg["local-epochs"]), int(cfg["batch-size"])
    from bench.floor_rounds import aggregate, dp_setting, sample_clients

    dp, noise = dp_setting(cfg), np.random.default_rng(int(cfg["seed"]) + 7)
    t_train, calls, stamps, cpu = 0.0, 0, [], []
    for rnd in range(1, int(cfg["num-server-rounds"]) + 1):
        t = time.perf_counter()
        updates, sizes = [], []
        cohort = sample_clients(len(data.clients), int(cfg.get("clients-per-round", 0)),
                                int(cfg["seed"]), rnd)  # fmt: skip
        for p in cohort:
            client = data.clients[p]
            idx, mask = batch_schedule(len(client.x_train), batch, epochs, rnd * 1000 + p)
            updates.append(floor.train(weights, client.x_train, client.y_train, idx, mask))
            sizes.append(len(client.x_train))
        weights = aggregate(updates, sizes, weights, dp, noise)
        model.set_weights(weights)
        if cfg.get("floor-client-eval", True):  # hdp-paper: server test set only
            for client in data.clients:
                evaluate_all(floor, client.x_test, client.y_test)
            calls += len(data.clients)
        evaluate_all(floor, data.x_test, data.y_test)
        calls += len(cohort)
        t_train += time.perf_counter() - t
        stamps.append(time.perf_counter() - T0)
        cpu.append(time.process_time())
    loss, hits = evaluate_all(floor, data.x_test, data.y_test)
    return {
        "seconds": time.perf_counter() - T0,
        "train_seconds": t_train,
        "round_stamps": stamps,
        "round_cpu": cpu,
        "calls": calls,
        "accuracy": hits / len(data.y_test),
        "loss": loss / len(data.y_test),
        "backend": keras.backend.backend(),
    }


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print(json.dumps(run(json.loads(sys.argv[1]))))
