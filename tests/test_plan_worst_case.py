"""``fedpriv epsilon`` under example weights with dropped replies.

Adversary's view covered: a reader of the released global models (and of rounds.jsonl /
summary.json) of a global-DP run with ``dp-weighting = examples`` and the default
``invalid-update = drop``. The audit planned 43.18 and the run charged 154.2 once 3 of 4
replies were dropped as invalid. The plan now prints its headline next to the condition under
which it holds (every reply valid) and ``epsilon_worst_case`` next to its own (every outcome
the config allows). Here 3 of 4 replies are dropped in the real server chain
(``fedpriv.scenarios.app.engine.build_strategy``), the round's charged multiplier is read from it,
and an
independent accountant (μ-GDP in closed form, Dong, Roth & Su 2019, Cor. 2.13) over T such
rounds gives no more than ``epsilon_worst_case`` — and more than the all-reply headline.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from fedpriv.scenarios.app.engine import build_strategy, run_config_as_record
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.specs import run_spec, server_run
from fedpriv.scenarios.nodes.federation import PartitionGrid
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from scipy import optimize, stats

from fedpriv.privacy.accounting.planning import ALL_REPLY_CONDITION, privacy_plan, reply_losses

M, Z, T, DELTA = 4, 2.0, 10, 1e-5
NODES = {100 + p: p for p in range(M)}


def _cfg(**over) -> dict:
    return resolve_run_config(
        {"privacy": "global-dp", "num-clients": M, "noise-multiplier": Z, "dp-weighting":
         "examples", "num-server-rounds": T, "dp-delta": DELTA, "clipping-norm": 1.0, **over}
    )  # fmt: skip


def gdp_epsilon(mu: float, delta: float) -> float:
    """ε of μ-GDP at δ: δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), solved for ε."""

    def gap(eps: float) -> float:
        n = stats.norm.cdf
        return n(-eps / mu + mu / 2) - math.exp(eps) * n(-eps / mu - mu / 2) - delta

    return optimize.brentq(gap, 0.0, 500.0, xtol=1e-10)


def charged_multiplier_with_three_dropped(cfg: dict) -> tuple[float, dict]:
    """One round through the real chain where partitions 1-3 send num-examples = 0
    (dropped as invalid); returns the round's charged multiplier on the sum, and the record."""
    g = [np.zeros((3, 2), np.float32)]
    pgrid = PartitionGrid(None, NODES)
    recorder = build_strategy(server_run(cfg), pgrid, np.random.default_rng(0), CATALOG)
    config = run_config_as_record({**cfg, "server-round": 1})
    replies = []
    for msg in recorder.configure_train(1, ArrayRecord(g), config, pgrid):
        p = NODES[msg.metadata.dst_node_id]
        metrics = MetricRecord({"num-examples": 50 if p == 0 else 0})
        arrays = ArrayRecord([np.full((3, 2), 0.1, np.float32)])
        replies.append(Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg))
    replies.sort(key=lambda m: NODES[m.metadata.src_node_id])
    arrays, _ = recorder.aggregate_train(1, replies)
    record = dict(recorder.current)
    assert arrays is not None and sorted(record["rejected"]) == ["1", "2", "3"]
    return float(record["dp-round-noise-multiplier"]), record


def test_the_plan_bounds_three_of_four_dropped_replies_and_says_when_its_headline_holds():
    cfg = _cfg()
    assert reply_losses(run_spec(cfg))  # the default invalid-update = drop: a round loses replies
    plan = privacy_plan(run_spec(cfg))
    assert plan["epsilon_condition"] == ALL_REPLY_CONDITION
    assert "one reply per round" in plan["epsilon_worst_case_condition"]
    z_round, _ = charged_multiplier_with_three_dropped(cfg)
    assert z_round == pytest.approx(Z / M)  # one reply of weight 1: σ/C = z/m
    # independent: T such rounds, replace-one (sensitivity 2C), no amplification (m = N)
    independent = gdp_epsilon(2 * math.sqrt(T) / z_round, DELTA)
    assert independent <= plan["epsilon_worst_case"] * (1 + 1e-3)
    assert independent > 2 * plan["epsilon"]  # the headline alone would not hold here


def test_without_a_way_to_lose_replies_the_plan_has_one_unconditional_figure():
    cfg = _cfg(**{"invalid-update": "fail", "accept-failures": False})
    assert reply_losses(run_spec(cfg)) == []
    plan = privacy_plan(run_spec(cfg))
    assert "epsilon_worst_case" not in plan and "epsilon_condition" not in plan
    lenient = privacy_plan(run_spec(_cfg(**{"invalid-update": "fail", "accept-failures": True})))
    assert "accept-failures = true" in lenient["epsilon_worst_case_condition"]
