"""The privacy–utility page's own code (bench/privacy_utility.py) on synthesized run
directories: the table's mean ± std, the reported-ε check, the DP-FTRL comparison line, the
plot file, and each cell's noise multiplier from the planner."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from bench import privacy_utility as pu
from bench import privacy_utility_page as page_of


def _cell(out: Path, method: pu.Method, epsilon: float | None, seed: int, acc: float) -> None:
    path = pu.cell_dir(out, method, epsilon, seed)
    path.mkdir(parents=True)
    z = None if epsilon is None else 10.0 / epsilon
    privacy = {} if epsilon is None else {"epsilon": {"epsilon": 0.99 * epsilon}}
    if method is pu.METHODS[2]:  # DP-FTRL: 20 sampled, 0 and 4 already in the tree
        privacy.update(num_sampled_clients=20, repeat_excluded_per_round=[0, 4 + seed * 2])
        privacy["epsilon"]["adjacency"] = "replace-special"
    summary = {"final": {"accuracy": acc}, "privacy": privacy, "wall_seconds": 30.0}
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "run-config.json").write_text(json.dumps({"config": {"noise-multiplier": z}}))


ACCS = {  # (method index, ε) -> accuracy of seeds 0, 1
    (0, 2.0): (0.50, 0.60),
    (2, 2.0): (0.40, 0.44),
    (4, 2.0): (0.30, 0.20),
    (2, 8.0): (0.70, 0.72),
    (4, 8.0): (0.80, 0.90),
}


@pytest.fixture()
def grid(tmp_path: Path) -> Path:
    for (index, eps), accs in ACCS.items():
        for seed, acc in enumerate(accs):
            _cell(tmp_path, pu.METHODS[index], eps, seed, acc)
    for seed in (0, 1):
        _cell(tmp_path, pu.NO_DP, None, seed, 0.95)
    return tmp_path


def test_table_is_mean_and_sample_std_over_seeds(grid: Path) -> None:
    table = page_of.aggregate(page_of.read_cells(grid))
    for (index, eps), accs in ACCS.items():
        stat = table[(pu.METHODS[index].name, eps)]
        assert stat["mean"] == pytest.approx(sum(accs) / 2)
        assert stat["std"] == pytest.approx(statistics.stdev(accs))
        assert stat["seeds"] == [0, 1] and stat["z"] == pytest.approx(10.0 / eps)
    text = page_of.markdown_table(table)
    assert "| fixed clipping (DP-FedAvg) | 0.550 ± 0.071 (z 5.00) | — |" in text
    assert "no DP (ε = ∞) | 0.950 ± 0.000" in text


def test_page_plot_and_ftrl_comparison(grid: Path, tmp_path: Path) -> None:
    page, png = tmp_path / "docs" / "page.md", tmp_path / "docs" / "plot.png"
    text = page_of.report(grid, page, png)
    assert page.read_text() == text and png.stat().st_size > 1000
    assert "![accuracy against ε](plot.png)" in text
    # ε = 2: 0.42 vs 0.25 beats by 0.17; ε = 8: 0.71 vs 0.85 does not beat by 0.14
    assert "- ε = 2: DP-FTRL 0.420 vs DP-FedAvg, all clients 0.250: beats it by 0.170" in text
    assert (
        "- ε = 8: DP-FTRL 0.710 vs DP-FedAvg, all clients 0.850: does not beat it by 0.140" in text
    )
    assert "DP-FTRL (tree) at ε = 8: reported 7.920" in text
    assert "- DP-FTRL (tree): replace-special" in text
    # participants per round: seed 0 20 - 2 = 18, seed 1 20 - 3 = 17 -> mean 17.5
    assert "- DP-FTRL (tree), ε = 2: participants/round 17.5" in text


def test_each_cell_runs_at_the_planner_z(tmp_path: Path) -> None:
    from fedpriv.privacy.accounting.target import noise_for_target

    fixed, budgets = pu.METHODS[0], pu.METHODS[3]
    cfg = pu.cell_overrides(fixed, 4.0, 0, tmp_path, 5)
    spec = pu._spec(pu._resolve({k: v for k, v in cfg.items() if k != "noise-multiplier"}))
    assert cfg["noise-multiplier"] == pytest.approx(noise_for_target(spec, 4.0)["noise_multiplier"])
    spec_at_z = pu._spec(pu._resolve(cfg))
    from fedpriv.privacy.accounting.target import epsilon_function

    assert epsilon_function(spec_at_z)(cfg["noise-multiplier"]) <= 4.0
    own = pu.cell_overrides(budgets, 4.0, 0, tmp_path, 5)
    assert own["client-epsilon-groups"] == "4" and own["clients-per-round"] == 0
    assert own["noise-multiplier"] == cfg["noise-multiplier"]
    # the no-amplification row at 20 per round runs at the all-clients row's z
    full, sampled = pu.METHODS[4], pu.METHODS[5]
    z_full = pu.cell_overrides(full, 4.0, 0, tmp_path, 5)["noise-multiplier"]
    row = pu.cell_overrides(sampled, 4.0, 0, tmp_path, 5)
    assert row["noise-multiplier"] == z_full > cfg["noise-multiplier"]
    assert row.get("clients-per-round", pu.BASE["clients-per-round"]) == 20


def test_client_budgets_cells_run_in_a_simulation_of_their_own_config(tmp_path: Path) -> None:
    """The budget and the rounds are the nodes' own (release keys): the simulation's config
    must be the cell's, or every client refuses the message."""
    budgets = pu.METHODS[3]
    values = pu.cell_overrides(budgets, 2.0, 1, tmp_path, 5)
    top = pu.simulation_top(budgets, values)
    assert top["client-epsilon-groups"] == "2" and top["num-server-rounds"] == 5
    assert top["noise-multiplier"] == values["noise-multiplier"]
    assert top["seed"] == 1 and "output-dir" not in top  # one simulation per cell
    shared = pu.simulation_top(pu.METHODS[0], pu.cell_overrides(pu.METHODS[0], 2.0, 1, tmp_path, 5))
    assert shared == {"scenario": "digits", "num-clients": 100}
