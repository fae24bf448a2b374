"""Client-side DP-SGD (MP §4, SPEC §4): Poisson batches, their ε, the client's randomness and
participation count, the server wrapper and the config keys.

The gradient step itself (clipping, noise, both backends) is tested in
tests/test_dpsgd_grads.py.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import server_run
from scipy import optimize, special, stats

from fedpriv.privacy import dpsgd

# --- Poisson schedule -----------------------------------------------------------------------


def test_sampling_rate_steps_and_denominator():
    assert dpsgd.sampling_rate(num_examples=287, batch_size=16) == pytest.approx(16 / 287)
    assert dpsgd.steps_per_epoch(num_examples=287, batch_size=16) == 18  # round(17.94)
    assert dpsgd.steps_per_epoch(num_examples=280, batch_size=16) == 18  # round(17.5) half-up
    assert dpsgd.steps_per_epoch(num_examples=279, batch_size=16) == 17
    assert dpsgd.expected_batch_size(num_examples=287, batch_size=16) == 16.0
    # n < B: q clamped to 1, one step per epoch, D = n (the expected batch)
    assert dpsgd.sampling_rate(num_examples=5, batch_size=16) == 1.0
    assert dpsgd.steps_per_epoch(num_examples=5, batch_size=16) == 1
    assert dpsgd.expected_batch_size(num_examples=5, batch_size=16) == 5.0
    assert [dpsgd.padded_width(k) for k in (0, 1, 8, 9, 16, 17, 33)] == [8, 8, 8, 16, 16, 32, 64]


def _schedule(n, b, epochs, seed):
    rng = np.random.default_rng(seed)
    return dpsgd.poisson_schedule(num_examples=n, batch_size=b, epochs=epochs, rng=rng)


def test_poisson_sampler_batch_sizes_inclusion_and_no_truncation():
    n, b, epochs = 287, 16, 200
    sched = _schedule(n, b, epochs, seed=0)
    q = b / n
    steps = len(sched.idx)
    assert steps == 18 * epochs and sched.steps_per_epoch == 18 and sched.denominator == 16
    sizes = sched.mask.sum(axis=1)
    np.testing.assert_array_equal(sizes, sched.sizes)
    # batch size ~ Binomial(n, q): mean qn and variance nq(1-q) (truncation would shrink both)
    var = n * q * (1 - q)
    assert abs(sizes.mean() - q * n) < 5 * math.sqrt(var / steps)
    assert abs(sizes.var() / var - 1) < 5 * math.sqrt(2 / steps)
    # the largest batch drawn is kept whole: width = the power of two above it, > B here
    assert sizes.max() > b and sched.idx.shape[1] == dpsgd.padded_width(int(sizes.max()))
    # per-example inclusion frequency ~ Binomial(steps, q)/steps for every example
    counts = np.zeros(n)
    for row, m in zip(sched.idx, sched.mask):
        members = row[m == 1]
        assert len(np.unique(members)) == len(members)  # no example twice in a batch
        counts[members] += 1
    sd = math.sqrt(steps * q * (1 - q))
    assert np.all(np.abs(counts - steps * q) < 5 * sd)
    # the counts are binomial (not e.g. once per epoch): chi-square dispersion test
    dispersion = ((counts - steps * q) ** 2).sum() / (steps * q * (1 - q))
    assert stats.chi2.sf(dispersion, n) > 1e-4 and stats.chi2.cdf(dispersion, n) > 1e-4


def test_poisson_sampler_empty_steps_and_q_one():
    sched = _schedule(400, 1, 5, seed=0)  # q = 1/400: P(empty) = (1 - q)^n ≈ e^-1
    empty = (sched.mask.sum(axis=1) == 0).mean()
    assert abs(empty - (1 - 1 / 400) ** 400) < 5 * math.sqrt(0.25 / len(sched.idx))
    full = _schedule(5, 16, 3, seed=0)  # n < B: every step holds every example
    assert full.idx.shape == (3, 8) and full.sampling_rate == 1.0 and full.denominator == 5
    np.testing.assert_array_equal(full.mask.sum(axis=1), [5, 5, 5])
    np.testing.assert_array_equal(np.sort(full.idx[0, :5]), np.arange(5))


def test_schedule_and_noise_seed_are_secret_by_default_and_reproducible_on_opt_in():
    def draw(reproducible):
        rng, seed = dpsgd.call_randomness(12345, reproducible=reproducible)
        sched = dpsgd.poisson_schedule(num_examples=100, batch_size=10, epochs=1, rng=rng)
        return sched, seed

    (a, sa), (b, sb) = draw(False), draw(False)
    assert not np.array_equal(sa, sb)
    assert a.idx.shape != b.idx.shape or not np.array_equal(a.idx, b.idx)
    (c, sc), (d, sd) = draw(True), draw(True)
    assert np.array_equal(sc, sd) and np.array_equal(c.idx, d.idx) and sc.dtype == np.int32
    # the opt-in stream is not the call seed's plain generator (no shared stream)
    plain = np.random.default_rng(12345)
    assert not np.array_equal(c.idx, draw_plain(plain))


def draw_plain(rng):
    return dpsgd.poisson_schedule(num_examples=100, batch_size=10, epochs=1, rng=rng).idx


def test_microbatches_must_be_zero():
    dpsgd.check_microbatches(0)
    with pytest.raises(ValueError, match="microbatches = 4"):
        dpsgd.check_microbatches(4)


# --- ε: independent computations -----------------------------------------------------------


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact ε of μ-GDP (Balle & Wang 2018 Thm 8), written out here."""

    def gap(eps):
        return special.ndtr(-eps / mu + mu / 2) - np.exp(eps) * special.ndtr(-eps / mu - mu / 2)

    return optimize.brentq(lambda e: gap(e) - delta, 0.0, 500.0, xtol=1e-12)


