"""The IFCA client (GP Algorithm 1 lines 5–7, Algorithm 2; SPEC §3.4), Message API.

Training (message type ``train.ifca``), for user c:

1. receive all k hypotheses (one ArrayRecord, keys ``"<j>/<layer>"``, see
   :mod:`fedpriv.ifca`) and the round; ν, the budget, the model and the data come from the
   node's own :class:`fedpriv.spec.RunSpec` (``params``:
   :class:`fedpriv.privacy.modes.ifca.IFCAParams`);
2. check the client's OWN leakage ledger (its own file, see below): one participation
   costs ``n/ν`` (GP §3.2), known before any work; if ``spent + n/ν > leakage-budget`` the
   client declines: the reply content is an EMPTY RecordDict (no parameters); otherwise it
   charges ``n/ν`` to the ledger now, before it trains;
3. ``j̄ = argmin_j F_c(θ_j; Z_c)`` on the local training split (the model's loss: MSE for
   the linear model, cross-entropy for classifiers);
4. train θ_j̄ locally (``fedpriv.clients.keras_client.train_local``: E epochs, batch B, step s);
5. ``θ̂ = θ_local + ρ``, ρ ~ Laplace_ε in R^n, ``ε = n/(ν‖δ‖)``, ``δ = θ_local − θ_j̄``
   (``fedpriv.privacy.mechanisms.sanitize_laplace``); ν = 0 releases θ_local (plain IFCA);
6. reply with exactly one record: ``theta-hat``, the full
   sanitized parameter vector (as the model's layer list). No sample count, no cluster
   index, no δ, no metrics (GP-extended §4, rules 1–4).

The ledger is the client's own, over its lifetime (:mod:`fedpriv.clients.releases`): the file
``ifca-<partition>.json`` in the node's own state directory (``client-state-dir`` of its node
config, else the per-node default of its data; never a run's folder, a path, tag or round
from the message). Every release is charged there BEFORE the client trains, persisted
atomically, so a restarted client, a new run or a resumed run (a new ``Context``, a new run
id) keeps its spent leakage; a rewound ``server-round`` with other hypotheses, a new
``ifca-ledger-tag`` or a sweep's next cell is a new release and is charged; a request
identical to one it answered, in any run, gets the cached reply (its last release: the same
vector, no fresh noise, no charge) or is refused. The budget is the client's own
``leakage-budget``, over every run. A copy of the ledger is kept in
``context.state`` (record ``ifca-ledger``) for in-process readers; the file is
authoritative. The server keeps a mirror (the cost is data-independent) for reports; the
ledger is never sent to the server.

Evaluation (``evaluate.ifca``; validation users every round, training users once at the
end for the report): the user picks its best hypothesis and replies with metrics
(``loss``, ``accuracy`` or ``rmse``, ``num-examples``, ``hypothesis``). These replies are
not the sanitized training channel: they carry no noise and no ε, so a held-out validation
user (split ``all``) caps how many it gives over its lifetime: each query is counted in its
own ledger (file ``ifca-validation-<partition>.json`` in the same folder as the training
ledger, every run), up to its own ``validation-query-budget``; past it the query is refused
in one line; a query identical to the last it answered (same round, hypotheses and config,
from any run) gets the cached reply, uncounted.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import math  # noqa: E402
from collections.abc import Mapping, Sequence  # noqa: E402
from typing import Any, Optional  # noqa: E402

import numpy as np  # noqa: E402
from fedpriv.clients.keras_client import (  # noqa: E402
    TrainSettings,
    federated_data,
    model_for,
    predict_proba,
    train_local,
)
from fedpriv.clients.releases import (  # noqa: E402
    ReleaseRefused,
    guarded_release,
    node_counter,
    request_digest,
    sequence_of,
)
from flwr.app import (  # noqa: E402
    ArrayRecord,
    Context,
    Error,
    Message,
    MetricRecord,
    RecordDict,
)

from fedpriv.ifca import (  # noqa: E402
    HYPOTHESES_KEY,
    LEDGER_KEY,
    METRICS_KEY,
    REPLY_KEY,
    choose_hypothesis,
    num_params,
    unpack_hypotheses,
)
from fedpriv.privacy.accounting import laplace_leakage  # noqa: E402
from fedpriv.privacy.disclosure import sends_unaccounted  # noqa: E402
from fedpriv.privacy.mechanisms import sanitize_laplace  # noqa: E402
from fedpriv.privacy.ownership import REFUSED_CODE  # noqa: E402
from fedpriv.privacy.releases import ReleaseCounter  # noqa: E402
from fedpriv.seeds import privacy_rng  # noqa: E402
from fedpriv.spec import RunSpec  # noqa: E402

TRAIN_STREAM, NOISE_STREAM = 0, 1
EMPTY_LEDGER = {"spent": 0.0, "participations": 0, "declined": 0}


# --- records ------------------------------------------------------------------------------

IFCA_PARTY = "ifca"  # the ledger file ``ifca-<partition>.json`` (fedpriv.clients.releases)
VALIDATION_PARTY = "ifca-validation"  # a validation user's query ledger (same folder)


def read_ledger(state: Optional[RecordDict], key: str = LEDGER_KEY) -> dict[str, float]:
    """The copy of the client's ledger ``{"spent", "participations", "declined"}`` in its
    ``context.state`` (empty when none was written)."""
    if state is None or key not in state.metric_records:
        return dict(EMPTY_LEDGER)
    record = state.metric_records[key]
    return {
        "spent": float(record["spent"]),
        "participations": int(record["participations"]),
        "declined": int(record["declined"]),
    }


def own_ledger(counter: ReleaseCounter) -> dict[str, float]:
    """The client's ledger as its own file holds it."""
    ledger = counter.load()
    return {
        "spent": float(ledger.spent),
        "participations": int(ledger.releases),
        "declined": int(ledger.declined),
    }


