"""Vanilla Flower 1.42 peer of ``make bench``: the quickstart-tensorflow pattern, nothing more.

ClientApp: each ``train`` message builds the Keras digits MLP (``Flatten``, ``Dense(64,
relu)``, ``Dense(10, softmax)``, SGD at ``learning-rate``), sets the received weights,
``model.fit(x, y, epochs, batch_size, verbose=0)`` on its shard (``partition-id`` of the
SuperNode) and returns the weights with ``num-examples``; ``evaluate`` does
``model.evaluate`` on the shard's test split. ServerApp: Flower's ``FedAvg``
(``fraction_train`` = clients-per-round / clients), wrapped in
``DifferentialPrivacyServerSideFixedClipping`` for the DP workload, a central
``evaluate_fn`` on the server test set that stamps each round (wall clock) to ``stamps``.

The configuration is a JSON file named by ``FLOWER_PEER_CONFIG`` (the simulation engine's
Python API takes no run config): ``shards`` (the .npz the bench wrote), ``num-clients``,
``clients-per-round``, ``local-epochs``, ``batch-size``, ``learning-rate``, ``rounds``,
``privacy`` (none | global-dp), ``noise-multiplier``, ``clipping-norm``, ``stamps``.
"""

from __future__ import annotations

import json
import os
import time
from functools import cache

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg

client = ClientApp()
server = ServerApp()


@cache
def config() -> dict:
    """The run's settings (module doc)."""
    with open(os.environ["FLOWER_PEER_CONFIG"], encoding="utf-8") as fh:
        return json.load(fh)


@cache
def shards() -> dict:
    """All shards, loaded once per process: ``x{k}``, ``y{k}``, ``xt{k}``, ``yt{k}``, test."""
    with np.load(config()["shards"]) as data:
        return {k: data[k] for k in data.files}


def load_model():
    """The digits MLP, compiled with SGD (the quickstart's ``load_model``)."""
    import keras

    model = keras.Sequential(
        [
            keras.layers.Input(shape=(8, 8, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    optimizer = keras.optimizers.SGD(learning_rate=float(config()["learning-rate"]))
    model.compile(optimizer, "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


@client.train()
def train(msg: Message, context: Context) -> Message:
    """Fit the received model on this SuperNode's shard."""
    cfg, k = config(), int(context.node_config["partition-id"])
    x, y = shards()[f"x{k}"], shards()[f"y{k}"]
    model = load_model()
    model.set_weights(msg.content["arrays"].to_numpy_ndarrays())
    history = model.fit(
        x, y, epochs=int(cfg["local-epochs"]), batch_size=int(cfg["batch-size"]), verbose=0
    )
    metrics = {"train_loss": float(history.history["loss"][-1]), "num-examples": len(x)}
    content = RecordDict(
        {"arrays": ArrayRecord(model.get_weights()), "metrics": MetricRecord(metrics)}
    )
    return Message(content=content, reply_to=msg)


@client.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Evaluate the received model on this SuperNode's test split."""
    k = int(context.node_config["partition-id"])
    x, y = shards()[f"xt{k}"], shards()[f"yt{k}"]
    model = load_model()
    model.set_weights(msg.content["arrays"].to_numpy_ndarrays())
    loss, accuracy = model.evaluate(x, y, verbose=0)
    metrics = {"eval_loss": float(loss), "eval_acc": float(accuracy), "num-examples": len(x)}
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)


@server.main()
def main(grid: Grid, context: Context) -> None:
    """FedAvg (with server-side fixed clipping for global-dp) for ``rounds`` rounds."""
    del context
    cfg = config()
    clients, per_round = int(cfg["num-clients"]), int(cfg["clients-per-round"]) or 0
    fraction = per_round / clients if per_round else 1.0
    strategy = FedAvg(
        fraction_train=fraction,
        fraction_evaluate=fraction,
        min_available_nodes=clients,
        min_train_nodes=max(2, per_round or clients),
        min_evaluate_nodes=max(2, per_round or clients),
    )
    if cfg["privacy"] == "global-dp":
        strategy = DifferentialPrivacyServerSideFixedClipping(
            strategy,
            noise_multiplier=float(cfg["noise-multiplier"]),
            clipping_norm=float(cfg["clipping-norm"]),
            num_sampled_clients=per_round or clients,
        )
    model = load_model()
    test = shards()
    stamps: list[dict] = []

    def central(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model.set_weights(arrays.to_numpy_ndarrays())
        loss, accuracy = model.evaluate(test["x_test"], test["y_test"], verbose=0)
        stamps.append({"round": server_round, "time": time.time(), "accuracy": accuracy})
        with open(cfg["stamps"], "w", encoding="utf-8") as fh:
            json.dump(stamps, fh)
        return MetricRecord({"loss": float(loss), "accuracy": float(accuracy)})

    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(model.get_weights()),
        num_rounds=int(cfg["rounds"]),
        evaluate_fn=central,
    )
