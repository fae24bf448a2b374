"""Defaults that mean something, and a warning where an ε does not: the thresholds
(docs/privacy.md, "What an ε protects"), the summary line, summary.json's label, the plan's
row, global DP's default z and the MP scenarios' own z."""

from __future__ import annotations

import math

import pytest
from fedpriv.scenarios.config.registry import resolve_run_config

from fedpriv.privacy.accounting import strength
from fedpriv.reporting import console
from fedpriv.reporting.plan_text import plan_headline
from fedpriv.reporting.records import PrivacyFigures


@pytest.mark.parametrize(
    ("epsilon", "label"),
    [(None, None), ("nan", None), (0.5, None), (10.0, None), (10.01, "weak"), (100.0, "weak"),
     (100.1, "none"), (1.62e5, "none"), (math.inf, "none"), ("Infinity", "none")],
)  # fmt: skip
def test_thresholds(epsilon, label):
    assert strength.protection(epsilon) == label
    text = strength.warning(epsilon)
    assert (text is None) == (label is None)
    if label == "weak":
        assert "> 10: weak protection" in text
    elif label == "none":
        assert "> 100: no meaningful protection" in text and "noise-multiplier" in text


def _summary(epsilon):
    figures = PrivacyFigures("global-dp", bound="b", noise_multiplier=1.0, epsilon=epsilon,
                             delta=1e-5).to_json()  # fmt: skip
    return {"config": {"privacy": "global-dp"}, "final": {"accuracy": 0.9},
            "privacy_figures": figures}  # fmt: skip


def test_summary_json_labels_the_epsilon():
    assert _summary(39.4)["privacy_figures"]["protection"] == "weak"
    assert _summary(1.62e5)["privacy_figures"]["protection"] == "none"
    assert _summary(3.0)["privacy_figures"]["protection"] is None
    assert PrivacyFigures("metric-dp").to_json()["protection"] is None  # no ε, no label
    # the label is derived, not a field: a summary.json reads back as before
    assert PrivacyFigures.from_summary(_summary(39.4)).epsilon == 39.4


def test_the_run_summary_warns_about_an_epsilon_that_protects_little(tmp_path):
    lines = console.summary_lines(_summary(1.62e5), tmp_path, 1.0)
    warned = [line for line in lines if "warning" in line]
    assert len(warned) == 1 and "ε = 1.62e+05 > 100: no meaningful protection" in warned[0]
    assert warned[0].startswith("fedpriv:   warning  ")
    assert not [line for line in console.summary_lines(_summary(4.0), tmp_path, 1.0)
                if "warning" in line]  # fmt: skip
    zonal = {"config": {"privacy": "zonal"}, "final": {},
             "zonal": {"epsilon": {"level": {"pld": 111.0}}}}  # fmt: skip
    assert "no meaningful protection" in console.epsilon_warning(zonal)
    assert console.epsilon_warning({**zonal, "runs": []}) is None  # one figure per run


def test_the_plan_warns_before_training():
    rows = plan_headline({"mode": "global-dp", "epsilon": 39.4, "delta": 1e-5, "rounds": 8})
    assert rows[2].startswith("warning    ε = 39.4 > 10: weak protection")
    assert not any("warning" in r for r in plan_headline({"mode": "global-dp", "epsilon": 2.0}))
    assert not any("warning" in r for r in plan_headline({"mode": "none", "epsilon": math.inf}))


def test_global_dp_defaults_to_dp_fedavg_scale_and_mp_scenarios_keep_mp_z():
    assert resolve_run_config({"privacy": "global-dp"})["noise-multiplier"] == 1.0
    assert resolve_run_config({"privacy": "metric-dp"})["noise-multiplier"] == 0.01  # MP's
    for scenario in ("synthetic-mri", "cia"):  # MP's z and C (SPEC's MP grid)
        cfg = resolve_run_config({"scenario": scenario, "privacy": "global-dp"})
        assert (cfg["noise-multiplier"], cfg["clipping-norm"]) == (0.01, 5.0)
    assert resolve_run_config({"privacy": "dp-sgd"})["noise-multiplier"] == 1.1


