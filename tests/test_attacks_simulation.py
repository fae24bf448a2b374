"""The client inference attack in a real Flower simulation (``fedpriv run``), then the report
and the membership command on its run directories.

One simulation of ``cia-digits`` (3 IID digits clients, digits CNN, 2 rounds of 20 local
epochs, shadow = all of the target's training split) runs the target-present phase and the
target-absent phase from the same initial weights. Measured (seed 0): AUC present 0.526 /
0.531 (rounds 1, 2), absent 0.501 / 0.506; MP difference −46.6 % present, +34.6 % absent at
round 1. ~100 s on 2 cores (Ray start-up included).
"""

from __future__ import annotations

import json

import pytest
from fedpriv.scenarios.cli.main import (
    main as fedpriv_main,  # imported at collection (Flower's logger)
)

from fedpriv.reporting.runlog import read_rounds
from tests.baseline import assert_matches_baseline
from tests.simulate import run_fedpriv

pytestmark = [pytest.mark.simulation, pytest.mark.slow, pytest.mark.guard]


@pytest.fixture(scope="module")
def cia_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cia") / "run"
    rc, summary, rounds, tail = run_fedpriv(
        {"scenario": "cia-digits", "shadow-fraction": 1.0, "num-server-rounds": 2}, out
    )
    assert rc == 0, tail
    return out, summary, rounds


def test_cia_rounds_match_the_baseline(cia_run):
    assert_matches_baseline("cia", cia_run[0])


def test_cia_run_writes_both_phases(cia_run):
    out, summary, rounds = cia_run
    doc = json.loads((out / "cia.json").read_text())
    assert [r["round"] for r in doc["present"]] == [0, 1, 2]
    assert [r["round"] for r in doc["absent"]] == [0, 1, 2]
    assert (out / "target-absent" / "summary.json").exists()
    assert doc["config"]["local-epochs"] == 20  # cia-local-epochs drives local training
    # the target's node stays idle in the absent phase
    absent_rounds = read_rounds(out / "target-absent")
    assert all(2 not in r.get("replied", []) for r in absent_rounds)
    assert all(sorted(r["replied"]) == [0, 1, 2] for r in rounds if r["round"] > 0)
    assert summary["cia"]["rounds"][1]["round"] == 1


def test_cia_score_is_mp_formula_on_the_recorded_losses(cia_run):
    out, _, rounds = cia_run
    doc = json.loads((out / "cia.json").read_text())
    for phase_rounds, records in ((doc["present"], rounds), (doc["absent"], None)):
        for rec in phase_rounds[1:]:
            ls, la = rec["loss_shadow"], rec["loss_aggregated"]
            assert rec["difference_pct"] == pytest.approx((ls - la) / ls * 100)
        if records:  # the aggregated loss is the distributed loss the server computed
            by_round = {r["round"]: r for r in records}
            for rec in phase_rounds[1:]:
                assert rec["loss_aggregated"] == pytest.approx(
                    by_round[rec["round"]]["distributed"]["loss"]
                )


def test_loss_threshold_auc_present_vs_absent(cia_run):
    out, _, _ = cia_run
    doc = json.loads((out / "cia.json").read_text())
    for rec in doc["absent"]:  # 383 members vs 96 held-out: null std of the AUC ~ 0.033
        assert abs(rec["auc"] - 0.5) < 0.1
    last_present, last_absent = doc["present"][-1], doc["absent"][-1]
    assert last_present["auc"] > last_absent["auc"]
    for p, a in zip(doc["present"][1:], doc["absent"][1:]):
        assert p["loss_shadow"] < a["loss_shadow"]  # the target's data are fit when it trains
        assert p["difference_pct"] < a["difference_pct"]


def test_attack_reports_from_the_run_directories(cia_run, tmp_path):
    out, _, _ = cia_run
    assert (
        fedpriv_main(["attack", "cia", "--run-dir", str(out), "--out", str(tmp_path / "cia")]) == 0
    )
    text = (tmp_path / "cia" / "cia.md").read_text()
    assert "| Difference (%) |" in text and "AUC round 1, absent" in text
    assert (tmp_path / "cia" / "cia_auc.png").stat().st_size > 0
    assert (
        fedpriv_main(
            [
                "attack",
                "membership",
                "--run-dir",
                str(out),
                str(out / "target-absent"),
                "--out",
                str(tmp_path / "mem"),
            ]
        )
        == 0
    )
    mem = (tmp_path / "mem" / "membership.md").read_text()
    assert "| AUC |" in mem and mem.count("| cia-digits |") == 2
