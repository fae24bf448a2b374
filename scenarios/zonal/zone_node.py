"""Client task ``zone-node``: a zone as one Flower SuperNode (SPEC §3.5, HDP §III).

With ``zonal-runtime = zone-nodes`` the federation has one SuperNode per zone; its
``partition-id`` is the zone id. The node holds its clients' partitions (it derives them
with the same partitioner and seed as a client node,
:func:`fedpriv.clients.partitions.federated_data`)
and its own :class:`fedpriv.zonal.ZonalPlan` from its own config (members, weights, q·W_i,
level, σ_i: nothing of it is taken from the message).

One ``train`` message per zone and round carries the global arrays, the zone's sampled client
ids (``zonal-clients``), its level and the elected super-node. The node trains each sampled
client with the worker's compiled trainer (one model and traced step per worker), clips and
noises as its level says (:func:`fedpriv.zonal.release.client_contribution`: LDP noise in each
client's step), sums ``Δ(i) = Σ w_k Δ_k / (q·W_i)`` and adds the HDP zone noise
(:func:`fedpriv.zonal.release.zone_release`), and replies with ``θ + Δ(i)`` only (float64),
plus counts and the clients' weighted train metrics. With ``zonal-secagg`` the clients' terms
are summed through SecAgg (:func:`fedpriv.zonal.secure_sum.secure_zone_delta`): the
aggregation sees only masked vectors and the zone sum, and an HDP zone's noise is the sum of
the clients' shares (each from its own stream ``[client_seed, 5, 5]``). ``evaluate``: the
zone's listed clients (all its members when none is listed) evaluate; the reply carries their
example-weighted means.

The zone node counts its own releases over its lifetime (:mod:`fedpriv.clients.releases`): its
ledger
is in its own state directory (``client-state-dir`` of its node config, else the per-node
default, :func:`fedpriv.scenarios.config.node_roles.node_ledger`), keyed by its zone id, one release
sequence per zone mechanism (level, z, C, σ_i, members, q) across every run. A request
identical to one it answered (in any run) gets the cached reply or is refused; a rewound or
altered round of a run is refused (a replayed round never gets fresh noise); a new round is
charged before the node trains, and past its own ``num-server-rounds`` releases in a run (the
node's own value when it sets one, else the run's) it refuses. A sample of 1 .. ``min-zone-clients``
− 1 of its clients is refused (``min-zone-clients``, its own value, default 2, the smallest
zone sample of the HDP paper's settings: s = 2 zones, k = 4 online clients); an empty sample
releases only the zone noise, so it is served.

Lifetime ε: each release is charged its level's Gaussian event, ``1/z²`` of μ-GDP (no
amplification by the server's sampling; ``inf`` for a level that adds no noise before the
reply leaves, :func:`fedpriv.zonal.accounting.release_mu_squared`); the ledger's ``spent`` is
``Σ 1/z²`` over every release of every run, and the node's lifetime ε at its own ``dp-delta``
is :func:`fedpriv.zonal.accounting.lifetime_epsilon` of it. With its own ``max-epsilon``
(node config, else its run config; 0 or unset: none, never the message's) a release that
would take it past is refused in one line.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
from fedpriv.clients.cohort_train import run_cohort
from fedpriv.clients.keras_client import (
    TrainSettings,
    evaluate_local,
    federated_data,
    model_for,
    train_local,
)
from fedpriv.clients.records import arrays_of
from fedpriv.clients.releases import (
    ReleaseRefused,
    guarded_release,
    node_counter,
    request_digest,
    sequence_of,
)
from fedpriv.scenarios.config.node_spec import node_data, node_state_dir
from fedpriv.scenarios.config.specs import NodeCall
from fedpriv.scenarios.speed.keys import cohort_training
from fedpriv.scenarios.zonal.keys import plan_from_config, secagg_from_config
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict

from fedpriv import seeds
from fedpriv.spec import RunSpec
from fedpriv.zonal.accounting import mu_squared_budget, release_mu_squared
from fedpriv.zonal.release import ZONE_CLIENTS_KEY, client_contribution, zone_release

ZONE_PARTY = "zone-node"
MIN_ZONE_CLIENTS_KEY = "min-zone-clients"
MIN_ZONE_CLIENTS = 2  # HDP paper (§VI, Table IV setting): s = 2 zones, k = 4 online clients


def own_value(context: Context | None, key: str) -> Any:
    """The node's own value of ``key`` (node config over run config), or None when unset or
    ``"auto"`` (then delegated to the run's resolved value)."""
    if context is None:
        return None
    for source in (context.node_config, context.run_config):
        value = source.get(key)
        if value is not None and value != "auto":
            return value
    return None


def min_zone_clients(context: Context | None) -> int:
    """The node's own ``min-zone-clients`` (an integer >= 2; default :data:`MIN_ZONE_CLIENTS`)."""
    value = own_value(context, MIN_ZONE_CLIENTS_KEY)
    if value is None:
        return MIN_ZONE_CLIENTS
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        raise ValueError(
            f"{MIN_ZONE_CLIENTS_KEY} = {value!r} is not allowed; expected an integer >= 2"
        )
    return value


def check_sample(zone: int, clients: Sequence[int], minimum: int) -> None:
    """Refuse a zone sample of 1 .. ``minimum`` − 1 clients (one client's update would be the
    zone's release up to the zone noise)."""
    if 0 < len(clients) < minimum:
        raise ReleaseRefused(
            f"zone {zone}: {len(clients)} sampled client(s) {list(clients)} is fewer than "
            f"{MIN_ZONE_CLIENTS_KEY} = {minimum}"
        )


def max_releases(context: Context | None, spec: RunSpec) -> int:
    """The node's own ``num-server-rounds``, its release limit per run: its node or run
    config's value, else its own resolved one (``spec``'s: the allow-list refuses a message
    whose rounds differ from the node's own), never the message's."""
    value = own_value(context, "num-server-rounds")
    return int(value if value is not None else spec.rounds)


def epsilon_budget(context: Context | None, delta: float) -> tuple[float | None, str]:
    """The node's own lifetime ``max-epsilon`` as a budget on its ledger's ``Σ 1/z²``
    (:func:`fedpriv.zonal.accounting.mu_squared_budget` at its own δ; None: no budget) and
    the budget's one-line name."""
    value = own_value(context, "max-epsilon")
    if value is None or value == "" or float(value) == 0:
        return None, "budget"
    max_eps = float(value)
    if not max_eps > 0:
        raise ValueError(f"max-epsilon = {value!r} is not allowed; expected a float >= 0")
    limit = mu_squared_budget(max_eps, delta)
    return limit, f"max-epsilon = {max_eps:g} at delta {delta:g} (sum of 1/z^2 <= {limit:.6g})"


def _raise(err: BaseException) -> Any:
    raise err


def _client_seed(call: NodeCall, partition: int) -> int:
    return seeds.client_seed(int(call.spec.seed), call.round, partition)


def zone_clients(call: NodeCall, zone: int, members: Sequence[int]) -> list[int]:
    """The message's client ids, each checked to be one of this zone's own members."""
    listed = call.record.get(ZONE_CLIENTS_KEY)
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


def train_zone(
    msg: Message, call: NodeCall, zone: int, context: Context | None = None
) -> RecordDict:
    """One round of zone ``zone`` through the node's own release counter (module docstring).

    ``context``: the node's Flower context (its state directory and limits); None (a direct
    call) keeps the ledger in the default per-run directory of run 0.
    """
    plan = plan_from_config(call.record, call.spec.data)  # the zonal keys' own reader
    level = plan.levels[zone]
    said = call.record.get("zonal-level", level)
    if said != level:
        raise ValueError(f"zone {zone}: the message says level {said!r}, not {level}")
    clients = zone_clients(call, zone, plan.members[zone])
    check_sample(zone, clients, min_zone_clients(context))
    if context is None:
        context = Context(0, 0, {"partition-id": zone}, RecordDict(), {})
    mechanism = {
        "zone": zone,
        "level": level,
        "z": plan.noise_multiplier,
        "C": plan.clipping_norm,
        "sigma": plan.sigma_zone(zone),
        "q": plan.sampling_rate,
        "members": plan.members[zone],
    }
    secure = secagg_from_config(call.record)
    if secure is not None:  # the noise comes from the clients' shares: another mechanism
        mechanism["secagg-dropouts"] = secure.dropouts
    server_round = call.round
    budget, budget_name = epsilon_budget(context, float(call.spec.params.delta))
    return guarded_release(
        node_counter(context, ZONE_PARTY, node_state_dir(context)),
        sequence_of(mechanism),
        server_round,
        request_digest(msg, server_round),
        lambda _ticket: _release(msg, call, zone, plan, clients),
        run=str(context.run_id),
        max_releases=max_releases(context, call.spec),
        rewind="refuse",
        cost=release_mu_squared(level, plan.noise_multiplier),
        budget=budget,
        budget_name=budget_name,
        data=node_data(context),
    )


def _release(msg: Message, call: NodeCall, zone: int, plan: Any, clients: list[int]) -> RecordDict:
    """Train the sampled clients, clip and noise per the zone's level: ``θ + Δ(i)``."""
    level = plan.levels[zone]
    spec = call.spec
    data = federated_data(spec.data)
    model = model_for(spec.train, data)
    record = msg.content["arrays"]
    received = arrays_of(record)  # trained from as received (float32: one trace)
    glob = [np.asarray(a, np.float64) for a in received]
    rep, z, c = spec.reproducible_noise, plan.noise_multiplier, plan.clipping_norm

    def contribution(p: int) -> tuple[Any, bool, int, dict[str, float]]:
        """Client p trains from the received model; its clipped (and, in an LDP zone,
        noised) update."""
        client = data.clients[p]
        settings = TrainSettings.from_spec(spec.train, seed=_client_seed(call, p))
        new, metrics = train_local(model, received, client.x_train, client.y_train, settings)
        update = [np.asarray(a, np.float64) - g for a, g in zip(new, glob)]
        entropy = [_client_seed(call, p), *seeds.ZONAL_LDP_TAGS]
        term, was = client_contribution(
            update,
            level,
            noise_multiplier=z,
            clipping_norm=c,
            rng=lambda e=entropy: seeds.privacy_rng(e, reproducible=rep),
        )
        return term, bool(was), len(client.x_train), metrics

    tasks = [functools.partial(contribution, p) for p in clients]
    if cohort_training(call.record):
        outcomes = [o.value if o.error is None else _raise(o.error) for o in run_cohort(tasks)]
    else:
        outcomes = [task() for task in tasks]
    terms = [term for term, _, _, _ in outcomes]
    clipped = sum(int(was) for _, was, _, _ in outcomes)
    rows = [(n, metrics) for _, _, n, metrics in outcomes]
    server_round, seed = call.round, int(spec.seed)
    release = zone_release(
        terms,
        [plan.weights[p] for p in clients],
        level=level,
        sampling_rate=plan.sampling_rate,
        zone_weight=plan.zone_weight(zone),
        noise_multiplier=z,
        clipping_norm=c,
        zone_rng=lambda: seeds.privacy_stream(
            seed, "zonal-zone-noise", server_round, zone, reproducible=rep
        ),
        template=glob,
        clients=clients,
        clipped=clipped,
        secure=secagg_from_config(call.record),
        share_rng=lambda p: seeds.privacy_rng(
            [_client_seed(call, p), *seeds.ZONAL_SHARE_TAGS], reproducible=rep
        ),
        context=f"round {server_round} zone {zone}".encode(),
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
    msg: Message, call: NodeCall, zone: int, allowed: frozenset[str] | None
) -> RecordDict:
    """The zone's listed clients evaluate the global model on their test splits."""
    plan = plan_from_config(call.record, call.spec.data)
    clients = zone_clients(call, zone, plan.members[zone])
    spec = call.spec
    data = federated_data(spec.data)
    examples = int(sum(len(data.clients[p].x_test) for p in clients))
    metrics: dict[str, float] = {"num-examples": examples}
    if allowed is None or "accuracy" in allowed:
        model = model_for(spec.train, data)
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
