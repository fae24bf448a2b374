"""Auditing with power: one-run ε-DP and f-DP bounds, the global-DP mechanism
audit (bound >= ε/2 and never above ε in 200 audits; no noise gives >= 5), and the planted
bugs the audit must flag."""

import subprocess
import sys

import numpy as np
import pytest

from fedpriv.audit import global_dp_mechanism as gdm
from fedpriv.audit import one_run, planted
from fedpriv.audit.one_run_fdp import (
    exceeds,
    fdp_epsilon_lower_bound,
    one_run_bounds,
)
from fedpriv.privacy.dp import FixedClippingGaussian

jax_auditing = pytest.importorskip("jax_privacy.auditing")

SMALL = gdm.GlobalDPAudit(num_canaries=6, block=3, rounds=2, real_clients=2, canary_norm=4.0)


# --- statistics -------------------------------------------------------------------------------


@pytest.mark.parametrize("m,r,v", [(1000, 100, 80), (5000, 500, 330), (200, 200, 150)])
def test_our_eps_dp_bound_agrees_with_jax_privacy(m, r, v):
    """Our Steinke et al. p-value and ε search vs jax-privacy's independent implementation."""
    for eps in (0.0, 0.5, 1.0, 2.0):
        ours = one_run.p_value(m, r, v, eps, 1e-5)
        theirs = jax_auditing._one_run_p_value(m, r, v, eps, 1e-5)
        assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-15)
    ours = one_run.epsilon_lower_bound(m, r, v, delta=1e-5, confidence=0.95)
    theirs = jax_auditing._epsilon_one_run(0.0, m, r, v, 0.05, 1e-5)
    assert ours > 0.1
    assert ours == pytest.approx(theirs, abs=1e-4)


def test_one_sided_counts_match_jax_public_auditor():
    """jax-privacy's public CanaryScoreAuditor (one-sided, a fixed threshold) gives the same
    ε-DP and f-DP bounds as our count-level functions on the same counts."""
    rng = np.random.default_rng(5)
    ins, outs = rng.normal(1.5, 1, 400), rng.normal(0, 1, 400)
    threshold = 2.0
    auditor = jax_auditing.CanaryScoreAuditor(ins, outs)
    tp, fp = int(np.sum(ins >= threshold)), int(np.sum(outs >= threshold))
    strategy = jax_auditing.Explicit(threshold)
    eps_jax = auditor.epsilon_one_run(0.05, 1e-5, threshold_strategy=strategy)
    fdp_jax = auditor.epsilon_one_run_fdp(0.05, 1e-5, threshold_strategy=strategy)
    eps_ours = one_run.epsilon_lower_bound(800, tp + fp, tp, delta=1e-5, confidence=0.95)
    assert eps_ours > 0.5
    assert eps_ours == pytest.approx(eps_jax, abs=1e-4)
    assert fdp_epsilon_lower_bound(800, tp + fp, tp, delta=1e-5) == pytest.approx(fdp_jax)


def test_fdp_bound_is_zero_at_chance_and_grows_with_perfect_guesses():
    assert fdp_epsilon_lower_bound(10_000, 1000, 500, delta=1e-5) == 0.0
    small = fdp_epsilon_lower_bound(1000, 100, 100, delta=1e-5)
    large = fdp_epsilon_lower_bound(100_000, 10_000, 10_000, delta=1e-5)
    assert 0 < small < large


def test_exceeds_agrees_with_the_bounds():
    rng = np.random.default_rng(3)
    signs = rng.choice([-1, 1], 20_000)
    scores = signs * 0.6 + rng.normal(size=signs.size)
    bounds = one_run_bounds(scores, signs, delta=1e-5)
    assert bounds.best == max(bounds.epsilon_dp, bounds.epsilon_fdp) > 0.5
    assert exceeds(scores, signs, bounds.best - 0.05, delta=1e-5)
    assert not exceeds(scores, signs, bounds.best + 0.05, delta=1e-5)


def test_two_sided_counts_follow_guesses_from_scores():
    rng = np.random.default_rng(4)
    signs = rng.choice([-1, 1], 1000)
    scores = signs * 2.0 + rng.normal(size=1000)
    got = one_run_bounds(scores, signs, delta=1e-5, fractions=(0.1,))
    guesses = one_run.guesses_from_scores(scores, 50, 50)
    assert got.correct_dp == int(np.sum(guesses * signs == 1))


# --- the mechanism as the wrappers run it ------------------------------------------------------


def test_simulated_rounds_are_the_wrapper_math():
    """The vectorised rounds equal a per-client loop through FixedClippingGaussian.process
    (clip relative to the global model), the fixed-m mean and add_noise_stdv, same generator."""
    cfg, signs = SMALL, np.array([1, -1, 1, 1, -1, -1])
    got = gdm.simulate_releases(cfg, signs, np.random.default_rng(9))
    mech = FixedClippingGaussian(noise_multiplier=12.6, clipping_norm=1.0, num_sampled_clients=100)
    dirs = gdm.canary_directions(cfg)
    rng, w = np.random.default_rng(9), np.zeros(cfg.dim)
    real = [u for u in np.random.default_rng([cfg.seed, 22, 3]).normal(size=(2, cfg.dim))]
    for t in range(cfg.rounds):
        updates = [np.zeros(cfg.dim) for _ in range(cfg.num_canaries)]
        for j, u in enumerate(updates):
            u[j * cfg.block : (j + 1) * cfg.block] = 4.0 * signs[j] * dirs[j]
        updates += [3.0 * u / np.linalg.norm(u) for u in real]
        done = mech.process([[w + u] for u in updates], [w])
        assert done.num_clipped == len(updates)  # every update had norm > C
        mean = w + sum(model[0] - w for model in done.models) / 100
        new = mech.add_noise_stdv([mean], done.stdv, rng)[0]
        np.testing.assert_allclose(got[t], new - w, atol=1e-12)
        w = new


