"""A curious ServerApp (node side): keys left at "auto" are the node's.

The real ClientApp (``fedpriv.scenarios.app.client_app.app``, with its zone-node and DP-SGD code
paths)
gets real Flower ``Message`` / ``Context`` objects. The legit message is what the real server
code sends (:func:`fedpriv.scenarios.app.wire_config.wire_config` over the server's resolved
config, plus
the keys its strategies add); each attack changes one key of it. Every node is built twice:
one whose ``run_config`` leaves everything at ``"auto"`` (the app's pyproject.toml; the
README's DP-SGD SuperNode sets only ``privacy`` in its node config) and one that sets every
privacy key itself (node config over a fully set run config). Each attack is refused with an
error reply naming the key and carrying nothing else, or has no effect on the release: the
noise of an accepted reply is measured at the node's own σ, and two identical messages get
different noise (secret: a server that knows the seed cannot replay it).
"""

from __future__ import annotations

import numpy as np
import pytest
from fedpriv.clients.keras_client import federated_data, initial_weights
from fedpriv.scenarios.app import wire_config
from fedpriv.scenarios.app.client_app import app
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.node_spec import (
    catalog_snapshot,
    load_snapshot,
    node_spec,
    resolve_node,
)
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import data_spec, train_spec
from fedpriv.scenarios.zonal.keys import plan_from_config
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict

from fedpriv.privacy import dpsgd
from fedpriv.privacy.ownership import (
    DERIVED_KEYS,
    MESSAGE_KEYS,
    NODE_SECURE_DEFAULTS,
    PRIVACY_KEYS,
    REFUSED_CODE,
)

AUTO_RUN_CONFIG = {key: "auto" for key in CATALOG.keys}  # pyproject.toml: every key "auto"
ZONE = 0
ZONE_CLIENTS = [0, 1, 2]
# a zone node of hdp-digits: HDP zones, z = C = 0.5, k = 20 of n = 100, 10 zones of 10
ZONE_AUTO = {**AUTO_RUN_CONFIG, "scenario": "hdp-digits"}
ZONE_SET = {
    **ZONE_AUTO,
    "privacy": "zonal",
    "noise-placement": "hdp",
    "zonal-compare-placements": "hdp",  # this node takes part in no un-noised comparison
    "noise-multiplier": 0.8,
    "clipping-norm": 0.4,
    "dp-delta": 1e-5,
    "num-clients": 100,
    "num-zones": 10,
    "clients-per-round": 20,
    "reproducible-noise": False,
    "unaccounted-metrics": False,
}
DPSGD_AUTO = {**AUTO_RUN_CONFIG, "privacy": "dp-sgd"}  # the run's; the node sets nothing
DPSGD_SET_NODE = {
    "privacy": "dp-sgd",
    "noise-multiplier": 1.3,
    "clipping-norm": 0.7,
    "dp-delta": 1e-5,
    "batch-size": 16,
    "local-epochs": 1,
    "reproducible-noise": False,
    "unaccounted-metrics": False,
    "client-state-dir": "",  # set below to a tmp folder
}

# key -> the value a curious server sends instead of the node's own
ZONE_ATTACKS = {
    "reproducible-noise": True,
    "unaccounted-metrics": True,
    "noise-multiplier": 0.0,
    "clipping-norm": 1000.0,
    "client-task": "standard",
    "zonal-level": "none",
    "noise-placement": "none",
    "privacy": "none",
    "clients-per-round": 100,
    "client-state-dir": "/tmp/curious-server-state",
    # the allow-list: data, seed, canaries, caps and rounds are the node's, whatever it sets
    "seed": 12345,
    "partition": "bootstrap",
    "dirichlet-alpha": 0.01,
    "audit-canaries": 8000,
    "num-server-rounds": 64,
    "min-zone-clients": 100,
}
DPSGD_ATTACKS = {
    "reproducible-noise": True,
    "unaccounted-metrics": True,
    "noise-multiplier": 0.0,
    "clipping-norm": 1000.0,
    "batch-size": 1000,
    "local-epochs": 40,
    "client-task": "standard",
    "privacy": "none",
    "client-state-dir": "/tmp/curious-server-state",
    "dp-sgd-participations": 1,
    "seed": 12345,
    "partition": "dirichlet",
    "dirichlet-alpha": 0.01,
    "audit-canaries": 8000,
    "num-server-rounds": 64,
    "max-epsilon": 1000.0,
}


def context(run_config: dict, partition: int, node: dict | None = None, run_id: int = 7) -> Context:
    return Context(run_id, 1, {"partition-id": partition, **(node or {})}, RecordDict(), run_config)


