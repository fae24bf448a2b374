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
