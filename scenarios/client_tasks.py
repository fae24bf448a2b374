"""Client tasks: what a ClientApp worker runs for a ``train`` message (client code only).

The server picks the task by putting ``"client-task": NAME`` in the config it sends
(default ``standard``). The features name their tasks (``Feature.client_tasks`` in
:mod:`scenarios.features`); the implementations live here, next to the other client-side
code, so that a worker never imports the server app, the CLI, reports or plotting
(``tests/test_features.py`` checks both lists agree and what a worker imports).

Tasks: ``standard`` (Keras training, FedProx term), ``dp-sgd`` (Poisson-batched DP-SGD,
``clients.dpsgd_client``; it also gets the node's ``context.state``, see
:data:`STATEFUL_TASKS`), ``zonal`` (clip Δ, LDP noise in an LDP zone), ``zone-node``
(a zone SuperNode: :mod:`scenarios.zone_node`), ``ifca`` (GP Algorithm 1 lines 5-7, also
served on its own message type, see :data:`MESSAGE_HANDLERS`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from logging import WARNING
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.common import log

from clients import ifca_client
from clients.keras_client import TrainSettings, federated_data, model_for, train_local
from fedpriv import seeds
from fedpriv.checkpoint import STATE_DIR_KEY, read_client_state, write_client_state
from fedpriv.ifca import ACTION as IFCA_ACTION
from fedpriv.mechanisms import clip_update, flat_norm
from fedpriv.zonal import ldp_client_update
from scenarios.task_names import (  # noqa: F401  (re-exported: the names tasks are known by)
    DPSGD_STATE_KEY,
    DPSGD_TASK,
    EPSILON_KEY,
    IFCA_TASK,
    ZONAL_TASK,
    ZONE_NODE_TASK,
)
from scenarios.zone_node import train_zone

Task = Callable[[Message, dict[str, Any], int], RecordDict]


def call_seed(cfg: Mapping[str, Any], partition: int) -> int:
    """A per-(seed, round, partition) seed: reproducible and distinct per call."""
    return seeds.client_seed(int(cfg["seed"]), int(cfg.get("server-round", 0)), partition)


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


def dpsgd_participations(
    state: RecordDict | None, cfg: Mapping[str, Any] | None = None, partition: int = 0
) -> int:
    """The client's own count of its DP-SGD rounds, this one included.

    Kept in ``context.state`` and, when the message names a ``client-state-dir`` (the
    standard run does: ``<output-dir>/client-state``), in the client's own file
    ``dp-sgd-<partition>.json`` (:func:`fedpriv.checkpoint.write_client_state`, one entry per
    round), so a client restarted by a resumed run keeps counting from its rounds before the
    kill. The count is the larger of the two plus one: a message can point the file
    elsewhere but cannot lower what this process counted. Never read from the server's
    message (issue 20: the server must not set the ε the client reports); without a state (a
    direct call) the call counts as the first round.
    """
    if state is None:
        return 1
    record = state.get(DPSGD_STATE_KEY) if DPSGD_STATE_KEY in state else None
    in_process = int(record["participations"]) if record is not None else 0
    path = _dpsgd_state_file(cfg or {}, partition)
    server_round = int((cfg or {}).get("server-round", 0))
    kept = read_client_state(path, server_round) if path is not None else None
    count = max(in_process, int(kept["participations"]) if kept else 0) + 1
    state[DPSGD_STATE_KEY] = MetricRecord({"participations": count})
    if path is not None:
        try:
            write_client_state(path, server_round, {"participations": count})
        except OSError as err:
            log(WARNING, "DP-SGD client %d: %s not written (%s)", partition, path, err)
    return count


def _dpsgd_state_file(cfg: Mapping[str, Any], partition: int) -> Path | None:
    folder = str(cfg.get(STATE_DIR_KEY, ""))
    return Path(folder) / f"{DPSGD_TASK}-{int(partition)}.json" if folder else None


def train_dpsgd(
    msg: Message, cfg: dict[str, Any], partition: int, state: RecordDict | None = None
) -> RecordDict:
    """Client task ``dp-sgd``: DP-SGD local training from the received global weights."""
    from clients.dpsgd_client import DpSgdSettings, dp_trainer_for, train_dpsgd
    from fedpriv.audit.example_canaries import with_example_canaries

    data = federated_data(cfg)
    client = data.clients[partition]
    trainer = dp_trainer_for(cfg, tuple(data.input_shape), data.num_classes)
    settings = TrainSettings.from_config(cfg, seed=call_seed(cfg, partition))
    weights = msg.content["arrays"].to_numpy_ndarrays()
    x_train, y_train = with_example_canaries(cfg, data, partition, client.x_train, client.y_train)
    new_weights, metrics = train_dpsgd(
        trainer,
        weights,
        x_train,
        y_train,
        settings,
        DpSgdSettings.from_config(cfg),
        participations=dpsgd_participations(state, cfg, partition),
    )
    metrics["num-examples"] = len(client.x_train)
    return RecordDict({"arrays": ArrayRecord(new_weights), "metrics": MetricRecord(metrics)})


def train_zonal(msg: Message, cfg: dict[str, Any], partition: int) -> RecordDict:
    """Client task ``zonal``: train, clip Δ to C, and add N(0, (z·C)²) in an LDP zone.

    Zones of level ``none`` (the no-DP baseline) send the trained weights unclipped.

    Sends ``θ + clip(Δ) (+ noise)``; metrics add ``zonal-update-norm`` (before clipping),
    ``zonal-clipped`` (1/0), ``zonal-noise-std`` (z·C in an LDP zone, else 0) and
    ``zonal-noise-norm``. The noise Generator is the client's OS entropy, or seeded per
    (seed, round, partition) when the run sets ``reproducible-noise``.
    """
    out = train_standard(msg, cfg, partition)
    reference = msg.content["arrays"].to_numpy_ndarrays()
    trained = out["arrays"].to_numpy_ndarrays()
    update = [
        np.asarray(a, np.float64) - np.asarray(g, np.float64) for a, g in zip(trained, reference)
    ]
    clipping_norm = float(cfg["zonal-clipping-norm"])
    level = cfg.get("zonal-level", "none")
    if level == "ldp":
        rng = seeds.privacy_rng(
            [call_seed(cfg, partition), *seeds.ZONAL_LDP_TAGS], reproducible=seeds.reproducible(cfg)
        )
        sent, info = ldp_client_update(
            update,
            noise_multiplier=float(cfg["zonal-noise-multiplier"]),
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


# The client-side list: task name -> implementation (the features name the same tasks).
TASKS: Mapping[str, Task] = {
    "standard": train_standard,
    DPSGD_TASK: train_dpsgd,
    ZONAL_TASK: train_zonal,
    ZONE_NODE_TASK: train_zone,
    IFCA_TASK: ifca_client.train_task,
}

# Tasks that also take the node's ``context.state`` (``task(msg, cfg, partition, state)``).
STATEFUL_TASKS: frozenset[str] = frozenset({DPSGD_TASK})

# Message handlers of custom message types: (``train`` | ``evaluate``, action, handler);
# ``handler(msg, cfg, context)`` gets the message's full config (``scenarios.client_app``).
Handler = Callable[[Message, dict[str, Any], Context], Message]
MESSAGE_HANDLERS: tuple[tuple[str, str, Handler], ...] = (
    ("train", IFCA_ACTION, ifca_client.train_handler),
    ("evaluate", IFCA_ACTION, ifca_client.evaluate_handler),
)
