"""The same small training on the TensorFlow (this process) and JAX (a subprocess) backends.

Same initial weights, same batches, dropout-free models (tests/backend_case.py): weights,
train metrics, evaluation and predictions agree to float tolerance.
"""

import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from tests.backend_case import run_case

ROOT = Path(__file__).resolve().parent.parent


# the device loop's run is slow only (make test-all): the host loop keeps the equivalence in the
# fast tier (~40 s each)
@pytest.mark.parametrize("loop", ["host", pytest.param("device", marks=pytest.mark.slow)])
def test_tensorflow_and_jax_backends_train_to_the_same_weights(tmp_path, loop):
    """JAX's two loops: ``host`` (its CPU default), ``device`` (one jitted fori_loop, GPUs)."""
    assert keras.backend.backend() == "tensorflow"
    out = tmp_path / "jax.npz"
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT),
           "FEDPRIV_STEP_LOOP": loop}  # fmt: skip
    subprocess.run(
        [sys.executable, str(ROOT / "tests" / "backend_case.py"), str(out)],
        cwd=ROOT, env=env, check=True, timeout=600, capture_output=True,
    )  # fmt: skip
    tf_run = run_case()
    with np.load(out) as jax_run:
        assert str(jax_run["backend"]) == "jax" and str(tf_run["backend"]) == "tensorflow"
        assert bool(jax_run["host-loop"]) == (loop == "host") and not tf_run["host-loop"]
        assert set(jax_run.files) == set(tf_run)
        for key in sorted(set(tf_run) - {"backend", "host-loop"}):
            np.testing.assert_allclose(tf_run[key], jax_run[key], rtol=1e-4, atol=2e-5, err_msg=key)
    assert tf_run["cnn/moved"] > 1e-2 and tf_run["dp/moved"] > 1e-2  # not vacuous: it trained
    assert 0 < tf_run["cnn/metrics"][0] < 10 and np.isfinite(tf_run["dp/metrics"][0])
