"""CIFAR-10 and CIFAR-100 (HDP §VII, Table II) from the python pickle batches at ``data_path``.

Layouts (Krizhevsky's own archives, unpacked; nothing is downloaded):

- CIFAR-10: ``cifar-10-batches-py/`` with ``data_batch_1`` … ``data_batch_5`` (training, 50,000)
  and ``test_batch`` (10,000); ``batches.meta`` is not needed.
- CIFAR-100: ``cifar-100-python/`` with ``train`` (50,000) and ``test`` (10,000); the fine labels
  (100 classes) are used, ``meta`` is not needed.

Each file is a pickle (``encoding="bytes"``) of a dict with ``b"data"``, an (N, 3072) uint8 array
whose rows are channels-first 3×32×32 images (1024 red, 1024 green, 1024 blue values, each plane
row-major), and ``b"labels"`` (CIFAR-10) or ``b"fine_labels"`` (CIFAR-100). Images become float32
(N, 32, 32, 3) in [0, 1]: ``x[n, i, j, c] = data[n, 1024·c + 32·i + j] / 255``.

``data_path`` is that folder or its parent (which holds the folder by its standard name).
The pickles are read by an unpickler that resolves only numpy's array and dtype constructors
(:class:`ArrayUnpickler`), so a tampered batch file cannot run code.

Splits (HDP §VII: "only the EMNIST dataset is modified to exhibit the non-i.i.d property", so
CIFAR is IID; n = 500 clients, 100 training images each):

- the training batches are partitioned over the clients: ``iid`` (stratified equal shares, the
  paper's) or ``dirichlet`` (label Dirichlet(α), not the paper's);
- each client's test set is its share of the test batch: class c's test images are dealt over
  the clients in proportion to the clients' training counts of class c (largest remainder), so
  every test image belongs to exactly one client and a client's test labels follow its training
  labels (IID: 20 test images a client at n = 500);
- the server's validation and test sets are the stratified halves of the test batch.

The server's sets and the clients' test sets are drawn from the same official test batch
(both held out from training; no training image is ever evaluated on).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from fedpriv import seeds
from fedpriv.data.partition import (
    check_partition,
    image_partition,
    split_by_class_counts,
    stratified_train_test,
)
from fedpriv.data.types import ClientData, DataError, FederatedData
from fedpriv.seeds import derive_seed

PARTITIONS = ("iid", "dirichlet")
LAYOUTS = {
    "cifar10": {
        "folder": "cifar-10-batches-py",
        "train": tuple(f"data_batch_{i}" for i in range(1, 6)),
        "test": "test_batch",
        "labels": b"labels",
        "classes": 10,
        "name": "CIFAR-10",
        "expected": "the CIFAR-10 python batches (data_batch_1..5, test_batch)",
    },
    "cifar100": {
        "folder": "cifar-100-python",
        "train": ("train",),
        "test": "test",
        "labels": b"fine_labels",
        "classes": 100,
        "name": "CIFAR-100",
        "expected": "the CIFAR-100 python files (train, test)",
    },
}


def cifar_root(data_path: str, dataset: str) -> Path:
    """The folder holding ``dataset``'s batch files: ``data_path`` itself or
    ``data_path/<standard folder name>``. Raises a one-line :class:`DataError` that names the
    first file missing from the candidate that holds most of them."""
    layout = LAYOUTS[dataset]
    names = (*layout["train"], layout["test"])
    base = Path(data_path).expanduser()
    candidates = (base, base / layout["folder"])
    for folder in candidates:
        if all((folder / name).is_file() for name in names):
            return folder
    best = max(candidates, key=lambda f: sum((f / n).is_file() for n in names))
    missing = next(n for n in names if not (best / n).is_file())
    shown = f"{layout['folder']}/{missing}" if best == base else f"{best.name}/{missing}"
    raise DataError(
        "data-path",
        data_path,
        layout["expected"],
        problem=f"no {shown} (looked in {base} and {base / layout['folder']})",
    )


NUMPY_MODULES = ("numpy", "numpy.core.multiarray", "numpy._core.multiarray")
NUMPY_MODULES += ("numpy.core.numeric", "numpy._core.numeric")
NUMPY_NAMES = ("_reconstruct", "ndarray", "dtype", "_frombuffer", "scalar")
PLAIN_GLOBALS = (("_codecs", "encode"),)  # bytes in a protocol-2 pickle written by Python 3


class ArrayUnpickler(pickle.Unpickler):
    """An unpickler for dicts of lists and numpy arrays: any other global is refused."""

    def find_class(self, module: str, name: str) -> object:
        if (module in NUMPY_MODULES and name in NUMPY_NAMES) or (module, name) in PLAIN_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR batch")


def read_batch(path: Path, label_key: bytes, data_path: str) -> tuple[np.ndarray, np.ndarray]:
    """One pickle batch as float32 (N, 32, 32, 3) in [0, 1] and int64 labels (see module)."""
    try:
        with open(path, "rb") as f:
            batch = ArrayUnpickler(f, encoding="bytes").load()
        data = np.asarray(batch[b"data"], dtype=np.uint8)
        labels = np.asarray(batch[label_key], dtype=np.int64)
    except (OSError, pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as err:
        raise DataError(
            "data-path",
            data_path,
            f"a CIFAR pickle with b'data' and {label_key!r}",
            problem=f"{path.name} is not readable ({type(err).__name__}: {err})",
        ) from None
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise DataError(
            "data-path",
            data_path,
            "b'data' of shape (N, 3072) and N labels",
            problem=f"{path.name} holds data {data.shape} and {len(labels)} labels",
        )
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return (images.astype(np.float32) / 255.0), labels


def read_cifar(data_path: str, dataset: str) -> tuple:
    """``(x_train, y_train, x_test, y_test)`` of CIFAR-10 / CIFAR-100 at ``data_path``."""
    layout = LAYOUTS[dataset]
    root = cifar_root(data_path, dataset)
    parts = [read_batch(root / name, layout["labels"], data_path) for name in layout["train"]]
    x_test, y_test = read_batch(root / layout["test"], layout["labels"], data_path)
    y_train = np.concatenate([p[1] for p in parts])
    bad = (y_train < 0) | (y_train >= layout["classes"])
    if bad.any() or (y_test < 0).any() or (y_test >= layout["classes"]).any():
        raise DataError(
            "data-path",
            data_path,
            f"labels in 0..{layout['classes'] - 1} ({layout['name']})",
            problem="a label is out of range",
        )
    return np.concatenate([p[0] for p in parts]), y_train, x_test, y_test


def deal_test_set(
    y_test: np.ndarray, train_counts: np.ndarray, rng: np.random.Generator
) -> list[np.ndarray]:
    """Client index lists into ``y_test``: class c's T_c test examples are apportioned over the
    clients proportionally to their training counts n_ic = ``train_counts[i, c]``: client i gets
    ⌊T_c · n_ic / Σ_i n_ic⌋, and the leftover units go to the largest remainders, ties broken
    at random (CIFAR-100 IID at 500 clients: 100 test images of a class, 1 training image of it
    per client, so every remainder ties; a fixed tie order would give all to the first 100).
    Then dealt with :func:`split_by_class_counts`."""
    classes = train_counts.shape[1]
    per_class = np.bincount(y_test, minlength=classes)[:classes]
    counts = np.zeros_like(train_counts)
    for c in range(classes):
        weights = train_counts[:, c].astype(np.float64)
        if not weights.sum():
            continue
        quota = per_class[c] * weights / weights.sum()
        counts[:, c] = np.floor(quota).astype(np.int64)
        shuffled = rng.permutation(len(quota))
        order = shuffled[np.argsort(-(quota - counts[:, c])[shuffled], kind="stable")]
        counts[order[: int(per_class[c] - counts[:, c].sum())], c] += 1
    return split_by_class_counts(y_test, counts, rng)


def load_cifar_federated(
    dataset: str,
    *,
    data_path: str,
    partition: str,
    num_clients: int,
    seed: int,
    dirichlet_alpha: float = 0.5,
) -> FederatedData:
    """CIFAR-10 / CIFAR-100 from ``data_path`` split over ``num_clients`` clients (module doc)."""
    layout = LAYOUTS[dataset]
    check_partition(dataset, partition, PARTITIONS)
    x_train, y_train, x_test, y_test = read_cifar(data_path, dataset)
    classes = int(layout["classes"])
    parts, info = image_partition(
        x_train,
        y_train,
        partition=partition,
        num_clients=num_clients,
        seed=seed,
        dirichlet_alpha=dirichlet_alpha,
        num_classes=classes,
    )
    train_counts = np.array(info["client_class_counts"], dtype=np.int64)
    tests = deal_test_set(y_test, train_counts, seeds.stream(seed, "test-deal"))
    empty = [i for i, t in enumerate(tests) if len(t) == 0]
    if empty:
        raise DataError(
            "num-clients",
            num_clients,
            "fewer clients, or partition iid (each client needs a test image)",
            problem=f"client {empty[0]} would get no test image",
        )
    clients = [
        ClientData(x_train[part], y_train[part], x_test[test], y_test[test])
        for part, test in zip(parts, tests)
    ]
    x_val, y_val, x_srv, y_srv = stratified_train_test(
        x_test, y_test, 0.5, derive_seed(seed, "val-test-split")
    )
    info.update(source=f"{layout['folder']} at {data_path}", dataset=dataset, partition=partition)
    return FederatedData(clients, x_val, y_val, x_srv, y_srv, classes, (32, 32, 3), info)
