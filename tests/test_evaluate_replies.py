"""Evaluate replies are checked like train replies (:mod:`fedpriv.strategies.reply_checks`, SPEC
§7).

A curious or broken node answers an evaluate message (or carries a fused ``evaluation``
record, or answers IFCA's validation query) with a crafted reply: num-examples −30, 0 or 1e9
with accuracy 1e308, a missing key, a list metric, a ConfigRecord as its metrics, an
ArrayRecord as its evaluation, non-finite values, accuracy 1e308. Each one is played, one per
round, against the real server code:

- the standard engine (:func:`fedpriv.scenarios.app.engine.train_run`: RoundRecorder ->
  ValidUpdatesOnly -> metric-DP wrapper -> FedAvg) whose honest nodes are the real ClientApp
  handlers, dispatched in-process (``tests/test_fused.py``'s ClientAppGrid), with two messages
  a round (evaluate replies) and with one (fused ``evaluation`` records);
- IFCA's own server loop (:meth:`fedpriv.strategies.ifca.LaplaceIFCA.start`) with crafted validation
  replies.

The run goes on through every round, every crafted reply is dropped and named in its round's
record, and the distributed metrics equal the honest nodes' weighted means (an independent
computation from the replies the grid handed back), so they stay finite and accuracy in [0, 1].
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from fedpriv.clients.partitions import federated_data
from fedpriv.scenarios.app.fused import EVALUATION_RECORD
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.strategies.reply_checks import MAX_METRIC, checked_evaluations
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from tests.test_fused import RUN, ClientAppGrid


def _metrics(**values) -> MetricRecord:
    record = MetricRecord({"num-examples": 1})
    record._data.clear()  # bypasses MetricRecord's type check: a node's own deserialiser may not
    record._data.update(values)
    return record


def _without(good: dict, key: str) -> MetricRecord:
    return _metrics(**{k: v for k, v in good.items() if k != key})


def crafted(honest: MetricRecord) -> list[tuple[str, object]]:
    """(label, the evaluation record a curious node sends instead of ``honest``)."""
    good = dict(honest)
    return [
        ("num-examples -30", _metrics(**{**good, "num-examples": -30})),
        ("num-examples 0", _metrics(**{**good, "num-examples": 0})),
        (
            "1e9 examples, accuracy 1e308",
            _metrics(**{**good, "num-examples": int(1e9), "accuracy": 1e308}),
        ),  # fmt: skip
        ("accuracy 1e308", _metrics(**{**good, "accuracy": 1e308})),
        (
            "missing num-examples",
            _without(good, "num-examples"),
        ),
        ("missing accuracy", _without(good, "accuracy")),
        ("list metric", _metrics(**{**good, "accuracy": [0.5, 0.5]})),
        ("NaN loss", _metrics(**{**good, "loss": math.nan})),
        ("inf accuracy", _metrics(**{**good, "accuracy": math.inf})),
        ("bool weight", _metrics(**{**good, "num-examples": True})),
        ("ConfigRecord as metrics", ConfigRecord({k: v for k, v in good.items()})),
        ("ArrayRecord as evaluation", ArrayRecord([np.ones(3, np.float32)])),
    ]


ROUNDS = 12  # one crafted reply a round
CURIOUS = 100  # the node of partition 0


class CuriousGrid(ClientAppGrid):
    """The real ClientApp on every node; node CURIOUS replaces its evaluation of round r by
    the r-th crafted record. ``honest[r]``: the honest evaluation records of round r."""

    def __init__(self, run_config: dict, partitions: int) -> None:
        super().__init__(run_config, partitions)
        self.honest: dict[int, list[dict]] = {}
        self.played: dict[int, str] = {}

    def send_and_receive(self, messages, timeout=None):
        messages = list(messages)
        replies = super().send_and_receive(messages, timeout)
        for msg, reply in zip(messages, replies):
            config = msg.content["config"]
            fused = "evaluate-received" in config
            if msg.metadata.message_type == MessageType.EVALUATE:
                evaluated, record_round = "metrics", int(config["server-round"])
            elif fused:
                evaluated, record_round = EVALUATION_RECORD, int(config["server-round"]) - 1
            else:
                continue
            honest = reply.content[evaluated]
            if reply.metadata.src_node_id != CURIOUS:
                self.honest.setdefault(record_round, []).append(dict(honest))
                continue
            label, bad = crafted(honest)[(record_round - 1) % ROUNDS]
            self.played[record_round] = label
            content = {k: v for k, v in reply.content.items() if k != evaluated}
            reply.content = RecordDict({**content, evaluated: bad})
        return replies


def _run(tmp_path, fused: bool):
    from fedpriv.scenarios.app.engine import train_run
    from fedpriv.scenarios.nodes.federation import PartitionGrid

    run_config = {**RUN, "num-server-rounds": ROUNDS, "evaluate-in-train": fused,
                  "output-dir": str(tmp_path / f"fused-{fused}")}  # fmt: skip
    from fedpriv.scenarios.config.specs import server_run

    cfg = resolve_run_config(run_config)
    run = server_run(cfg, CATALOG.kind(cfg))  # the server's spec, built once
    grid = CuriousGrid(run_config, int(cfg["num-clients"]))
    nodes = {n: n - 100 for n in grid.nodes}
    outcome = train_run(PartitionGrid(grid, nodes), run, federated_data(run.spec.data), CATALOG)
    return outcome, grid


def _weighted(rows: list[dict], name: str) -> float:
    weights = np.array([r["num-examples"] for r in rows], float)
    return float(np.dot(weights, [r[name] for r in rows]) / weights.sum())


@pytest.mark.parametrize("fused", [False, True], ids=["evaluate-replies", "fused-evaluations"])
def test_every_crafted_evaluation_is_dropped_and_the_run_goes_on(tmp_path, fused):
    outcome, grid = _run(tmp_path, fused)
    rounds = {r["round"]: r for r in outcome.rounds}
    assert sorted(rounds) == list(range(ROUNDS + 1))  # every round ran and was recorded
    assert sorted(grid.played.values()) == sorted(label for label, _ in crafted(MetricRecord()))
    for r in range(1, ROUNDS + 1):
        record = rounds[r]
        assert list(record["rejected-evaluation"]) == ["0"], (grid.played[r], record)
        distributed = record["distributed"]
        for name in ("accuracy", "loss"):
            value = distributed[name]
            assert math.isfinite(value) and abs(value) <= MAX_METRIC
            assert value == pytest.approx(_weighted(grid.honest[r], name), rel=1e-9)
        assert 0.0 <= distributed["accuracy"] <= 1.0


# --- the checks on their own ---------------------------------------------------------------


def _reply(content: RecordDict, node: int) -> Message:
    to = Message(RecordDict(), dst_node_id=node, message_type=MessageType.EVALUATE)
    return Message(content, reply_to=to)


def test_good_replies_pass_and_each_crafted_one_is_named():
    honest = MetricRecord({"num-examples": 40, "accuracy": 0.5, "loss": 1.2})
    replies = [_reply(RecordDict({"metrics": honest}), 1)]
    replies += [_reply(RecordDict({"metrics": bad}), 10 + i)
                for i, (_, bad) in enumerate(crafted(honest))]  # fmt: skip
    valid, rejected = checked_evaluations(replies)
    assert [m.metadata.src_node_id for m in valid] == [1]
    assert sorted(rejected) == list(range(10, 10 + len(crafted(honest))))
    assert "num-examples = -30 is outside (0, 1e+09]" in rejected[10]
    assert "accuracy = 1e+308 is outside [0, 1]" in rejected[12]
    assert "missing" in rejected[14]
    assert "differ from the round's" in rejected[15]  # Flower's mean needs the same keys
    assert "ConfigRecord; expected a MetricRecord" in rejected[20]
    assert "ArrayRecord; expected a MetricRecord" in rejected[21]
    two = RecordDict({"metrics": honest, "extra": ArrayRecord([np.ones(2, np.float32)])})
    assert "expected one MetricRecord" in checked_evaluations([_reply(two, 3)])[1][3]


# --- IFCA: validation users' replies ---------------------------------------------------------


class IfcaGrid:
    """Training users release θ̂ = their index; validation user 6 answers honestly, user 7
    with the round's crafted reply."""

    def __init__(self) -> None:
        self.played: dict[int, str] = {}

    def send_and_receive(self, messages, timeout=None):
        from fedpriv.ifca import METRICS_KEY, REPLY_KEY

        replies = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            if msg.metadata.message_type == "train.ifca":
                vector = np.full(2, float(node % 3), np.float32).reshape(2, 1)
                replies.append(Message(RecordDict({REPLY_KEY: ArrayRecord([vector])}),
                                       reply_to=msg))  # fmt: skip
                continue
            honest = MetricRecord({"num-examples": 20, "loss": 0.5, "rmse": 0.7,
                                   "hypothesis": 1})  # fmt: skip
            content = RecordDict({METRICS_KEY: honest})
            if node == 107:
                server_round = int(msg.content["config"]["server-round"])
                label, bad = ifca_crafted(honest)[server_round]
                self.played[server_round] = label
                content = RecordDict({METRICS_KEY: bad})
            replies.append(Message(content, reply_to=msg))
        return replies


