"""Client tasks: what a ClientApp worker runs for a ``train`` message (client code only).

The server picks the task by putting ``"client-task": NAME`` in the config it sends
(default ``standard``). The features name their tasks (``Feature.client_tasks`` in
:mod:`fedpriv.scenarios.config.features`); the implementations live here, next to the other
client-side
code, so that a worker never imports the server app, the CLI, reports or plotting
(``tests/test_features.py`` checks both lists agree and what a worker imports).

Tasks: ``standard`` (Keras training, FedProx term), ``dp-sgd`` (Poisson-batched DP-SGD,
``fedpriv.clients.dpsgd_client``; it also gets the node's ``Context``, see
:data:`STATEFUL_TASKS`), ``zonal`` (clip Δ, LDP noise in an LDP zone), ``zone-node``
(a zone SuperNode: :mod:`fedpriv.scenarios.zonal.zone_node`), ``ifca`` (GP Algorithm 1 lines 5-7,
also
served on its own message type, see :data:`MESSAGE_HANDLERS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from fedpriv.clients import ifca_client
from fedpriv.clients.keras_client import TrainSettings, federated_data, model_for, train_local
from fedpriv.clients.records import array_record, arrays_of
from fedpriv.clients.releases import guarded_release, node_counter, request_digest, sequence_of
from fedpriv.scenarios.app.task_names import (  # noqa: F401  (re-exported: the names tasks are known by)
    CLIENT_BUDGETS_TASK,
    DISTRIBUTED_DP_TASK,
    DPSGD_STATE_KEY,
    DPSGD_TASK,
    EPSILON_KEY,
    IFCA_TASK,
    OWN_MECHANISM_KEYS,
    ZONAL_TASK,
    ZONE_NODE_TASK,
)
from fedpriv.scenarios.config.node_roles import own_max_epsilon
from fedpriv.scenarios.config.node_spec import node_data, node_state_dir
from fedpriv.scenarios.config.specs import NodeCall
from fedpriv.scenarios.distributed_dp.client import train_distributed
from fedpriv.scenarios.zonal.zone_node import train_zone
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict

from fedpriv import seeds
from fedpriv.ifca import ACTION as IFCA_ACTION
from fedpriv.privacy.mechanisms import clip_update, flat_norm
from fedpriv.privacy.releases import Ticket
from fedpriv.spec import RunSpec
from fedpriv.zonal import ldp_client_update

Task = Callable[[Message, NodeCall, int], RecordDict]


def server_round(call: NodeCall) -> int:
    """The message's round (0 when it names none)."""
    return call.round


def call_seed(call: NodeCall, partition: int) -> int:
    """A per-(seed, round, partition) seed: reproducible and distinct per call."""
    return seeds.client_seed(int(call.spec.seed), call.round, partition)


def train_standard(msg: Message, call: NodeCall, partition: int) -> RecordDict:
    """Local Keras training from the received global weights (FedProx term if fedprox)."""
    spec = call.spec
    data = federated_data(spec.data)
    client = data.clients[partition]
    model = model_for(spec.train, data)
    settings = TrainSettings.from_spec(spec.train, seed=call_seed(call, partition))
    weights = arrays_of(msg.content["arrays"])
    new_weights, metrics = train_local(model, weights, client.x_train, client.y_train, settings)
    metrics["num-examples"] = len(client.x_train)
    return RecordDict({"arrays": array_record(new_weights), "metrics": MetricRecord(metrics)})


DPSGD_PARTY = DPSGD_TASK  # the ledger file of a DP-SGD client: ``dp-sgd-<partition>.json``


def dpsgd_sequence(context: Context, dp: Any, settings: TrainSettings) -> str:
    """A DP-SGD client's release sequence: its run and its own z, C, δ, B and E."""
    own = {
        "z": dp.noise_multiplier,
        "C": dp.l2_norm_clip,
        "delta": dp.delta,
        "B": settings.batch_size,
        "E": settings.epochs,
    }
    del context  # the same sequence in every run: the node's own mechanism settings only
    return sequence_of(own)


