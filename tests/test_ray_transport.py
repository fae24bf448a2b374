"""Flower Arrays through Ray out of band (scenarios/app/ray_transport.py).

The fields round trip is exact; in a real local Ray started as a simulation starts it, the
driver (registered after ``ray.init``) and a worker (registered by its setup hook) both
pickle an Array with its bytes out of band (a short in-band stream), and the arrays that
come back through an actor are the ones sent, as ``bytes``-backed Flower Arrays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fedpriv.scenarios.app.ray_transport import OUT_OF_BAND_BYTES, fields, rebuild_fields
from flwr.app import Array

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("rows", [3, 40_000])
def test_fields_round_trip_is_the_same_array_and_large_bytes_a_view(rows):
    original = Array(np.arange(rows * 4, dtype=np.int16).reshape(rows, 4))
    packed = fields(original)
    if len(original.data) >= OUT_OF_BAND_BYTES:  # a uint8 view of the bytes, no copy
        assert packed[3].base is not None and packed[3].nbytes == len(original.data)
    else:
        assert packed[3] is original.data
    copy = rebuild_fields(packed)
    assert isinstance(copy.data, bytes) and copy.data == original.data
    assert (copy.dtype, copy.shape, copy.stype) == (original.dtype, original.shape, original.stype)
    assert np.array_equal(copy.numpy(), original.numpy())


@pytest.mark.simulation
def test_arrays_cross_a_real_ray_out_of_band_both_ways():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", KERAS_BACKEND="jax")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.ray_transport_case"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    size = seen["data_bytes"]
    assert size > 200_000
    for side in ("driver", "worker"):
        in_band, out_band = seen[side]
        assert out_band == size and in_band < 1_000, (side, seen[side])
    assert seen["equal"] and seen["dtypes"] == ["<f4", "<f8"] and seen["types"] == ["bytes"]
