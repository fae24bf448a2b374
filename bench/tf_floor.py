"""The plain-TensorFlow floor of ``make bench``'s cross-device row (one process, no Flower).

``python -m bench.tf_floor '<json config>'`` does the work of one ``fedpriv run`` of the
standard kind with plain TensorFlow: the same shards (``fedpriv.data.load_federated`` with the
run's seed), every client trained each round by ONE ``tf.function`` call that runs all its
epochs (seeded permutations, batches of ``min(B, n)``), FedAvg weighted by the number of
examples in numpy, then each client's test split and the server test set evaluated by a
traced forward pass. It prints one JSON line: ``seconds`` (from interpreter start, imports
and data loading included), ``train_seconds``, ``calls`` (client train + evaluate calls).
"""

from __future__ import annotations

import json
import os
import sys
import time

T0 = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def _client_fn(model, optimizer, x_spec, y_spec):
    import tensorflow as tf

    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(
        reduction=tf.keras.losses.Reduction.NONE
    )
    specs = [
        x_spec,
        y_spec,
        tf.TensorSpec((None, None), tf.int32),
        tf.TensorSpec((None, None), tf.float32),
    ]

    @tf.function(input_signature=specs)
    def train(x, y, idx, mask):
        for s in tf.range(tf.shape(idx)[0]):
            xb, yb, mb = tf.gather(x, idx[s]), tf.gather(y, idx[s]), mask[s]
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(loss_fn(yb, model(xb, training=True)) * mb)
                loss = loss / tf.reduce_sum(mb)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

    @tf.function(input_signature=specs[:2])
    def evaluate(x, y):
        pred = model(x, training=False)
        hits = tf.cast(tf.equal(tf.argmax(pred, axis=-1), tf.cast(y, tf.int64)), tf.float32)
        return tf.reduce_sum(loss_fn(y, pred)), tf.reduce_sum(hits)

    return train, evaluate


def run(cfg: dict) -> dict:
    """The floor run for ``cfg`` (a resolved fedpriv run config of the standard kind)."""
    import tensorflow as tf

    from clients.compiled import batch_schedule  # the clients' own seeded batches
    from fedpriv.data import load_federated
    from fedpriv.models import build_model

    data = load_federated(
        cfg["dataset"],
        partition=cfg["partition"],
        num_clients=int(cfg["num-clients"]),
        seed=int(cfg["seed"]),
        dirichlet_alpha=float(cfg["dirichlet-alpha"]),
    )
    model = build_model(
        cfg["model"], input_shape=tuple(data.input_shape), num_classes=data.num_classes
    )
    optimizer = tf.keras.optimizers.SGD(float(cfg["learning-rate"]))
    optimizer.build(model.trainable_variables)
    x0, y0 = data.clients[0].x_train, data.clients[0].y_train
    x_spec = tf.TensorSpec((None, *x0.shape[1:]), tf.as_dtype(x0.dtype))
    train, evaluate = _client_fn(model, optimizer, x_spec, tf.TensorSpec((None,), y0.dtype))
    weights = build_model(
        cfg["model"],
        input_shape=tuple(data.input_shape),
        num_classes=data.num_classes,
        seed=int(cfg["seed"]),
    ).get_weights()
    epochs, batch = int(cfg["local-epochs"]), int(cfg["batch-size"])
    t_train, calls = 0.0, 0
    for rnd in range(1, int(cfg["num-server-rounds"]) + 1):
        t = time.perf_counter()
        updates, sizes = [], []
        for p, client in enumerate(data.clients):
            model.set_weights(weights)
            for var in optimizer.variables:
                var.assign(tf.zeros_like(var))
            plan = batch_schedule(len(client.x_train), batch, epochs, rnd * 1000 + p)
            train(client.x_train, client.y_train, plan.idx, plan.mask)
            updates.append(model.get_weights())
            sizes.append(len(client.x_train))
        total = float(sum(sizes))
        weights = [
            sum(u[i] * (n / total) for u, n in zip(updates, sizes)) for i in range(len(weights))
        ]
        model.set_weights(weights)
        for client in data.clients:
            evaluate(client.x_test, client.y_test)
        evaluate(data.x_test, data.y_test)
        calls += 2 * len(data.clients)
        t_train += time.perf_counter() - t
    loss, hits = evaluate(data.x_test, data.y_test)
    return {
        "seconds": time.perf_counter() - T0,
        "train_seconds": t_train,
        "calls": calls,
        "accuracy": float(hits) / len(data.y_test),
        "loss": float(loss) / len(data.y_test),
    }


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print(json.dumps(run(json.loads(sys.argv[1]))))