def ifca_crafted(honest: MetricRecord) -> list[tuple[str, object]]:
    """The crafted evaluations (IFCA sends no accuracy: none is missing) and two of IFCA's
    own: a hypothesis index out of range, none at all."""
    good = dict(honest)
    return [
        ("hypothesis 7 of 2", _metrics(**{**good, "hypothesis": 7})),
        ("missing hypothesis", _without(good, "hypothesis")),
        *[c for c in crafted(honest) if c[0] != "missing accuracy"],
    ]


def _ifca_strategy():
    """LaplaceIFCA over 6 training users and 2 validation users (nodes 106, 107), no noise,
    and the list its round records go to."""
    from fedpriv.strategies.ifca import LaplaceIFCA

    strategy = LaplaceIFCA(
        num_hypotheses=2, users_per_round=3, train_partitions=range(6),
        validation_partitions=[6, 7], node_of_partition={p: 100 + p for p in range(8)},
        noise_multiplier=0.0, leakage_budget=0.0, patience=100, rng=np.random.default_rng(0),
    )  # fmt: skip
    records: list[dict] = []
    strategy.on_round_end = records.append
    return strategy, records


def test_ifca_validation_replies_are_checked_and_its_loop_goes_on():
    from fedpriv.strategies.ifca import hypotheses_record

    strategy, records = _ifca_strategy()
    grid = IfcaGrid()
    hyps = [[np.zeros((2, 1), np.float32)], [np.ones((2, 1), np.float32)]]
    strategy.start(grid, hypotheses_record(hyps), num_rounds=12)
    assert [r["round"] for r in records] == list(range(13))  # round 0's validation and 12
    assert len(set(grid.played.values())) == 13
    for record in records:
        assert list(record["invalid-evaluations"]) == ["107"], record
        validation = record["validation"]
        assert validation["clients"] == 1 and validation["choices"] == [0, 1]
        assert validation["loss"] == 0.5 and validation["rmse"] == pytest.approx(0.7)


class FailingValidatorGrid(IfcaGrid):
    """IfcaGrid whose validation user 107 answers every query with an error reply."""

    def send_and_receive(self, messages, timeout=None):
        from flwr.app import Error

        messages = list(messages)
        replies = super().send_and_receive(messages, timeout)
        return [
            Message(error=Error(code=0, reason="database is locked"), reply_to=msg)
            if msg.metadata.dst_node_id == 107 and msg.metadata.message_type != "train.ifca"
            else reply
            for msg, reply in zip(messages, replies)
        ]


def test_ifca_validation_counts_its_failed_replies():
    """A validation user whose reply failed is left out of the means and counted, so a round
    record says how many users its validation covers and how many failed."""
    from fedpriv.strategies.ifca import hypotheses_record

    strategy, records = _ifca_strategy()
    hyps = [[np.zeros((2, 1), np.float32)], [np.ones((2, 1), np.float32)]]
    strategy.start(FailingValidatorGrid(), hypotheses_record(hyps), num_rounds=2)
    for record in records:
        assert "invalid-evaluations" not in record
        assert record["validation"]["clients"] == 1 and record["validation"]["failed"] == 1
