"""Clients own their privacy settings; the server cannot weaken them.

The real ClientApp (``fedpriv.scenarios.app.client_app.app``) gets real Flower ``Message`` /
``Context``
objects, as in a run: the client's own config is its ``run_config`` (a fully set config
here) overlaid with ``node_config``, and the server's messages carry what differs from that
``run_config`` plus its digest (``fedpriv.scenarios.app.wire_config``). For each server-distrusting
mode
and each key its clients own, a train and an evaluate message (IFCA: its own message types)
changing the key get an error reply that names the key and carries nothing else; no
training runs (the node's state stays empty). The owned key sets are written out here.
"""

from __future__ import annotations

import os

import pytest
from fedpriv.clients.keras_client import federated_data, initial_weights
from fedpriv.scenarios.app.client_app import app
from fedpriv.scenarios.app.task_names import DPSGD_STATE_KEY
from fedpriv.scenarios.app.wire_config import DIGEST_KEY, digest
from fedpriv.scenarios.config.node_roles import client_mode
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.specs import data_spec, server_run, train_spec
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict

from fedpriv.ifca import HYPOTHESES_KEY, METRICS_KEY, REPLY_KEY
from fedpriv.privacy import dpsgd
from fedpriv.privacy.ownership import REFUSED_CODE

FAST = {"num-server-rounds": 1, "local-epochs": 1, "num-clients": 4}
OPT_INS = {"unaccounted-metrics": True, "reproducible-noise": True}
# mode -> owned key -> a weakened value the server might send
WEAKER = {
    "dp-sgd": {
        "privacy": "none", "noise-multiplier": 0.0, "clipping-norm": 100.0,
        "dp-delta": 0.5, "batch-size": 10_000, "local-epochs": 50, **OPT_INS,
        "client-task": "standard", "dp-sgd-participations": 1,
    },
    "zonal": {
        "privacy": "none", "noise-placement": "hdp", "ldp-fraction": 0.5, "hdp-fraction": 0.5,
        "num-zones": 1, "zone-assignment": "round-robin", "zone-map": "0:0,1:0",
        "num-clients": 2, "noise-multiplier": 0.0, "clipping-norm": 100.0,
        "dp-delta": 0.5, **OPT_INS, "client-task": "standard", "zonal-level": "hdp",
    },
    "zone-node": {  # a zone SuperNode of an LDP (or HDP) zone
        "privacy": "none", "noise-placement": "hdp", "ldp-fraction": 0.5, "hdp-fraction": 0.5,
        "num-zones": 1, "zone-assignment": "round-robin", "zone-map": "0:0,1:0",
        "num-clients": 2, "noise-multiplier": 0.0, "clipping-norm": 100.0,
        "dp-delta": 0.5, "zonal-runtime": "in-server", **OPT_INS, "client-task": "zonal",
        "zonal-level": "hdp", "max-epsilon": 1e9,
    },
    "client-budgets": {
        "privacy": "none", "noise-multiplier": 0.0, "dp-delta": 0.5, "client-epsilon": 1e3,
        "client-epsilon-groups": "1000", **OPT_INS, "client-task": "standard",
    },
    "distributed-dp": {
        "privacy": "none", "noise-multiplier": 0.0, "clipping-norm": 100.0, "dp-delta": 0.5,
        "distributed-target-epsilon": 1e6, "distributed-scale": 1.0, "distributed-bits": 62,
        "distributed-threshold": 1, "distributed-colluders": 2, "distributed-relation": "poisson",
        "distributed-inclusion-rate": 0.5, "num-server-rounds": 1, "num-clients": 100,
        "clients-per-round": 2, **OPT_INS, "client-task": "standard",
    },
    "ifca": {
        "ifca-noise-multiplier": 0.0, "leakage-budget": 0.0, "num-clients": 121,
        "validation-clients": 0, "validation-query-budget": 10**9, **OPT_INS,
        "client-task": "standard", "ifca-eval-split": "all",
    },
}  # fmt: skip
ZONAL = {"scenario": "hdp-digits", "noise-placement": "ldp", "num-clients": 4, "num-zones": 2,
         "clients-per-round": 4}  # fmt: skip
