"""The numpy floor of ``make bench``: the digits MLP's federated trainings by hand, no framework.

A second floor beside the plain-Keras one (:mod:`bench.tf_floor`): the same shards
(``fedpriv.data.load_federated`` with the run's seed), the same seeded batches
(:func:`bench.tf_floor.batch_schedule`), the same local training (``local-epochs`` epochs of
SGD at ``learning-rate`` on batches of ``batch-size``) and FedAvg, but the model is written out
in numpy: ``h = relu(x W1 + b1)``, ``p = softmax(h W2 + b2)``, the batch loss
``L_b = −Σ_i m_i log p_i[y_i] / Σ_i m_i`` and its gradient by hand
(``∂L/∂z = (p − onehot(y)) m / Σ m``; ``dW2 = hᵀ dz``, ``dh = dz W2ᵀ ⊙ [h > 0]``,
``dW1 = xᵀ dh``). The weights are ``[W1, b1, W2, b2]`` in Keras' order and shapes, so a
``digits-mlp``'s ``get_weights()`` can be passed in. No TensorFlow, Keras or JAX is imported.

Rounds (SPEC §3.1 for the DP case): ``clients-per-round`` clients (0: all) drawn without
replacement by ``default_rng(seed · 1_000_003 + round)``; FedAvg weighted by examples
(:mod:`bench.floor_rounds`); with ``privacy = global-dp`` each update ``Δ_k = w_k − w_g`` is
clipped to L2 norm ``C`` (``clipping-norm``) before averaging and ``N(0, (z·C/m)²)`` is added
to every averaged parameter (``z = noise-multiplier``, ``m`` = clients sampled).

``python -m bench.numpy_floor '<json config>'`` prints one JSON line with the fields of
:mod:`bench.tf_floor` (``seconds`` from interpreter start, ``train_seconds``,
``round_stamps``, ``round_cpu``, ``calls``, ``accuracy``, ``loss``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

T0 = time.perf_counter()


def glorot_weights(n_in: int, n_hidden: int, n_out: int, seed: int) -> list[Any]:
    """``[W1, b1, W2, b2]`` float32, kernels Glorot-uniform (Keras' default), biases 0."""
    import numpy as np

    rng = np.random.default_rng(seed)

    def kernel(a: int, b: int) -> Any:
        limit = np.sqrt(6.0 / (a + b))
        return rng.uniform(-limit, limit, size=(a, b)).astype(np.float32)

    zeros = np.zeros
    w1, w2 = kernel(n_in, n_hidden), kernel(n_hidden, n_out)
    return [w1, zeros(n_hidden, np.float32), w2, zeros(n_out, np.float32)]


def forward(weights: Sequence[Any], x: Any) -> tuple[Any, Any]:
    """``(h, p)``: the hidden activations and the softmax probabilities of ``x`` (n, d)."""
    import numpy as np

    w1, b1, w2, b2 = weights
    h = np.maximum(x @ w1 + b1, 0.0)
    z = h @ w2 + b2
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return h, e / e.sum(axis=1, keepdims=True)


def train_client(
    weights: Sequence[Any], x: Any, y: Any, idx: Any, mask: Any, lr: float
) -> list[Any]:
    """SGD over the batches ``(idx[s], mask[s])`` from ``weights``; the new weights.

    ``x`` is (n, d) float32 (flattened), ``y`` (n,) integer labels.
    """
    import numpy as np

    w1, b1, w2, b2 = (np.array(w, dtype=np.float32, copy=True) for w in weights)
    classes = w2.shape[1]
    eye = np.eye(classes, dtype=np.float32)
    for rows, m in zip(idx, mask):
        xb, mb = x[rows], m[:, None]
        h, p = forward((w1, b1, w2, b2), xb)
        dz = (p - eye[y[rows]]) * mb / mb.sum()
        dh = (dz @ w2.T) * (h > 0)
        w2 -= lr * (h.T @ dz)
        b2 -= lr * dz.sum(axis=0)
        w1 -= lr * (xb.T @ dh)
        b1 -= lr * dh.sum(axis=0)
    return [w1, b1, w2, b2]


def evaluate(weights: Sequence[Any], x: Any, y: Any) -> tuple[float, float]:
    """Summed cross-entropy and hits of ``weights`` on ``x`` (n, d), ``y`` (n,)."""
    import numpy as np

    _, p = forward(weights, x)
    picked = np.clip(p[np.arange(len(y)), y], 1e-7, 1.0)
    return float(-np.log(picked).sum()), float((p.argmax(axis=1) == y).sum())


def run(cfg: dict, weights: Sequence[Any] | None = None) -> dict:
    """The numpy floor run for ``cfg`` (a resolved digits-mlp run config); ``weights`` the
    initial ``[W1, b1, W2, b2]`` (default: :func:`glorot_weights` of the run's seed)."""
    import numpy as np

    from bench.floor_rounds import aggregate, dp_setting, sample_clients
    from fedpriv.data import load_federated

    if cfg.get("model") != "digits-mlp":
        raise ValueError(f"model = {cfg.get('model')!r} is not allowed; expected digits-mlp")
    seed, dp = int(cfg["seed"]), dp_setting(cfg)
    data = load_federated(
        cfg["dataset"], partition=cfg["partition"], num_clients=int(cfg["num-clients"]), seed=seed
    )
    flat = [(c.x_train.reshape(len(c.x_train), -1), c.y_train) for c in data.clients]
    x_test, y_test = data.x_test.reshape(len(data.x_test), -1), data.y_test
    n_in = flat[0][0].shape[1]
    w = list(weights) if weights is not None else glorot_weights(n_in, 64, data.num_classes, seed)
    epochs, batch = int(cfg["local-epochs"]), int(cfg["batch-size"])
    lr = float(cfg["learning-rate"])
    per_round, noise = int(cfg.get("clients-per-round", 0)), np.random.default_rng(seed + 7)
    t_train, calls, stamps, cpu = 0.0, 0, [], []
    from bench.tf_floor import batch_schedule

    for rnd in range(1, int(cfg["num-server-rounds"]) + 1):
        t = time.perf_counter()
        cohort = sample_clients(len(flat), per_round, seed, rnd)
        updates, sizes = [], []
        for p in cohort:
            x, y = flat[p]
            idx, mask = batch_schedule(len(x), batch, epochs, rnd * 1000 + p)
            updates.append(train_client(w, x, y, idx, mask, lr))
            sizes.append(len(x))
        w = aggregate(updates, sizes, w, dp, noise)
        if cfg.get("floor-client-eval", True):  # as the Keras floor: every client's test split
            for c in data.clients:
                evaluate(w, c.x_test.reshape(len(c.x_test), -1), c.y_test)
            calls += len(data.clients)
        evaluate(w, x_test, y_test)
        calls += len(cohort)
        t_train += time.perf_counter() - t
        stamps.append(time.perf_counter() - T0)
        cpu.append(time.process_time())
    loss, hits = evaluate(w, x_test, y_test)
    return {
        "seconds": time.perf_counter() - T0,
        "train_seconds": t_train,
        "round_stamps": stamps,
        "round_cpu": cpu,
        "calls": calls,
        "accuracy": hits / len(y_test),
        "loss": loss / len(y_test),
        "backend": "numpy",
    }


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print(json.dumps(run(json.loads(sys.argv[1]))))
