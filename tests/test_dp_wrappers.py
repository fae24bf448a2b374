"""Server-side fixed-clipping global DP and metric DP wrappers, both Flower APIs (SPEC §3.1–3.2).

Fast: Message and FitRes objects are built directly, no simulation. Every reference value is
computed independently (Flower's own wrappers and helpers, a naive distance loop, the
accounting module) so the checks can fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import server_run
from fedpriv.scenarios.dp.feature import build_dp_wrapper, privacy_summary
from fedpriv.strategies.dp_wrappers import MetricDP, ServerSideFixedClippingDP
from fedpriv.strategies.legacy_dp import LegacyMetricDP, LegacyServerSideFixedClippingDP
from flwr.common import (
    ArrayRecord,
    Code,
    Error,
    FitRes,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg as LegacyFedAvg
from flwr.serverapp.strategy import FedAvg, FedMedian

from fedpriv.privacy.accounting import dp_epsilon
from fedpriv.privacy.dp import (
    FALLBACK_BELOW_FLOOR,
    FALLBACK_FEW_CLIENTS,
    FixedClippingGaussian,
    GaussianRoundsAccountant,
    MetricScaledGaussian,
)
from fedpriv.privacy.mechanisms import metric_sigma_lower_bound
from tests.flower_reference import (
    act_as_serverapp_task,
    compute_stdv,
    server_side_fixed_clipping,
)

FlowerDP = server_side_fixed_clipping("message")
FlowerLegacyDP = server_side_fixed_clipping("legacy")
act_as_serverapp_task()

SHAPES = [(4, 3), (3,), (2, 2, 2)]


# --- fixtures and builders ----------------------------------------------------------------------


def global_model(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s).astype(np.float32) for s in SHAPES]


def client_models(scales, seed: int = 1, base=None) -> list[list[np.ndarray]]:
    """Client models w_g + u_i with ‖u_i‖ = scales[i] exactly (random directions)."""
    base = global_model() if base is None else base
    rng = np.random.default_rng(seed)
    out = []
    for scale in scales:
        update = [rng.normal(size=s) for s in SHAPES]
        norm = math.sqrt(sum(float(np.sum(u**2)) for u in update))
        out.append([(g + u * (scale / norm)).astype(np.float32) for g, u in zip(base, update)])
    return out


def replies(models, *, examples=None, first_node: int = 100) -> list[Message]:
    """Train replies as the grid returns them (src_node_id = the client's node)."""
    out = []
    for i, arrays in enumerate(models):
        n = 10 if examples is None else examples[i]
        content = RecordDict(
            {"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": n})}
        )
        instruction = Message(
            content=content, dst_node_id=first_node + i, message_type=MessageType.TRAIN
        )
        out.append(Message(content=content, reply_to=instruction))
    return out


def error_reply(node: int = 999) -> Message:
    instruction = Message(content=RecordDict(), dst_node_id=node, message_type=MessageType.TRAIN)
    return Message(Error(code=1, reason="client crashed"), reply_to=instruction)


class Proxy(ClientProxy):
    """A legacy ClientProxy that only carries an id."""

    def __init__(self, cid: str) -> None:
        super().__init__(cid)
        self.node_id = int(cid)

    def get_properties(self, ins, timeout, group_id):  # pragma: no cover
        raise NotImplementedError

    def get_parameters(self, ins, timeout, group_id):  # pragma: no cover
        raise NotImplementedError

    def fit(self, ins, timeout, group_id):  # pragma: no cover
        raise NotImplementedError

    def evaluate(self, ins, timeout, group_id):  # pragma: no cover
        raise NotImplementedError

    def reconnect(self, ins, timeout, group_id):  # pragma: no cover
        raise NotImplementedError


def fit_results(models, first_node: int = 100):
    return [
        (Proxy(str(first_node + i)), FitRes(Status(Code.OK, ""), ndarrays_to_parameters(m), 10, {}))
        for i, m in enumerate(models)
    ]


def naive_distance(models) -> float:
    """max_{i<j} mean_ℓ ‖w_i(ℓ) − w_j(ℓ)‖_F, written out as a loop (independent reference)."""
    best = 0.0
    for i in range(len(models)):
        for j in range(i + 1, len(models)):
            per_layer = [
                float(np.sqrt(np.sum((a.astype(np.float64) - b.astype(np.float64)) ** 2)))
                for a, b in zip(models[i], models[j])
            ]
            best = max(best, sum(per_layer) / len(per_layer))
    return best


