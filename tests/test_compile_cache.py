"""JAX's persistent compilation cache (clients/compile_cache.py): where it is, who sets it,
and that an entry never holds what the run must keep from readers of the folder: client
data, model weights, noise seeds (arguments of every compiled function, never constants)."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from fedpriv.clients import compile_cache

ROOT = Path(__file__).resolve().parent.parent


def _entries(folder: Path) -> list[bytes]:
    """Every cache entry's serialized program (decompressed the way JAX compressed it)."""
    try:
        import zstandard
    except ImportError:
        zstandard = None
    out = []
    for path in folder.glob("*-cache"):
        raw = path.read_bytes()
        try:
            out.append(zlib.decompress(raw))
        except zlib.error:
            out.append(zstandard.ZstdDecompressor().decompress(raw) if zstandard else raw)
    return out


def _windows(array: np.ndarray, size: int = 32) -> list[bytes]:
    data = np.ascontiguousarray(array).tobytes()
    return [data[i : i + size] for i in range(0, len(data) - size + 1, size)][:16]


@pytest.fixture(scope="module")
def cache_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("xla")
    markers = folder.parent / "markers.npz"
    env = dict(os.environ, KERAS_BACKEND="jax", FEDPRIV_COMPILE_CACHE=str(folder))
    env.pop(compile_cache.JAX_DIR, None)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "compile_cache_case.py"), str(markers)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return folder, dict(np.load(markers))


def test_training_fills_the_cache_owner_only(cache_run):
    folder, _ = cache_run
    assert len(list(folder.glob("*-cache"))) >= 3  # train, DP train, evaluate, predict, ...
    assert folder.stat().st_mode & 0o077 == 0


def test_the_scan_finds_a_constant(cache_run):
    """The control closes over an array: its bytes are in an entry (the scan can see them)."""
    folder, markers = cache_run
    entries = _entries(folder)
    assert any(w in e for e in entries for w in _windows(markers["control"]))


@pytest.mark.parametrize("name", ["data", "weights", "noise_seed"])
def test_no_entry_holds_client_bytes(cache_run, name):
    folder, markers = cache_run
    size = 8 if name == "noise_seed" else 32
    found = [w for w in _windows(markers[name], size) for e in _entries(folder) if w in e]
    assert not found, f"{name}: {len(found)} windows of its bytes in the cache"


def test_folder_default_and_switches(tmp_path, monkeypatch):
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.cache_folder() == tmp_path / "fedpriv" / "xla"
    monkeypatch.setenv(compile_cache.ENV, "off")
    assert compile_cache.cache_folder() is None
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "mine"))
    assert compile_cache.cache_folder() == tmp_path / "mine"


def test_configure_sets_the_environment_for_jax_only(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if "JAX" not in k})
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "c"))
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    assert compile_cache.configure() is None
    assert compile_cache.JAX_DIR not in os.environ and not (tmp_path / "c").exists()
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert compile_cache.configure() == tmp_path / "c"
    assert os.environ[compile_cache.JAX_DIR] == str(tmp_path / "c")
    assert os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    monkeypatch.setenv(compile_cache.JAX_DIR, str(tmp_path / "users"))
    assert compile_cache.configure() == tmp_path / "users"  # the user's own cache wins
