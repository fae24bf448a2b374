"""With zone nodes the ServerApp receives zone aggregates only, and each level's noise is drawn
where the level lives.

One real simulation (``fedpriv run``, scenario ``hdp-digits``: none / LDP / HDP / CDP one after
the other) with ``zonal-save-replies = true``: the ZoneGrid writes EVERY reply the ServerApp
receives, with the instruction it answers (:func:`fedpriv.scenarios.nodes.federation.save_replies`).
8 clients in 2 zones, every client sampled (q = 1, W_i = 4), z = 4, C = 0.5, so the noise
dominates the updates and its std identifies who drew it:

* ``ldp``: 4 client draws N(0, (zC)²) inside the zone's sum -> std zC·√4/(q·W_i) = zC/2;
* ``hdp``: one zone draw -> std σ_i = zC/(q·W_i) = zC/4; the server adds nothing;
* ``cdp``: the reply is the exact clipped zone mean; the server's step adds σ_S = zC/(q·W) =
  zC/8 (measured from the next round's global model).

The test recomputes every client's clipped update itself (same weights, data, seed and
compiled trainer) and checks that no reply equals one client's update, and that with the
run's seeded streams (``reproducible-noise``) each reply is exactly the zone mean plus the
noise of the client streams (LDP) or of the zone stream (HDP).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fedpriv.scenarios.config.specs import data_spec, train_spec

from fedpriv.reporting.runlog import read_rounds
from tests.simulate import run_fedpriv

pytestmark = pytest.mark.simulation

Z, C, N, S = 4.0, 0.5, 8, 2
W_I = N // S  # uniform weights, every client sampled: q·W_i = 4
ROUNDS = 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("zone-nodes") / "compare"
    overrides = {
        "scenario": "hdp-digits",
        "num-clients": N,
        "clients-per-round": N,
        "num-zones": S,
        "num-server-rounds": ROUNDS,
        "local-epochs": 1,
        "noise-multiplier": Z,
        "clipping-norm": C,
        "zonal-distributed-eval": "none",
        "zonal-save-replies": True,
        "seed": 3,
    }
    rc, summary, rounds, log = run_fedpriv(overrides, out, timeout=900)
    assert rc == 0, log[-3000:]
    return out


def replies(out: Path, placement: str) -> list[dict]:
    """Every reply the ServerApp received in one placement's run, in order."""
    rows = []
    assert (out / placement / "zone-replies").stat().st_mode & 0o777 == 0o700  # operator's
    for path in sorted((out / placement / "zone-replies").glob("*.npz")):
        with np.load(path) as npz:
            meta = json.loads(str(npz["meta"]))
            keys = sorted(k[len("reply-") :] for k in npz.files if k.startswith("reply-"))
            rows.append(
                {
                    **meta,
                    "sent": [np.asarray(npz[f"sent-{k}"], np.float64) for k in keys],
                    "reply": [np.asarray(npz[f"reply-{k}"], np.float64) for k in keys],
                }
            )
    return rows


def flat(arrays) -> np.ndarray:
    return np.concatenate([np.ravel(a) for a in arrays])


def client_updates(cfg: dict, server_round: int, glob: list[np.ndarray], clients: list[int]):
    """Each client's Δ_k = θ_k − θ, trained here as the zone node trains it."""
    from fedpriv.clients.keras_client import TrainSettings, federated_data, model_for, train_local

    from fedpriv import seeds

    data = federated_data(data_spec(cfg))
    model = model_for(train_spec(cfg), data)
    out = {}
    for p in clients:
        seed = seeds.client_seed(int(cfg["seed"]), server_round, p)
        settings = TrainSettings.from_spec(train_spec(cfg), seed=seed)
        client = data.clients[p]
        new, _ = train_local(model, glob, client.x_train, client.y_train, settings)
        out[p] = [np.asarray(a, np.float64) - g for a, g in zip(new, glob)]
    return out


@pytest.fixture(scope="module")
def views(run):
    """placement -> (config, replies, per-round recomputed clipped client updates)."""
    from fedpriv.privacy.mechanisms import clip_update

    out = {}
    for placement in ("none", "ldp", "hdp", "cdp"):
        cfg = json.loads((run / placement / "summary.json").read_text())["config"]
        rows = replies(run, placement)
        first = [r for r in rows if int(r["config"]["server-round"]) == 1]
        updates = {}
        for r in first:
            raw = client_updates(cfg, 1, r["sent"], list(r["config"]["zonal-clients"]))
            updates.update(
                {p: u if placement == "none" else clip_update(u, C)[0] for p, u in raw.items()}
            )
        out[placement] = (cfg, rows, updates)
    return out


@pytest.mark.parametrize("placement", ["none", "ldp", "hdp", "cdp"])
def test_one_zone_aggregate_per_zone_node_per_round(views, placement):
    _, rows, updates = views[placement]
    assert all(r["type"] == "train" and not r["error"] for r in rows)  # no evaluate messages
    assert len(rows) == ROUNDS * S  # every reply the ServerApp received: S per round
    for rnd in range(1, ROUNDS + 1):
        this = [r for r in rows if int(r["config"]["server-round"]) == rnd]
        assert len(this) == S and len({r["src"] for r in this}) == S  # one per zone node
        assert sorted(int(r["config"]["zonal-zone"]) for r in this) == list(range(S))
        covered = sorted(p for r in this for p in r["config"]["zonal-clients"])
        assert covered == list(range(N))  # the zone messages list every sampled client
    for r in rows[:S]:  # round 1: no reply is one client's update
        delta = flat(r["reply"]) - flat(r["sent"])
        for p in r["config"]["zonal-clients"]:
            assert np.linalg.norm(delta - flat(updates[p])) > 0.05 * np.linalg.norm(delta)
        assert set(r["metrics"]) <= {"num-examples", "zonal-noise-std", "zonal-zone-sigma"}