def train_dpsgd(
    msg: Message, call: NodeCall, partition: int, context: Context | None = None
) -> RecordDict:
    """Client task ``dp-sgd``: DP-SGD local training from the received global weights.

    The client counts its participations itself: every release is charged in its
    own ledger (:mod:`fedpriv.clients.releases`, file ``dp-sgd-<partition>.json`` in its own state
    directory, before it trains) and ε covers the ledger's total count — every participation
    this state directory saw, restarts and rewound or repeated rounds included; an identical
    repeat of its last request gets the cached reply (no fresh noise, no new charge). Nothing
    of the count comes from the message. ``context`` None (a direct call): the ledger of run 0
    in the default state root.
    """
    from fedpriv.clients.dpsgd_client import DpSgdSettings

    from fedpriv.privacy.dpsgd import check_microbatches
    from fedpriv.privacy.modes.dp_sgd import DPSGDParams

    if context is None:
        context = Context(0, 0, {"partition-id": partition}, RecordDict(), {})
    spec = call.spec
    check_microbatches(int(spec.microbatches))
    params = spec.params  # the node's own mode's (the task follows it, fedpriv.privacy.ownership)
    if not isinstance(params, DPSGDParams):
        raise ValueError(f"the dp-sgd task on a node whose privacy mode is {spec.mode_name}")
    settings = TrainSettings.from_spec(spec.train, seed=call_seed(call, partition))
    dp = DpSgdSettings.from_params(params, reproducible=spec.reproducible_noise)
    round_ = call.round

    counter = node_counter(context, DPSGD_PARTY, node_state_dir(context))

    def release(ticket: Ticket) -> RecordDict:
        eps = released_epsilon(counter, ticket, dp)
        content = _dpsgd_release(msg, spec, params, partition, settings, dp, ticket.releases, eps)
        own = (dp.noise_multiplier, dp.l2_norm_clip, dp.delta)  # its own, for the summary
        content["metrics"].update({k: float(v) for k, v in zip(OWN_MECHANISM_KEYS, own)})
        state = context.state
        state[DPSGD_STATE_KEY] = MetricRecord({"participations": ticket.releases})
        return content

    event, epsilon_budget, budget_name = dpsgd_budget(context, spec, dp, partition, settings)
    return guarded_release(
        counter,
        dpsgd_sequence(context, dp, settings),
        round_,
        request_digest(msg, round_),
        release,
        run=str(context.run_id),
        budget_name=budget_name,
        rewind="charge",
        event=event,
        epsilon_budget=epsilon_budget,
        data=node_data(context),
    )


def released_epsilon(counter: Any, ticket: Ticket, dp: Any) -> float:
    """ε at the node's δ of every DP-SGD release in its ledger, this one included: the
    composition of the stored events (:meth:`fedpriv.privacy.releases.Ledger.lifetime_epsilon`),
    computed once per release — the counter's figure when its ``max-epsilon`` check already
    composed them (``ticket.epsilon``), else the ledger's. z = 0: inf (no noise)."""
    if dp.noise_multiplier <= 0:
        return math.inf
    if ticket.epsilon is not None:
        return float(ticket.epsilon)
    return float(counter.load().lifetime_epsilon(dp.delta))


def dpsgd_budget(
    context: Context, spec: RunSpec, dp: Any, partition: int, settings: TrainSettings
) -> tuple[Any, tuple[float, float] | None, str]:
    """A DP-SGD release's ``DpEvent`` (its own z, B, E and its n examples,
    :func:`fedpriv.privacy.dpsgd.dpsgd_event`), the node's lifetime budget ``(max-epsilon,
    δ)`` over the composition of its stored events and this one (None: no budget) and the
    budget's one-line name. Decided on the events, not on a count converted with today's
    settings: a node whose z, B, E or δ changed between runs cannot pass its max-epsilon."""
    from fedpriv.audit.example_canaries import with_example_canaries
    from fedpriv.privacy.dpsgd import dpsgd_event

    data = federated_data(spec.data)
    client = data.clients[partition]
    x_train, _ = with_example_canaries(spec, data, partition, client.x_train, client.y_train)
    event = None
    if dp.noise_multiplier > 0:
        event = dpsgd_event(
            num_examples=len(x_train),
            batch_size=settings.batch_size,
            epochs=settings.epochs,
            noise_multiplier=dp.noise_multiplier,
        )
    max_eps = own_max_epsilon(context)
    if max_eps is None:
        return event, None, "budget"
    if event is None:  # z = 0: no ε budget holds any release
        return event, (max_eps, dp.delta), f"max-epsilon = {max_eps:g} (z = 0: none)"
    return event, (max_eps, dp.delta), f"max-epsilon = {max_eps:g}"


