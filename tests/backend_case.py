"""One small training, evaluation and prediction on the current Keras backend (a script).

Used by test_backends_agree.py: run in the test process (TensorFlow) and, as
``KERAS_BACKEND=jax python tests/backend_case.py OUT.npz``, in a subprocess. The initial
weights come from numpy (the backends' initialisers draw differently), the batches from
``batch_schedule`` (numpy): the two runs see the same numbers, so their results must agree
to float tolerance. Models without Dropout (no backend random numbers).
"""

import functools
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import keras  # noqa: E402
import numpy as np  # noqa: E402
from fedpriv.clients.compiled import CompiledTrainer, DpStepConfig  # noqa: E402

from fedpriv.models import build_model  # noqa: E402


def _start(model: keras.Model, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.2 * rng.normal(size=w.shape)).astype(np.float32) for w in model.weights]


def run_case() -> dict[str, np.ndarray]:
    """Adam + FedProx on the digits CNN, DP-SGD (z = 0) on the MLP: weights, metrics, outputs."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 10, size=50).astype(np.int64)
    loss = keras.losses.SparseCategoricalCrossentropy(reduction=None)
    from fedpriv.clients.backend_loop import HOST_LOOP

    out: dict[str, np.ndarray] = {"backend": np.array(keras.backend.backend())}
    out["host-loop"] = np.array(HOST_LOOP)
    cnn = build_model("digits-cnn", input_shape=(8, 8, 1), num_classes=10)
    trainer = CompiledTrainer(cnn, keras.optimizers.Adam(3e-3), loss, classifier=True)
    w0 = _start(cnn, 1)
    new, metrics = trainer.train(w0, x, y, epochs=2, batch_size=16, seed=4, proximal_mu=0.2)
    out.update({f"cnn/{k}": w for k, w in enumerate(new)})
    out["cnn/moved"] = np.array(max(float(np.abs(a - b).max()) for a, b in zip(new, w0)))
    out["cnn/metrics"] = np.array([metrics["train-loss"], metrics["train-accuracy"]])
    out["cnn/eval"] = np.array(list(trainer.evaluate(new, x, y).values()))
    out["cnn/proba"] = trainer.predict(new, x)
    mlp = build_model("digits-mlp", input_shape=(8, 8, 1), num_classes=10)
    dp = DpStepConfig(l2_norm_clip=0.5, noise_multiplier=0.0)
    trainer = CompiledTrainer(mlp, keras.optimizers.SGD(0.1), loss, classifier=True, dp=dp)
    seed = np.array([1, 2], np.int32)
    w0 = _start(mlp, 2)
    new, metrics = trainer.train(w0, x, y, epochs=2, batch_size=8, seed=5, noise_seed=seed)
    out.update({f"dp/{k}": w for k, w in enumerate(new)})
    out["dp/moved"] = np.array(max(float(np.abs(a - b).max()) for a, b in zip(new, w0)))
    out["dp/metrics"] = np.array([metrics["train-loss"]])
    out.update(_cohort_case(mlp, loss, x, y))
    out.update(_conv_cohort_case(cnn, loss, x, y))
    return out


def _conv_cohort_case(cnn: keras.Model, loss, x: np.ndarray, y: np.ndarray) -> dict:
    """Two clients of the digits CNN as one cohort (TF: ``tf.map_fn``; JAX's device loop:
    ``vmap`` over per-client weights, so every convolution a grouped one): each client's own
    loop. SGD: Adam's step, about its learning rate whatever the gradient's size, turns the
    backends' rounding of near-zero gradients into differences above the tolerance; start
    weights small enough that the softmax is not saturated (where the backends differ in the
    gradient of the clipped log)."""
    from fedpriv.clients.cohort_train import run_cohort

    out: dict[str, np.ndarray] = {}
    small = [[0.25 * w for w in _start(cnn, 5 + k)] for k in range(2)]  # softmax unsaturated
    trainer = CompiledTrainer(cnn, keras.optimizers.SGD(0.05), loss, classifier=True)
    tasks = [
        functools.partial(trainer.train, small[k], x[: 20 + 17 * k], y[: 20 + 17 * k],
                          epochs=2, batch_size=8, seed=30 + k)
        for k in range(2)
    ]  # fmt: skip
    for k, outcome in enumerate(run_cohort(tasks)):
        assert outcome.error is None, outcome.error
        weights, metrics = outcome.value
        out.update({f"conv-cohort/{k}/{j}": w for j, w in enumerate(weights)})
        out[f"conv-cohort/{k}/loss"] = np.array(metrics["train-loss"])
        moved = max(float(np.abs(a - b).max()) for a, b in zip(weights, small[k]))
        assert moved > 1e-2, f"conv cohort client {k} did not train ({moved})"
    return out


def _cohort_case(mlp: keras.Model, loss, x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Three clients of different sizes trained as one cohort (fedpriv.clients.cohort_train): plain
    SGD with FedProx, and DP-SGD with each client's own noise seed (TF: one map_fn call;
    JAX's device loop: one vmap call; JAX's host loop: client by client)."""
    from fedpriv.clients.cohort_train import run_cohort

    out: dict[str, np.ndarray] = {}
    for name, dp in (("plain", None), ("dp", DpStepConfig(l2_norm_clip=0.5, noise_multiplier=0.0))):
        trainer = CompiledTrainer(mlp, keras.optimizers.SGD(0.1), loss, classifier=True, dp=dp)
        kws = [
            dict(epochs=2, batch_size=8, seed=20 + k, proximal_mu=0.1 * k,
                 noise_seed=np.array([k, 1], np.int32) if dp else None)
            for k in range(3)
        ]  # fmt: skip
        sizes = (50, 13, 30)
        tasks = [
            functools.partial(
                trainer.train, _start(mlp, 3 + k % 2), x[: sizes[k]], y[: sizes[k]], **kws[k]
            )
            for k in range(3)
        ]
        for k, outcome in enumerate(run_cohort(tasks)):
            assert outcome.error is None, outcome.error
            weights, metrics = outcome.value
            out.update({f"cohort-{name}/{k}/{j}": w for j, w in enumerate(weights)})
            out[f"cohort-{name}/{k}/loss"] = np.array(metrics["train-loss"])
    return out


if __name__ == "__main__":
    np.savez(sys.argv[1], **run_case())