# the per-client zonal runtime: one SuperNode per client (zone nodes: mode "zone-node")
IN_SERVER = {"zonal-runtime": "in-server"}
SECRET = {"reproducible-noise": False}  # explicit: these clients use secret noise
OWN = {
    "dp-sgd": {**FAST, **SECRET, "privacy": "dp-sgd", "batch-size": 16},
    "zonal": {**ZONAL, **IN_SERVER, **SECRET, "local-epochs": 1},
    "zone-node": {**ZONAL, **SECRET, "local-epochs": 1},
    "ifca": {
        "scenario": "gp-synthetic",
        **SECRET,
        "unaccounted-metrics": False,
        "leakage-budget": 100.0,
    },
}


def context(run_config: dict, partition: int = 0, node: dict | None = None) -> Context:
    """A node whose release ledgers live in this test's own state root (the resolved configs
    name an ``output-dir`` under ``runs/``, which outlives the test)."""
    own_state = {"client-state-dir": os.environ["FEDPRIV_STATE_ROOT"]}
    node_config = {"partition-id": partition, **own_state, **(node or {})}
    return Context(1, 1, node_config, RecordDict(), dict(run_config))


def message(run_config: dict, message_type: str, sent: dict, content: dict) -> Message:
    """A server message: the keys ``sent`` plus the digest of the run's ``run_config``."""
    config = ConfigRecord({**sent, "server-round": 1, DIGEST_KEY: digest(run_config)})
    return Message(RecordDict({**content, "config": config}), 1, message_type)


def assert_refused(reply: Message, key: str, ctx: Context) -> None:
    assert reply.has_error(), f"{key}: accepted"
    assert reply.error.code == REFUSED_CODE
    assert f"key={key} " in reply.error.reason
    assert not reply.has_content()  # no arrays, no metrics
    assert not list(ctx.state.keys())  # no training ran: the node's state is untouched


@pytest.fixture(scope="module")
def own():
    return {mode: resolve_run_config(cfg) for mode, cfg in OWN.items()}


@pytest.fixture(scope="module")
def weights(own):
    return {
        mode: initial_weights(train_spec(cfg), federated_data(data_spec(cfg)))
        for mode, cfg in own.items()
        if mode != "ifca"
    }


@pytest.fixture(scope="module")
def hypotheses(own):
    from fedpriv.scenarios.ifca.feature import initial_hypotheses
    from fedpriv.strategies.ifca import hypotheses_record

    cfg = own["ifca"]
    return hypotheses_record(initial_hypotheses(server_run(cfg), federated_data(data_spec(cfg))))


def test_the_declared_owned_keys_are_the_ones_refused_here():
    from fedpriv.scenarios.config.features import CATALOG

    from fedpriv.privacy.ownership import CLIENT_COUNTED, OWNED_KEYS

    derived = {"client-task", "zonal-level", "ifca-eval-split", *CLIENT_COUNTED}
    for mode, keys in OWNED_KEYS.items():
        assert set(keys) == set(WEAKER[mode]) - derived, mode
    for name in ("dp-sgd", "zonal"):  # one declaration per mode, in the catalog
        assert set(CATALOG.modes[name].owned_keys) == set(OWNED_KEYS[name])
    for name in ("none", "global-dp", "metric-dp"):
        assert CATALOG.modes[name].owned_keys == ()


@pytest.mark.parametrize(
    ("mode", "key"), [(m, k) for m in ("dp-sgd", "zonal", "zone-node") for k in WEAKER[m]]
)
@pytest.mark.parametrize("kind", [MessageType.TRAIN, MessageType.EVALUATE])
def test_dp_sgd_and_zonal_ldp_clients_refuse_a_changed_key(own, weights, mode, key, kind):
    cfg = own[mode]
    assert cfg.get(key) != WEAKER[mode][key]
    task = {"client-task": mode} if key != "client-task" else {}
    ctx = context(cfg)
    sent = {**task, "zonal-level": "ldp", key: WEAKER[mode][key]}
    reply = app(message(cfg, kind, sent, {"arrays": ArrayRecord(weights[mode])}), ctx)
    # the node sets its own placement (ldp): hdp-digits' comparison variants of other
    # placements are not its own, so the refusal names the placement itself
    assert_refused(reply, key, ctx)