def server_message(run_config: dict, extra: dict, arrays: list, override: dict) -> Message:
    """What the real server code sends (its resolved config minus run_config + digest, the
    strategy's keys), with ``override`` on top (a curious server's changes)."""
    cfg = CATALOG.resolve_run_config(run_config)
    wire_config.set_base(run_config)
    try:
        config = {**wire_config.wire_config(cfg), "server-round": 1, **extra, **override}
    finally:
        wire_config.set_base({})
    content = RecordDict({"arrays": ArrayRecord(arrays), "config": ConfigRecord(config)})
    return Message(content, 1, MessageType.TRAIN)


def assert_refused(reply: Message, key: str, ctx: Context) -> None:
    assert reply.has_error(), f"{key}: accepted"
    assert reply.error.code == REFUSED_CODE
    assert f"key={key} " in reply.error.reason, reply.error.reason
    assert not reply.has_content()
    assert not list(ctx.state.keys())  # nothing ran


def zone_extra(run_config: dict, node: dict) -> dict:
    """The zone-node strategy's keys (fedpriv.strategies.zonal_nodes), from the node's own plan."""
    spec = node_spec(7, run_config, {**node, "partition-id": ZONE})
    level = plan_from_config(spec.base).levels[ZONE]
    return {
        "client-task": "zone-node",
        "zonal-zone": ZONE,
        "zonal-level": level,
        "zonal-supernode": 3,
        "zonal-clients": ZONE_CLIENTS,
    }


@pytest.fixture(scope="module")
def zone_weights():
    cfg = CATALOG.resolve_run_config(ZONE_AUTO)
    return initial_weights(train_spec(cfg), federated_data(data_spec(cfg)))


@pytest.fixture(scope="module")
def dpsgd_weights():
    cfg = CATALOG.resolve_run_config(DPSGD_AUTO)
    return initial_weights(train_spec(cfg), federated_data(data_spec(cfg)))


ZONE_NODES = {"auto": (ZONE_AUTO, {}), "set": (ZONE_SET, dict(ZONE_SET))}


@pytest.mark.parametrize("who", list(ZONE_NODES))
@pytest.mark.parametrize("key", list(ZONE_ATTACKS))
def test_a_zone_node_refuses_each_weakened_key(zone_weights, who, key):
    run_config, node = ZONE_NODES[who]
    ctx = context(run_config, ZONE, node)
    extra = zone_extra(run_config, ctx.node_config)
    msg = server_message(run_config, extra, zone_weights, {key: ZONE_ATTACKS[key]})
    # hdp-digits' own comparison declares a 'none' variant: that placement is refused only
    # because the message keeps the HDP level (the variant's level is the node's: 'none')
    named = "zonal-level" if (who, key) == ("auto", "noise-placement") else key
    assert_refused(app(msg, ctx), named, ctx)


def _zone_delta(reply: Message, weights: list) -> np.ndarray:
    sent = reply.content["arrays"].to_numpy_ndarrays()
    return np.concatenate([(np.asarray(a) - np.asarray(w)).ravel() for a, w in zip(sent, weights)])


@pytest.mark.parametrize("who", list(ZONE_NODES))
def test_a_zone_node_releases_at_its_own_sigma_with_secret_noise(zone_weights, who, tmp_path):
    """The legit message (a server-chosen ``seed`` is refused: test_allow_list) to two
    nodes holding the same zone, each with its own ledger folder (one node answers an
    identical request from its cache in any run, see test_lifetime_ledgers): accepted, and
    the replies differ by noise of std sqrt(2)·σ_i with the node's own σ_i = z·C/(q·W_i) (HDP
    Algorithm 1), computed here from the node's own keys: the same training, fresh secret
    noise."""
    run_config, node = ZONE_NODES[who]
    spec = node_spec(7, run_config, {"partition-id": ZONE, **node}).base
    z, c = float(spec["noise-multiplier"]), float(spec["clipping-norm"])
    q = int(spec["clients-per-round"]) / int(spec["num-clients"])
    members = int(spec["num-clients"]) // int(spec["num-zones"])  # blocks, uniform weights
    sigma = z * c / (q * members)
    extra = zone_extra(run_config, {"partition-id": ZONE, **node})
    replies = []
    for run_id in (7, 8):
        own = {**node, "client-state-dir": str(tmp_path / f"node-{run_id}")}
        ctx = context(run_config, ZONE, own, run_id)
        reply = app(server_message(run_config, extra, zone_weights, {}), ctx)
        assert not reply.has_error(), reply.error
        assert reply.content["metrics"]["zonal-zone-sigma"] == pytest.approx(sigma)
        replies.append(_zone_delta(reply, zone_weights))
    diff = replies[0] - replies[1]
    assert diff.size > 1000
    assert np.std(diff) / np.sqrt(2) == pytest.approx(sigma, rel=0.05)


