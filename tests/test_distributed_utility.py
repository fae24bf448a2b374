"""The distributed-DP utility page's own code (bench/distributed_utility.py,
bench/distributed_utility_page.py) and its results-check claim, on synthesized run
directories: mean ± std over seeds, the gap to central DP against 0.03 and to LDP, LDP's ε
read from the zonal block, the legend outside the data, and the like-for-like settings."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from bench import distributed_utility as du
from bench import distributed_utility_page as page_of
from bench import privacy_utility as pu
from bench import results_claims

ACCS = {  # (method, ε) -> accuracy of seeds 0, 1
    (du.DISTRIBUTED_16, 8.0): (0.84, 0.86),
    (du.CENTRAL, 8.0): (0.86, 0.87),
    (du.LDP, 8.0): (0.30, 0.20),
    (du.DISTRIBUTED_16, 2.0): (0.50, 0.54),
    (du.CENTRAL, 2.0): (0.60, 0.62),
    (du.LDP, 2.0): (0.10, 0.12),
    (du.DISTRIBUTED_16_CENTRAL_Z, 2.0): (0.59, 0.63),
}


def _cell(out: Path, method: pu.Method, epsilon: float, seed: int, acc: float) -> None:
    path = pu.cell_dir(out, method, epsilon, seed)
    path.mkdir(parents=True)
    if method is du.LDP:  # zonal: no headline, the per-level figure against the zone node
        privacy: dict = {"mode": "zonal"}
        ldp = {"ldp": {"pld": 0.98 * epsilon, "rdp": 1.1 * epsilon}}
        zonal = {"epsilon": {"against_zone_node": {"epsilon": ldp}}}
    else:
        privacy, zonal = {"epsilon": 0.99 * epsilon}, {}
    summary = {"final": {"accuracy": acc}, "privacy": privacy, "zonal": zonal, "wall_seconds": 60}
    (path / "summary.json").write_text(json.dumps(summary))
    config = {"noise-multiplier": str(4.0 / epsilon)}
    (path / "run-config.json").write_text(json.dumps({"config": config}))


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    for (method, epsilon), accs in ACCS.items():
        for seed, acc in enumerate(accs):
            _cell(tmp_path, method, epsilon, seed, acc)
    return tmp_path


def test_table_is_mean_and_sample_std_with_ldp_epsilon_from_the_zonal_block(grid: Path) -> None:
    rows = page_of.read_cells(grid)
    table = page_of.aggregate(rows)
    stat = table[(du.DISTRIBUTED_16.name, 2.0)]
    assert stat["mean"] == pytest.approx(0.52)
    assert stat["std"] == pytest.approx(statistics.stdev([0.50, 0.54]))
    assert stat["z"] == pytest.approx(2.0)
    ldp = [r["reported_epsilon"] for r in rows if r["method"] == du.LDP.name and r["epsilon"] == 8]
    assert ldp == [pytest.approx(0.98 * 8)] * 2


def test_gap_lines_hold_distributed_within_0_03_of_central_and_above_ldp(grid: Path) -> None:
    lines = page_of.gap_lines(page_of.aggregate(page_of.read_cells(grid)))
    at2, same_z, at8 = lines
    assert same_z == "  - at central DP's z (equal noise, ε above the target): distributed − " \
        "central = +0.000 (seeds [0, 1])"  # fmt: skip
    assert at8.startswith("- ε = 8: distributed − central = -0.015 (within 0.03)")
    assert "distributed − LDP = +0.600 (above LDP)" in at8
    assert "-0.090 (**not** within 0.03)" in at2


def test_page_names_its_command_and_cells_and_puts_the_legend_below(grid, tmp_path) -> None:
    page, plot = tmp_path / "site" / "p.md", tmp_path / "site" / "p.png"
    text = page_of.report(grid, page, plot)
    assert "`make distributed-dp-utility`" in text.splitlines()[2]
    assert f"- {du.CENTRAL.name}, ε = 8: seeds [0, 1]" in text
    # the noise table: the cells' z (4/ε here), the Gaussian's z under Zhu & Wang's general
    # bound and under its exact sampled RDP (tests/test_distributed_accounting.py: 4.115, 2.34)
    assert "| 2 | 2.00 | 4.12 | 2.34 | 2.00 |" in text
    assert plot.is_file() and "![accuracy against ε](p.png)" in text
    table = page_of.aggregate(page_of.read_cells(grid))
    import matplotlib.pyplot as plt

    captured = {}
    real_savefig = plt.Figure.savefig

    def keep(fig, *args, **kwargs):
        captured["fig"] = fig
        return real_savefig(fig, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt.Figure, "savefig", keep)
        page_of.plot(table, tmp_path / "again.png")
    fig = captured["fig"]
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    assert legend.y1 < ax.get_window_extent().y0  # entirely below the axes


def test_claim_holds_on_the_pages_ordering_and_fails_when_it_breaks(tmp_path: Path) -> None:
    run = tmp_path / "check"
    for method, acc in ((du.DISTRIBUTED_16, 0.41), (du.CENTRAL, 0.45), (du.LDP, 0.2)):
        _cell(run / "run", method, 8.0, 0, acc)
    assert results_claims.distributed_utility(run) == []
    bad = tmp_path / "bad"
    for method, acc in ((du.DISTRIBUTED_16, 0.15), (du.CENTRAL, 0.45), (du.LDP, 0.2)):
        _cell(bad / "run", method, 8.0, 0, acc)
    failures = results_claims.distributed_utility(bad)
    assert any("more than 0.15 below central DP" in f for f in failures)
    above = tmp_path / "above"  # above central DP is not a failure of the claim
    for method, acc in ((du.DISTRIBUTED_16, 0.47), (du.CENTRAL, 0.37), (du.LDP, 0.2)):
        _cell(above / "run", method, 8.0, 0, acc)
    assert results_claims.distributed_utility(above) == []
    assert any("not above LDP" in f for f in failures)
    assert any("below 0.2" in f for f in failures)


def test_distributed_and_central_share_the_relation_rate_and_denominator() -> None:
    dist, cent = du.DISTRIBUTED_16.overrides, du.CENTRAL.overrides
    assert dist["distributed-relation"] == "poisson" and cent["client-sampling"] == "poisson"
    expected = pu.BASE["clients-per-round"] / pu.BASE["num-clients"]
    assert dist["distributed-inclusion-rate"] == pytest.approx(expected)
    assert dist["distributed-threshold"] == pu.BASE["num-clients"]  # t = n: noise as accounted
    assert dist["distributed-bits"] == 16 and du.scale_for(16) == 1024.0
    assert du.LDP.overrides["noise-placement"] == "ldp"


def test_each_distributed_cell_runs_in_a_simulation_of_its_own() -> None:
    """A distributed-DP node takes part in at most num-server-rounds rounds across every run
    of a simulation (a second cell there failed every round): each cell gets its own."""
    values = {**pu.BASE, "privacy": "distributed-dp", **du.DISTRIBUTED_16.overrides}
    values.update({"seed": 2, "noise-multiplier": 0.7, "output-dir": "x"})
    top = pu.simulation_top(du.DISTRIBUTED_16, values)
    assert top["seed"] == 2 and top["distributed-bits"] == 16 and "output-dir" not in top
    assert pu.simulation_top(du.CENTRAL, values) == {"scenario": "digits", "num-clients": 100}
    assert pu.simulation_top(du.LDP, values) == {"scenario": "digits", "num-clients": 100}