@pytest.mark.parametrize("key", list(WEAKER["distributed-dp"]))
def test_distributed_dp_clients_refuse_a_changed_key(key):
    """Every key that decides a client's noise share, its rounds or its cohort is its own."""
    cfg = resolve_run_config({**SECRET, "privacy": "distributed-dp", "num-server-rounds": 3,
                              "num-clients": 4})  # fmt: skip
    assert cfg.get(key) != WEAKER["distributed-dp"][key]
    task = {"client-task": "distributed-dp"} if key != "client-task" else {}
    sent = {**task, "secagg-step": "keys", key: WEAKER["distributed-dp"][key]}
    ctx = context(cfg)
    reply = app(message(cfg, MessageType.TRAIN, sent, {"secagg": ConfigRecord({})}), ctx)
    assert_refused(reply, key, ctx)


@pytest.mark.parametrize("key", list(WEAKER["ifca"]))
@pytest.mark.parametrize("kind", [MessageType.TRAIN, MessageType.EVALUATE])
def test_ifca_clients_refuse_a_changed_key(own, hypotheses, key, kind):
    cfg = own["ifca"]
    ctx = context(cfg)
    sent = {"client-task": "ifca", "ifca-ledger-tag": "", key: WEAKER["ifca"][key]}
    reply = app(message(cfg, f"{kind}.ifca", sent, {HYPOTHESES_KEY: hypotheses}), ctx)
    assert_refused(reply, key, ctx)


@pytest.mark.parametrize("kind", [MessageType.TRAIN, MessageType.EVALUATE])
def test_an_ifca_client_refuses_plain_messages(own, kind):
    """An own nu > 0 makes the client an IFCA client: a plain train / evaluate is refused."""
    cfg = own["ifca"]
    ctx = context(cfg)
    reply = app(message(cfg, kind, {"privacy": "none"}, {}), ctx)
    assert_refused(reply, "client-task", ctx)


def test_an_ifca_message_without_its_task_keeps_the_ifca_rules(own, hypotheses):
    """A training user's evaluation without ``client-task`` (and ``privacy = none``) is still
    IFCA's: declined without the client's opt-in (GP: only the sanitized vector leaves)."""
    cfg = own["ifca"]
    sent = {"privacy": "none", "ifca-eval-split": "test"}
    reply = app(message(cfg, "evaluate.ifca", sent, {HYPOTHESES_KEY: hypotheses}), context(cfg))
    assert not reply.has_error(), reply.error
    assert not reply.content.keys()


