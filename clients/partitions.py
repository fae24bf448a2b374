"""The federated data of a run, loaded once per process (no Keras, no Flower).

Kept apart from :mod:`fedpriv.clients.keras_client` so that the preflight checks of ``fedpriv run``
(the data source opens and decodes) import no Keras backend: a config or data error prints one
line and no TensorFlow/JAX start-up output.

The cache key is the run's :class:`fedpriv.spec.DataSpec` (frozen, hashable): two configs that
describe the same data share one :class:`fedpriv.data.FederatedData` per process.
"""

from __future__ import annotations

import threading
from functools import lru_cache

from fedpriv.data import FederatedData, load_spec
from fedpriv.spec import DataSpec


def load_data(spec: DataSpec) -> FederatedData:
    """The federated data ``spec`` describes, loaded now (no cache)."""
    return load_spec(spec)


@lru_cache(maxsize=4)
def _cached_data(spec: DataSpec) -> FederatedData:
    return load_data(spec)


_LOAD_LOCK = threading.Lock()  # a cohort's threads (fedpriv.clients.cohort) load the data once


def federated_data(spec: DataSpec) -> FederatedData:
    """Load (once per process, by one thread) the federated data ``spec`` describes
    (``federated_data.cache_clear()`` drops the process's copies)."""
    with _LOAD_LOCK:
        return _cached_data(spec)


federated_data.cache_clear = _cached_data.cache_clear  # type: ignore[attr-defined]
