"""EMNIST / FEMNIST by writer (HDP §VII, Table II) from ``data_path``: LEAF json or TFF h5.

Layouts (detected; nothing is downloaded):

- ``leaf`` — LEAF's FEMNIST shards: ``data/train/*.json`` and ``data/test/*.json``, each
  ``{"users": [...], "num_samples": [...], "user_data": {writer: {"x": [[784 floats]], "y":
  [int]}}}``. ``data_path`` may be the folder holding ``train/`` and ``test/``, its parent
  (``…/femnist`` holding ``data/``), or the parent of ``femnist/``.
- ``h5`` — TensorFlow Federated's files ``fed_emnist_digitsonly_train.h5`` +
  ``fed_emnist_digitsonly_test.h5`` (10 classes, 3,383 writers: HDP's EMNIST) or
  ``fed_emnist_train.h5`` + ``fed_emnist_test.h5`` (62 classes), each with groups
  ``examples/<writer>/pixels`` (N, 28, 28) float32 and ``examples/<writer>/label`` (N,).
  ``data_path`` is the folder holding them (digits-only preferred when both are there) or the
  ``…_train.h5`` file itself (its ``…_test.h5`` beside it). Needs ``h5py`` (imported lazily).

Pixels are kept as stored (both sources: float32 in [0, 1]), as (28, 28, 1) images. Classes:
10 when every label is a digit (EMNIST digits, HDP Table II), else 62 (FEMNIST).

Split (partition ``writer``, the only one: the federation is the writers): each client is one
writer, its training and test examples the source's own per-writer train/test split. Writers
with both train and test examples are eligible; ``num-clients`` equal to their number takes them
all (HDP: 3,383), fewer takes a seeded sample of them (sorted by writer id). The server's
validation and test sets are the stratified halves of the chosen writers' test examples (so the
clients' test sets and the server's overlap; both are held out from training).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedpriv import seeds
from fedpriv.data.partition import check_partition, stratified_train_test
from fedpriv.data.types import ClientData, DataError, FederatedData
from fedpriv.seeds import derive_seed

PARTITIONS = ("writer",)
H5_NAMES = ("fed_emnist_digitsonly", "fed_emnist")
EXPECTED = (
    "LEAF FEMNIST json shards (data/train/*.json and data/test/*.json) or TFF's "
    "fed_emnist[_digitsonly]_train.h5 and _test.h5"
)
Writers = dict[str, tuple[np.ndarray, np.ndarray]]


def _leaf_root(base: Path) -> Path | None:
    """The folder holding LEAF's ``train/`` and ``test/`` shards, or None."""
    for folder in (base, base / "data", base / "femnist" / "data"):
        if any((folder / "train").glob("*.json")) and any((folder / "test").glob("*.json")):
            return folder
    return None


def _h5_pair(base: Path) -> tuple[Path, Path] | None:
    """TFF's ``(train, test)`` h5 files at ``base`` (a folder or the train file), or None."""
    if base.is_file() and base.name.endswith("_train.h5"):
        return base, base.with_name(base.name.replace("_train.h5", "_test.h5"))
    for name in H5_NAMES:
        train = base / f"{name}_train.h5"
        if train.is_file():
            return train, base / f"{name}_test.h5"
    return None


def detect_layout(data_path: str) -> tuple[str, tuple[Path, Path]]:
    """``("leaf", (train dir, test dir))`` or ``("h5", (train file, test file))``; a one-line
    :class:`DataError` naming what is missing otherwise."""
    base = Path(data_path).expanduser()
    leaf = _leaf_root(base)
    if leaf is not None:
        return "leaf", (leaf / "train", leaf / "test")
    pair = _h5_pair(base)
    if pair is not None:
        if not pair[1].is_file():
            raise DataError("data-path", data_path, EXPECTED, problem=f"no {pair[1].name}")
        return "h5", pair
    half = next((f for f in (base, base / "data") if any((f / "train").glob("*.json"))), None)
    problem = (
        f"no {half.name}/test/*.json beside {half.name}/train"
        if half is not None
        else "no data/train/*.json (LEAF) and no fed_emnist_digitsonly_train.h5 (TFF)"
    )
    raise DataError("data-path", data_path, EXPECTED, problem=problem)


def _shard_writers(path: Path, data_path: str) -> Writers:
    """One LEAF json shard: writer -> (x (n, 28, 28, 1) float32, y (n,) int64)."""
    try:
        shard = json.loads(path.read_text())
        out = {}
        for writer in shard["users"]:
            record = shard["user_data"][writer]
            x = np.asarray(record["x"], dtype=np.float32).reshape(-1, 28, 28, 1)
            y = np.asarray(record["y"], dtype=np.int64)
            if len(x) != len(y):
                raise ValueError(f"writer {writer}: {len(x)} images and {len(y)} labels")
            out[str(writer)] = (x, y)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(
            "data-path",
            data_path,
            "LEAF json with users and user_data {x: [[784 floats]], y: [int]}",
            problem=f"{path.name} is not readable ({type(err).__name__}: {err})",
        ) from None
    return out


