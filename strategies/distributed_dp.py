"""Distributed DP under secure aggregation for Flower's Message API (``privacy = distributed-dp``).

:class:`DistributedDP` wraps a stock strategy whose aggregate is a mean. Per round, around
the inner strategy's sample (its train messages name the cohort):

1. **advertise** — one message per client (packed per worker SuperNode by the grid) asks
   for its two public keys (masking, share channel); the cohort is who answered, ids 0..n−1
   by node id;
2. **shares** — each gets the cohort's public keys and returns its Shamir shares sealed to
   each holder (opaque bytes to the server, :mod:`fedpriv.privacy.distributed.party`); a
   client that fails here leaves the cohort and the step is repeated without it;
3. **train** — the inner strategy's train messages plus the cohort's keys; each client
   trains, encodes (clip, rotate, round, its Skellam share) and masks its update and
   returns only the masked vector in Z_m;
4. **unmask** — the survivors get the shares sealed to them and the lists of survivors and
   dropped clients, and reveal what recovers the dropped clients' pairwise masks and the
   survivors' self masks (:class:`fedpriv.privacy.distributed.secagg.SecAggServer`); the sum
   is decoded to the mean update (``decode_mean``, ``rate`` q under ``poisson``) and handed to
   the inner strategy as one reply of weight 1 (as ``ServerSideFixedClippingDP`` hands its
   noised mean), so FedAvgM/FedOpt state only ever sees the decoded noisy mean.

The server holds no client secret: what it received in the last round (public keys, sealed
shares, masked vectors, reveals, the unmasked sum) is kept in :attr:`DistributedDP.view`
for tests and audits. With ``FEDPRIV_DISTRIBUTED_AUDIT_DIR`` set in the ServerApp's
environment, each round's view is also written there (``round-<r>.npz``: the masked vectors
as received, the unmasked sum, the decoded mean, the cohort's node ids, survivors, dropped and
who revealed), so a deployment test can check that the server saw nothing but masked vectors.
Fewer than t survivors: no sum, the round is skipped.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from logging import INFO, WARNING
from typing import Any, Optional

import numpy as np
from fedpriv.strategies.array_records import array_view, named_record
from fedpriv.strategies.base import StrategyWrapper
from flwr.common import (
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
    log,
)
from flwr.server import Grid
from flwr.serverapp.strategy.strategy import Strategy

from fedpriv.privacy.distributed import encoding, party, secagg
from fedpriv.privacy.modes.distributed_dp import STEP_KEY, TASK, Resolved

__all__ = ["DistributedDP", "SECAGG_RECORD", "MASKED_KEY"]

SECAGG_RECORD = "secagg"  # the ConfigRecord carrying the protocol's keys, shares and lists
MASKED_KEY = "masked"  # the ArrayRecord key of a client's masked vector
STEPS = ("keys", "shares", "masked", "reveal")
AUDIT_ENV = "FEDPRIV_DISTRIBUTED_AUDIT_DIR"  # where each round's server view is written


def _secagg(reply: Message) -> Mapping[str, Any]:
    return reply.content[SECAGG_RECORD] if SECAGG_RECORD in reply.content else {}


class DistributedDP(StrategyWrapper):
    """SecAgg rounds with Skellam-noised encodings around a mean ``strategy``.

    ``resolve(dimension) -> Resolved``: the round parameters for a model of that many
    weights (the server computes them from its config as every client does from its own);
    ``drop``: partitions whose masked vectors the server discards (fault injection).
    """

    CHECKPOINT_SKIP = ("view", "reference", "_grid", "_round")

    def __init__(self, strategy: Strategy, resolve, *, drop: Iterable[int] = ()) -> None:
        self.strategy = strategy
        self.resolve = resolve
        self.drop = frozenset(int(p) for p in drop)
        self.view: dict[str, Any] = {}
        self.reference = ArrayRecord()
        self.last: dict[str, Any] = {}
        self._grid: Any = None
        self._round: dict[str, Any] = {}

    def summary(self) -> None:
        """Log the wrapper, then the inner strategy."""
        log(INFO, "\t├──> DistributedDP (secure aggregation, Skellam noise shares)")
        self.strategy.summary()

    # -- messages -------------------------------------------------------------------------

    def _send(
        self, step: str, config: ConfigRecord, records: Mapping[int, ConfigRecord], round_: int
    ) -> dict[int, Message]:
        cfg = {k: v for k, v in dict(config).items() if k != "evaluate-received"}
        cfg = ConfigRecord({**cfg, "client-task": TASK, STEP_KEY: step, "server-round": round_})
        messages = [
            Message(
                RecordDict({"config": cfg, SECAGG_RECORD: record}),
                node,
                MessageType.TRAIN,
                group_id=str(round_),
            )
            for node, record in records.items()
        ]
        replies = self._grid.send_and_receive(messages=messages, timeout=3600)
        return {
            int(r.metadata.src_node_id): r
            for r in replies
            if not r.has_error() and SECAGG_RECORD in r.content
        }

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Advertise keys and route sealed shares for the inner strategy's sample, then
        return its train messages for the cohort, with the cohort's public keys."""
        self._grid, self.reference = grid, arrays
        self._resolved()  # a setting the model cannot work with fails here, before any message
        self.view = {"round": server_round}
        train_cfg = ConfigRecord({**dict(config), "client-task": TASK, STEP_KEY: "masked"})
        messages = list(self.strategy.configure_train(server_round, arrays, train_cfg, grid))
        nodes = sorted(int(m.metadata.dst_node_id) for m in messages)
        keys = self._send("keys", config, {n: ConfigRecord({}) for n in nodes}, server_round)
        cohort = [n for n in nodes if n in keys]
        sealed: dict[int, Message] = {}
        while cohort:
            mask_keys = [bytes(keys[n].content[SECAGG_RECORD]["mask-key"]) for n in cohort]
            channel_keys = [bytes(keys[n].content[SECAGG_RECORD]["channel-key"]) for n in cohort]
            common = {"n": len(cohort), "mask-keys": mask_keys, "channel-keys": channel_keys}
            records = {n: ConfigRecord({**common, "id": i}) for i, n in enumerate(cohort)}
            sealed = self._send("shares", config, records, server_round)
            if all(n in sealed for n in cohort):
                break
            cohort = [n for n in cohort if n in sealed]
        self._round = {
            "cohort": cohort,
            "mask-keys": [bytes(keys[n].content[SECAGG_RECORD]["mask-key"]) for n in cohort],
            "channel-keys": [bytes(keys[n].content[SECAGG_RECORD]["channel-key"]) for n in cohort],
            "sealed": {
                (i, int(h)): bytes(blob)
                for i, n in enumerate(cohort)
                for h, blob in zip(
                    sealed[n].content[SECAGG_RECORD]["holders"],
                    sealed[n].content[SECAGG_RECORD]["sealed"],
                )
            },
            "config": config,
        }
        if len(cohort) < self.resolve_threshold():
            log(WARNING, "round %s: a cohort of %d < threshold: no masked round is started",
                server_round, len(cohort))  # fmt: skip
            return []
        self.view.update(public_keys=dict(zip(cohort, self._round["mask-keys"])),
                         sealed_shares=dict(self._round["sealed"]))  # fmt: skip
        out = []
        for msg in messages:
            node = int(msg.metadata.dst_node_id)
            if node not in cohort:
                continue
            record = ConfigRecord(
                {"n": len(cohort), "id": cohort.index(node), "mask-keys": self._round["mask-keys"]}
            )
            out.append(
                Message(
                    RecordDict({**dict(msg.content.items()), SECAGG_RECORD: record}),
                    node,
                    msg.metadata.message_type,
                    group_id=msg.metadata.group_id,
                )
            )
        return out

    # -- checks the validation wrapper asks for ---------------------------------------------

    def train_reply_problem(self, reply: Message) -> Optional[str]:
        """Why a masked reply is unusable (None: one ArrayRecord with one uint64 vector of
        the padded size, every value in Z_m)."""
        records = list(reply.content.array_records.values())
        if len(records) != 1 or list(records[0].keys()) != [MASKED_KEY]:
            return f"expected one ArrayRecord holding {MASKED_KEY!r}"
        params = self._params()
        value = array_view(records[0][MASKED_KEY])
        if value.dtype != np.uint64 or value.shape != (params.padded_dim,):
            return (
                f"masked vector {value.dtype} {value.shape}; expected uint64 ({params.padded_dim},)"
            )
        if value.size and int(value.max()) >= (1 << params.bits):
            return f"masked vector has values outside Z_(2^{params.bits})"
        return None

    def resolve_threshold(self) -> int:
        """t of the round (the plan's, whatever the cohort that answered)."""
        return self._resolved().threshold

    def _resolved(self) -> Resolved:
        dimension = sum(array_view(a).size for a in self.reference.values())
        return self.resolve(dimension)

    def _params(self) -> encoding.EncodingParams:
        return self._resolved().encoding

    # -- aggregation ------------------------------------------------------------------------

    def _partition(self, node: int) -> int:
        return int(getattr(self._grid, "node_to_partition", {}).get(node, node))

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Unmask the survivors' sum with the shares they reveal, decode the mean update and
        hand ``w_g + mean`` to the inner strategy as one reply of weight 1."""
        resolved = self._resolved()
        params = resolved.encoding
        cohort = self._round.get("cohort", [])
        arrived = {int(r.metadata.src_node_id): r for r in replies if not r.has_error()}
        dropped_nodes = [n for n in arrived if self._partition(n) in self.drop]
        for node in dropped_nodes:
            arrived.pop(node)
        survivors = [i for i, n in enumerate(cohort) if n in arrived]
        dropped = [i for i, n in enumerate(cohort) if n not in arrived]
        self.last = {"cohort": len(cohort), "survivors": len(survivors),
                     "dropped": [cohort[i] for i in dropped], "skipped": False}  # fmt: skip
        masked = {
            i: array_view(arrived[cohort[i]].content["arrays"][MASKED_KEY]) for i in survivors
        }
        self.view["masked"] = dict(masked)
        if len(survivors) < resolved.threshold:
            log(WARNING, "round %s: %d survivors < threshold %d: no sum is unmasked",
                server_round, len(survivors), resolved.threshold)  # fmt: skip
            self.last["skipped"] = True
            return None, None
        reveals = self._reveal(server_round, survivors, dropped)
        sa = self._secagg_params(server_round, resolved)
        server = secagg.SecAggServer(sa, dict(enumerate(self._round["mask-keys"])))
        total = server.unmask(masked, reveals)
        self.view["sum"] = total
        mean = encoding.decode_mean(total, params, len(survivors), rate=resolved.rate)
        self.last["noise-std"] = float(
            np.sqrt(resolved.noisy_clients * params.noise_variance) / params.scale
        )
        self._audit(server_round, cohort, survivors, dropped, mean)
        return self._through_inner(server_round, arrived[cohort[survivors[0]]], mean)

    def _audit(
        self, round_: int, cohort: list[int], survivors: list[int], dropped: list[int], mean
    ) -> None:
        """Write the round's view to ``$FEDPRIV_DISTRIBUTED_AUDIT_DIR/round-<r>.npz`` (if set)."""
        folder = os.environ.get(AUDIT_ENV, "")
        if not folder:
            return
        os.makedirs(folder, exist_ok=True)
        masked = self.view.get("masked", {})
        np.savez(
            os.path.join(folder, f"round-{int(round_)}.npz"),
            cohort=np.asarray(cohort, dtype=np.uint64),  # Flower's node ids: 64-bit unsigned
            survivors=np.asarray(survivors, dtype=np.int64),
            dropped=np.asarray(dropped, dtype=np.int64),
            revealed=np.asarray(sorted(self.view.get("reveals", {})), dtype=np.int64),
            bits=np.int64(self._params().bits),
            sum=np.asarray(self.view["sum"]),
            mean=np.asarray(mean),
            **{f"masked-{i}": np.asarray(v) for i, v in masked.items()},
        )

    def _secagg_params(self, round_: int, resolved: Resolved) -> secagg.SecAggParams:
        """The round's SecAgg+ parameters: the cohort's graph from its keys, as the clients
        build it (:func:`fedpriv.privacy.distributed.party.cohort_params`)."""
        return party.cohort_params(
            threshold=resolved.threshold,
            bits=resolved.encoding.bits,
            size=resolved.encoding.padded_dim,
            context=round_label(round_),
            mask_keys=self._round["mask-keys"],
            colluders=resolved.colluders,
        )

    def _reveal(
        self, server_round: int, survivors: list[int], dropped: list[int]
    ) -> dict[int, secagg.Reveal]:
        cohort, sealed = self._round["cohort"], self._round["sealed"]
        common = {
            "n": len(cohort),
            "mask-keys": self._round["mask-keys"],
            "channel-keys": self._round["channel-keys"],
            "survivors": survivors,
            "dropped": dropped,
        }
        records = {}
        for i in survivors:
            owners = sorted(o for (o, h) in sealed if h == i)
            records[cohort[i]] = ConfigRecord(
                {**common, "id": i, "owners": owners, "sealed": [sealed[(o, i)] for o in owners]}
            )
        answers = self._send("reveal", self._round["config"], records, server_round)
        reveals = {
            cohort.index(node): party.reveal_from_bytes(bytes(r.content[SECAGG_RECORD]["reveal"]))
            for node, r in answers.items()
        }
        self.view["reveals"] = dict(reveals)
        return reveals

    def _through_inner(
        self, server_round: int, template: Message, mean: np.ndarray
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        globals_ = [array_view(a) for a in self.reference.values()]
        out, start = [], 0
        for g in globals_:
            step = mean[start : start + g.size].reshape(g.shape)
            out.append((g.astype(np.float64) + step).astype(g.dtype))
            start += g.size
        record = named_record(list(self.reference.keys()), out)
        weight_key = str(getattr(self.strategy, "weighted_by_key", "num-examples"))
        content = RecordDict({"arrays": record, "metrics": MetricRecord({weight_key: 1})})
        one = Message(content=content, metadata=copy.copy(template.metadata))
        arrays, _ = self.strategy.aggregate_train(server_round, [one])
        return arrays, MetricRecord({"secagg-survivors": self.last["survivors"]})

    def round_metrics(self) -> dict[str, Any]:
        """The round's cohort, survivors, dropped clients (node ids) and noise."""
        return {
            "distributed-cohort": self.last.get("cohort", 0),
            "distributed-survivors": self.last.get("survivors", 0),
            "distributed-dropped-nodes": list(self.last.get("dropped", [])),
            "distributed-noise-std": self.last.get("noise-std"),
            "distributed-skipped": bool(self.last.get("skipped", False)),
        }


def round_label(server_round: int) -> bytes:
    """The round's label mixed into every pair seed (server and clients alike)."""
    return f"fedpriv-ddp-round-{int(server_round)}".encode()
