"""fedpriv/npy_bytes.py against numpy's own np.save / np.load (the format Flower's Array
carries): the same bytes, the same values, read-only views, headers parsed once."""

from __future__ import annotations

import io

import numpy as np
import pytest

from fedpriv import npy_bytes

RNG = np.random.default_rng(0)
CASES = {
    "float32 matrix": RNG.normal(size=(64, 10)).astype(np.float32),
    "int64 vector": np.arange(5, dtype=np.int64),
    "0-d": np.array(3.5),
    "fortran": np.asfortranarray(RNG.normal(size=(3, 4))),
    "float16 3-d": RNG.normal(size=(2, 3, 4)).astype(np.float16),
    "empty": np.zeros((0, 3), np.float32),
    "big-endian": np.array([1, 2], dtype=">i4"),
    "structured": np.zeros(3, dtype=[("a", "<f4"), ("b", "<i2")]),
    "strided view": RNG.normal(size=(6, 8))[::2, 1::3],
}


def _saved(a: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, a, allow_pickle=False)
    return buffer.getvalue()


@pytest.mark.parametrize("name", list(CASES))
def test_encode_gives_np_saves_bytes_and_view_np_loads_values(name):
    a = CASES[name]
    for _ in range(2):  # the first call formats the header, the second reuses it
        assert npy_bytes.encode(a) == _saved(a)
        got = npy_bytes.view(_saved(a))
        expected = np.load(io.BytesIO(_saved(a)))
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
        assert not got.flags.writeable  # a view of the message's bytes, never written


def test_a_changed_array_of_the_same_kind_gets_its_own_numbers():
    a = RNG.normal(size=(4, 4)).astype(np.float32)
    b = a + 1
    assert npy_bytes.view(npy_bytes.encode(a))[0, 0] == a[0, 0]
    assert npy_bytes.view(npy_bytes.encode(b))[0, 0] == b[0, 0]


def test_pickles_and_malformed_bytes_are_never_decoded():
    obj = io.BytesIO()
    np.save(obj, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert npy_bytes.view(obj.getvalue()) is None
    good = _saved(np.arange(10, dtype=np.float64))
    assert npy_bytes.view(good[:-8]) is None  # cut short
    assert npy_bytes.view(b"not npy at all") is None
    with pytest.raises(ValueError, match="object arrays"):
        npy_bytes.encode(np.array([None], dtype=object))


def test_headers_are_parsed_once_per_kind(monkeypatch):
    calls = []
    reader = npy_bytes.npy.read_array_header_1_0
    monkeypatch.setattr(npy_bytes.npy, "read_array_header_1_0",
                        lambda fp: calls.append(1) or reader(fp))  # fmt: skip
    npy_bytes._PARSED.clear()
    data = [_saved(RNG.normal(size=(7, 3)).astype(np.float32)) for _ in range(20)]
    views = [npy_bytes.view(d) for d in data]
    assert len(calls) == 1 and len({v.tobytes() for v in views}) == 20


def test_client_records_match_flowers_own_and_are_read_in_place():
    """clients/records.py: ``array_record`` is ``ArrayRecord(list)`` byte for byte;
    ``arrays_of`` gives ``to_numpy_ndarrays()``'s values as read-only views."""
    from fedpriv.clients.records import array_record, arrays_of
    from flwr.app import ArrayRecord

    arrays = [CASES["float32 matrix"], CASES["fortran"], CASES["0-d"]]
    ours, flowers = array_record(arrays), ArrayRecord(arrays)
    assert list(ours.keys()) == list(flowers.keys())
    for a, b in zip(ours.values(), flowers.values()):
        assert (a.dtype, tuple(a.shape), a.stype, a.data) == (
            b.dtype,
            tuple(b.shape),
            b.stype,
            b.data,
        )
    for got, expected in zip(arrays_of(flowers), flowers.to_numpy_ndarrays()):
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == expected.dtype and not got.flags.writeable
