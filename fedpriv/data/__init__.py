"""Datasets and partitions for fedpriv (SPEC §5).

One entry point, :func:`load_federated`, turns ``(dataset, partition, num_clients, seed)`` into a
:class:`FederatedData`: one :class:`ClientData` per partition id, plus a server validation split
(used to pretrain initial parameters) and a server final test set.

Datasets:

- ``digits`` — scikit-learn ``load_digits`` (bundled), 8×8×1 in [0, 1]; partitions ``iid``,
  ``dirichlet`` (label Dirichlet(α)), ``rotation`` (GP's FEMNIST protocol: IID, then each client
  rotated by 90° with probability 1/2).
- ``synthetic-mri`` — a procedural 128×128×1, 4-class stand-in for the Alzheimer MRI data
  (a pipeline test, not a medical result); partitions ``homogeneous``, ``non-iid``, ``cia``
  (MP Tables 2, 3, 8 scaled to the available size), ``iid``, ``dirichlet``.
- ``alzheimer`` — the real Alzheimer MRI data from ``data_path`` (image folder or Hugging Face
  parquet); same partitions, exact MP class counts when the data has the full training totals.
- ``gp-synthetic`` — GP §4.1 linear regression with k = 2 clusters; partition ``gp-clusters``.
- ``cifar10`` / ``cifar100`` — HDP's CIFAR (Table II) from the python pickle batches at
  ``data_path`` (:mod:`fedpriv.data.cifar`); partitions ``iid`` (HDP's, 500 clients),
  ``dirichlet``.
- ``emnist`` — HDP's EMNIST by writer from LEAF json shards or TFF's h5 files at ``data_path``
  (:mod:`fedpriv.data.emnist`); partition ``writer`` (HDP: 3,383 writers, digits only).

Everything is deterministic in ``seed`` (explicit ``numpy.random.Generator`` objects; no global
RNG). Nothing is cached here: the caller caches per process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from fedpriv.spec import DataSpec

from fedpriv.data.partition import (
    MP_CIA,
    MP_CIA_AS_PRINTED,
    MP_HOMOGENEOUS,
    MP_NON_IID,
    MP_TABLES,
    split_by_class_counts,
)
from fedpriv.data.types import (
    DATA_FORMATS,
    DATASETS,
    PATH_DATASETS,
    ClientData,
    DataError,
    FederatedData,
)


def _check_common(dataset: str, num_clients: Any, seed: Any, data_format: str, alpha: Any) -> None:
    if dataset not in DATASETS:
        raise DataError("dataset", dataset, "one of " + " | ".join(DATASETS))
    if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)):
        raise DataError("num-clients", num_clients, "an integer >= 1")
    if num_clients < 1:
        raise DataError("num-clients", num_clients, "an integer >= 1")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise DataError("seed", seed, "an integer >= 0")
    if data_format not in DATA_FORMATS:
        raise DataError("data-format", data_format, " | ".join(DATA_FORMATS))
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0:
        raise DataError("dirichlet-alpha", alpha, "a float > 0")


def load_federated(
    dataset: str,
    *,
    partition: str,
    num_clients: int,
    seed: int,
    data_path: str = "",
    data_format: str = "auto",
    dirichlet_alpha: float = 0.5,
    image_size: int = 128,
) -> FederatedData:
    """Load ``dataset`` and split it over ``num_clients`` clients by ``partition``.

    ``image_size`` (128 | 64 | 32) reduces the MP image datasets' 128×128 images by block
    averaging (:mod:`fedpriv.data.resize`); the other datasets ignore it.

    Raises :class:`DataError` (one line: key, value, what is allowed) for any bad argument or
    unreadable data, before any heavy work where the problem can be seen up front.
    """
    _check_common(dataset, num_clients, seed, data_format, dirichlet_alpha)
    from fedpriv.data.resize import IMAGE_DATASETS, check_image_size, resize_federated

    image_size = check_image_size(image_size)
    args = (dataset, partition, int(num_clients), int(seed), data_path, data_format)
    data = _load(*args, dirichlet_alpha)
    return resize_federated(data, image_size) if dataset in IMAGE_DATASETS else data


def load_spec(spec: DataSpec) -> FederatedData:
    """The federated data a typed :class:`fedpriv.spec.DataSpec` describes (same seed, same
    splits as the run that built it): :func:`load_federated` of its fields."""
    return load_federated(
        spec.dataset,
        partition=spec.partition,
        num_clients=int(spec.num_clients),
        seed=int(spec.seed),
        data_path=spec.data_path,
        data_format=spec.data_format,
        dirichlet_alpha=float(spec.dirichlet_alpha),
        image_size=int(spec.image_size),
    )


def _load(dataset, partition, num_clients, seed, data_path, data_format, dirichlet_alpha):
    """The dataset at its stored size (see :func:`load_federated`)."""
    if dataset == "digits":
        from fedpriv.data.digits import load_digits_federated

        return load_digits_federated(
            partition=partition, num_clients=num_clients, seed=seed, dirichlet_alpha=dirichlet_alpha
        )
    if dataset == "synthetic-mri":
        from fedpriv.data.synthetic_mri import load_synthetic_mri_federated

        return load_synthetic_mri_federated(
            partition=partition, num_clients=num_clients, seed=seed, dirichlet_alpha=dirichlet_alpha
        )
    if dataset == "alzheimer":
        from fedpriv.data.alzheimer import load_alzheimer_federated

        return load_alzheimer_federated(
            data_path=data_path,
            data_format=data_format,
            partition=partition,
            num_clients=num_clients,
            seed=seed,
            dirichlet_alpha=dirichlet_alpha,
        )
    if dataset in ("cifar10", "cifar100"):
        from fedpriv.data.cifar import load_cifar_federated

        return load_cifar_federated(
            dataset,
            data_path=data_path,
            partition=partition,
            num_clients=num_clients,
            seed=seed,
            dirichlet_alpha=dirichlet_alpha,
        )
    if dataset == "emnist":
        from fedpriv.data.emnist import load_emnist_federated

        return load_emnist_federated(
            data_path=data_path, partition=partition, num_clients=num_clients, seed=seed
        )
    from fedpriv.data.gp_synthetic import load_gp_synthetic_federated

    return load_gp_synthetic_federated(partition=partition, num_clients=num_clients, seed=seed)


__all__ = [
    "load_spec",
    "DATASETS",
    "PATH_DATASETS",
    "ClientData",
    "DataError",
    "FederatedData",
    "MP_CIA",
    "MP_CIA_AS_PRINTED",
    "MP_HOMOGENEOUS",
    "MP_NON_IID",
    "MP_TABLES",
    "load_federated",
    "split_by_class_counts",
]
