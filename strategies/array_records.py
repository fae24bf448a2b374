"""One builder for ArrayRecords whose arrays carry names (the DP wrappers, the zonal and canary
wrappers, the IFCA hypotheses encoder and a resumed run's arrays all build them here).

A Flower ``ArrayRecord(list)`` names its arrays ``"0", "1", ...``; a strategy that hands a
record back to the wrapped strategy, or the IFCA broadcast (``"<j>/<layer>"`` keys,
:func:`fedpriv.ifca.pack_hypotheses`), keeps the names of the record it replaces.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from io import BytesIO

import numpy as np
from flwr.app import Array, ArrayRecord
from numpy.lib import format as npy
from numpy.typing import ArrayLike


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
    makes (a 25.7 MB model is read in place when a strategy only looks at it).

    The same values as ``array.numpy()``; arrays not serialised as plain ``.npy`` data
    (another ``stype``, object dtypes) fall back to it.
    """
    if array.stype != "numpy.ndarray":
        return array.numpy()
    buffer = BytesIO(array.data)
    version = npy.read_magic(buffer)
    reader = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
    shape, fortran, dtype = reader(buffer)
    if dtype.hasobject:
        return array.numpy()
    count = int(np.prod(shape, dtype=np.int64))
    flat = np.frombuffer(array.data, dtype=dtype, count=count, offset=buffer.tell())
    return flat.reshape(shape, order="F" if fortran else "C")
