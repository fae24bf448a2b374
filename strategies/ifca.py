"""Laplace-sanitizing IFCA, server side (GP Algorithm 1; SPEC §3.4), Flower Message API.

:class:`LaplaceIFCA` is a ``flwr.serverapp.strategy.Strategy``. The "global arrays" of the
Message API are ALL k hypotheses in ONE ArrayRecord with keys ``"<j>/<layer>"`` (so
``Strategy.start``, ``Result.arrays`` and any Flower tooling see one record). Per round:

- ``configure_train``: U users sampled with the run's seeded Generator among the training
  (non-validation) partitions; each gets every hypothesis (message type ``train.ifca``);
- ``aggregate_train``: the replies hold only θ̂ (or nothing: a decline). k-means on the U'
  released vectors with the current hypotheses as initial centroids
  (:func:`fedpriv.ifca.kmeans_step`), θ_j ← uniform mean of its members, an empty cluster
  keeps θ_j. The server's mirror of the leakage ledgers charges n/ν per received θ̂ (the
  cost does not depend on δ, which the server never sees); the clients' own ledgers are
  authoritative (see ``fedpriv.clients.ifca_client``);
- ``configure_evaluate`` / ``aggregate_evaluate``: the held-out validation users pick their
  best hypothesis and report its loss (``evaluate.ifca``); the mean validation objective
  (RMSE, GP Eq. 10, for regression; cross-entropy for classifiers) drives early stopping;
- :meth:`LaplaceIFCA.start` is ``Strategy.start`` plus a round-0 validation, early stopping
  with ``patience`` (keeping the best hypotheses) and a stop when no training user can
  afford another participation.

A reply is a decline when its content is empty. Anything else but exactly one ArrayRecord
``theta-hat`` of the model's size with finite values (extra records, wrong size, NaN/Inf) never
reaches the k-means step: it is dropped and reported under ``invalid`` (SPEC §7).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from logging import INFO, WARNING
from typing import Any, Optional

import numpy as np
from fedpriv.strategies.array_records import named_record
from fedpriv.strategies.reply_checks import checked_evaluations
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result
from flwr.serverapp.strategy.strategy import Strategy

from fedpriv.ifca import (
    ACTION,
    CONFIG_KEY,
    HYPOTHESES_KEY,
    METRICS_KEY,
    REPLY_KEY,
    EarlyStopping,
    flatten,
    kmeans_step,
    num_params,
    pack_hypotheses,
    unflatten,
    unpack_hypotheses,
)
from fedpriv.privacy.accounting import LeakageLedger, laplace_leakage


def hypotheses_record(hypotheses: Sequence[Sequence[np.ndarray]]) -> ArrayRecord:
    """All k hypotheses as ONE ArrayRecord, keys ``"<j>/<layer>"`` (the broadcast; the format
    is :func:`fedpriv.ifca.pack_hypotheses`)."""
    named = pack_hypotheses(hypotheses)
    return named_record(named.keys(), named.values())


def hypotheses_from_record(record: ArrayRecord) -> list[list[np.ndarray]]:
    """Inverse of :func:`hypotheses_record` (:func:`fedpriv.ifca.unpack_hypotheses`, which the
    clients call on the record they receive)."""
    return unpack_hypotheses(record)


TRAIN_TYPE = f"train.{ACTION}"
EVALUATE_TYPE = f"evaluate.{ACTION}"
SMALL_MODEL = 16  # record hypotheses and released vectors in rounds.jsonl up to this n


class LaplaceIFCA(Strategy):
    """GP Algorithm 1 on the Message API (see the module docstring)."""

    # node ids of this simulation's federation: not part of a checkpoint (fedpriv.checkpoint)
    CHECKPOINT_SKIP = ("node_of", "partition_of")

    def __init__(
        self,
        *,
        num_hypotheses: int,
        users_per_round: int,
        train_partitions: Sequence[int],
        validation_partitions: Sequence[int],
        node_of_partition: Mapping[int, int],
        noise_multiplier: float,
        leakage_budget: float,
        patience: int,
        rng: np.random.Generator,
        on_round_end: Optional[Callable[[dict[str, Any]], None]] = None,
    ) -> None:
        if num_hypotheses < 1:
            raise ValueError(f"num_hypotheses = {num_hypotheses!r}; expected >= 1")
        if not 1 <= users_per_round <= len(train_partitions):
            raise ValueError(
                f"users_per_round = {users_per_round!r}; expected 1..{len(train_partitions)}"
            )
        if noise_multiplier < 0 or leakage_budget < 0:
            raise ValueError("noise_multiplier and leakage_budget must be >= 0")
        if leakage_budget > 0 and noise_multiplier == 0:
            raise ValueError("leakage_budget > 0 needs noise_multiplier > 0 (nu = 0: no bound)")
        self.k = int(num_hypotheses)
        self.users_per_round = int(users_per_round)
        self.train_partitions = sorted(int(p) for p in train_partitions)
        self.validation_partitions = sorted(int(p) for p in validation_partitions)
        self.node_of = {int(p): int(n) for p, n in node_of_partition.items()}
        self.partition_of = {n: p for p, n in self.node_of.items()}
        self.nu = float(noise_multiplier)
        self.budget = float(leakage_budget)
        self.patience = int(patience)
        self.rng = rng
        self.on_round_end = on_round_end
        self.ledger = LeakageLedger(budget=self.budget if self.budget > 0 else math.inf)
        self.participations: dict[int, int] = {}
        self.last_cluster: dict[int, int] = {}
        self.current: dict[str, Any] = {}
        self.best_round = 0
        self.stopped = "num-server-rounds"
        self.rounds_run = 0
        self.dim = 0
        self.stopper = EarlyStopping(self.patience)
        self.best: Optional[ArrayRecord] = None
        self._sent: Optional[ArrayRecord] = None

    # --- helpers ------------------------------------------------------------------------------

    def leakage_per_participation(self) -> Optional[float]:
        """n/ν (GP §3.2), or None for ν = 0 (no sanitization, no finite guarantee)."""
        return laplace_leakage(self.dim, self.nu) if self.nu > 0 and self.dim else None

    def make_messages(
        self,
        partitions: Iterable[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        message_type: str,
        server_round: int,
        extra: Mapping[str, Any],
    ) -> list[Message]:
        cfg = ConfigRecord({**dict(config), "server-round": int(server_round), **extra})
        return [
            Message(
                RecordDict({HYPOTHESES_KEY: arrays, CONFIG_KEY: cfg}),
                self.node_of[p],
                message_type,
                group_id=str(server_round),
            )
            for p in partitions
        ]

    def summary(self) -> None:
        """Log the configuration."""
        log(
            INFO,
            "\t├── LaplaceIFCA: k = %d, U = %d, nu = %g, budget = %s, patience = %d",
            self.k,
            self.users_per_round,
            self.nu,
            self.budget or "none",
            self.patience,
        )
        log(
            INFO,
            "\t└── %d training users, %d validation users",
            len(self.train_partitions),
            len(self.validation_partitions),
        )

    # --- training -------------------------------------------------------------------------------

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Sample U training users (seeded) and send each all k hypotheses."""
        del grid
        chosen = self.rng.choice(len(self.train_partitions), self.users_per_round, replace=False)
        sampled = sorted(self.train_partitions[int(i)] for i in chosen)
        self.current = {"round": int(server_round), "sampled": sampled}
        self._sent = arrays
        return self.make_messages(sampled, arrays, config, TRAIN_TYPE, server_round, {})

    def _released(self, replies: Iterable[Message], template: list[np.ndarray]):
        """Split replies into released vectors / declines / failures / invalid updates."""
        vectors, participants, declined, failed, invalid = [], [], [], [], {}
        n = num_params(template)

        def partition(message: Message) -> int:
            return self.partition_of.get(message.metadata.src_node_id, -1)

        for reply in sorted(replies, key=partition):
            part = partition(reply)
            if reply.has_error():
                failed.append(part)
                continue
            content = reply.content
            names = [*content.array_records, *content.metric_records, *content.config_records]
            if not names:
                declined.append(part)
                continue
            if names != [REPLY_KEY] or REPLY_KEY not in content.array_records:
                invalid[str(part)] = f"records {names}; expected only {REPLY_KEY!r}"
                continue
            vector = flatten(reply.content.array_records[REPLY_KEY].to_numpy_ndarrays())
            if vector.size != n or not np.all(np.isfinite(vector)):
                invalid[str(part)] = "wrong size" if vector.size != n else "non-finite values"
                continue
            vectors.append(vector)
            participants.append(part)
        return vectors, participants, declined, failed, invalid

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """GP Algorithm 1 lines 9–10: k-means on the released vectors, initialised at the
        hypotheses sent by :meth:`configure_train`; uniform means; ledger mirror."""
        if self._sent is None:
            raise RuntimeError("aggregate_train before configure_train")
        hypotheses = hypotheses_from_record(self._sent)
        template = hypotheses[0]
        self.dim = num_params(template)
        vectors, participants, declined, failed, invalid = self._released(replies, template)
        centroids = np.stack([flatten(h) for h in hypotheses])
        points = np.stack(vectors) if vectors else np.zeros((0, self.dim))
        step = kmeans_step(points, centroids)
        cost = self.leakage_per_participation()
        for part, label in zip(participants, step.labels):
            self.participations[part] = self.participations.get(part, 0) + 1
            self.last_cluster[part] = int(label)
            if cost is not None:
                self.ledger.charge(part, cost)
        record = {
            "participants": participants,
            "declined": declined,
            "failed": failed,
            "invalid": invalid,
            "cluster_sizes": step.sizes,
            "empty_clusters": step.empty,
            "assignment": {str(p): int(c) for p, c in zip(participants, step.labels)},
            "shift": np.linalg.norm(step.centroids - centroids, axis=1).tolist(),
            "leakage_per_participation": cost,
            "ledger": self.ledger_report(),
        }
        if self.dim <= SMALL_MODEL:
            record["released"] = points.tolist()
            record["hypotheses"] = step.centroids.tolist()
        self.current.update(record)
        new = [unflatten(c, template) for c in step.centroids]
        metrics = MetricRecord(
            {"participants": len(participants), "declined": len(declined), "failed": len(failed)}
        )
        return hypotheses_record(new), metrics

    def ledger_report(self) -> dict[str, Any]:
        """Mirror-ledger statistics: median/max/mean over participants, per-cluster max."""
        stats: dict[str, Any] = dict(self.ledger.stats())
        stats["participations"] = int(sum(self.participations.values()))
        stats["max_participations"] = max(self.participations.values(), default=0)
        per_cluster = [0.0] * self.k
        for part, cluster in self.last_cluster.items():
            per_cluster[cluster] = max(per_cluster[cluster], self.ledger.spent.get(part, 0.0))
        stats["per_cluster_max"] = per_cluster if self.nu > 0 else None
        if self.nu == 0:
            stats.update(median=None, max=None, mean=None, min=None)
        return stats

    def anyone_can_participate(self) -> bool:
        """False once every training user's next participation would exceed the budget."""
        cost = self.leakage_per_participation()
        if cost is None or self.budget <= 0:
            return True
        return any(self.ledger.can_participate(p, cost) for p in self.train_partitions)

    # --- validation -----------------------------------------------------------------------------

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Every validation user evaluates every hypothesis (``evaluate.ifca``, split all)."""
        del grid
        return self.make_messages(
            self.validation_partitions,
            arrays,
            config,
            EVALUATE_TYPE,
            server_round,
            {"ifca-eval-split": "all"},
        )

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> Optional[MetricRecord]:
        """Mean (over validation users) loss / rmse / accuracy of each user's best hypothesis;
        a malformed reply is dropped and named under ``invalid-evaluations``
        (:func:`checked_validation`); error replies are left out and counted under the
        validation's ``failed`` (only when some failed)."""
        replies = list(replies)
        failed = sum(1 for reply in replies if reply.has_error())
        replies, invalid = checked_validation(replies, self.k)
        if invalid:
            self.current["invalid-evaluations"] = invalid
            log(WARNING, "[IFCA round %d] dropped invalid evaluations: %s", server_round, invalid)
        metrics = summarise_evaluation(replies, self.k)
        if metrics is None:
            return None
        if failed:
            metrics["failed"] = failed
            log(WARNING, "[IFCA round %d] %d validation replies failed", server_round, failed)
        self.current["validation"] = metrics
        return MetricRecord({k: v for k, v in metrics.items() if isinstance(v, (int, float))})

    # --- the loop -----------------------------------------------------------------------------

    def _validate(
        self,
        grid: Grid,
        server_round: int,
        arrays: ArrayRecord,
        config: ConfigRecord,
        timeout: Optional[float],
    ) -> Optional[float]:
        if not self.validation_partitions:
            return None
        replies = grid.send_and_receive(
            self.configure_evaluate(server_round, arrays, config, grid), timeout=timeout
        )
        metrics = self.aggregate_evaluate(server_round, replies)
        return None if metrics is None else float(metrics["objective"])

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: Optional[float] = None,
        train_config: Optional[ConfigRecord] = None,
        evaluate_config: Optional[ConfigRecord] = None,
        evaluate_fn: Optional[Callable[[int, ArrayRecord], Optional[MetricRecord]]] = None,
        *,
        first_round: int = 1,
        after_round: Sequence[Callable[[int, ArrayRecord], None]] = (),
    ) -> Result:
        """Rounds ``first_round..T`` of GP Algorithm 1 with early stopping; ``Result.arrays``
        = best.

        ``after_round(round, hypotheses)`` hooks run after each round's record (the
        checkpoint point, :mod:`fedpriv.scenarios.app.resume`). A resumed run passes ``first_round
        = k+1``
        and the hypotheses after round k, its state (sampling Generator, mirror ledger,
        early-stopping state, best hypotheses) restored first; the round-0 validation is
        then not repeated.
        """
        del evaluate_fn
        train_config = train_config or ConfigRecord()
        evaluate_config = evaluate_config or train_config
        result = Result()
        arrays = initial_arrays
        self.dim = num_params(hypotheses_from_record(initial_arrays)[0])
        if first_round == 1:
            self.best = initial_arrays
            self.current = {"round": 0}
            loss = self._validate(grid, 0, arrays, evaluate_config, timeout)
            if loss is not None:
                self.stopper.update(0, loss)
            self._end_round(0, initial_arrays, loss, time.time())
        for server_round in range(int(first_round), int(num_rounds) + 1):
            if self.stopped != "num-server-rounds":  # early stopping (a resumed run too)
                break
            t0 = time.time()
            if not self.anyone_can_participate():
                self.stopped = "leakage-budget"
                break
            messages = self.configure_train(server_round, arrays, train_config, grid)
            replies = grid.send_and_receive(messages, timeout=timeout)
            arrays, train_metrics = self.aggregate_train(server_round, replies)
            result.train_metrics_clientapp[server_round] = train_metrics
            loss = self._validate(grid, server_round, arrays, evaluate_config, timeout)
            if "validation" in self.current:
                result.evaluate_metrics_clientapp[server_round] = MetricRecord(
                    {
                        k: v
                        for k, v in self.current["validation"].items()
                        if isinstance(v, (int, float))
                    }
                )
            self.rounds_run = server_round
            if loss is None or self.stopper.update(server_round, loss):
                self.best, self.best_round = arrays, server_round
            self._end_round(server_round, arrays, loss, t0)
            if loss is not None and self.stopper.should_stop:
                self.stopped = "early-stopping"
            for hook in after_round:
                hook(server_round, arrays)
        result.arrays = self.best
        return result

    def _end_round(
        self,
        server_round: int,
        arrays: ArrayRecord,
        loss: Optional[float],
        t0: float,
    ) -> None:
        stopper = self.stopper
        record = {"round": server_round, **self.current}
        if server_round == 0 and self.dim <= SMALL_MODEL:
            record["hypotheses"] = [flatten(h).tolist() for h in hypotheses_from_record(arrays)]
        record["best_round"] = stopper.best_round if loss is not None else server_round
        record["since_best"] = stopper.since_best if loss is not None else 0
        record["seconds"] = time.time() - t0
        val = record.get("validation", {})
        log(
            INFO,
            "[IFCA round %d] participants %s declined %s sizes %s val %s",
            server_round,
            len(record.get("participants", [])),
            len(record.get("declined", [])),
            record.get("cluster_sizes"),
            val.get("objective"),
        )
        if record.get("invalid"):
            log(
                WARNING,
                "[IFCA round %d] dropped invalid updates: %s",
                server_round,
                record["invalid"],
            )
        if self.on_round_end is not None:
            self.on_round_end(record)
        self.current = {}


