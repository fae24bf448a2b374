"""Zonal super-node aggregation (SPEC §3.5, HDP Algorithm 1, §IV-A–C, Table I): unit tests.

Covers the FedAvg identity (any zones, empty zones), σ of every placement against Algorithm
1 line 14, where the noise really lands (zone result, server, the LDP client's message),
the super-node election state machine and re-election inside a strategy round, the ε
ordering of HDP Table III, and one-line config errors before training.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import data_spec, node_call, train_spec

from fedpriv.zonal import (
    SuperNodeElection,
    ZonalPlan,
    ZoneMapError,
    aggregate_round,
    apply_update,
    assign_zones,
    client_weights,
    draw_failures,
    epsilon_at_aggregator,
    ldp_client_update,
    parse_zone_map,
    table_i_config,
    zone_levels,
)

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [(6, 5), (5,), (5, 3), (3,)]


def _updates(partitions, rng, scale=1.0):
    return {int(p): [scale * rng.normal(size=s) for s in SHAPES] for p in partitions}


def _template():
    return [np.zeros(s) for s in SHAPES]


def _aggregate(plan, updates, seed=0, supernodes=None):
    return aggregate_round(
        plan,
        updates,
        template=_template(),
        zone_rng=lambda z: np.random.default_rng([seed, 1, z]),
        server_rng=np.random.default_rng([seed, 2]),
        supernodes=supernodes,
    )


def _uniform_mean(updates):
    values = list(updates.values())
    return [np.mean([u[j] for u in values], axis=0) for j in range(len(SHAPES))]


def _resolve(run_config):
    """resolve_run_config with the zonal feature registered (scenario hdp-digits)."""
    import fedpriv.scenarios.zonal.feature  # noqa: F401
    from fedpriv.scenarios.config.registry import resolve_run_config

    return resolve_run_config(run_config)


def _max_diff(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


# --- 1. zero noise + uniform weights == plain FedAvg ------------------------------------------


@pytest.mark.parametrize(
    "n,s,k,method",
    [
        (20, 4, 8, "blocks"),
        (23, 5, 9, "blocks"),
        (17, 3, 5, "round-robin"),
        (10, 10, 3, "blocks"),
        (12, 1, 12, "blocks"),
        (30, 7, 4, "round-robin"),
    ],
)
def test_zero_noise_uniform_equals_fedavg(n, s, k, method):
    rng = np.random.default_rng(n * 100 + s)
    for placement in ("none", "hdp", "cdp", "ldp"):
        plan = ZonalPlan.build(
            num_clients=n,
            num_zones=s,
            clients_per_round=k,
            noise_multiplier=0.0,
            clipping_norm=1e6,
            placement=placement,
            assignment=method,
        )
        for _ in range(3):
            sampled = rng.choice(n, size=k, replace=False)
            ups = _updates(sampled, rng)
            result = _aggregate(plan, ups)
            assert _max_diff(result.delta, _uniform_mean(ups)) < 1e-6


def test_identity_with_empty_and_unequal_zones():
    """Zones of sizes 2, 5, 1, 4 (explicit map); only zones 0 and 3 sampled this round."""
    zone_map = "0:0,1:0,2:1,3:1,4:1,5:1,6:1,7:2,8:3,9:3,10:3,11:3"
    plan = ZonalPlan.build(
        num_clients=12,
        num_zones=4,
        clients_per_round=4,
        noise_multiplier=0.0,
        clipping_norm=1e6,
        placement="hdp",
        assignment="map",
        zone_map=zone_map,
    )
    assert [len(m) for m in plan.members] == [2, 5, 1, 4]
    ups = _updates([0, 1, 8, 11], np.random.default_rng(3))
    result = _aggregate(plan, ups)
    assert [z.partitions for z in result.zones] == [[0, 1], [], [], [8, 11]]
    assert _max_diff(result.delta, _uniform_mean(ups)) < 1e-6
    # The documented choice: zone shares W_i/W, not HDP's literal 1/s (which would give
    # the one-client zone the same say as the five-client zone).
    assert [plan.zone_share(i) for i in range(4)] == pytest.approx([2 / 12, 5 / 12, 1 / 12, 4 / 12])
    literal = sum((1 / 4) * np.asarray(z.delta[0]) for z in result.zones)  # HDP line 15 as printed
    assert float(np.max(np.abs(literal - _uniform_mean(ups)[0]))) > 1e-3


def test_equal_zones_share_is_one_over_s():
    plan = ZonalPlan.build(
        num_clients=20, num_zones=4, clients_per_round=8, noise_multiplier=1.0, clipping_norm=1.0
    )
    assert [plan.zone_share(i) for i in range(4)] == pytest.approx([0.25] * 4)


def test_identity_through_the_message_api_strategy():
    """ZonalAggregation around Flower's FedAvg == Flower's FedAvg on the same replies."""
    from fedpriv.strategies.zonal import ZonalAggregation
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.serverapp.strategy import FedAvg

    n, s, k = 12, 3, 6
    grid = FakeGrid(n)
    plan = ZonalPlan.build(
        num_clients=n,
        num_zones=s,
        clients_per_round=k,
        noise_multiplier=0.0,
        clipping_norm=1e6,
        placement="hdp",
    )
    common = dict(min_train_nodes=1, min_evaluate_nodes=1, min_available_nodes=1)
    strategy = ZonalAggregation(FedAvg(**common), plan=plan, seed=0)
    rng = np.random.default_rng(7)
    glob = [rng.normal(size=sh).astype(np.float32) for sh in SHAPES]
    grid.offer([0, 1, 2, 3, 9, 10])  # zone 1 (partitions 4..7) has nobody this round
    sent = list(strategy.configure_train(1, ArrayRecord(glob), ConfigRecord({"a": 1}), grid))
    assert sorted(m.content["config"]["zonal-zone"] for m in sent) == [0, 0, 0, 0, 2, 2]
    assert all(m.content["config"]["client-task"] == "zonal" for m in sent)
    replies = []
    for msg in sent:
        new = [g + rng.normal(scale=0.1, size=g.shape).astype(np.float32) for g in glob]
        metrics = MetricRecord({"num-examples": 10, "train-loss": 1.0})
        replies.append(
            Message(RecordDict({"arrays": ArrayRecord(new), "metrics": metrics}), reply_to=msg)
        )
    arrays, metrics = strategy.aggregate_train(1, replies)
    stock, _ = FedAvg(**common).aggregate_train(1, replies)
    assert _max_diff(arrays.to_numpy_ndarrays(), stock.to_numpy_ndarrays()) < 1e-6
    assert list(arrays.keys()) == list(ArrayRecord(glob).keys())
    assert metrics["train-loss"] == pytest.approx(1.0)
    report = strategy.round_metrics()["zonal"]
    assert report["zones"]["1"]["partitions"] == []
    assert report["elections"][0]["reason"] == "initial"


# --- 2. σ of each placement and where the noise lands --------------------------------------


def test_sigma_matches_algorithm_1_line_14():
    z, c, n, s, k = 0.7, 0.3, 20, 4, 8
    plan = ZonalPlan.build(
        num_clients=n, num_zones=s, clients_per_round=k, noise_multiplier=z, clipping_norm=c
    )
    q = k / n
    for i in range(s):
        assert plan.sigma_zone(i) == pytest.approx(z * c / (q * 5))  # W_i = 5 clients, w = 1
    assert plan.sigma_client == pytest.approx(z * c)
    assert plan.sigma_server == pytest.approx(z * c / (q * 20))
    # samples weighting: w_k = min(n_k / cap, 1), W_i = Σ_zone w_k
    counts = [10, 20, 40, 80, 5, 5, 5, 5]
    plan = ZonalPlan.build(
        num_clients=8,
        num_zones=2,
        clients_per_round=2,
        noise_multiplier=z,
        clipping_norm=c,
        weighting="samples",
        num_examples=counts,
        example_cap=40,
    )
    w0 = 10 / 40 + 20 / 40 + 1 + 1
    w1 = 4 * 5 / 40
    assert plan.sigma_zone(0) == pytest.approx(z * c / (0.25 * w0))
    assert plan.sigma_zone(1) == pytest.approx(z * c / (0.25 * w1))
    assert plan.sigma_server == pytest.approx(z * c / (0.25 * (w0 + w1)))
    assert client_weights([3, 6], weighting="samples").tolist() == [0.5, 1.0]


def _noise_std(arrays):
    flat = np.concatenate([np.ravel(a) for a in arrays])
    return float(np.std(flat))


BIG = [(200, 100)]  # 20k coordinates: the std of a noise sample is known to ~1%


def test_noise_lands_where_the_placement_says():
    n, s, k, z, c = 12, 3, 6, 0.8, 1.0
    rng = np.random.default_rng(11)
    sampled = [0, 1, 4, 5, 8, 9]  # two per zone
    ups = {p: [rng.normal(scale=1e-3, size=BIG[0])] for p in sampled}  # norm << C
    tmpl = [np.zeros(BIG[0])]

    def run(placement, **fractions):
        plan = ZonalPlan.build(
            num_clients=n,
            num_zones=s,
            clients_per_round=k,
            noise_multiplier=z,
            clipping_norm=c,
            placement=placement,
            **fractions,
        )
        sent = dict(ups)
        for p in sampled:
            if plan.level_of(p) == "ldp":
                sent[p], info = ldp_client_update(
                    ups[p], noise_multiplier=z, clipping_norm=c, rng=np.random.default_rng([p, 9])
                )
                assert info["sigma"] == pytest.approx(z * c)
        res = aggregate_round(
            plan,
            sent,
            template=tmpl,
            zone_rng=lambda i: np.random.default_rng([i, 1]),
            server_rng=np.random.default_rng(2),
        )
        plain = aggregate_round(
            ZonalPlan.build(
                num_clients=n,
                num_zones=s,
                clients_per_round=k,
                noise_multiplier=0.0,
                clipping_norm=c,
                placement="none",
            ),
            ups,
            template=tmpl,
            zone_rng=lambda i: np.random.default_rng(0),
            server_rng=np.random.default_rng(0),
        )
        return plan, res, plain

    unit = z * c / ((k / n) * n)  # z·C/(q·W): one noise unit in aggregate terms
    # HDP: each zone result carries N(0, σ_i²); nothing at the server.
    plan, res, plain = run("hdp")
    for zr, zp in zip(res.zones, plain.zones):
        assert zr.sigma == pytest.approx(plan.sigma_zone(zr.zone))
        assert _noise_std([a - b for a, b in zip(zr.delta, zp.delta)]) == pytest.approx(
            plan.sigma_zone(zr.zone), rel=0.03
        )
    assert res.server_sigma == 0.0
    assert _noise_std([a - b for a, b in zip(res.delta, plain.delta)]) == pytest.approx(
        unit * math.sqrt(s), rel=0.03
    )
    # CDP: zone results are noiseless, the server adds σ_S once.
    plan, res, plain = run("cdp")
    for zr, zp in zip(res.zones, plain.zones):
        assert zr.sigma == 0.0 and _max_diff(zr.delta, zp.delta) < 1e-12
    assert res.server_sigma == pytest.approx(plan.sigma_server)
    assert _noise_std([a - b for a, b in zip(res.delta, plain.delta)]) == pytest.approx(
        unit, rel=0.03
    )
    # LDP: the noise came with the client messages; zones and server add none.
    plan, res, plain = run("ldp")
    assert all(zr.sigma == 0.0 for zr in res.zones) and res.server_sigma == 0.0
    assert _noise_std([a - b for a, b in zip(res.delta, plain.delta)]) == pytest.approx(
        unit * math.sqrt(k), rel=0.03
    )
    assert res.aggregator_noise_multiplier == pytest.approx(z * math.sqrt(k))
    # Mixed (C7 here): zone 0 LDP, zone 1 HDP, zone 2 CDP.
    plan, res, plain = run("mixed", hdp_fraction=1 / 3, ldp_fraction=1 / 3)
    assert list(plan.levels) == ["ldp", "hdp", "cdp"] and plan.table_i == "C7"
    assert [zr.sigma > 0 for zr in res.zones] == [False, True, False]
    assert res.server_sigma == pytest.approx(plan.sigma_server)
    assert _noise_std([a - b for a, b in zip(res.delta, plain.delta)]) == pytest.approx(
        unit * math.sqrt(2 + 1 + 1), rel=0.03
    )


def test_clipping_bounds_every_contribution():
    plan = ZonalPlan.build(
        num_clients=4,
        num_zones=2,
        clients_per_round=4,
        noise_multiplier=0.0,
        clipping_norm=0.5,
        placement="hdp",
    )
    ups = {0: [np.full(4, 10.0)], 1: [np.full(4, 0.01)]}
    res = aggregate_round(
        plan,
        ups,
        template=[np.zeros(4)],
        zone_rng=lambda i: np.random.default_rng(i),
        server_rng=np.random.default_rng(0),
    )
    assert res.zones[0].clipped == [0]
    expected = (np.full(4, 0.25) + np.full(4, 0.01)) / 4  # clip(10·1) has norm 0.5
    assert _max_diff(res.delta, [expected]) < 1e-9
    assert apply_update([np.ones(4, np.float32)], res.delta)[0].dtype == np.float32


def test_ldp_client_message_carries_the_noise():
    """Call the client task directly: an LDP zone's message = clip(Δ) + N(0, (zC)²)."""
    from fedpriv.clients.keras_client import federated_data, initial_weights
    from fedpriv.scenarios.app.client_tasks import train_zonal
    from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
    from flwr.common import MessageType

    from fedpriv.privacy.mechanisms import flat_norm

    cfg = _resolve(
        {
            "scenario": "hdp-digits",
            "num-clients": 20,
            "num-zones": 4,
            "local-epochs": 1,
            "noise-multiplier": 0.3,
            "clipping-norm": 0.2,
        }
    )
    glob = initial_weights(train_spec(cfg), federated_data(data_spec(cfg)))

    def call(level):
        config = ConfigRecord(
            {
                **cfg,
                "server-round": 1,
                "client-task": "zonal",
                "zonal-zone": 0,
                "zonal-level": level,
                "zonal-supernode": 1,
            }
        )
        msg = Message(
            RecordDict({"arrays": ArrayRecord(glob), "config": config}),
            message_type=MessageType.TRAIN,
            dst_node_id=1,
        )
        out = train_zonal(msg, node_call(dict(config)), 3)
        sent = out["arrays"].to_numpy_ndarrays()
        return [np.float64(a) - g for a, g in zip(sent, glob)], out["metrics"]

    hdp_update, hdp_metrics = call("hdp")
    ldp_update, ldp_metrics = call("ldp")
    none_update, none_metrics = call("none")  # the no-DP baseline: as trained
    assert flat_norm(none_update) == pytest.approx(none_metrics["zonal-update-norm"], rel=1e-5)
    assert flat_norm(none_update) > 0.2 and none_metrics["zonal-clipped"] == 0
    scale = 0.2 / flat_norm(none_update)
    assert _max_diff(hdp_update, [scale * x for x in none_update]) < 1e-6
    assert flat_norm(hdp_update) <= 0.2 * (1 + 1e-5)  # clipped, not noised
    assert hdp_metrics["zonal-noise-std"] == 0.0 and hdp_metrics["zonal-clipped"] == 1
    assert ldp_metrics["zonal-noise-std"] == pytest.approx(0.3 * 0.2)
    noise = [a - b for a, b in zip(ldp_update, hdp_update)]  # same seed -> same training
    assert _noise_std(noise) == pytest.approx(0.3 * 0.2, rel=0.05)
    assert abs(float(np.mean(np.concatenate([x.ravel() for x in noise])))) < 0.01


