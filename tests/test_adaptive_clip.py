"""Adaptive clipping (``privacy = adaptive-clip``; Andrew et al. 2021), without a simulation.

* the noise calibration z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) and its refusal, in one line;
* with the noise off, the clipping-norm trajectory equals Flower's own
  ``DifferentialPrivacyServerSideAdaptiveClipping`` driven with identical replies (under
  Flower's count convention; Andrew et al.'s steps the other way, by exactly the sign);
* the ε the wrapper reports equals dp_accounting's PLD of the composed Gaussian mechanisms.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.strategies.adaptive_dp import (
    LegacyServerSideAdaptiveClippingDP,
    ServerSideAdaptiveClippingDP,
)
from flwr.common import ArrayRecord, parameters_to_ndarrays
from flwr.server.strategy import FedAvg as LegacyFedAvg
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping, FedAvg

from fedpriv.privacy.accounting.rounds import GaussianRoundsAccountant
from fedpriv.privacy.adaptive import AdaptiveClippingGaussian, update_noise_multiplier
from tests.test_dp_wrappers import client_models, fit_results, global_model, replies

NORMS = [0.05, 0.2, 0.5, 1.0, 3.0]  # update norms of five clients (median 0.5)


def test_update_noise_multiplier_and_its_condition():
    z, sigma_b = 1.0, 2.0
    z_delta = update_noise_multiplier(z, sigma_b)
    assert z_delta == pytest.approx((1.0 - 1 / 16) ** -0.5, rel=1e-12)
    # the two releases compose back into z (Gaussians: z⁻² add)
    assert (z_delta**-2 + (2 * sigma_b) ** -2) ** -0.5 == pytest.approx(z, rel=1e-12)
    assert update_noise_multiplier(0.0, 0.0) == 0.0
    with pytest.raises(ValueError, match=r"noise-multiplier = 1 is not allowed.*< 2\*") as err:
        update_noise_multiplier(1.0, 0.5)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="noise-multiplier = 0.5 is not allowed; expected < 2"):
        resolve_run_config({"privacy": "adaptive-clip", "noise-multiplier": 0.5,
                            "clipped-count-stddev": 0.2, "num-clients": 4,
                            "clients-per-round": 4})  # fmt: skip
    # auto σ_b: m/20 = 0.2 would refuse z = 0.5, so it is z (the count takes a quarter)
    auto = resolve_run_config({"privacy": "adaptive-clip", "noise-multiplier": 0.5,
                               "num-clients": 4, "clients-per-round": 4})  # fmt: skip
    assert auto["noise-multiplier"] == 0.5


def drive(strategy, rounds: int, reference) -> list[float]:
    """Feed ``rounds`` rounds of the same five replies; the clip norm before each round."""
    out = []
    for r in range(1, rounds + 1):
        out.append(float(strategy.clipping_norm))
        strategy.current_arrays = ArrayRecord(reference)
        strategy.aggregate_train(r, replies(client_models(NORMS, seed=r, base=reference)))
    out.append(float(strategy.clipping_norm))
    return out


def test_noise_off_clip_trajectory_equals_flowers_wrapper():
    reference = global_model()
    kw = dict(clipping_norm=0.1, num_sampled_clients=5, clipped_count_stddev=0.0)
    flower = DifferentialPrivacyServerSideAdaptiveClipping(
        FedAvg(), 0.0, 5, initial_clipping_norm=0.1, target_clipped_quantile=0.3,
        clip_norm_lr=0.2, clipped_count_stddev=0.0,
    )  # fmt: skip
    np.random.seed(0)
    theirs = drive(flower, 12, reference)
    same = ServerSideAdaptiveClippingDP(
        FedAvg(), noise_multiplier=0.0, target_quantile=0.3, count="clipped", **kw
    )
    assert drive(same, 12, reference) == pytest.approx(theirs, rel=1e-12)
    # Andrew et al.'s count (unclipped, the default) from the same C steps by minus Flower's
    # step at the complementary quantile: log(C'/C) = -eta*(b - gamma) = +eta*(c - (1 - gamma))
    flower.clipping_norm = 0.1
    theirs = drive(flower, 1, reference)
    ours = ServerSideAdaptiveClippingDP(FedAvg(), noise_multiplier=0.0, target_quantile=0.7, **kw)
    mine = drive(ours, 1, reference)
    assert math.log(mine[1] / 0.1) == pytest.approx(-math.log(theirs[1] / 0.1), rel=1e-12)


def test_andrew_rule_tracks_the_quantile_where_flowers_count_runs_away():
    kw = dict(clipping_norm=0.1, num_sampled_clients=5, clipped_count_stddev=0.0)
    reference = global_model()
    ours = ServerSideAdaptiveClippingDP(FedAvg(), noise_multiplier=0.0, **kw)
    flower_like = ServerSideAdaptiveClippingDP(
        FedAvg(), noise_multiplier=0.0, count="clipped", **kw
    )
    c_ours, c_flower = drive(ours, 60, reference), drive(flower_like, 60, reference)
    assert 0.2 <= min(c_ours[-10:]) and max(c_ours[-10:]) <= 1.0  # around the median 0.5
    assert c_flower[-1] < 0.01  # every update clipped, and C keeps shrinking


def test_both_apis_clip_noise_and_adapt_alike():
    reference = global_model()
    models = client_models(NORMS)
    kw = dict(noise_multiplier=0.5, clipping_norm=0.4, num_sampled_clients=5,
              clipped_count_stddev=1.0)  # fmt: skip
    message = ServerSideAdaptiveClippingDP(FedAvg(), rng=np.random.default_rng(3), **kw)
    message.current_arrays = ArrayRecord(reference)
    arrays, _ = message.aggregate_train(1, replies(models))
    legacy = LegacyServerSideAdaptiveClippingDP(LegacyFedAvg(), rng=np.random.default_rng(3), **kw)
    legacy.current_round_params = reference
    params, _ = legacy.aggregate_fit(1, fit_results(models), [])
    for a, b in zip(arrays.to_numpy_ndarrays(), parameters_to_ndarrays(params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    m, lg = message.round_metrics(), legacy.round_metrics()
    assert m["dp-sigma"] == pytest.approx(update_noise_multiplier(0.5, 1.0) * 0.4 / 5)
    assert m["dp-num-clipped"] == lg["dp-num-clipped"] == 3  # norms 0.5, 1, 3 > 0.4
    assert m["dp-next-clipping-norm"] == pytest.approx(lg["dp-next-clipping-norm"])
    assert m["dp-clipping-norm"] == 0.4 and message.clipping_norm == m["dp-next-clipping-norm"]


def test_bad_arguments_are_refused_in_one_line():
    with pytest.raises(ValueError, match="target_quantile"):
        AdaptiveClippingGaussian(noise_multiplier=0, clipping_norm=1, num_sampled_clients=2,
                                 target_quantile=1.5)  # fmt: skip
    with pytest.raises(ValueError, match="count"):
        AdaptiveClippingGaussian(noise_multiplier=0, clipping_norm=1, num_sampled_clients=2,
                                 count="median")  # fmt: skip


def pld_epsilon(event, delta: float) -> float:
    accountant = dp_accounting.pld.PLDAccountant()
    return float(accountant.compose(event).get_epsilon(delta))


def test_poisson_epsilon_equals_dp_accountings_pld_of_the_composed_gaussians():
    """Add/remove, Poisson q = m/N: the update (sensitivity C, std z_Δ·C) and the centred
    count (sensitivity 1/2, std σ_b) of ONE sample are a Gaussian in R^2 whose privacy loss
    depends on the norm of its standardised sensitivity vector (z_Δ⁻², (2σ_b)⁻²): its PLD
    with dp_accounting, composed over the rounds, against the wrapper's reported ε."""
    z, sigma_b, m, n, rounds, delta = 1.0, 1.5, 10, 40, 6, 1e-5
    wrapper = ServerSideAdaptiveClippingDP(
        FedAvg(), noise_multiplier=z, clipping_norm=0.5, num_sampled_clients=m,
        clipped_count_stddev=sigma_b, rng=np.random.default_rng(1), poisson=True,
        accountant=GaussianRoundsAccountant(sampled=m, population=n, delta=delta,
                                            sampling="poisson"),
    )  # fmt: skip
    reference = global_model()
    for r in range(1, rounds + 1):
        wrapper.current_arrays = ArrayRecord(reference)
        wrapper.aggregate_train(r, replies(client_models(np.linspace(0.1, 2, 7), seed=r)))
    z_delta = update_noise_multiplier(z, sigma_b)
    mu = math.hypot(1 / z_delta, 0.5 / sigma_b)
    one = pld_lib.from_gaussian_mechanism(
        standard_deviation=1.0, sensitivity=mu, sampling_prob=m / n,
        value_discretization_interval=1e-4,
    )  # fmt: skip
    expected = one.self_compose(rounds).get_epsilon_for_delta(delta)
    assert float(wrapper.round_metrics()["dp-epsilon"]) == pytest.approx(expected, rel=0.01)


