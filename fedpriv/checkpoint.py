"""Checkpoints of a run, so a killed run continues where it stopped (SPEC §7).

One file per output directory, ``checkpoint.pkl``, replaced atomically after every
completed round (written to a temporary file, fsynced, renamed: a kill leaves the previous
checkpoint or the new one, never half of one). It holds

- ``round``: the last completed round ``k``, and ``arrays``: the global weights after it
  (a run's :class:`CheckpointWriter` keeps them in a file of their own, ``checkpoint-model-
  <token>.pkl``, named by ``arrays_file``: a model is written once, though a round checkpoints
  it twice, when charged and when recorded; :func:`load_checkpoint` reads it back);
- ``states``: the server-side state of every object of the strategy chain (a DP wrapper's
  accountant, FedAvgM's momentum, FedOpt/FedYogi's moments, IFCA hypotheses, zonal
  super-node assignments and election Generator — whatever the objects hold), captured
  generically by :func:`capture_state`; the sampling and noise Generators only when the
  run sets ``reproducible-noise`` (see below);
- ``fingerprint``: the config it belongs to (``fedpriv.scenarios.config.manifest.fingerprint``).

Next to it, ``run-config.json`` (written when a run starts) names the config of the
directory: :mod:`fedpriv.scenarios.config.manifest` writes, hashes and compares it (a question
about the
run-config mapping, so it is answered in the Flower app, not here).

What is *not* here: node-held state (IFCA leakage ledgers, DP-SGD participations, zone nodes'
releases) stays with the nodes, which keep their own release ledgers in their own state
directories (:mod:`fedpriv.privacy.releases`: every release is charged there before it
leaves the node, a round re-run after a kill included), and Keras client training is seeded
per (seed, round, partition), so it needs no state. Same seed and ``reproducible-noise`` ->
the resumed ``rounds.jsonl`` equals an uninterrupted run's.

An object of the chain names attributes that belong to the process, not to the run (node ids
of the current federation: a restarted simulation numbers its nodes anew) in a class
attribute ``CHECKPOINT_SKIP``; they are neither captured nor restored.

How a checkpoint reader cannot regenerate future noise: by default the round recorder's
sampling Generator and a DP wrapper's noise Generator are
:class:`fedpriv.seeds.SecretGenerator` (seeded from OS entropy, nothing of the config
determines them), and :func:`capture_state` leaves every such Generator out. A resumed run
keeps the fresh OS-entropy Generators its new strategy chain was built with, so neither the
checkpoint nor the config determines any draw after it. With ``reproducible-noise = true``
those Generators are plain seeded ones and are checkpointed like any state: the resumed
``rounds.jsonl`` then equals an uninterrupted run's (and anyone with the checkpoint or the
seed can rebuild the noise: the run is labelled so).

Pickle is used because the state is arbitrary Python (Generators, accountants); a
checkpoint is only ever read by the code that wrote it, from the user's own directory.
"""

from __future__ import annotations

import os
import pickle
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional

import numpy as np

from fedpriv.seeds import SecretGenerator

CHECKPOINT = "checkpoint.pkl"
MODEL_FILES = "checkpoint-model-*.pkl"  # a checkpoint's arrays (CheckpointWriter)
OWN_FILE_BYTES = 1 << 20  # a model from 1 MiB on gets a file of its own
# attributes that link objects (the chain itself, the grid) or hold nothing of the run
LINK_ATTRIBUTES = frozenset({"strategy", "grid", "_grid", "evaluate_fn"})


# --- state of the strategy chain ----------------------------------------------------------------