# --- 3. super-node elections ---------------------------------------------------------------


def test_election_is_uniform_and_sticky():
    counts = np.zeros(4)
    for seed in range(2000):
        election = SuperNodeElection([[4, 5, 6, 7]], rng=np.random.default_rng(seed))
        election.step(1)
        counts[election.current()[0] - 4] += 1
    assert np.all(np.abs(counts / 2000 - 0.25) < 0.035)
    election = SuperNodeElection([[0, 1, 2], [3, 4]], rng=np.random.default_rng(0))
    first = election.step(1)
    assert [e.reason for e in first] == ["initial", "initial"]
    chosen = election.current()
    for r in range(2, 10):
        assert election.step(r) == []
    assert election.current() == chosen


def test_failed_supernode_is_replaced_by_an_online_client():
    election = SuperNodeElection([[0, 1, 2], [3, 4]], rng=np.random.default_rng(1))
    election.step(1)
    old = election.current()[0]
    events = election.step(2, failed=[old])
    assert len(events) == 1 and events[0].reason == "failed" and events[0].previous == old
    assert events[0].supernode in {0, 1, 2} - {old}
    old1 = election.current()[1]
    events = election.step(3, unreachable=[old1])
    assert events[0].reason == "no-reply" and events[0].supernode == ({3, 4} - {old1}).pop()
    events = election.step(4, failed=[3, 4])  # the whole zone is down: vacant
    assert events[0].supernode is None
    events = election.step(5)
    assert events[0].reason == "vacant" and events[0].supernode in (3, 4)
    assert [e.round for e in election.log] == [1, 1, 2, 3, 4, 5]