def _dpsgd_release(
    msg: Message,
    spec: RunSpec,
    params: Any,
    partition: int,
    settings: TrainSettings,
    dp: Any,
    participations: int,
    epsilon: float,
) -> RecordDict:
    """DP-SGD training of one charged participation; ``epsilon``: the node's ε after it
    (:func:`released_epsilon`, reported as ``dp-sgd-epsilon``)."""
    from fedpriv.clients.dpsgd_client import dp_trainer_for, train_dpsgd

    from fedpriv.audit.example_canaries import with_example_canaries

    data = federated_data(spec.data)
    client = data.clients[partition]
    trainer = dp_trainer_for(spec.train, params, tuple(data.input_shape), data.num_classes)
    weights = arrays_of(msg.content["arrays"])
    x_train, y_train = with_example_canaries(spec, data, partition, client.x_train, client.y_train)
    new_weights, metrics = train_dpsgd(
        trainer,
        weights,
        x_train,
        y_train,
        settings,
        dp,
        participations=participations,
        epsilon=epsilon,
    )
    metrics["num-examples"] = len(client.x_train)
    return RecordDict({"arrays": array_record(new_weights), "metrics": MetricRecord(metrics)})


ZONAL_LDP_PARTY = "zonal-ldp"  # the ledger file of an in-server LDP client


def train_zonal(
    msg: Message, call: NodeCall, partition: int, context: Context | None = None
) -> RecordDict:
    """Client task ``zonal`` (:func:`zonal_release`). A client of an LDP zone is a noising
    party: it counts its releases in its own lifetime ledger (file ``zonal-ldp-<partition>``
    in its own folder, :func:`fedpriv.scenarios.config.node_roles.node_ledger`): a request identical
    to one it answered, in any run, gets the cached reply or is refused; every other one is
    charged before it trains. ``context`` None (a direct call): no ledger."""
    if call.record.get("zonal-level", "none") != "ldp" or context is None:
        return zonal_release(msg, call, partition)
    params = call.spec.params  # the node's own zonal mode's z and C
    own = {"level": "ldp", "z": float(params.noise_multiplier), "C": float(params.clipping_norm)}
    round_ = server_round(call)
    return guarded_release(
        node_counter(context, ZONAL_LDP_PARTY, node_state_dir(context)),
        sequence_of(own),
        round_,
        request_digest(msg, round_),
        lambda _ticket: zonal_release(msg, call, partition),
        run=str(context.run_id),
        rewind="charge",
        data=node_data(context),
    )


