"""A client's arrays in and out of Flower's ``ArrayRecord``, without formatting or parsing
the same ``.npy`` header for every array of every client (:mod:`fedpriv.npy_bytes`).

- :func:`arrays_of` is ``record.to_numpy_ndarrays()`` as read-only views of the message's
  bytes: a worker's clients share the one received model and none of them copies it; code
  that would write into a received array fails loudly instead of changing a neighbour's.
- :func:`array_record` is ``ArrayRecord(arrays)`` (keys ``"0"``, ``"1"``, ..., the same
  bytes).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
from flwr.app import Array, ArrayRecord

from fedpriv import npy_bytes

NUMPY = "numpy.ndarray"  # Flower's SType.NUMPY


def arrays_of(record: ArrayRecord) -> list[np.ndarray]:
    """The record's arrays in order, as read-only views (``Array.numpy()`` where the bytes
    are not plain ``.npy`` data)."""
    out = []
    for array in record.values():
        view = npy_bytes.view(array.data) if array.stype == NUMPY else None
        out.append(array.numpy() if view is None else view)
    return out


def array_record(arrays: Sequence[np.ndarray]) -> ArrayRecord:
    """``ArrayRecord(list(arrays))``: the same keys and bytes, headers formatted once."""
    items = OrderedDict()
    for i, a in enumerate(arrays):
        a = np.asarray(a)
        items[str(i)] = Array(dtype=str(a.dtype), shape=tuple(a.shape), stype=NUMPY,
                              data=npy_bytes.encode(a))  # fmt: skip
    return ArrayRecord(items)