def checked_validation(replies: Iterable[Message], k: int) -> tuple[list[Message], dict[str, str]]:
    """(usable, {node id: reason}) of IFCA evaluate replies: the answered ones whose content
    is the one MetricRecord ``METRICS_KEY`` with a valid ``num-examples``, bounded finite
    metrics (:func:`fedpriv.strategies.reply_checks.evaluate_problem`) and a ``hypothesis`` index in
    [0, k). Error replies and declines (an empty content) are left out, not counted."""
    answered = [r for r in replies if not r.has_error() and len(r.content.keys()) > 0]
    usable, rejected = checked_evaluations(
        answered, record=METRICS_KEY, required=("hypothesis",), same_keys=False
    )
    kept = []
    for reply in usable:
        choice = float(reply.content[METRICS_KEY]["hypothesis"])
        if choice.is_integer() and 0 <= choice < k:
            kept.append(reply)
        else:
            rejected[reply.metadata.src_node_id] = f"hypothesis = {choice:g} is outside 0..{k - 1}"
    return kept, {str(node): reason for node, reason in rejected.items()}


def summarise_evaluation(replies: Iterable[Message], k: int) -> Optional[dict[str, Any]]:
    """Uniform means over users of their best-hypothesis metrics, plus weighted means and
    the hypothesis-choice counts. ``objective`` = mean RMSE (regression, GP Eq. 10) or mean
    cross-entropy (classifiers). None when no user answered."""
    rows = [
        dict(r.content[METRICS_KEY])
        for r in replies
        if not r.has_error() and METRICS_KEY in r.content.metric_records
    ]
    if not rows:
        return None
    weights = np.array([float(r["num-examples"]) for r in rows])
    out: dict[str, Any] = {"clients": len(rows), "num-examples": int(weights.sum())}
    for name in ("loss", "rmse", "accuracy"):
        if all(name in r for r in rows):
            values = np.array([float(r[name]) for r in rows])
            out[name] = float(values.mean())
            out[f"{name}_weighted"] = float((values * weights).sum() / max(weights.sum(), 1.0))
    out["objective"] = out["rmse"] if "rmse" in out else out["loss"]
    out["choices"] = np.bincount([int(r["hypothesis"]) for r in rows], minlength=k).tolist()
    return out