def mirror_ledger(state: Optional[RecordDict], counter: ReleaseCounter) -> None:
    """Copy the file's ledger into ``context.state`` (no-op without a state)."""
    if state is not None:
        ledger = own_ledger(counter)
        state[LEDGER_KEY] = MetricRecord(
            {
                "spent": float(ledger["spent"]),
                "participations": int(ledger["participations"]),
                "declined": int(ledger["declined"]),
            }
        )


# --- local losses -------------------------------------------------------------------------


def is_regression(model: Any) -> bool:
    """True for the linear (MSE) model, False for the softmax classifiers."""
    return str(getattr(model, "loss", "")) in ("mse", "mean_squared_error")


def local_metrics(
    model: Any, weights: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray
) -> dict[str, float]:
    """``F_c(θ; Z)``: ``loss`` (MSE or cross-entropy), plus ``rmse`` (GP Eq. 10) or ``accuracy``.

    Computed from one traced, chunked forward pass (``fedpriv.clients.keras_client.predict_proba``),
    cheaper than ``model.evaluate`` for the k evaluations per call.
    """
    if len(x) == 0:
        return {"loss": math.nan}
    out = predict_proba(model, weights, x)
    if is_regression(model):
        mse = float(np.mean((out.reshape(-1).astype(np.float64) - y.astype(np.float64)) ** 2))
        return {"loss": mse, "rmse": math.sqrt(mse)}
    picked = out[np.arange(len(y)), y.astype(np.int64)].astype(np.float64)
    return {
        "loss": float(-np.mean(np.log(np.clip(picked, 1e-7, 1.0)))),
        "accuracy": float(np.mean(out.argmax(axis=1) == y)),
    }


def hypothesis_losses(
    model: Any, hypotheses: Sequence[Sequence[np.ndarray]], x: np.ndarray, y: np.ndarray
) -> list[float]:
    """``[F_c(θ_j; Z_c) for j in 1..k]`` with the model's loss."""
    return [local_metrics(model, h, x, y)["loss"] for h in hypotheses]


def call_seed(seed: int, server_round: int, partition: int, stream: int) -> int:
    """Seed of one (run seed, round, partition, stream) call: reproducible and distinct."""
    seq = np.random.SeedSequence([int(seed), int(server_round), int(partition), int(stream), 4])
    return int(seq.generate_state(1)[0] % (2**31 - 1))


# --- training (Algorithm 1 lines 5-7) -------------------------------------------------------


