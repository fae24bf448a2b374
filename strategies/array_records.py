"""One builder for ArrayRecords whose arrays carry names (the DP wrappers, the zonal and canary
wrappers, the IFCA hypotheses encoder and a resumed run's arrays all build them here).

A Flower ``ArrayRecord(list)`` names its arrays ``"0", "1", ...``; a strategy that hands a
record back to the wrapped strategy, or the IFCA broadcast (``"<j>/<layer>"`` keys,
:func:`fedpriv.ifca.pack_hypotheses`), keeps the names of the record it replaces.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

import numpy as np
from flwr.app import Array, ArrayRecord
from numpy.typing import ArrayLike

from fedpriv import npy_bytes


def named_record(keys: Iterable[str], arrays: Iterable[ArrayLike]) -> ArrayRecord:
    """``ArrayRecord({keys[i]: arrays[i]})`` in order, each array C-contiguous (shape kept).

    Raises ValueError when ``keys`` and ``arrays`` differ in length (a record with arrays
    missing or left over would reach aggregation silently otherwise).
    """
    return ArrayRecord(
        OrderedDict(
            (str(k), Array(np.asarray(a, order="C"))) for k, a in zip(keys, arrays, strict=True)
        )
    )


def array_view(array: Array) -> np.ndarray:
    """A read-only numpy view of an ``Array``'s bytes, without the copy ``Array.numpy()``
    makes (a 25.7 MB model is read in place when a strategy only looks at it) and without
    parsing its header again (:func:`fedpriv.npy_bytes.view`).

    The same values as ``array.numpy()``; arrays not serialised as plain ``.npy`` data
    (another ``stype``, object dtypes) fall back to it.
    """
    if array.stype != "numpy.ndarray":
        return array.numpy()
    out = npy_bytes.view(array.data)
    return array.numpy() if out is None else out
