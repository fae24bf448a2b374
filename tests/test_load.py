"""Cross-device scale (load): 10,000 virtual clients on embedded data, sampled
evaluation. The timed figures are in ``make bench`` (bench/bench_load.py), not here."""

from __future__ import annotations

import numpy as np
from fedpriv.scenarios.app.engine import build_strategy
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.specs import server_run
from fedpriv.scenarios.nodes.federation import PartitionGrid
from flwr.app import ArrayRecord, ConfigRecord

from fedpriv.data import load_federated


def test_bootstrap_partition_gives_ten_thousand_seeded_clients():
    data = load_federated("digits", partition="bootstrap", num_clients=10_000, seed=0)
    assert data.num_clients == 10_000
    sizes = {(len(c.x_train), len(c.x_test)) for c in data.clients}
    assert sizes == {(16, 4)}
    small = [load_federated("digits", partition="bootstrap", num_clients=300, seed=0)
             for _ in range(2)]  # fmt: skip
    np.testing.assert_array_equal(small[0].clients[299].x_train, small[1].clients[299].x_train)
    np.testing.assert_array_equal(small[0].clients[0].x_train, data.clients[0].x_train)
    assert not np.array_equal(data.clients[0].x_train, data.clients[1].x_train)


def test_evaluate_sampled_only_offers_the_rounds_sample():
    nodes = {1000 + p: p for p in range(50)}
    for sampled_only, expected in ((True, 10), (False, 50)):
        cfg = resolve_run_config({"num-clients": 50, "clients-per-round": 10,
                                  "evaluate-sampled-only": sampled_only})  # fmt: skip
        pgrid = PartitionGrid(None, nodes)
        recorder = build_strategy(server_run(cfg), pgrid, np.random.default_rng(0), CATALOG)
        arrays = ArrayRecord([np.zeros(3, np.float32)])
        train = list(recorder.configure_train(1, arrays, ConfigRecord(), pgrid))
        evaluate = list(recorder.configure_evaluate(1, arrays, ConfigRecord(), pgrid))
        assert len(train) == 10 and len(evaluate) == expected
        if sampled_only:
            dst = sorted(m.metadata.dst_node_id for m in evaluate)
            assert dst == sorted(m.metadata.dst_node_id for m in train)