def ifca_train(
    msg: Message,
    spec: RunSpec,
    partition: int,
    server_round: int,
    context: Optional[Context] = None,
    state_folder: Optional[Path] = None,
    data: Optional[Mapping[str, Any]] = None,
) -> RecordDict:
    """One IFCA participation of ``partition`` in round ``server_round``; returns the reply
    content (see module doc). ν and the budget are the node's own (``spec.params``).

    ``context``: the node's Flower context (its run id and ``context.state``); None (a direct
    call) is run 0. ``state_folder``: the node's own state directory (its ledger), resolved by
    the ClientApp from the node's configs; None: the default per-run directory. ``data``: the
    node's resolved data settings its ledger is bound to (a request on other data is refused,
    :meth:`fedpriv.privacy.releases.ReleaseCounter.begin`). The
    Laplace noise is the client's own OS entropy unless its spec sets ``reproducible-noise``
    (then seeded per (seed, round, partition), ``call_seed``).
    """
    if context is None:
        context = Context(0, 0, {"partition-id": partition}, RecordDict(), {})
    nu = float(spec.params.noise_multiplier)
    budget = float(spec.params.leakage_budget)
    hypotheses = unpack_hypotheses(msg.content[HYPOTHESES_KEY])
    dim = num_params(hypotheses[0])
    cost = laplace_leakage(dim, nu) if nu > 0 else 0.0
    counter = node_counter(context, IFCA_PARTY, state_folder)
    server_round = int(server_round)
    try:
        return guarded_release(
            counter,
            sequence_of({"nu": nu, "dim": dim}),
            server_round,
            request_digest(msg, server_round),
            lambda _ticket: _release(hypotheses, spec, partition, server_round, nu),
            run=str(context.run_id),
            cost=cost,
            budget=budget if budget > 0 else None,
            budget_name=f"leakage-budget = {budget:g}",
            rewind="charge",
            on_declined=lambda _ticket: RecordDict(),  # decline: no parameters, nothing else
            data=data,
        )
    finally:
        mirror_ledger(context.state, counter)


def _release(
    hypotheses: Sequence[Sequence[np.ndarray]],
    spec: RunSpec,
    partition: int,
    server_round: int,
    nu: float,
) -> RecordDict:
    """Lines 5-7 of one charged participation: pick j̄, train θ_j̄, sanitize, reply θ̂."""
    data = federated_data(spec.data)
    client = data.clients[partition]
    model = model_for(spec.train, data)
    j = choose_hypothesis(hypothesis_losses(model, hypotheses, client.x_train, client.y_train))
    seed = call_seed(spec.seed, server_round, partition, TRAIN_STREAM)
    settings = TrainSettings.from_spec(spec.train, seed=seed)
    local, _ = train_local(model, hypotheses[j], client.x_train, client.y_train, settings)
    noise_seed = call_seed(spec.seed, server_round, partition, NOISE_STREAM)
    rng = privacy_rng(noise_seed, reproducible=bool(spec.reproducible_noise))
    released, _info = sanitize_laplace(local, hypotheses[j], nu, rng)
    return RecordDict({REPLY_KEY: ArrayRecord([np.asarray(a) for a in released])})


def may_report(spec: RunSpec) -> bool:
    """Whether a training user may send its unaccounted evaluation metrics: its mode has no
    disclosure policy, or it opted in itself (``unaccounted-metrics = true``; the rule of
    :func:`fedpriv.privacy.disclosure.sends_unaccounted`)."""
    return sends_unaccounted(spec.mode_name, opted_in=spec.unaccounted_metrics)


