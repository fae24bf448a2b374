"""Adversarial clients: one test per ``attack`` value and its invariant.

Each round goes through the real server chain of a standard run
(``fedpriv.scenarios.app.server_app.build_strategy``: RoundRecorder -> ValidUpdatesOnly -> privacy
wrapper -> stock FedAvg) with real Flower ``Message`` objects: the chain's own
``configure_train`` addresses the nodes (a ``PartitionGrid`` over four partitions; it
answers ``get_node_ids`` itself, so no Flower object is faked), every client replies with
an honest model, and partition 0's reply is rewritten by ``fedpriv.clients.adversary.tamper_reply``
exactly as the ClientApp does. References are computed independently in numpy.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from fedpriv.clients.adversary import ATTACKS, attack_weights, parse_partitions, tamper_reply
from fedpriv.scenarios.app.engine import build_strategy, run_config_as_record
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.specs import run_spec, server_run
from fedpriv.scenarios.nodes.federation import PartitionGrid
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

from fedpriv.privacy.mechanisms import metric_sigma_lower_bound

SHAPES = [(4, 3), (3,), (2, 2, 2)]
M = 4
C = 1.0
NODES = {100 + p: p for p in range(M)}  # node id -> partition id


def _models(seed: int = 0) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    """Global model g and four honest client models g + u_p, ‖u_p‖ in {0.5, 1.5, 2.5, 3.5}."""
    rng = np.random.default_rng(seed)
    g = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
    honest = []
    for p in range(M):
        u = [rng.normal(size=s) for s in SHAPES]
        norm = math.sqrt(sum(float(np.sum(x**2)) for x in u))
        honest.append([(a + x * (0.5 + p) / norm).astype(np.float32) for a, x in zip(g, u)])
    return g, honest


def _cfg(privacy: str, attack: str, factor: float, **extra) -> dict:
    return resolve_run_config(
        {
            "privacy": privacy,
            "num-clients": M,
            "clipping-norm": C,
            "noise-multiplier": extra.pop("z", 0.0),
            "attack": attack,
            "attack-factor": factor,
            "malicious-clients": "0" if attack != "none" else "",
            "reproducible-noise": True,  # rounds are compared with each other: seeded noise
            **extra,
        }
    )


def run_round(cfg: dict, *, attacker_absent: bool = False):
    """One training round through the real chain; returns (new global, round record)."""
    g, honest = _models()
    pgrid = PartitionGrid(None, NODES)
    recorder = build_strategy(server_run(cfg), pgrid, np.random.default_rng(0), CATALOG)
    config = run_config_as_record({**cfg, "server-round": 1})
    instructions = recorder.configure_train(1, ArrayRecord(g), config, pgrid)
    replies = []
    for msg in instructions:
        partition = NODES[msg.metadata.dst_node_id]
        if attacker_absent and partition == 0:
            continue
        content = RecordDict(
            {
                "arrays": ArrayRecord(honest[partition]),
                "metrics": MetricRecord({"num-examples": 10}),
            }
        )
        content = tamper_reply(content, g, run_spec(cfg), partition, 1)
        replies.append(Message(content=content, reply_to=msg))
    arrays, _ = recorder.aggregate_train(
        1, sorted(replies, key=lambda m: NODES[m.metadata.src_node_id])
    )
    return (None if arrays is None else arrays.to_numpy_ndarrays()), dict(recorder.current)


def _flat(arrays) -> np.ndarray:
    return np.concatenate([np.asarray(a, np.float64).ravel() for a in arrays])


def _clip(delta: np.ndarray, c: float) -> np.ndarray:
    norm = float(np.linalg.norm(delta))
    return delta * min(1.0, c / norm) if norm > 0 else delta


def honest_clipped_part() -> np.ndarray:
    """g + Σ_{p≠0} clip(Δ_p)/m, computed independently."""
    g, honest = _models()
    gf = _flat(g)
    return gf + sum(_clip(_flat(h) - gf, C) for h in honest[1:]) / M


# --- invalid updates: never reach the global model ----------------------------------------------


@pytest.mark.parametrize("attack", ["nan", "inf", "wrong-shape"])
@pytest.mark.parametrize(
    "privacy,extra",
    [("none", {}), ("global-dp", {"z": 0.7}), ("metric-dp", {"z": 0.7, "distance-on": "raw"})],
)
def test_invalid_updates_never_reach_the_global_model(attack, privacy, extra):
    """Invariant: the result equals the round where the attacker did not reply at all."""
    cfg = _cfg(privacy, attack, 1.0, **extra)
    attacked, record = run_round(cfg)
    absent, _ = run_round(cfg, attacker_absent=True)
    assert list(record["rejected"]) == ["0"]  # partition 0, the attacker (why: the value)
    assert not record["aggregation-skipped"]
    assert all(np.all(np.isfinite(a)) for a in attacked)
    assert [a.shape for a in attacked] == [tuple(s) for s in SHAPES]
    np.testing.assert_array_equal(_flat(attacked), _flat(absent))


# --- boosted / flipped / replaced models: bounded by C/m under clipping ---------------------------


@pytest.mark.parametrize("attack,factor", [("scale", 50.0), ("sign-flip", 50.0),
                                           ("model-replacement", float(M))])  # fmt: skip
def test_clipping_bounds_one_clients_influence_to_c_over_m(attack, factor):
    """Invariant (global DP and metric DP, z = 0): ‖w − (g + Σ_honest clip(Δ)/m)‖ <= C/m;
    without clipping (privacy none) the same reply moves the model further."""
    reference = honest_clipped_part()
    for privacy, extra in [("global-dp", {}), ("metric-dp", {"distance-on": "clipped"}),
                           ("metric-dp", {"distance-on": "raw"})]:  # fmt: skip
        out, record = run_round(_cfg(privacy, attack, factor, **extra))
        influence = float(np.linalg.norm(_flat(out) - reference))
        assert influence <= C / M + 1e-5, (privacy, extra, influence)
        assert 0 in record["dp-clipped"]
    g, honest = _models()
    plain, _ = run_round(_cfg("none", attack, factor))
    honest_mean_part = _flat(g) + sum(_flat(h) - _flat(g) for h in honest[1:]) / M
    assert float(np.linalg.norm(_flat(plain) - honest_mean_part)) > 10 * C / M


def test_model_replacement_takes_over_plain_fedavg():
    """What the attack achieves without clipping: FedAvg lands near the target w_t = 0."""
    g, honest = _models()
    out, _ = run_round(_cfg("none", "model-replacement", float(M)))
    expected = sum(_flat(h) - _flat(g) for h in honest[1:]) / M  # target 0 + honest drift
    np.testing.assert_allclose(_flat(out), expected, atol=1e-5)


# --- metric-DP distance gaming: sigma keeps its floor with distance-on = clipped -----------------


def sigma_floor(z: float, c: float, m: int, num_layers: int) -> float:
    """σ >= z·C/(m·d_max), d_max = 2C/√L: clipped updates have ‖clip Δ‖ <= C, so the mean
    over L layers of ‖clip Δ_i(ℓ) − clip Δ_j(ℓ)‖ is at most (1/L)·√L·2C (Cauchy–Schwarz)."""
    return z * c / (m * 2.0 * c / math.sqrt(num_layers))


def test_distance_gaming_cannot_push_sigma_below_the_clipped_bound():
    z = 0.5
    honest_cfg = _cfg("metric-dp", "none", 1.0, z=z, **{"distance-on": "clipped"})
    _, honest_record = run_round(honest_cfg)
    floor = metric_sigma_lower_bound(z, C, M, len(SHAPES), distance_on="clipped")
    assert floor == pytest.approx(sigma_floor(z, C, M, len(SHAPES)))  # the metric-DP σ floor
    for factor in (1e2, 1e4, 1e6):
        _, record = run_round(
            _cfg("metric-dp", "distance-gaming", factor, z=z, **{"distance-on": "clipped"})
        )
        assert record["dp-sigma"] >= floor * (1 - 1e-9), (factor, record["dp-sigma"], floor)
        assert record["dp-distance"] <= 2 * C / math.sqrt(len(SHAPES)) + 1e-9
    assert honest_record["dp-sigma"] >= floor
    # the authors' raw distance has no such floor: the same attack shrinks sigma ~factor-fold
    _, raw = run_round(_cfg("metric-dp", "distance-gaming", 1e4, z=z, **{"distance-on": "raw"}))
    assert raw["dp-sigma"] < floor / 100
    assert metric_sigma_lower_bound(z, C, M, len(SHAPES), distance_on="raw") == 0.0


# --- the adversary itself ------------------------------------------------------------------------


def test_every_attack_value_has_a_test_and_changes_the_reply():
    g, honest = _models()
    rng = np.random.default_rng(0)
    for attack in ATTACKS[1:]:
        out = attack_weights(honest[0], g, attack, factor=3.0, rng=rng)
        changed = any(
            a.shape != b.shape or not np.array_equal(a, b, equal_nan=False)
            for a, b in zip(out, honest[0])
        )
        assert changed, attack
    assert attack_weights(honest[0], g, "none", factor=3.0, rng=rng)[0] is not honest[0][0]


def test_honest_partitions_and_attack_none_are_untouched():
    g, honest = _models()
    content = RecordDict({"arrays": ArrayRecord(honest[1])})
    cfg = {"attack": "scale", "attack-factor": 9.0, "malicious-clients": "0,2", "num-clients": 4,
           "seed": 0, "server-round": 1}  # fmt: skip
    spec = run_spec(cfg)
    assert tamper_reply(content, g, spec, 1, 1) is content
    assert tamper_reply(content, g, replace(spec, attack="none"), 0, 1) is content
    attacked = tamper_reply(content, g, spec, 2, 1)["arrays"].to_numpy_ndarrays()
    np.testing.assert_allclose(attacked[0], g[0] + 9.0 * (honest[1][0] - g[0]), rtol=1e-5)


def test_parse_partitions():
    assert parse_partitions("", 4) == ()
    assert parse_partitions(" 3, 0,3", 4) == (0, 3)
    for bad in ("4", "-1", "a", "1.5"):
        with pytest.raises(ValueError, match=bad):
            parse_partitions(bad, 4)
