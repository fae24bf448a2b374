"""Arrays to and from ``.npy`` bytes (the format Flower's ``Array`` carries), without
re-parsing the same header for every array of every message.

``np.save`` / ``np.load`` format and parse the ``.npy`` header (a Python dict literal) per
array: ``np.load`` runs ``ast.literal_eval`` on it. A round of 100 clients moves a few
hundred arrays of a handful of shapes, so both sides spent more on headers than on the
numbers of a small model. Here a header is formatted or parsed once per (dtype, shape,
order) and kept (:data:`MAX_HEADERS`); the bytes are byte for byte those of ``np.save``
(``tests/test_npy_bytes.py``), and :func:`view` returns the values ``np.load`` returns, as
a read-only view of the bytes (no copy). Object dtypes (pickles) are never decoded here.
"""

from __future__ import annotations

import io
from collections import OrderedDict

import numpy as np
from numpy.lib import format as npy

MAX_HEADERS = 256  # distinct headers kept (each a few hundred bytes)
_PARSED: OrderedDict[bytes, tuple[tuple[int, ...], bool, np.dtype]] = OrderedDict()
_WRITTEN: OrderedDict[tuple, bytes] = OrderedDict()


def _keep(cache: OrderedDict, key, value):
    cache[key] = value
    if len(cache) > MAX_HEADERS:
        cache.popitem(last=False)
    return value


def _preamble(data: bytes) -> int:
    """The offset of the array's bytes: magic, version, header length and header."""
    if data[:6] != npy.MAGIC_PREFIX:
        raise ValueError("not .npy data (no magic prefix)")
    major = data[6]
    if major == 1:
        return 10 + int.from_bytes(data[8:10], "little")
    if major in (2, 3):
        return 12 + int.from_bytes(data[8:12], "little")
    raise ValueError(f".npy version {major} is not supported")


def header_of(data: bytes) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran order, dtype, data offset) of ``.npy`` bytes (the header parsed once
    per distinct header)."""
    offset = _preamble(data)
    raw = bytes(data[:offset])
    hit = _PARSED.get(raw)
    if hit is None:
        buffer = io.BytesIO(raw)
        version = npy.read_magic(buffer)
        reader = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, fortran, dtype = reader(buffer)
        hit = _keep(_PARSED, raw, (tuple(shape), bool(fortran), dtype))
    return (*hit, offset)


def view(data: bytes) -> np.ndarray | None:
    """The array of ``.npy`` bytes as a read-only view of them; None for an object dtype
    (a pickle: never decoded here) or malformed data."""
    try:
        shape, fortran, dtype, offset = header_of(data)
    except ValueError:
        return None
    if dtype.hasobject:
        return None
    count = int(np.prod(shape, dtype=np.int64))
    if len(data) - offset != count * dtype.itemsize:
        return None
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    return flat.reshape(shape, order="F" if fortran else "C")


def encode(array: np.ndarray) -> bytes:
    """``np.save(array, allow_pickle=False)``'s bytes (header formatted once per dtype,
    shape and order)."""
    if array.dtype.hasobject:
        raise ValueError("object arrays are not saved (allow_pickle=False)")
    fortran = bool(array.flags.f_contiguous and not array.flags.c_contiguous)
    key = (array.dtype, array.shape, fortran)
    header = _WRITTEN.get(key)
    if header is None:  # the first array of its kind: np.save itself, its header kept
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        data = buffer.getvalue()
        _keep(_WRITTEN, key, data[: _preamble(data)])
        return data
    if not (array.flags.c_contiguous or fortran):
        array = np.ascontiguousarray(array)
    body = (array.T if fortran else array).reshape(-1).view(np.uint8)  # the bytes, not copied
    return b"".join((header, body))  # one copy (header + tobytes() made two)
