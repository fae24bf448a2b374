"""One message per round for train + evaluate (``evaluate-in-train``,
:mod:`fedpriv.scenarios.app.fused`).

The runs here are the real engine (:func:`fedpriv.scenarios.app.engine.train_run`, the standard
strategy
chain with metric DP) against the real ClientApp handlers (:mod:`fedpriv.scenarios.app.client_app`,
Keras training and evaluation), dispatched in-process by :class:`ClientAppGrid` instead of
Ray, so that a run of 3 digits clients and 3 rounds takes seconds and every message can be
counted.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from fedpriv.clients.partitions import federated_data
from fedpriv.scenarios.app import client_app
from fedpriv.scenarios.app.fused import EVALUATION_RECORD, evaluate_in_train, split_evaluations
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import data_spec, server_run, train_spec
from flwr.app import Context, Message, MessageType, MetricRecord, RecordDict

from tests.flower_reference import act_as_serverapp_task

act_as_serverapp_task()

RUN = {
    "scenario": "digits",  # metric DP around FedAvg
    "num-clients": 3,
    "num-server-rounds": 3,
    "local-epochs": 1,
    "seed": 5,
    "reproducible-noise": True,  # explicit opt-in: seeded noise, so two runs can be compared
    "unaccounted-metrics": True,  # the clients' evaluation metrics are sent (MP's opt-in)
}


class Killed(BaseException):
    """The server process dies (nothing in the engine catches it)."""


class ClientAppGrid:
    """The federation of a test: each message goes to the ClientApp's own ``train`` /
    ``evaluate`` handler (node ``100 + p`` holds partition ``p``, its ``run_config`` is the
    run's). ``sent``: ``(round, message type, evaluate-received)`` of every message;
    ``kill_at``: ``(round, type)`` whose messages leave the server just before it dies."""

    runs = itertools.count(1)

    def __init__(self, run_config: dict, partitions: int, kill_at=None) -> None:
        self.run_config, self.kill_at = dict(run_config), kill_at
        self.nodes = [100 + p for p in range(partitions)]
        self.states = {n: RecordDict() for n in self.nodes}
        self.run_id = next(ClientAppGrid.runs)
        self.sent: list[tuple[int, str, bool]] = []

    def get_node_ids(self):
        return list(self.nodes)

    def send_and_receive(self, messages, timeout=None):
        replies = []
        for msg in list(messages):
            config = msg.content["config"]
            kind = msg.metadata.message_type
            self.sent.append((int(config["server-round"]), kind, "evaluate-received" in config))
            if (int(config["server-round"]), kind) == self.kill_at:
                raise Killed(f"killed after sending round {self.kill_at}")
            node = msg.metadata.dst_node_id
            context = Context(
                run_id=self.run_id, node_id=node, node_config={"partition-id": node - 100},
                state=self.states[node], run_config=self.run_config,
            )  # fmt: skip
            handler = client_app.train if kind == MessageType.TRAIN else client_app.evaluate
            replies.append(handler(msg, context))
        return replies


def run(tmp_path, name: str, fused, kill_at=None, **overrides):
    """One in-process run; returns (outcome, grid)."""
    from fedpriv.scenarios.app.engine import train_run
    from fedpriv.scenarios.nodes.federation import PartitionGrid

    run_config = {**RUN, **overrides, "evaluate-in-train": fused}
    run_config["output-dir"] = str(tmp_path / name)
    run = server_run(resolve_run_config(run_config))
    grid = ClientAppGrid(run_config, run.spec.participation.population, kill_at)
    nodes = {n: n - 100 for n in grid.nodes}
    outcome = train_run(
        PartitionGrid(grid, nodes), run, federated_data(run.spec.data), CATALOG, resumable=True
    )
    return outcome, grid


def per_round(sent) -> dict[int, Counter]:
    """Messages per round and type (``train`` / ``train+evaluate`` / ``evaluate``)."""
    out: dict[int, Counter] = {}
    for server_round, kind, asks in sent:
        label = "evaluate" if kind == MessageType.EVALUATE else "train"
        out.setdefault(server_round, Counter())[label + ("+evaluate" if asks else "")] += 1
    return out


def untimed(rounds: list[dict]) -> list[dict]:
    """The round records without wall-clock fields."""
    return [
        {k: v for k, v in r.items() if "seconds" not in k and k != "noise-randomness"}
        for r in rounds
    ]


def distributed(rounds: list[dict]) -> dict[int, dict]:
    return {r["round"]: r.get("distributed") for r in rounds if r["round"] > 0}


# --- the option: where it is on -------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "on"),
    [
        ({}, True),  # every client trains every round
        ({"clients-per-round": 3}, True),  # = num-clients
        ({"clients-per-round": 2}, False),  # round t's 2 clients are not "every client"
        ({"scenario": "synthetic-mri"}, True),  # MP: 4 clients, all every round
    ],
)
def test_auto_is_on_only_where_it_is_the_same_evaluation(overrides, on):
    cfg = resolve_run_config({**RUN, **overrides})
    assert evaluate_in_train(server_run(cfg).spec) is on
    assert evaluate_in_train(server_run({**cfg, "evaluate-in-train": False}).spec) is False


def test_true_where_it_is_not_the_same_evaluation_is_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        resolve_run_config({**RUN, "clients-per-round": 2, "evaluate-in-train": True})
    text = str(err.value)
    assert "\n" not in text and "evaluate-in-train" in text and "clients-per-round" in text
    with pytest.raises(ConfigError, match="evaluate-in-train"):
        resolve_run_config({**RUN, "evaluate-in-train": "yes"})
    assert resolve_run_config({**RUN, "evaluate-in-train": True})["evaluate-in-train"] is True


# --- the client: one reply carries train and evaluate ---------------------------------------


def _train_message(cfg: dict, asks: bool) -> Message:
    from fedpriv.clients.keras_client import initial_weights
    from flwr.app import ArrayRecord, ConfigRecord

    data = federated_data(data_spec(cfg))
    config = {**cfg, "server-round": 2, **({"evaluate-received": True} if asks else {})}
    content = RecordDict(
        {
            "arrays": ArrayRecord(initial_weights(train_spec(cfg), data)),
            "config": ConfigRecord(config),
        }
    )
    return Message(content=content, dst_node_id=101, message_type=MessageType.TRAIN)


@pytest.mark.parametrize("opt_in", [True, False])
def test_the_train_reply_carries_the_evaluate_reply_of_the_received_model(opt_in):
    """The ``evaluation`` record is the evaluate handler's reply for the same model, filtered
    as an evaluate reply (without the opt-in a DP mode sends only num-examples there), and
    what is left is the train reply without the option, bit for bit."""
    run_config = {**RUN, "unaccounted-metrics": opt_in}
    cfg = resolve_run_config(run_config)
    context = Context(
        run_id=99, node_id=101, node_config={"partition-id": 1}, state=RecordDict(),
        run_config=run_config,
    )  # fmt: skip
    asked = client_app.train(_train_message(cfg, True), context)
    plain = client_app.train(_train_message(cfg, False), context)
    evaluated = client_app.evaluate(_train_message(cfg, False), context)
    assert not asked.has_error() and EVALUATION_RECORD not in plain.content
    assert dict(asked.content[EVALUATION_RECORD]) == dict(evaluated.content["metrics"])
    expected = {"num-examples", "accuracy", "loss"} if opt_in else {"num-examples"}
    assert set(asked.content[EVALUATION_RECORD]) >= {"num-examples"}
    assert set(asked.content[EVALUATION_RECORD]) <= expected | {"precision", "recall", "f1"}
    if not opt_in:
        assert set(asked.content[EVALUATION_RECORD]) == {"num-examples"}
    [evaluation] = split_evaluations([asked])
    assert dict(evaluation.content["metrics"]) == dict(evaluated.content["metrics"])
    assert list(asked.content.keys()) == list(plain.content.keys())
    assert dict(asked.content["metrics"]) == dict(plain.content["metrics"])
    for a, b in zip(
        asked.content["arrays"].to_numpy_ndarrays(), plain.content["arrays"].to_numpy_ndarrays()
    ):
        np.testing.assert_array_equal(a, b)


def test_error_replies_carry_no_evaluation():
    error = Message(
        RecordDict({"metrics": MetricRecord({"num-examples": 1})}),
        dst_node_id=5,
        message_type=MessageType.TRAIN,
    )
    reply = Message(content=RecordDict(), reply_to=error)
    assert split_evaluations([reply]) == []


# --- the engine: the same run, fewer messages -----------------------------------------------


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fused")
    return run(tmp, "two", False), run(tmp, "one", True)


def test_one_message_per_round_gives_the_same_evaluations_and_model(both):
    """Full participation, seeded: per-round distributed and server evaluation, the DP
    wrapper's reports and the final model are those of the run with two messages per round."""
    (two, _), (one, _) = both
    assert [r["round"] for r in one.rounds] == [0, 1, 2, 3]
    assert distributed(one.rounds) == distributed(two.rounds)
    assert all(d and d["accuracy"] > 0 for d in distributed(one.rounds).values())
    assert untimed(one.rounds) == untimed(two.rounds)
    assert len(one.weights) == len(two.weights)
    for a, b in zip(one.weights, two.weights):
        np.testing.assert_array_equal(a, b)


def test_evaluate_messages_only_after_the_last_round(both):
    (_, two), (_, one) = both
    assert per_round(two.sent) == {r: Counter({"train": 3, "evaluate": 3}) for r in (1, 2, 3)}
    assert per_round(one.sent) == {
        1: Counter({"train": 3}),
        2: Counter({"train+evaluate": 3}),
        3: Counter({"train+evaluate": 3, "evaluate": 3}),
    }
    assert len(one.sent) == 12 and len(two.sent) == 18


def test_partial_participation_keeps_two_messages(tmp_path):
    _, grid = run(tmp_path, "partial", "auto", **{"clients-per-round": 2, "num-server-rounds": 2})
    counts = per_round(grid.sent)
    assert all(c["evaluate"] == 3 and c["train"] == 2 for c in counts.values())
    assert not any(asks for _, _, asks in grid.sent)


@pytest.mark.parametrize("kill_at", [(3, MessageType.TRAIN), (3, MessageType.EVALUATE)])
def test_a_killed_fused_run_resumes_to_the_same_run(both, tmp_path, kill_at):
    """Killed when round 3's messages leave the server (round 2 charged, its evaluation not
    yet back; or the last round's evaluate message), the run resumes from its charged
    checkpoint and ends with the uninterrupted run's records and model: each round recorded
    once, and each model sent out was charged before."""
    (_, _), (one, _) = both
    with pytest.raises(Killed):
        run(tmp_path, "killed", True, kill_at=kill_at)
    resumed, grid = run(tmp_path, "killed", True)
    assert [r["round"] for r in resumed.rounds] == [0, 1, 2, 3]
    assert distributed(resumed.rounds) == distributed(one.rounds)
    assert untimed(resumed.rounds) == untimed(one.rounds)  # the DP wrapper's reports too
    for a, b in zip(resumed.weights, one.weights):
        np.testing.assert_array_equal(a, b)
    if kill_at[1] == MessageType.TRAIN:  # round 2 is finished with its own evaluate message
        expected = {2: Counter({"evaluate": 3}), 3: Counter({"train": 3, "evaluate": 3})}
    else:  # round 3 was charged and checkpointed: only its evaluation is redone
        expected = {3: Counter({"evaluate": 3})}
    assert per_round(grid.sent) == expected
