"""Grid report (MP Tables 4–7, App. B, C) from fake run directories; grid cells/completion."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import label_binarize

from fedpriv import grid
from fedpriv.reporting.records import PrivacyFigures
from fedpriv.reporting.report import build_report, mean_roc, write_report

STRATEGIES = ("fedavg", "fedprox")
MODES = ("none", "global-dp", "metric-dp")
SEEDS = (0, 1)
ROUNDS = 7
MISSING = {("fedprox", "metric-dp", 0), ("fedprox", "metric-dp", 1), ("fedavg", "global-dp", 1)}


def _fake_run(root: Path, strategy: str, privacy: str, seed: int, rng: np.random.Generator):
    path = grid.cell_dir(root, strategy, privacy, seed)
    path.mkdir(parents=True)
    server = rng.uniform(0.3, 0.95, ROUNDS)
    distributed = rng.uniform(0.3, 0.95, ROUNDS)
    sigma = rng.uniform(0.001, 0.01, ROUNDS)
    distance = rng.uniform(0.2, 2.0, ROUNDS)
    lines = [{"round": 0, "server": {"accuracy": 0.1}}]
    for r in range(ROUNDS):
        record = {"round": r + 1, "server": {"accuracy": server[r]},
                  "distributed": {"accuracy": distributed[r]}}  # fmt: skip
        if privacy in ("global-dp", "metric-dp"):
            record["dp-sigma"] = sigma[r]
        if privacy == "metric-dp":
            record["dp-distance"] = distance[r]
        lines.append(record)
    (path / "rounds.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    final = {k: float(rng.uniform(0.5, 1.0)) for k in
             ("accuracy", "f1_macro", "precision_macro", "roc_auc_micro")}  # fmt: skip
    summary = {"scenario": "fake", "seed": seed, "final": final,
               "config": {"strategy": strategy, "privacy": privacy, "seed": seed},
               "noise-randomness": "os-entropy" if seed else "seeded: test"}  # fmt: skip
    eps = float(rng.uniform(1, 5))
    if privacy == "global-dp":  # the typed figures the DP summary block writes
        summary[PrivacyFigures.KEY] = PrivacyFigures(
            privacy, bound="replace-one client; fixed size without replacement",
            noise_multiplier=0.01, sigma_mean=float(sigma.mean()), epsilon=eps,
            epsilon_rdp=eps + 1, delta=1e-5).to_json()  # fmt: skip
    if privacy == "metric-dp":  # no ε: the comparison-only figure is not a guarantee
        summary[PrivacyFigures.KEY] = PrivacyFigures(
            privacy, bound="heuristic, no ε", noise_multiplier=0.01,
            sigma_mean=float(sigma.mean()), distance_mean=float(distance.mean()),
            delta=1e-5).to_json()  # fmt: skip
    (path / "summary.json").write_text(json.dumps(summary))
    y = rng.integers(0, 4, 60)
    proba = rng.dirichlet(np.ones(4), 60)
    proba[np.arange(60), y] += rng.uniform(0, 1.5)  # informative scores
    proba /= proba.sum(1, keepdims=True)
    np.savez(path / "test_predictions.npz", y_true=y, proba=proba)
    return dict(server=server, distributed=distributed, final=final, sigma=sigma,
                distance=distance, eps=eps, y=y, proba=proba)  # fmt: skip


@pytest.fixture(scope="module")
def fake_grid(tmp_path_factory):
    root = tmp_path_factory.mktemp("grid")
    rng = np.random.default_rng(7)
    truth = {}
    for s in STRATEGIES:
        for p in MODES:
            for k in SEEDS:
                if (s, p, k) not in MISSING:
                    truth[(s, p, k)] = _fake_run(root, s, p, k, rng)
    # an incomplete run (no summary.json) and a stray directory are ignored
    incomplete = grid.cell_dir(root, "fedavg", "global-dp", 1)
    incomplete.mkdir(parents=True)
    (incomplete / "rounds.jsonl").write_text('{"round": 1, "server": {"accuracy": 1.0}}\n{"rou')
    (root / "plots-old").mkdir()
    path = write_report(root)
    return root, truth, path.read_text()


def _table(text: str, heading_prefix: str) -> dict[str, list[str]]:
    """Rows (first cell -> other cells) of the first table after a heading."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading_prefix))
    rows, in_table = {}, False
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not cells[0].startswith(":"):  # skip the alignment row
                rows.setdefault(cells[0], []).append(cells[1:])
            in_table = True
        elif in_table:
            break
    return {k: v[0] if len(v) == 1 else v for k, v in rows.items()}


