"""Every party that keeps a ledger binds it to its data: the same state folder asked to train
on other data refuses in one line.

The real ClientApp (``fedpriv.scenarios.app.client_app.app``) and a node with its own
``client-state-dir`` (a deployed node): its first release binds the ledger of its identity
(its ``partition-id``, a zone node's zone id) to its RESOLVED data settings
(:data:`fedpriv.scenarios.config.node_roles.DATA_KEYS`); the same folder and identity later
run with another seed or partition — a message from a server that resolved the same other
data, so no privacy key differs — is refused, nothing trained and nothing charged. One test
per party: DP-SGD clients, IFCA users and validation users, client-budgets clients, zone
nodes (``zonal-runtime = zone-nodes``), LDP clients of the in-server zonal runtime and
distributed-dp clients.
"""

from __future__ import annotations

import os

import pytest
from fedpriv.clients.keras_client import federated_data, initial_weights
from fedpriv.scenarios.app.client_app import app
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.specs import data_spec, train_spec
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict

from fedpriv.privacy.releases import STATE_DIR_KEY, ReleaseCounter
from tests import test_release_counting as counting
from tests.test_lifetime_queries import crafted, query
from tests.test_privacy_keys import OWN
from tests.test_release_counting import DPSGD, IFCA, ZONE_NODE, message, refused

zone, ifca = counting.zone, counting.ifca  # the same module fixtures
OTHER_DATA = "belongs to other data"


def node(cfg: dict, partition: int, folder, run: int = 1) -> Context:
    """A restarted node (a fresh Context) of run ``run`` with its own state folder."""
    config = {"partition-id": partition, STATE_DIR_KEY: str(folder)}
    return Context(run, 7, config, RecordDict(), dict(cfg))


def other_data(base: dict, cfg: dict, **change) -> dict:
    """``base`` resolved with another seed (other data), or with ``change``."""
    return resolve_run_config({**base, **(change or {"seed": int(cfg["seed"]) + 1})})


def assert_refused_on_other_data(reply: Message, ledger: ReleaseCounter, releases: int) -> None:
    assert refused(reply), reply.error if reply.has_error() else "answered"
    assert OTHER_DATA in reply.error.reason and "\n" not in reply.error.reason
    assert STATE_DIR_KEY in reply.error.reason  # what to do: give it its own folder
    assert ledger.load().releases == releases  # nothing charged


def train_message(cfg: dict, task: str, weights, server_round: int = 1, **sent) -> Message:
    content = {"arrays": ArrayRecord(weights)}
    return message(cfg, MessageType.TRAIN, {"client-task": task, **sent}, content, server_round)


def test_a_dp_sgd_client_refuses_other_data(tmp_path):
    cfg = resolve_run_config(DPSGD)
    weights = initial_weights(train_spec(cfg), federated_data(data_spec(cfg)))
    folder = tmp_path / "own"
    first = app(train_message(cfg, "dp-sgd", weights), node(cfg, 1, folder))
    assert not first.has_error(), first.error
    other = other_data(DPSGD, cfg, partition="bootstrap")
    reply = app(train_message(other, "dp-sgd", weights, 2), node(other, 1, folder, run=2))
    assert_refused_on_other_data(reply, ReleaseCounter(folder, "dp-sgd", 1), 1)


def test_an_ifca_user_and_a_validation_user_refuse_other_data(ifca, tmp_path):
    base, record, _ = ifca
    folder = tmp_path / "own"
    train = counting.ifca_message(base, record, 1)
    assert not app(train, node(base, 0, folder)).has_error()
    user = int(base["num-clients"]) - 1  # a held-out validation user
    answered = app(query(base, crafted(record, 1)), node(base, user, folder))
    assert not answered.has_error(), answered.error
    other = other_data(IFCA, base)
    reply = app(counting.ifca_message(other, record, 2), node(other, 0, folder, run=2))
    assert_refused_on_other_data(reply, ReleaseCounter(folder, "ifca", 0), 1)
    reply = app(query(other, crafted(record, 2)), node(other, user, folder, run=2))
    assert_refused_on_other_data(reply, ReleaseCounter(folder, "ifca-validation", user), 1)


def test_a_client_budgets_client_refuses_other_data(tmp_path):
    base = {
        "scenario": "digits", "privacy": "client-budgets", "num-clients": 4, "local-epochs": 1,
        "noise-multiplier": 1.0, "client-epsilon-groups": "8,8", "num-server-rounds": 2,
    }  # fmt: skip
    cfg = resolve_run_config(base)
    weights = initial_weights(train_spec(cfg), federated_data(data_spec(cfg)))
    folder = tmp_path / "own"
    first = app(train_message(cfg, "client-budgets", weights), node(cfg, 0, folder))
    assert not first.has_error(), first.error
    other = other_data(base, cfg)
    reply = app(train_message(other, "client-budgets", weights, 2), node(other, 0, folder, 2))
    assert_refused_on_other_data(reply, ReleaseCounter(folder, "client-budgets", 0), 1)


