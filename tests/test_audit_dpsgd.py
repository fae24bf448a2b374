"""The planted DP-SGD bug: fixed batches from a public partition
accounted as Poisson at q = B/n are flagged by the white-box one-run audit with the default
budget; the correct mechanism (secret Poisson batches) is not.

The claim is the run's: replace-one example adjacency (``fedpriv.privacy.dpsgd``: n is
released, multiplier z/2), and the canaries are replace-one pairs (gradient ±A·e_j)."""

import argparse
import json

import numpy as np
import pytest

from fedpriv.audit import dpsgd_mechanism as dm
from fedpriv.audit import planted

pytest.importorskip("jax_privacy.auditing")

SMALL = dm.DPSGDAudit(num_examples=200, batch_size=10, epochs=2, num_canaries=50)


def test_must_show_config_claims_little_while_fixed_batches_leak_a_lot():
    """z = 2, q = 0.001, 1000 steps, δ = 1e-5. Replace-one claim (Poisson at multiplier
    z/2 = 1): 0.155; fixed batches' true replace-one ε (μ = 2√E/z = 1): 4.38. At z = 1 the
    claim is 3.24 against a true 10.0 — a one-run bound (3.21 there) cannot separate them."""
    cfg = dm.FIXED_BATCHES
    assert cfg.noise_multiplier == 2.0
    assert cfg.q == 0.001 and cfg.steps_per_epoch == 1000
    assert dm.claimed_epsilon(cfg) == pytest.approx(0.155, abs=0.01)
    assert dm.true_fixed_batch_epsilon(cfg) == pytest.approx(4.38, abs=0.01)
    at_one = cfg.with_(noise_multiplier=1.0)
    assert dm.claimed_epsilon(at_one) == pytest.approx(3.24, abs=0.01)
    assert dm.true_fixed_batch_epsilon(at_one) == pytest.approx(10.0, abs=0.01)


def test_claim_is_the_clients_replace_one_epsilon():
    """The audit checks the ε the client reports (replace-one), not the add/remove figure:
    the Poisson-subsampled Gaussian of sensitivity 2C, noise zC (dp_accounting's raw PLD
    here, as tests/test_dpsgd_adjacency.py), 0.149 against the claim's 0.155; add/remove
    (sensitivity C) would be 0.050."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    cfg = dm.FIXED_BATCHES

    def independent(sensitivity: float) -> float:
        one = pld.from_gaussian_mechanism(
            cfg.noise_multiplier, sensitivity=sensitivity, sampling_prob=cfg.q,
            pessimistic_estimate=True, value_discretization_interval=1e-4,
        )  # fmt: skip
        return float(one.self_compose(1000).get_epsilon_for_delta(cfg.delta))

    claim, replace_one = dm.claimed_epsilon(cfg), independent(2.0)
    assert replace_one <= claim <= 1.05 * replace_one
    assert independent(1.0) < claim / 2


def test_fixed_partition_puts_every_example_in_one_step_per_epoch():
    steps = list(dm.fixed_schedule(SMALL))
    assert len(steps) == 2 * SMALL.steps_per_epoch
    first_epoch = np.concatenate(steps[: SMALL.steps_per_epoch])
    np.testing.assert_array_equal(np.sort(first_epoch), np.arange(SMALL.num_examples))
    assert [len(b) for b in steps] == [SMALL.batch_size] * len(steps)


def test_noiseless_steps_carry_exactly_the_clipped_canaries():
    """z = 0: each fixed-batch canary's white-box score is E·min(A, C)/C when present and
    −E·min(A, C)/C when its replacement is (replace-one); the final model's score is the
    same sum (every step's value on its coordinate)."""
    cfg = SMALL.with_(noise_multiplier=0.0)
    signs = dm.canary_signs(cfg)
    views = dm.simulate_scores(cfg, "fixed-batches", signs)
    np.testing.assert_allclose(views["white-box"], np.where(signs > 0, 2.0, -2.0))
    np.testing.assert_allclose(views["final-model"], views["white-box"])


def test_poisson_steps_use_the_clients_sampler():
    """The correct mechanism's batches are fedpriv.privacy.dpsgd.poisson_schedule's (mean size ≈
    B)."""
    sizes = [len(b) for b in dm.step_batches(SMALL, "poisson", np.random.default_rng(1))]
    assert len(sizes) == 2 * SMALL.steps_per_epoch
    assert 5 < np.mean(sizes) < 15
    with pytest.raises(ValueError, match="expected one of"):
        list(dm.step_batches(SMALL, "shuffled", np.random.default_rng(1)))


@pytest.fixture(scope="module")
def fixed_batches():
    return dm.audit(schedule=planted.DPSGD_PLANTED["fixed-batches"])


def test_fixed_batches_accounted_as_poisson_is_flagged(fixed_batches):
    """White-box ε-DP bound 1.93 (f-DP 3.00) above the replace-one Poisson claim 0.155
    (12x), below the bug's true ε 4.38; the final model alone: 0.01."""
    white = fixed_batches["white-box"]
    assert fixed_batches["audit_failed"]
    assert fixed_batches["adjacency"].startswith("replace-one")
    assert fixed_batches["accountant_epsilon"] == dm.claimed_epsilon(dm.FIXED_BATCHES)
    assert white["epsilon_dp"] > 5 * fixed_batches["accountant_epsilon"]
    assert white["best"] <= fixed_batches["true_epsilon"]


def test_final_model_alone_cannot_see_the_per_step_leak(fixed_batches):
    assert fixed_batches["final-model"]["epsilon_dp"] < fixed_batches["accountant_epsilon"]


@pytest.mark.parametrize("trial", [0, 1])
def test_correct_poisson_mechanism_is_not_flagged(trial):
    result = dm.audit(schedule="poisson", trial=trial)
    assert not result["audit_failed"]
    assert result["white-box"]["epsilon_dp"] <= result["accountant_epsilon"]


def test_cli_dpsgd_mechanism_passes_and_the_planted_bug_fails(capsys):
    from fedpriv.scenarios.audit import commands as audit_cli
    from fedpriv.scenarios.config.features import CATALOG

    parser = argparse.ArgumentParser()
    audit_cli.add_arguments(parser)

    def cli(argv):
        return audit_cli.audit_command(parser.parse_args(argv), CATALOG)

    base = ["--mechanism", "dp-sgd", "--z", "2.0"]
    assert cli(base) == 0
    assert not json.loads(capsys.readouterr().out)["audit_failed"]
    assert cli([*base, "--planted", "fixed-batches"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["planted"] == "fixed-batches" and out["white-box"]["epsilon_dp"] > 1.0
    assert out["white-box"]["epsilon_dp"] > 5 * out["accountant_epsilon"]
    assert cli(["--mechanism", "global-dp", "--planted", "fixed-batches"]) == 2
    assert "expected --mechanism dp-sgd" in capsys.readouterr().err
