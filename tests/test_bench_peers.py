"""The peers row of ``make bench`` (bench/bench_peers.py): its workloads, timing and cells.

No peer is run here (never a timed test): the row's arithmetic and the shards the peers read.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench import bench_peers


def test_workloads_are_the_issues_a_b_and_scale():
    a, b, scale = (bench_peers.workload(n, quick=False) for n in ("A", "B", "scale"))
    assert (a["num-clients"], a["clients-per-round"], a["num-server-rounds"]) == (100, 0, 20)
    assert (a["local-epochs"], a["batch-size"], a["learning-rate"]) == (5, 8, 0.02)
    assert (b["clients-per-round"], b["privacy"], b["num-server-rounds"]) == (20, "global-dp", 20)
    assert (scale["num-clients"], scale["clients-per-round"], scale["num-server-rounds"]) == (
        1000,
        100,
        5,
    )
    quick = bench_peers.workload("B", quick=True)
    assert (quick["num-clients"], quick["clients-per-round"], quick["num-server-rounds"]) == (
        20,
        4,
        2,
    )
    assert bench_peers.WORKLOADS["B"]["num-clients"] == 100  # --quick changed a copy


def test_timing_splits_start_up_from_the_mean_round():
    got = bench_peers.timing(30.0, [12.0, 14.0, 16.5, 18.0])
    assert got["per_round"] == pytest.approx(2.0)  # (18 - 12) / 3
    assert got["startup"] == pytest.approx(10.0)
    one = bench_peers.timing(9.0, [7.0])
    assert (one["per_round"], one["startup"]) == (7.0, 0.0)


def test_a_skipped_peer_is_one_line_and_ratios_are_against_fedpriv():
    def broken():
        raise FileNotFoundError("/x/.venv-peers/bin/python is missing\n(make bench-peers-env)")

    skipped = bench_peers._try(broken)
    assert skipped.startswith("skipped: FileNotFoundError:") and "\n" not in skipped
    ours = {"wall": 40.0, "startup": 8.0, "per_round": 1.5, "rss": 2**30, "accuracy": 0.7}
    floor = dict(ours, wall=10.0)
    assert "**0.25x** fedpriv's wall" in bench_peers._cell("numpy floor", floor, ours)
    assert bench_peers._cell("pfl", skipped, ours) == f"pfl: {skipped}"
    assert "not measured" in bench_peers.caveat(skipped, floor)


def test_caveat_counts_what_pfl_aggregates():
    keras3 = {"keras": "3.15.1", "aggregated": ["bias", "kernel"], "accuracy": 0.9}
    keras3["trainable"] = ["d/kernel", "d/bias", "d1/kernel", "d1/bias"]
    legacy = dict(keras3, keras="2.21.0", aggregated=["a", "b", "c", "d"], accuracy=0.75)
    text = bench_peers.caveat({"pfl": keras3}, {"pfl": legacy})
    assert "aggregates 2 of 4 variables (bias, kernel)" in text
    assert "(Keras 2.21.0) 4 of 4" in text


def test_shards_file_holds_the_runs_shards(tmp_path):
    from fedpriv.scenarios.config.registry import resolve_run_config

    from fedpriv.data import load_federated

    cfg = resolve_run_config(bench_peers.workload("scale", quick=True))
    path = bench_peers.write_shards(cfg, tmp_path / "s.npz")
    data = load_federated("digits", partition="iid", num_clients=200, seed=int(cfg["seed"]))
    with np.load(path) as got:
        assert np.array_equal(got["x_test"], data.x_test)
        for k in (0, 77, 199):
            assert np.array_equal(got[f"x{k}"], data.clients[k].x_train)
            assert np.array_equal(got[f"yt{k}"], data.clients[k].y_test)
    settings = bench_peers.peer_settings(cfg, path, tmp_path / "stamps.json")
    assert settings["rounds"] == 2 and settings["clients-per-round"] == 20