def _ms(values) -> str:
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}"


def test_last5_table_is_mean_over_seeds_of_each_seeds_last5_mean(fake_grid):
    _, truth, text = fake_grid
    table = _table(text, "## A. ")
    assert table["Strategy"] == ["Vanilla FL", "Global-DP", "Metric-privacy"]
    assert set(table) == {"Strategy", "FedAvg", "FedProx"}
    for row, strategy in (("FedAvg", "fedavg"), ("FedProx", "fedprox")):
        for col, mode in enumerate(MODES):
            runs = [truth[(strategy, mode, k)] for k in SEEDS if (strategy, mode, k) in truth]
            expected = _ms([r["server"][-5:].mean() for r in runs]) if runs else "—"
            assert table[row][col] == expected, (strategy, mode)
    distributed = _table(text, "## A′. ")
    runs = [truth[("fedavg", "none", k)] for k in SEEDS]
    assert distributed["FedAvg"][0] == _ms([r["distributed"][-5:].mean() for r in runs])


def test_single_seed_cell_has_zero_std_and_missing_cells_are_dashes(fake_grid):
    _, truth, text = fake_grid
    table = _table(text, "## A. ")
    only = truth[("fedavg", "global-dp", 0)]
    assert table["FedAvg"][1] == f"{only['server'][-5:].mean():.3f} ± 0.000"
    assert table["FedProx"][2] == "—"
    coverage = _table(text, "## Complete runs")
    assert coverage["FedAvg"] == ["2", "1", "2"] and coverage["FedProx"] == ["2", "2", "—"]
    assert "fedprox/metric-dp/seed0" in text and "fedavg/global-dp/seed1" in text


def test_final_table_metrics(fake_grid):
    _, truth, text = fake_grid
    table = _table(text, "## B. ")
    keys = ("accuracy", "f1_macro", "precision_macro", "roc_auc_micro")
    for row, strategy in (("FedAvg", "fedavg"), ("FedProx", "fedprox")):
        for m, mode in enumerate(MODES):
            runs = [truth[(strategy, mode, k)] for k in SEEDS if (strategy, mode, k) in truth]
            for j, key in enumerate(keys):
                expected = _ms([r["final"][key] for r in runs]) if runs else "—"
                assert table[row][4 * m + j] == expected, (strategy, mode, key)


def test_privacy_table(fake_grid):
    _, truth, text = fake_grid
    rows = _table(text, "## Privacy")["FedAvg"]  # two rows for FedAvg: global-dp, metric-dp
    by_mode = {r[0]: r[1:] for r in rows}
    gdp, mdp = by_mode["Global-DP"], by_mode["Metric-privacy"]
    g = truth[("fedavg", "global-dp", 0)]
    # every ε is named with what it bounds
    assert gdp[0] == "replace-one client; fixed size without replacement"
    gdp, mdp_bound, mdp = gdp[1:], mdp[0], mdp[1:]
    assert gdp[0] == "0.01" and gdp[1] == f"{g['sigma'].mean():.3g}" and gdp[2] == "—"
    assert gdp[3] == f"{g['eps']:.3g}" and gdp[5] == f"{g['eps'] + 1:.3g}" and gdp[6] == "1e-05"
    assert gdp[4] == "seeded: test"  # the noise randomness next to ε (one seed: seed 0)
    m = [truth[("fedavg", "metric-dp", k)] for k in SEEDS]
    assert mdp[1] == f"{np.mean([r['sigma'].mean() for r in m]):.3g}"
    assert mdp[2] == f"{np.mean([r['distance'].mean() for r in m]):.3g}"
    assert mdp[3] == "—" and "99" not in mdp[3]  # metric DP: a heuristic, no ε
    assert mdp_bound == "heuristic, no ε"
    assert mdp[4] == "os-entropy / seeded: test"  # both seeds' labels
    assert mdp[-1] == "2"


def test_plots_written(fake_grid):
    root, _, text = fake_grid
    for name in ("accuracy_fedavg", "accuracy_fedprox", "roc_fedavg", "roc_fedprox",
                 "accuracy_by_privacy"):  # fmt: skip
        png = root / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
        assert f"(plots/{name}.png)" in text


