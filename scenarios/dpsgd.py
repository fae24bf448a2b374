"""``privacy = dp-sgd``: client-side DP-SGD in the standard run (MP §4, untrusted server).

Declared here (``FEATURE``):

- client task ``dp-sgd`` (:func:`scenarios.client_tasks.train_dpsgd`): the client trains with
  Poisson-sampled DP-SGD (``clients.dpsgd_client``, ``fedpriv.dpsgd``) and puts its
  example-level ε in the train MetricRecord (``dp-sgd-epsilon``). The client computes ε from
  its own config and its own count of the rounds it trained in (its own release ledger,
  :mod:`fedpriv.releases`): the server sends no participation count and cannot set the ε a
  client reports.
- privacy mode ``dp-sgd``: :class:`DpSgdClients`, a thin Message-API wrapper around the
  stock strategy. It sets ``client-task = "dp-sgd"`` in the train config, mirrors how many
  rounds it asked each client to train (for the summary, not sent), and keeps each client's
  latest ε from its replies (Flower averages MetricRecords weighted by num-examples, so the
  per-client values are read from the replies here before delegating). ``round_metrics()``
  reports them per partition.
- summary block: summary.json ``privacy = {"mode": "dp-sgd", "epsilon" (headline: the
  largest client's ε), "dp_sgd": {...}}`` with ε per client, δ, the accountant, z and C.
- a consistency check: ``microbatches`` must be 0 (one example per clip).

The ε is a bound for the batching the clients run: Poisson sampling q = min(1, B/n),
add/remove-one example, PLD/RDP (``fedpriv.dpsgd``). The server adds no noise: aggregation
is the stock strategy's, on DP-SGD-trained models.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Optional

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy.strategy import Strategy

from fedpriv.disclosure import unaccounted_channels
from fedpriv.dpsgd import ACCOUNTANT_TEXT, ADJACENCY_TEXT, SAMPLING_TEXT
from fedpriv.records import PrivacyFigures
from scenarios.feature import Catalog, Feature
from scenarios.keys_dpsgd import KEYS
from scenarios.privacy_modes import declare
from scenarios.schema import ConfigError
from scenarios.task_names import DPSGD_TASK as TASK
from scenarios.task_names import EPSILON_KEY
from strategies.base import StrategyWrapper

EPSILON_LABEL = (
    "example level, add/remove-one example, Poisson-sampled batches as the clients run "
    "them (PLD/RDP): an upper bound"
)


def _reply_metrics(reply: Message) -> dict[str, Any]:
    records = list(reply.content.metric_records.values())
    return dict(records[0]) if records else {}


class DpSgdClients(StrategyWrapper):
    """Ask the sampled clients for DP-SGD training and keep their ε (per node)."""

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy
        self.participations: dict[int, int] = {}
        self.epsilon: dict[int, float] = {}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Delegate with ``client-task = dp-sgd``; mirror each client's participation count
        (the clients count their own, in their own state directories: issue 26)."""
        config = ConfigRecord({**dict(config), "client-task": TASK})
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        for msg in messages:
            node = msg.metadata.dst_node_id
            self.participations[node] = self.participations.get(node, 0) + 1
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Record each replying client's ε, then delegate."""
        replies = list(replies)
        for reply in replies:
            if reply.has_error():
                continue
            metrics = _reply_metrics(reply)
            if EPSILON_KEY in metrics:
                self.epsilon[reply.metadata.src_node_id] = float(metrics[EPSILON_KEY])
        return self.strategy.aggregate_train(server_round, replies)

    def round_metrics(self) -> dict[str, Any]:
        """Cumulative ε and participations per client (node ids; the recorder maps them)."""
        return {
            "dp-sgd-epsilon-nodes": dict(self.epsilon),
            "dp-sgd-participations-nodes": dict(self.participations),
            "dp-sgd-epsilon-max": max(self.epsilon.values(), default=0.0),
            "dp-sgd-epsilon-bounds": EPSILON_LABEL,
        }


def _last_per_client(rounds: list[dict], key: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for record in rounds:
        if isinstance(record.get(key), dict):
            out.update({str(k): v for k, v in record[key].items()})
    return dict(sorted(out.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else kv[0]))


def dpsgd_summary(cfg: Mapping[str, Any], rounds: list[dict]) -> dict:
    """summary.json ``privacy`` block of a dp-sgd run (ε per client, keyed by partition).

    ε per client is the latest figure the client reported (its own accounting); a client
    that was never sampled has ε = 0 (its data was never used).
    """
    if cfg["privacy"] != TASK:
        return {}
    never = {str(p): 0.0 for p in range(int(cfg["num-clients"]))}
    bound = {**never, **_last_per_client(rounds, "dp-sgd-epsilon")}
    finite = [float(v) for v in bound.values() if np.isfinite(float(v))]
    headline = max((float(v) for v in bound.values()), default=None)
    z, clip = float(cfg["dp-sgd-noise-multiplier"]), float(cfg["l2-norm-clip"])
    figures = PrivacyFigures(
        mode=TASK,
        bound=f"{ADJACENCY_TEXT}; {SAMPLING_TEXT}",
        noise_multiplier=z,
        sigma_mean=z * clip,  # the noise std on the summed clipped gradients
        epsilon=headline,
        delta=float(cfg["dp-sgd-delta"]),
    )
    return {
        PrivacyFigures.KEY: figures.to_json(),
        "privacy": {
            "mode": TASK,
            "epsilon": headline,
            "delta": float(cfg["dp-sgd-delta"]),
            "accountant": ACCOUNTANT_TEXT,
            "adjacency": ADJACENCY_TEXT,
            "sampling": SAMPLING_TEXT,
            "unaccounted": unaccounted_channels(cfg),
            "dp_sgd": {
                "epsilon_per_client": bound,
                "participations_per_client": _last_per_client(rounds, "dp-sgd-participations"),
                "epsilon_max": headline,
                "epsilon_mean": float(np.mean(finite)) if finite else None,
                "delta": float(cfg["dp-sgd-delta"]),
                "noise_multiplier": z,
                "l2_norm_clip": clip,
                "batch_size": int(cfg["batch-size"]),
                "local_epochs": int(cfg["local-epochs"]),
                "sampling": SAMPLING_TEXT,
                "accountant": ACCOUNTANT_TEXT,
            },
        },
    }


def check_microbatches(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """``microbatches`` must be 0: DP-SGD clips each example (the option went with
    tensorflow-privacy; clipping means of several examples would double the sensitivity)."""
    del catalog
    if cfg["privacy"] == TASK and cfg["microbatches"] != 0:
        raise ConfigError(
            "microbatches", cfg["microbatches"], "0 (DP-SGD clips each example on its own)"
        )


FEATURE = Feature(
    name="dp-sgd",
    description="Client-side DP-SGD (Poisson batches), example-level epsilon per client.",
    keys=KEYS,
    privacy_modes=(declare(TASK, lambda strategy, cfg, rng: DpSgdClients(strategy)),),
    client_tasks=(TASK,),
    summary=dpsgd_summary,
    checks=(check_microbatches,),
)
