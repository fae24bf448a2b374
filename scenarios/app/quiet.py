"""Framework noise off by default: what a run prints on the console, and what only its log.

A simulation prints a lot that is not about the run: TensorFlow's absl and oneDNN notices,
Ray's start-up lines and its ``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO`` FutureWarning, Keras's
numpy-2 ``__array__ ... copy keyword`` DeprecationWarning, and Flower's INFO lines from the
driver and from every Ray worker. Two layers keep them off the console:

1. :func:`simulation_env`: the environment of the simulation process, which Ray's workers
   inherit — TensorFlow's C++ log level and Ray's accelerator warning — and
   :func:`configure_process`, which the ServerApp and the ClientApp call when they load: the
   Keras warning filter (an in-process filter: Flower's imports put a "once" filter for
   every DeprecationWarning in front of what ``PYTHONWARNINGS`` sets), TensorFlow imported
   with its start-up notices dropped (:func:`import_tensorflow_quietly`: absl's pre-init
   banner and the oneDNN notice, which TensorFlow 2.21 prints whatever its log level; the
   Ray workers of ``flwr run .`` print them to the user's terminal) and, in a Ray worker,
   Flower's logger at WARNING;
2. :func:`is_console_line`: ``fedpriv run`` writes everything the simulation prints to
   ``<output-dir>/run.log`` and shows on the console only the run's own lines (those that
   start with ``fedpriv``) and the driver's warnings and errors.

``fedpriv run --verbose`` (or ``FEDPRIV_LOG=debug``) sets nothing and shows every line.

TensorFlow is imported without the packages Keras and TensorFlow would pull in for features
no fedpriv process uses at that point (:data:`LEAN_IMPORT`): less than half the import time,
in the simulation process and in every Ray worker (:func:`prepare_worker`, Ray's worker
setup hook: it runs before Flower's actor module imports TensorFlow).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TextIO

LOG_ENV = "FEDPRIV_LOG"
VERBOSE = "debug"
LOG_NAME = "run.log"  # fedpriv.reporting.runlog.RUN_LOG_FILE

# Keras 3 on numpy 2 (keras/src/backend/tensorflow/core.py): np.array(x) of a tensor
KERAS_COPY_MESSAGE = "__array__ implementation doesn't accept a copy keyword"

# Quiet defaults for the simulation process and every Ray worker; a variable the user set
# in the environment wins.
QUIET_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "3",  # TensorFlow's C++ INFO/WARNING lines (oneDNN, cuda probes)
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",  # Ray's FutureWarning tip (num_gpus = 0)
}

# TensorFlow's C++ notices at import that TF_CPP_MIN_LOG_LEVEL does not silence (TF 2.21):
# absl's banner before its log is initialised, oneDNN's numerics notice, the CPU-feature one
TF_IMPORT_NOISE = (
    "All log messages before absl::InitializeLog() is called",
    "oneDNN custom operations are on",
    "cpu_feature_guard.cc",
    "To enable the following instructions:",
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Flower's log lines of the driver: "WARNING :   text" / "ERROR :   text" (worker lines carry
# Ray's "(ClientAppActor pid=...)" prefix and are not shown).
_DRIVER_PROBLEM = re.compile(r"^(WARNING|ERROR)\s+:")


def verbose(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``FEDPRIV_LOG=debug``: every framework line is shown."""
    environ = os.environ if environ is None else environ
    return environ.get(LOG_ENV, "").strip().lower() == VERBOSE


def simulation_env(base: Mapping[str, str], *, loud: bool = False) -> dict[str, str]:
    """The simulation's environment: ``base`` with the quiet defaults added (variables of
    ``base`` win); with ``loud`` (``--verbose``) TensorFlow's own log level instead, the
    other quiet defaults removed, and ``FEDPRIV_LOG=debug`` for the workers."""
    if not loud:
        return {**QUIET_ENV, **base}
    env = {k: v for k, v in base.items() if not (k in QUIET_ENV and v == QUIET_ENV[k])}
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"
    env[LOG_ENV] = VERBOSE
    return env


# the runner's one line when a run cannot start (exit status 2): the launcher relays it to
# standard error, the run's other lines to standard output
REFUSAL_PREFIX = "fedpriv: cannot start: "


def is_refusal_line(line: str) -> bool:
    """Whether ``line`` is the runner's reason a run could not start (:data:`REFUSAL_PREFIX`)."""
    return plain(line).startswith(REFUSAL_PREFIX)


def plain(line: str) -> str:
    """``line`` without ANSI colour codes (Flower colours its level names)."""
    return _ANSI.sub("", line)


def is_console_line(line: str, prefix: str = "fedpriv") -> bool:
    """Whether a line of the simulation's output belongs on the console by default: the
    run's own lines (``prefix``) and the driver's Flower warnings and errors."""
    text = plain(line).lstrip()
    return text.startswith(prefix) or bool(_DRIVER_PROBLEM.match(text))


