"""The one ClientApp of ``flwr run .``.

The server sends what of the resolved config differs from the run's ``run_config`` in every
message's ``config`` record (:mod:`fedpriv.scenarios.app.wire_config`; the client merges it into
its own
``context.run_config``), so a client needs nothing but its ``partition-id`` from
``node_config`` (simulation sets it; a deployment SuperNode gets it with
``--node-config "partition-id=0 num-partitions=4"``).

``config["client-task"]`` (default ``standard``) picks the training routine out of
:data:`fedpriv.scenarios.app.client_tasks.TASKS`; custom message types (IFCA) are served by
:data:`fedpriv.scenarios.app.client_tasks.MESSAGE_HANDLERS` (their config resolved the same way,
:func:`with_config`). A worker SuperNode of the simulation serves several
virtual clients, each through these same handlers with its own Context
(:func:`fedpriv.scenarios.nodes.worker.serves_virtual`). This module imports client code only: no
server app, CLI, report or plotting module is loaded in a worker.

Every reply passes :func:`disclose`: in a privacy mode, its MetricRecords keep
only what that mode's accounting covers (:mod:`fedpriv.privacy.disclosure`) unless the run opted
in with ``unaccounted-metrics = true``; an evaluation that may not be sent is not run.

Each node owns its privacy settings: it resolves its own spec from its
``run_config`` overlaid with ``node_config`` (:mod:`fedpriv.scenarios.config.node_spec`: ``"auto"``
is the
node's secure default, never the server's choice), and a message whose privacy keys differ
from that spec (:mod:`fedpriv.privacy.ownership` ``PRIVACY_KEYS``, the allow-list) gets an error
reply naming the key (:func:`resolved`) — no arrays, no metrics, no training — in every mode.

A train message whose config sets ``evaluate-received`` (:mod:`fedpriv.scenarios.app.fused`)
is also an evaluate message: the node evaluates the model it carries first
(:func:`evaluation`, the evaluate handler's own code and disclosure) and adds that record,
``evaluation``, to the train reply.
"""

from __future__ import annotations

from collections.abc import Callable

from fedpriv.scenarios.app import quiet

# before TensorFlow loads: its C++ log level, and Flower's logger at WARNING in this worker,
# unless FEDPRIV_LOG=debug (fedpriv run --verbose)
quiet.configure_process()