@pytest.mark.parametrize("placement", ["none", "cdp"])
def test_a_zone_node_with_its_own_placement_serves_no_other_variant(zone_weights, placement):
    """A zone node that sets only ``noise-placement = 'hdp'`` (its compare-placements left
    at auto) is asked for a comparison's ``none`` / ``cdp`` variant (its level and
    placement): refused, nothing sent; its own ``hdp`` message is served."""
    run_config, node = ZONE_AUTO, {"noise-placement": "hdp"}
    ctx = context(run_config, ZONE, node)
    extra = {**zone_extra(run_config, ctx.node_config), "zonal-level": placement}
    msg = server_message(run_config, extra, zone_weights, {"noise-placement": placement})
    reply = app(msg, ctx)
    assert reply.has_error() and reply.error.code == REFUSED_CODE and not reply.has_content()
    ok = server_message(run_config, zone_extra(run_config, ctx.node_config), zone_weights, {})
    assert not app(ok, context(run_config, ZONE, node)).has_error()


def test_an_allowed_training_key_is_taken_from_the_message(dpsgd_weights, dpsgd_node):
    """The allow-list's other side: a training key that changes no privacy figure (the
    learning rate) may come from the message."""
    run_config, node = dpsgd_node("auto")
    msg = server_message(run_config, {"client-task": "dp-sgd"}, dpsgd_weights,
                         {"learning-rate": 0.5})  # fmt: skip
    assert not app(msg, context(run_config, 0, node)).has_error()


DPSGD_SET = {**DPSGD_AUTO, **{k: v for k, v in DPSGD_SET_NODE.items() if k in CATALOG.keys}}
# the set node's run config is the run's (its values, so the server sends them too) and its
# node config sets every key again, with its own state folder
DPSGD_NODES = {"auto": (DPSGD_AUTO, {}), "set": (DPSGD_SET, DPSGD_SET_NODE)}


@pytest.fixture()
def dpsgd_node(tmp_path):
    def make(who: str) -> tuple[dict, dict]:
        run_config, node = DPSGD_NODES[who]
        if "client-state-dir" in node:
            node = {**node, "client-state-dir": str(tmp_path / "own-state")}
        return run_config, node

    return make


@pytest.mark.parametrize("who", list(DPSGD_NODES))
@pytest.mark.parametrize("key", list(DPSGD_ATTACKS))
def test_a_dp_sgd_client_refuses_each_weakened_key(dpsgd_weights, dpsgd_node, who, key):
    run_config, node = dpsgd_node(who)
    ctx = context(run_config, 0, node)
    extra = {"client-task": "dp-sgd"}
    msg = server_message(run_config, extra, dpsgd_weights, {key: DPSGD_ATTACKS[key]})
    assert_refused(app(msg, ctx), key, ctx)


@pytest.mark.parametrize("who", list(DPSGD_NODES))
def test_a_dp_sgd_client_trains_and_reports_at_its_own_settings(dpsgd_weights, dpsgd_node, who):
    """Two legit messages in two runs of the node: different
    replies (secret noise) and the ε of the node's own z, B, E, δ (an independent accountant
    call) over every participation of its lifetime ledger (its own folder, or the per-node
    default: the second reply's ε is for 2 participations either way); the second message
    again in a third run gets the cached reply, bit for bit."""
    run_config, node = dpsgd_node(who)
    spec = node_spec(7, run_config, {"partition-id": 0, **node}).base
    assert spec["reproducible-noise"] is False
    sent, replies = [], []
    for index, run_id in enumerate((7, 8)):
        ctx = context(run_config, 0, node, run_id)
        arrays = [w + 1e-3 * index for w in dpsgd_weights]
        msg = server_message(run_config, {"client-task": "dp-sgd"}, arrays, {})
        reply = app(msg, ctx)
        assert not reply.has_error(), reply.error
        metrics = reply.content["metrics"]
        want = dpsgd.client_epsilon(
            num_examples=int(metrics["num-examples"]),
            batch_size=int(spec["batch-size"]),
            local_epochs=int(spec["local-epochs"]),
            participations=1 + index,
            noise_multiplier=float(spec["noise-multiplier"]),
            delta=float(spec["dp-delta"]),
        )
        assert metrics["dp-sgd-epsilon"] == pytest.approx(want.epsilon)
        sent.append(_zone_delta(reply, arrays))
        replies.append(reply)
    assert np.max(np.abs(sent[0] - sent[1])) > 1e-4  # not replayable from the seed
    arrays = [w + 1e-3 for w in dpsgd_weights]
    again = app(server_message(run_config, {"client-task": "dp-sgd"}, arrays, {}),
                context(run_config, 0, node, 9))  # fmt: skip
    first, second = again.content["arrays"], replies[1].content["arrays"]
    assert all(np.array_equal(a, b) for a, b in zip(first.to_numpy_ndarrays(),
                                                    second.to_numpy_ndarrays()))  # fmt: skip


