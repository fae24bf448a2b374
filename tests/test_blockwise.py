"""fedpriv.blockwise: reductions a block at a time equal numpy's whole-array ones."""

import numpy as np
import pytest

from fedpriv.blockwise import BLOCK, max_abs_difference


@pytest.mark.parametrize("size", [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 17])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_equals_numpys_max_of_the_absolute_difference(size, dtype):
    rng = np.random.default_rng(size)
    a = rng.normal(size=size).astype(dtype)
    b = rng.normal(size=size).astype(dtype)
    expected = float(np.max(np.abs(a - b), initial=0.0))
    assert max_abs_difference(a, b) == expected
    assert max_abs_difference(a.reshape(-1, 1), b.reshape(-1, 1)) == expected


def test_the_largest_difference_is_found_in_any_block():
    a = np.zeros(5 * BLOCK + 3, np.float32)
    b = np.zeros_like(a)
    for where in (0, BLOCK, 4 * BLOCK + 1, a.size - 1):
        a[:] = 0.0
        a[where] = -7.5
        assert max_abs_difference(a, b) == 7.5


def test_nan_and_inf_and_float32_overflow_propagate():
    a = np.zeros(2 * BLOCK, np.float32)
    b = np.zeros_like(a)
    a[BLOCK + 5] = np.nan
    assert np.isnan(max_abs_difference(a, b))
    a[BLOCK + 5] = np.inf
    assert max_abs_difference(a, b) == np.inf
    a[BLOCK + 5], b[BLOCK + 5] = 3e38, -3e38  # the float32 difference overflows
    assert max_abs_difference(a, b) == np.inf


def test_integers_are_compared_in_float64_without_wrapping():
    a = np.array([np.iinfo(np.int32).max], np.int32)
    b = np.array([np.iinfo(np.int32).min], np.int32)
    assert max_abs_difference(a, b) == float(2**32 - 1)


def test_shapes_must_match():
    with pytest.raises(ValueError, match="shapes differ"):
        max_abs_difference(np.zeros(3), np.zeros(4))
