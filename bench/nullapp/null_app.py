"""Flower's own per-message cost in the simulation engine (``make bench``).

The ServerApp sends, each round, one ``train`` and one ``evaluate`` message to every node
(content: an ArrayRecord of ``num-params`` float32 values, the digits MLP's size, and a
4-key ConfigRecord); the ClientApp replies with the content it received. The ServerApp
writes ``{"rounds", "messages", "seconds"}`` (time from the first send to the last reply)
to ``output``. No TensorFlow, no fedpriv code: what is left is Flower + Ray.
"""

from __future__ import annotations

import json
import time

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

server = ServerApp()
client = ClientApp()


@client.train()
def train(msg: Message, context: Context) -> Message:
    """Return the input unchanged."""
    del context
    return Message(content=msg.content, reply_to=msg)


@client.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Return the input unchanged."""
    del context
    return Message(content=msg.content, reply_to=msg)


@server.main()
def main(grid: Grid, context: Context) -> None:
    """Send ``num-server-rounds`` x (train + evaluate) to every node; time it."""
    rounds = int(context.run_config["num-server-rounds"])
    arrays = ArrayRecord([np.zeros(int(context.run_config["num-params"]), np.float32)])
    config = ConfigRecord({"server-round": 0, "seed": 0, "local-epochs": 5, "batch-size": 8})
    wanted = max(1, int(context.run_config.get("num-nodes", 0)))
    nodes = list(grid.get_node_ids())
    while len(nodes) < wanted:  # every SuperNode registered, or the floor times fewer
        time.sleep(0.1)
        nodes = list(grid.get_node_ids())
    t0, messages = time.perf_counter(), 0
    for _ in range(rounds):
        for kind in ("train", "evaluate"):
            out = [
                Message(RecordDict({"arrays": arrays, "config": config}), node, kind)
                for node in nodes
            ]
            replies = list(grid.send_and_receive(out))
            messages += len(replies)
    seconds = time.perf_counter() - t0
    record = {"rounds": rounds, "messages": messages, "seconds": seconds, "nodes": len(nodes)}
    with open(str(context.run_config["output"]), "w", encoding="utf-8") as fh:
        json.dump(record, fh)