def test_failure_draws_follow_the_rate():
    rng = np.random.default_rng(0)
    hits = sum(len(draw_failures({0: 1, 1: 5}, 0.3, rng, 2)) for _ in range(3000))
    assert abs(hits / 6000 - 0.3) < 0.03
    assert draw_failures({0: 1, 1: None}, 0.0, rng, 2) == []


def test_strategy_round_completes_after_a_supernode_failure():
    from fedpriv.strategies.zonal import ZonalAggregation
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.serverapp.strategy import FedAvg

    grid = FakeGrid(8)
    plan = ZonalPlan.build(
        num_clients=8,
        num_zones=2,
        clients_per_round=8,
        noise_multiplier=0.5,
        clipping_norm=1.0,
        placement="hdp",
    )
    strategy = ZonalAggregation(
        FedAvg(min_train_nodes=1, min_available_nodes=1), plan=plan, seed=3, failure_rate=0.9
    )
    glob = [np.zeros(s, np.float32) for s in SHAPES]
    reelected = 0
    for rnd in range(1, 4):
        grid.offer(None)
        sent = list(strategy.configure_train(rnd, ArrayRecord(glob), ConfigRecord({}), grid))
        report = dict(strategy.current)
        failed = report["failed_supernodes"]
        sent_parts = {grid.node_to_partition[m.metadata.dst_node_id] for m in sent}
        assert not sent_parts & set(failed)  # a failed super-node is offline this round
        assert sent_parts == set(range(8)) - set(failed)
        new_sn = {e["zone"]: e["supernode"] for e in report["elections"] if e["reason"] == "failed"}
        reelected += len(new_sn)
        for zone, sn in new_sn.items():
            assert sn in plan.members[zone] and sn not in failed
        replies = [
            Message(
                RecordDict(
                    {"arrays": ArrayRecord(glob), "metrics": MetricRecord({"num-examples": 1})}
                ),
                reply_to=m,
            )
            for m in sent
        ]
        arrays, _ = strategy.aggregate_train(rnd, replies)
        assert arrays is not None
        zones = strategy.round_metrics()["zonal"]["zones"]
        assert all(zones[str(z)]["supernode"] not in failed for z in range(2))
    assert reelected >= 3


