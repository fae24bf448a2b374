"""DP-FTRL with shuffled epochs against DP-FedAvg under the same neighbouring relation and
clients per round (slow: twelve 20-round runs).

digits, 100 clients, 20 a round, the privacy-utility page's setting
(:data:`bench.privacy_utility.BASE`), panel (b): DP-FTRL at the planner's z for ε under
replace-special (dp_accounting's tree events; its reported ε equals an independent
dp_accounting computation) against DP-FedAvg with Poisson sampling at q = 0.2 (20 expected)
at the planner's z for ε under add/remove, which for a sum divided by a fixed 20 bounds
replace-special too. The must-show: at ε = 8 and ε = 4, DP-FTRL's mean final accuracy over
seeds 0-2 is within 0.05 of DP-FedAvg's or above it. Before this comparison the claim was
measured against fixed-size replace-one DP-FedAvg, a different relation (docs/privacy.md:
0.804 vs 0.826 at ε 8, 0.687 vs 0.694 at ε 4). The fast tier checks the sampling, the
divisor and ε (``tests/test_dp_ftrl_epochs.py``).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import dp_accounting
import pytest

from bench import privacy_utility as pu
from tests.simulate import run_fedpriv_cells

pytestmark = [pytest.mark.simulation, pytest.mark.slow]
SEEDS = (0, 1, 2)


def replace_special_epsilon(z: float, trees: int, leaves: int) -> float:
    """dp_accounting's ε at δ = 1e-5 of ``trees`` trees of ``leaves`` leaves at z."""
    accountant = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL
    )
    accountant.compose(dp_accounting.SingleEpochTreeAggregationDpEvent(z, leaves), trees)
    return accountant.get_epsilon(1e-5)


MEASURED_GAP_AT_4 = (
    "not met at ε = 4 (docs/results/privacy-utility.md, 3 seeds, 2026-12-07): DP-FTRL 0.659 ± "
    "0.186 vs Poisson DP-FedAvg 0.869 ± 0.032; at ε = 8 0.820 vs 0.861 (-0.041) meets it"
)


@pytest.mark.parametrize(
    "epsilon",
    [8.0, pytest.param(4.0, marks=pytest.mark.xfail(reason=MEASURED_GAP_AT_4, strict=True))],
)
def test_dp_ftrl_keeps_up_with_dp_fedavg_under_the_same_relation(tmp_path: Path, epsilon):
    methods = {"ftrl": pu.FTRL, "fedavg": pu.POISSON_FEDAVG}
    runs, zs = {}, {}
    for name, method in methods.items():
        zs[name] = pu.noise_for(method, epsilon, pu.BASE["num-server-rounds"])
        for seed in SEEDS:
            values = {**pu.BASE, "privacy": method.mode, **method.overrides}
            values.update({"noise-multiplier": zs[name], "seed": seed})
            runs[f"{name}-{seed}"] = (values, tmp_path / f"{name}-{seed}")
    results = run_fedpriv_cells(runs, tmp_path / "plan")
    accuracy = {}
    for name in methods:
        finals = []
        for seed in SEEDS:
            status, summary, _, log = results[f"{name}-{seed}"]
            assert status == 0, log[-2000:]
            reported = summary["privacy"]["epsilon"]["epsilon"]
            assert reported <= epsilon * 1.001
            if name == "ftrl":  # 20 rounds = 4 epochs of 5 rounds, one tree each
                assert reported == pytest.approx(replace_special_epsilon(zs[name], 4, 5), rel=1e-9)
            finals.append(float(summary["final"]["accuracy"]))
        accuracy[name] = statistics.fmean(finals)
    assert accuracy["ftrl"] >= accuracy["fedavg"] - 0.05, accuracy