def clip_by_hand(model, reference, c):
    """w_g + Δ·min(1, C/‖Δ‖) in float64 (independent of fedpriv.privacy.mechanisms)."""
    delta = [m.astype(np.float64) - r.astype(np.float64) for m, r in zip(model, reference)]
    norm = math.sqrt(sum(float(np.sum(d**2)) for d in delta))
    factor = min(1.0, c / norm)
    return [r.astype(np.float64) + d * factor for r, d in zip(reference, delta)]


def message_wrapper(cls, reference, **kw):
    wrapper = cls(FedAvg(), **kw)
    wrapper.current_arrays = ArrayRecord(reference)
    return wrapper


# --- σ ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("z,c,m", [(0.01, 5.0, 4), (1.0, 0.5, 3), (2.5, 3.0, 10), (0.0, 1.0, 2)])
def test_global_sigma_equals_flower_compute_stdv(z, c, m):
    stdv, _ = FixedClippingGaussian(
        noise_multiplier=z, clipping_norm=c, num_sampled_clients=m
    ).noise_stdv([], [])
    assert stdv == compute_stdv(z, c, m)


def test_metric_sigma_is_global_sigma_over_d_with_d_from_a_naive_loop():
    reference = global_model()
    models = client_models([0.5, 3.0, 7.0])
    wrapper = message_wrapper(
        MetricDP, reference, noise_multiplier=1.3, clipping_norm=2.0, num_sampled_clients=3,
        rng=np.random.default_rng(0), distance_on="raw",
    )  # fmt: skip
    wrapper.aggregate_train(1, replies(models))
    report = wrapper.round_metrics()
    d = naive_distance(models)
    assert report["dp-distance"] == pytest.approx(d, rel=1e-9)
    assert report["dp-sigma"] == pytest.approx(compute_stdv(1.3, 2.0, 3) / d, rel=1e-9)
    assert report["dp-fallback"] is None
    assert report["dp-mode"] == "metric-dp"


# --- same noise draw = Flower's own wrapper -----------------------------------------------------


@pytest.mark.parametrize("c", [0.7, 2.0, 100.0])  # all clipped / some clipped / none clipped
def test_message_api_output_equals_flower_wrapper_for_the_same_noise_draw(c):
    reference = global_model()
    models = client_models([0.5, 1.5, 4.0])
    ours = message_wrapper(
        ServerSideFixedClippingDP, reference, noise_multiplier=0.8, clipping_norm=c,
        num_sampled_clients=3, rng=np.random.RandomState(7), weighting="examples",
    )  # fmt: skip
    ours_arrays, ours_metrics = ours.aggregate_train(3, replies(models, examples=[5, 10, 20]))
    flower = FlowerDP(FedAvg(), 0.8, c, 3)
    flower.current_arrays = ArrayRecord(reference)
    np.random.seed(7)
    flower_arrays, flower_metrics = flower.aggregate_train(3, replies(models, examples=[5, 10, 20]))
    assert list(ours_arrays.keys()) == list(flower_arrays.keys())
    for a, b in zip(ours_arrays.to_numpy_ndarrays(), flower_arrays.to_numpy_ndarrays()):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert dict(ours_metrics) == dict(flower_metrics)
    # The noise is really there: the output differs from the noiseless clipped FedAvg.
    clean = np.average(
        [np.concatenate([x.ravel() for x in clip_by_hand(m, reference, c)]) for m in models],
        axis=0, weights=[5, 10, 20],
    )  # fmt: skip
    noisy = np.concatenate([x.ravel() for x in ours_arrays.to_numpy_ndarrays()])
    resid = noisy - clean
    assert np.std(resid) == pytest.approx(0.8 * c / 3, rel=0.35)


