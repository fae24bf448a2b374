"""The client side of ``privacy = distributed-dp``: client task ``distributed-dp`` (client code).

One task answers the four SecAgg steps of a round, named by the message's ``secagg-step``
(:mod:`fedpriv.strategies.distributed_dp` sends them):

- ``keys``: the client's two public keys for the round;
- ``shares``: its Shamir shares of its self-mask seed and masking key, each sealed to its
  holder (:mod:`fedpriv.privacy.distributed.party`);
- ``masked``: train from the global model, then clip, rotate, round, add its own Skellam
  share and mask the update (``poisson``: first its secret coin, q = its own
  ``distributed-inclusion-rate``; a client that is out sends noise around a zero update and
  does not train); the reply is the masked vector only (and ``num-examples`` = 1: a real
  count would leave outside the sum). Charged in the node's own ledger before it is
  computed (``distributed-dp-<partition>``, unit: one participation);
- ``reveal``: open the shares sealed to it and reveal, once per round (its own ledger
  ``distributed-dp-reveal``), the shares the server needs for the survivors' self masks
  and the dropped clients' keys.

Every secret of a round comes from the client's own 32-byte secret in its state folder
(``distributed-dp-secret-<partition>``, created 0600) and the round's label (run id and
round): nothing secret is in a message or in the server's hands. μ, b and t come from the
client's own config (:func:`fedpriv.privacy.modes.distributed_dp.resolve`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from fedpriv.clients.records import arrays_of
from fedpriv.clients.releases import guarded_release, node_counter, request_digest, sequence_of
from fedpriv.scenarios.config.node_spec import node_data, node_state_dir
from fedpriv.scenarios.config.specs import NodeCall
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from fedpriv import seeds
from fedpriv.privacy.distributed import encoding, masks, secagg
from fedpriv.privacy.distributed.party import SECRET_BYTES, RoundParty, cohort_params
from fedpriv.privacy.modes.distributed_dp import (
    STEP_KEY,
    TASK,
    DistributedDPParams,
    resolve,
    threshold_of,
)
from fedpriv.privacy.releases import Ticket
from fedpriv.spec import RunSpec

PARTY = TASK  # the ledger of a client's masked releases
REVEAL_PARTY = f"{TASK}-reveal"  # the ledger of its unmasking answers (one per round)
SECAGG_RECORD = "secagg"
MASKED_KEY = "masked"


def round_label(server_round: int) -> bytes:
    """The round's label (the server's :func:`fedpriv.strategies.distributed_dp.round_label`)."""
    return f"fedpriv-ddp-round-{int(server_round)}".encode()


def client_secret(folder: Path, partition: int) -> bytes:
    """The client's own 32-byte secret (created once, 0600, in its own state folder)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"distributed-dp-secret-{int(partition)}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        data = path.read_bytes()
        if len(data) != SECRET_BYTES:
            raise ValueError(f"{path} is not allowed: expected {SECRET_BYTES} bytes") from None
        return data
    secret = os.urandom(SECRET_BYTES)
    with os.fdopen(fd, "wb") as out:
        out.write(secret)
        out.flush()
        os.fsync(out.fileno())
    return secret


def _stub(n: int, spec: RunSpec, label: bytes, mask_keys: list) -> secagg.SecAggParams:
    """The round's cohort and neighbour graph (the share and reveal steps need no vector)."""
    if len(mask_keys) != n:
        raise ValueError(f"mask-keys of {len(mask_keys)} clients are not allowed; expected n = {n}")
    return cohort_params(
        threshold=threshold_of(spec), bits=2, size=1, context=label, mask_keys=mask_keys,
        colluders=spec.params.colluders,
    )  # fmt: skip


def _reply(values: dict) -> RecordDict:
    return RecordDict({SECAGG_RECORD: ConfigRecord(values)})


