"""``fedpriv baseline record`` / ``check`` and the one comparer.

The simulation tests record a baseline of two small runs (the default digits scenario,
metric DP, and its global-DP grid cell; 2 rounds, 2 seeds), then plant regressions the
honest way, by running ``check`` with a changed run config, and expect exit 1 naming the
figure: the noise multiplier halved changes ε; the learning rate zeroed takes the accuracy
out of its band. The same check on the unchanged config passes. Three simulations in all
(record, unchanged check, planted check), ~1.5 min idle.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from fedpriv.scenarios.baseline.report import RunVerdicts, summary_line, table, write_junit
from fedpriv.scenarios.cli.main import main

from fedpriv.baseline import (
    RECORD_RULE,
    Band,
    BandRule,
    band_for_seed,
    bands_of_runs,
    compare,
    figure_class,
    make_band,
    record_bands,
    run_figures,
)

ROOT = Path(__file__).resolve().parent.parent
GLOBAL = "digits/fedavg/global-dp"
SMALL = "num-server-rounds=2 local-epochs=1"

# --- the band rule and the comparer (no simulation) ----------------------------------------


def test_seed_spread_band_is_the_documented_formula():
    rule = BandRule(spread_factor=1.5, score_tol=0.02, value_rel=0.1, value_floor=0.01)
    band = make_band("score", [0.90, 0.94, 0.92], rule)
    spread = 0.94 - 0.90
    assert band.lo == pytest.approx(0.90 - 1.5 * spread - 0.02)
    assert band.hi == min(1.0, 0.94 + 1.5 * spread + 0.02) == 1.0  # a score is at most 1
    loss = make_band("value", [2.0, -3.0], rule)  # tol = max(0.01, 0.1 * 3.0) = 0.3
    assert (loss.lo, loss.hi) == pytest.approx((-3.0 - 1.5 * 5.0 - 0.3, 2.0 + 1.5 * 5.0 + 0.3))
    tiny = make_band("value", [0.001, 0.001], rule)  # the floor
    assert (tiny.lo, tiny.hi) == pytest.approx((0.001 - 0.01, 0.001 + 0.01))
    assert not band.contains(band.lo - 1e-9) and band.contains(band.lo) and band.contains(1.0)


def test_classes_exact_where_training_does_not_matter():
    assert figure_class("privacy.epsilon", data_dependent_sigma=False) == "exact"
    assert figure_class("round[2].dp-sigma", data_dependent_sigma=False) == "exact"
    # metric DP: σ = f(measured distance) depends on training
    assert figure_class("round[2].dp-sigma", data_dependent_sigma=True) == "value"
    assert figure_class("privacy.sigma_mean", data_dependent_sigma=True) == "value"
    assert figure_class("privacy.delta", data_dependent_sigma=True) == "exact"
    assert figure_class("final.accuracy", data_dependent_sigma=False) == "score"
    assert figure_class("sweep3/round[1].server.loss", data_dependent_sigma=False) == "value"
    assert figure_class("round[1].sampled[0]", data_dependent_sigma=False) == "exact"
    assert figure_class("round[1].dp-clipped[0]", data_dependent_sigma=False) == "choice"


def test_exact_figures_are_per_seed_and_bands_span_the_seeds():
    runs = {
        0: {"privacy.epsilon": 3.0, "round[1].sampled[0]": 2.0, "final.accuracy": 0.8},
        1: {"privacy.epsilon": 3.0, "round[1].sampled[0]": 1.0, "final.accuracy": 0.9},
    }
    entries = bands_of_runs(runs, BandRule(spread_factor=1.0, score_tol=0.0))
    assert band_for_seed(entries["round[1].sampled[0]"], 0) == Band("exact", exact=2.0)
    assert band_for_seed(entries["round[1].sampled[0]"], 1) == Band("exact", exact=1.0)
    assert band_for_seed(entries["privacy.epsilon"], 7) is None  # a seed not recorded
    acc = band_for_seed(entries["final.accuracy"], 0)
    assert (acc.lo, acc.hi) == pytest.approx((0.7, 1.0))
    got = {"privacy.epsilon": 3.0 * (1 + 1e-4), "round[1].sampled[0]": 2.0}
    verdicts = {
        v.name: v for v in compare({k: band_for_seed(e, 0) for k, e in entries.items()}, got)
    }
    assert not verdicts["privacy.epsilon"].ok  # exact: a 1e-4 relative change is caught
    assert verdicts["round[1].sampled[0]"].ok
    assert verdicts["final.accuracy"].value is None and not verdicts["final.accuracy"].ok


def test_repository_records_use_the_same_comparer_with_their_rule():
    line = {"server.accuracy": 0.5, "server.loss": 1.0, "dp-sigma": 0.2, "dp-clipped[0]": 1.0}
    bands = record_bands(line)
    assert "dp-clipped[0]" not in bands  # a choice: not compared
    assert bands["server.accuracy"].contains(0.5 + RECORD_RULE.score_tol - 1e-9)
    assert not bands["server.accuracy"].contains(0.5 + RECORD_RULE.score_tol + 1e-6)
    assert bands["server.loss"].contains(1.0 * (1 + RECORD_RULE.value_rel) - 1e-9)
    assert not bands["dp-sigma"].contains(0.2 * 1.001)  # no distance: σ exact
    assert record_bands({**line, "dp-distance": 1.0})["dp-sigma"].contains(0.2 * 1.001)


def test_run_figures_reads_rounds_and_summary(tmp_path):
    (tmp_path / "rounds.jsonl").write_text(
        json.dumps({"round": 1, "server": {"accuracy": 0.5}, "wall_seconds": 3.0}) + "\n"
    )
    summary = {"final": {"accuracy": 0.5}, "privacy_figures": {"mode": "global-dp",
               "epsilon": 2.5, "delta": 1e-5, "sigma_mean": None}}  # fmt: skip
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert run_figures(tmp_path) == {
        "final.accuracy": 0.5,
        "privacy.epsilon": 2.5,
        "privacy.delta": 1e-5,
        "round[0].round": 1.0,
        "round[0].server.accuracy": 0.5,
    }


def test_table_and_junit_name_each_regression(tmp_path):
    band = Band("score", lo=0.8, hi=0.9)
    results = [
        RunVerdicts("a seed 0", compare({"final.accuracy": band, "round[1].x": band},
                                        {"final.accuracy": 0.1, "round[1].x": 0.85})),
        RunVerdicts("b seed 0", (), failed=True),
    ]  # fmt: skip
    text = "\n".join(table(results))
    assert "final.accuracy" in text and "REGRESSION" in text and "FAILED" in text
    assert "round[1].x" not in text  # per-round rows only when out of band
    line = summary_line(results)
    assert "a seed 0: final.accuracy" in line and "b seed 0: run failed" in line
    root = ET.parse(write_junit(tmp_path / "j.xml", results, 1.0)).getroot()
    assert (root.get("tests"), root.get("failures")) == ("3", "2")
    failed = [c.get("name") for c in root.iter("testcase") if c.find("failure") is not None]
    assert failed == ["final.accuracy", "run"]


# --- bad input: one line, exit 2, nothing written ---------------------------------------------


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["record", "nosuch"], "scenario = 'nosuch'"),
        (["record", "digits/fedavg"], "target = 'digits/fedavg'"),
        (["record", "digits", "-c", "no-such-key=1"], "no-such-key"),
        (["record", "digits", "-c", "seed=3"], "--run-config seed"),
        (["record", "digits", "--seeds", "0,x"], "seeds"),
        (["record", "digits", "--spread-factor", "-1"], "--spread-factor"),
        (["check", "missing.json"], "cannot read baseline"),
    ],
)
def test_bad_input_is_one_line_before_anything_runs(argv, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    work = tmp_path / "work"
    assert main(["baseline", *argv, "--work-dir", str(work)]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
    assert not work.exists() and not (tmp_path / "fedpriv-baseline.json").exists()


def test_check_refuses_targets_and_seeds_not_recorded(tmp_path, capsys):
    doc = {"format": "fedpriv-baseline/1", "seeds": [0, 1], "run-config": {}, "rule": {},
           "targets": {"digits": {"overrides": {"scenario": "digits"}, "figures": {}}}}  # fmt: skip
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc))
    assert main(["baseline", "check", str(path), "--only", "cia"]) == 2
    assert "--only = 'cia'" in capsys.readouterr().err
    assert main(["baseline", "check", str(path), "--seeds", "5"]) == 2
    assert "--seeds = 5" in capsys.readouterr().err
    path.write_text("{}")
    assert main(["baseline", "check", str(path)]) == 2
    assert "not a baseline file" in capsys.readouterr().err


# --- record, plant regressions, check -------------------------------------------------------


def fedpriv_baseline(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.main", "baseline", *args]
    return subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    base = tmp_path_factory.mktemp("baseline")
    out = base / "baseline.json"
    proc = fedpriv_baseline("record", "digits", GLOBAL, "--seeds", "0,1", "-c", SMALL,
                            "--out", str(out), "--work-dir", str(base / "record"))  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, json.loads(out.read_text()), base


@pytest.mark.slow
@pytest.mark.simulation
def test_record_writes_exact_privacy_and_banded_accuracy(recorded):
    _, doc, _ = recorded
    assert doc["seeds"] == [0, 1] and sorted(doc["targets"]) == sorted(["digits", GLOBAL])
    dp = doc["targets"][GLOBAL]["figures"]
    eps = dp["privacy.epsilon"]["exact"]
    assert eps["0"] == eps["1"] and math.isfinite(eps["0"]) and eps["0"] > 0
    assert "exact" in dp["round[2].dp-sigma"] and "band" in dp["final.accuracy"]
    acc = dp["final.accuracy"]["band"]
    assert 0 < acc["hi"] - acc["lo"] < 0.5
    metric = doc["targets"]["digits"]["figures"]
    assert "band" in metric["privacy.sigma_mean"]  # metric DP: σ scales with d
    assert "privacy.epsilon" not in metric  # metric DP reports no ε


@pytest.mark.slow
@pytest.mark.simulation
def test_check_unchanged_passes_and_writes_junit(recorded):
    out, _, base = recorded
    junit = base / "unchanged.xml"
    proc = fedpriv_baseline("check", str(out), "--seeds", "0", "--junit", str(junit),
                            "--work-dir", str(base / "unchanged"))  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert "no regression" in proc.stdout.splitlines()[-1]
    root = ET.parse(junit).getroot()
    assert root.get("failures") == "0" and int(root.get("tests")) > 10


@pytest.mark.slow
@pytest.mark.simulation
def test_check_flags_each_planted_regression_by_its_figure(recorded):
    """One check, one regression planted in each target (``--target-config``): the global-DP
    run with its noise multiplier halved, the metric-DP run with its learning rate zeroed
    (1e-9: the key must be > 0). Each is flagged in its own run by its own figure (the runs
    are independent cells of one simulation), and z and δ of the metric-DP run stay equal."""
    out, doc, base = recorded
    z = doc["targets"][GLOBAL]["figures"]["privacy.noise_multiplier"]["exact"]["0"]
    junit = base / "planted.xml"
    proc = fedpriv_baseline("check", str(out), "--seeds", "0",
                            "--target-config", GLOBAL, f"noise-multiplier={z / 2}",
                            "--target-config", "digits", "learning-rate=1e-9",
                            "--junit", str(junit), "--work-dir", str(base / "planted"))  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-3000:]
    last = proc.stdout.splitlines()[-1]  # "... regression(s): run: a, b (+n more); run: ..."
    named = dict(part.split(": ", 1) for part in last.split("regression(s): ", 1)[1].split("; "))
    assert "privacy.epsilon" in named[f"{GLOBAL} seed 0"]
    assert "final.accuracy" in named["digits seed 0"]
    suites = {s.get("name"): s for s in ET.parse(junit).getroot()}
    failed = {label: {c.get("name") for c in suite if len(c)} for label, suite in suites.items()}
    noise, lr = failed[f"{GLOBAL} seed 0"], failed["digits seed 0"]
    assert {"privacy.epsilon", "privacy.noise_multiplier", "round.dp-epsilon"} <= noise
    assert "final.accuracy" in lr and "round.server.accuracy" in lr
    assert not {"privacy.noise_multiplier", "privacy.delta"} & lr  # z and δ unchanged there
    row = next(x for x in proc.stdout.splitlines() if x.startswith("digits seed 0 ")
               and " final.accuracy " in x)  # fmt: skip
    assert row.rstrip().endswith("REGRESSION")