def test_equal_values_are_accepted(own, weights, hypotheses):
    cfg = own["dp-sgd"]
    ctx = context(cfg)
    sent = {k: cfg[k] for k in WEAKER["dp-sgd"] if k in cfg} | {"client-task": "dp-sgd"}
    sent["noise-multiplier"] = 1.1  # the resolved float of the client's own 1.1
    reply = app(
        message(cfg, MessageType.TRAIN, sent, {"arrays": ArrayRecord(weights["dp-sgd"])}), ctx
    )
    assert not reply.has_error(), reply.error
    assert set(reply.content.array_records) == {"arrays"}
    assert ctx.state[DPSGD_STATE_KEY]["participations"] == 1  # the client's own count
    zcfg = own["zonal"]
    zsent = {"client-task": "zonal", "privacy": "zonal"}  # no zonal-level: the client's own
    zmsg = message(zcfg, MessageType.TRAIN, zsent, {"arrays": ArrayRecord(weights["zonal"])})
    reply = app(zmsg, context(zcfg))
    assert not reply.has_error(), reply.error
    assert set(reply.content["metrics"].keys()) == {"num-examples", "zonal-noise-std"}
    z, c = float(zcfg["noise-multiplier"]), float(zcfg["clipping-norm"])
    assert z * c > 0 and reply.content["metrics"]["zonal-noise-std"] == pytest.approx(z * c)
    ncfg = own["zone-node"]  # a zone node: its clients' zone aggregate, counts, sigma
    nsent = {"client-task": "zone-node", "privacy": "zonal", "zonal-clients": [0, 1]}
    nmsg = message(ncfg, MessageType.TRAIN, nsent, {"arrays": ArrayRecord(weights["zone-node"])})
    reply = app(nmsg, context(ncfg))
    assert not reply.has_error(), reply.error
    assert set(reply.content["metrics"].keys()) == {
        "num-examples", "zonal-noise-std", "zonal-zone-sigma"
    }  # fmt: skip
    stray = {**nsent, "zonal-clients": [2]}  # zone 1's client: not this node's
    nmsg = message(ncfg, MessageType.TRAIN, stray, {"arrays": ArrayRecord(weights["zone-node"])})
    with pytest.raises(ValueError, match="not members of this zone"):  # Flower: an error reply
        app(nmsg, context(ncfg))
    icfg = own["ifca"]
    isent = {"client-task": "ifca", "ifca-ledger-tag": "", "ifca-noise-multiplier": 5.0}
    reply = app(message(icfg, "train.ifca", isent, {HYPOTHESES_KEY: hypotheses}), context(icfg))
    assert not reply.has_error(), reply.error
    assert set(reply.content.keys()) == {REPLY_KEY}
    validation = context(icfg, partition=int(icfg["num-clients"]) - 1)  # a held-out user
    esent = {"client-task": "ifca", "ifca-eval-split": "all"}
    reply = app(message(icfg, "evaluate.ifca", esent, {HYPOTHESES_KEY: hypotheses}), validation)
    assert not reply.has_error(), reply.error
    assert "hypothesis" in reply.content[METRICS_KEY]


def test_node_config_overrides_run_config(own, weights):
    """A SuperNode's ``--node-config`` sets the privacy keys; the server's value is refused."""
    cfg = own["dp-sgd"]
    ctx = context(cfg, node={"noise-multiplier": 2.0})
    arrays = {"arrays": ArrayRecord(weights["dp-sgd"])}
    reply = app(message(cfg, MessageType.TRAIN, {"client-task": "dp-sgd"}, arrays), ctx)
    assert not reply.has_error(), reply.error
    want = dpsgd.client_epsilon(
        num_examples=int(reply.content["metrics"]["num-examples"]), batch_size=16,
        local_epochs=1, participations=1, noise_multiplier=2.0, delta=1e-5,
    )  # fmt: skip
    assert reply.content["metrics"]["dp-sgd-epsilon"] == pytest.approx(want.epsilon)
    ctx = context(cfg, node={"noise-multiplier": 2.0})
    sent = {"client-task": "dp-sgd", "noise-multiplier": 1.1}  # the run config's z
    assert_refused(app(message(cfg, MessageType.TRAIN, sent, arrays), ctx), "noise-multiplier", ctx)
    # the node's own mode decides: a run configured without privacy cannot train it plainly
    plain = resolve_run_config({**FAST, "privacy": "none"})
    ctx = context(plain, node={"privacy": "dp-sgd"})
    assert_refused(app(message(plain, MessageType.TRAIN, {}, arrays), ctx), "client-task", ctx)


def test_a_digestless_full_config_with_a_weakened_key_is_refused(own, weights):
    cfg = own["dp-sgd"]
    arrays = ArrayRecord(weights["dp-sgd"])
    full = {**cfg, "client-task": "dp-sgd", "server-round": 1, "noise-multiplier": 0.0}
    ctx = context(cfg)
    msg = Message(RecordDict({"arrays": arrays, "config": ConfigRecord(full)}), 1, "train")
    assert_refused(app(msg, ctx), "noise-multiplier", ctx)