def train_distributed(
    msg: Message, call: NodeCall, partition: int, context: Context | None = None
) -> RecordDict:
    """Client task ``distributed-dp``: one SecAgg step of the round (module docstring)."""
    if context is None:
        context = Context(0, 0, {"partition-id": partition}, RecordDict(), {})
    spec = call.spec
    if not isinstance(spec.params, DistributedDPParams):
        raise ValueError(
            f"the distributed-dp task on a node whose privacy mode is {spec.mode_name}"
        )
    step = str(call.record.get(STEP_KEY, "masked"))
    record = msg.content[SECAGG_RECORD] if SECAGG_RECORD in msg.content else ConfigRecord({})
    folder = node_state_dir(context)
    secret = client_secret(folder, partition)
    context_label = round_label(call.round)
    label = f"run-{context.run_id}/".encode() + context_label
    if step == "keys":
        keys = RoundParty.public_keys_of(secret, label, masks.DEFAULT_AGREEMENT)
        return _reply({"mask-key": keys.mask, "channel-key": keys.channel})
    n, me = int(record["n"]), int(record["id"])
    if step == "shares":
        mask_keys = list(record["mask-keys"])
        party = RoundParty(secret, label, me, _stub(n, spec, context_label, mask_keys))
        sealed = party.sealed_shares(mask_keys, list(record["channel-keys"]))
        holders = sorted(sealed)
        return _reply({"holders": holders, "sealed": [sealed[h] for h in holders]})
    if step == "reveal":

        def reveal(ticket: Ticket) -> RecordDict:
            del ticket
            stub = _stub(n, spec, context_label, list(record["mask-keys"]))
            party = RoundParty(secret, label, me, stub)
            sealed = dict(zip((int(o) for o in record["owners"]), record["sealed"]))
            answer = party.reveal(list(record["channel-keys"]), sealed,
                                  list(record["survivors"]), list(record["dropped"]))  # fmt: skip
            return _reply({"reveal": answer})

        return guarded_release(
            node_counter(context, REVEAL_PARTY, folder), sequence_of({"step": "reveal"}),
            call.round, request_digest(msg, call.round), reveal, run=str(context.run_id),
            data=node_data(context),
        )  # fmt: skip
    if step != "masked":
        raise ValueError(f"{STEP_KEY} = {step!r} is not allowed; expected keys | shares | "
                         "masked | reveal")  # fmt: skip

    def release(ticket: Ticket) -> RecordDict:
        del ticket
        return _masked(msg, call, partition, secret, label, n, me)

    p = spec.params
    own = {"C": p.clipping_norm, "z": p.noise_multiplier, "target": p.target_epsilon,
           "scale": p.scale, "relation": p.relation, "q": p.inclusion_rate}  # fmt: skip
    return guarded_release(
        node_counter(context, PARTY, folder), sequence_of(own), call.round,
        request_digest(msg, call.round), release, run=str(context.run_id),
        data=node_data(context),
    )  # fmt: skip


def _masked(
    msg: Message, call: NodeCall, partition: int, secret: bytes, label: bytes, n: int, me: int
) -> RecordDict:
    """Train, encode with the client's own μ and b, and mask (the ``masked`` step)."""
    from fedpriv.scenarios.app.client_tasks import train_standard

    spec = call.spec
    weights = arrays_of(msg.content["arrays"])
    dimension = int(sum(np.asarray(w).size for w in weights))
    r = resolve(spec, dimension, epsilon=False)  # μ, b, t: the accountant is the server's
    rng = seeds.privacy_stream(
        spec.seed, "distributed-dp-noise", call.round, partition,
        reproducible=spec.reproducible_noise,
    )  # fmt: skip
    # the client's secret coin (encoding.self_sample's rule, drawn before training so that a
    # client that is out does not train)
    included = r.relation == "fixed" or rng.random() < r.rate
    update = np.zeros(dimension)
    if included:
        trained = arrays_of(train_standard(msg, call, partition)["arrays"])
        update = np.concatenate(
            [(np.asarray(a, np.float64) - np.asarray(w, np.float64)).ravel()
             for a, w in zip(trained, weights)]
        )  # fmt: skip
    encoded = encoding.encode(update, r.encoding, rng)
    mask_keys = list(msg.content[SECAGG_RECORD]["mask-keys"])
    if len(mask_keys) != n:
        raise ValueError(f"mask-keys of {len(mask_keys)} clients are not allowed; expected n = {n}")
    sa = cohort_params(
        threshold=r.threshold, bits=r.encoding.bits, size=r.encoding.padded_dim,
        context=round_label(call.round), mask_keys=mask_keys, colluders=r.colluders,
    )  # fmt: skip
    masked = RoundParty(secret, label, me, sa).mask(encoded.values, mask_keys)
    return RecordDict(
        {
            "arrays": ArrayRecord({MASKED_KEY: Array(np.ascontiguousarray(masked))}),
            "metrics": MetricRecord({"num-examples": 1}),
        }
    )
