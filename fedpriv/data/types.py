"""The types of the data layer: :class:`ClientData`, :class:`FederatedData`, :class:`DataError`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

DATASETS = (
    "digits",
    "synthetic-mri",
    "alzheimer",
    "gp-synthetic",
    "cifar10",
    "cifar100",
    "emnist",
)
PATH_DATASETS = ("alzheimer", "cifar10", "cifar100", "emnist")  # read from data-path only
DATA_FORMATS = ("auto", "imagefolder", "parquet")


class DataError(ValueError):
    """Bad data input. ``str(err)`` is one line naming the key, the value and what is allowed."""

    def __init__(self, key: str, value: Any, allowed: str, problem: str = "") -> None:
        self.key, self.value, self.allowed, self.problem = key, value, allowed, problem
        what = f": {problem}" if problem else " is not allowed"
        message = f"data error: {key} = {value!r}{what}; expected {allowed}"
        super().__init__(" ".join(message.split()))  # always one line


@dataclass
class ClientData:
    """One client's local data. ``y`` are int64 labels (float32 targets for regression)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@dataclass
class FederatedData:
    """A federated dataset: clients (index = partition id) and the server's val/test splits."""

    clients: list[ClientData]
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    input_shape: tuple[int, ...]
    info: dict = field(default_factory=dict)

    @property
    def num_clients(self) -> int:
        return len(self.clients)