def test_must_show_config_is_accounted_at_two():
    """The reference config: z = 12.6, T = 10, m = N = 100, δ = 1e-5 (fixed sampling)."""
    assert gdm.accountant_epsilon(gdm.MUST_SHOW) == pytest.approx(2.0, abs=0.01)


@pytest.fixture(scope="module")
def must_show():
    return gdm.audit(gdm.MUST_SHOW)


def test_lower_bound_is_at_least_half_the_accountant(must_show):
    claimed = must_show["accountant_epsilon"]
    for view in ("white-box", "final-model"):
        assert must_show[view]["best"] >= claimed / 2
        assert must_show[view]["best"] <= claimed
    assert must_show["white-box"]["epsilon_fdp"] > must_show["white-box"]["epsilon_dp"]


def test_audit_is_sound_in_200_simulated_audits():
    assert gdm.soundness(gdm.MUST_SHOW, trials=200) == []


def test_no_privacy_gives_a_lower_bound_of_at_least_five():
    result = gdm.audit(gdm.MUST_SHOW.with_(noise_multiplier=0.0))
    assert result["accountant_epsilon"] == float("inf")
    assert result["white-box"]["best"] >= 5
    assert result["final-model"]["best"] >= 5


def test_diluted_canaries_lose_the_power():
    """The old failure: dividing by all replies (K + m) instead of m hides the canaries."""
    cfg = gdm.MUST_SHOW

    def diluted(cfg, signs, rng):
        def step(mech, total, m, rng):
            return gdm.correct_round(mech, total * m / (m + cfg.num_canaries), m, rng)

        return gdm.simulate_releases(cfg, signs, rng, round_fn=step)

    assert gdm.audit(cfg, simulate=diluted)["white-box"]["best"] < 0.1


@pytest.mark.parametrize("bug", sorted(planted.PLANTED))
def test_planted_bug_is_flagged_with_the_default_budget(bug):
    result = gdm.audit(simulate=planted.PLANTED[bug], view=planted.VIEWS.get(bug))
    assert result["white-box"]["best"] > result["accountant_epsilon"]


def test_public_seed_bug_is_invisible_without_regenerating_the_noise():
    """The public-seed variant's noise has the right law: only the auditor that regenerates it
    from the seed catches it (so the flag above is that knowledge, not a louder mechanism)."""
    result = gdm.audit(simulate=planted.PLANTED["public-seed"])
    assert result["white-box"]["best"] <= result["accountant_epsilon"]


def test_fedpriv_audit_imports_without_jax():
    code = (
        "import sys; import fedpriv.audit.global_dp_mechanism, fedpriv.audit.planted; "
        "assert 'jax' not in sys.modules and 'jax_privacy' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- fedpriv audit --mechanism global-dp -----------------------------------------------------


def _cli(argv):
    import argparse

    from fedpriv.scenarios.audit import commands as audit_cli
    from fedpriv.scenarios.config.features import CATALOG

    parser = argparse.ArgumentParser()
    audit_cli.add_arguments(parser)
    return audit_cli.audit_command(parser.parse_args(argv), CATALOG)


def test_cli_global_dp_mechanism_audit_passes_and_a_planted_bug_fails(capsys):
    import json

    from fedpriv.scenarios.audit import commands as audit_cli

    from fedpriv.audit.adaptive_clip_mechanism import PLANTED as ADAPTIVE_PLANTED

    every = {**planted.PLANTED, **planted.DPSGD_PLANTED, **ADAPTIVE_PLANTED}
    assert audit_cli.PLANTED_BUGS == tuple(sorted(every))
    base = ["--mechanism", "global-dp", "--z", "12.6", "--run-config", "num-server-rounds=10"]
    assert _cli(base) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["accountant_epsilon"] == pytest.approx(2.0, abs=0.01)
    assert out["white-box"]["best"] >= 1.0 and not out["audit_failed"]
    assert _cli([*base, "--planted", "sigma-2m"]) == 1
    assert json.loads(capsys.readouterr().out)["planted"] == "sigma-2m"
    assert _cli(["--mechanism", "zonal-hdp", "--planted", "sigma-2m"]) == 2
    assert "--planted" in capsys.readouterr().err


def test_run_audit_reports_the_fdp_bound_beside_the_eps_dp_bound():
    from fedpriv.audit.audit import audit_scores

    rng = np.random.default_rng(8)
    included = rng.random(2000) < 0.5
    scores = np.where(included, 1.5, 0.0) + rng.normal(size=2000)
    out = audit_scores(scores, included, probability=0.5, delta=1e-5, confidence=0.95)
    assert out["epsilon_lower_bound"] > 0.5
    assert out["epsilon_lower_bound_fdp"] > out["epsilon_lower_bound"]
    assert out["one_run_fdp"]["method"].startswith("Mahloujifar")
    off = audit_scores(scores, included, probability=0.5, delta=1e-5, confidence=0.95, fdp=False)
    assert "epsilon_lower_bound_fdp" not in off
