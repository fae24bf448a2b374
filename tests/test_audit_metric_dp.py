"""Metric DP audited with power: the exact MetricScaledGaussian round with 50 000
canaries at MP's settings (z = 0.01, C = 5, 20 rounds, m = 4, raw d) and beside global DP's
reference config, where metric DP's d > 1 removes noise the global-DP claim counts on."""

import numpy as np
import pytest

from fedpriv.audit import global_dp_mechanism as gdm
from fedpriv.audit import metric_dp_mechanism as mm
from fedpriv.privacy.distance import max_pairwise_layer_distance

pytest.importorskip("jax_privacy.auditing")

SMALL = gdm.GlobalDPAudit(
    num_canaries=6, block=3, rounds=2, real_clients=3, canary_norm=1.0, clients_per_round=4
)


@pytest.mark.parametrize("distance_on", ["raw", "clipped"])
def test_structured_distance_and_sigma_are_the_mechanisms(distance_on):
    """d and σ equal MetricScaledGaussian.noise_stdv on the explicit client models."""
    signs = np.array([1, -1, 1, 1, -1, -1])
    mech = mm.mechanism(SMALL, distance_on)
    dirs = gdm.canary_directions(SMALL)
    updates = []
    for j in range(SMALL.num_canaries):
        u = np.zeros(SMALL.dim)
        u[j * SMALL.block : (j + 1) * SMALL.block] = SMALL.canary_norm * signs[j] * dirs[j]
        updates.append(u)
    updates += list(mm.real_rows(SMALL))
    zero = [np.zeros(SMALL.dim)]
    raw = [[u] for u in updates]
    clipped = [mech.clip([u], zero)[0] for u in updates]
    stdv, info = mech.noise_stdv(raw, clipped)
    sigma, d = mm.round_sigma(SMALL, signs, distance_on)
    assert d == pytest.approx(info["distance"], rel=1e-9)
    assert d == pytest.approx(max_pairwise_layer_distance(raw if distance_on == "raw" else clipped))
    assert sigma == pytest.approx(stdv, rel=1e-9)


@pytest.fixture(scope="module")
def mp():
    return mm.audit(mm.MP_SETTINGS, distance_on="raw")


def test_metric_dp_at_mp_settings_is_audited_as_no_privacy(mp):
    """MP's settings: σ = z·C/(m·d) with raw d ≈ 21 — a lower bound of at least 5 (the
    no-noise figure of the global-DP audit), both threat models named."""
    assert mp["distance"] > 20 and mp["sigma"] < mp["global_dp_sigma"] / 20
    assert mp["white-box"]["best"] >= 5 and mp["final-model"]["best"] >= 5
    assert "none claimed" in mp["guarantee_tested"]


def test_metric_dp_leaks_more_than_the_global_dp_claim_at_the_same_z():
    """At the reference config (global DP accounted at ε = 2.00), metric DP with raw d > 1
    adds less noise and the audit's lower bound exceeds 2; with d on clipped models
    (d ≈ √2·C) it still adds less noise than global DP."""
    cfg = gdm.MUST_SHOW.with_(canary_norm=1.0)
    raw = mm.audit(cfg, distance_on="raw")
    assert raw["global_dp_accountant_epsilon"] == pytest.approx(2.0, abs=0.01)
    assert raw["white-box"]["best"] > raw["global_dp_accountant_epsilon"]
    clipped = mm.audit(cfg, distance_on="clipped")
    assert 1.0 < clipped["distance"] < raw["distance"]
    assert clipped["white-box"]["best"] < raw["white-box"]["best"]


def test_cli_metric_dp_mechanism_audit(capsys):
    import argparse
    import json

    from fedpriv.scenarios.audit import commands as audit_cli
    from fedpriv.scenarios.config.features import CATALOG

    parser = argparse.ArgumentParser()
    audit_cli.add_arguments(parser)

    def cli(argv):
        return audit_cli.audit_command(parser.parse_args(argv), CATALOG)

    assert (
        cli(["--mechanism", "metric-dp", "--z", "0.01", "--run-config", "num-server-rounds=2"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["row"] == "metric-dp" and out["config"]["rounds"] == 2
    assert out["white-box"]["best"] >= 5
    assert cli(["--mechanism", "metric-dp", "--run-config", "distance-on='far'"]) == 2
    assert "distance-on = 'far' is not allowed" in capsys.readouterr().err
