"""End-to-end runs on Flower 1.42's simulation engine (``fedpriv.scenarios.cli.simulation_runner``,
Ray)."""

import json
import subprocess
import sys

import cv2
import numpy as np
import pytest

from tests.baseline import assert_matches_baseline
from tests.simulate import ROOT, kill_after_round, run_fedpriv, run_fedpriv_cells

pytestmark = pytest.mark.simulation

STRATEGIES = ("fedavg", "fedavgm", "fedmedian", "fedprox", "fedopt", "fedyogi")


@pytest.fixture(scope="module")
def default_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("default")


RESUME_RUN = {
    "num-server-rounds": 6,
    "local-epochs": 1,
    "strategy": "fedyogi",
    "clients-per-round": 3,
}
SIZES = {strategy: 128 if strategy == "fedavg" else 32 for strategy in STRATEGIES}


@pytest.fixture(scope="module")
def plan_runs(default_dir):
    """One simulation whose cells are the default scenario (same seed as the single run
    below) and the six strategies on synthetic-mri (both scenarios have 4 clients).

    FedAvg at MP's 128x128; the other five at image-size 32 (same CNN, 1/16 of the
    compute), which the summary labels as a deviation from MP."""
    runs = {"default": ({}, default_dir / "run1")}
    for strategy in STRATEGIES:
        overrides = {
            "scenario": "synthetic-mri",
            "strategy": strategy,
            "num-server-rounds": 1,
            "local-epochs": 1,
            "privacy": "none",
            "image-size": SIZES[strategy],
        }
        runs[strategy] = (overrides, default_dir / "mri" / strategy)
    return run_fedpriv_cells(runs, default_dir / "plan")


@pytest.fixture(scope="module")
def default_runs(default_dir, plan_runs):
    """The default scenario twice with the same seed: ``fedpriv run`` alone, and as a cell of
    a multi-run simulation after nothing else (the plan's first cell)."""
    return [run_fedpriv({}, default_dir / "run0"), plan_runs["default"]]


def test_default_run_matches_the_baseline(default_runs, default_dir):
    assert default_runs[0][0] == 0, default_runs[0][3]
    assert_matches_baseline("digits-default", default_dir / "run0")


def test_default_scenario_reaches_085_and_writes_outputs(default_runs):
    rc, summary, rounds, log = default_runs[0]
    assert rc == 0, log
    assert summary["final"]["accuracy"] >= 0.85
    for key in ("accuracy", "f1_macro", "precision_macro", "roc_auc_micro"):
        assert 0.0 <= summary["final"][key] <= 1.0
    assert set(summary["last5"]) >= {"accuracy_mean", "accuracy_std"}
    assert summary["seed"] == 0 and summary["config"]["scenario"] == "digits"
    assert [r["round"] for r in rounds] == list(range(summary["config"]["num-server-rounds"] + 1))
    # metric DP (the default) withholds the clients' evaluation metrics (not covered
    # by any accounting; opt in with unaccounted-metrics = true)
    assert all("accuracy" not in r.get("distributed", {}) for r in rounds[1:])
    assert rounds[-1]["sampled"] == [0, 1, 2, 3]


def test_same_seed_gives_identical_round_accuracies(default_runs):
    (rc1, _, r1, log1), (rc2, _, r2, log2) = default_runs
    assert rc1 == 0 and rc2 == 0, log1 + log2
    acc1 = [(r["server"]["accuracy"], r.get("distributed", {}).get("accuracy")) for r in r1]
    acc2 = [(r["server"]["accuracy"], r.get("distributed", {}).get("accuracy")) for r in r2]
    assert acc1 == acc2


def test_all_six_strategies_run_on_synthetic_mri(plan_runs):
    for strategy in STRATEGIES:
        size = SIZES[strategy]
        rc, summary, rounds, log = plan_runs[strategy]
        assert rc == 0, f"{strategy}: {log}"
        assert rounds[-1]["aggregated"], strategy
        assert summary["config"]["strategy"] == strategy
        assert summary["config"]["image-size"] == size
        assert ("deviation from MP" in summary.get("speed", {}).get("deviation", "")) == (
            size < 128
        )


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "fedpriv.scenarios.cli.main", "run", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "override,fragment",
    [
        ("scenario='nope'", "scenario = 'nope'"),
        ("strategy='fedsgd'", "strategy = 'fedsgd'"),
        ("local-epochs=-1", "local-epochs = -1"),
        ("scenario='alzheimer' data-path='/no/such/dir'", "data-path = '/no/such/dir'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(override, fragment):
    proc = _cli("--run-config", override)
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr
    assert fragment in lines[0]


def test_image_folder_with_missing_class_is_one_line_and_exit_2(tmp_path):
    rng = np.random.default_rng(0)
    for name in ("Mild_Demented", "Non_Demented", "Very_Mild_Demented"):
        (tmp_path / name).mkdir()
        for i in range(3):
            cv2.imwrite(
                str(tmp_path / name / f"{i}.png"), rng.integers(0, 255, (128, 128), dtype=np.uint8)
            )
    proc = _cli("--run-config", f"scenario='alzheimer' data-path='{tmp_path}'")
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "Moderate_Demented" in lines[0], proc.stderr


def test_summary_json_is_valid_json_with_config(default_runs):
    _, summary, _, _ = default_runs[0]
    json.dumps(summary)
    assert summary["config"]["strategy"] == "fedavg"


# --- kill a real simulation after round 3 of 6, run the same command again


@pytest.fixture(scope="module")
def uninterrupted(default_dir):
    """The resume test's reference: ``RESUME_RUN`` uninterrupted, ``fedpriv run`` alone. It
    was a cell of the fast tier's plan, which the guard tier then ran whole for that one cell
    (measured on 2 CPUs at a load of 7-8: the guard test 116 -> 67 CPU-s, the fast tier's
    tests of this file 65 -> 46 CPU-s)."""
    return run_fedpriv(RESUME_RUN, default_dir / "full")


# guard tier: a killed run and its resume (~75 s of the fast tier's wall)
@pytest.mark.slow
@pytest.mark.guard
def test_killed_run_resumes_and_equals_an_uninterrupted_run(uninterrupted, tmp_path):
    rc, summary_full, rounds_full, log = uninterrupted
    assert rc == 0, log
    killed_at = kill_after_round(RESUME_RUN, tmp_path / "resumed", 3)
    assert killed_at == 3
    assert not (tmp_path / "resumed" / "summary.json").exists()
    rc, summary, rounds, log = run_fedpriv(RESUME_RUN, tmp_path / "resumed")
    # rounds 4..6 only, and round 3 when the kill left it charged but not evaluated (its
    # model is sent again, its charge not repeated: fedpriv.scenarios.app.resume); the console's
    # round
    # lines, Flower's "[ROUND k/6]" lines are in run.log
    assert rc == 0 and "fedpriv: round 4/6" in log and "fedpriv: round 2/6" not in log, log
    assert [r["round"] for r in rounds] == list(range(7))
    assert rounds == rounds_full
    assert summary["final"] == summary_full["final"]
    # the same command once more: finished, nothing re-run (no Ray start)
    rc, _, rounds_again, log = run_fedpriv(RESUME_RUN, tmp_path / "resumed")
    assert rc == 0 and "finished run" in log and rounds_again == rounds
    # another config on that directory: refused before anything starts
    rc, _, _, log = run_fedpriv({**RESUME_RUN, "seed": 1}, tmp_path / "resumed")
    assert rc == 2 and "output-dir" in log and "seed 0 -> 1" in log, log
    assert json.loads((tmp_path / "resumed" / "summary.json").read_text())["seed"] == 0
