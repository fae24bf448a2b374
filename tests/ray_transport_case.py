"""Run by tests/test_ray_transport.py in a fresh process: a local Ray started as a simulation
starts it (``ray_cluster.init_ray``, the workers' setup hook included), one actor, Flower
Arrays both ways. Prints one JSON line."""

from __future__ import annotations

import json

import numpy as np
import ray
import ray.cloudpickle
from fedpriv.scenarios.cli import ray_cluster
from flwr.app import Array, ArrayRecord


def out_of_band(array: Array) -> list[int]:
    """[in-band stream bytes, out-of-band buffer bytes] of ``array`` pickled as Ray does."""
    buffers: list = []
    stream = ray.cloudpickle.dumps(array, protocol=5, buffer_callback=buffers.append)
    return [len(stream), sum(memoryview(b).nbytes for b in buffers)]


@ray.remote(num_cpus=1)
class Echo:
    def reply(self, record: ArrayRecord) -> tuple[ArrayRecord, list[int]]:
        """The record's arrays doubled, as a new record, and how this worker pickles one."""
        doubled = {k: Array(v.numpy() * 2) for k, v in record.items()}
        return ArrayRecord(doubled), out_of_band(next(iter(doubled.values())))


def main() -> None:
    ray_cluster.init_ray({"num_cpus": 1}, [])
    rng = np.random.default_rng(0)
    sent = {"w": rng.normal(size=(300, 200)).astype(np.float32), "b": np.arange(7.0)}
    record = ArrayRecord({k: Array(v) for k, v in sent.items()})
    echo = Echo.remote()
    back, worker_pickles = ray.get(echo.reply.remote(record))
    print(json.dumps({
        "driver": out_of_band(record["w"]),
        "worker": worker_pickles,
        "data_bytes": len(record["w"].data),
        "equal": all(np.array_equal(back[k].numpy(), 2 * v) for k, v in sent.items()),
        "dtypes": [back[k].numpy().dtype.str for k in sent],
        "types": sorted({type(a.data).__name__ for a in back.values()}),
    }))  # fmt: skip
    ray.shutdown()


if __name__ == "__main__":
    main()
