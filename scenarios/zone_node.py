"""Client task ``zone-node``: a zone as one Flower SuperNode (issue 21; SPEC §3.5, HDP §III).

With ``zonal-runtime = zone-nodes`` the federation has one SuperNode per zone; its
``partition-id`` is the zone id. The node holds its clients' partitions (it derives them
with the same partitioner and seed as a client node, :func:`clients.partitions.federated_data`)
and its own :class:`fedpriv.zonal.ZonalPlan` from its own config (members, weights, q·W_i,
level, σ_i: nothing of it is taken from the message).

One ``train`` message per zone and round carries the global arrays, the zone's sampled client
ids (``zonal-clients``), its level and the elected super-node. The node trains each sampled
client with the worker's compiled trainer (one model and traced step per worker), clips and
noises as its level says (:func:`fedpriv.zonal.release.client_contribution`: LDP noise in each
client's step), sums ``Δ(i) = Σ w_k Δ_k / (q·W_i)`` and adds the HDP zone noise
(:func:`fedpriv.zonal.release.zone_release`), and replies with ``θ + Δ(i)`` only (float64),
plus counts and the clients' weighted train metrics. ``evaluate``: the zone's listed clients
(all its members when none is listed) evaluate; the reply carries their example-weighted means.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

from clients.keras_client import (
    TrainSettings,
    evaluate_local,
    federated_data,
    model_for,
    train_local,
)
from fedpriv import seeds
from fedpriv.zonal.release import ZONE_CLIENTS_KEY, client_contribution, zone_release
from scenarios.keys_zonal import plan_from_config


def _client_seed(cfg: Mapping[str, Any], partition: int) -> int:
    return seeds.client_seed(int(cfg["seed"]), int(cfg.get("server-round", 0)), partition)


def zone_clients(cfg: Mapping[str, Any], zone: int, members: Sequence[int]) -> list[int]:
    """The message's client ids, each checked to be one of this zone's own members."""
    listed = cfg.get(ZONE_CLIENTS_KEY)
    clients = list(members) if listed is None else [int(p) for p in listed]
    stray = sorted(set(clients) - set(members))
    if stray:
        raise ValueError(f"zone {zone}: clients {stray} are not members of this zone")
    return sorted(set(clients))


def _weighted(rows: list[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """Example-weighted means of the clients' metrics (keys every row has)."""
    total = sum(n for n, _ in rows)
    if not rows or total == 0:
        return {}
    keys = set.intersection(*(set(m) for _, m in rows))
    return {k: float(sum(n * float(m[k]) for n, m in rows) / total) for k in sorted(keys)}


def _record(keys: Sequence[str], arrays: Sequence[np.ndarray]) -> ArrayRecord:
    return ArrayRecord(
        OrderedDict((str(k), Array(np.ascontiguousarray(a))) for k, a in zip(keys, arrays))
    )


def train_zone(msg: Message, cfg: dict[str, Any], zone: int) -> RecordDict:
    """One round of zone ``zone``: train its sampled clients, release ``θ + Δ(i)`` only."""
    plan = plan_from_config(cfg)
    level = plan.levels[zone]
    if cfg.get("zonal-level", level) != level:
        raise ValueError(f"zone {zone}: the message says level {cfg['zonal-level']!r}, not {level}")
    clients = zone_clients(cfg, zone, plan.members[zone])
    data = federated_data(cfg)
    model = model_for(cfg, data)
    record = msg.content["arrays"]
    received = record.to_numpy_ndarrays()  # trained from as received (float32: one trace)
    glob = [np.asarray(a, np.float64) for a in received]
    rep, z, c = seeds.reproducible(cfg), plan.noise_multiplier, plan.clipping_norm
    terms, rows, clipped = [], [], 0
    for p in clients:
        client = data.clients[p]
        settings = TrainSettings.from_config(cfg, seed=_client_seed(cfg, p))
        new, metrics = train_local(model, received, client.x_train, client.y_train, settings)
        update = [np.asarray(a, np.float64) - g for a, g in zip(new, glob)]
        entropy = [_client_seed(cfg, p), *seeds.ZONAL_LDP_TAGS]
        term, was = client_contribution(
            update,
            level,
            noise_multiplier=z,
            clipping_norm=c,
            rng=lambda e=entropy: seeds.privacy_rng(e, reproducible=rep),
        )
        terms.append(term)
        clipped += int(was)
        rows.append((len(client.x_train), metrics))
    server_round, seed = int(cfg.get("server-round", 0)), int(cfg["seed"])
    release = zone_release(
        terms,
        [plan.weights[p] for p in clients],
        level=level,
        sampling_rate=plan.sampling_rate,
        zone_weight=plan.zone_weight(zone),
        sigma=plan.sigma_zone(zone),
        zone_rng=lambda: seeds.privacy_stream(
            seed, "zonal-zone-noise", server_round, zone, reproducible=rep
        ),
        template=glob,
        clients=clients,
        clipped=clipped,
    )
    sent = [g + d for g, d in zip(glob, release.delta)]
    metrics = _weighted(rows)
    metrics["num-examples"] = int(sum(n for n, _ in rows))
    metrics["zonal-noise-std"] = z * c if level == "ldp" else 0.0
    metrics.update(release.metrics())
    return RecordDict(
        {"arrays": _record(list(record.keys()), sent), "metrics": MetricRecord(metrics)}
    )


def evaluate_zone(
    msg: Message, cfg: dict[str, Any], zone: int, allowed: frozenset[str] | None
) -> RecordDict:
    """The zone's listed clients evaluate the global model on their test splits."""
    plan = plan_from_config(cfg)
    clients = zone_clients(cfg, zone, plan.members[zone])
    data = federated_data(cfg)
    examples = int(sum(len(data.clients[p].x_test) for p in clients))
    metrics: dict[str, float] = {"num-examples": examples}
    if allowed is None or "accuracy" in allowed:
        model = model_for(cfg, data)
        weights = msg.content["arrays"].to_numpy_ndarrays()
        rows = [
            (len(data.clients[p].x_test), evaluate_local(model, weights, *_test(data, p)))
            for p in clients
        ]
        metrics |= _weighted(rows)
    return RecordDict({"metrics": MetricRecord(metrics)})


def _test(data: Any, partition: int) -> tuple[np.ndarray, np.ndarray]:
    client = data.clients[partition]
    return client.x_test, client.y_test
