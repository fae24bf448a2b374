"""A NaN or malformed client update never reaches the global model (SPEC §7)."""

import numpy as np
from fedpriv.strategies.validating import ValidUpdatesOnly
from flwr.app import Error
from flwr.common import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg


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
    """A reply of finite 1e18 values and a reply with two ArrayRecords are
    rejected like NaN (named in the round record) in front of the global-DP wrapper, whose
    clipping would otherwise compute a non-finite norm; the round aggregates the rest."""
    from fedpriv.strategies.dp_wrappers import ServerSideFixedClippingDP

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


def test_the_one_pass_check_matches_the_float64_rule_at_the_edges():
    """The check runs in the arrays' own dtype (no float64 copy of the model per reply) and
    decides as ``max |w - w_g|`` in float64 would: a finite change just over MAX_CHANGE, a
    change that overflows float32, +-inf and NaN are rejected with their reason; a change
    of exactly MAX_CHANGE passes; unsigned integer arrays do not wrap around (0 - 1 is
    2**64 - 1 in uint64)."""
    from fedpriv.strategies.validating import MAX_CHANGE, update_problem

    ref = {"0": np.full(4, -3e38, np.float32), "1": np.zeros(2, np.uint64)}

    def problem(first, second=None):
        second = np.zeros(2, np.uint64) if second is None else second
        return update_problem(reply([np.asarray(first, np.float32), second], 1), ref)

    base = np.full(4, -3e38, np.float32)
    assert problem(base) is None
    over = base.copy()
    over[1] = 3e38  # finite, but w - w_g = 6e38 overflows float32
    assert "moved by" in problem(over) and "more than" in problem(over)
    for bad in (np.inf, -np.inf, np.nan):
        arr = base.copy()
        arr[2] = bad
        assert "NaN or Inf" in problem(arr)
    ref["0"] = np.zeros(4, np.float32)
    assert problem(np.full(4, MAX_CHANGE, np.float32)) is None  # float32(1e9) == 1e9
    assert "moved by 2e+09" in problem(np.full(4, 2 * MAX_CHANGE, np.float32))
    assert problem(np.zeros(4), np.array([0, 1], np.uint64)) is None  # |1 - 0|
    ref["1"] = np.array([1, 1], np.uint64)
    assert problem(np.zeros(4), np.array([0, 1], np.uint64)) is None  # |0 - 1| = 1, not 2**64 - 1


def test_array_view_reads_the_same_values_as_numpy_without_a_copy():
    """``array_view`` (the validation's zero-copy read) equals ``Array.numpy()`` in values,
    dtype and shape for C and Fortran order, 0-d, empty and 3-d arrays of several dtypes, and
    shares the Array's bytes (read-only) instead of copying them."""
    from fedpriv.strategies.array_records import array_view
    from flwr.app import Array

    rng = np.random.default_rng(3)
    cases = [
        rng.standard_normal((3, 4)).astype(np.float32),
        np.asfortranarray(rng.standard_normal((5, 2))),
        np.array(7, np.int64),
        np.zeros((0, 3), np.float16),
        rng.integers(0, 2, (2, 3, 4)).astype(bool),
    ]
    for a in cases:
        record = Array(a)
        view, copy = array_view(record), record.numpy()
        assert view.dtype == copy.dtype and view.shape == copy.shape
        assert np.array_equal(view, copy) and np.array_equal(view, a)
        assert not view.flags.writeable
    big = Array(np.arange(1000, dtype=np.float32))
    assert np.shares_memory(array_view(big), np.frombuffer(big.data, np.uint8))


# --- whom a warning names, and a zone node's empty sample -------------------------------------


class _ZoneLinks:
    """The Flower grid under a ZoneGrid: it hands back the replies the test prepared."""

    def __init__(self):
        self.replies = []

    def send_and_receive(self, messages, *, timeout=None):
        del messages, timeout
        return self.replies


def _instruction(node, clients):
    from fedpriv.zonal.release import ZONE_CLIENTS_KEY

    config = ConfigRecord({ZONE_CLIENTS_KEY: [int(p) for p in clients]})
    msg = Message(RecordDict({"config": config}), dst_node_id=node, message_type="train")
    msg.metadata.__dict__["_message_id"] = f"to-{node}"  # what the grid sets when it sends
    return msg


