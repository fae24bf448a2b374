"""The one ClientApp of ``flwr run .``.

The server sends what of the resolved config differs from the run's ``run_config`` in every
message's ``config`` record (:mod:`scenarios.wire_config`; the client merges it into its own
``context.run_config``), so a client needs nothing but its ``partition-id`` from
``node_config`` (simulation sets it; a deployment SuperNode gets it with
``--node-config "partition-id=0 num-partitions=4"``).

``config["client-task"]`` (default ``standard``) picks the training routine out of
:data:`scenarios.client_tasks.TASKS`; custom message types (IFCA) are served by
:data:`scenarios.client_tasks.MESSAGE_HANDLERS` (their config resolved the same way,
:func:`with_config`). This module imports client code only: no
server app, CLI, report or plotting module is loaded in a worker.

Every reply passes :func:`disclose` (issue 11): in a privacy mode, its MetricRecords keep
only what that mode's accounting covers (:mod:`fedpriv.disclosure`) unless the run opted
in with ``unaccounted-metrics = true``; an evaluation that may not be sent is not run.

Clients own their privacy settings (issue 20, :mod:`fedpriv.ownership`): in a mode that
distrusts the server (DP-SGD, a zonal LDP client, IFCA) the privacy keys come from the node's
own config (``run_config`` overlaid with ``node_config``), and a message that would change one
gets an error reply naming the key (:func:`resolved`) — no arrays, no metrics, no training.
"""

from __future__ import annotations

from collections.abc import Callable

from scenarios import quiet

# before TensorFlow loads: its C++ log level, and Flower's logger at WARNING in this worker,
# unless FEDPRIV_LOG=debug (fedpriv run --verbose)
quiet.configure_process()

from flwr.app import (  # noqa: E402
    ConfigRecord,
    Context,
    Error,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp  # noqa: E402

from clients.adversary import is_malicious, tamper_reply  # noqa: E402
from clients.keras_client import evaluate_local, federated_data, model_for  # noqa: E402
from fedpriv.disclosure import allowed_metric_keys, filter_metrics  # noqa: E402
from fedpriv.ownership import REFUSED_CODE, apply_owned, own_settings, refusal  # noqa: E402
from scenarios.client_tasks import (  # noqa: E402
    MESSAGE_HANDLERS,
    STATEFUL_TASKS,
    TASKS,
    Handler,
    call_seed,
)
from scenarios.federation import QUERY_KEY  # noqa: E402
from scenarios.task_names import ZONE_NODE_TASK  # noqa: E402
from scenarios.wire_config import DIGEST_KEY, client_config  # noqa: E402
from scenarios.zone_node import evaluate_zone  # noqa: E402

__all__ = ["app", "call_seed", "partition_id", "disclose", "resolved", "with_config"]

app = ClientApp()


def partition_id(context: Context) -> int:
    """This node's partition id (node_config ``partition-id``)."""
    return int(context.node_config["partition-id"])


def disclose(cfg: dict, kind: str, content: RecordDict) -> RecordDict:
    """``content`` with every MetricRecord restricted to what ``kind`` may carry in this mode."""
    return RecordDict(
        {
            name: MetricRecord(filter_metrics(cfg, kind, dict(record)))
            if isinstance(record, MetricRecord)
            else record
            for name, record in content.items()
        }
    )


def resolved(msg: Message, context: Context, kind: str, task: str = "") -> dict | Message:
    """The message's full config with this node's owned privacy values on top, or the error
    reply that refuses the message (a key the client owns sent with another value).

    ``kind``: ``train`` | ``evaluate``; ``task``: the task a custom message type names (IFCA).
    """
    record = msg.content["config"]
    own = own_settings(context.run_config, context.node_config)
    partition = partition_id(context)
    received = {k: v for k, v in record.items() if k != DIGEST_KEY}
    reason = refusal(own, received, partition, kind=kind, message_task=task)
    if reason is not None:
        return Message(Error(code=REFUSED_CODE, reason=reason), reply_to=msg)
    return apply_owned(client_config(record, context.run_config), own, partition, task)


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Answer the server's partition discovery."""
    content = RecordDict({QUERY_KEY: ConfigRecord({"partition-id": partition_id(context)})})
    return Message(content=content, reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Run the training task the server asked for (or refuse it, :func:`resolved`)."""
    cfg = resolved(msg, context, "train")
    if isinstance(cfg, Message):
        return cfg
    name = str(cfg.get("client-task", "standard"))
    partition = partition_id(context)
    state = (context.state,) if name in STATEFUL_TASKS else ()
    content = disclose(cfg, "train", TASKS[name](msg, cfg, partition, *state))
    if is_malicious(cfg, partition) and "arrays" in msg.content:  # issue 12: adversaries
        content = tamper_reply(content, msg.content["arrays"].to_numpy_ndarrays(), cfg, partition)
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Loss and accuracy of the received global model on this client's test split."""
    cfg = resolved(msg, context, "evaluate")
    if isinstance(cfg, Message):
        return cfg
    partition = partition_id(context)
    allowed = allowed_metric_keys(cfg, "evaluate")
    if cfg.get("client-task") == ZONE_NODE_TASK:  # a zone SuperNode evaluates its clients
        content = disclose(cfg, "evaluate", evaluate_zone(msg, cfg, partition, allowed))
        return Message(content=content, reply_to=msg)
    data = federated_data(cfg)
    client = data.clients[partition]
    metrics = {"num-examples": len(client.x_test)}
    if allowed is None or "accuracy" in allowed:
        weights = msg.content["arrays"].to_numpy_ndarrays()
        metrics |= evaluate_local(model_for(cfg, data), weights, client.x_test, client.y_test)
    content = disclose(cfg, "evaluate", RecordDict({"metrics": MetricRecord(metrics)}))
    return Message(content=content, reply_to=msg)


def with_config(
    handler: Handler, kind: str = "train", task: str = ""
) -> Callable[[Message, Context], Message]:
    """The Flower handler of a custom message type (IFCA): ``handler(msg, cfg, context)``
    with the message's full config, resolved (or refused) as for ``train`` / ``evaluate``;
    ``task``: the client task the message type stands for (its action, e.g. ``ifca``)."""

    def serve(msg: Message, context: Context) -> Message:
        cfg = resolved(msg, context, kind, task)
        return cfg if isinstance(cfg, Message) else handler(msg, cfg, context)

    return serve


for _kind, _action, _handler in MESSAGE_HANDLERS:
    getattr(app, _kind)(_action)(with_config(_handler, _kind, _action))
