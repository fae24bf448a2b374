"""The IFCA client (GP Algorithm 1 lines 5–7, Algorithm 2; SPEC §3.4), Message API.

Training (message type ``train.ifca``), for user c:

1. receive all k hypotheses (one ArrayRecord, keys ``"<j>/<layer>"``, see
   :mod:`fedpriv.ifca`) and the run config;
2. check the client's OWN leakage ledger (kept in ``context.state``): one participation
   costs ``n/ν`` (GP §3.2), known before any work; if ``spent + n/ν > leakage-budget`` the
   client declines: the reply content is an EMPTY RecordDict (no parameters);
3. ``j̄ = argmin_j F_c(θ_j; Z_c)`` on the local training split (the model's loss: MSE for
   the linear model, cross-entropy for classifiers);
4. train θ_j̄ locally (``clients.keras_client.train_local``: E epochs, batch B, step s);
5. ``θ̂ = θ_local + ρ``, ρ ~ Laplace_ε in R^n, ``ε = n/(ν‖δ‖)``, ``δ = θ_local − θ_j̄``
   (``fedpriv.mechanisms.sanitize_laplace``); ν = 0 releases θ_local (plain IFCA);
6. charge ``n/ν`` to the ledger and reply with exactly one record: ``theta-hat``, the full
   sanitized parameter vector (as the model's layer list). No sample count, no cluster
   index, no δ, no metrics (GP-extended §4, rules 1–4).

Why ``context.state``: a simulated client is a stateless function call in whatever worker
process is free; Flower keeps ``context.state`` per node and run and hands it back on every
call, so it is where a client's ledger survives between rounds. The server keeps a
mirror (the cost is data-independent) for reports; the client's copy is authoritative.

Resume (issue 12): ``context.state`` dies with the simulation, so when the server names a
``client-state-dir`` in the message config (the IFCA runner does: ``<output-dir>/client-state``)
the client also keeps its ledger in its own file there, ``<ledger key>-<partition>.json``
(:func:`fedpriv.checkpoint.write_client_state`: one entry per round), and reads it from that
file — the entry of its last call before this round, so a round re-run after a kill is
charged once. The file is written and read by the client only; the ledger is never sent to
the server. (In a deployment the path is on the SuperNode's own disk.)

Evaluation (``evaluate.ifca``; validation users every round, training users once at the
end for the report): the user picks its best hypothesis and replies with metrics
(``loss``, ``accuracy`` or ``rmse``, ``num-examples``, ``hypothesis``). These replies are
not the sanitized training channel.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import math  # noqa: E402
from collections.abc import Mapping, Sequence  # noqa: E402
from logging import WARNING  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Optional  # noqa: E402

import numpy as np  # noqa: E402
from flwr.app import (  # noqa: E402
    ArrayRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.common import log  # noqa: E402

from clients.keras_client import (  # noqa: E402
    TrainSettings,
    federated_data,
    model_for,
    predict_proba,
    train_local,
)
from fedpriv.accounting import LeakageLedger, laplace_leakage  # noqa: E402
from fedpriv.checkpoint import (  # noqa: E402
    STATE_DIR_KEY,
    read_client_state,
    write_client_state,
)
from fedpriv.disclosure import sends_unaccounted  # noqa: E402
from fedpriv.ifca import (  # noqa: E402
    HYPOTHESES_KEY,
    LEDGER_KEY,
    METRICS_KEY,
    REPLY_KEY,
    choose_hypothesis,
    num_params,
    unpack_hypotheses,
)
from fedpriv.mechanisms import sanitize_laplace  # noqa: E402
from fedpriv.seeds import privacy_rng, reproducible  # noqa: E402

TRAIN_STREAM, NOISE_STREAM = 0, 1
EMPTY_LEDGER = {"spent": 0.0, "participations": 0, "declined": 0}


# --- records ------------------------------------------------------------------------------


def ledger_key(cfg: Mapping[str, Any]) -> str:
    """The state record of this run's ledger (a sweep runs several ledgers side by side)."""
    tag = str(cfg.get("ifca-ledger-tag", ""))
    return f"{LEDGER_KEY}-{tag}" if tag else LEDGER_KEY