def _answer(instruction, arrays, n):
    content = RecordDict(
        {"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": n})}
    )
    msg = Message(content, reply_to=instruction)
    msg.metadata.__dict__["_src_node_id"] = instruction.metadata.dst_node_id
    return msg


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def test_rejections_are_one_warning_a_round_naming_partitions(caplog):
    from fedpriv.scenarios.nodes.federation import PartitionGrid

    g = [np.zeros(3, np.float32)]
    grid = PartitionGrid(None, {7001: 0, 7002: 1, 7003: 2})
    strategy = ValidUpdatesOnly(FedAvg(min_available_nodes=1, min_train_nodes=1))
    list(strategy.configure_train(1, ArrayRecord(g), ConfigRecord(), grid))
    good, bad = [np.ones(3, np.float32)], [np.full(3, np.nan, np.float32)]
    replies = [reply(good, 7001), reply(good, 7002, n=0), reply(bad, 7003)]
    with caplog.at_level("WARNING", logger="flwr"):
        strategy.aggregate_train(4, replies)
    [line] = _warnings(caplog)
    assert line.startswith("round 4: 2 update(s) rejected: ")
    assert "partition 1: num-examples = 0 is outside" in line and "partition 2: array" in line
    assert "700" not in line  # no node id
    assert set(strategy.last_round["rejected"]) == {7002, 7003}


def test_a_zone_asked_for_no_client_declines_without_a_warning(caplog):
    """A zone node sent an empty sample replies with num-examples = 0: left out, but not an
    invalid update (no warning, not in rejected, no failed round under on_invalid='fail');
    a zone that was asked for clients and sends 0 is rejected, named by its zone."""
    from fedpriv.scenarios.nodes.federation import ZoneGrid

    g = [np.zeros(3, np.float32)]
    links = _ZoneLinks()
    grid = ZoneGrid(links, {9000: 0, 9001: 1, 9002: 2}, num_clients=6)
    strategy = ValidUpdatesOnly(FedAvg(min_available_nodes=1, min_train_nodes=1), on_invalid="fail")
    list(strategy.configure_train(1, ArrayRecord(g), ConfigRecord(), grid))
    sent = [_instruction(9000, [0, 1]), _instruction(9001, []), _instruction(9002, [4, 5])]
    links.replies = [_answer(sent[0], [np.ones(3, np.float32)], 20),
                     _answer(sent[1], [np.ones(3, np.float32)], 0)]  # fmt: skip
    replies = grid.send_and_receive(sent)
    with caplog.at_level("WARNING", logger="flwr"):
        arrays, _ = strategy.aggregate_train(1, replies)
    assert _warnings(caplog) == [] and arrays is not None
    assert strategy.last_round["rejected"] == {} and strategy.last_round["declined"] == [9001]
    links.replies = [_answer(sent[2], [np.ones(3, np.float32)], 0)]  # asked for 4 and 5
    with caplog.at_level("WARNING", logger="flwr"):
        strategy.aggregate_train(2, grid.send_and_receive(sent))
    assert any("zone 2: num-examples = 0" in w for w in _warnings(caplog))
    assert strategy.last_round["rejected"] == {9002: "num-examples = 0 is outside (0, 1e+09]"}


def test_a_checkpoint_of_the_chain_holds_no_second_copy_of_the_model():
    """The reference (the round's global arrays) is set by every configure_train: the
    chain's checkpoint leaves it out, and a restored chain checks against the next round's."""
    import pickle

    from fedpriv.checkpoint import capture_state, restore_state

    g = [np.zeros(250_000, np.float32)]  # 1 MB
    strategy = ValidUpdatesOnly(FedAvg(min_available_nodes=1, min_train_nodes=1))
    _configure(strategy, g)
    (state,) = capture_state([strategy])
    assert "reference" not in state and len(pickle.dumps(state)) < 10_000
    fresh = ValidUpdatesOnly(FedAvg(min_available_nodes=1, min_train_nodes=1))
    restore_state([fresh], [state])
    _configure(fresh, g)
    nan = [np.full(250_000, np.nan, np.float32)]
    arrays, _ = fresh.aggregate_train(2, [reply([np.ones(250_000, np.float32)], 1), reply(nan, 2)])
    assert np.allclose(arrays.to_numpy_ndarrays()[0], 1.0)
    assert set(fresh.last_round["rejected"]) == {2}
