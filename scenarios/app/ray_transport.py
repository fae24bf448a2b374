"""What a simulation's Ray processes set up: ``Array`` payloads without the pickle copy.

In a simulation every message and reply crosses Ray (the driver's ServerApp and the
ClientApp actors): the global model to each worker, and a worker's packed reply with one
update per virtual client back (4 x 26 MB a round for the MP CNN). An ``Array`` holds its
``.npy`` bytes as a Python ``bytes`` object, which pickle copies into the in-band stream
before Ray copies the stream into the object store, and copies again out of it. Registered
with Ray (:func:`register`, Ray's public ``ray.util.register_serializer``; the driver after
``ray.init``, each worker in its setup hook :func:`prepare_worker`), an ``Array``
travels as its four constructor fields with the bytes as a ``uint8`` array, which Ray
writes to the object store out of band (one copy) and hands the receiver as a view of it;
:func:`rebuild` makes the ``bytes`` again (one copy). The receiving process needs no
registration: the stream names :func:`rebuild`.

Measured on the 2-CPU machine (a Ray actor given a 26 MB model and returning four 26 MB
arrays, median of 10): 209 ms a round trip in band, 125 ms with :func:`register`.

The ``Array`` a receiver gets is built with Flower's own constructor from the same dtype,
shape, stype and bytes: equal to the one sent, field by field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # Flower is imported when an Array is sent or received, not at import
    from flwr.app import Array


def rebuild(dtype: str, shape: tuple[int, ...], stype: str, data: Any) -> Array:
    """The ``Array`` of those fields (``data``: its bytes as any buffer), made by Flower's
    own constructor."""
    from flwr.app import Array

    return Array(dtype, tuple(int(d) for d in shape), stype, bytes(data))


# smaller arrays stay in band: measured, 300 arrays of 2 KB each way took 18-20 ms a round
# trip in band, 22-23 ms with a buffer each
OUT_OF_BAND_BYTES = 1 << 16


def fields(array: Array) -> tuple[str, tuple[int, ...], str, Any]:
    """An ``Array``'s constructor fields, its bytes as a ``uint8`` view (no copy) from
    :data:`OUT_OF_BAND_BYTES` on."""
    data = array.data
    if len(data) >= OUT_OF_BAND_BYTES:
        data = np.frombuffer(data, np.uint8)
    return array.dtype, tuple(array.shape), array.stype, data


def rebuild_fields(packed: tuple) -> Array:
    """:func:`rebuild` of :func:`fields`' tuple (what Ray's stream names)."""
    return rebuild(*packed)


def register() -> None:
    """Send this process's ``Array`` objects out of band through Ray (module docstring).
    Called where Ray is connected: the simulation's driver after ``ray.init`` and each
    worker's setup hook."""
    import ray.util
    from flwr.app import Array

    ray.util.register_serializer(Array, serializer=fields, deserializer=rebuild_fields)


def prepare_worker() -> None:
    """Ray's worker setup hook for a simulation's workers (``fedpriv.scenarios.cli.ray_cluster``):
    TensorFlow imported quietly (:func:`fedpriv.scenarios.app.quiet.prepare_worker`), then
    :func:`register`."""
    from fedpriv.scenarios.app.quiet import prepare_worker as import_quietly

    import_quietly()
    register()
