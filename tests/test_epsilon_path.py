"""One ε path for global DP.

``fedpriv epsilon`` (the real command, its printed JSON) is never below the ε a run charges,
under uniform and example weighting, fixed and Poisson client sampling; equal where the
weights are uniform. The run's headline comes from the real wrapper built from the same
config (``fedpriv.scenarios.dp.feature.build_dp_wrapper``, its accountant), fed replies that carry
the
partition's real example counts for samples drawn by the run's sampler.
"""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stdout

import numpy as np
import pytest
from fedpriv.clients.partitions import federated_data
from fedpriv.scenarios.cli.main import main
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.specs import data_spec, run_spec, server_run
from fedpriv.scenarios.dp.feature import build_dp_wrapper
from fedpriv.scenarios.nodes.federation import sample_partitions
from fedpriv.strategies.array_records import named_record
from fedpriv.strategies.factory import build_stock_strategy
from flwr.common import ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from fedpriv.privacy.accounting.planning import worst_case_weight
from tests.flower_reference import act_as_serverapp_task

act_as_serverapp_task()

BASE = {
    "privacy": "global-dp",
    "num-clients": 10,
    "clients-per-round": 4,
    "partition": "dirichlet",
    "noise-multiplier": 1.0,
    "num-server-rounds": 3,
}
SHAPES = [(3, 2), (2,)]


class _Grid:
    def get_node_ids(self):
        return list(range(10))


def _overrides(cfg: dict) -> str:
    return " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in cfg.items())


def planned(cfg: dict) -> dict:
    """What ``fedpriv epsilon --run-config ... --json`` prints, parsed."""
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["epsilon", "--run-config", _overrides(cfg), "--json"]) == 0
    return json.loads(out.getvalue())


def run_headline(overrides: dict, seed: int = 3) -> float:
    """ε after the config's rounds, charged by the real wrapper's accountant."""
    cfg = resolve_run_config(overrides)
    counts = [len(c.x_train) for c in federated_data(data_spec(cfg)).clients]
    wrapper = build_dp_wrapper(build_stock_strategy(run_spec(cfg).strategy), server_run(cfg), None)
    rng = np.random.default_rng(seed)
    w = [np.zeros(s, np.float32) for s in SHAPES]
    for t in range(1, int(cfg["num-server-rounds"]) + 1):
        record = named_record(["a", "b"], w)
        list(wrapper.configure_train(t, record, ConfigRecord(), _Grid()))
        sample = sample_partitions(10, 4, rng, cfg["client-sampling"])
        replies = []
        for p in sample:
            arrays = [a + rng.normal(size=a.shape).astype(np.float32) for a in w]
            content = RecordDict(
                {
                    "arrays": named_record(["a", "b"], arrays),
                    "metrics": MetricRecord({"num-examples": counts[p]}),
                }
            )
            ask = Message(content=content, dst_node_id=p + 1, message_type=MessageType.TRAIN)
            replies.append(Message(content=content, reply_to=ask))
        arrays, _ = wrapper.aggregate_train(t, replies)
        w = [arrays[k].numpy() for k in ("a", "b")]
    return float(wrapper.round_metrics()["dp-epsilon"])


@pytest.mark.parametrize(
    "extra",
    [
        {"client-sampling": "fixed", "dp-weighting": "uniform"},
        {"client-sampling": "poisson", "dp-weighting": "uniform"},
    ],
)
def test_planning_equals_the_run_with_uniform_weights(extra):
    cfg = {**BASE, **extra}
    plan = planned(cfg)
    run = run_headline(cfg)
    assert plan["epsilon"] == pytest.approx(run, rel=1e-9)
    assert math.isfinite(run) and run > 0


def test_planning_with_example_weights_is_at_least_the_run_and_says_worst_case():
    cfg = {**BASE, "client-sampling": "fixed", "dp-weighting": "examples"}
    plan = planned(cfg)
    runs = [run_headline(cfg, seed) for seed in range(4)]
    assert all(plan["epsilon"] >= r for r in runs)
    # the old figures: 15.14 printed before (uniform), 42.71 charged by a run
    assert plan["epsilon"] > 40.0
    assert max(runs) > 15.2
    assert any("worst case" in n for n in plan["notes"])
    # and the plan is tight: the worst sample (the largest client with the smallest three)
    counts = sorted(
        len(c.x_train) for c in federated_data(data_spec(resolve_run_config(cfg))).clients
    )
    w_max = counts[-1] / (counts[-1] + sum(counts[:3]))
    assert plan["round_noise_multiplier"] == pytest.approx(1.0 / (4 * w_max))


def test_worst_case_weight_against_brute_force():
    from itertools import combinations

    counts = [5, 80, 13, 7, 44, 2]
    for m in range(1, 7):
        brute = max(max(s) / sum(s) for s in combinations(counts, m))
        assert worst_case_weight(counts, m) == pytest.approx(brute)


def test_planning_without_the_data_assumes_one_client_takes_all_weight():
    from fedpriv.privacy.accounting.planning import privacy_plan

    cfg = resolve_run_config({**BASE, "dp-weighting": "examples"})
    cfg["data-path"] = "/nonexistent"
    cfg["dataset"] = "no-such-dataset"
    plan = privacy_plan(run_spec(cfg))
    assert plan["round_noise_multiplier"] == pytest.approx(1.0 / 4)
    assert any("no counts" in n for n in plan["notes"])
