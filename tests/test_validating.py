"""A NaN or malformed client update never reaches the global model (SPEC §7)."""

import numpy as np
from flwr.app import Error
from flwr.common import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg

from strategies.validating import ValidUpdatesOnly


def reply(arrays, node, n=10):
    msg = Message(
        content=RecordDict(
            {"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": n})}
        ),
        dst_node_id=node,
        message_type="train",
    )
    msg.metadata.__dict__["_src_node_id"] = node
    return msg


def error_reply(node):
    msg = Message(Error(code=1, reason="boom"), reply_to=reply([np.zeros(1)], node))
    msg.metadata.__dict__["_src_node_id"] = node
    return msg


class _Grid:
    def get_node_ids(self):
        return [1, 2, 3]


def _configure(strategy, arrays):
    list(strategy.configure_train(1, ArrayRecord(arrays), ConfigRecord(), _Grid()))


def test_nan_and_wrong_shape_updates_are_dropped():
    g = [np.zeros((2, 2), np.float32), np.zeros(3, np.float32)]
    strategy = ValidUpdatesOnly(FedAvg(min_available_nodes=1, min_train_nodes=1))
    _configure(strategy, g)
    good = [np.ones((2, 2), np.float32), np.ones(3, np.float32)]
    nan = [np.full((2, 2), np.nan, np.float32), np.ones(3, np.float32)]
    wrong = [np.ones((3, 2), np.float32), np.ones(3, np.float32)]
    arrays, _ = strategy.aggregate_train(1, [reply(good, 1), reply(nan, 2), reply(wrong, 3)])
    out = arrays.to_numpy_ndarrays()
    assert np.allclose(out[0], 1.0) and np.allclose(out[1], 1.0)
    assert set(strategy.last_round["rejected"]) == {2, 3}
    assert "NaN" in strategy.last_round["rejected"][2]
    assert "shape" in strategy.last_round["rejected"][3]


def test_fail_mode_skips_the_round():
    g = [np.zeros(3, np.float32)]
    strategy = ValidUpdatesOnly(FedAvg(), on_invalid="fail")
    _configure(strategy, g)
    arrays, metrics = strategy.aggregate_train(
        1, [reply([np.ones(3, np.float32)], 1), reply([np.array([np.inf, 0, 0], np.float32)], 2)]
    )
    assert arrays is None and metrics is None
    assert strategy.last_round["skipped"]


def test_failures_follow_accept_failures():
    g = [np.zeros(3, np.float32)]
    ok = reply([np.ones(3, np.float32)], 1)
    strict = ValidUpdatesOnly(FedAvg())
    _configure(strict, g)
    assert strict.aggregate_train(1, [ok, error_reply(2)])[0] is None
    lenient = ValidUpdatesOnly(FedAvg(), accept_failures=True)
    _configure(lenient, g)
    arrays, _ = lenient.aggregate_train(1, [ok, error_reply(2)])
    assert np.allclose(arrays.to_numpy_ndarrays()[0], 1.0)


def test_huge_finite_and_two_record_replies_are_rejected_and_named_through_global_dp():
    """Issue 20 point 7: a reply of finite 1e18 values and a reply with two ArrayRecords are
    rejected like NaN (named in the round record) in front of the global-DP wrapper, whose
    clipping would otherwise compute a non-finite norm; the round aggregates the rest."""
    from strategies.dp_wrappers import ServerSideFixedClippingDP

    g = [np.zeros((2, 2), np.float32), np.zeros(3, np.float32)]
    inner = ServerSideFixedClippingDP(
        FedAvg(min_available_nodes=1, min_train_nodes=1),
        noise_multiplier=0.0, clipping_norm=100.0, num_sampled_clients=3,
    )  # fmt: skip
    strategy = ValidUpdatesOnly(inner)
    _configure(strategy, g)
    good = [np.ones((2, 2), np.float32), np.ones(3, np.float32)]
    huge = [np.full((2, 2), 1e18, np.float32), np.ones(3, np.float32)]
    two = reply(good, 3)
    two.content["extra"] = ArrayRecord([np.ones(3, np.float32)])
    arrays, _ = strategy.aggregate_train(1, [reply(good, 1), reply(huge, 2), two])
    out = arrays.to_numpy_ndarrays()
    assert all(np.all(np.isfinite(a)) for a in out)
    assert set(strategy.round_metrics()["rejected-nodes"]) == {2, 3}
    assert "moved by 1e+18" in strategy.last_round["rejected"][2]
    assert "expected 1 ArrayRecord, got 2" in strategy.last_round["rejected"][3]
    assert not strategy.round_metrics()["aggregation-skipped"]