def _one_step_sampled_gaussian_epsilon(q: float, z: float, delta: float) -> float:
    """Exact ε of ONE Poisson-sampled Gaussian step by numerical integration.

    The realisable pair: D' = D + x*, where x*'s clipped gradient is C·e₁ and every other
    gradient is orthogonal to e₁. Along e₁ (units of C) the released sum is N(0, z²) without
    x* and (1−q)N(0, z²) + qN(1, z²) with it; δ(ε) = max over both orders of
    ∫ (P − e^ε Q)₊.
    """
    x = np.linspace(-40 * z, 40 * z + 1, 400001)
    p0 = stats.norm.pdf(x, 0, z)
    p1 = (1 - q) * p0 + q * stats.norm.pdf(x, 1, z)

    def hockey(eps):
        return max(
            np.trapezoid(np.maximum(p1 - np.exp(eps) * p0, 0), x),
            np.trapezoid(np.maximum(p0 - np.exp(eps) * p1, 0), x),
        )

    return optimize.brentq(lambda e: hockey(e) - delta, 0.0, 50.0, xtol=1e-10)


def _optimistic_pld_epsilon(q: float, z: float, steps: int, delta: float) -> float:
    """A lower estimate of the exact ε of the same pair composed ``steps`` times
    (dp_accounting PLD, optimistic discretisation: rounds the privacy loss down)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    one = pld.from_gaussian_mechanism(
        z, sampling_prob=q, pessimistic_estimate=False, value_discretization_interval=1e-3
    )
    return float(one.self_compose(steps).get_epsilon_for_delta(delta))


def test_q_one_equals_the_closed_form_gaussian():
    """n <= B: every step is the unsampled Gaussian, T steps = μ-GDP with μ = 2√T/z
    (replace-one example, sensitivity 2C; was √T/z under add/remove)."""
    eps = dpsgd.client_epsilon(
        num_examples=10, batch_size=16, local_epochs=3, participations=4,
        noise_multiplier=2.0, delta=1e-5,
    )  # fmt: skip
    assert eps.steps == 12 and eps.sampling_rate == 1.0
    assert eps.epsilon == pytest.approx(_gaussian_epsilon(2 * math.sqrt(12) / 2.0, 1e-5), rel=1e-6)
    assert eps.epsilon_rdp >= eps.epsilon  # RDP is an upper bound, looser


def test_one_step_pld_matches_the_integrated_sampled_gaussian():
    q, z, delta = 16 / 287, 1.1, 1e-5
    exact = _one_step_sampled_gaussian_epsilon(q, z, delta)
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    from fedpriv.privacy.accounting import NeighborRel, PrivacyAccountant

    acc = PrivacyAccountant(delta=delta, relation=NeighborRel.ADD_OR_REMOVE_ONE).compose(event)
    reported = acc.report()
    assert exact <= reported.epsilon <= exact * 1.02 + 1e-3  # an upper bound, and tight


DIGITS = dict(batch_size=16, local_epochs=2, noise_multiplier=1.1, delta=1e-5)


@pytest.mark.parametrize("n", [287, 288, 250, 340])
def test_digits_defaults_epsilon_is_at_least_the_realisable_lower_bound(n):
    """z 1.1, B 16, 2 local epochs x 8 rounds: the reported ε bounds the pair above.

    Neighbouring pair (replace-one example under Poisson sampling, n fixed as the reply
    publishes it): x*, whose clipped gradient is C·e₁ while the others are orthogonal to e₁,
    replaced by an example of zero gradient; each step then releases exactly the sampled
    Gaussian pair above, so the run's ε is at least that pair's composed T = round(n/B)·2·8
    times (its optimistic PLD) and at least one step's exactly integrated ε. The
    accounted pair is the replace-one dominating pair (sensitivity 2C, multiplier z/2), and
    the reported ε is within 5% of its optimistic PLD.
    """
    eps = dpsgd.client_epsilon(num_examples=n, participations=8, **DIGITS)
    q, steps = min(1.0, 16 / n), round(n / 16) * 16
    assert eps.steps == steps and eps.sampling_rate == pytest.approx(q)
    assert _optimistic_pld_epsilon(q, 1.1, steps, 1e-5) <= eps.epsilon  # realisable pair
    accounted = _optimistic_pld_epsilon(q, 1.1 / 2, steps, 1e-5)
    assert accounted <= eps.epsilon <= accounted * 1.05  # a bound, and not a loose one
    assert _one_step_sampled_gaussian_epsilon(q, 1.1, 1e-5) <= eps.epsilon
    assert eps.epsilon_pld <= eps.epsilon_rdp and eps.epsilon == eps.epsilon_pld
    # (the old "differs from the fixed-batch figure 22.85" check is pinned more tightly by the
    # accounted-pair band above: the replace-one figure happens to lie near 22.85 for n = 340)


def test_epsilon_monotone_and_edge_cases():
    base = dict(num_examples=287, batch_size=16, local_epochs=2, delta=1e-5)
    e = [dpsgd.client_epsilon(**base, participations=r, noise_multiplier=1.1).epsilon
         for r in (1, 2, 4)]  # fmt: skip
    assert e[0] < e[1] < e[2]
    assert dpsgd.client_epsilon(**base, participations=2, noise_multiplier=2.0).epsilon < e[1]
    assert dpsgd.client_epsilon(**base, participations=0, noise_multiplier=1.1).epsilon == 0.0
    assert dpsgd.client_epsilon(**base, participations=1, noise_multiplier=0.0).epsilon == math.inf
    with pytest.raises(ValueError, match="participations"):
        dpsgd.client_epsilon(**base, participations=-1, noise_multiplier=1.1)


# --- the client's own participation count ---------------------------------------------------
# (counted in the client's own ledger, tests/test_release_counting.py)


# --- server wrapper and config --------------------------------------------------------------


class _Inner:
    """A stand-in strategy: one train message per node, records what it aggregated."""

    def __init__(self, nodes):
        self.nodes = nodes
        self.aggregated = None

    def configure_train(self, server_round, arrays, config, grid):
        from flwr.app import Message, RecordDict

        config["server-round"] = server_round
        record = RecordDict({"arrays": arrays, "config": config})
        return [Message(content=record, dst_node_id=n, message_type="train") for n in self.nodes]

    def aggregate_train(self, server_round, replies):
        self.aggregated = list(replies)
        return None, None


def test_wrapper_sets_task_mirrors_participations_and_keeps_per_client_epsilon():
    from fedpriv.scenarios.dp_sgd.feature import DpSgdClients
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

    from tests.flower_reference import act_as_serverapp_task

    act_as_serverapp_task()
    inner = _Inner([11, 22])
    wrapper = DpSgdClients(inner)
    arrays = ArrayRecord([np.zeros(3, dtype=np.float32)])
    base = ConfigRecord({"seed": 0})
    for rnd in (1, 2):
        inner.nodes = [11, 22] if rnd == 1 else [22]
        msgs = list(wrapper.configure_train(rnd, arrays, base, grid=None))
        configs = {m.metadata.dst_node_id: m.content["config"] for m in msgs}
        assert all(c["client-task"] == "dp-sgd" for c in configs.values())
        assert all("client-state-dir" not in c for c in configs.values())  # the node's own
        assert all("dp-sgd-participations" not in c for c in configs.values())  # not sent
    assert "client-task" not in base  # the caller's config is not mutated
    assert wrapper.participations == {11: 1, 22: 2}
    replies = []
    for node, eps in ((11, 3.5), (22, 7.25)):
        msg = Message(content=RecordDict({"config": ConfigRecord({})}), dst_node_id=node,
                      message_type="train")  # fmt: skip
        msg.metadata.__dict__["_src_node_id"] = 1
        reply = Message(
            content=RecordDict({"metrics": MetricRecord({"dp-sgd-epsilon": eps,
                                                         "num-examples": 10})}),
            reply_to=msg,
        )  # fmt: skip
        reply.metadata.__dict__["_src_node_id"] = node
        replies.append(reply)
    wrapper.aggregate_train(2, replies)
    assert len(inner.aggregated) == 2
    report = wrapper.round_metrics()
    assert report["dp-sgd-epsilon-nodes"] == {11: 3.5, 22: 7.25}
    assert report["dp-sgd-epsilon-max"] == 7.25
    assert "upper bound" in report["dp-sgd-epsilon-bounds"]
    assert report["dp-sgd-participations-nodes"] == {11: 1, 22: 2}


def test_summary_block_and_keys():
    from fedpriv.scenarios.config.registry import resolve_run_config
    from fedpriv.scenarios.dp_sgd.feature import dpsgd_summary

    cfg = resolve_run_config({"scenario": "digits", "privacy": "dp-sgd"})
    assert (cfg["clipping-norm"], cfg["noise-multiplier"]) == (1.0, 1.1)
    assert (cfg["microbatches"], cfg["dp-delta"]) == (0, 1e-5)
    rounds = [
        {"round": 1, "dp-sgd-epsilon": {"0": 1.0, "1": 1.5}},
        {"round": 2, "dp-sgd-epsilon": {"0": 2.0}, "dp-sgd-participations": {"0": 2, "1": 1}},
    ]
    privacy = dpsgd_summary(server_run(cfg), rounds)["privacy"]
    block = privacy["dp_sgd"]
    assert block["epsilon_per_client"] == {"0": 2.0, "1": 1.5, "2": 0.0, "3": 0.0}
    assert block["epsilon_max"] == 2.0 == privacy["epsilon"] and block["delta"] == 1e-5
    assert "poisson_assumed_label" not in block and "NOT a bound" not in str(privacy)
    assert "PLD" in block["accountant"] and "Poisson" in privacy["sampling"]
    assert "example" in privacy["adjacency"]
    assert dpsgd_summary(server_run({**cfg, "privacy": "none"}), rounds) == {}
    for value in (4, 5, 32):
        with pytest.raises(ConfigError, match=f"microbatches = {value}"):
            resolve_run_config({"privacy": "dp-sgd", "batch-size": 16, "microbatches": value})
    for key, value in [("clipping-norm", 0), ("dp-delta", 1.0), ("noise-multiplier", -1)]:
        with pytest.raises(ConfigError, match=key):
            resolve_run_config({"privacy": "dp-sgd", key: value})


def test_the_summary_reports_the_clients_own_z_c_and_delta():
    """Deployed DP-SGD nodes set z, C and δ in their own node config (the run config's are the
    server's guess): the wrapper keeps what each reply reports and the summary (summary.json's
    block, its privacy figures: the console line) shows those, per client and the weakest
    (smallest z, largest C and δ); the run config's only where no client reported its own."""
    from fedpriv.scenarios.config.registry import resolve_run_config
    from fedpriv.scenarios.dp_sgd.feature import dpsgd_summary
    from fedpriv.scenarios.dp_sgd.server import DpSgdClients
    from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict

    class Inner:
        def aggregate_train(self, server_round, replies):
            return None, None

    wrapper = DpSgdClients(Inner())
    replies = []
    for node, z, clip in ((11, 1.1, 1.0), (22, 0.9, 2.0)):
        msg = Message(content=RecordDict({"config": ConfigRecord({})}), dst_node_id=node,
                      message_type="train")  # fmt: skip
        msg.metadata.__dict__["_src_node_id"] = 1
        metrics = {
            "dp-sgd-epsilon": 2.0,
            "dp-sgd-noise-multiplier": z,
            "dp-sgd-clipping-norm": clip,
            "dp-sgd-delta": 1e-6,
            "num-examples": 10,
        }
        reply = Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)
        reply.metadata.__dict__["_src_node_id"] = node
        replies.append(reply)
    wrapper.aggregate_train(1, replies)
    report = wrapper.round_metrics()
    assert report["dp-sgd-noise-multiplier-nodes"] == {11: 1.1, 22: 0.9}
    assert report["dp-sgd-clipping-norm-nodes"] == {11: 1.0, 22: 2.0}
    cfg = resolve_run_config({"scenario": "digits", "privacy": "dp-sgd", "noise-multiplier": 0.3})
    rounds = [{"round": 1, "dp-sgd-epsilon": {"0": 2.0, "1": 2.0},
               "dp-sgd-noise-multiplier": {"0": 1.1, "1": 0.9},
               "dp-sgd-clipping-norm": {"0": 1.0, "1": 2.0},
               "dp-sgd-delta": {"0": 1e-6, "1": 1e-6}}]  # fmt: skip
    summary = dpsgd_summary(server_run(cfg), rounds)
    block = summary["privacy"]["dp_sgd"]
    assert (block["noise_multiplier"], block["l2_norm_clip"], block["delta"]) == (0.9, 2.0, 1e-6)
    assert block["per_client"]["noise_multiplier"] == {"0": 1.1, "1": 0.9}
    assert "clients' own" in block["mechanism_source"]
    figures = summary["privacy_figures"]
    assert figures["noise_multiplier"] == 0.9 and figures["delta"] == 1e-6
    assert figures["sigma_mean"] == pytest.approx((1.1 * 1.0 + 0.9 * 2.0) / 2)
    unreported = dpsgd_summary(server_run(cfg), [{"round": 1, "dp-sgd-epsilon": {"0": 2.0}}])
    block = unreported["privacy"]["dp_sgd"]
    assert (block["noise_multiplier"], block["delta"]) == (0.3, cfg["dp-delta"])
    assert "run config" in block["mechanism_source"] and "per_client" not in block


