"""TensorFlow's import notices stay off a ClientApp worker's terminal (``flwr run .``).

TensorFlow 2.21 prints absl's pre-init banner and its oneDNN notice at import whatever
``TF_CPP_MIN_LOG_LEVEL`` says; ``fedpriv run`` keeps them in run.log, but the Ray workers of
``flwr run .`` write to the user's terminal. Loading the ClientApp module imports TensorFlow
with those lines dropped and every other line kept; ``FEDPRIV_LOG=debug`` keeps them all.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fedpriv.scenarios.app import quiet

ROOT = Path(__file__).resolve().parents[1]


def _import_client_app(**extra: str) -> str:
    """stderr of a fresh interpreter that loads the ClientApp module and runs one op."""
    env = {k: v for k, v in os.environ.items() if k not in quiet.QUIET_ENV and k != quiet.LOG_ENV}
    env.pop("KERAS_BACKEND", None)
    env.update(CUDA_VISIBLE_DEVICES="", **extra)
    code = (
        "import fedpriv.scenarios.app.client_app, tensorflow as tf; "
        "print(float(tf.constant(1.0) + 1))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=True)  # fmt: skip
    assert proc.stdout.strip() == "2.0"
    return proc.stderr


def test_the_client_app_imports_tensorflow_without_its_notices():
    # TensorFlow's C++ log level at 0, so that its notices print on every CPU (the oneDNN
    # one only where oneDNN is on by default, e.g. with AVX-512; absl's banner and the CPU
    # feature notice everywhere): the filter drops them, not the log level (which a fresh
    # process's ClientApp sets quiet too, unless set: tests/test_console.py's runs)
    everything = {"TF_CPP_MIN_LOG_LEVEL": "0"}
    assert not [n for n in quiet.TF_IMPORT_NOISE if n in _import_client_app(**everything)]
    loud = _import_client_app(**everything, **{quiet.LOG_ENV: quiet.VERBOSE})  # --verbose
    assert [n for n in quiet.TF_IMPORT_NOISE if n in loud], loud


def test_a_quiet_import_keeps_every_other_line(tmp_path, monkeypatch, capfd):
    (tmp_path / "noisy_module.py").write_text(
        "import os\n"
        "os.write(2, b'I0000 port.cc:153] oneDNN custom operations are on. ...\\n')\n"
        "os.write(2, b'E0000 a real problem at import\\n')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    quiet.import_quietly("noisy_module", quiet.TF_IMPORT_NOISE)
    err = capfd.readouterr().err
    assert "a real problem at import" in err and "oneDNN" not in err


def _fresh(code: str, **extra: str) -> list[str]:
    """stdout lines of ``code`` run in a fresh interpreter (repository root, ``extra`` env)."""
    env = {k: v for k, v in os.environ.items() if k != quiet.LOG_ENV}
    env.update(CUDA_VISIBLE_DEVICES="", **extra)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=True)  # fmt: skip
    return proc.stdout.split()


def test_a_worker_loads_tensorflow_without_the_optional_packages_which_still_import_later():
    code = (
        "import sys\n"
        "from fedpriv.scenarios.app import quiet\n"
        "quiet.prepare_worker()\n"
        "print('tensorflow' in sys.modules, *[m in sys.modules for m in quiet.LEAN_IMPORT])\n"
        "import sklearn.metrics, matplotlib, keras\n"
        "print(keras.config.backend())\n"
    )
    loaded, *optional, backend = _fresh(code, KERAS_BACKEND="tensorflow")
    assert (loaded, optional, backend) == ("True", ["False"] * len(quiet.LEAN_IMPORT), "tensorflow")


def test_a_worker_on_another_backend_imports_no_tensorflow(tmp_path):
    code = "import sys; from fedpriv.scenarios.app import quiet; quiet.prepare_worker()\n"
    code += "print('tensorflow' in sys.modules)"
    assert _fresh(code, KERAS_BACKEND="jax") == ["False"]
    (tmp_path / "keras.json").write_text('{"backend": "jax"}')  # Keras's own config file
    env = {"KERAS_BACKEND": "", "KERAS_HOME": str(tmp_path)}
    assert _fresh(code, **env) == ["False"]


def test_blocked_modules_fail_inside_the_block_and_import_after(tmp_path, monkeypatch):
    (tmp_path / "optional_extra.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with quiet.without_modules(["optional_extra", "os"]):  # os is loaded: left alone
        with pytest.raises(ModuleNotFoundError):
            import optional_extra  # noqa: F401
        assert sys.modules["os"] is os
    import optional_extra

    assert optional_extra.VALUE == 1
