"""The run spec is built once per party, at its boundary.

The server builds its :class:`fedpriv.spec.RunSpec` once, when it resolves its config
(``fedpriv.scenarios.app.server_app.main``); each ClientApp node builds its own once per message,
when it reads its Context and the message (``fedpriv.scenarios.app.client_app.resolved``). Below
that point the engine, the handlers, the recorder and the runners take the spec.

The run here is the real ServerApp ``main`` on digits (3 clients, 2 rounds), its messages
answered in process by the real ClientApp handlers (:class:`InProcessGrid`: no Ray, no
mocks of Flower's classes). Every spec builder goes through
:func:`fedpriv.scenarios.config.specs.complete`; the test counts its calls by party (a call made
under a ClientApp handler is the node's, any other the server's).
"""

from __future__ import annotations

import inspect
import json
from collections import Counter
from pathlib import Path

import pytest
from fedpriv.scenarios.config import specs
from flwr.app import Context, Message, MessageType, RecordDict

from tests.flower_reference import act_as_serverapp_task

act_as_serverapp_task()

RUN = {
    "scenario": "digits",
    "num-clients": 3,
    "num-server-rounds": 2,
    "local-epochs": 1,
    "seed": 5,
    "reproducible-noise": True,  # explicit opt-in: seeded noise and sampling
}
CLIENT_APP = str(Path("scenarios", "app", "client_app.py"))


class InProcessGrid:
    """The federation of a test: node ``100 + p`` holds partition ``p`` and answers every
    message with the ClientApp's own handler (query, train, evaluate, IFCA's); its ``run_config``
    is the run's. ``handled``: the train and evaluate messages answered."""

    def __init__(self, run_config: dict, partitions: int, run_id: int = 926_033) -> None:
        self.run_config, self.run_id = dict(run_config), run_id
        self.nodes = [100 + p for p in range(partitions)]
        self.states = {n: RecordDict() for n in self.nodes}
        self.handled = 0

    def get_node_ids(self) -> list[int]:
        return list(self.nodes)

    def send_and_receive(self, messages, timeout=None) -> list[Message]:
        from fedpriv.scenarios.app.client_app import app

        replies = []
        for msg in list(messages):
            node, kind = msg.metadata.dst_node_id, msg.metadata.message_type
            context = Context(
                run_id=self.run_id, node_id=node, node_config={"partition-id": node - 100},
                state=self.states[node], run_config=self.run_config,
            )  # fmt: skip
            self.handled += kind != MessageType.QUERY
            replies.append(app(msg, context))  # Flower's own dispatch to the handler
        return replies


def server_main(run_config: dict, grid: InProcessGrid) -> None:
    """The ServerApp's ``main`` with ``run_config`` as its Context's."""
    from fedpriv.scenarios.app.server_app import main

    main(grid, Context(run_id=grid.run_id, node_id=0, node_config={}, state=RecordDict(),
                       run_config=dict(run_config)))  # fmt: skip


@pytest.fixture
def builds(monkeypatch) -> Counter:
    """Spec builds by party: every call of ``fedpriv.scenarios.config.specs.complete`` (what
    ``run_spec``, ``train_spec`` and ``data_spec`` build from), ``node`` when a ClientApp
    handler is on the stack, else ``server``."""
    counts: Counter = Counter()
    original = specs.complete

    def counted(cfg):
        files = {frame.filename for frame in inspect.stack(context=0)}
        counts["node" if any(f.endswith(CLIENT_APP) for f in files) else "server"] += 1
        return original(cfg)

    monkeypatch.setattr(specs, "complete", counted)
    return counts


def test_the_counter_sees_a_rebuild_below_the_boundary(builds):
    """A spec built again from the mapping is counted (the count below can fail)."""
    from fedpriv.scenarios.config.registry import resolve_run_config

    run = specs.server_run(resolve_run_config(RUN))
    assert builds == Counter(server=1)
    specs.train_spec(run.record)  # what the engine did before the spec was handed down
    assert builds == Counter(server=2)
    assert run.variant({"seed": RUN["seed"]}) is run and builds["server"] == 2  # no change
    assert run.variant({"seed": 6}).spec.seed == 6 and builds["server"] == 3


@pytest.mark.parametrize(
    ("overrides", "nodes", "messages"),
    [
        # every client trains every round, so round 2's train message also evaluates model 1
        # (evaluate-in-train): 3 train messages a round and one evaluate message after the last
        ({}, 3, 2 * 3 + 3),
        # two zone SuperNodes (the zone node's own handlers): a train and an evaluate message
        # to each zone per round
        ({"privacy": "zonal", "num-clients": 4, "num-zones": 2}, 2, 2 * 2 * 2),
    ],
    ids=["digits", "zone-nodes"],
)
def test_one_spec_for_the_server_and_one_per_message_for_a_node(
    builds, tmp_path, overrides, nodes, messages
):
    """The server builds one spec for the whole run; a node one per message it answers."""
    run_config = {**RUN, **overrides, "output-dir": str(tmp_path / "run")}
    grid = InProcessGrid(run_config, nodes)
    server_main(run_config, grid)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["seed"] == RUN["seed"] and summary["final"]["accuracy"] > 0  # it finished
    assert grid.handled == messages
    assert builds == Counter(server=1, node=messages)
