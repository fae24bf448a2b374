"""JAX's persistent compilation cache for every process that trains or evaluates on JAX.

An MP run on one GPU spent ~10 s of its first round compiling the cohort's training loop and
the evaluations (XLA), and every run of a grid compiled the same programs again. With the
cache, a process looks a program up by its hash (HLO, shapes, devices, JAX and XLA versions)
in a folder and loads it instead of compiling: on an H200, round 1 of an MP run took 4.5 s
with the cache warm against 11.9 s without.

What a cache entry holds: the compiled program, with the constants of its trace (the model's
architecture and the run's hyperparameters: learning rate, clip norm, noise multiplier,
shapes). Never client data, model weights or noise seeds: those are arguments of every
compiled function (``fedpriv.clients.compiled``: ``consts`` and the carry are passed in, not
closed over), and ``tests/test_compile_cache.py`` scans the entries for a client's bytes.
The folder is created readable by its owner only.

Set up through the environment before JAX is imported (JAX reads ``JAX_*`` variables once,
at import), so the processes a run starts (Ray's workers) inherit it:

- ``FEDPRIV_COMPILE_CACHE`` = a folder, or ``off``; default ``$XDG_CACHE_HOME/fedpriv/xla``
  (``~/.cache/fedpriv/xla``);
- a ``JAX_COMPILATION_CACHE_DIR`` already set wins (the user's own cache);
- entries of every compile time are kept (``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` = 0:
  a round's evaluation compiles in under JAX's default 1 s, dozens of times per grid);
- the folder is bounded (:data:`MAX_BYTES`, least recently used first) where ``filelock`` is
  installed, which also makes concurrent writers (grid cells side by side) safe.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ENV = "FEDPRIV_COMPILE_CACHE"
OFF = ("off", "0", "false", "no")
MAX_BYTES = 4 << 30  # 4 GiB: an MP grid's programs take ~10 MB
JAX_DIR = "JAX_COMPILATION_CACHE_DIR"


def cache_folder() -> Path | None:
    """The folder :data:`ENV` names (None when ``off``), else the user's cache folder."""
    choice = os.environ.get(ENV, "").strip()
    if choice.lower() in OFF:
        return None
    if choice:
        return Path(choice).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fedpriv" / "xla"


def configure() -> Path | None:
    """Point JAX at the cache through the environment (unless the user set their own or
    turned it off, or neither ``KERAS_BACKEND=jax`` nor an imported JAX says JAX is in use);
    the folder in use, or None. Set in ``jax.config`` too when JAX is
    imported already and has not compiled anything yet (its cache is set up at the first
    compilation)."""
    if os.environ.get(JAX_DIR):
        return Path(os.environ[JAX_DIR])
    jax = sys.modules.get("jax")  # None also where an import of it is blocked
    if os.environ.get("KERAS_BACKEND") != "jax" and jax is None:
        return None  # TensorFlow: nothing to set up, no folder made
    folder = cache_folder()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None  # read-only home: run without a cache
    settings = {JAX_DIR: str(folder), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    if importlib.util.find_spec("filelock") is not None:
        settings["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(MAX_BYTES)
    for key, value in settings.items():
        os.environ.setdefault(key, value)
    if jax is not None:
        _set_in_jax(jax, settings)
    return folder


def _set_in_jax(jax, settings: dict[str, str]) -> None:
    """The settings in an imported JAX's config (no effect once it has compiled)."""
    jax.config.update("jax_compilation_cache_dir", settings[JAX_DIR])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    if "JAX_COMPILATION_CACHE_MAX_SIZE" in settings:
        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
