"""Empirical privacy auditing estimators, no training: seconds.

On a Gaussian mechanism with known ε (canary updates plus N(0, σ²) noise), the
95 % one-run lower bound (Steinke et al.) is below the true ε in at least 19 of 20 seeds (a 95 %
bound may miss about once in 20; the test allows exactly that) and within a factor 4 of it
(median over the seeds; the one-run bound with δ > 0 is known to be loose — Steinke et al.
report the same gap); with no noise the bound is at least 1.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from fedpriv.scenarios.config.specs import server_run
from scipy import integrate, stats

from fedpriv.attacks.membership import loss_threshold_attack, tpr_at_fpr
from fedpriv.audit.audit import audit_models, canary_upper_bound
from fedpriv.audit.canaries import CanarySet
from fedpriv.audit.gaussian_pair import (
    epsilon_for_delta,
    gaussian_mechanism_delta,
    gaussian_mechanism_epsilon,
    pair_delta,
)
from fedpriv.audit.one_run import (
    epsilon_lower_bound,
    guesses_from_scores,
    one_run_audit,
    p_value,
)
from fedpriv.audit.one_shot import one_shot_estimate

DELTA = 1e-5


def gaussian_mechanism_models(seed: int, mu: float | None, *, count=500, dim=5000):
    """θ_0 = 0, θ_1 = Σ_included c_j + N(0, σ² I), σ = 1/μ (no noise for μ None)."""
    canaries = CanarySet(count, 1.0, 0.5, seed, ((dim,),))
    signal = canaries.directions().astype(np.float64)[canaries.included].sum(axis=0)
    if mu is not None:
        signal = signal + np.random.default_rng([seed, 99]).normal(0.0, 1.0 / mu, dim)
    return canaries, [[np.zeros(dim)], [signal]]


def test_lower_bound_is_sound_and_has_power_on_the_gaussian_mechanism():
    mu = 1.0
    true_eps = gaussian_mechanism_epsilon(mu, DELTA)  # 4.377
    bounds = []
    for seed in range(20):
        canaries, models = gaussian_mechanism_models(seed, mu)
        bounds.append(audit_models(canaries, models, delta=DELTA)["epsilon_lower_bound"])
    bounds = np.array(bounds)
    assert np.sum(bounds <= true_eps) >= 19, bounds
    assert np.median(bounds) >= true_eps / 4, (np.median(bounds), true_eps)


def test_no_noise_gives_a_lower_bound_of_at_least_one():
    for seed in range(3):
        canaries, models = gaussian_mechanism_models(seed, None)
        out = audit_models(canaries, models, delta=DELTA)
        assert out["epsilon_lower_bound"] >= 1.0
        assert out["threat_models"]["every-round"]["epsilon_lower_bound"] >= 1.0


def test_one_shot_estimate_tracks_the_gaussian_mechanism():
    # few inserted canaries relative to the dimension: little cross-talk between canaries
    mu = 1.5
    true_eps = gaussian_mechanism_epsilon(mu, DELTA)
    estimates = []
    for seed in range(3):
        canaries, models = gaussian_mechanism_models(seed, mu, count=200, dim=20000)
        estimates.append(audit_models(canaries, models, delta=DELTA)["epsilon_estimate"])
    assert true_eps / 1.5 <= np.median(estimates) <= true_eps * 1.5, (estimates, true_eps)


def test_randomized_response_bound_is_sound():
    # ε-DP randomized response per canary (pure DP, δ = 0): the score reveals S_i w.p. q
    eps = 2.0
    q = math.exp(eps) / (1 + math.exp(eps))
    misses = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        included = rng.random(1000) < 0.5
        truthful = rng.random(1000) < q
        scores = np.where(included == truthful, 1.0, -1.0) + 1e-3 * rng.random(1000)
        res = one_run_audit(scores, included, delta=0.0)
        misses += res.epsilon_lower_bound > eps
        assert res.epsilon_lower_bound >= 0.9 if seed == 0 else True
    assert misses <= 1


def test_p_value_with_delta_zero_is_the_binomial_tail_and_grows_with_epsilon():
    m, r, v = 100, 40, 35
    for eps in (0.0, 0.5, 1.0, 3.0):
        q = math.exp(eps) / (1 + math.exp(eps))
        expected = sum(math.comb(r, k) * q**k * (1 - q) ** (r - k) for k in range(v, r + 1))
        assert p_value(m, r, v, eps, 0.0) == pytest.approx(expected, rel=1e-9)
    values = [p_value(m, r, v, e, DELTA) for e in np.linspace(0, 5, 30)]
    assert np.all(np.diff(values) >= -1e-15)
    assert p_value(m, r, v, 1.0, DELTA) > p_value(m, r, v, 1.0, 0.0)


def test_epsilon_lower_bound_inverts_the_p_value():
    m, r, v = 1000, 200, 180
    eps = epsilon_lower_bound(m, r, v, delta=DELTA, confidence=0.95)
    assert p_value(m, r, v, eps, DELTA) < 0.05 <= p_value(m, r, v, eps + 1e-4, DELTA)
    # all r = 10 guesses right, δ = 0: q^10 = 0.05 → ε = log(q / (1 − q))
    q = 0.05**0.1
    assert epsilon_lower_bound(10, 10, 10, delta=0.0) == pytest.approx(
        math.log(q / (1 - q)), abs=1e-5
    )
    assert epsilon_lower_bound(100, 50, 25, delta=DELTA) == 0.0  # chance level


def test_guesses_from_scores_and_bad_input():
    g = guesses_from_scores([0.1, 0.9, 0.5, -1.0], 1, 1)
    assert g.tolist() == [0, 1, 0, -1]
    with pytest.raises(ValueError, match="k_plus"):
        guesses_from_scores([1.0, 2.0], 2, 1)
    with pytest.raises(ValueError, match="NaN"):
        guesses_from_scores([1.0, math.nan], 1, 0)
    with pytest.raises(ValueError, match="0 <= v <= r <= m"):
        p_value(10, 5, 6, 1.0, 0.0)
    with pytest.raises(ValueError, match="probability"):
        CanarySet(10, 1.0, 1.0, 0, ((3,),))


def test_gaussian_pair_matches_closed_form_and_numerical_integration():
    for mu in (0.3, 1.0, 2.5):
        for eps in (0.0, 0.7, 2.0):
            assert pair_delta(eps, 0.0, 1.0, mu, 1.0) == pytest.approx(
                gaussian_mechanism_delta(eps, mu), abs=1e-12
            )
        assert epsilon_for_delta(DELTA, 0.0, 1.0, mu, 1.0) == pytest.approx(
            gaussian_mechanism_epsilon(mu, DELTA), rel=1e-6
        )
    # unequal variances: hockey-stick divergence by quadrature, both directions
    m0, s0, m1, s1, eps = 0.0, 1.0, 1.2, 1.4, 0.8

    def hockey(ma, sa, mb, sb):
        def f(x):
            return max(0.0, stats.norm.pdf(x, ma, sa) - math.exp(eps) * stats.norm.pdf(x, mb, sb))

        return integrate.quad(f, -30, 30, limit=400, points=[ma, mb])[0]

    expected = max(hockey(m0, s0, m1, s1), hockey(m1, s1, m0, s0))
    assert pair_delta(eps, m0, s0, m1, s1) == pytest.approx(expected, abs=1e-7)


def test_one_shot_estimate_is_zero_without_signal_and_grows_with_it():
    rng = np.random.default_rng(0)
    out = rng.normal(0, 1, 500)
    assert one_shot_estimate(rng.normal(0, 1, 500), out, delta=DELTA).epsilon < 1.0
    small = one_shot_estimate(rng.normal(1, 1, 500), out, delta=DELTA).epsilon
    large = one_shot_estimate(rng.normal(3, 1, 500), out, delta=DELTA).epsilon
    assert 0 < small < large


def test_canary_upper_bound_is_the_composed_gaussian_and_below_the_replace_one_headline():
    z, m, rounds = 1.0, 4, 5
    ub = canary_upper_bound(
        noise_multiplier=z, num_sampled_clients=m, real_reports_per_round=[m] * rounds, delta=DELTA
    )
    mu = math.sqrt(rounds) * 2 * m / ((m + 1) * z)
    assert ub["mu"] == pytest.approx(mu)
    assert ub["epsilon"] == pytest.approx(gaussian_mechanism_epsilon(mu, DELTA))
    assert ub["epsilon"] < gaussian_mechanism_epsilon(2 * math.sqrt(rounds) / z, DELTA)
    assert (
        canary_upper_bound(
            noise_multiplier=0.0, num_sampled_clients=m, real_reports_per_round=[m], delta=DELTA
        )
        is None
    )


def test_tpr_at_low_fpr():
    rng = np.random.default_rng(1)
    labels = np.r_[np.ones(5000), np.zeros(5000)]
    same = tpr_at_fpr(labels, rng.normal(0, 1, 10000))
    assert same["tpr_at_1pct_fpr"] == pytest.approx(0.01, abs=0.006)
    assert same["tpr_at_0.1pct_fpr"] <= 0.005
    separated = tpr_at_fpr(labels, np.r_[np.full(5000, 2.0), np.zeros(5000)])
    assert separated == {"tpr_at_0.1pct_fpr": 1.0, "tpr_at_1pct_fpr": 1.0}
    res = loss_threshold_attack(rng.normal(0.5, 1, 1000), rng.normal(1.0, 1, 1000))
    assert 0 <= res.tpr_at_low_fpr["tpr_at_1pct_fpr"] <= 1 and res.fpr_resolution == 1e-3


def test_offline_lira_calibrates_per_example_difficulty():
    from fedpriv.audit.lira import logit_confidence, offline_lira_scores

    rng = np.random.default_rng(3)
    n = 4000
    difficulty = rng.normal(0, 3, n)  # per-example confidence, shared by all models
    member = rng.random(n) < 0.5
    reference = difficulty + rng.normal(0, 0.5, (8, n))  # OUT models
    target = difficulty + 1.5 * member + rng.normal(0, 0.5, n)
    lira = tpr_at_fpr(member.astype(int), offline_lira_scores(target, reference))
    raw = tpr_at_fpr(member.astype(int), target)  # the threshold on confidence alone
    assert lira["tpr_at_1pct_fpr"] > 0.2 > raw["tpr_at_1pct_fpr"] + 0.1
    proba = np.array([[0.9, 0.1], [0.5, 0.5]])
    assert logit_confidence(proba, np.array([0, 1])) == pytest.approx([math.log(9), 0.0])


def test_example_canaries_are_seeded_spread_over_clients_and_audited():
    from types import SimpleNamespace

    from fedpriv.scenarios.audit.feature import example_audit
    from fedpriv.scenarios.config.specs import run_spec

    from fedpriv.audit.example_canaries import ExampleCanaries, with_example_canaries

    a = ExampleCanaries(40, 7, (8, 8, 1), 10, 4)
    b = ExampleCanaries(40, 7, (8, 8, 1), 10, 4)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.included, b.included)
    assert sum(len(a.for_client(p)[0]) for p in range(4)) == int(a.included.sum())
    cfg = {"audit-canaries": 40, "seed": 7, "num-clients": 4, "audit-canary-probability": 0.5,
           "audit-confidence": 0.95, "dp-delta": 1e-5, "noise-multiplier": 1.1,
           "num-server-rounds": 2, "privacy": "dp-sgd"}  # fmt: skip
    data = SimpleNamespace(input_shape=(8, 8, 1), num_classes=10)
    x0, y0 = np.zeros((5, 8, 8, 1), np.float32), np.zeros(5, int)
    x, y = with_example_canaries(run_spec(cfg), data, 1, x0, y0)
    assert len(x) == 5 + len(a.for_client(1)[0]) and np.array_equal(y[5:], a.for_client(1)[1])

    def memorising_model(xs):  # the canaries' label gets 0.99 if included, 0.1 otherwise
        proba = np.full((len(xs), 10), 0.1)
        for i, xi in enumerate(xs):
            j = int(np.argmin(np.abs(a.x - xi).reshape(40, -1).sum(axis=1)))
            proba[i, a.y[j]] = 0.99 if a.included[j] else 0.1
        return proba

    out = example_audit(server_run(cfg), None, data, memorising_model)
    assert out["epsilon_lower_bound"] >= 1.0 and out["epsilon_upper_bound"] is None
    assert out["adjacency"].startswith("add/remove one training example")
    # the bound is the Poisson PLD/RDP of the batching the clients run, not an assumed one
    assert "Poisson-sampled Gaussian" in out["upper_bound_accountant"]
    assert out["upper_bound_note"].startswith("an upper bound for the batching the clients run")


def test_zonal_and_laplace_mechanism_audits():
    from fedpriv.audit.mechanism_audits import audit_laplace_sanitizer, audit_zonal_mechanism

    for placement in ("ldp", "hdp", "cdp"):
        out = audit_zonal_mechanism(
            placement=placement, noise_multiplier=1.0, num_canaries=100, rounds=2, dim=5000
        )
        # the aggregator sees at least one level's noise: the bound stays below its ε
        assert out["aggregator"]["epsilon_lower_bound"] <= out["epsilon_level"]
        assert out["aggregator"]["epsilon_lower_bound"] <= out["epsilon_aggregator_accountant"]
        if placement != "ldp":  # the super-node sees clipped updates before any noise
            assert out["supernode"]["epsilon_lower_bound"] >= 1.0
    lap = audit_laplace_sanitizer(noise_multiplier=5.0, num_canaries=100, dim=5000)
    assert isinstance(lap["aggregator"]["epsilon_lower_bound"], float)
    assert lap["gp_leakage_claimed"] == 1000.0


def test_zonal_audit_with_orthogonal_canaries_has_more_power_and_stays_sound():
    """2000 canaries on disjoint blocks (fedpriv audit's zonal budget) raise the CDP
    aggregator's bound at z = 3 above the 200 dense canaries', still below its accountant."""
    from fedpriv.audit.mechanism_audits import BlockCanaries, audit_zonal_mechanism

    canaries = BlockCanaries(50, 2, 0)
    dirs = np.stack([canaries.direction(j) for j in range(50)])
    np.testing.assert_allclose(dirs @ dirs.T, np.eye(50), atol=1e-12)
    np.testing.assert_allclose(canaries.cosines(dirs[7] * 3.0)[7], 1.0)
    dense = audit_zonal_mechanism(placement="cdp", noise_multiplier=3.0, rounds=5)
    blocks = audit_zonal_mechanism(
        placement="cdp", noise_multiplier=3.0, rounds=5, num_canaries=2000, block=2
    )
    assert blocks["canaries"]["dim"] == 4000
    low, high = dense["aggregator"], blocks["aggregator"]
    assert high["epsilon_lower_bound"] > max(1.0, low["epsilon_lower_bound"])
    assert high["epsilon_lower_bound"] <= blocks["epsilon_aggregator_accountant"]


def test_grid_report_answers_metric_vs_global(tmp_path):
    from fedpriv.audit.report import audit_grid_report

    def cell(row, z, est, lb, **kw):
        base = {"row": row, "z": z, "epsilon_estimate": est, "epsilon_lower_bound": lb}
        return {**base, "canaries": {"count": 10}, "membership": {}, **kw}

    cells = [
        cell("none", 0.0, "inf", 2.0),
        cell("global-dp", 1.0, 0.5, 0.0, epsilon_upper_bound=4.0, epsilon_upper_bound_run=5.0),
        cell("metric-dp raw", 1.0, 0.9, 0.1, epsilon_comparison_realised_sigma=7.0),
    ]
    text = audit_grid_report(cells, tmp_path, settings={"num-server-rounds": 2})
    assert "z = 1: metric-dp raw leaks **more** than global DP — estimate 0.9 vs 0.5" in text
    assert (tmp_path / "audit.md").exists() and (tmp_path / "audit_epsilon_vs_z.png").exists()


def test_grid_report_states_the_guarantee_each_mechanism_audit_tests(tmp_path):
    """audit.md says which guarantee the zonal / Laplace audits test."""
    from fedpriv.audit.mechanism_audits import GUARANTEES, audit_zonal_mechanism
    from fedpriv.audit.report import audit_grid_report

    cells = [{"row": "none", "z": 0.0, "epsilon_estimate": 1.0, "epsilon_lower_bound": 0.5,
              "canaries": {"count": 10}, "membership": {}}]  # fmt: skip
    hdp = audit_zonal_mechanism(placement="hdp", noise_multiplier=1.0, num_canaries=20,
                                rounds=1, dim=500)  # fmt: skip
    assert hdp["guarantee_tested"] == GUARANTEES["hdp"]
    mechanisms = [{"row": "zonal-hdp", "z": 1.0, **hdp}]
    text = audit_grid_report(cells, tmp_path, settings={}, mechanisms=mechanisms)
    assert f"- zonal-hdp: {GUARANTEES['hdp']}" in text


def test_audit_grid_runs_the_incomplete_cells_in_one_plan_and_resumes(tmp_path, monkeypatch):
    from fedpriv.scenarios.app import multirun
    from fedpriv.scenarios.audit import commands as audit_cli
    from fedpriv.scenarios.config.features import CATALOG

    plans = []

    def launch_plan(output_dir, cells, top, federation, catalog):
        plans.append((output_dir, [c.label for c in cells], top, [c.cfg for c in cells]))
        return 0

    monkeypatch.setattr(multirun, "launch_plan", launch_plan)
    base = {"num-server-rounds": 1, "audit-canaries": 10}
    cells = [(label, z, {**base, **v}) for label, z, v in audit_cli.grid_cells([1.0])]
    done = audit_cli.cell_dir(tmp_path, "global-dp", 1.0)
    done.mkdir(parents=True)
    (done / audit_cli.AUDIT_NAME).write_text("{}")  # a finished cell is kept
    assert audit_cli._run_grid(tmp_path, cells, "local-simulation", CATALOG) == 0
    [(out, labels, top, cfgs)] = plans
    assert out == tmp_path and "global-dp z=1" not in labels and len(labels) == 4
    assert [c["privacy"] for c in cfgs] == ["none", "metric-dp", "metric-dp", "dp-sgd"]
    assert cfgs[3]["output-dir"] == str(tmp_path / "runs" / "dp-sgd-example-canaries-z1.1")
    assert top["privacy"] == "none"  # the simulation's own config is a valid cell's
    for label, z, _ in cells:
        path = audit_cli.cell_dir(tmp_path, label, z)
        path.mkdir(parents=True, exist_ok=True)
        (path / audit_cli.AUDIT_NAME).write_text("{}")
    assert audit_cli._run_grid(tmp_path, cells, "local-simulation", CATALOG) == 0
    assert len(plans) == 1  # every cell complete: no simulation
    bad = [("none", 0.0, {**base, "audit-canary-probability": 1.5})]
    assert audit_cli._run_grid(tmp_path / "bad", bad, "local-simulation", CATALOG) == 2


def test_audit_command_prints_the_audit_and_fails_a_failed_audit(monkeypatch, capsys):
    import argparse
    import json

    from fedpriv.scenarios.audit import commands as audit_cli
    from fedpriv.scenarios.config.features import CATALOG

    args = argparse.Namespace(mechanism=None, grid=False, report_only=False, run_config=[],
                              federation="local-simulation")  # fmt: skip
    for failed, rc in ((False, 0), (True, 1)):
        monkeypatch.setattr(audit_cli, "run_one", lambda *a, f=failed: (0, {"audit_failed": f}))
        assert audit_cli.audit_command(args, CATALOG) == rc
        assert json.loads(capsys.readouterr().out) == {"audit_failed": failed}