def test_mean_roc_auc_matches_sklearn_micro_auc(fake_grid):
    root, truth, _ = fake_grid
    runs = [r for r in grid.collect_results(root) if (r.strategy, r.privacy) == ("fedavg", "none")]
    tpr, aucs = mean_roc(runs)
    for run, value in zip(runs, aucs):
        t = truth[("fedavg", "none", run.seed)]
        onehot = label_binarize(t["y"], classes=[0, 1, 2, 3])
        assert value == pytest.approx(roc_auc_score(onehot, t["proba"], average="micro"), abs=1e-9)
    assert tpr[0] == 0 and tpr[-1] == pytest.approx(1) and np.all(np.diff(tpr) >= -1e-12)


def test_dpsgd_columns_and_client_table(tmp_path):
    rng = np.random.default_rng(1)
    _fake_run(tmp_path, "fedavg", "none", 0, rng)
    path = grid.cell_dir(tmp_path, "fedavg", "dp-sgd", 0)
    _fake_run(tmp_path, "fedavg", "dp-sgd", 0, rng)
    summary = json.loads((path / "summary.json").read_text())
    summary["privacy"] = {"mode": "dp-sgd", "dp_sgd": {"epsilon_per_client": {"0": 3.0, "1": 4.5}}}
    summary[PrivacyFigures.KEY] = PrivacyFigures(
        "dp-sgd", bound="add/remove-one example; shuffled batches", noise_multiplier=0.7,
        sigma_mean=0.7 * 2.0, epsilon=4.5, delta=1e-5).to_json()  # fmt: skip
    (path / "summary.json").write_text(json.dumps(summary))
    text, plots = build_report(tmp_path)
    assert "| Strategy | Vanilla FL | DP-SGD |" in text
    row = _table(text, "## Privacy")["FedAvg"]
    assert row[:3] == ["DP-SGD", "add/remove-one example; shuffled batches", "0.7"]
    assert row[3] == "1.4" and row[5] == "4.5"
    clients = _table(text, "### DP-SGD")
    assert clients["Strategy"] == ["client 0", "client 1"] and clients["FedAvg"] == ["3", "4.5"]
    assert len(plots) == 3


def test_empty_directory_and_cli(tmp_path):
    from fedpriv.scenarios.cli.main import main

    text, plots = build_report(tmp_path)
    assert "No complete runs" in text and plots == []
    assert main(["report", str(tmp_path)]) == 0 and (tmp_path / "report.md").exists()
    assert main(["report", str(tmp_path / "nope")]) == 2
    with pytest.raises(ValueError, match="last_k = 0"):
        build_report(tmp_path, last_k=0)


# --- fedpriv.grid ----------------------------------------------------------------------------


def test_cells_and_completion(tmp_path):
    cells = grid.enumerate_cells(strategies=["fedavg", "fedopt"], privacy=["none", "dp-sgd"],
                                 seeds=[3, 4], output_dir=tmp_path)  # fmt: skip
    assert len(cells) == 8 and cells[0].path == tmp_path / "fedavg" / "none" / "seed3"
    assert [c.label for c in cells[:3]] == ["fedavg/none/seed3", "fedavg/none/seed4",
                                            "fedavg/dp-sgd/seed3"]  # fmt: skip
    assert grid.pending(cells) == cells
    cells[1].path.mkdir(parents=True)
    (cells[1].path / "rounds.jsonl").write_text("{}\n")
    assert not grid.is_complete(cells[1].path)  # rounds only: not complete
    (cells[1].path / "summary.json").write_text("{}")
    assert grid.is_complete(cells[1].path) and cells[1] not in grid.pending(cells)
    run = grid.load_run(cells[1].path)
    assert (run.strategy, run.privacy, run.seed) == ("fedavg", "none", 4)  # from the path
    assert math.isnan(run.last_k_mean())


@pytest.mark.parametrize(
    "text,fragment",
    [("", "comma-separated"), ("a,,b", "empty items"), ("a,b,a", "duplicate items a")],
)
def test_parse_list_errors_are_one_line(text, fragment):
    with pytest.raises(grid.GridError, match=fragment) as info:
        grid.parse_list(text, name="strategies")
    assert "\n" not in str(info.value)


def test_parse_seeds_and_choices():
    assert grid.parse_seeds(" 0, 2 ,10") == [0, 2, 10]
    for bad in ("1.5", "-1", "x", str(2**31)):
        with pytest.raises(grid.GridError, match="seeds"):
            grid.parse_seeds(bad)
    with pytest.raises(grid.GridError, match="'fedsgd' is not allowed"):
        grid.check_choices(["fedavg", "fedsgd"], ["fedavg", "fedprox"], name="strategies")
    assert re.fullmatch(r"seed\d+", grid.cell_dir("D", "a", "b", 5).name)