def test_legacy_api_output_equals_flower_legacy_wrapper_for_the_same_noise_draw():
    reference = global_model()
    models = client_models([0.5, 1.5, 4.0])
    ours = LegacyServerSideFixedClippingDP(
        LegacyFedAvg(), noise_multiplier=0.8, clipping_norm=1.0, num_sampled_clients=3,
        rng=np.random.RandomState(11), weighting="examples",
    )  # fmt: skip
    ours.current_round_params = reference
    ours_params, _ = ours.aggregate_fit(2, fit_results(models), [])
    flower = FlowerLegacyDP(LegacyFedAvg(), 0.8, 1.0, 3)
    flower.current_round_params = reference
    np.random.seed(11)
    flower_params, _ = flower.aggregate_fit(2, fit_results(models), [])
    for a, b in zip(parameters_to_ndarrays(ours_params), parameters_to_ndarrays(flower_params)):
        np.testing.assert_array_equal(a, b)
    assert ours.round_metrics()["dp-sigma"] == compute_stdv(0.8, 1.0, 3)
    assert ours.round_metrics()["dp-num-clipped"] == 2


def test_both_apis_give_identical_metric_dp_outputs_for_the_same_generator():
    reference = global_model()
    models = client_models([0.3, 2.0, 5.0, 1.0])
    kw = dict(noise_multiplier=0.5, clipping_norm=1.5, num_sampled_clients=4, distance_on="clipped")
    msg = message_wrapper(MetricDP, reference, rng=np.random.default_rng(3), **kw)
    arrays, _ = msg.aggregate_train(1, replies(models))
    legacy = LegacyMetricDP(LegacyFedAvg(), rng=np.random.default_rng(3), **kw)
    legacy.current_round_params = reference
    params, _ = legacy.aggregate_fit(1, fit_results(models), [])
    for a, b in zip(arrays.to_numpy_ndarrays(), parameters_to_ndarrays(params)):
        np.testing.assert_array_equal(a, b)
    assert msg.round_metrics() == legacy.round_metrics()


def test_inputs_are_not_modified():
    reference = global_model()
    models = client_models([5.0, 6.0])
    msgs = replies(models)
    wrapper = message_wrapper(
        ServerSideFixedClippingDP, reference, noise_multiplier=1.0, clipping_norm=1.0,
        num_sampled_clients=2, rng=np.random.default_rng(0),
    )  # fmt: skip
    wrapper.aggregate_train(1, msgs)
    for msg, model in zip(msgs, models):
        for got, want in zip(msg.content["arrays"].to_numpy_ndarrays(), model):
            np.testing.assert_array_equal(got, want)


# --- clipping -----------------------------------------------------------------------------------