def test_plan_is_the_clients_epsilon():
    from fedpriv.scenarios.config.specs import run_spec

    from fedpriv.privacy.accounting.planning import privacy_plan

    cfg = {"privacy": "dp-sgd", "num-server-rounds": 8, "local-epochs": 2, "batch-size": 16,
           "noise-multiplier": 1.1, "dp-delta": 1e-5}  # fmt: skip
    plan = privacy_plan(run_spec(cfg), examples_per_client=287)
    want = dpsgd.client_epsilon(num_examples=287, participations=8, **DIGITS)
    assert plan["epsilon"] == pytest.approx(want.epsilon)


# --- one client's training (needs the Keras 3 trainer: fedpriv.clients.compiled.DpStepConfig)
# -------


@pytest.fixture(scope="module")
def digits_client():
    from fedpriv.clients.dpsgd_client import DpSgdSettings, dp_trainer_for
    from fedpriv.clients.keras_client import TrainSettings, federated_data, initial_weights
    from fedpriv.scenarios.config.registry import resolve_run_config
    from fedpriv.scenarios.config.specs import run_spec

    cfg = resolve_run_config({"privacy": "dp-sgd", "num-clients": 4, "local-epochs": 1})
    spec = run_spec(cfg)
    data = federated_data(spec.data)
    trainer = dp_trainer_for(spec.train, spec.params, tuple(data.input_shape), data.num_classes)
    settings = TrainSettings.from_spec(spec.train, seed=5)
    dp = DpSgdSettings.from_params(spec.params, reproducible=spec.reproducible_noise)
    client = data.clients[0]
    return dict(cfg=cfg, trainer=trainer, settings=settings, x=client.x_train,
                y=client.y_train, w0=initial_weights(spec.train, data), dp=dp)  # fmt: skip