def zonal_release(msg: Message, call: NodeCall, partition: int) -> RecordDict:
    """Train, clip Δ to C, and add N(0, (z·C)²) in an LDP zone.

    Zones of level ``none`` (the no-DP baseline) send the trained weights unclipped.

    Sends ``θ + clip(Δ) (+ noise)``; metrics add ``zonal-update-norm`` (before clipping),
    ``zonal-clipped`` (1/0), ``zonal-noise-std`` (z·C in an LDP zone, else 0) and
    ``zonal-noise-norm``. The noise Generator is the client's OS entropy, or seeded per
    (seed, round, partition) when the run sets ``reproducible-noise``.
    """
    out = train_standard(msg, call, partition)
    reference = msg.content["arrays"].to_numpy_ndarrays()
    trained = out["arrays"].to_numpy_ndarrays()
    update = [
        np.asarray(a, np.float64) - np.asarray(g, np.float64) for a, g in zip(trained, reference)
    ]
    params = call.spec.params  # the node's own zonal mode's z and C
    clipping_norm = float(params.clipping_norm)
    level = call.record.get("zonal-level", "none")
    if level == "ldp":
        rng = seeds.privacy_rng(
            [call_seed(call, partition), *seeds.ZONAL_LDP_TAGS],
            reproducible=call.spec.reproducible_noise,
        )
        sent, info = ldp_client_update(
            update,
            noise_multiplier=float(params.noise_multiplier),
            clipping_norm=clipping_norm,
            rng=rng,
        )
    else:  # HDP / CDP zones clip; a "none" zone (the no-DP baseline) sends Δ as trained
        sent, was_clipped = (
            (update, False) if level == "none" else clip_update(update, clipping_norm)
        )
        info = {
            "update_norm": flat_norm(update),
            "clipped": was_clipped,
            "sigma": 0.0,
            "noise_norm": 0.0,
        }
    if level == "none":
        arrays = trained
    else:
        arrays = [
            (np.asarray(g, np.float64) + d).astype(np.asarray(g).dtype)
            for g, d in zip(reference, sent)
        ]
    metrics = dict(out["metrics"])
    metrics.update(
        {
            "zonal-update-norm": float(info["update_norm"]),
            "zonal-clipped": int(info["clipped"]),
            "zonal-noise-std": float(info["sigma"]),
            "zonal-noise-norm": float(info["noise_norm"]),
        }
    )
    return RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord(metrics)})


def train_ifca(
    msg: Message, call: NodeCall, partition: int, context: Context | None = None
) -> RecordDict:
    """Client task ``ifca`` (a plain ``train`` message with ``client-task = ifca``): the IFCA
    participation of :func:`fedpriv.clients.ifca_client.ifca_train`, with the node's own ledger."""
    if context is None:
        return ifca_client.ifca_train(msg, call.spec, partition, call.round)
    folder, data = node_state_dir(context), node_data(context)
    return ifca_client.ifca_train(msg, call.spec, partition, call.round, context, folder, data)


def ifca_train_handler(msg: Message, call: NodeCall, context: Context) -> Message:
    """``@app.train("ifca")``: :func:`fedpriv.clients.ifca_client.train_handler` with the node's
    spec and the message's round."""
    return ifca_client.train_handler(
        msg,
        call.spec,
        context,
        server_round=call.round,
        state_folder=node_state_dir(context),
        data=node_data(context),
    )


def ifca_evaluate_handler(msg: Message, call: NodeCall, context: Context) -> Message:
    """``@app.evaluate("ifca")``: :func:`fedpriv.clients.ifca_client.evaluate_handler` with the
    node's
    spec and its own evaluation split (a derived key, ``fedpriv.scenarios.config.node_spec``); a
    validation user counts the query in its own ledger (its own folder)."""
    split = str(call.record.get("ifca-eval-split", "test"))
    return ifca_client.evaluate_handler(
        msg,
        call.spec,
        context,
        eval_split=split,
        server_round=call.round,
        state_folder=node_state_dir(context),
        data=node_data(context),
    )


BUDGET_STATE_KEY = "client-budget-releases"  # the node's own release count (context.state)


