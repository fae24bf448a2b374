"""Every message a client sends, in each privacy mode, carries only what that mode's accounting
covers — or a labelled opt-in listed in the summary.

The real ClientApp (``fedpriv.scenarios.app.client_app.app``) is called with real Flower
``Message`` and
``Context`` objects (no mocks, no simulation); Flower dispatches on the message type exactly
as in a run. The expected key sets are written out here, not read from the module under test.
"""

from __future__ import annotations

import numpy as np
import pytest
from fedpriv.clients.keras_client import federated_data, initial_weights
from fedpriv.scenarios.app.client_app import app
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.specs import data_spec, run_spec, server_run, train_spec
from fedpriv.scenarios.nodes.federation import QUERY_KEY
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict

from fedpriv.ifca import CONFIG_KEY, HYPOTHESES_KEY, REPLY_KEY
from fedpriv.privacy import dpsgd
from fedpriv.privacy.disclosure import unaccounted_channels

FAST = {"num-server-rounds": 1, "local-epochs": 1, "num-clients": 4}
NEVER_UNDER_DP = {"train-loss", "loss", "accuracy", "zonal-update-norm", "zonal-clipped",
                  "zonal-noise-norm", "hypothesis"}  # fmt: skip


def context(partition: int = 0, run_config: dict | None = None) -> Context:
    """A node of the run: its ``run_config`` is the run's (the node resolves its
    own privacy settings from it; a message cannot set them)."""
    return Context(
        run_id=1, node_id=1, node_config={"partition-id": partition}, state=RecordDict(),
        run_config=dict(run_config or {}),
    )  # fmt: skip


def send(cfg: dict, message_type: str, arrays=None, extra: dict | None = None) -> RecordDict:
    """The reply content of the real ClientApp to one message of ``message_type``."""
    config = ConfigRecord({**cfg, "server-round": 1, **(extra or {})})
    content = {"config": config}
    if arrays is not None:
        content["arrays"] = ArrayRecord(arrays)
    reply = app(Message(RecordDict(content), 1, message_type), context(run_config=cfg))
    assert not reply.has_error(), reply.error
    return reply.content


def metric_keys(content: RecordDict) -> set[str]:
    return {k for record in content.metric_records.values() for k in record}


@pytest.fixture(scope="module")
def digits():
    cfg = resolve_run_config(FAST)
    return initial_weights(train_spec(cfg), federated_data(data_spec(cfg)))


@pytest.mark.parametrize("mode", ["global-dp", "metric-dp"])
def test_central_dp_clients_send_the_model_and_their_example_count_only(digits, mode):
    cfg = resolve_run_config({**FAST, "privacy": mode})
    train = send(cfg, MessageType.TRAIN, digits)
    assert set(train.array_records) == {"arrays"}
    assert metric_keys(train) == {"num-examples"}
    evaluate = send(cfg, MessageType.EVALUATE, digits)
    assert set(evaluate.array_records) == set() and metric_keys(evaluate) == {"num-examples"}
    query = app(Message(RecordDict({QUERY_KEY: ConfigRecord({"ask": "x"})}), 1,
                        MessageType.QUERY), context())  # fmt: skip
    # metadata of the grid: the partition and the clients it serves (one: not a worker)
    assert dict(query.content[QUERY_KEY]) == {"partition-id": 0, "clients": [0]}


def test_opt_in_sends_the_labelled_extras_and_the_summary_lists_them(digits):
    cfg = resolve_run_config({**FAST, "privacy": "global-dp", "unaccounted-metrics": True})
    assert {"train-loss", "num-examples"} <= metric_keys(send(cfg, MessageType.TRAIN, digits))
    assert "accuracy" in metric_keys(send(cfg, MessageType.EVALUATE, digits))
    spec = run_spec(cfg)
    listed = unaccounted_channels(spec.mode_name, opted_in=spec.unaccounted_metrics)
    assert any("train-loss" in u for u in listed) and any("evaluation" in u for u in listed)
    none = resolve_run_config({**FAST, "privacy": "none"})  # no mechanism: nothing withheld
    assert "train-loss" in metric_keys(send(none, MessageType.TRAIN, digits))