class FakeGrid:
    """The part of PartitionGrid the zonal strategy uses (node id = 100 + partition)."""

    def __init__(self, n: int) -> None:
        self.node_to_partition = {100 + p: p for p in range(n)}
        self._offered = None

    def offer(self, partitions):
        self._offered = None if partitions is None else sorted(partitions)

    def get_node_ids(self):
        parts = sorted(self.node_to_partition.values()) if self._offered is None else self._offered
        return [100 + p for p in parts]


# --- zones, placements, Table I ------------------------------------------------------------


def test_zone_assignment_and_maps():
    assert assign_zones(10, 3) == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert assign_zones(7, 3, method="round-robin") == [0, 1, 2, 0, 1, 2, 0]
    assert parse_zone_map("0:1, 1:0,2:1") == {0: 1, 1: 0, 2: 1}
    assert parse_zone_map('{"0": 1, "1": 0, "2": 1}') == {0: 1, 1: 0, 2: 1}
    assert assign_zones(3, 2, method="map", zone_map="[1, 0, 1]") == [1, 0, 1]
    for bad in ("0:0,1", "0:0,0:1", "a:b", "{oops"):
        with pytest.raises(ZoneMapError):
            parse_zone_map(bad)
    with pytest.raises(ZoneMapError, match="unknown clients"):
        assign_zones(3, 2, method="map", zone_map="0:0,1:1,2:1,7:0")
    with pytest.raises(ZoneMapError, match="without clients"):
        assign_zones(3, 3, method="map", zone_map="0:0,1:1,2:1")
    with pytest.raises(ValueError, match="num_zones"):
        assign_zones(3, 4)