from fedpriv.clients.adversary import is_malicious, tamper_reply  # noqa: E402
from fedpriv.clients.keras_client import evaluate_local, federated_data, model_for  # noqa: E402
from fedpriv.clients.records import arrays_of  # noqa: E402
from fedpriv.clients.releases import ReleaseRefused  # noqa: E402
from fedpriv.scenarios.app.client_tasks import (  # noqa: E402
    MESSAGE_HANDLERS,
    STATEFUL_TASKS,
    TASKS,
    Handler,
    call_seed,
    server_round,
)
from fedpriv.scenarios.app.task_names import (  # noqa: E402
    EVALUATE_RECEIVED_KEY,
    EVALUATION_RECORD,
    ZONE_NODE_TASK,
)
from fedpriv.scenarios.app.wire_config import DIGEST_KEY, client_config  # noqa: E402
from fedpriv.scenarios.config.node_spec import node_spec  # noqa: E402
from fedpriv.scenarios.config.schema import ConfigError  # noqa: E402
from fedpriv.scenarios.config.specs import NodeCall, node_call  # noqa: E402
from fedpriv.scenarios.nodes.federation import QUERY_KEY  # noqa: E402
from fedpriv.scenarios.nodes.worker import answer_record, serves_virtual  # noqa: E402
from fedpriv.scenarios.zonal.zone_node import evaluate_zone  # noqa: E402
from flwr.app import (  # noqa: E402
    Context,
    Error,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp  # noqa: E402

from fedpriv.privacy.disclosure import allowed_metric_keys, filter_metrics  # noqa: E402
from fedpriv.privacy.ownership import REFUSED_CODE  # noqa: E402
from fedpriv.spec import RunSpec  # noqa: E402

__all__ = [
    "app",
    "call_seed",
    "partition_id",
    "disclose",
    "evaluation",
    "resolved",
    "with_config",
]

app = ClientApp()


def partition_id(context: Context) -> int:
    """This node's partition id (node_config ``partition-id``)."""
    return int(context.node_config["partition-id"])


def disclose(spec: RunSpec, kind: str, content: RecordDict) -> RecordDict:
    """``content`` with every MetricRecord restricted to what ``kind`` may carry in this mode."""
    return RecordDict(
        {
            name: MetricRecord(
                filter_metrics(
                    spec.mode_name, kind, dict(record), opted_in=spec.unaccounted_metrics
                )
            )
            if isinstance(record, MetricRecord)
            else record
            for name, record in content.items()
        }
    )


def resolved(msg: Message, context: Context, kind: str, task: str = "") -> NodeCall | Message:
    """What this node runs the message with, or the error reply that refuses it: the node's
    spec, built here once from its Context and the message (its own privacy values, the
    message's round, task inputs and training keys), with that config as its record.

    ``kind``: ``train`` | ``evaluate``; ``task``: the task a custom message type names (IFCA).
    A bad value in the node's own config refuses every message with its one-line error.
    """
    record = msg.content["config"]
    client_config(record, context.run_config)  # the digest check (raises on a mismatch)
    try:
        spec = node_spec(context.run_id, context.run_config, context.node_config)
    except ConfigError as err:
        return Message(Error(code=REFUSED_CODE, reason=str(err)), reply_to=msg)
    sent = {k: v for k, v in record.items() if k != DIGEST_KEY}
    cfg, reason = spec.accept(sent, kind, task)
    if cfg is None:
        return Message(Error(code=REFUSED_CODE, reason=reason), reply_to=msg)
    return node_call(cfg)  # the node's spec of this message: built here, once


@app.query()
@serves_virtual
def query(msg: Message, context: Context) -> Message:
    """Answer the server's partition discovery: this node's partition id and the clients it
    serves (a worker SuperNode's virtual clients, :mod:`fedpriv.scenarios.nodes.worker`)."""
    content = RecordDict({QUERY_KEY: answer_record(context, partition_id(context))})
    return Message(content=content, reply_to=msg)


@app.train()
@serves_virtual
def train(msg: Message, context: Context) -> Message:
    """Run the training task the server asked for (or refuse it, :func:`resolved`)."""
    call = resolved(msg, context, "train")
    if isinstance(call, Message):
        return call
    spec, name = call.spec, call.task
    partition = partition_id(context)
    node = (context,) if name in STATEFUL_TASKS else ()
    # fedpriv.scenarios.app.fused: evaluate the received model first, as an evaluate message would
    evaluated = evaluation(msg, call, partition) if call.record.get(EVALUATE_RECEIVED_KEY) else None
    try:
        content = disclose(spec, "train", TASKS[name](msg, call, partition, *node))
    except ReleaseRefused as err:  # the node's own release counter says no
        return Message(Error(code=REFUSED_CODE, reason=str(err)), reply_to=msg)
    if is_malicious(spec, partition) and "arrays" in msg.content:  # adversarial clients
        reference = msg.content["arrays"].to_numpy_ndarrays()
        content = tamper_reply(content, reference, spec, partition, server_round(call))
    if evaluated is not None:
        content = RecordDict({**content, EVALUATION_RECORD: evaluated["metrics"]})
    return Message(content=content, reply_to=msg)


@app.evaluate()
@serves_virtual
def evaluate(msg: Message, context: Context) -> Message:
    """Loss and accuracy of the received global model on this client's test split."""
    call = resolved(msg, context, "evaluate")
    if isinstance(call, Message):
        return call
    return Message(content=evaluation(msg, call, partition_id(context)), reply_to=msg)


def evaluation(msg: Message, call: NodeCall, partition: int) -> RecordDict:
    """The evaluate reply's content for the message's global model: ``{"metrics": ...}``
    restricted to what an evaluate reply may carry in this mode (:func:`disclose`); the
    evaluation is not run when its metrics may not be sent. The same for an evaluate
    message and for a train message that asks for it (``evaluate-received``)."""
    spec = call.spec
    allowed = allowed_metric_keys(spec.mode_name, "evaluate", opted_in=spec.unaccounted_metrics)
    if call.task == ZONE_NODE_TASK:  # a zone SuperNode evaluates its clients
        return disclose(spec, "evaluate", evaluate_zone(msg, call, partition, allowed))
    data = federated_data(spec.data)
    client = data.clients[partition]
    metrics = {"num-examples": len(client.x_test)}
    if allowed is None or "accuracy" in allowed:
        weights = arrays_of(msg.content["arrays"])
        model = model_for(spec.train, data)
        metrics |= evaluate_local(model, weights, client.x_test, client.y_test)
    return disclose(spec, "evaluate", RecordDict({"metrics": MetricRecord(metrics)}))


def with_config(
    handler: Handler, kind: str = "train", task: str = ""
) -> Callable[[Message, Context], Message]:
    """The Flower handler of a custom message type (IFCA): ``handler(msg, call, context)``
    with the node's call of the message, resolved (or refused) as for ``train`` / ``evaluate``;
    ``task``: the client task the message type stands for (its action, e.g. ``ifca``)."""

    def serve(msg: Message, context: Context) -> Message:
        call = resolved(msg, context, kind, task)
        return call if isinstance(call, Message) else handler(msg, call, context)

    return serve


for _kind, _action, _handler in MESSAGE_HANDLERS:
    getattr(app, _kind)(_action)(serves_virtual(with_config(_handler, _kind, _action)))