def read_ledger(state: Optional[RecordDict], key: str) -> dict[str, float]:
    """The client's ledger ``{"spent", "participations", "declined"}`` from its state."""
    if state is None or key not in state.metric_records:
        return dict(EMPTY_LEDGER)
    record = state.metric_records[key]
    return {
        "spent": float(record["spent"]),
        "participations": int(record["participations"]),
        "declined": int(record["declined"]),
    }


def write_ledger(state: Optional[RecordDict], key: str, ledger: Mapping[str, float]) -> None:
    """Store the ledger back into the client's state (no-op without a state)."""
    if state is not None:
        state[key] = MetricRecord(
            {
                "spent": float(ledger["spent"]),
                "participations": int(ledger["participations"]),
                "declined": int(ledger["declined"]),
            }
        )


def ledger_file(cfg: Mapping[str, Any], partition: int) -> Optional[Path]:
    """This client's own ledger file (``client-state-dir`` of the message config), or None."""
    folder = str(cfg.get(STATE_DIR_KEY, ""))
    return Path(folder) / f"{ledger_key(cfg)}-{int(partition)}.json" if folder else None


def load_ledger(
    state: Optional[RecordDict], cfg: Mapping[str, Any], partition: int
) -> dict[str, float]:
    """The ledger before this call: from the client's file when it holds an entry of an
    earlier round (it survives a restart), else from ``context.state``."""
    path = ledger_file(cfg, partition)
    kept = read_client_state(path, int(cfg.get("server-round", 0))) if path else None
    return {**EMPTY_LEDGER, **kept} if kept else read_ledger(state, ledger_key(cfg))


def store_ledger(
    state: Optional[RecordDict], cfg: Mapping[str, Any], partition: int, ledger: Mapping
) -> None:
    """Write the ledger to ``context.state`` and, when it keeps one, the client's file.

    A file the client cannot write (a deployment SuperNode without the server's path) does
    not fail the round: the ledger stays in ``context.state`` for this run, and a warning
    says that it will not survive a restart.
    """
    write_ledger(state, ledger_key(cfg), ledger)
    path = ledger_file(cfg, partition)
    if path is None:
        return
    try:
        write_client_state(path, int(cfg.get("server-round", 0)), ledger)
    except OSError as err:
        log(WARNING, "IFCA client %d: ledger file %s not written (%s)", partition, path, err)


# --- local losses -------------------------------------------------------------------------


def is_regression(model: Any) -> bool:
    """True for the linear (MSE) model, False for the softmax classifiers."""
    return str(getattr(model, "loss", "")) in ("mse", "mean_squared_error")