def test_dp_sgd_clients_send_no_unnoised_loss(digits):
    cfg = resolve_run_config({**FAST, "privacy": "dp-sgd", "batch-size": 16})
    train = send(cfg, MessageType.TRAIN, digits, {"client-task": "dp-sgd"})
    keys = metric_keys(train)
    own = {"dp-sgd-noise-multiplier", "dp-sgd-clipping-norm", "dp-sgd-delta"}
    assert keys == {"num-examples", "dp-sgd-epsilon", *own}
    # its own mechanism, as its own config says (the server's summary reports these)
    assert [train["metrics"][k] for k in sorted(own)] == pytest.approx(
        [cfg["clipping-norm"], cfg["dp-delta"], cfg["noise-multiplier"]]
    )
    # ε is a function of the client's own config and its (public) example count only
    metrics = train["metrics"]
    want = dpsgd.client_epsilon(
        num_examples=int(metrics["num-examples"]), batch_size=16, local_epochs=1,
        participations=1, noise_multiplier=float(cfg["noise-multiplier"]),
        delta=float(cfg["dp-delta"]),
    )  # fmt: skip
    assert metrics["dp-sgd-epsilon"] == pytest.approx(want.epsilon)


def test_zonal_ldp_clients_send_no_norms():
    cfg = resolve_run_config(
        {
            "scenario": "hdp-digits",
            "noise-placement": "ldp",
            "local-epochs": 1,
            "zonal-runtime": "in-server",
        }  # one SuperNode per client  # fmt: skip
    )
    weights = initial_weights(train_spec(cfg), federated_data(data_spec(cfg)))
    extra = {"client-task": "zonal", "zonal-level": "ldp"}
    train = send(cfg, MessageType.TRAIN, weights, extra)
    assert metric_keys(train) == {"num-examples", "zonal-noise-std"}
    z, c = float(cfg["noise-multiplier"]), float(cfg["clipping-norm"])
    assert train["metrics"]["zonal-noise-std"] == pytest.approx(z * c)  # config only
    sent = [a - w for a, w in zip(train["arrays"].to_numpy_ndarrays(), weights)]
    assert any(np.any(d != 0) for d in sent)


def test_ifca_training_users_send_only_the_sanitized_vector():
    from fedpriv.scenarios.ifca.feature import initial_hypotheses
    from fedpriv.strategies.ifca import hypotheses_record

    cfg = resolve_run_config(  # the client keeps secret noise
        {"scenario": "gp-synthetic", "unaccounted-metrics": False, "reproducible-noise": False}
    )
    hyps = hypotheses_record(initial_hypotheses(server_run(cfg), federated_data(data_spec(cfg))))
    base = {**cfg, "client-task": "ifca", "ifca-ledger-tag": "", "server-round": 1}

    def ifca(kind: str, extra: dict) -> RecordDict:
        content = RecordDict({HYPOTHESES_KEY: hyps, CONFIG_KEY: ConfigRecord({**base, **extra})})
        reply = app(Message(content, 1, f"{kind}.ifca"), context(run_config=cfg))
        assert not reply.has_error(), reply.error
        return reply.content

    train = ifca(MessageType.TRAIN, {})
    assert set(train.keys()) == {REPLY_KEY} and not train.metric_records
    assert ifca(MessageType.EVALUATE, {"ifca-eval-split": "test"}).keys() == set()  # declined
    # the GP scenario's final evaluation is an explicit, listed opt-in: the node's own
    opted = {**base, "unaccounted-metrics": True, "ifca-eval-split": "test"}
    node = context(run_config={**cfg, "unaccounted-metrics": True})
    reply = app(Message(RecordDict({HYPOTHESES_KEY: hyps, CONFIG_KEY: ConfigRecord(opted)}), 1,
                        "evaluate.ifca"), node)  # fmt: skip
    assert "hypothesis" in metric_keys(reply.content)
    default = resolve_run_config({"scenario": "gp-synthetic"})
    assert default["unaccounted-metrics"] is True
    assert run_spec(default).mode_name == "ifca" and run_spec(default).unaccounted_metrics
    assert unaccounted_channels("ifca", opted_in=run_spec(default).unaccounted_metrics)


def test_nothing_a_dp_client_sent_above_is_a_forbidden_side_channel():
    """The known side channels never appear without the opt-in (one table)."""
    from fedpriv.privacy.disclosure import reply_keys

    assert set(reply_keys()) >= {"global-dp", "metric-dp", "dp-sgd", "zonal", "ifca"}
    for mode, kinds in reply_keys().items():
        for kind, keys in kinds.items():
            assert not (set(keys) & NEVER_UNDER_DP), (mode, kind)
