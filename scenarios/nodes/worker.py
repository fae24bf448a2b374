"""A worker SuperNode: its virtual clients, each served as a SuperNode of its own would be.

In the simulation with ``num-workers`` W < ``num-clients``
(:mod:`fedpriv.scenarios.nodes.virtual_grid`),
Flower gives SuperNode ``w`` the ``node_config`` ``partition-id = w``, ``num-partitions = W``.
Such a node is a worker: from ITS OWN config it serves the partitions
:func:`fedpriv.scenarios.nodes.packing.worker_clients` names (``p mod W = w``) and nothing else.

A packed message (:mod:`fedpriv.scenarios.nodes.packing`) is unpacked into one message per client;
each runs through the ClientApp's own handler (:mod:`fedpriv.scenarios.app.client_app`) with a
``Context`` of its own (:func:`client_context`): the worker's run config, a ``node_config``
whose ``partition-id`` is the client's (``num-partitions`` = ``num-clients``), a state folder
of its own when the worker's ``node_config`` names one (``<folder>/client-<p>``), and a state
of its own kept in the worker's state (:data:`STATES_KEY`: one entry per client, its records
serialised, decoded only for the clients a message names). So every client resolves its
own spec, checks the message against it, counts its own releases in its own ledgers, and a
refusal or an exception is that client's error reply, as on a SuperNode of its own. With
``cohort-training`` (the default) the clients' handlers run as one cohort
(:mod:`fedpriv.clients.cohort`): each in a thread of its own, their Keras training and evaluation
calls pooled into one compiled call; off, one after the other.

A packed message that names a partition the worker does not serve is refused whole (one
error reply naming the partitions); a plain message to a worker of several clients is
refused too (it would run as the worker's own ``partition-id``). The partition discovery
``query`` is answered with the served partitions (``clients``).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from fedpriv.clients.cohort import alone
from fedpriv.clients.cohort_train import run_cohort
from fedpriv.scenarios.config.node_spec import load_snapshot, node_spec
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.nodes.packing import (
    CLIENTS_KEY,
    SEP,
    is_packed,
    pack_replies,
    unpack,
    worker_clients,
)
from fedpriv.scenarios.speed.keys import WORKER_KINDS, cohort_training
from fedpriv.scenarios.zonal.keys import federation_size, zone_nodes
from flwr.app import ConfigRecord, Context, Error, Message, MessageType, RecordDict
from flwr.common.constant import ErrorCode
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as RecordDictProto

from fedpriv.privacy.ownership import REFUSED_CODE
from fedpriv.privacy.releases import STATE_DIR_KEY

Handler = Callable[[Message, Context], Message]
# the worker's record of its clients' states: partition -> that client's RecordDict, serialised
# (Flower's own protobuf). The Context travels with every message (simulation: to the Ray
# actor and back), so it holds ONE record whose entries are plain bytes rather than a record
# per client and name: its cost grows with the clients that ever kept a state only by a copy
# of their bytes, and a message decodes and re-encodes the states of its own clients alone.
STATES_KEY = "fedpriv-client-states"

__all__ = [
    "CLIENTS_KEY",
    "STATES_KEY",
    "client_context",
    "client_state",
    "serves_virtual",
    "served_clients",
]


def served_clients(context: Context) -> list[int]:
    """The partitions this node serves, from its own ``node_config`` and own config: a worker
    of a run kind that has workers (:data:`fedpriv.scenarios.speed.keys.WORKER_KINDS`) serves its
    share of the clients; with zone SuperNodes (``partition-id`` a zone), a node of fewer
    SuperNodes than zones (``num-partitions``) serves its share of the zones, each as the
    zone's own node (:func:`client_context`); any other node its one ``partition-id``."""
    worker = int(context.node_config["partition-id"])
    try:
        own = node_spec(context.run_id, context.run_config, context.node_config).base
    except ConfigError:  # a bad own config: the handlers refuse every message with its line
        return [worker]
    if zone_nodes(own):  # a zone worker: the zones z with z mod num-partitions = its id
        zones = federation_size(own)
        return worker_clients(worker, int(context.node_config.get("num-partitions", zones)), zones)
    kind = load_snapshot()["scenarios"][own["scenario"]]["kind"]
    if kind not in WORKER_KINDS:
        return [worker]
    num_clients = int(own["num-clients"])
    workers = int(context.node_config.get("num-partitions", num_clients))
    return worker_clients(worker, workers, num_clients)


def _is_worker(context: Context) -> bool:
    return served_clients(context) != [int(context.node_config["partition-id"])]


class ClientStates(Mapping[int, dict[str, Any]]):
    """The worker's client states (:data:`STATES_KEY`): partition -> {record name: record},
    each decoded when first read (a client with no state is absent)."""

    def __init__(self, record: ConfigRecord | None) -> None:
        self._record: Mapping[str, Any] = record if record is not None else {}
        self._decoded: dict[int, dict[str, Any]] = {}

    def __getitem__(self, partition: int) -> dict[str, Any]:
        p = int(partition)
        if p not in self._decoded:
            blob = self._record[str(p)]  # KeyError: no state (Mapping.get gives the default)
            self._decoded[p] = dict(recorddict_from_proto(RecordDictProto.FromString(blob)))
        return self._decoded[p]

    def __iter__(self) -> Iterator[int]:
        return (int(key) for key in self._record)

    def __len__(self) -> int:
        return len(self._record)