def test_full_participation_epsilon_equals_pld_of_the_composed_events():
    """Every client each round (replace-one, sensitivity 2C and 1): dp_accounting's PLD of
    ComposedDpEvent([update, count]) self-composed equals what the wrapper reports."""
    z, sigma_b, m, rounds, delta = 2.0, 2.0, 5, 20, 1e-5
    wrapper = ServerSideAdaptiveClippingDP(
        FedAvg(), noise_multiplier=z, clipping_norm=0.5, num_sampled_clients=m,
        clipped_count_stddev=sigma_b, rng=np.random.default_rng(2),
        accountant=GaussianRoundsAccountant(sampled=m, population=m, delta=delta),
    )  # fmt: skip
    reference = global_model()
    for r in range(1, rounds + 1):
        wrapper.current_arrays = ArrayRecord(reference)
        wrapper.aggregate_train(r, replies(client_models(NORMS, seed=r)))
    z_delta = update_noise_multiplier(z, sigma_b)
    round_event = dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(z_delta / 2), dp_accounting.GaussianDpEvent(sigma_b)]
    )
    expected = pld_epsilon(dp_accounting.SelfComposedDpEvent(round_event, rounds), delta)
    assert float(wrapper.round_metrics()["dp-epsilon"]) == pytest.approx(expected, rel=0.01)
    assert expected == pytest.approx(28.373, rel=0.01)  # SPEC §1: μ = 2√T/z