def capture_state(objects: Iterable[Any]) -> list[dict[str, Any]]:
    """For each object, its attributes except links and callables (picklable ones only).

    Captured together and pickled in one go, so an object shared by two wrappers (one
    Generator) is restored as one shared object. Attributes named in the object's
    ``CHECKPOINT_SKIP`` (process-local: node ids) are left out, and so is every secret
    Generator (:class:`fedpriv.seeds.SecretGenerator`: its state would let the reader
    regenerate the noise and sampling after the checkpoint).
    """
    states = []
    for obj in objects:
        state = {}
        skip = LINK_ATTRIBUTES | frozenset(getattr(obj, "CHECKPOINT_SKIP", ()))
        for name, value in vars(obj).items():
            if name in skip or callable(value) or isinstance(value, SecretGenerator):
                continue
            if not _picklable(value):
                continue
            state[name] = value
        states.append(state)
    return states


PLAIN = (type(None), bool, int, float, complex, str, bytes, np.generic)


def _picklable(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` pickles. Plain data (numbers, strings, numpy arrays of non-object
    dtype, and lists, tuples and dicts of them) is known to without pickling it: a model's
    arrays (26 MB for the MP CNN) were pickled twice a round, once here to test them and
    once in the checkpoint. Anything else is pickled to find out (e.g. a secret Generator
    refuses, inside a container too)."""
    if isinstance(value, PLAIN) or (isinstance(value, np.ndarray) and value.dtype != object):
        return True
    if depth < 3 and type(value) in (list, tuple) and len(value) <= 10_000:
        return all(_picklable(v, depth + 1) for v in value)
    if depth < 3 and type(value) is dict and len(value) <= 10_000:
        return all(_picklable(k, depth + 1) and _picklable(v, depth + 1) for k, v in value.items())
    try:
        pickle.dumps(value)
    except Exception:  # noqa: BLE001  (unpicklable: not part of a checkpoint)
        return False
    return True


def restore_state(objects: Iterable[Any], states: list[dict[str, Any]]) -> None:
    """Put captured attributes back (objects in the same order as captured)."""
    objects = list(objects)
    if len(objects) != len(states):
        raise ValueError(f"checkpoint holds {len(states)} objects, the chain has {len(objects)}")
    for obj, state in zip(objects, states):
        for name, value in state.items():
            setattr(obj, name, value)


# --- files ----------------------------------------------------------------------------------------


def save_checkpoint(output_dir: str | Path, state: Mapping[str, Any]) -> Path:
    """Write ``checkpoint.pkl`` atomically (temporary file, fsync, rename)."""
    return _dump_atomically(Path(output_dir) / CHECKPOINT, dict(state))


def _dump_atomically(path: Path, value: Any) -> Path:
    """``path`` holds ``value`` pickled, or what it held before, never part of it (temporary
    file, fsync, rename); readable by its owner only (the operator's: docs/privacy.md)."""
    tmp = path.with_suffix(".pkl.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.chmod(tmp, 0o600)  # a temporary file left by a kill keeps its mode otherwise
    with os.fdopen(fd, "wb") as fh:
        pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)
    return path


class CheckpointWriter:
    """A run's checkpoints, each model's arrays written once.

    A round checkpoints the same global model twice: when charged (before the model leaves
    the server) and when recorded, or, with fused rounds, round t-1's recorded checkpoint
    holds the model charged a round earlier. Each write of a model the writer has not
    written before puts its arrays in a new ``checkpoint-model-<token>.pkl`` (atomic, like
    the checkpoint); ``checkpoint.pkl`` then names that file (``arrays_file``) and is
    replaced atomically, so it never names a file not wholly on disk; model files it no
    longer names are removed after. The MP CNN's round writes 26 MB once, not twice
    (measured: two checkpoints a round 37-51 ms -> 20-22 ms on the 2-CPU machine). A model
    under :data:`OWN_FILE_BYTES` is written in the checkpoint, as :func:`save_checkpoint`
    does.
    """

    def __init__(self, output_dir: str | Path) -> None:
        self.output_dir = Path(output_dir)
        self._model: Any = None  # the model last written (identity), and its file
        self._file = ""

    def write(self, state: Mapping[str, Any], model: Any) -> Path:
        """Checkpoint ``state``, whose ``arrays`` are those of ``model`` (any object: the
        same object means the same arrays, already written). A model under
        :data:`OWN_FILE_BYTES` stays in the checkpoint (a file more costs more than it saves)."""
        if sum(np.asarray(a).nbytes for a in state["arrays"]) < OWN_FILE_BYTES:
            self._model, self._file = None, ""
            path = save_checkpoint(self.output_dir, state)
            self._remove_model_files_but("")
            return path
        if model is not self._model or not self._file:
            name = f"checkpoint-model-{secrets.token_hex(6)}.pkl"
            _dump_atomically(self.output_dir / name, list(state["arrays"]))
            self._model, self._file = model, name
        rest = {k: v for k, v in state.items() if k != "arrays"}
        path = save_checkpoint(self.output_dir, {**rest, "arrays_file": self._file})
        self._remove_model_files_but(self._file)
        return path

    def _remove_model_files_but(self, name: str) -> None:
        """Model files the checkpoint no longer names (only after it was replaced)."""
        for stale in self.output_dir.glob(MODEL_FILES):
            if stale.name != name:
                stale.unlink(missing_ok=True)


FINAL_WEIGHTS = "final_weights.npz"  # a finished run's final model (np.savez: arr_0, arr_1, ...)


def share_final_weights(output_dir: str | Path, weights: list[np.ndarray]) -> bool:
    """Once a run has written ``final_weights.npz``, the checkpoint names that file for its
    arrays, and its own model file (the same arrays again) is removed. This is done only
    when the two hold equal arrays. Returns whether it was done.

    A finished run is never resumed. Its checkpoint still loads (:func:`load_checkpoint`),
    and the model is stored twice (``final_model.keras``, ``final_weights.npz``), not
    three times: a 2-round MP CNN run writes 52 MB, not 78 MB.
    """
    out = Path(output_dir)
    path = out / CHECKPOINT
    if not path.exists() or not (out / FINAL_WEIGHTS).exists():
        return False
    with path.open("rb") as fh:
        checkpoint = pickle.load(fh)
    own = str(checkpoint.get("arrays_file", ""))
    if not own or own == FINAL_WEIGHTS:
        return False
    with (out / own).open("rb") as fh:
        arrays = pickle.load(fh)
    same = len(arrays) == len(weights) and all(
        np.array_equal(np.asarray(a), np.asarray(b)) and np.asarray(a).dtype == np.asarray(b).dtype
        for a, b in zip(arrays, weights)
    )
    if not same or len(_npz_arrays(out / FINAL_WEIGHTS)) != len(arrays):
        return False
    save_checkpoint(out, {**checkpoint, "arrays_file": FINAL_WEIGHTS})
    (out / own).unlink(missing_ok=True)
    return True


def _npz_arrays(path: Path) -> list[np.ndarray]:
    """The arrays of an ``np.savez(path, *arrays)`` file, in order."""
    with np.load(path, allow_pickle=False) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def load_checkpoint(output_dir: str | Path) -> Optional[dict[str, Any]]:
    """The checkpoint of ``output_dir``, or None when there is none.

    The package a checkpoint's state references (the accountants) is imported whole first
    (its submodules too: the package loads them on first use): the unpickler locks a
    submodule (``fedpriv.privacy.accounting.rounds``) before its package, which deadlocks
    into an ImportError against another thread importing the package (the simulation imports
    the ClientApp module while the ServerApp reads the checkpoint)."""
    path = Path(output_dir) / CHECKPOINT
    if not path.exists():
        return None
    import fedpriv.privacy.accounting.gaussian  # noqa: F401  (accountant, events, pld, rdp, rounds)

    with path.open("rb") as fh:
        checkpoint = pickle.load(fh)
    if "arrays_file" in checkpoint:  # written by a CheckpointWriter
        arrays_path = path.parent / Path(checkpoint.pop("arrays_file")).name
        if arrays_path.name == FINAL_WEIGHTS:  # a finished run (share_final_weights)
            checkpoint["arrays"] = _npz_arrays(arrays_path)
        else:
            with arrays_path.open("rb") as fh:
                checkpoint["arrays"] = pickle.load(fh)
    return checkpoint
