"""`fedpriv audit` on digits, real Flower simulations.

ONE `fedpriv audit --grid --z 1` simulation (2 rounds, 1 local epoch, 60 canaries; its five
cells in one simulation through fedpriv.scenarios.app.multirun): global DP at z = 1 gives a lower
bound
<= the accountant's ε for the audited adjacency (and the run is not a failed audit); no
privacy gives a lower bound >= 1; metric DP gets a number (its d is moved by the canaries);
DP-SGD's example canaries are audited; the grid writes its report and cell manifest (resume
and the one-plan launch are tested in-process in test_audit.py). About 90 s on a loaded 2-core
machine (three single `fedpriv audit` simulations took 147 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.simulate import IN_PROCESS

ROOT = Path(__file__).resolve().parent.parent
COMMON = "num-server-rounds=2 local-epochs=1 audit-canaries=60 reproducible-noise=true"


def fedpriv_audit(
    run_config: str, out: Path, *extra: str, common: str = COMMON
) -> tuple[int, str, str]:
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.main", "audit", *extra, "--run-config",
           f"{common} output-dir='{out}' {run_config}"]  # fmt: skip
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    return proc.returncode, proc.stdout, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.simulation
def test_fedpriv_audit_grid_global_dp_none_metric_dp_and_dpsgd(tmp_path):
    out = tmp_path / "grid"
    rc, text, log = fedpriv_audit("", out, "--grid", "--z", "1", "--out", str(out))
    assert rc == 0, log
    runs = out / "runs"
    cells = json.loads((out / "cells.json").read_text())["cells"]
    assert [c["status"] for c in cells] == ["ok"] * 5, cells
    assert "# Empirical privacy audit" in text and (out / "audit.md").exists()

    glob = json.loads((runs / "global-dp-z1" / "audit.json").read_text())
    assert glob["privacy"] == "global-dp" and glob["audit_failed"] is False
    assert isinstance(glob["epsilon_upper_bound"], float)
    assert glob["epsilon_lower_bound"] <= glob["epsilon_upper_bound"]
    assert glob["epsilon_upper_bound"] <= glob["epsilon_upper_bound_run"]
    assert glob["confidence"] == 0.95 and glob["threat_model"] == "final"
    assert glob["canaries"]["count"] == 60 and glob["rounds"] == 2
    assert isinstance(glob["epsilon_lower_bound_fdp"], float)  # f-DP beside eps-DP
    assert "lower_bound_fdp" in glob["methods"] and "LB f-DP (95 %)" in text

    none = json.loads((runs / "none-z0" / "audit.json").read_text())
    assert none["epsilon_lower_bound"] >= 1.0
    assert none["epsilon_upper_bound"] is None
    assert 0 <= none["membership"]["tpr_at_1pct_fpr"] <= 1

    metric = json.loads((runs / "metric-dp-raw-z1" / "audit.json").read_text())
    assert isinstance(metric["epsilon_lower_bound"], float)
    assert isinstance(metric["epsilon_estimate"], (float, str))
    assert metric["epsilon_upper_bound"] is None
    summary = json.loads((runs / "metric-dp-raw-z1" / "summary.json").read_text())
    assert summary["audit"]["epsilon_lower_bound"] == metric["epsilon_lower_bound"]

    dpsgd = json.loads((runs / "dp-sgd-example-canaries-z1.1" / "audit.json").read_text())
    assert dpsgd["privacy"] == "dp-sgd" and dpsgd["threat_model"] == "final"
    assert isinstance(dpsgd["epsilon_upper_bound"], float) and dpsgd["audit_failed"] is False


def test_fedpriv_audit_rejects_bad_keys_before_training(tmp_path, capsys):
    from fedpriv.scenarios.cli.main import main  # in-process: the checks come before any simulation

    def audit(run_config: str, out: Path) -> int:
        return main(["audit", "--run-config", f"{COMMON} output-dir='{out}' {run_config}"])

    assert audit("audit-canary-probability=1.5", tmp_path / "bad") == 2
    captured = capsys.readouterr()
    assert not captured.out.strip()
    assert "audit-canary-probability = 1.5 is not allowed" in captured.err
    assert audit("privacy='zonal'", tmp_path / "zonal") == 2
    assert "audit-canaries" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.guard
@pytest.mark.simulation
def test_fedpriv_audit_fixed_sampling_canaries_certify_a_bound_and_the_model_trains(tmp_path):
    """Under client-sampling = fixed the canaries enter at a real client's
    sensitivity (sum over the fixed m = 4, σ = z·C/m), 300 canaries in random directions of
    the 38k-parameter CNN, small enough (norm C/10) that the model still trains; one run
    certifies a nonzero bound under both named threat models, below the canary accountant."""
    out = tmp_path / "fixed"
    rc, text, log = fedpriv_audit(
        "privacy='global-dp' noise-multiplier=0.05 audit-canaries=300 audit-canary-norm=0.5",
        out,
        *IN_PROCESS,  # the audit is the subject, not the engine
        common="num-server-rounds=3 local-epochs=1 reproducible-noise=true",
    )
    assert rc == 0, log
    got = json.loads(text)
    assert got["canary_denominator"] == "fixed m" and got["audit_failed"] is False
    assert got["upper_bound"]["mu"] == pytest.approx(3**0.5 / 0.05)
    names = {tm["name"] for tm in got["threat_models"].values()}
    assert names == {"white-box", "final-model"} and got["threat_model_name"] == "final-model"
    for block in got["threat_models"].values():
        assert 1.0 <= block["epsilon_lower_bound"] <= got["epsilon_upper_bound"]
        assert 2.0 <= block["epsilon_lower_bound_fdp"] <= got["epsilon_upper_bound"]
    accuracy = json.loads((out / "summary.json").read_text())["final"]["accuracy"]
    assert accuracy >= 0.5  # 10 classes: the model trains beside the canaries
