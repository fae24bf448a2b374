"""The federated data of a run config, loaded once per process (no Keras, no Flower).

Kept apart from :mod:`clients.keras_client` so that the preflight checks of ``fedpriv run``
(the data source opens and decodes) import no Keras backend: a config or data error prints one
line and no TensorFlow/JAX start-up output.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from fedpriv.data import FederatedData, load_federated


def data_key(cfg: Mapping[str, Any]) -> tuple:
    """The config values that determine the federated data (the cache key)."""
    return (
        cfg["dataset"],
        cfg["partition"],
        int(cfg["num-clients"]),
        int(cfg["seed"]),
        cfg["data-path"],
        cfg["data-format"],
        float(cfg["dirichlet-alpha"]),
        int(cfg.get("image-size", 128)),
    )


@lru_cache(maxsize=4)
def _cached_data(key: tuple) -> FederatedData:
    dataset, partition, num_clients, seed, path, fmt, alpha, image_size = key
    return load_federated(
        dataset,
        partition=partition,
        num_clients=num_clients,
        seed=seed,
        data_path=path,
        data_format=fmt,
        dirichlet_alpha=alpha,
        image_size=image_size,
    )


def federated_data(cfg: Mapping[str, Any]) -> FederatedData:
    """Load (once per process) the federated data the config describes."""
    return _cached_data(data_key(cfg))
