"""Weights that cannot crash the run.

A reply whose ``num-examples`` is negative, zero, NaN, huge (1e308), a bool or a string used
to stop ``aggregate_train`` under ``dp-weighting = examples`` (ZeroDivisionError,
OverflowError, TypeError). Each case goes through the real server chain of a standard run
(``fedpriv.scenarios.app.engine.build_strategy``: RoundRecorder -> ValidUpdatesOnly -> global-DP
wrapper
-> stock FedAvg) with real Flower messages: the bad reply is rejected like any malformed
update (named in the round record), the round aggregates the others, and the result equals
the round in which that client did not reply. The bool and string cannot be built through
``MetricRecord``'s type check (a client's own deserialiser could still hand them over), so
they are written into the record's storage directly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from fedpriv.scenarios.app.engine import build_strategy, run_config_as_record
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.specs import server_run
from fedpriv.scenarios.nodes.federation import PartitionGrid
from fedpriv.strategies.validating import MAX_WEIGHT, weight_problem
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

M = 4
NODES = {100 + p: p for p in range(M)}  # node id -> partition id
BAD = {"negative": -5, "zero": 0, "nan": math.nan, "huge": 1e308, "bool": True, "string": "12"}


def _cfg(privacy: str, weighting: str) -> dict:
    return resolve_run_config(
        {
            "privacy": privacy,
            "num-clients": M,
            "clipping-norm": 100.0,  # nothing clipped: an exact weighted mean
            "noise-multiplier": 0.0,  # z = 0: the two rounds are compared exactly
            "dp-weighting": weighting,
        }
    )


def _weighted_reply(arrays: list[np.ndarray], weight, reply_to: Message) -> Message:
    metrics = MetricRecord({"num-examples": 1})
    metrics._data["num-examples"] = weight  # bypasses the type check (bool, str)
    content = RecordDict({"arrays": ArrayRecord(arrays), "metrics": metrics})
    return Message(content=content, reply_to=reply_to)


def run_round(cfg: dict, bad_weight=None, *, absent: bool = False):
    """One round through the real chain; partition 0 replies with ``bad_weight`` (or not at
    all when ``absent``). Returns the new global arrays and the round record."""
    g = [np.zeros((3, 2), np.float32), np.zeros(2, np.float32)]
    pgrid = PartitionGrid(None, NODES)
    recorder = build_strategy(server_run(cfg), pgrid, np.random.default_rng(0), CATALOG)
    config = run_config_as_record({**cfg, "server-round": 1})
    replies = []
    for msg in recorder.configure_train(1, ArrayRecord(g), config, pgrid):
        p = NODES[msg.metadata.dst_node_id]
        if absent and p == 0:
            continue
        weight = bad_weight if p == 0 else 10 * (p + 1)
        arrays = [np.full(a.shape, 0.1 * (p + 1), np.float32) for a in g]
        replies.append(_weighted_reply(arrays, weight, msg))
    replies.sort(key=lambda m: NODES[m.metadata.src_node_id])
    arrays, _ = recorder.aggregate_train(1, replies)
    return (None if arrays is None else arrays.to_numpy_ndarrays()), dict(recorder.current)


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("privacy", ["global-dp", "none"])
def test_malformed_num_examples_is_rejected_and_the_round_goes_on(case, privacy):
    cfg = _cfg(privacy, "examples")
    out, record = run_round(cfg, BAD[case])
    assert list(record["rejected"]) == ["0"], record.get("rejected")
    assert "num-examples" in record["rejected"]["0"]
    assert not record["aggregation-skipped"]
    absent, _ = run_round(cfg, absent=True)
    for a, b in zip(out, absent):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    # independent: example-weighted mean of partitions 1..3 (weights 20, 30, 40)
    expected = sum(0.1 * (p + 1) * 10 * (p + 1) for p in (1, 2, 3)) / 90
    assert np.allclose(out[0], expected, rtol=1e-5)


def test_good_weights_pass_and_the_bounds_are_the_documented_ones():
    def reply(weight):
        metrics = MetricRecord({"num-examples": 1})
        metrics._data["num-examples"] = weight
        return Message(content=RecordDict({"m": metrics}), dst_node_id=1, message_type="train")

    for good in (1, 288, 2.5, MAX_WEIGHT, np.int64(7)):
        assert weight_problem(reply(good)) is None, good
    for bad in (*BAD.values(), -math.inf, math.inf, MAX_WEIGHT * 1.01, [3], None):
        assert weight_problem(reply(bad)) is not None, bad
    missing = Message(content=RecordDict({"m": MetricRecord({})}), dst_node_id=1,
                      message_type="train")  # fmt: skip
    assert "got 0" in weight_problem(missing)


@pytest.mark.parametrize("privacy", ["global-dp", "metric-dp"])
def test_an_audit_under_example_weights_is_refused_with_one_line(privacy):
    """Canaries would carry the mean real weight (diluted 14x): refused before training."""
    from fedpriv.scenarios.config.schema import ConfigError

    with pytest.raises(ConfigError) as err:
        resolve_run_config({"privacy": privacy, "dp-weighting": "examples", "audit-canaries": 4})
    text = str(err.value)
    assert "\n" not in text and "dp-weighting = 'examples'" in text and "uniform" in text
    ok = resolve_run_config({"privacy": privacy, "dp-weighting": "uniform", "audit-canaries": 4})
    assert ok["audit-canaries"] == 4