def test_modes_that_trust_the_server_take_its_training_keys_not_its_privacy_keys(own, weights):
    """The allow-list holds in every mode. A global-DP client trusts the server with
    its noise, but a message that turns its mode or its opt-ins (privacy-relevant keys) is
    refused like any other; a training key (the learning rate of a sweep) is the server's."""
    cfg = resolve_run_config({**FAST, "privacy": "global-dp"})
    arrays = {"arrays": ArrayRecord(weights["dp-sgd"])}
    for key, value in {"privacy": "none", "unaccounted-metrics": True}.items():
        ctx = context(cfg)
        assert_refused(app(message(cfg, MessageType.TRAIN, {key: value}, arrays), ctx), key, ctx)
    sent = {"learning-rate": 0.5, "client-task": "standard"}
    reply = app(message(cfg, MessageType.TRAIN, sent, arrays), context(cfg))
    assert not reply.has_error(), reply.error
    assert set(reply.content.array_records) == {"arrays"}
    # the node's own unaccounted-metrics (auto: false): global DP's policy, no train loss
    assert set(reply.content["metrics"].keys()) == {"num-examples"}


def test_a_mixed_zonal_client_owns_its_keys_only_in_an_ldp_zone():
    own = {"privacy": "zonal", "noise-placement": "mixed", "ldp-fraction": 0.5,
           "num-clients": 4, "num-zones": 2, "zone-assignment": "blocks"}  # fmt: skip
    assert [client_mode(own, p) for p in range(4)] == ["zonal", "zonal", None, None]
    assert client_mode({**own, "num-zones": "auto"}, 0) is None  # delegated to the server
    # zone nodes: the node's partition-id is its zone; LDP and HDP zones own
    nodes = {**own, "hdp-fraction": 0.5, "ldp-fraction": 0.0, "zonal-runtime": "zone-nodes"}
    assert [client_mode(nodes, z) for z in range(2)] == ["zone-node", None]
    assert client_mode(own, 0, message_task="zone-node") == "zone-node"


@pytest.mark.parametrize(
    ("sent", "refused"),
    [
        ({"noise-multiplier": 0.01}, "noise-multiplier"),  # global DP's auto value, not DP-SGD's
        ({"clipping-norm": 5.0}, "clipping-norm"),
        ({"dp-sgd-noise-multiplier": 0.0}, "dp-sgd-noise-multiplier"),  # an old name: not
        # on the allow-list, refused like any key the server may not set
        ({"learning-rate": 0.05}, None),  # a training key the server may set
    ],
)
def test_a_shared_key_left_auto_takes_the_nodes_mode_value_not_the_messages(
    own, weights, sent, refused
):
    """One key name per idea: a DP-SGD node that leaves ``noise-multiplier`` and
    ``clipping-norm`` at auto resolves them to DP-SGD's own values (z = 1.1, C = 1) from its
    own mode. A message with another value is refused, and so is an old per-mode name (not
    on the allow-list); an allowed training key changes nothing of ε: the reply's ε is the
    one of z = 1.1."""
    node_run_config = {**OWN["dp-sgd"], "noise-multiplier": "auto", "clipping-norm": "auto"}
    cfg = own["dp-sgd"]
    assert (cfg["noise-multiplier"], cfg["clipping-norm"]) == (1.1, 1.0)
    ctx = context(node_run_config)
    msg = message(node_run_config, MessageType.TRAIN, {"client-task": "dp-sgd", **sent},
                  {"arrays": ArrayRecord(weights["dp-sgd"])})  # fmt: skip
    reply = app(msg, ctx)
    if refused:
        assert_refused(reply, refused, ctx)
        return
    assert not reply.has_error(), reply.error
    want = dpsgd.client_epsilon(
        num_examples=int(reply.content["metrics"]["num-examples"]), batch_size=16,
        local_epochs=1, participations=1, noise_multiplier=1.1, delta=1e-5,
    )  # fmt: skip
    assert reply.content["metrics"]["dp-sgd-epsilon"] == pytest.approx(want.epsilon)