def test_mixed_fractions_and_table_i_rows():
    assert zone_levels(10, "mixed", hdp_fraction=0.3, ldp_fraction=0.2) == (
        ["ldp"] * 2 + ["hdp"] * 3 + ["cdp"] * 5
    )
    assert zone_levels(3, "mixed", hdp_fraction=0.5, ldp_fraction=0.5).count("cdp") == 0
    rows = {
        (1.0, 0.0): "C1",
        (0.0, 1.0): "C2",
        (0.5, 0.5): "C3",
        (0.0, 0.0): "C4",
        (0.5, 0.0): "C5",
        (0.0, 0.5): "C6",
        (0.25, 0.5): "C7",
    }
    for (beta, alpha), row in rows.items():
        levels = zone_levels(4, "mixed", hdp_fraction=alpha, ldp_fraction=beta)
        assert table_i_config(levels) == row
    assert table_i_config(zone_levels(4, "none")) == "none"
    with pytest.raises(ValueError):
        zone_levels(4, "mixed", hdp_fraction=0.6, ldp_fraction=0.5)


def test_epsilon_at_the_aggregator_is_ordered_ldp_hdp_cdp():
    """HDP Table III: ε(LDP) < ε(HDP) < ε(CDP) at the aggregator, same z (both readings)."""
    eps = {}
    for placement in ("ldp", "hdp", "cdp", "none"):
        plan = ZonalPlan.build(
            num_clients=20,
            num_zones=4,
            clients_per_round=8,
            noise_multiplier=1.0,
            clipping_norm=1.0,
            placement=placement,
        )
        eps[placement] = epsilon_at_aggregator(
            plan, round_=3, total_rounds=3, clients_per_round=8, delta=1e-5
        )
    for kind in ("aggregator_accountant", "aggregator_heuristic"):
        for acc in ("pld", "rdp"):
            assert eps["ldp"][kind][acc] < eps["hdp"][kind][acc] < eps["cdp"][kind][acc]
    level = eps["cdp"]["level"]["rdp"]
    assert eps["cdp"]["aggregator_heuristic"]["rdp"] == pytest.approx(level)
    assert eps["hdp"]["aggregator_heuristic"]["rdp"] == pytest.approx(level / 2)  # √s, s = 4
    assert eps["ldp"]["aggregator_heuristic"]["rdp"] == pytest.approx(level / math.sqrt(8))
    assert [eps[p]["aggregator_noise_multiplier"] for p in ("ldp", "hdp", "cdp")] == (
        pytest.approx([math.sqrt(8), 2.0, 1.0])
    )
    assert eps["none"]["aggregator_accountant"]["rdp"] == math.inf
    # the curious aggregator knows who was sampled: no amplification, worse than "level"
    assert eps["hdp"]["vs_curious_aggregator"]["hdp"]["rdp"] > level
    assert eps["cdp"]["vs_curious_aggregator"]["cdp"]["rdp"] == math.inf