def run_in_process(run_config: dict, tmp_path, num_clients: int):
    """``train_run`` of ``run_config`` with the app's catalog; every message answered by the
    real ClientApp handlers in process (no Ray: :class:`tests.test_new_mode.InProcessGrid`)."""
    from fedpriv.clients.keras_client import federated_data
    from fedpriv.scenarios.app.engine import train_run
    from fedpriv.scenarios.config.features import CATALOG
    from fedpriv.scenarios.config.specs import server_run
    from fedpriv.scenarios.nodes.federation import PartitionGrid

    from tests.test_new_mode import InProcessGrid

    run_config = {**run_config, "output-dir": str(tmp_path / "run")}
    cfg = CATALOG.resolve_run_config(run_config)
    run = server_run(cfg, CATALOG.kind(cfg))  # the server's spec, built once
    nodes = {100 + p: p for p in range(num_clients)}
    grid = InProcessGrid(run_config, nodes, run_id=926_011)
    data = federated_data(run.spec.data)
    return cfg, train_run(PartitionGrid(grid, nodes), run, data, CATALOG, resumable=False)


def test_adaptive_clip_runs_end_to_end_on_digits(tmp_path):
    """digits, 4 clients, 5 rounds: the clipping norm moves, every round is charged the
    composed z, and summary.json's ε is the plan's (``fedpriv epsilon``) and the accountant's."""
    from fedpriv.scenarios.config.specs import run_spec

    from fedpriv.privacy.accounting.planning import privacy_plan

    run_config = {
        "scenario": "digits", "privacy": "adaptive-clip", "num-clients": 4,
        "clients-per-round": 4, "num-server-rounds": 5, "local-epochs": 1,
        "noise-multiplier": 0.05, "clipping-norm": 1.0, "clipped-count-stddev": 0.5, "seed": 3,
        "reproducible-noise": True,
    }  # fmt: skip
    cfg, outcome = run_in_process(run_config, tmp_path, 4)
    trained = [r for r in outcome.rounds if r.get("round", 0) > 0]
    assert [r["round"] for r in trained] == [1, 2, 3, 4, 5] and all(r["dp-noised"] for r in trained)
    norms = [r["dp-clipping-norm"] for r in trained]
    assert norms[0] == 1.0 and len(set(norms)) == 5  # C moved every round
    assert all(r["dp-round-noise-multiplier"] == pytest.approx(0.05) for r in trained)
    block = outcome.summary["privacy"]
    assert block["mode"] == "adaptive-clip" and block["clipping_norm_per_round"] == norms
    expected = float(
        GaussianRoundsAccountant(sampled=4, population=4, delta=float(cfg["dp-delta"]))
        .extend([0.05] * 5).report().epsilon
    )  # fmt: skip
    assert block["epsilon"]["epsilon"] == pytest.approx(expected, rel=1e-9)
    assert float(trained[-1]["dp-epsilon"]) == pytest.approx(expected, rel=1e-9)
    assert privacy_plan(run_spec(cfg))["epsilon"] == pytest.approx(expected, rel=1e-9)
    assert outcome.summary["final"]["accuracy"] > 0.6  # 0.872 measured (seed 3)
