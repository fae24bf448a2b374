"""Alzheimer MRI (MP §7.1) from a local path: image-folder or Hugging Face parquet layout.

Classes: 0 Mild_Demented, 1 Moderate_Demented, 2 Non_Demented, 3 Very_Mild_Demented; images are
decoded grayscale with OpenCV, resized to 128×128 (``INTER_AREA``) when needed, scaled to [0, 1].

Layouts (``data_format``; ``auto`` detects them):

- ``imagefolder`` — ``data_path/<Class>/*.jpg|jpeg|png|bmp|tif``, or ``data_path/train/<Class>`` and
  ``data_path/test/<Class>`` (then that is the train/test split). Class folder names are matched
  ignoring case, ``_``, ``-`` and spaces (``Mild_Demented`` = ``MildDemented`` = ``Mild Demented``).
  A ``data_path`` holding exactly one sub-folder (an unpacked archive) is descended into.
- ``parquet`` — one ``.parquet`` file, or a folder with ``*.parquet`` files anywhere below it
  (e.g. ``data/train-*.parquet`` + ``data/test-*.parquet``), columns ``image`` (a struct with
  ``bytes``, or raw bytes) and ``label`` (int 0..3). Files whose name starts with ``test`` form the
  test set when other files exist too. Needs ``pyarrow`` (the ``parquet`` extra), imported lazily.

When the source has no train/test split, a stratified 80/20 split is made with the seed
(6400 images → 5120 / 1280). The server gets the test set, halved stratified into validation
(pretraining initial parameters) and final test.

Client splits use the MP class-count tables on the training set (rows = clients, columns =
classes; :mod:`fedpriv.data.partition`): ``homogeneous`` (MP Table 2, 4 clients), ``non-iid``
(MP Table 3, 4 clients), ``cia`` (MP Table 8, 3 clients). With the full training totals
(724, 49, 2566, 1781) the counts are exact. MP Table 8 as printed does not fit the training set:
its rows add up to 5220 images and 824 of class 0 (vs 5120 / 724); we read client 2's class 0 as
80, not 180, which makes every column equal the training totals, and record this in
``info["cia_reading"]``. When the training set has fewer images of a class than a table's column
(another split of the data, a tiny fixture), that column is scaled down proportionally with
largest-remainder rounding (``info["table_scaled"]`` is then True). ``iid`` and ``dirichlet`` are
also accepted. Each client splits stratified 80/20 into train/test.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.data.partition import (
    CIA_READING,
    MP_CIA,
    MP_CIA_AS_PRINTED,
    MP_HOMOGENEOUS,
    MP_NON_IID,
    TEST_TOTALS,
    TRAIN_TOTALS,
    check_partition,
    check_table_clients,
    image_clients,
    split_by_class_counts,
    stratified_train_test,
)
from fedpriv.data.types import DataError, FederatedData
from fedpriv.seeds import derive_seed

__all__ = [
    "CIA_READING",
    "CLASS_NAMES",
    "MP_CIA",
    "MP_CIA_AS_PRINTED",
    "MP_HOMOGENEOUS",
    "MP_NON_IID",
    "TEST_TOTALS",
    "TRAIN_TOTALS",
    "load_alzheimer_federated",
    "read_alzheimer",
    "split_by_class_counts",
]

CLASS_NAMES = ("Mild_Demented", "Moderate_Demented", "Non_Demented", "Very_Mild_Demented")
PARTITIONS = ("homogeneous", "non-iid", "cia", "iid", "dirichlet")
IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff")
SIZE = 128
_FOLDER_HELP = (
    "a folder with one sub-folder per class ("
    + ", ".join(CLASS_NAMES)
    + "), or train/ and test/ folders holding them, or .parquet files with image and label columns"
)


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_CLASS_KEYS = {_norm(name): i for i, name in enumerate(CLASS_NAMES)}


# --- layout detection ---------------------------------------------------------------------------


def _subdirs(path: Path) -> dict[str, Path]:
    return {_norm(p.name): p for p in sorted(path.iterdir()) if p.is_dir()}


def _find_parquet(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if path.suffix.lower() == ".parquet" else []
    return sorted(p for p in path.rglob("*.parquet") if p.is_file())


def _image_root(path: Path) -> Path:
    """Descend through single-sub-folder wrappers (an unpacked archive) to the dataset root."""
    for _ in range(3):
        subs = _subdirs(path)
        if set(subs) & (set(_CLASS_KEYS) | {"train", "test"}) or len(subs) != 1:
            return path
        path = next(iter(subs.values()))
    return path


def detect_format(data_path: str, data_format: str) -> str:
    """``imagefolder`` or ``parquet`` for ``data_path`` (checks existence and emptiness)."""
    if not data_path:
        raise DataError(
            "data-path", data_path, "a path to the Alzheimer MRI data (" + _FOLDER_HELP + ")",
            problem="dataset alzheimer needs a local data path",
        )  # fmt: skip
    path = Path(data_path).expanduser()
    if not path.exists():
        raise DataError("data-path", data_path, _FOLDER_HELP, problem="the path does not exist")
    if data_format == "parquet" or (data_format == "auto" and _find_parquet(path)):
        if not _find_parquet(path):
            raise DataError(
                "data-path", data_path, "a .parquet file or a folder holding .parquet files",
                problem="no .parquet files found",
            )  # fmt: skip
        return "parquet"
    if path.is_file():
        raise DataError("data-path", data_path, _FOLDER_HELP, problem="a file, not a folder")
    if data_format == "auto" and not any(
        p.suffix.lower() in IMAGE_EXTS for p in _image_root(path).rglob("*")
    ):
        raise DataError("data-path", data_path, _FOLDER_HELP, problem="no images or parquet found")
    return "imagefolder"


# --- image folder -------------------------------------------------------------------------------


def _class_files(folder: Path, data_path: str) -> list[tuple[list[Path], int]]:
    """The image files of each class folder under ``folder``; errors name a missing class."""
    subs = _subdirs(folder)
    out = []
    for key, label in _CLASS_KEYS.items():
        if key not in subs:
            raise DataError(
                "data-path",
                data_path,
                _FOLDER_HELP,
                problem=f"class folder {CLASS_NAMES[label]} is missing in {folder}",
            )
        files = sorted(
            p for p in subs[key].rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_EXTS
        )
        if not files:
            raise DataError(
                "data-path",
                data_path,
                _FOLDER_HELP,
                problem=f"class folder {subs[key]} has no images ({', '.join(IMAGE_EXTS)})",
            )
        out.append((files, label))
    return out


def _decode(buf: bytes | np.ndarray, what: str, data_path: str) -> np.ndarray:
    """Decode one encoded image to uint8 (128, 128) grayscale."""
    import cv2

    arr = np.frombuffer(buf, dtype=np.uint8) if isinstance(buf, (bytes, bytearray)) else buf
    img = cv2.imdecode(arr, cv2.IMREAD_GRAYSCALE) if arr.size else None
    if img is None:
        raise DataError(
            "data-path", data_path, "readable JPEG/PNG images", problem=f"cannot decode {what}"
        )
    if img.shape != (SIZE, SIZE):
        img = cv2.resize(img, (SIZE, SIZE), interpolation=cv2.INTER_AREA)
    return img


def _to_float(images: np.ndarray) -> np.ndarray:
    return (images.astype(np.float32) / 255.0)[..., None]


def _read_folder(folder: Path, data_path: str) -> tuple[np.ndarray, np.ndarray]:
    per_class = _class_files(folder, data_path)
    files = [f for fs, _ in per_class for f in fs]
    labels = np.concatenate([np.full(len(fs), c, dtype=np.int64) for fs, c in per_class])
    images = np.empty((len(files), SIZE, SIZE), dtype=np.uint8)
    for i, f in enumerate(files):
        images[i] = _decode(np.fromfile(f, dtype=np.uint8), f"image file {f}", data_path)
    return _to_float(images), labels


def read_imagefolder(data_path: str) -> tuple:
    """``(x_train, y_train, x_test, y_test, source)``; test arrays None when there is no split."""
    root = _image_root(Path(data_path).expanduser())
    subs = _subdirs(root)
    if "train" in subs and "test" in subs:
        _class_files(subs["train"], data_path)  # check both trees before decoding anything
        _class_files(subs["test"], data_path)
        x_tr, y_tr = _read_folder(subs["train"], data_path)
        x_te, y_te = _read_folder(subs["test"], data_path)
        return x_tr, y_tr, x_te, y_te, f"image folder {root} (train/ and test/)"
    x, y = _read_folder(root, data_path)
    return x, y, None, None, f"image folder {root}"


# --- parquet ------------------------------------------------------------------------------------


def _pyarrow(data_path: str):
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet as pq
    except ImportError as err:
        raise DataError(
            "data-format",
            "parquet",
            "an installed, working pyarrow (pip install 'fedpriv[parquet]'), or the imagefolder "
            "layout",
            problem=f"reading {data_path} needs pyarrow, which failed to import ({err})",
        ) from err
    return pq


def _check_parquet_schema(pq, files: list[Path], data_path: str) -> None:
    import pyarrow as pa

    for f in files:
        try:
            schema = pq.read_schema(f)
        except Exception as err:  # noqa: BLE001  (pyarrow raises several types)
            raise DataError(
                "data-path", data_path, "readable parquet files", problem=f"cannot read {f}: {err}"
            ) from err
        missing = [c for c in ("image", "label") if c not in schema.names]
        if missing:
            raise DataError(
                "data-path",
                data_path,
                "parquet files with columns image (struct with bytes, or binary) and label (int)",
                problem=f"{f.name} has no {' and no '.join(missing)} column "
                f"(columns: {', '.join(schema.names)})",
            )
        image_type = schema.field("image").type
        ok_image = (
            pa.types.is_struct(image_type) and image_type.get_field_index("bytes") >= 0
        ) or (pa.types.is_binary(image_type) or pa.types.is_large_binary(image_type))
        if not ok_image or not pa.types.is_integer(schema.field("label").type):
            raise DataError(
                "data-path",
                data_path,
                "column image as struct<bytes: binary, ...> or binary, and label as an integer",
                problem=f"{f.name} has image: {image_type}, label: {schema.field('label').type}",
            )


def _read_parquet_file(pq, f: Path, data_path: str) -> tuple[np.ndarray, np.ndarray]:
    import pyarrow as pa

    table = pq.read_table(f, columns=["image", "label"])
    column = table.column("image").combine_chunks()
    if pa.types.is_struct(column.type):
        column = column.field("bytes")
    blobs = column.to_pylist()
    labels = table.column("label").to_pylist()
    bad = [v for v in labels if v is None or not 0 <= v <= 3]
    if bad:
        raise DataError(
            "data-path",
            data_path,
            "labels 0..3 (" + ", ".join(f"{i} {n}" for i, n in enumerate(CLASS_NAMES)) + ")",
            problem=f"{f.name} has label {bad[0]!r}",
        )
    images = np.empty((len(blobs), SIZE, SIZE), dtype=np.uint8)
    for i, blob in enumerate(blobs):
        images[i] = _decode(blob or b"", f"row {i} of {f.name}", data_path)
    return _to_float(images), np.asarray(labels, dtype=np.int64)


def _read_parquet_files(pq, files: list[Path], data_path: str) -> tuple[np.ndarray, np.ndarray]:
    parts = [_read_parquet_file(pq, f, data_path) for f in files]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def read_parquet(data_path: str) -> tuple:
    """``(x_train, y_train, x_test, y_test, source)`` from the Hugging Face parquet layout."""
    files = _find_parquet(Path(data_path).expanduser())
    pq = _pyarrow(data_path)
    _check_parquet_schema(pq, files, data_path)
    test = [f for f in files if f.name.lower().startswith("test")]
    train = [f for f in files if f not in test]
    if test and train:
        x_tr, y_tr = _read_parquet_files(pq, train, data_path)
        x_te, y_te = _read_parquet_files(pq, test, data_path)
        return x_tr, y_tr, x_te, y_te, f"parquet {data_path} (train/test files)"
    x, y = _read_parquet_files(pq, files, data_path)
    return x, y, None, None, f"parquet {data_path}"


# --- loader -------------------------------------------------------------------------------------


def read_alzheimer(data_path: str, data_format: str = "auto", seed: int = 0) -> tuple:
    """Read the data and return ``(x_train, y_train, x_test, y_test, source)``.

    Without a train/test split in the source, a stratified 80/20 split with ``seed`` is made.
    """
    fmt = detect_format(data_path, data_format)
    if fmt == "parquet":
        x_tr, y_tr, x_te, y_te, source = read_parquet(data_path)
    else:
        x_tr, y_tr, x_te, y_te, source = read_imagefolder(data_path)
    if x_te is None:
        x_tr, y_tr, x_te, y_te = stratified_train_test(
            x_tr, y_tr, 0.2, derive_seed(seed, "alzheimer-split")
        )
        source += ", stratified 80/20 train/test split made with the seed"
    return x_tr, y_tr, x_te, y_te, source


def load_alzheimer_federated(
    *,
    data_path: str,
    data_format: str = "auto",
    partition: str,
    num_clients: int,
    seed: int,
    dirichlet_alpha: float = 0.5,
) -> FederatedData:
    """Alzheimer MRI split over clients (see the module docstring). Checks come first."""
    check_partition("alzheimer", partition, PARTITIONS)
    check_table_clients(partition, num_clients)
    x_tr, y_tr, x_te, y_te, source = read_alzheimer(data_path, data_format, seed)
    x_val, y_val, x_test, y_test = stratified_train_test(
        x_te, y_te, 0.5, derive_seed(seed, "val-test-split")
    )
    return four_class_mri(
        (x_tr, y_tr), (x_val, y_val, x_test, y_test), dataset="alzheimer",
        partition=partition, num_clients=num_clients, seed=seed,
        dirichlet_alpha=dirichlet_alpha, source=source,
        train_class_counts=np.bincount(y_tr, minlength=4).tolist(),
        test_class_counts=np.bincount(y_te, minlength=4).tolist(),
        data_path=os.fspath(data_path),
    )  # fmt: skip


def four_class_mri(
    pool: tuple[np.ndarray, np.ndarray],
    server: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    *,
    dataset: str,
    partition: str,
    num_clients: int,
    seed: int,
    dirichlet_alpha: float,
    source: str,
    **info: Any,
) -> FederatedData:
    """The clients of a four-class 128x128 MRI pool (Alzheimer, synthetic-mri; MP §7.1) and
    the server's validation / test splits ``server``; ``info`` joins the partition's info."""
    clients, part_info = image_clients(
        *pool, partition=partition, num_clients=num_clients, seed=seed,
        dirichlet_alpha=dirichlet_alpha, num_classes=4,
    )  # fmt: skip
    part_info.update(
        source=source, dataset=dataset, partition=partition, class_names=list(CLASS_NAMES), **info
    )
    return FederatedData(clients, *server, 4, (SIZE, SIZE, 1), part_info)