# --- 5. bad input: one-line ConfigError before training -------------------------------------


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        ({"num-zones": 30, "num-clients": 20}, "num-zones = 30"),
        ({"zone-assignment": "map", "zone-map": "0:0,1:0,25:1"}, "unknown clients [25]"),
        ({"zone-assignment": "map", "zone-map": "0:0,1:9"}, "zone-map = '0:0,1:9'"),
        ({"zone-assignment": "map", "zone-map": "0:0;x"}, "zone-map"),
        ({"zone-assignment": "map"}, "zone-map = ''"),
        ({"zone-map": "0:0"}, "zone-assignment = 'blocks'"),
        ({"ldp-fraction": 1.5}, "ldp-fraction = 1.5"),
        ({"hdp-fraction": -0.1}, "hdp-fraction = -0.1"),
        ({"hdp-fraction": 0.7, "ldp-fraction": 0.5}, "hdp-fraction = 0.7"),
        ({"supernode-failure-rate": 1.0}, "supernode-failure-rate = 1.0"),
        ({"noise-placement": "edge"}, "noise-placement = 'edge'"),
        ({"zone-weighting": "sizes"}, "zone-weighting = 'sizes'"),
        ({"strategy": "fedmedian"}, "strategy = 'fedmedian'"),
        ({"zonal-compare-placements": "none,xdp"}, "zonal-compare-placements"),
        ({"zonal-sweep-zones": "2,99"}, "zonal-sweep-zones = '2,99'"),
        ({"privacy": "none"}, "privacy = 'none'"),
    ],
)
def test_bad_zonal_config_is_one_line(overrides, fragment):
    base = {"scenario": "hdp-digits", "num-clients": 20, "num-zones": 4}
    with pytest.raises(ConfigError) as info:
        _resolve({**base, **overrides})
    message = str(info.value)
    assert fragment in message and "expected" in message and "\n" not in message