def local_metrics(
    model: Any, weights: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray
) -> dict[str, float]:
    """``F_c(θ; Z)``: ``loss`` (MSE or cross-entropy), plus ``rmse`` (GP Eq. 10) or ``accuracy``.

    Computed from one traced, chunked forward pass (``clients.keras_client.predict_proba``),
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


def call_seed(cfg: Mapping[str, Any], partition: int, stream: int) -> int:
    """Seed of one (run seed, round, partition, stream) call: reproducible and distinct."""
    seq = np.random.SeedSequence(
        [int(cfg["seed"]), int(cfg.get("server-round", 0)), int(partition), int(stream), 4]
    )
    return int(seq.generate_state(1)[0] % (2**31 - 1))


# --- training (Algorithm 1 lines 5-7) -------------------------------------------------------


def ifca_train(
    msg: Message, cfg: Mapping[str, Any], partition: int, state: Optional[RecordDict]
) -> RecordDict:
    """One IFCA participation of ``partition``; returns the reply content (see module doc).

    ``state`` is the node's ``context.state`` (the ledger lives there); ``None`` runs
    without a persistent ledger, refused when a ``leakage-budget`` is set. The Laplace noise
    is the client's own OS entropy unless the run sets ``reproducible-noise`` (then seeded
    per (seed, round, partition), ``call_seed``).
    """
    nu = float(cfg["ifca-noise-multiplier"])
    budget = float(cfg["leakage-budget"])
    if state is None and budget > 0:
        raise ValueError(
            "leakage-budget > 0 needs the client's context.state for its ledger; "
            "send message type 'train.ifca' (scenarios.ifca), not a stateless task"
        )
    hypotheses = unpack_hypotheses(msg.content[HYPOTHESES_KEY])
    cost = laplace_leakage(num_params(hypotheses[0]), nu) if nu > 0 else 0.0
    ledger = load_ledger(state, cfg, partition)
    if budget > 0:
        check = LeakageLedger(budget=budget, spent={partition: ledger["spent"]})
        if not check.can_participate(partition, cost):
            ledger["declined"] += 1
            store_ledger(state, cfg, partition, ledger)
            return RecordDict()  # decline: no parameters, nothing else
    data = federated_data(cfg)
    client = data.clients[partition]
    model = model_for(cfg, data)
    j = choose_hypothesis(hypothesis_losses(model, hypotheses, client.x_train, client.y_train))
    settings = TrainSettings.from_config(cfg, seed=call_seed(cfg, partition, TRAIN_STREAM))
    local, _ = train_local(model, hypotheses[j], client.x_train, client.y_train, settings)
    rng = privacy_rng(call_seed(cfg, partition, NOISE_STREAM), reproducible=reproducible(cfg))
    released, _info = sanitize_laplace(local, hypotheses[j], nu, rng)
    ledger["spent"] += cost
    ledger["participations"] += 1
    store_ledger(state, cfg, partition, ledger)
    return RecordDict({REPLY_KEY: ArrayRecord([np.asarray(a) for a in released])})


def ifca_evaluate(msg: Message, cfg: Mapping[str, Any], partition: int) -> RecordDict:
    """The user's best hypothesis and its metrics (validation / final report).

    ``config["ifca-eval-split"]``: ``"all"`` (held-out validation users: choose and measure
    on all local data) or ``"test"`` (training users: choose on the training split, measure
    on the test split).

    Issue 11 / GP's rule (only the sanitized vector leaves a training user): a training
    user (``"test"``) answers only when the run opted in with ``unaccounted-metrics =
    true``; otherwise it declines with an empty reply.
    """
    if str(cfg.get("ifca-eval-split", "test")) != "all" and not sends_unaccounted(cfg):
        return RecordDict()
    hypotheses = unpack_hypotheses(msg.content[HYPOTHESES_KEY])
    data = federated_data(cfg)
    client = data.clients[partition]
    model = model_for(cfg, data)
    if str(cfg.get("ifca-eval-split", "test")) == "all":
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


def train_handler(msg: Message, cfg: Mapping[str, Any], context: Context) -> Message:
    """``@app.train("ifca")``: an IFCA participation with the node's persistent ledger.

    ``cfg`` is the message's full config: the ClientApp merges the keys the server sent into
    this node's ``context.run_config`` (``scenarios.client_app``, as for every message).
    """
    return Message(content=ifca_train(msg, cfg, _partition(context), context.state), reply_to=msg)


def evaluate_handler(msg: Message, cfg: Mapping[str, Any], context: Context) -> Message:
    """``@app.evaluate("ifca")``: best-hypothesis metrics of this user (``cfg``: as above)."""
    return Message(content=ifca_evaluate(msg, cfg, _partition(context)), reply_to=msg)


def train_task(msg: Message, cfg: dict[str, Any], partition: int) -> RecordDict:
    """Client task ``ifca`` (a plain ``train`` message with ``client-task = ifca``).

    The stateless task signature has no ``context``, so there is no persistent ledger:
    it refuses to run with a ``leakage-budget``. The IFCA runner uses ``train.ifca``.
    """
    return ifca_train(msg, cfg, partition, None)