def residual(view, row) -> np.ndarray:
    """Reply − θ − Σ_k Δ_k/(q·W_i): what the zone node added to its clients' mean."""
    _, _, updates = view
    mean = sum(flat(updates[p]) for p in row["config"]["zonal-clients"]) / W_I
    return flat(row["reply"]) - flat(row["sent"]) - mean


def test_without_noise_the_reply_is_the_zone_mean(views):
    for row in views["none"][1][:S]:
        res = residual(views["none"], row)
        assert np.max(np.abs(res)) < 1e-4  # the recomputed training matches the zone node's
    for row in views["cdp"][1][:S]:  # CDP: the clipped zone mean, un-noised
        assert np.max(np.abs(residual(views["cdp"], row))) < 1e-4


@pytest.mark.parametrize(("placement", "std"), [("ldp", Z * C * 2 / W_I), ("hdp", Z * C / W_I)])
def test_the_zone_reply_carries_the_noise_of_its_level(views, placement, std):
    """LDP: 4 client draws of zC each in the zone's sum; HDP: one zone draw of σ_i."""
    for row in views[placement][1][:S]:
        res = residual(views[placement], row)
        assert np.std(res) == pytest.approx(std, rel=0.1)
        assert abs(np.mean(res)) < 5 * std / np.sqrt(res.size)


def test_the_noise_comes_from_the_client_and_zone_streams(views):
    """With seeded streams (reproducible-noise), the reply is exactly the zone mean plus the
    clients' LDP draws (their own streams, in the zone node) or the zone's HDP draw."""
    from fedpriv import seeds
    from fedpriv.privacy.mechanisms import add_gaussian_noise

    for placement in ("ldp", "hdp"):
        cfg, rows, updates = views[placement]
        assert cfg["reproducible-noise"] is True
        for row in rows[:S]:
            zone, clients = int(row["config"]["zonal-zone"]), row["config"]["zonal-clients"]
            if placement == "ldp":
                noise = 0.0
                for p in clients:
                    rng = seeds.privacy_rng(
                        [seeds.client_seed(int(cfg["seed"]), 1, p), *seeds.ZONAL_LDP_TAGS],
                        reproducible=True,
                    )
                    zero = [np.zeros_like(a) for a in updates[p]]
                    noise = noise + flat(add_gaussian_noise(zero, Z * C, rng))
                noise = noise / W_I
            else:
                rng = seeds.privacy_stream(
                    int(cfg["seed"]), "zonal-zone-noise", 1, zone, reproducible=True
                )
                zero = [np.zeros_like(a) for a in row["sent"]]
                noise = flat(add_gaussian_noise(zero, Z * C / W_I, rng))
            assert np.max(np.abs(residual(views[placement], row) - noise)) < 1e-4


@pytest.mark.parametrize(("placement", "std"), [("ldp", 0.0), ("hdp", 0.0), ("cdp", Z * C / N)])
def test_the_server_adds_noise_only_under_cdp(views, placement, std):
    """θ_2 − θ_1 − Σ_i π_i (reply_i − θ_1): the server's own draw (σ_S = zC/(q·W) in CDP)."""
    _, rows, _ = views[placement]
    first = rows[:S]
    theta1 = flat(first[0]["sent"])
    theta2 = flat(rows[S]["sent"])
    step = sum(flat(r["reply"]) - theta1 for r in first) / S  # π_i = 1/2
    server = theta2 - theta1 - step
    if std == 0.0:
        assert np.max(np.abs(server)) < 1e-5  # float32 rounding of the new global only
    else:
        assert np.std(server) == pytest.approx(std, rel=0.1)


@pytest.mark.slow
def test_a_zone_sweep_runs_on_the_largest_zone_count(tmp_path):
    """``zonal-sweep-zones``: one simulation of max(s) zone nodes; a variant with fewer zones
    messages only its own zones' nodes, and every sampled client is trained by one of them,
    except the one client of a zone sampled below ``min-zone-clients`` (that zone's
    sample is left empty, ``undersized_zones``)."""
    overrides = {
        "scenario": "hdp-digits", "num-clients": 8, "clients-per-round": 4, "num-zones": 2,
        "zonal-sweep-zones": "1,3", "num-server-rounds": 2, "local-epochs": 1,
        "zonal-compare-placements": "hdp", "seed": 1,
    }  # fmt: skip
    rc, _, _, log = run_fedpriv(overrides, tmp_path / "sweep", timeout=600)
    assert rc == 0, log[-3000:]
    for zones in (1, 3):
        records = read_rounds(tmp_path / "sweep" / f"s{zones}-hdp")
        for record in records[1:]:
            assert record["zonal"]["zone_messages"] == zones
            assert sorted(record["zonal"]["zones"]) == [str(z) for z in range(zones)]
            # a zone sampled below min-zone-clients (2) gets an empty sample
            left_out = sorted(set(record["sampled"]) - set(record["replied"]))
            undersized = record["zonal"]["undersized_zones"]
            assert set(record["replied"]) <= set(record["sampled"])
            assert all(p * zones // 8 in undersized for p in left_out)
            for z in undersized:
                assert [p for p in record["sampled"] if p * zones // 8 == z] == [
                    p for p in left_out if p * zones // 8 == z
                ] and len([p for p in left_out if p * zones // 8 == z]) == 1
