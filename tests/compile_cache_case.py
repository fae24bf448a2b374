"""Trainings on JAX with the persistent compilation cache on (a script for
test_compile_cache.py): ``KERAS_BACKEND=jax FEDPRIV_COMPILE_CACHE=DIR python
tests/compile_cache_case.py MARKERS.npz``.

Trains the digits MLP plainly and with DP-SGD (noise seeded by a call's noise seed),
evaluates and predicts, on the device step loop (the GPU's: the whole loop one compiled
call), then compiles a control that closes over an array as a constant. Saves the bytes the
test looks for in the cache: the client's data, start weights and noise seed, and the
control's constant (which must be found, or the scan proves nothing).
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["FEDPRIV_STEP_LOOP"] = "device"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import keras  # noqa: E402
import numpy as np  # noqa: E402
from fedpriv.clients.compiled import CompiledTrainer, DpStepConfig  # noqa: E402

from fedpriv.models import build_model  # noqa: E402


def main(out: str) -> None:
    rng = np.random.default_rng(20261127)
    x = rng.normal(size=(40, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 10, size=40).astype(np.int64)
    loss = keras.losses.SparseCategoricalCrossentropy(reduction=None)
    mlp = build_model("digits-mlp", input_shape=(8, 8, 1), num_classes=10)
    w0 = [(0.1 * rng.normal(size=w.shape)).astype(np.float32) for w in mlp.weights]
    plain = CompiledTrainer(mlp, keras.optimizers.SGD(0.1), loss, classifier=True)
    new, _ = plain.train(w0, x, y, epochs=2, batch_size=8, seed=3)
    plain.evaluate(new, x, y)
    plain.predict(new, x)
    dp = DpStepConfig(l2_norm_clip=0.5, noise_multiplier=1.1)
    private = CompiledTrainer(mlp, keras.optimizers.SGD(0.1), loss, classifier=True, dp=dp)
    noise_seed = np.array([918273645, 564738291], np.int32)
    private.train(w0, x, y, epochs=1, batch_size=8, seed=4, noise_seed=noise_seed)

    import jax
    import jax.numpy as jnp

    constant = rng.normal(size=(64,)).astype(np.float32)
    control = jax.jit(lambda z: z * jnp.asarray(constant) + 1.0)
    control(jnp.ones(64, jnp.float32)).block_until_ready()
    np.savez(out, data=x, weights=w0[0], noise_seed=noise_seed, control=constant)


if __name__ == "__main__":
    main(sys.argv[1])