def test_adaptive_clip_and_dp_ftrl_default_z_lands_below_the_weak_threshold():
    """adaptive-clip: global DP's z = 1 and the same ε as global DP at that z; its auto σ_b
    is m/20 when that admits z, else z. dp-ftrl: z = 2, ε = 9.0 at 100 clients, 20 a round,
    20 rounds (four 5-leaf trees: 12 nodes of std z·C, μ = √12/z, replace-special)."""
    import dp_accounting
    from fedpriv.scenarios.config.specs import run_spec

    from fedpriv.privacy.accounting.planning import privacy_plan
    from fedpriv.privacy.modes import adaptive_clip

    cross = {"scenario": "digits", "num-clients": 100, "clients-per-round": 20,
             "num-server-rounds": 20}  # fmt: skip
    adaptive = resolve_run_config({**cross, "privacy": "adaptive-clip"})
    assert adaptive["noise-multiplier"] == 1.0
    same = resolve_run_config({**cross, "privacy": "global-dp"})
    assert privacy_plan(run_spec(adaptive))["epsilon"] == pytest.approx(
        privacy_plan(run_spec(same))["epsilon"], rel=1e-9
    )
    assert adaptive_clip.count_stddev(run_spec(adaptive).params, 20) == 1.0  # m/20 admits z=1
    small = run_spec(resolve_run_config({"privacy": "adaptive-clip"}))  # 4 clients: 0.2 won't
    assert adaptive_clip.count_stddev(small.params, 4) == 1.0
    assert adaptive_clip.count_stddev(small.params, 40) == 2.0
    ftrl = resolve_run_config({**cross, "privacy": "dp-ftrl"})
    assert ftrl["noise-multiplier"] == 2.0
    gaussian = dp_accounting.rdp.RdpAccountant()
    gaussian.compose(dp_accounting.GaussianDpEvent(2.0 / math.sqrt(12)))
    epsilon = privacy_plan(run_spec(ftrl))["epsilon"]
    assert epsilon == pytest.approx(gaussian.get_epsilon(1e-5), rel=1e-9)
    assert 8.5 < epsilon <= strength.WEAK_EPSILON and strength.warning(epsilon) is None


def test_fedpriv_epsilon_prints_the_warning(capsys):
    from fedpriv.scenarios.cli.main import main

    assert main(["epsilon", "-c", "privacy='global-dp' noise-multiplier=0.01"]) == 0
    out = capsys.readouterr().out
    assert "warning    ε = 1.62e+05 > 100: no meaningful protection" in out
    assert main(["epsilon", "-c", "privacy='global-dp' noise-multiplier=4"]) == 0
    assert "warning" not in capsys.readouterr().out  # ε 6.57 at z = 4: no label


def test_dp_sgd_epsilon_logs_no_absl_non_convergence_warnings(capsys, caplog):
    """dp_accounting's "failed to converge ... Excluding this order" (one absl warning per
    order in DP-SGD's target search) is dropped; any other absl record still shows."""
    import logging

    from fedpriv.scenarios.cli.main import main

    caplog.set_level(logging.WARNING)
    argv = ["epsilon", "-c", "privacy='dp-sgd'", "--examples-per-client", "100"]
    assert main([*argv, "--target-epsilon", "5"]) == 0
    assert '"noise_multiplier"' in capsys.readouterr().out
    assert not [r for r in caplog.records if r.name == "absl"], caplog.text
    logging.getLogger("absl").warning("Negative Renyi divergence of %s", -1.0)
    assert [r.getMessage() for r in caplog.records] == ["Negative Renyi divergence of -1.0"]


def test_a_grid_cell_line_carries_the_warning():
    """``fedpriv grid --privacy none,global-dp``: each cell's line warns about its own ε."""
    line = console.cell_line(_summary(1.62e5))
    assert "global-dp: (ε = 1.62e+05" in line and "warning: ε = 1.62e+05 > 100" in line
    assert "\n" not in line and "warning" not in console.cell_line(_summary(2.0))
