"""Zonal super-node aggregation in real Flower simulations (``fedpriv run``).

Two runs:

* ``hdp-digits``, CI size (20 Dirichlet clients, 4 zones, 8 sampled per round, 5 rounds,
  paper training: SGD 0.02, 5 local epochs): none / LDP / HDP / CDP at the same z in one
  simulation. Accuracy is ordered none ≥ CDP ≥ HDP ≥ LDP within a band and ε at the
  aggregator LDP < HDP < CDP (HDP Fig. 2, Table III).
* the standard runner with ``privacy = "zonal"``, a C5 mix (LDP zone + server noise) and
  ``supernode-failure-rate = 0.5``: failed super-nodes are re-elected, logged in
  rounds.jsonl, and every round still completes; with zone nodes (the default runtime)
  a failed super-node's zone gets no message that round (HDP §V).
"""

from __future__ import annotations

import json
import math

import pytest

from tests.baseline import assert_matches_baseline
from tests.simulate import IN_PROCESS, run_fedpriv

pytestmark = pytest.mark.simulation

BAND = 0.05  # accuracy tolerance between neighbours in the order (180 test images)


@pytest.fixture(scope="module")
def compare_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("hdp") / "compare"
    overrides = {
        "scenario": "hdp-digits",
        "num-clients": 20,
        "clients-per-round": 8,
        "num-zones": 4,
        "num-server-rounds": 5,
        "seed": 0,
    }
    rc, summary, rounds, tail = run_fedpriv(overrides, out, timeout=900, extra_args=IN_PROCESS)
    assert rc == 0, tail
    (out.parent / CONSOLE).write_text(tail)  # what the user saw, beside the run
    return out, summary, rounds


CONSOLE = "console.txt"


def test_warnings_name_the_zone_and_the_rule_not_num_examples(compare_run):
    """A zone with 1 sampled client (< min-zone-clients 2) is skipped: the console says so,
    by zone, once a round, and never calls its empty reply an invalid num-examples."""
    out, _, rounds = compare_run
    console = (out.parent / CONSOLE).read_text()
    assert "num-examples" not in console
    warned = [line for line in console.splitlines() if "min-zone-clients" in line]
    want = 0
    for record in rounds:
        for zone in (record.get("zonal") or {}).get("undersized_zones", []):
            want += 1
            clause = f"zone {zone}: 1 sampled client < min-zone-clients 2, zone skipped"
            assert any(f"round {record['round']}: " in w and clause in w for w in warned)
    assert want > 0  # the check ran: this config leaves some zone with a single client
    assert len(warned) <= sum(1 for r in rounds if r["round"] > 0)  # one line a round at most


def test_compare_rounds_match_the_baseline(compare_run):
    assert_matches_baseline("zonal-compare", compare_run[0])


def test_accuracy_order_none_cdp_hdp_ldp(compare_run):
    out, summary, _ = compare_run
    acc = {row["placement"]: row["last3_accuracy"] for row in summary["runs"]}
    assert set(acc) == {"none", "ldp", "hdp", "cdp"}
    assert all(row["rounds_aggregated"] == "5/5" for row in summary["runs"])
    assert acc["none"] >= acc["cdp"] - BAND
    assert acc["cdp"] >= acc["hdp"] - BAND
    assert acc["hdp"] >= acc["ldp"] - BAND
    assert acc["none"] - acc["ldp"] >= 0.1  # the noise really costs accuracy
    assert acc["none"] > 0.3  # and the model really learns
    assert "| ldp | 4 | C1 |" in (out / "report.md").read_text()
    assert (out / "comparison.png").stat().st_size > 1000
    for placement in acc:
        assert (out / placement / "summary.json").exists()


def test_epsilon_at_aggregator_order_ldp_hdp_cdp(compare_run):
    _, summary, _ = compare_run
    rows = {row["placement"]: row for row in summary["runs"]}
    for key in ("epsilon_aggregator_rdp", "epsilon_aggregator_pld", "epsilon_heuristic_rdp"):
        assert rows["ldp"][key] < rows["hdp"][key] < rows["cdp"][key]
    assert rows["none"]["epsilon_aggregator_rdp"] in (math.inf, "inf")
    assert [rows[p]["table_i"] for p in ("ldp", "hdp", "cdp")] == ["C1", "C2", "C4"]


def test_epsilon_says_against_whom_it_holds(compare_run):
    """The zones are SuperNodes of their own (zonal-runtime = zone-nodes), so HDP's
    and LDP's ε hold against the ServerApp; HDP's none against the zone node, which hosts its
    clients: summary.json, rounds.jsonl and report.md say so."""
    out, _, rounds = compare_run
    for placement in ("ldp", "hdp", "cdp"):
        summary = json.loads((out / placement / "summary.json").read_text())
        against = summary["zonal"]["epsilon"]["epsilon-against"]
        assert list(against) == [placement]
        records = [r for r in rounds if r.get("run") == placement and r["round"] > 0]
        assert len(records) == 5
        assert all(r["zonal"]["epsilon"]["epsilon-against"] == against for r in records)
    hdp = json.loads((out / "hdp" / "summary.json").read_text())["zonal"]["epsilon"]
    assert hdp["epsilon-against"]["hdp"].startswith("the ServerApp")
    assert "none against the zone node" in hdp["epsilon-against"]["hdp"]
    ldp = json.loads((out / "ldp" / "summary.json").read_text())["zonal"]["epsilon"]
    assert ldp["epsilon-against"]["ldp"].startswith("everyone outside the client's own")
    report = (out / "report.md").read_text()
    assert "## Against whom each ε holds" in report and "- HDP: the ServerApp and" in report


