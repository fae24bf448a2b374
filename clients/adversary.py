"""Adversarial clients: what a malicious partition does to its training reply.

The honest training task runs unchanged; :func:`tamper_reply` then rewrites the reply of a
partition listed in ``malicious-clients`` (threat model: a malicious client that controls
what it sends, MP §5 and GP §3; it cannot touch other clients or the server). With the
round's global weights ``w_g`` and the honest local result ``w_i`` (``Δ = w_i − w_g``), and
``f`` = ``attack-factor``:

============================  ==========================================================
``attack``                    what the client sends
============================  ==========================================================
``nan`` / ``inf``             the honest model with one element set to NaN / +Inf
``wrong-shape``               the honest model with the first array flattened + one value
``scale``                     ``w_g + f·Δ`` (a boosted update)
``sign-flip``                 ``w_g − f·Δ``
``model-replacement``         ``w_g + f·(w_t − w_g)`` with the target ``w_t = 0`` (the
                              boosted model-replacement attack of Bagdasaryan et al. 2020,
                              §4: with ``f = m`` plain FedAvg lands on ``w_t``)
``distance-gaming``           ``w_i + f·u_ℓ`` per layer ℓ, ``u_ℓ`` a random unit direction:
                              pushes the model ~``f`` away from everyone in every layer, so
                              metric DP's ``d`` (mean per-layer distance, SPEC §3.2) grows by
                              ~``f`` and, with ``distance-on = raw``, ``σ = z·C/(m·d)`` shrinks
============================  ==========================================================

What must hold (tests/test_adversary.py): NaN/Inf/wrong shapes never reach the global
model (``fedpriv.strategies.validating.ValidUpdatesOnly``); under clipping (global DP, metric DP)
one client's contribution to the mean is ``clip(Δ)/m``, norm ``<= C/m`` whatever it sends;
with ``distance-on = clipped`` the gamed d is bounded, so σ stays above a stated floor.
The num-examples metric is left honest (weight inflation is a different attack).

The math is plain numpy (:func:`attack_weights`); :func:`tamper_reply` is the thin
adapter on a Flower ``RecordDict``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedpriv import seeds
from fedpriv.spec import RunSpec

ATTACKS = (
    "none",
    "nan",
    "inf",
    "wrong-shape",
    "scale",
    "sign-flip",
    "model-replacement",
    "distance-gaming",
)

NDArrays = list[np.ndarray]


def parse_partitions(text: str, num_clients: int) -> tuple[int, ...]:
    """``"0,3"`` -> ``(0, 3)``; ``""`` -> ``()``. Raises ValueError naming the bad item."""
    out: list[int] = []
    for item in (x.strip() for x in str(text).split(",")):
        if not item:
            continue
        if not item.isdigit() or int(item) >= num_clients:
            raise ValueError(f"{item!r} is not a partition id in [0, {num_clients - 1}]")
        out.append(int(item))
    return tuple(sorted(set(out)))


def attack_rng(seed: int, server_round: int, partition: int) -> np.random.Generator:
    """The attack's own seeded stream for one (round, partition) call (``fedpriv.seeds``)."""
    return seeds.stream(seed, "attack", server_round, partition)


def attack_weights(
    local: Sequence[np.ndarray],
    reference: Sequence[np.ndarray],
    attack: str,
    *,
    factor: float,
    rng: np.random.Generator,
) -> NDArrays:
    """The arrays a malicious client sends instead of its honest ``local`` result.

    ``reference`` is the global model of the round (``w_g``); see the module table.
    """
    if attack not in ATTACKS:
        raise ValueError(f"attack = {attack!r} is not allowed; expected one of {ATTACKS}")
    local = [np.asarray(w) for w in local]
    ref = [np.asarray(w) for w in reference]
    if attack == "none":
        return [w.copy() for w in local]
    if attack in ("nan", "inf"):
        out = [w.copy() for w in local]
        flat = out[0].reshape(-1)
        flat[0] = np.nan if attack == "nan" else np.inf
        return out
    if attack == "wrong-shape":
        return [np.append(local[0].ravel(), 0.0).astype(local[0].dtype)] + [
            w.copy() for w in local[1:]
        ]
    if attack == "scale":
        return [(g + factor * (w - g)).astype(w.dtype) for w, g in zip(local, ref)]
    if attack == "sign-flip":
        return [(g - factor * (w - g)).astype(w.dtype) for w, g in zip(local, ref)]
    if attack == "model-replacement":
        return [(g + factor * (np.zeros_like(g) - g)).astype(g.dtype) for g in ref]
    return [(w + factor * _unit(rng, w.shape)).astype(w.dtype) for w in local]


def _unit(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """A uniformly random direction of unit Frobenius norm."""
    g = rng.normal(size=shape)
    norm = float(np.linalg.norm(g))
    return g / norm if norm > 0 else np.ones(shape) / np.sqrt(max(1, g.size))


def is_malicious(spec: RunSpec, partition: int) -> bool:
    """Whether ``partition`` attacks in this run (``attack`` set and listed in
    ``malicious-clients``)."""
    if str(spec.attack) == "none":
        return False
    return partition in parse_partitions(str(spec.malicious_clients), int(spec.data.num_clients))


def tamper_reply(
    content: Any, reference: Sequence[np.ndarray], spec: RunSpec, partition: int, server_round: int
) -> Any:
    """A copy of the honest reply ``content`` (a Flower RecordDict) as the attacker sends it.

    Honest partitions get ``content`` back unchanged. Every ArrayRecord is attacked with
    the same rule (the attack's stream of (seed, ``server_round``, partition)); metrics are
    kept (an honest ``num-examples``).
    """
    if not is_malicious(spec, partition):
        return content
    from flwr.app import Array, ArrayRecord, RecordDict

    rng = attack_rng(int(spec.seed), int(server_round), partition)
    records = {}
    for name, record in content.items():
        if isinstance(record, ArrayRecord):
            arrays = attack_weights(
                record.to_numpy_ndarrays(),
                reference,
                str(spec.attack),
                factor=float(spec.attack_factor),
                rng=rng,
            )
            record = ArrayRecord(OrderedDict(zip(record.keys(), map(Array, arrays))))
        records[name] = record
    return RecordDict(records)