def client_states(context: Context) -> ClientStates:
    """The worker's state split per client: partition -> {record name: record}; O(1) until a
    client's state is read (:class:`ClientStates`)."""
    record = context.state.get(STATES_KEY)
    return ClientStates(record if isinstance(record, ConfigRecord) else None)


def client_state(context: Context, partition: int) -> RecordDict:
    """Virtual client ``partition``'s own state on this worker (empty when it has none)."""
    return RecordDict(client_states(context).get(int(partition), {}))


def client_context(
    context: Context, partition: int, num_clients: int, state: dict[str, Any] | None = None
) -> Context:
    """Virtual client ``partition``'s Context on this worker (module docstring); ``state``:
    its records (:func:`client_states`; None: read from the worker's state)."""
    node_config = dict(context.node_config)
    node_config["partition-id"] = int(partition)
    node_config["num-partitions"] = int(num_clients)
    folder = str(node_config.get(STATE_DIR_KEY, "") or "")
    if folder and folder != "auto":
        node_config[STATE_DIR_KEY] = f"{folder.rstrip('/')}/client-{int(partition)}"
    if state is None:
        state = client_states(context).get(int(partition), {})
    return Context(
        run_id=context.run_id,
        node_id=context.node_id,
        node_config=node_config,
        state=RecordDict(dict(state)),
        run_config=context.run_config,
    )


def _keep_state(context: Context, client: Context, partition: int, old: Any = ()) -> None:
    """Write the client's state back into the worker's (its entry of :data:`STATES_KEY`,
    replaced whole; ``old``, the records it had, is not needed for that)."""
    del old
    record = context.state.get(STATES_KEY)
    if not isinstance(record, ConfigRecord):
        record = context.state[STATES_KEY] = ConfigRecord()
    key = str(int(partition))
    if len(client.state.keys()):
        record[key] = recorddict_to_proto(client.state).SerializeToString()
    elif key in record:
        del record[key]


def _sub_message(msg: Message, partition: int, content: RecordDict) -> Message:
    metadata = copy.copy(msg.metadata)
    metadata.__dict__["_message_id"] = f"{msg.metadata.message_id}{SEP}{int(partition)}"
    return Message(content=content, metadata=metadata)


def _refuse(msg: Message, reason: str) -> Message:
    return Message(Error(code=REFUSED_CODE, reason=reason), reply_to=msg)


def serve_packed(handler: Handler, msg: Message, context: Context) -> Message:
    """Run ``handler`` for every client of a packed message; one packed reply."""
    served = served_clients(context)
    contents = unpack(msg.content)
    foreign = sorted(set(contents) - set(served))
    if foreign:
        return _refuse(
            msg,
            f"packed message names partition(s) {foreign[:5]}; this worker serves only "
            f"{len(served)} partition(s) p with p mod num-partitions = partition-id "
            f"(its own node_config)",
        )
    own = node_spec(context.run_id, context.run_config, context.node_config).base
    num_clients = int(own["num-clients"])
    states = client_states(context)
    clients = {p: client_context(context, p, num_clients, states.get(p, {})) for p in contents}
    tasks = [
        functools.partial(handler, _sub_message(msg, p, content), clients[p])
        for p, content in contents.items()
    ]
    outcomes = run_cohort(tasks) if cohort_training(own) else [alone(t) for t in tasks]
    replies: dict[int, RecordDict] = {}
    errors: dict[int, tuple[int, str]] = {}
    for p, outcome in zip(contents, outcomes):
        if outcome.error is not None:  # that client's error reply, as Flower's
            err = outcome.error
            errors[p] = (ErrorCode.CLIENT_APP_RAISED_EXCEPTION, f"{type(err).__name__}: {err}")
            continue
        _keep_state(context, clients[p], p, states.get(p, {}))
        reply = outcome.value
        if reply.has_error():
            errors[p] = (int(reply.error.code), str(reply.error.reason))
        else:
            replies[p] = reply.content
    return Message(content=pack_replies(replies, errors), reply_to=msg)


def serves_virtual(handler: Handler) -> Handler:
    """``handler`` for a node that may be a worker: packed messages are served per client
    (:func:`serve_packed`), a plain message to a worker of several clients is refused, and
    a plain message to a one-client node is ``handler``'s as before."""

    @functools.wraps(handler)
    def serve(msg: Message, context: Context) -> Message:
        if msg.has_content() and is_packed(msg.content):
            return serve_packed(handler, msg, context)
        if msg.metadata.message_type != MessageType.QUERY and _is_worker(context):
            return _refuse(
                msg,
                "this SuperNode is a worker of several virtual clients (num-partitions < "
                "num-clients): it serves packed messages only",
            )
        return handler(msg, context)

    return serve


def query_answer(context: Context, partition: int) -> dict[str, Any]:
    """What the partition query reports: the node's partition id and the clients it serves."""
    return {"partition-id": int(partition), CLIENTS_KEY: served_clients(context)}


def answer_record(context: Context, partition: int) -> ConfigRecord:
    """:func:`query_answer` as a ConfigRecord."""
    return ConfigRecord(query_answer(context, partition))
