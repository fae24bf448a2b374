"""The adaptive-clipping mechanism audit (``fedpriv audit --mechanism adaptive-clip``):

* the vectorised rounds are the real AdaptiveClippingGaussian's (process, add_noise_stdv, adapt);
* the claim is the mode's own accountant (the plan ``fedpriv epsilon`` prints);
* the correct mechanism's lower bounds stay at or below that ε, with power;
* a planted error — the clipped count released without noise — is flagged.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedpriv.audit import adaptive_clip_mechanism as am
from fedpriv.privacy.modes import adaptive_clip

pytest.importorskip("jax_privacy.auditing")

SMALL = am.AdaptiveClipAudit(num_canaries=3, rounds=4, clients=20, count_stddev=2.0,
                             noise_multiplier=3.0)  # fmt: skip


def test_vectorised_rounds_are_the_real_mechanism():
    """Per copy: m clients (canary on coordinate 0, real client i on coordinate 1 + i) through
    ``process`` (clip relative to the global model), the mean over m, ``add_noise_stdv`` and
    ``adapt``; the same standard normals drive the vectorised :func:`run_rounds`."""
    cfg, signs = SMALL, np.array([1, -1, 1])
    m, real = cfg.clients, am.real_norms(cfg)
    update_draws, count_draws = np.zeros((cfg.rounds, 3)), np.zeros((cfg.rounds, 3))
    for j in range(3):
        mech, w = cfg.mechanism(), np.zeros(m)
        rng_u, rng_c = np.random.default_rng([j, 1]), np.random.default_rng([j, 2])
        replay_u, replay_c = np.random.default_rng([j, 1]), np.random.default_rng([j, 2])
        for t in range(cfg.rounds):
            c = mech.clipping_norm
            canary = np.zeros(m)
            canary[0] = am.INSIDE * c if signs[j] > 0 else -am.OUTSIDE * c
            updates = [canary] + [np.eye(m)[1 + i] * real[i] for i in range(m - 1)]
            done = mech.process([[w + u] for u in updates], [w])
            mean = w + sum(model[0] - w for model in done.models) / m
            new = mech.add_noise_stdv([mean], done.stdv, rng_u)[0]
            mech.adapt(num_reports=m, num_clipped=done.num_clipped, rng=rng_c)
            update_draws[t, j] = replay_u.standard_normal(m)[0]
            count_draws[t, j] = replay_c.standard_normal()
            np.testing.assert_allclose(new[0] - w[0], _steps(cfg, signs, update_draws,
                                       count_draws)[0][t, j], rtol=1e-9)  # fmt: skip
            w = new
        norms = _steps(cfg, signs, update_draws, count_draws)[1][:, j]
        assert norms[-1] == pytest.approx(mech.clipping_norm, rel=1e-12)
        assert norms[0] == cfg.clipping_norm and len(set(norms)) == cfg.rounds + 1


def _steps(cfg, signs, update_draws, count_draws):
    return am.run_rounds(cfg, signs, update_draws, count_draws)


def test_claim_is_the_modes_plan():
    """The audit's ε is what the mode's accountant reports for the same run (m = N = 100)."""
    from fedpriv.scenarios.config.registry import resolve_run_config
    from fedpriv.scenarios.config.specs import run_spec

    from fedpriv.privacy.accounting.planning import privacy_plan

    cfg = resolve_run_config({
        "privacy": adaptive_clip.MODE.name, "num-clients": 100, "clients-per-round": 100,
        "num-server-rounds": am.MUST_SHOW.rounds, "noise-multiplier": 9.5,
        "clipped-count-stddev": 5.0, "dp-delta": 1e-5,
    })  # fmt: skip
    planned = privacy_plan(run_spec(cfg))
    assert planned["update_noise_multiplier"] == pytest.approx(
        am.MUST_SHOW.mechanism().noise_multiplier, rel=1e-12
    )
    assert am.accountant_epsilon(am.MUST_SHOW) == pytest.approx(planned["epsilon"], rel=1e-9)
    assert am.accountant_epsilon(am.MUST_SHOW) == pytest.approx(2.06, abs=0.01)


@pytest.fixture(scope="module")
def correct():
    return am.audit(am.MUST_SHOW)


def test_correct_mechanism_is_not_flagged_and_the_audit_has_power(correct):
    claimed = correct["accountant_epsilon"]
    for view in am.VIEWS:
        assert correct[view]["best"] <= claimed
    assert not correct["audit_failed"]
    # both releases together leak more than either alone, and near half the claim
    assert correct["white-box"]["best"] >= claimed / 2
    assert correct["white-box"]["best"] > correct["final-model"]["best"]


def test_noiseless_count_is_flagged(correct):
    bug = am.audit(am.MUST_SHOW, planted="count-noiseless")
    assert bug["audit_failed"] and bug["accountant_epsilon"] == correct["accountant_epsilon"]
    assert bug["clip-norms"]["best"] > 2 * bug["accountant_epsilon"]


def test_update_noise_at_z_leaks_more_than_the_correct_mechanism(correct):
    """z instead of z_Δ (the count's release ignored): the same secrets and noise give a
    higher bound; at this budget it stays below the claim (z = 9.5: μ ×1.38)."""
    bug = am.audit(am.MUST_SHOW, planted="update-at-z")
    assert bug["white-box"]["best"] > correct["white-box"]["best"] + 0.2
    assert bug["final-model"]["best"] > correct["final-model"]["best"]


def test_cli_adaptive_clip_mechanism_audit(capsys):
    import argparse

    from fedpriv.scenarios.audit import commands as audit_cli
    from fedpriv.scenarios.config.features import CATALOG

    def cli(argv):
        parser = argparse.ArgumentParser()
        audit_cli.add_arguments(parser)
        return audit_cli.audit_command(parser.parse_args(argv), CATALOG)

    base = ["--mechanism", adaptive_clip.MODE.name, "--z", "9.5"]
    assert cli([*base, "--planted", "count-noiseless"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["row"] == adaptive_clip.MODE.name and out["planted"] == "count-noiseless"
    assert out["audit_failed"] and out["accountant_epsilon"] == pytest.approx(2.06, abs=0.01)
    assert cli([*base, "--run-config", "clipped-count-stddev=4.0"]) == 2
    assert "noise-multiplier = 9.5 is not allowed" in capsys.readouterr().err
    assert cli(["--mechanism", "global-dp", "--planted", "update-at-z"]) == 2