def in_ray_worker() -> bool:
    """Whether this process is one of Ray's workers (a ClientApp actor of the simulation)."""
    return Path(sys.argv[0] if sys.argv else "").name == "default_worker.py"


def configure_process() -> None:
    """When the ServerApp or the ClientApp loads, unless ``FEDPRIV_LOG=debug``: TensorFlow's
    C++ log level quiet unless set, Keras's numpy-2 copy warning ignored and, in a Ray
    worker, Flower's logger at WARNING (the driver keeps its INFO lines for run.log; it
    loads the ClientApp too)."""
    if verbose():
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_ENV["TF_CPP_MIN_LOG_LEVEL"])
    warnings.filterwarnings("ignore", message=KERAS_COPY_MESSAGE, category=DeprecationWarning)
    import_tensorflow_quietly()
    if in_ray_worker():
        logging.getLogger("flwr").setLevel(logging.WARNING)


# Packages that TensorFlow 2.21 and Keras 3 import at their own import when installed, for
# features no fedpriv process uses then: Keras's scikit-learn wrappers and image-gallery plot
# (matplotlib), TensorFlow Lite's JAX converter (JAX: only on the TensorFlow backend). Without
# them ``import tensorflow`` takes 1.9 s instead of 4.2 s (2 busy CPUs); each still imports
# when asked for later (fedpriv.metrics imports scikit-learn, the plots matplotlib).
LEAN_IMPORT = ("sklearn", "matplotlib", "jax")


def keras_backend() -> str:
    """The backend Keras will load, found as Keras finds it but without importing it:
    ``KERAS_BACKEND``, else ``backend`` of ``$KERAS_HOME/keras.json`` (default
    ``~/.keras``), else ``tensorflow``."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        return str(json.loads(Path(home, "keras.json").read_text()).get("backend", "tensorflow"))
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


@contextlib.contextmanager
def without_modules(names: Sequence[str]) -> Iterator[None]:
    """Imports of ``names`` (not loaded yet) fail with ModuleNotFoundError inside the block
    (a ``None`` entry in ``sys.modules``), as if they were not installed; after it they
    import as usual."""
    blocked = [name for name in names if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def import_tensorflow(noise: tuple[str, ...] = TF_IMPORT_NOISE) -> None:
    """Import TensorFlow, when Keras runs on it and it is not loaded yet, without the
    packages of :data:`LEAN_IMPORT` and without the notices of ``noise``
    (:func:`import_quietly`; none dropped when empty)."""
    if "tensorflow" in sys.modules or keras_backend() != "tensorflow":
        return
    if importlib.util.find_spec("tensorflow") is None:  # the base install: no TensorFlow
        return
    with without_modules(LEAN_IMPORT):
        if noise:
            import_quietly("tensorflow", noise)
        else:
            importlib.import_module("tensorflow")


def import_tensorflow_quietly() -> None:
    """:func:`import_tensorflow` without the notices of :data:`TF_IMPORT_NOISE`."""
    import_tensorflow(TF_IMPORT_NOISE)


def prepare_worker() -> None:
    """Ray's worker setup hook for a simulation's workers (``fedpriv.scenarios.cli.ray_cluster``):
    TensorFlow imported lean (:func:`import_tensorflow`) before Flower's actor module
    imports it in full; its notices dropped unless ``FEDPRIV_LOG=debug``."""
    import_tensorflow(() if verbose() else TF_IMPORT_NOISE)


def import_quietly(module: str, noise: tuple[str, ...]) -> None:
    """Import ``module`` with file descriptor 2 captured, then write back every line of it
    but those containing one of ``noise``: a real error at import still shows, the notices
    that C++ code prints directly (past Python's ``sys.stderr``) do not."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            importlib.import_module(module)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines = sink.read().decode(errors="replace").splitlines(keepends=True)
            kept = [x for x in lines if not any(n in x for n in noise)]
            sys.stderr.write("".join(kept))
            sys.stderr.flush()


def open_log(path: Path) -> TextIO:
    """``path`` (run.log) opened for appending, line-buffered (a ``tail -f`` sees each line),
    readable by its owner only, its first line the operator-only notice
    (:data:`fedpriv.reporting.runlog.RUN_LOG_NOTICE`: it holds the per-round sample sizes and
    clip counts that ``rounds.jsonl`` leaves out)."""
    from fedpriv.reporting.runlog import RUN_LOG_NOTICE

    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = not path.is_file() or path.stat().st_size == 0
    log = path.open("a", buffering=1)
    os.chmod(path, 0o600)
    if fresh:
        log.write(f"# {RUN_LOG_NOTICE}\n")
    return log