def train_client_budgets(
    msg: Message, call: NodeCall, partition: int, context: Context | None = None
) -> RecordDict:
    """Client task ``client-budgets``: the client checks its own ε before it releases.

    It recomputes its rate q_i from its own budget (``client-epsilon`` or its group's; the
    node's own values: a message changing them or the rounds is refused by
    :mod:`fedpriv.privacy.ownership`), refuses a message that says it was sampled at a higher
    rate, and declines once ε of ``PoissonSampled(q_i, Gaussian(z))`` after this round (the
    larger of the server's round and its own release count + 1) would pass its budget.
    """
    from fedpriv.clients.releases import ReleaseRefused

    from fedpriv.privacy.client_budgets import (
        HONEST_TAIL,
        budget_of,
        client_epsilon,
        participation_bound,
        sampling_rate_for,
        worst_case_epsilon,
    )
    from fedpriv.privacy.modes.client_budgets import RATE_KEY

    spec = call.spec
    p = spec.params
    budget = budget_of(p.groups, partition, p.own_budget)
    own_q = sampling_rate_for(budget, p.noise_multiplier, spec.rounds, p.delta)
    asked = _announced_rate(call.record.get(RATE_KEY, own_q), own_q, budget)
    del asked  # checked: never above the client's own rate
    counter = node_counter(context or _direct(partition), BUDGETS_PARTY, _state_dir(context))
    done = counter.load().releases  # its lifetime count, every run (not the run's state)
    after = max(call.round, done + 1)
    epsilon = client_epsilon(own_q, p.noise_multiplier, after, p.delta)
    if epsilon > budget:
        raise ReleaseRefused(
            f"client-epsilon: {epsilon:.4g} after round {after} would pass this client's "
            f"budget {budget:g}; it declines"
        )
    bound = participation_bound(own_q, spec.rounds)

    def release(ticket: Ticket) -> RecordDict:
        content = train_standard(msg, call, partition)
        worst = worst_case_epsilon(ticket.releases, p.noise_multiplier, p.delta)
        content["metrics"]["client-budgets-worst-case-epsilon"] = float(worst)
        state = context.state if context is not None else RecordDict()
        state[BUDGET_STATE_KEY] = MetricRecord({"releases": ticket.releases})
        return content

    name = (
        f"participation bound {bound} (honest Poisson sampling at q = {own_q:.4g} over "
        f"{spec.rounds} rounds passes it with probability <= {HONEST_TAIL:g})"
    )
    sequence = sequence_of({"q": own_q, "z": p.noise_multiplier, "T": spec.rounds, "d": p.delta})
    return guarded_release(
        counter, sequence, call.round, request_digest(msg, call.round), release,
        run=str(context.run_id if context is not None else 0), budget=float(bound),
        budget_name=name, rewind="charge",
        data=node_data(context) if context is not None else None,
    )  # fmt: skip


BUDGETS_PARTY = CLIENT_BUDGETS_TASK  # a client-budgets client's participation ledger


def _direct(partition: int) -> Context:
    """The Context of a direct call (no node): its ledger under the state root."""
    return Context(0, 0, {"partition-id": partition}, RecordDict(), {})


def _state_dir(context: Context | None):
    return node_state_dir(context) if context is not None else None


def _announced_rate(value: Any, own_q: float, budget: float) -> float:
    """The rate the message says the client was sampled at: a number in [0, own q]."""
    from fedpriv.clients.releases import ReleaseRefused

    from fedpriv.privacy.modes.client_budgets import RATE_KEY

    try:
        asked = float(value)
    except (TypeError, ValueError):
        asked = math.nan
    if not (math.isfinite(asked) and 0.0 <= asked <= own_q * (1 + 1e-9)):
        raise ReleaseRefused(
            f"{RATE_KEY} = {value!r} is not allowed; expected a number in [0, {own_q:.6g}], "
            f"this client's own rate for its budget {budget:g}"
        )
    return asked


# The client-side list: task name -> implementation (the features name the same tasks).
TASKS: Mapping[str, Task] = {
    "standard": train_standard,
    DPSGD_TASK: train_dpsgd,
    ZONAL_TASK: train_zonal,
    ZONE_NODE_TASK: train_zone,
    IFCA_TASK: train_ifca,
    CLIENT_BUDGETS_TASK: train_client_budgets,
    DISTRIBUTED_DP_TASK: train_distributed,
}

# Tasks that also take the node's ``Context`` (``task(msg, call, partition, context)``): they
# keep their own release ledger (:mod:`fedpriv.clients.releases`).
STATEFUL_TASKS: frozenset[str] = frozenset(
    {DPSGD_TASK, ZONE_NODE_TASK, IFCA_TASK, CLIENT_BUDGETS_TASK, ZONAL_TASK, DISTRIBUTED_DP_TASK}
)

# Message handlers of custom message types: (``train`` | ``evaluate``, action, handler);
# ``handler(msg, call, context)`` gets the node's call of the message
# (``fedpriv.scenarios.app.client_app``).
Handler = Callable[[Message, NodeCall, Context], Message]
MESSAGE_HANDLERS: tuple[tuple[str, str, Handler], ...] = (
    ("train", IFCA_ACTION, ifca_train_handler),
    ("evaluate", IFCA_ACTION, ifca_evaluate_handler),
)
