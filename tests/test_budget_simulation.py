"""``max-epsilon`` in a real ``fedpriv run`` simulation: a global-DP run stops before the round
that would pass the budget, cleanly (exit 0, summary.json written, ε within the budget)."""

from __future__ import annotations

import pytest
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.specs import run_spec

from fedpriv.privacy.accounting.rounds import global_dp_epsilon
from tests.simulate import IN_PROCESS, run_fedpriv

pytestmark = pytest.mark.simulation


@pytest.mark.slow
@pytest.mark.guard
def test_max_epsilon_stops_a_global_dp_run_before_the_budget_is_passed(tmp_path):
    overrides = {
        "scenario": "digits",
        "privacy": "global-dp",
        "noise-multiplier": 1.0,
        "clipping-norm": 1.0,
        "num-server-rounds": 5,
        "local-epochs": 1,
        "seed": 0,
    }
    cfg = CATALOG.resolve_run_config(overrides)
    part, delta = run_spec(cfg).participation, float(cfg["dp-delta"])

    def eps(rounds: int) -> float:  # independently: the accountant fed `rounds` full rounds
        return float(global_dp_epsilon([1.0] * rounds, part, delta=delta)["epsilon"])

    budget = (eps(2) + eps(3)) / 2
    rc, summary, rounds, tail = run_fedpriv(
        {**overrides, "max-epsilon": budget}, tmp_path / "r", extra_args=IN_PROCESS
    )
    assert rc == 0, tail
    assert summary is not None and (tmp_path / "r" / "final_model.keras").exists()
    trained = [r for r in rounds if r["round"] > 0]
    assert len(trained) == 2 < int(cfg["num-server-rounds"])
    assert all(r["dp-noised"] and r["aggregated"] for r in trained)
    reported = summary["privacy"]["epsilon"]["epsilon"]
    assert reported == pytest.approx(eps(2)) and reported <= budget
    assert trained[-1]["dp-epsilon"] == pytest.approx(reported)
    assert eps(3) > budget  # one more round would have passed the budget
    assert summary["stopped"] == (
        f"max-epsilon {budget:g} would be exceeded at round 3 (epsilon {eps(3):.4g})"
    )
    assert summary["config"]["max-epsilon"] == budget