def test_clipped_count_and_nodes_and_the_clipped_mean_reaches_the_inner_strategy():
    reference = global_model()
    models = client_models([0.5, 2.0, 3.0, 0.99])
    seen = {}

    class Spy(FedAvg):
        def aggregate_train(self, server_round, replies):
            replies = list(replies)
            seen["models"] = [m.content["arrays"].to_numpy_ndarrays() for m in replies]
            seen["weights"] = [m.content["metrics"]["num-examples"] for m in replies]
            return super().aggregate_train(server_round, replies)

    wrapper = ServerSideFixedClippingDP(
        Spy(), noise_multiplier=0.0, clipping_norm=1.0, num_sampled_clients=4,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    wrapper.current_arrays = ArrayRecord(reference)
    arrays, metrics = wrapper.aggregate_train(1, replies(models))
    report = wrapper.round_metrics()
    assert report["dp-num-clipped"] == 2
    assert report["dp-clipped-nodes"] == [101, 102]
    # z = 0: the inner strategy sees ONE reply of weight 1, the uniform mean of the models
    # clipped by hand (independent float64 clipping)
    assert seen["weights"] == [1] and len(seen["models"]) == 1
    clipped = [clip_by_hand(m, reference, 1.0) for m in models]
    mean = [np.mean([c[i] for c in clipped], axis=0) for i in range(len(SHAPES))]
    for got, want, out in zip(seen["models"][0], mean, arrays.to_numpy_ndarrays()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(out, got)


# --- metric DP edge cases -----------------------------------------------------------------------


def test_single_client_round_uses_the_floor_and_completes():
    reference = global_model()
    wrapper = message_wrapper(
        MetricDP, reference, noise_multiplier=0.01, clipping_norm=5.0, num_sampled_clients=1,
        min_distance=1e-3, rng=np.random.default_rng(0),
    )  # fmt: skip
    arrays, _ = wrapper.aggregate_train(1, replies(client_models([2.0])))
    report = wrapper.round_metrics()
    assert report["dp-fallback"] == FALLBACK_FEW_CLIENTS
    assert report["dp-distance-measured"] is None
    assert report["dp-distance"] == 1e-3
    assert report["dp-sigma"] == pytest.approx(0.01 * 5.0 / (1 * 1e-3))
    assert math.isfinite(report["dp-sigma"])
    assert all(np.all(np.isfinite(a)) for a in arrays.to_numpy_ndarrays())


def test_identical_models_use_the_floor_and_complete(caplog):
    reference = global_model()
    same = client_models([1.0])[0]
    wrapper = message_wrapper(
        MetricDP, reference, noise_multiplier=0.01, clipping_norm=5.0, num_sampled_clients=3,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    with caplog.at_level("WARNING", logger="fedpriv.privacy.dp"):
        arrays, _ = wrapper.aggregate_train(1, replies([same, same, same]))
    report = wrapper.round_metrics()
    assert report["dp-fallback"] == FALLBACK_BELOW_FLOOR
    assert report["dp-distance-measured"] == 0.0
    assert report["dp-distance"] == 1e-6
    assert report["dp-sigma"] == pytest.approx(0.01 * 5.0 / (3 * 1e-6))
    assert arrays is not None
    assert any(FALLBACK_BELOW_FLOOR in r.getMessage() for r in caplog.records)


def test_distance_on_raw_and_clipped_differ_when_clipping_is_active():
    reference = global_model()
    models = client_models([0.2, 3.0, 6.0])
    d = {}
    for on in ("raw", "clipped"):
        w = message_wrapper(
            MetricDP, reference, noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=3,
            distance_on=on, rng=np.random.default_rng(0),
        )  # fmt: skip
        w.aggregate_train(1, replies(models))
        d[on] = w.round_metrics()["dp-distance"]
    assert d["raw"] == pytest.approx(naive_distance(models), rel=1e-9)
    clipped = [clip_by_hand(m, reference, 1.0) for m in models]
    assert d["clipped"] == pytest.approx(naive_distance(clipped), rel=1e-5)
    assert d["clipped"] < 0.5 * d["raw"]
    # Without active clipping both readings agree.
    mech = {
        on: MetricScaledGaussian(
            noise_multiplier=1.0, clipping_norm=100.0, num_sampled_clients=3, distance_on=on
        ).process(models, reference)
        for on in ("raw", "clipped")
    }
    assert mech["raw"].info["distance"] == pytest.approx(mech["clipped"].info["distance"], rel=1e-5)


# --- failures -----------------------------------------------------------------------------------


def test_failures_skip_the_round_unless_accepted():
    reference = global_model()
    models = client_models([0.5, 0.5, 0.5])
    kw = dict(noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=4)
    strict = message_wrapper(
        ServerSideFixedClippingDP, reference, rng=np.random.default_rng(0), **kw
    )
    assert strict.aggregate_train(1, replies(models) + [error_reply()]) == (None, None)
    assert strict.round_metrics()["dp-skipped"] == "client failures"
    assert strict.round_metrics()["dp-noised"] is False

    acc = GaussianRoundsAccountant(sampled=4, population=4, delta=1e-5)
    lenient = message_wrapper(
        ServerSideFixedClippingDP, reference, rng=np.random.default_rng(0),
        accept_failures=True, accountant=acc, **kw,
    )  # fmt: skip
    arrays, _ = lenient.aggregate_train(1, replies(models) + [error_reply()])
    report = lenient.round_metrics()
    assert arrays is not None and report["dp-noised"]
    assert report["dp-num-reports"] == 3 and report["dp-num-failures"] == 1
    assert "dp-underfilled" in report
    # 3 of m = 4 reports: σ stays z·C/m, the noise multiplier on the sum is z·3/4.
    assert report["dp-sigma"] == compute_stdv(1.0, 1.0, 4)
    assert report["dp-sum-noise-multiplier"] == pytest.approx(0.75)
    want = dp_epsilon(0.75, rounds=1, sampled=4, population=4, delta=1e-5)
    assert report["dp-epsilon-rdp"] == pytest.approx(want.epsilon_rdp)
    assert report["dp-epsilon-rdp"] > dp_epsilon(1.0, rounds=1, sampled=4, population=4,
                                                 delta=1e-5).epsilon_rdp  # fmt: skip


def test_legacy_failures_skip_the_round_unless_accepted():
    reference = global_model()
    models = client_models([0.5, 0.5])
    kw = dict(noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=3)
    strict = LegacyServerSideFixedClippingDP(LegacyFedAvg(), rng=np.random.default_rng(0), **kw)
    strict.current_round_params = reference
    assert strict.aggregate_fit(1, fit_results(models), [RuntimeError("x")]) == (None, {})
    lenient = LegacyServerSideFixedClippingDP(
        LegacyFedAvg(accept_failures=True), rng=np.random.default_rng(0), accept_failures=True, **kw
    )
    lenient.current_round_params = reference
    params, _ = lenient.aggregate_fit(1, fit_results(models), [RuntimeError("x")])
    assert params is not None
    assert lenient.round_metrics()["dp-num-reports"] == 2
    assert "dp-underfilled" in lenient.round_metrics()


def test_configure_train_remembers_the_global_arrays_and_resets_the_report():
    reference = global_model()

    class Stub(FedAvg):
        def configure_train(self, server_round, arrays, config, grid):
            return []

    wrapper = ServerSideFixedClippingDP(
        Stub(), noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=1,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    wrapper.last_round = {"dp-sigma": 123.0}
    wrapper.configure_train(1, ArrayRecord(reference), None, None)
    assert wrapper.round_metrics() == {}
    for a, b in zip(wrapper.current_arrays.to_numpy_ndarrays(), reference):
        np.testing.assert_array_equal(a, b)


def test_fedmedian_inner_strategy_is_fine():
    reference = global_model()
    wrapper = ServerSideFixedClippingDP(
        FedMedian(), noise_multiplier=0.0, clipping_norm=0.5, num_sampled_clients=3,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    wrapper.current_arrays = ArrayRecord(reference)
    arrays, _ = wrapper.aggregate_train(1, replies(client_models([0.1, 2.0, 3.0])))
    delta = [a - r for a, r in zip(arrays.to_numpy_ndarrays(), reference)]
    assert math.sqrt(sum(float(np.sum(d**2)) for d in delta)) <= 0.5 + 1e-5


# --- validation ---------------------------------------------------------------------------------


BASE = dict(noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=2)


@pytest.mark.parametrize(
    "change,name",
    [
        (dict(noise_multiplier=-1.0), "noise_multiplier"),
        (dict(noise_multiplier=math.nan), "noise_multiplier"),
        (dict(clipping_norm=0.0), "clipping_norm"),
        (dict(num_sampled_clients=0), "num_sampled_clients"),
        (dict(num_sampled_clients=2.5), "num_sampled_clients"),
        (dict(min_distance=0.0), "min_distance"),
        (dict(distance_on="both"), "distance_on"),
    ],
)
def test_bad_arguments_name_the_argument(change, name):
    kwargs = {**BASE, **change}
    with pytest.raises(ValueError, match=name):
        MetricScaledGaussian(**kwargs)
    with pytest.raises(ValueError, match=name):
        MetricDP(FedAvg(), **kwargs)


def test_wrong_api_and_rng_are_refused():
    with pytest.raises(ValueError, match="strategy"):
        ServerSideFixedClippingDP(
            LegacyFedAvg(), noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=1
        )
    with pytest.raises(ValueError, match="strategy"):
        LegacyServerSideFixedClippingDP(
            FedAvg(), noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=1
        )
    with pytest.raises(ValueError, match="rng"):
        ServerSideFixedClippingDP(
            FedAvg(), noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=1, rng=7
        )


# --- accounting ---------------------------------------------------------------------------------


def test_accountant_per_round_matches_dp_epsilon_and_grows():
    acc = GaussianRoundsAccountant(sampled=4, population=4, delta=1e-5)
    series = [acc.step(1.0) for _ in range(3)]
    for k, rep in enumerate(series, start=1):
        want = dp_epsilon(1.0, rounds=k, sampled=4, population=4, delta=1e-5)
        assert rep["epsilon"] == pytest.approx(want.epsilon)
        assert rep["epsilon_rdp"] == pytest.approx(want.epsilon_rdp)
        assert "replace-one" in rep["adjacency"] and rep["accountant"]
    assert series[0]["epsilon"] < series[1]["epsilon"] < series[2]["epsilon"]
    hetero = GaussianRoundsAccountant(sampled=4, population=4, delta=1e-5)
    hetero.step(1.0)
    rep = hetero.step(2.0)
    low = dp_epsilon(2.0, rounds=2, sampled=4, population=4, delta=1e-5).epsilon
    high = dp_epsilon(1.0, rounds=2, sampled=4, population=4, delta=1e-5).epsilon
    assert low < rep["epsilon"] < high and rep["epsilon_pld"] is not None


def test_uniform_weighting_by_default_and_examples_accounted_by_the_largest_weight():
    """MP non-IID weights 0.35/0.15/0.40/0.10, z = 1, 20 rounds."""
    reference = global_model()
    models = client_models([0.5, 0.5, 0.5, 0.5])
    examples = [35, 15, 40, 10]
    kw = dict(noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=4)
    uniform = message_wrapper(
        ServerSideFixedClippingDP, reference, rng=np.random.default_rng(0), **kw,
        accountant=GaussianRoundsAccountant(sampled=4, population=4, delta=1e-5),
    )  # fmt: skip
    weighted = message_wrapper(
        ServerSideFixedClippingDP, reference, rng=np.random.default_rng(0), **kw,
        accountant=GaussianRoundsAccountant(sampled=4, population=4, delta=1e-5),
        weighting="examples",
    )  # fmt: skip
    for rnd in range(1, 21):
        a, _ = uniform.aggregate_train(rnd, replies(models, examples=examples))
        b, _ = weighted.aggregate_train(rnd, replies(models, examples=examples))
    u, w = uniform.round_metrics(), weighted.round_metrics()
    assert u["dp-weighting"] == "uniform" and u["dp-round-noise-multiplier"] == 1.0
    assert u["dp-epsilon"] == pytest.approx(77.3, abs=0.05)
    assert w["dp-round-noise-multiplier"] == pytest.approx(0.625)
    assert w["dp-epsilon"] == pytest.approx(162.6, abs=0.1)
    per_client = sorted(w["dp-client-epsilon-nodes"].values())
    assert per_client[-1] == pytest.approx(w["dp-epsilon"])
    assert per_client[0] < u["dp-epsilon"] < per_client[-1]  # the 0.10 client is better off
    # uniform really aggregates uniformly: same noise draw, output = plain mean + noise
    rng = np.random.default_rng(5)
    one = message_wrapper(
        ServerSideFixedClippingDP, reference, rng=rng, **{**kw, "noise_multiplier": 0.0}
    )
    arrays, _ = one.aggregate_train(
        1, replies(client_models([0.1, 0.2, 0.3, 0.4]), examples=examples)
    )
    mean = [
        np.mean([m[i] for m in client_models([0.1, 0.2, 0.3, 0.4])], axis=0)
        for i in range(len(reference))
    ]
    for got, want in zip(arrays.to_numpy_ndarrays(), mean):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_one_client_moved_by_1000_cannot_push_metric_sigma_below_the_bound():
    """Default metric DP, one of four clients moved by +1000."""
    reference = global_model()
    models = client_models([0.05, 0.08, 0.1, 0.12])
    models[2] = [w + 1000.0 for w in models[2]]
    z, c, m = 1.0, 1.0, 4
    wrapper = message_wrapper(
        MetricDP, reference, noise_multiplier=z, clipping_norm=c, num_sampled_clients=m,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    assert wrapper.mechanism.distance_on == "clipped"
    wrapper.aggregate_train(1, replies(models))
    report = wrapper.round_metrics()
    layers = len(reference)
    bound = metric_sigma_lower_bound(z, c, m, layers)
    assert bound == pytest.approx(z * math.sqrt(layers) / (2 * m))
    assert report["dp-sigma-lower-bound"] == pytest.approx(bound)
    assert report["dp-sigma"] >= bound
    assert report["dp-distance"] <= 2 * c / math.sqrt(layers) + 1e-9
    assert "dp-epsilon" not in report  # a heuristic: no epsilon
    # the paper's raw distance, an explicit choice, is what the attack exploits
    raw = message_wrapper(
        MetricDP, reference, noise_multiplier=z, clipping_norm=c, num_sampled_clients=m,
        rng=np.random.default_rng(0), distance_on="raw",
    )  # fmt: skip
    raw.aggregate_train(1, replies(models))
    assert raw.round_metrics()["dp-sigma"] < bound / 100
    assert metric_sigma_lower_bound(z, c, m, layers, distance_on="raw") == 0.0


def test_wrapper_records_epsilon_so_far_each_round():
    reference = global_model()
    acc = GaussianRoundsAccountant(sampled=2, population=2, delta=1e-5)
    wrapper = message_wrapper(
        ServerSideFixedClippingDP, reference, noise_multiplier=1.1, clipping_norm=1.0,
        num_sampled_clients=2, rng=np.random.default_rng(0), accountant=acc,
    )  # fmt: skip
    eps = []
    for rnd in (1, 2):
        wrapper.aggregate_train(rnd, replies(client_models([1.0, 2.0], seed=rnd)))
        eps.append(wrapper.round_metrics()["dp-epsilon"])
    want = [dp_epsilon(1.1, rounds=k, sampled=2, population=2, delta=1e-5).epsilon
            for k in (1, 2)]  # fmt: skip
    assert eps == pytest.approx(want)


# --- scenario wiring ----------------------------------------------------------------------------


def test_config_keys_and_consistency():
    cfg = resolve_run_config({"privacy": "metric-dp", "num-clients": 5, "clients-per-round": 3})
    assert cfg["noise-multiplier"] == 0.01 and cfg["clipping-norm"] == 5.0
    assert cfg["distance-on"] == "clipped" and cfg["dp-delta"] == 1e-5
    assert cfg["client-sampling"] == "fixed" and cfg["dp-weighting"] == "uniform"
    assert cfg["unaccounted-metrics"] is False
    wrapper = build_dp_wrapper(FedAvg(), server_run(cfg), np.random.default_rng(0))
    assert isinstance(wrapper, MetricDP)
    assert wrapper.mechanism.num_sampled_clients == 3
    assert wrapper.accountant is None  # metric DP: a heuristic, no epsilon
    cfg = resolve_run_config({"privacy": "global-dp", "num-sampled-clients": 2})
    wrapper = build_dp_wrapper(FedAvg(), server_run(cfg), np.random.default_rng(0))
    assert type(wrapper) is ServerSideFixedClippingDP
    assert wrapper.mechanism.num_sampled_clients == 2
    assert wrapper.accountant.sampled == 4 and wrapper.accountant.population == 4
    resolve_run_config({"privacy": "metric-dp", "strategy": "fedmedian"})
    with pytest.raises(ConfigError, match="num-sampled-clients = 9"):
        resolve_run_config({"privacy": "global-dp", "num-sampled-clients": 9, "num-clients": 4})
    for key, value in [("noise-multiplier", -0.1), ("clipping-norm", 0), ("distance-on", "x"),
                       ("min-distance", 0.0), ("dp-delta", 1.0)]:  # fmt: skip
        with pytest.raises(ConfigError, match=key):
            resolve_run_config({key: value})


def test_privacy_summary_blocks():
    cfg = resolve_run_config({"privacy": "global-dp", "noise-multiplier": 1.0, "num-clients": 4})
    rounds = [{"round": 0}] + [
        {"round": k, "dp-sigma": 0.25, "dp-noised": True, "dp-sum-noise-multiplier": 1.0,
         "dp-num-clipped": 1, "dp-num-reports": 4}
        for k in (1, 2, 3)
    ]  # fmt: skip
    block = privacy_summary(server_run(cfg), rounds)["privacy"]
    want = dp_epsilon(1.0, rounds=3, sampled=4, population=4, delta=1e-5)
    assert block["epsilon"]["epsilon"] == pytest.approx(want.epsilon)
    assert block["epsilon"]["epsilon_rdp"] == pytest.approx(want.epsilon_rdp)
    for key in ("accountant", "adjacency", "sampling"):
        assert block["epsilon"][key] == getattr(want, key)
    assert block["sigma_per_round"] == [0.25] * 3 and block["mode"] == "global-dp"
    assert block["unaccounted"] == []
    cfg = resolve_run_config({"privacy": "metric-dp", "unaccounted-metrics": True})
    rounds = [{"round": 1, "dp-sigma": 0.1, "dp-distance": 0.5, "dp-noised": True,
               "dp-sigma-lower-bound": 0.05}]  # fmt: skip
    block = privacy_summary(server_run(cfg), rounds)["privacy"]
    assert "HEURISTIC" in block["heuristic"] and "epsilon" not in block
    assert block["distance_per_round"] == [0.5]
    assert block["sigma_lower_bound_per_round"] == [0.05]
    assert any("train-loss" in u for u in block["unaccounted"])
    assert privacy_summary(server_run(resolve_run_config({"privacy": "none"})), rounds) == {}
    with pytest.raises(ConfigError, match="client-sampling"):
        resolve_run_config({"privacy": "metric-dp", "client-sampling": "poisson"})
    with pytest.raises(ConfigError, match="client-sampling"):
        resolve_run_config({"privacy": "global-dp", "client-sampling": "poisson",
                            "strategy": "fedmedian"})  # fmt: skip


def test_poisson_sampling_fixed_denominator_and_empty_rounds_are_noised():
    """client-sampling = poisson: Σ clip(Δ)/m with m fixed, noise even when nobody is drawn."""
    reference = global_model()
    models = client_models([0.1, 0.2])
    kw = dict(noise_multiplier=0.0, clipping_norm=10.0, num_sampled_clients=4, poisson=True)
    exact = message_wrapper(
        ServerSideFixedClippingDP, reference, rng=np.random.default_rng(0), **kw
    )
    arrays, _ = exact.aggregate_train(1, replies(models))
    for i, got in enumerate(arrays.to_numpy_ndarrays()):
        want = reference[i] + sum(m[i] - reference[i] for m in models) / 4
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert "dp-underfilled" not in exact.round_metrics()
    acc = GaussianRoundsAccountant(sampled=4, population=40, delta=1e-5, sampling="poisson")
    noisy = message_wrapper(
        ServerSideFixedClippingDP, reference, rng=np.random.default_rng(1),
        **{**kw, "noise_multiplier": 1.0}, accountant=acc,
    )  # fmt: skip
    arrays, _ = noisy.aggregate_train(1, [])  # nobody sampled
    report = noisy.round_metrics()
    assert report["dp-empty-sample"] and report["dp-noised"]
    resid = np.concatenate([(a - r).ravel() for a, r in zip(arrays.to_numpy_ndarrays(), reference)])
    assert report["dp-sigma"] == pytest.approx(1.0 * 10.0 / 4) and np.all(resid != 0)
    assert report["dp-round-noise-multiplier"] == 1.0
    want = dp_epsilon(1.0, rounds=1, sampled=4, population=40, delta=1e-5, sampling="poisson")
    assert report["dp-epsilon"] == pytest.approx(want.epsilon)
    assert "add/remove" in report["dp-adjacency"] and "Poisson" in report["dp-sampling"]
    with pytest.raises(ValueError, match="poisson"):
        ServerSideFixedClippingDP(FedAvg(), **kw, weighting="examples")


def test_raw_distance_with_a_cap_has_a_floor_too():
    """distance_on = raw (the MP authors' code) has no floor unless d is capped."""
    reference = global_model()
    models = client_models([0.05, 0.08, 0.1, 0.12])
    models[0] = [w + 1000.0 for w in models[0]]
    mech = MetricScaledGaussian(
        noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=4, distance_on="raw",
        max_distance=0.5,
    )  # fmt: skip
    rnd = mech.process(models, reference)
    assert rnd.info["distance_measured"] > 1000 and rnd.info["distance"] == 0.5
    assert rnd.stdv == pytest.approx(1.0 * 1.0 / (4 * 0.5))
    assert rnd.stdv >= rnd.info["sigma_lower_bound"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="max_distance"):
        MetricScaledGaussian(**BASE, max_distance=1e-9)


def test_named_record_keeps_names_order_dtype_and_shape_and_refuses_a_length_mismatch():
    """fedpriv.strategies.array_records.named_record: the one builder of named ArrayRecords."""
    from fedpriv.strategies.array_records import named_record

    fortran = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    arrays = [fortran, np.float64(2.5), [1, 2]]
    record = named_record(["b/0", "a/1", "c"], arrays)
    assert list(record.keys()) == ["b/0", "a/1", "c"]  # the given order, not sorted
    got = record.to_numpy_ndarrays()
    assert [(a.dtype, a.shape) for a in got] == [
        (np.float32, (2, 3)), (np.float64, ()), (np.asarray([1, 2]).dtype, (2,))
    ]  # fmt: skip
    np.testing.assert_array_equal(got[0], fortran)
    assert got[0].flags.c_contiguous and got[1] == 2.5
    with pytest.raises(ValueError):
        named_record(["only"], arrays)