def test_a_zone_node_refuses_other_data(zone, tmp_path):
    cfg, weights = zone
    folder = tmp_path / "zone-0"
    assert not app(counting.zone_message(cfg, weights, 1), node(cfg, 0, folder)).has_error()
    other = other_data(ZONE_NODE, cfg)
    reply = app(counting.zone_message(other, weights, 2), node(other, 0, folder, run=2))
    assert_refused_on_other_data(reply, ReleaseCounter(folder, "zone-node", 0), 1)


def test_an_in_server_ldp_client_refuses_other_data(tmp_path):
    base = OWN["zonal"]
    cfg = resolve_run_config(base)
    weights = initial_weights(train_spec(cfg), federated_data(data_spec(cfg)))
    folder = tmp_path / "own"
    sent = {"zonal-level": "ldp"}
    first = app(train_message(cfg, "zonal", weights, **sent), node(cfg, 1, folder))
    assert not first.has_error(), first.error
    other = other_data(base, cfg)
    reply = app(train_message(other, "zonal", weights, 2, **sent), node(other, 1, folder, 2))
    assert_refused_on_other_data(reply, ReleaseCounter(folder, "zonal-ldp", 1), 1)


DDP = {
    "scenario": "digits", "privacy": "distributed-dp", "num-clients": 2,
    "clients-per-round": 2, "num-server-rounds": 2, "local-epochs": 1,
    "noise-multiplier": 0.05, "clipping-norm": 1.0, "model": "digits-mlp",
}  # fmt: skip


def ddp_masked(cfg: dict, weights, ctx: Context, server_round: int) -> Message:
    """The ``masked`` step of a two-client round: this node is client 0; client 1's public
    mask key from a secret of the test's own (the node's comes from its ``keys`` step)."""
    from fedpriv.scenarios.distributed_dp.client import round_label

    from fedpriv.privacy.distributed.party import SECRET_BYTES, RoundParty
    from fedpriv.privacy.distributed.secagg import SecAggParams

    step = {"client-task": "distributed-dp", "secagg-step": "keys"}
    keys = app(message(cfg, MessageType.TRAIN, step, {}, server_round), ctx)
    assert not keys.has_error(), keys.error
    label = f"run-{ctx.run_id}/".encode() + round_label(server_round)
    agreement = SecAggParams(num_clients=1, threshold=1, bits=2, size=1).agreement
    peer = RoundParty.public_keys_of(os.urandom(SECRET_BYTES), label, agreement)
    mask_keys = [bytes(keys.content["secagg"]["mask-key"]), peer.mask]
    record = ConfigRecord({"n": 2, "id": 0, "mask-keys": mask_keys})
    content = {"arrays": ArrayRecord(weights), "secagg": record}
    step["secagg-step"] = "masked"
    return message(cfg, MessageType.TRAIN, step, content, server_round)


def test_a_distributed_dp_client_refuses_other_data(tmp_path):
    cfg = resolve_run_config(DDP)
    weights = initial_weights(train_spec(cfg), federated_data(data_spec(cfg)))
    folder = tmp_path / "own"
    ctx = node(cfg, 0, folder)
    first = app(ddp_masked(cfg, weights, ctx, 1), ctx)
    assert not first.has_error(), first.error
    other = other_data(DDP, cfg)
    ctx = node(other, 0, folder, run=2)
    reply = app(ddp_masked(other, weights, ctx, 2), ctx)
    assert_refused_on_other_data(reply, ReleaseCounter(folder, "distributed-dp", 0), 1)


@pytest.mark.parametrize("change", [{}, {"dataset": "auto"}])
def test_the_same_data_however_spelled_is_the_same_node(zone, tmp_path, change):
    """The binding is of the RESOLVED data: the same settings spelled otherwise (a key left
    at ``auto``) are the same node, and its next round is released."""
    cfg, weights = zone
    folder = tmp_path / "zone-0"
    assert not app(counting.zone_message(cfg, weights, 1), node(cfg, 0, folder)).has_error()
    same = {**cfg, **change}
    reply = app(counting.zone_message(same, weights, 2), node(same, 0, folder, run=2))
    assert not reply.has_error(), reply.error
    assert ReleaseCounter(folder, "zone-node", 0).load().releases == 2