def test_client_training_reports_its_own_epsilon_and_draws_secret_noise(digits_client):
    from dataclasses import replace

    from fedpriv.clients.dpsgd_client import train_dpsgd

    d = digits_client
    n, b = len(d["x"]), d["settings"].batch_size

    def call(dp, participations=1):
        return train_dpsgd(d["trainer"], d["w0"], d["x"], d["y"], d["settings"], dp,
                           participations=participations)  # fmt: skip

    (w1, m1), (w2, _) = call(d["dp"], 2), call(d["dp"])
    assert any(not np.array_equal(a, c) for a, c in zip(w1, w2))  # secret schedule and noise
    want = dpsgd.client_epsilon(num_examples=n, batch_size=b, local_epochs=1, participations=2,
                                noise_multiplier=1.1, delta=1e-5)  # fmt: skip
    assert m1["dp-sgd-epsilon"] == pytest.approx(want.epsilon)
    assert m1["dp-sgd-steps"] == dpsgd.steps_per_epoch(num_examples=n, batch_size=b)
    assert np.isfinite(m1["train-loss"])
    opt_in = replace(d["dp"], reproducible=True)
    (w3, _), (w4, _) = call(opt_in), call(opt_in)
    assert all(np.array_equal(a, c) for a, c in zip(w3, w4))  # the opt-in: bit-identical


def test_a_cohorts_threads_share_one_dp_trainer():
    """A worker's virtual clients ask for the DP trainer from their cohort's threads at once:
    they get one trainer (one trace, one compiled cohort call), not one each."""
    import threading

    from fedpriv.clients import dpsgd_client
    from fedpriv.scenarios.config.registry import resolve_run_config
    from fedpriv.scenarios.config.specs import run_spec

    spec = run_spec(resolve_run_config({"privacy": "dp-sgd", "learning-rate": 0.0123}))
    dpsgd_client._cached_trainer.cache_clear()
    start, got = threading.Barrier(4), []

    def ask() -> None:
        start.wait()
        got.append(dpsgd_client.dp_trainer_for(spec.train, spec.params, (8, 8, 1), 10))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 4 and len({id(t) for t in got}) == 1