@pytest.mark.parametrize("key", ["privacy", "unaccounted-metrics", "reproducible-noise"])
def test_a_server_trusting_node_refuses_privacy_keys_too(dpsgd_weights, key):
    """The default run (metric DP, everything auto): the server adds the noise, the client
    only trains; a message that changes its mode or opt-ins is refused all the same."""
    values = {"privacy": "none", "unaccounted-metrics": True, "reproducible-noise": True}
    ctx = context(AUTO_RUN_CONFIG, 0)
    msg = server_message(AUTO_RUN_CONFIG, {}, dpsgd_weights, {key: values[key]})
    assert_refused(app(msg, ctx), key, ctx)


def test_a_zonal_comparison_variant_is_one_the_node_declares(zone_weights):
    """hdp-digits runs its placements on the same nodes: a variant's placement is accepted
    only with the level the node's own plan gives it; a node that declares only ``hdp``
    refuses the ``none`` variant; the level alone cannot be switched off."""
    node = {"partition-id": ZONE}
    spec = node_spec(7, ZONE_AUTO, node)
    assert {v["noise-placement"] for v in spec.variants} == {"none", "ldp", "hdp", "cdp"}
    none_variant = {"noise-placement": "none", "zonal-level": "none"}
    extra = zone_extra(ZONE_AUTO, node)
    ctx = context(ZONE_AUTO, ZONE)
    msg = server_message(ZONE_AUTO, extra, zone_weights, {**none_variant, "zonal-level": "hdp"})
    assert_refused(app(msg, ctx), "zonal-level", ctx)
    ctx = context(ZONE_SET, ZONE, dict(ZONE_SET))
    msg = server_message(ZONE_SET, zone_extra(ZONE_SET, dict(ZONE_SET)), zone_weights, none_variant)
    assert_refused(app(msg, ctx), "noise-placement", ctx)


def test_the_node_resolves_like_the_server_but_for_its_secure_defaults():
    """For every scenario, a node with nothing set resolves what the ServerApp resolves,
    except the opt-ins: those are false on the node. No scenario opts in to seeded noise (the
    paper scenarios use secret noise too)."""
    assert load_snapshot() == catalog_snapshot(CATALOG), (
        "scenarios/config/node_catalog.json is stale: run python -c 'from "
        "fedpriv.scenarios.config.features import CATALOG; "
        "from fedpriv.scenarios.config.node_spec import write_snapshot; write_snapshot(CATALOG)'"
    )
    assert not any(s.defaults.get("reproducible-noise") for s in CATALOG.scenarios.values())
    for name in CATALOG.scenarios:
        try:
            server = CATALOG.resolve_run_config({**AUTO_RUN_CONFIG, "scenario": name})
        except ConfigError:  # a scenario that needs a data-path
            continue
        node = resolve_node({**AUTO_RUN_CONFIG, "scenario": name})
        assert {k: v for k, v in node.items() if k not in NODE_SECURE_DEFAULTS} == {
            k: v for k, v in server.items() if k not in NODE_SECURE_DEFAULTS
        }, name
        assert all(node[k] is False for k in NODE_SECURE_DEFAULTS), name


def test_the_server_does_not_send_opt_ins_the_run_config_leaves_at_auto():
    """A server whose resolved config holds the opt-ins true (its own choice, or a run config
    that set them) sends neither when the run config leaves them at "auto"."""
    cfg = {
        **CATALOG.resolve_run_config(ZONE_AUTO),
        "reproducible-noise": True,
        "unaccounted-metrics": True,
    }
    wire_config.set_base(ZONE_AUTO)
    try:
        delta = wire_config.wire_config(cfg)
        explicit = {**ZONE_AUTO, "reproducible-noise": True}
        wire_config.set_base(explicit)
        assert "reproducible-noise" not in wire_config.wire_config({**cfg, "seed": 0})
    finally:
        wire_config.set_base({})
    assert not set(NODE_SECURE_DEFAULTS) & set(delta)
    assert delta["noise-multiplier"] == cfg["noise-multiplier"]


def test_the_allow_list_is_one_declaration():
    """Every key a message may carry freely is outside the privacy and derived keys."""
    assert not set(MESSAGE_KEYS) & (set(PRIVACY_KEYS) | set(DERIVED_KEYS))
    for key in ("noise-multiplier", "noise-multiplier", "noise-multiplier"):
        assert key in PRIVACY_KEYS and key in CATALOG.keys
    assert set(PRIVACY_KEYS) <= set(CATALOG.keys)


def test_a_bad_own_value_refuses_every_message(dpsgd_weights):
    ctx = context(AUTO_RUN_CONFIG, 0, {"noise-multiplier": -1.0})
    msg = server_message(AUTO_RUN_CONFIG, {}, dpsgd_weights, {})
    reply = app(msg, ctx)
    assert reply.has_error() and "noise-multiplier = -1.0" in reply.error.reason