def test_round_records_log_zones_sigma_elections_and_epsilon(compare_run):
    _, _, rounds = compare_run
    by_run: dict[str, list[dict]] = {}
    for record in rounds:
        if record["round"] > 0:
            by_run.setdefault(record["run"], []).append(record)
    assert sorted(by_run) == ["cdp", "hdp", "ldp", "none"]
    # same seed -> the same clients sampled in every placement
    samples = {run: [r["sampled"] for r in recs] for run, recs in by_run.items()}
    assert all(s == samples["none"] for s in samples.values())
    q, w_zone, z, c = 8 / 20, 5, 0.5, 0.5
    for run, recs in by_run.items():
        assert len(recs) == 5 and all(r["aggregated"] for r in recs)
        first = recs[0]["zonal"]
        assert first["placement"] == run
        assert [e["reason"] for e in first["elections"]] == ["initial"] * 4
        assert set(first["supernodes"]) == {"0", "1", "2", "3"}
        for rec in recs:
            zonal = rec["zonal"]
            assert zonal["epsilon"]["round"] == rec["round"]
            assert set(zonal["zones"]) == {"0", "1", "2", "3"}
            # a zone with fewer than min-zone-clients = 2 sampled clients releases nothing:
            # its sampled clients are the ones missing from the zones' partitions
            released = sorted(p for zr in zonal["zones"].values() for p in zr["partitions"])
            small = {str(zone) for zone in zonal["undersized_zones"]}
            assert all(
                (zone in small) == (len(zr["partitions"]) < 2)
                for zone, zr in zonal["zones"].items()
            )
            assert all(not zonal["zones"][zone]["partitions"] for zone in small)
            assert set(released) <= set(rec["sampled"]) and zonal["replied"] == released
            assert len(rec["sampled"]) - len(released) <= len(small)  # one client each at most
    hdp = by_run["hdp"][0]["zonal"]
    assert hdp["sigma_zone"] == {str(i): pytest.approx(z * c / (q * w_zone)) for i in range(4)}
    assert all(
        zr["sigma"] == pytest.approx(z * c / (q * w_zone))
        for zr in hdp["zones"].values()
        if zr["partitions"]
    )
    assert by_run["cdp"][0]["zonal"]["sigma_server"] == pytest.approx(z * c / (q * 20))
    assert by_run["ldp"][0]["zonal"]["sigma_client"] == pytest.approx(z * c)
    assert by_run["ldp"][0]["train"]["zonal-noise-std"] == pytest.approx(z * c)
    eps = [r["zonal"]["epsilon"]["aggregator_accountant"]["rdp"] for r in by_run["hdp"]]
    assert eps == sorted(eps) and eps[0] < eps[-1]  # ε grows with the rounds


@pytest.mark.slow
def test_supernode_failures_trigger_reelections(tmp_path):
    overrides = {
        "scenario": "digits",
        "model": "digits-mlp",
        "num-clients": 8,
        "clients-per-round": 4,
        "num-server-rounds": 3,
        "local-epochs": 1,
        "privacy": "zonal",
        "num-zones": 2,
        "noise-placement": "mixed",
        "ldp-fraction": 0.5,
        "supernode-failure-rate": 0.5,
        "zonal-distributed-eval": "sampled",
        "unaccounted-metrics": True,  # evaluation metrics leave the clients: opt-in
        "seed": 0,
    }
    rc, summary, rounds, tail = run_fedpriv(overrides, tmp_path / "fail")
    assert rc == 0, tail
    assert_matches_baseline("zonal-failures", tmp_path / "fail")
    trained = [r for r in rounds if r["round"] > 0]
    assert len(trained) == 3
    # zone nodes: a round aggregates whenever one zone node was up (both down: the run goes on)
    assert all(r["aggregated"] == (r["zonal"]["zone_messages"] > 0) for r in trained)
    assert any(r["aggregated"] for r in trained)
    reelections = [e for r in trained for e in r["zonal"]["elections"] if e["reason"] == "failed"]
    assert reelections, "expected at least one failure at rate 0.5 over 3 rounds x 2 zones"
    for record in trained:
        zonal = record["zonal"]
        assert zonal["table_i"] == "C5"
        assert not set(zonal["offline"]) & set(record["replied"])
        for event in zonal["elections"]:
            if event["reason"] == "failed":
                assert event["supernode"] != event["previous"]
                assert event["previous"] in zonal["failed_supernodes"]
        assert set(zonal["supernodes"].values()).isdisjoint(zonal["failed_supernodes"])
        if zonal["zone_messages"]:
            assert len(record["distributed"]) > 0  # the sampled clients evaluated
        # zone nodes: a failed super-node's zone gets no message this round
        down = {p * 2 // 8 for p in zonal["failed_supernodes"]}  # blocks: 4 clients a zone
        assert zonal["down_zones"] == sorted(down)
        assert zonal["zone_messages"] == 2 - len(down)
        assert sorted(record["replied"]) == sorted(
            p for p in record["sampled"] if p * 2 // 8 not in down
        )
    assert any(r["zonal"]["down_zones"] for r in trained)
    block = summary["zonal"]
    assert block["reelections"] == len(reelections)
    assert block["epsilon"]["table_i"] == "C5" and "assumptions" in block["epsilon"]
