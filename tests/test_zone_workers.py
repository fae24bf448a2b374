"""Zone nodes on worker SuperNodes give the run of one SuperNode per zone.

With ``zonal-runtime = zone-nodes`` in a simulation, ``num-workers`` W < s worker SuperNodes
serve the s zones (:class:`fedpriv.scenarios.nodes.virtual_grid.ZoneWorkerGrid`): zone z belongs to
worker ``z mod W``, one packed message per worker and round, each zone served as its own
node (its own Context, ledger and noise streams), the clients of all its zones trained as one
cohort. ``hdp-digits`` (none / LDP / HDP / CDP in one simulation, seeded noise) on 1 worker
and on 4 SuperNodes (one per zone, the reference): the same round records, ε and final
accuracy within float tolerance, and each zone's own ledger charged once per round.
"""

from __future__ import annotations

import pytest
from flwr.app import Context, RecordDict

from fedpriv.privacy.releases import read_ledger
from tests.simulate import ledgers_in, nodes_of, run_fedpriv
from tests.test_curious_server import zone_weights  # noqa: F401  (a fixture)
from tests.test_virtual_clients_simulation import _close

ZONES, ROUNDS = 4, 2
PLACEMENTS = ("none", "ldp", "hdp", "cdp")


def test_a_zone_worker_serves_its_share_of_the_zones():
    """Worker w of W serves the zones z with z mod W = w (its own node_config); with one
    SuperNode per zone each serves its own zone only."""
    from fedpriv.scenarios.nodes.worker import served_clients

    run_config = {"scenario": "hdp-digits", "num-clients": 20, "num-zones": 10}
    worker = Context(7, 1, {"partition-id": 1, "num-partitions": 3}, RecordDict(), run_config)
    assert served_clients(worker) == [1, 4, 7]
    zone = Context(7, 1, {"partition-id": 7, "num-partitions": 10}, RecordDict(), run_config)
    assert served_clients(zone) == [7]


def test_a_zone_worker_serves_each_zone_as_its_own_node_and_refuses_foreign_zones(
    zone_weights,  # noqa: F811  (the fixture)
    tmp_path,
):
    """Worker 0 of 5 serves zones 0 and 5 of hdp-digits. A packed message with an honest
    message for zone 0 and a curious server's weakened one for zone 5: zone 0 trains and is
    charged in its own ledger; zone 5 is refused by its own checks, nothing charged. A packed
    message naming zone 1 (another worker's) is refused whole."""
    from fedpriv.scenarios.app.client_app import app
    from fedpriv.scenarios.config.node_spec import node_spec
    from fedpriv.scenarios.zonal.keys import plan_from_config

    from tests.test_curious_server import ZONE_AUTO, server_message, zone_extra
    from tests.test_virtual_clients import packed, replies_of

    folder = tmp_path / "worker-0"
    ctx = Context(7, 1, {"partition-id": 0, "num-partitions": 5, "client-state-dir": str(folder)},
                  RecordDict(), ZONE_AUTO)  # fmt: skip

    def zone_message(zone: int, override: dict, server_round: int = 1):
        plan = plan_from_config(node_spec(7, ZONE_AUTO, {"partition-id": zone}).base)
        extra = {
            **zone_extra(ZONE_AUTO, {}),
            "zonal-zone": zone,
            "zonal-level": plan.levels[zone],
            "zonal-clients": list(plan.members[zone][:3]),
        }
        return server_message(
            ZONE_AUTO, extra, zone_weights, override | {"server-round": server_round}
        )

    reply = app(
        packed({0: zone_message(0, {}), 5: zone_message(5, {"noise-multiplier": 0.0})}), ctx
    )
    contents, errors = replies_of(reply)
    assert sorted(contents) == [0] and sorted(errors) == [5]
    assert "key=noise-multiplier " in errors[5][1]
    assert "zonal-zone-sigma" in contents[0]["metrics"]
    assert read_ledger(folder / "client-0", "zone-node", 0).releases == 1
    assert read_ledger(folder / "client-5", "zone-node", 5).releases == 0
    foreign = app(packed({0: zone_message(0, {}, 2), 1: zone_message(1, {}, 2)}), ctx)
    assert foreign.has_error() and "partition(s) [1]" in foreign.error.reason
    assert read_ledger(folder / "client-0", "zone-node", 0).releases == 1


def test_simulation_size_gives_the_zones_workers_up_to_the_cpus():
    from fedpriv.scenarios.speed.keys import zone_worker_count

    assert zone_worker_count({"num-workers": "auto"}, 10, 2.0, 1.0) == 2
    assert zone_worker_count({"num-workers": 3}, 10, 2.0, 1.0) == 3
    assert zone_worker_count({"num-workers": "auto"}, 2, 2.0, 1.0) is None  # one node per zone
    assert zone_worker_count({"num-workers": 10}, 10, 2.0, 1.0) is None


@pytest.mark.simulation
# guard tier: two runtimes of the same zonal run (~75 s of the fast tier's wall)
@pytest.mark.slow
@pytest.mark.guard
def test_one_worker_gives_the_run_of_one_supernode_per_zone(tmp_path):
    base = {
        "scenario": "hdp-digits",
        "num-clients": 12,
        "clients-per-round": 12,
        "num-zones": ZONES,
        "num-server-rounds": ROUNDS,
        "local-epochs": 1,
        "zonal-distributed-eval": "none",
        "seed": 5,
    }
    out = {}
    for workers in (1, ZONES):
        rc, summary, rounds, log = run_fedpriv(
            {**base, "num-workers": workers}, tmp_path / f"w{workers}", timeout=900
        )
        assert rc == 0, log[-3000:]
        out[workers] = (summary, rounds, tmp_path / f"w{workers}", log)
    assert "1 SuperNodes answered, serving 4 zones" in out[1][3]
    assert "serving 4 zones" not in out[ZONES][3]
    (virtual, v_rounds, v_dir, _), (reference, r_rounds, r_dir, _) = out[1], out[ZONES]
    assert len(v_rounds) == len(r_rounds) == len(PLACEMENTS) * (ROUNDS + 1)
    for a, b in zip(v_rounds, r_rounds):
        assert a.get("zonal", {}).get("zone_messages", ZONES) == ZONES
        _close(a, b, f"{a.get('run')} round {a.get('round')}")
    _close(virtual["final"], reference["final"], "final")
    for placement in PLACEMENTS:
        assert (v_dir / placement / "summary.json").exists()
    for root in (v_dir, r_dir):
        ledgers = ledgers_in(nodes_of(root), "zone-node")
        assert [n.split("/")[1] for n in ledgers] == [f"zone-node-{z}" for z in range(ZONES)]
        for name, ledger in ledgers.items():  # each zone its own: a charge per placement, round
            assert ledger.releases == len(PLACEMENTS) * ROUNDS, name