def test_zone_checks_only_apply_to_zonal_runs():
    cfg = _resolve({"scenario": "digits", "num-zones": 9})  # 4 clients, not zonal
    assert cfg["num-zones"] == 9


def test_cli_refuses_a_bad_zone_map_before_training(tmp_path):
    out = tmp_path / "never"
    items = (
        f"scenario='hdp-digits' num-clients=20 num-zones=4 zone-assignment='map' "
        f"zone-map='0:0,1:1,2:2,3:3,40:0' output-dir='{out}'"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "fedpriv.scenarios.cli.main", "run", "--run-config", items],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fedpriv:")]
    assert len(errors) == 1 and "zone-map" in errors[0] and "unknown clients [40]" in errors[0]
    assert not out.exists()


def test_server_optimizer_strategies_step_towards_the_zonal_result():
    """FedAvgM without momentum and server lr 1 lands exactly on the zonal aggregate."""
    from fedpriv.strategies.zonal import ZonalAggregation
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.serverapp.strategy import FedAvg, FedAvgM

    common = dict(min_train_nodes=1, min_evaluate_nodes=1, min_available_nodes=1)
    plan = ZonalPlan.build(
        num_clients=6, num_zones=2, clients_per_round=6, noise_multiplier=0.0, clipping_norm=1e6
    )
    rng = np.random.default_rng(5)
    glob = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
    results = []
    for inner in (
        FedAvg(**common),
        FedAvgM(**common, server_learning_rate=1.0, server_momentum=0.0),
    ):
        strategy = ZonalAggregation(inner, plan=plan, seed=0)
        grid = FakeGrid(6)
        sent = list(strategy.configure_train(1, ArrayRecord(glob), ConfigRecord({}), grid))
        replies = [
            Message(
                RecordDict(
                    {
                        "arrays": ArrayRecord([g + 0.01 * (i + 1) for g in glob]),
                        "metrics": MetricRecord({"num-examples": 3}),
                    }
                ),
                reply_to=m,
            )
            for i, m in enumerate(sent)
        ]
        arrays, _ = strategy.aggregate_train(1, replies)
        results.append(arrays.to_numpy_ndarrays())
    assert _max_diff(results[0], results[1]) < 1e-6
    assert _max_diff(results[0], [g + 0.035 for g in glob]) < 1e-6
