"""``fedpriv compare``: three seeds of two configs -> mean ± std per config, and the plot.

The run directories are written with the run's own writer (:class:`RunLog`: rounds.jsonl,
operator.jsonl and summary.json as a finished run leaves them); the means and (population)
standard deviations are recomputed here with :mod:`statistics`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from fedpriv.scenarios.cli.main import main

from fedpriv.reporting.compare import group_runs, load_run, per_round, run_dirs
from fedpriv.reporting.runlog import RunLog

SEEDS = (0, 1, 2)
ROUNDS = 4
BASE = {"scenario": "digits", "strategy": "fedavg", "num-server-rounds": ROUNDS}


def _accuracy(privacy: str, seed: int, r: int) -> float:
    return 0.5 + 0.1 * r - (0.05 if privacy == "global-dp" else 0.0) + 0.01 * seed * r


def _write_run(root: Path, privacy: str, seed: int) -> Path:
    out = root / privacy / f"seed{seed}"
    params = {**BASE, "privacy": privacy, "seed": seed, "output-dir": str(out)}
    log = RunLog(out)
    for r in range(ROUNDS + 1):
        line = {"round": r, "server": {"accuracy": _accuracy(privacy, seed, r) if r else 0.1}}
        if privacy == "global-dp" and r:
            line.update({"dp-sigma": 0.3, "dp-epsilon": 0.9 * r, "sampled": [0, 1]})
        log.append_round(line)
    figures = {"mode": privacy}
    if privacy == "global-dp":
        figures.update({"epsilon": 0.9 * ROUNDS, "sigma_mean": 0.3, "delta": 1e-5})
    log.write_summary({
        "config": params, "seed": seed,
        "final": {"accuracy": _accuracy(privacy, seed, ROUNDS)},
        "last5": {"accuracy_mean": _accuracy(privacy, seed, ROUNDS) - 0.1},
        "privacy_figures": figures,
    })  # fmt: skip
    return out


@pytest.fixture
def runs(tmp_path) -> list[Path]:
    return [_write_run(tmp_path / "runs", p, s) for p in ("none", "global-dp") for s in SEEDS]


def _mean_std(values: list[float]) -> str:
    return f"{statistics.fmean(values):.4f} ± {statistics.pstdev(values):.4f}"


def test_compare_prints_mean_and_std_over_seeds_and_writes_the_plot(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", *map(str, runs), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if "seeds" not in line}
    for privacy in ("none", "global-dp"):
        row = rows[f"privacy={privacy}"]
        finals = [_accuracy(privacy, s, ROUNDS) for s in SEEDS]
        assert _mean_std(finals) in row  # final accuracy
        assert _mean_std([f - 0.1 for f in finals]) in row  # last-5 accuracy
        assert "| 0,1,2 |" in row
    assert "3.600" in rows["privacy=global-dp"]  # ε = 0.9 · 4, the same for every seed
    png = out / "compare.png"
    assert png.read_bytes().startswith(b"\x89PNG") and (out / "compare.md").read_text() in text
    assert "mean ± std" in text and str(png) in text


def test_groups_are_configs_that_differ_only_in_the_seed(runs):
    groups = group_runs([load_run(p) for p in runs])
    assert [g.label for g in groups] == ["privacy=none", "privacy=global-dp"]
    assert [[r.seed for r in g.runs] for g in groups] == [list(SEEDS), list(SEEDS)]
    rounds, mean, std = per_round(groups[1].runs, lambda r: r.metric("server", "accuracy"))
    assert rounds == list(range(1, ROUNDS + 1))
    for i, r in enumerate(rounds):
        values = [_accuracy("global-dp", s, r) for s in SEEDS]
        assert mean[i] == pytest.approx(statistics.fmean(values))
        assert std[i] == pytest.approx(statistics.pstdev(values))
    rounds, eps, _ = per_round(groups[1].runs, lambda r: r.epsilon())
    assert list(eps) == pytest.approx([0.9 * r for r in rounds])


def test_a_folder_of_runs_is_every_run_below_it_and_json_rows(runs, tmp_path, capsys):
    assert run_dirs([tmp_path / "runs"]) == sorted(runs)
    assert main(["compare", str(tmp_path / "runs"), "--out", str(tmp_path / "c"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["label"] for r in rows) == ["privacy=global-dp", "privacy=none"]
    assert all(len(r["seeds"]) == 3 for r in rows)


def test_a_directory_without_a_run_is_one_line_and_status_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(tmp_path / "empty"), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no summary.json" in err and "empty" in err