def ifca_evaluate(msg: Message, spec: RunSpec, partition: int, eval_split: str) -> RecordDict:
    """The user's best hypothesis and its metrics (validation / final report).

    ``eval_split`` (the node's derived ``ifca-eval-split``): ``"all"`` (held-out validation
    users: choose and measure on all local data) or ``"test"`` (training users: choose on the
    training split, measure on the test split).

    GP's rule (only the sanitized vector leaves a training user): a training
    user (``"test"``) answers only when it opted in with ``unaccounted-metrics = true``
    (:func:`may_report`); otherwise it declines with an empty reply.
    """
    if eval_split != "all" and not may_report(spec):
        return RecordDict()
    hypotheses = unpack_hypotheses(msg.content[HYPOTHESES_KEY])
    data = federated_data(spec.data)
    client = data.clients[partition]
    model = model_for(spec.train, data)
    if eval_split == "all":
        x = np.concatenate([client.x_train, client.x_test])
        y = np.concatenate([client.y_train, client.y_test])
        x_choose, y_choose, x_eval, y_eval = x, y, x, y
    else:
        x_choose, y_choose = client.x_train, client.y_train
        x_eval, y_eval = client.x_test, client.y_test
    j = choose_hypothesis(hypothesis_losses(model, hypotheses, x_choose, y_choose))
    metrics: dict[str, Any] = local_metrics(model, hypotheses[j], x_eval, y_eval)
    metrics.update({"num-examples": int(len(y_eval)), "hypothesis": int(j)})
    return RecordDict({METRICS_KEY: MetricRecord(metrics)})


# --- Flower entry points ------------------------------------------------------------------------


def _partition(context: Context) -> int:
    return int(context.node_config["partition-id"])


def train_handler(
    msg: Message,
    spec: RunSpec,
    context: Context,
    *,
    server_round: int,
    state_folder: Optional[Path] = None,
    data: Optional[Mapping[str, Any]] = None,
) -> Message:
    """``@app.train("ifca")``: an IFCA participation with the node's persistent ledger.

    ``spec``: the node's own resolved spec for this message (``fedpriv.scenarios.app.client_app``
    resolves
    it and refuses a message whose privacy keys differ); ``server_round``: the message's round;
    ``state_folder`` and ``data``: the node's own state directory and data (:func:`ifca_train`).
    """
    try:
        content = ifca_train(
            msg, spec, _partition(context), server_round, context, state_folder, data
        )
    except ReleaseRefused as err:  # the node's own ledger says no: an error reply, nothing else
        return Message(Error(code=REFUSED_CODE, reason=str(err)), reply_to=msg)
    return Message(content=content, reply_to=msg)


def validation_query(
    msg: Message,
    spec: RunSpec,
    context: Context,
    server_round: int,
    state_folder: Optional[Path] = None,
    data: Optional[Mapping[str, Any]] = None,
) -> RecordDict:
    """A held-out validation user's answer (split ``all``) through its own lifetime query
    ledger: one count per fresh query, at most its own ``validation-query-budget`` over
    every run; an identical repeat of its last answer is the cached reply; past the budget
    :class:`fedpriv.clients.releases.ReleaseRefused` (one line), as for a query on other
    ``data`` than its ledger's."""
    budget = int(spec.params.validation_query_budget)
    server_round = int(server_round)
    return guarded_release(
        node_counter(context, VALIDATION_PARTY, state_folder),
        sequence_of({"query": "validation", "split": "all"}),
        server_round,
        request_digest(msg, server_round),
        lambda _ticket: ifca_evaluate(msg, spec, _partition(context), "all"),
        run=str(context.run_id),
        budget=float(budget),
        budget_name=f"validation-query-budget = {budget} (queries)",
        rewind="charge",
        data=data,
    )


def evaluate_handler(
    msg: Message,
    spec: RunSpec,
    context: Context,
    *,
    eval_split: str,
    server_round: int = 0,
    state_folder: Optional[Path] = None,
    data: Optional[Mapping[str, Any]] = None,
) -> Message:
    """``@app.evaluate("ifca")``: best-hypothesis metrics of this user (``eval_split``: the
    node's own ``ifca-eval-split``, :func:`ifca_evaluate`); a validation user (``all``)
    answers through its query ledger (:func:`validation_query`), an error reply past it."""
    if eval_split != "all":
        content = ifca_evaluate(msg, spec, _partition(context), eval_split)
        return Message(content=content, reply_to=msg)
    try:
        content = validation_query(msg, spec, context, server_round, state_folder, data)
    except ReleaseRefused as err:  # its own query budget says no: an error reply, nothing else
        return Message(Error(code=REFUSED_CODE, reason=str(err)), reply_to=msg)
    return Message(content=content, reply_to=msg)
