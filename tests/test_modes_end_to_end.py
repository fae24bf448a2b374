"""Every registered privacy mode, end to end: a tiny run of each through its kind's runner.

The list below must name every mode of the registry (:func:`fedpriv.privacy.modes.names`), so
a new mode cannot be registered without a run here. Each run goes through the app's catalog
and runner (partition discovery, rounds, summary.json), every message answered in process by
the real ClientApp handlers (no Ray): each node resolves its own spec from its run config.
Checked per mode: every round is recorded, summary.json names the mode, an ε where the mode
has one equals its plan (``fedpriv epsilon``), and the model learns (digits, chance 0.1).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import pytest
from flwr.app import Context, Message, MessageType, RecordDict

from fedpriv.privacy.modes import get, names

TINY = {"scenario": "digits", "num-clients": 4, "num-server-rounds": 3, "local-epochs": 1,
        "seed": 1, "reproducible-noise": True}  # fmt: skip
RUNS = {  # mode -> the run config of its tiny run
    "none": {**TINY, "privacy": "none"},
    # MP's z: global DP's default z = 1 leaves 4 clients nothing to learn (ε 20 after 3
    # rounds); this test is about the wiring and the figures, MIN_ACCURACY about learning
    "global-dp": {**TINY, "privacy": "global-dp", "noise-multiplier": 0.01},
    "metric-dp": {**TINY, "privacy": "metric-dp"},
    # the same for adaptive clipping's z = 1 and DP-FTRL's z = 2 (defaults): MP's z
    "adaptive-clip": {
        **TINY,
        "privacy": "adaptive-clip",
        "clipping-norm": 1.0,
        "noise-multiplier": 0.01,
    },
    "dp-ftrl": {**TINY, "privacy": "dp-ftrl", "strategy": "fedavg", "noise-multiplier": 0.01},
    "client-budgets": {
        **TINY,
        "privacy": "client-budgets",
        "strategy": "fedavg",
        "clients-per-round": 0,
        "noise-multiplier": 1.0,
        "clipping-norm": 1.0,
        "client-epsilon-groups": "2,5,10",
    },  # fmt: skip
    "dp-sgd": {**TINY, "privacy": "dp-sgd", "noise-multiplier": 0.5},
    "distributed-dp": {
        **TINY,
        "privacy": "distributed-dp",
        "noise-multiplier": 0.05,
        "clipping-norm": 1.0,
    },  # fmt: skip
    "zonal": {
        **TINY,
        "privacy": "zonal",
        "num-zones": 2,
        "zonal-runtime": "in-server",
        "noise-multiplier": 0.01,
        "clipping-norm": 5.0,
    },  # fmt: skip
    "ifca": {
        **TINY,
        "scenario": "digits-rotated",
        "num-clients": 4,
        "users-per-round": 4,
        "validation-clients": 0,
        "num-hypotheses": 2,
    },  # fmt: skip
}
MIN_ACCURACY = 0.4  # digits after 3 rounds (IFCA: its clients evaluate only with the opt-in)
DPSGD_ACCURACY = 0.25  # DP-SGD at z = 0.5 on 3 rounds: 0.38-0.5 measured


class InProcessGrid:
    """A Grid whose nodes are the real ClientApp handlers, called in this process."""

    def __init__(self, run_config: Mapping, num_clients: int) -> None:
        self.run_config = dict(run_config)
        self.nodes = {1000 + p: p for p in range(num_clients)}
        self.states = {n: RecordDict() for n in self.nodes}

    def get_node_ids(self) -> list[int]:
        return list(self.nodes)

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content=content, dst_node_id=dst_node_id, message_type=message_type)

    def send_and_receive(self, messages, *, timeout=None) -> list[Message]:
        from fedpriv.scenarios.app.client_app import evaluate, query, train

        handlers = {MessageType.TRAIN: train, MessageType.EVALUATE: evaluate,
                    MessageType.QUERY: query}  # fmt: skip
        out = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            ctx = Context(run_id=926_100, node_id=node,
                          node_config={"partition-id": self.nodes[node]},
                          state=self.states[node], run_config=self.run_config)  # fmt: skip
            action = msg.metadata.message_type.split(".")[0]  # "train.ifca": train
            out.append(handlers[action](msg, ctx))
        return out


def test_every_registered_mode_has_an_end_to_end_run():
    assert set(RUNS) == set(names(selectable=False))


@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_mode_runs_end_to_end(name, tmp_path):
    from fedpriv.scenarios.config.features import CATALOG
    from fedpriv.scenarios.config.specs import server_run

    from fedpriv.privacy.accounting.planning import privacy_plan

    run_config = {**RUNS[name], "output-dir": str(tmp_path / name)}
    cfg = CATALOG.resolve_run_config(run_config)
    grid = InProcessGrid(run_config, int(cfg["num-clients"]))
    run = server_run(cfg, CATALOG.kind(cfg))  # the server's spec, built once
    CATALOG.runners[CATALOG.kind(cfg)](grid, run, CATALOG)
    summary = json.loads((tmp_path / name / "summary.json").read_text())
    text = json.dumps(summary)
    assert f'"{name}"' in text  # the summary names the mode
    mode = get(name)
    if mode.epsilon_of_z is not None:
        planned = privacy_plan(run.spec)
        figures = summary.get("privacy_figures") or {}
        if planned.get("epsilon") is not None and figures.get("epsilon") is not None:
            assert figures["epsilon"] == pytest.approx(float(planned["epsilon"]), rel=1e-6)
        else:  # DP-SGD plans per client (example counts), zonal per level: the run reports
            reported = [v for k, block in _walk(summary) if "epsilon" in k for _, v in _walk(block)]
            assert any(isinstance(v, float) and 0 < v < math.inf for v in reported), name
    if name == get("ifca").name:  # GP's IFCA results: tests/test_ifca_simulation.py
        assert summary["rounds_run"] == 3 and summary["stopped"] == "num-server-rounds"
        return
    if name == get("client-budgets").name:  # budgets a 4-client model survives are ~1e3
        assert summary["privacy"]["within_budgets"] is True  # tests/test_client_budgets.py
        return
    band = DPSGD_ACCURACY if name == get("dp-sgd").name else MIN_ACCURACY
    assert summary["final"]["accuracy"] > band, (name, summary["final"])


def _walk(obj):
    """Every (key, value) of a JSON document, depth first (a bare value: ("", value))."""
    if not isinstance(obj, (dict, list)):
        yield "", obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k, v
            yield from _walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v)
