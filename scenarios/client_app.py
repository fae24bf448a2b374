"""The one ClientApp of ``flwr run .``.

The server sends the resolved run config in every message's ``config`` record, so a
client needs nothing but its ``partition-id`` from ``node_config`` (simulation sets it;
a deployment SuperNode gets it with ``--node-config "partition-id=0 num-partitions=4"``).

``config["client-task"]`` (default ``standard``) picks the training routine; feature
modules add tasks to :data:`TRAIN_TASKS` (e.g. DP-SGD, IFCA, zonal LDP).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from collections.abc import Callable, Mapping  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402

from clients.keras_client import (  # noqa: E402
    TrainSettings,
    evaluate_local,
    federated_data,
    model_for,
    train_local,
)
from scenarios.federation import QUERY_KEY  # noqa: E402

app = ClientApp()


def call_seed(cfg: Mapping[str, Any], partition: int) -> int:
    """A per-(seed, round, partition) seed: reproducible and distinct per call."""
    state = np.random.SeedSequence([int(cfg["seed"]), int(cfg.get("server-round", 0)), partition])
    return int(state.generate_state(1)[0] % (2**31 - 1))


def partition_id(context: Context) -> int:
    """This node's partition id (node_config ``partition-id``)."""
    return int(context.node_config["partition-id"])


def train_standard(msg: Message, cfg: dict[str, Any], partition: int) -> RecordDict:
    """Local Keras training from the received global weights (FedProx term if fedprox)."""
    data = federated_data(cfg)
    client = data.clients[partition]
    model = model_for(cfg, data)
    settings = TrainSettings.from_config(cfg, seed=call_seed(cfg, partition))
    weights = msg.content["arrays"].to_numpy_ndarrays()
    new_weights, metrics = train_local(model, weights, client.x_train, client.y_train, settings)
    metrics["num-examples"] = len(client.x_train)
    return RecordDict({"arrays": ArrayRecord(new_weights), "metrics": MetricRecord(metrics)})


TRAIN_TASKS: dict[str, Callable[[Message, dict[str, Any], int], RecordDict]] = {
    "standard": train_standard,
}


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Answer the server's partition discovery."""
    content = RecordDict({QUERY_KEY: ConfigRecord({"partition-id": partition_id(context)})})
    return Message(content=content, reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Run the training task the server asked for."""
    cfg = dict(msg.content["config"])
    task = TRAIN_TASKS[str(cfg.get("client-task", "standard"))]
    return Message(content=task(msg, cfg, partition_id(context)), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Loss and accuracy of the received global model on this client's test split."""
    cfg = dict(msg.content["config"])
    partition = partition_id(context)
    data = federated_data(cfg)
    client = data.clients[partition]
    weights = msg.content["arrays"].to_numpy_ndarrays()
    metrics = evaluate_local(model_for(cfg, data), weights, client.x_test, client.y_test)
    metrics["num-examples"] = len(client.x_test)
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)


import scenarios.plugins  # noqa: E402,F401  (feature registrations)
