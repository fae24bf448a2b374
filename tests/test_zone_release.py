"""Zone-node math (:mod:`fedpriv.zonal.release`): what a zone node releases and the
server step over zone releases give the same global step as the in-server aggregation
(:func:`fedpriv.zonal.aggregate_round`) for the same updates and noise streams."""

from __future__ import annotations

import numpy as np
import pytest
from fedpriv.scenarios.zonal.keys import federation_size

from fedpriv.zonal import ZonalPlan, aggregate_round
from fedpriv.zonal.release import ZoneRelease, client_contribution, server_step, zone_release

SHAPES = [(6, 4), (4,)]


def _updates(n: int, seed: int = 0) -> dict[int, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {p: [rng.normal(0, 0.4, s) for s in SHAPES] for p in range(n)}


def _releases(plan: ZonalPlan, updates, sampled, *, z_seed: int = 7) -> dict[int, ZoneRelease]:
    template = [np.zeros(s) for s in SHAPES]
    out = {}
    for zone, members in enumerate(plan.members):
        clients = [p for p in members if p in sampled]
        level = plan.levels[zone]
        terms = [
            client_contribution(
                updates[p],
                level,
                noise_multiplier=plan.noise_multiplier,
                clipping_norm=plan.clipping_norm,
                rng=lambda p=p: np.random.default_rng([1, p]),
            )[0]
            for p in clients
        ]
        out[zone] = zone_release(
            terms,
            [plan.weights[p] for p in clients],
            level=level,
            sampling_rate=plan.sampling_rate,
            zone_weight=plan.zone_weight(zone),
            noise_multiplier=plan.noise_multiplier,
            clipping_norm=plan.clipping_norm,
            zone_rng=lambda zone=zone: np.random.default_rng([z_seed, zone]),
            template=template,
            clients=clients,
        )
    return out


@pytest.mark.parametrize("placement", ["none", "hdp", "cdp"])
def test_zone_nodes_give_the_in_server_step(placement):
    """Same clipped updates, same zone and server Generators: the same global step."""
    plan = ZonalPlan.build(
        num_clients=8, num_zones=2, clients_per_round=5, noise_multiplier=1.5,
        clipping_norm=0.5, placement=placement,
    )  # fmt: skip
    updates, sampled = _updates(8), [0, 2, 3, 5, 6]
    template = [np.zeros(s) for s in SHAPES]
    releases = _releases(plan, updates, sampled)
    got = server_step(plan, releases, template=template, server_rng=np.random.default_rng(9))
    want = aggregate_round(
        plan,
        {p: updates[p] for p in sampled},
        template=template,
        zone_rng=lambda zone: np.random.default_rng([7, zone]),
        server_rng=np.random.default_rng(9),
        clip=placement != "none",
    )
    for a, b in zip(got.delta, want.delta):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert got.aggregator_noise_multiplier == pytest.approx(want.aggregator_noise_multiplier)


def test_an_ldp_release_sums_each_clients_own_noise():
    plan = ZonalPlan.build(
        num_clients=4, num_zones=1, clients_per_round=4, noise_multiplier=2.0,
        clipping_norm=0.5, placement="ldp",
    )  # fmt: skip
    updates = _updates(4)
    rel = _releases(plan, updates, range(4))[0]
    expected = [np.zeros(s) for s in SHAPES]
    for p in range(4):
        term, _ = client_contribution(
            updates[p], "ldp", noise_multiplier=2.0, clipping_norm=0.5,
            rng=lambda p=p: np.random.default_rng([1, p]),
        )  # fmt: skip
        for acc, layer in zip(expected, term):
            acc += layer / 4
    for a, b in zip(rel.delta, expected):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert rel.sigma == 0.0 and rel.ldp_weight_sq == 4.0  # no zone noise; four client draws


def test_a_missing_zone_adds_nothing_and_no_noise():
    plan = ZonalPlan.build(
        num_clients=8, num_zones=2, clients_per_round=8, noise_multiplier=1.0,
        clipping_norm=0.5, placement="hdp",
    )  # fmt: skip
    updates = _updates(8)
    releases = _releases(plan, updates, range(8))
    template = [np.zeros(s) for s in SHAPES]
    both = server_step(plan, releases, template=template, server_rng=np.random.default_rng(0))
    one = server_step(
        plan, {1: releases[1]}, template=template, server_rng=np.random.default_rng(0)
    )
    for a, b, r in zip(both.delta, one.delta, releases[0].delta):
        np.testing.assert_allclose(a - b, plan.zone_share(0) * r, atol=1e-12)
    assert one.aggregator_noise_multiplier == pytest.approx(1.0)  # one HDP zone's draw: z·√1


def test_the_federation_has_one_supernode_per_zone():
    base = {"privacy": "zonal", "num-clients": 100, "num-zones": 10, "zonal-sweep-zones": ""}
    assert federation_size(base) == 10
    assert federation_size({**base, "zonal-sweep-zones": "1,2,20"}) == 20
    assert federation_size({**base, "zonal-runtime": "in-server"}) == 100
    assert federation_size({**base, "privacy": "none"}) == 100


def test_a_multi_run_plan_refuses_zone_node_cells():
    """One simulation has one number of SuperNodes: a plan's zonal cell runs in-server."""
    from fedpriv.scenarios.app.multirun import Cell, check_one_node_per_client
    from fedpriv.scenarios.config.schema import ConfigError

    zonal = {"privacy": "zonal", "zonal-runtime": "zone-nodes"}
    with pytest.raises(ConfigError, match="zonal-runtime = 'zone-nodes' is not allowed"):
        check_one_node_per_client([Cell("a", {"privacy": "none"}), Cell("b", zonal)])
    check_one_node_per_client([Cell("c", {**zonal, "zonal-runtime": "in-server"})])