def read_leaf(folder: Path, data_path: str) -> Writers:
    """Every writer of the shards in ``folder`` (a writer split over shards is joined)."""
    writers: dict[str, list] = {}
    for path in sorted(folder.glob("*.json")):
        for writer, pair in _shard_writers(path, data_path).items():
            writers.setdefault(writer, []).append(pair)
    return {
        w: (np.concatenate([p[0] for p in ps]), np.concatenate([p[1] for p in ps]))
        for w, ps in writers.items()
    }


class _H5Source:
    """One TFF h5 file read lazily: its writer ids, then one writer at a time."""

    def __init__(self, path: Path, data_path: str) -> None:
        self.path, self.data_path = path, data_path
        try:
            import h5py
        except ImportError:
            raise DataError(
                "data-path", data_path, "h5py installed to read TFF's h5 files"
            ) from None
        try:
            self.file = h5py.File(path, "r")
            self.group = self.file["examples"]
        except (OSError, KeyError) as err:
            raise DataError(
                "data-path", data_path, "an h5 file with groups examples/<writer>",
                problem=f"{path.name} is not readable ({type(err).__name__}: {err})",
            ) from None  # fmt: skip

    def writers(self) -> list[str]:
        return list(self.group.keys())

    def read(self, writer: str) -> tuple[np.ndarray, np.ndarray]:
        try:
            x = np.asarray(self.group[writer]["pixels"], dtype=np.float32).reshape(-1, 28, 28, 1)
            y = np.asarray(self.group[writer]["label"], dtype=np.int64).reshape(-1)
        except (KeyError, ValueError) as err:
            raise DataError(
                "data-path", self.data_path, "examples/<writer>/pixels (N, 28, 28) and label (N,)",
                problem=f"{self.path.name} writer {writer}: {type(err).__name__}: {err}",
            ) from None  # fmt: skip
        return x, y


def choose_writers(eligible: list[str], num_clients: int, seed: int, data_path: str) -> list:
    """All ``eligible`` writers (sorted) when ``num_clients`` equals their number, else a seeded
    sample of ``num_clients`` of them, sorted by writer id."""
    eligible = sorted(eligible)
    if num_clients > len(eligible):
        raise DataError(
            "num-clients",
            num_clients,
            f"at most {len(eligible)} (the writers with train and test examples in {data_path})",
        )
    if num_clients == len(eligible):
        return eligible
    pick = seeds.stream(seed, "emnist-writers").choice(len(eligible), num_clients, replace=False)
    return [eligible[i] for i in sorted(pick)]


def read_writers(data_path: str, num_clients: int, seed: int) -> tuple[str, list, list]:
    """``(layout, writer ids, [(x_train, y_train, x_test, y_test) per writer])``."""
    layout, (train, test) = detect_layout(data_path)
    if layout == "leaf":
        tr, te = read_leaf(train, data_path), read_leaf(test, data_path)
        chosen = choose_writers([w for w in tr if w in te], num_clients, seed, data_path)
        return layout, chosen, [(*tr[w], *te[w]) for w in chosen]
    tr_src = _H5Source(train, data_path)
    try:
        te_src = _H5Source(test, data_path)
        try:
            eligible = sorted(set(tr_src.writers()) & set(te_src.writers()))
            chosen = choose_writers(eligible, num_clients, seed, data_path)
            return layout, chosen, [(*tr_src.read(w), *te_src.read(w)) for w in chosen]
        finally:
            te_src.file.close()
    finally:
        tr_src.file.close()


def _num_classes(splits: list, data_path: str) -> int:
    labels = np.concatenate([np.concatenate([s[1], s[3]]) for s in splits])
    if labels.size and (labels.min() < 0 or labels.max() > 61):
        raise DataError(
            "data-path", data_path, "EMNIST labels in 0..61", problem="a label is out of range"
        )
    return 10 if labels.size == 0 or labels.max() < 10 else 62


def load_emnist_federated(
    *, data_path: str, partition: str, num_clients: int, seed: int
) -> FederatedData:
    """EMNIST / FEMNIST from ``data_path``, one client per writer (see the module docstring)."""
    check_partition("emnist", partition, PARTITIONS)
    layout, writers, splits = read_writers(data_path, num_clients, seed)
    empty = [w for w, s in zip(writers, splits) if len(s[1]) == 0 or len(s[3]) == 0]
    if empty:
        raise DataError("data-path", data_path, EXPECTED, problem=f"writer {empty[0]} is empty")
    classes = _num_classes(splits, data_path)
    clients = [ClientData(*s) for s in splits]
    x_pool = np.concatenate([s[2] for s in splits])
    y_pool = np.concatenate([s[3] for s in splits])
    x_val, y_val, x_test, y_test = stratified_train_test(
        x_pool, y_pool, 0.5, derive_seed(seed, "val-test-split")
    )
    info = {
        "source": f"{layout} at {data_path}",
        "dataset": "emnist",
        "partition": partition,
        "layout": layout,
        "writers": writers,
        "client_class_counts": [np.bincount(s[1], minlength=classes).tolist() for s in splits],
    }
    return FederatedData(clients, x_val, y_val, x_test, y_test, classes, (28, 28, 1), info)
