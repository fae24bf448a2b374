"""DP-FTRL with shuffled epochs against DP-FedAvg under the same neighbouring relation and
clients per round (slow: twelve 20-round runs).

digits, 100 clients, 20 a round, the privacy-utility page's setting
(:data:`bench.privacy_utility.BASE`), panel (b): DP-FTRL at the planner's z for ε under
replace-special (dp_accounting's tree events; its reported ε equals an independent
dp_accounting computation) against DP-FedAvg with Poisson sampling at q = 0.2 (20 expected)
at the planner's z for ε under add/remove, which for a sum divided by a fixed 20 bounds
replace-special too. The must-show: at ε = 8 and ε = 4, DP-FTRL's mean final accuracy over
seeds 0-2 is within 0.05 of DP-FedAvg's or above it. It is not met on this setting (the test
reports it as an expected failure with its numbers, and fails on a wrong ε or on a gap below
:data:`FLOOR`, what holds now). Before this comparison the claim was
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


# Not met (docs/privacy.md, DP-FTRL, measured 2026-12-07 on the loaded 2-core machine): the
# seeds below (reproducible noise) give ε 8: 0.815 vs 0.869 (-0.054), ε 4: 0.667 vs 0.841
# (-0.174); 12 runs each at ε 8 (3 secret-noise + 9 reproducible seeds): 0.813 vs 0.872.
NOT_MET = (
    "DP-FTRL {ftrl:.3f} vs Poisson DP-FedAvg {fedavg:.3f} at ε = {epsilon:g} ({gap:+.3f}): "
    "not within 0.05 (docs/privacy.md, DP-FTRL: no amplification, 3x the per-round noise; "
    "clipping norm, momentum and 4-leaf trees measured, none closes it)"
)
# what holds now, with room for the spread of seeds: a regression here is a change, not noise
FLOOR = {8.0: -0.12, 4.0: -0.30}


@pytest.mark.parametrize("epsilon", [8.0, 4.0])
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
    gap = accuracy["ftrl"] - accuracy["fedavg"]
    assert gap >= FLOOR[epsilon], accuracy
    if gap < -0.05:  # the must-show, not met: reported with its numbers, not passed
        pytest.xfail(NOT_MET.format(epsilon=epsilon, gap=gap, **accuracy))
