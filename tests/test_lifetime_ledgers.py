"""A node's ledger is the node's, across runs (:mod:`fedpriv.privacy.releases`).

A curious server replays its requests in new runs: a new run id, a new ``Context`` (a
restarted node), a resumed run (a new run id, the same rounds). The real ClientApp
(``fedpriv.scenarios.app.client_app.app``) and the real zone-node task answer; each node keeps one
ledger per identity (its ``partition-id`` / zone id) in a folder it owns: its own
``client-state-dir`` ("sets everything") or, when it sets nothing, the per-node default
``$FEDPRIV_STATE_ROOT/node-<data key>`` (never a run's folder). What leaves the node is
counted here independently, from the replies:

- a zone round replayed in 32 runs is one release (every reply is the first, bit for bit),
  and so is an in-server LDP client's round;
- an IFCA client with a leakage budget of 2 releases gives 2, whatever the runs;
- a DP-SGD node's ε after N runs equals an independent dp_accounting accountant over all its
  participations, and its own lifetime ``max-epsilon`` refuses past it in one line.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from fedpriv.scenarios.app.client_app import app
from fedpriv.scenarios.config.node_spec import node_ledger
from fedpriv.scenarios.config.registry import resolve_run_config
from flwr.app import Context, RecordDict

from fedpriv.ifca import REPLY_KEY, unpack_hypotheses
from fedpriv.privacy import dpsgd
from fedpriv.privacy.releases import STATE_DIR_KEY, ReleaseCounter
from tests import test_release_counting as counting
from tests.test_release_counting import (
    IFCA,
    arrays_of,
    dpsgd_message,
    ifca_message,
    refused,
    same_arrays,
    zone_message,
)

zone, ifca, dp = counting.zone, counting.ifca, counting.dp  # the same module fixtures

OWNERSHIP = ["sets-nothing", "sets-everything"]


def node_context(cfg: dict, partition: int, run: int, own: str, tmp_path) -> Context:
    """A fresh Context (a restarted node) of run ``run``; ``own``: whether the node names its
    own folder (node config) or leaves it to the per-node default."""
    node = {STATE_DIR_KEY: str(tmp_path / "node-own")} if own == "sets-everything" else {}
    return Context(run, 1000 + run, {"partition-id": partition, **node}, RecordDict(), cfg)


def ledger_of(ctx: Context, party: str) -> ReleaseCounter:
    where = node_ledger(ctx)
    return ReleaseCounter(where.folder, party, where.identity)


def distinct(vectors: list[list[np.ndarray]]) -> int:
    return sum(not any(same_arrays(v, w) for w in vectors[:i]) for i, v in enumerate(vectors))


@pytest.mark.parametrize("own", OWNERSHIP)
def test_a_zone_round_replayed_in_32_runs_is_one_release(zone, tmp_path, own):
    cfg, weights = zone
    replies = [
        app(zone_message(cfg, weights, 1), node_context(cfg, 0, run, own, tmp_path))
        for run in range(1, 33)
    ]
    served = [r for r in replies if not r.has_error()]
    assert served and all(refused(r) for r in replies if r.has_error())
    assert distinct([arrays_of(r) for r in served]) == 1  # averaging them removes no noise
    ctx = node_context(cfg, 0, 99, own, tmp_path)
    assert ledger_of(ctx, "zone-node").load().releases == 1
    # a new run of the node's next round is a new release, charged in the same ledger
    assert not app(zone_message(cfg, weights, 2), ctx).has_error()
    assert ledger_of(ctx, "zone-node").load().releases == 2


@pytest.mark.parametrize("own", OWNERSHIP)
def test_ifca_gives_two_releases_on_a_budget_of_two_whatever_the_runs(ifca, tmp_path, own):
    from fedpriv.strategies.ifca import hypotheses_record

    base, record, cost = ifca
    cfg = resolve_run_config({**IFCA, "leakage-budget": 2 * cost})
    replies = []
    for run in range(1, 11):  # each call a new run: its round 1, other hypotheses each time
        moved = hypotheses_record([[a + 1e-3 * run for a in h] for h in unpack_hypotheses(record)])
        replies.append(app(ifca_message(cfg, moved, 1), node_context(cfg, 0, run, own, tmp_path)))
    released = [r for r in replies if not r.has_error() and REPLY_KEY in r.content]
    assert distinct([arrays_of(r, REPLY_KEY) for r in released]) == 2
    assert all(not r.has_error() and not r.content.keys() for r in replies[2:])  # declined
    ledger = ledger_of(node_context(cfg, 0, 11, own, tmp_path), "ifca").load()
    assert ledger.releases == 2 and ledger.spent == pytest.approx(2 * cost)
    assert ledger.declined == 8


def independent_epsilon(cfg: dict, n: int, participations: int) -> float:
    """dp_accounting's own RDP and PLD accountants over ``participations`` DP-SGD
    participations (replace-one: z/2 under add/remove; round(n/B)·E Poisson steps each); the
    headline is the smaller."""
    q = int(cfg["batch-size"]) / n
    steps = max(1, round(n / int(cfg["batch-size"]))) * int(cfg["local-epochs"]) * participations
    step = dp_accounting.PoissonSampledDpEvent(
        q, dp_accounting.GaussianDpEvent(float(cfg["noise-multiplier"]) / 2)
    )
    event = dp_accounting.SelfComposedDpEvent(step, steps)
    delta = float(cfg["dp-delta"])
    rdp = dp_accounting.rdp.RdpAccountant().compose(event).get_epsilon(delta)
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    return min(rdp, pld.compose(event).get_epsilon(delta))


@pytest.mark.parametrize("own", OWNERSHIP)
def test_dp_sgd_lifetime_epsilon_after_resumed_runs_is_one_accountant(dp, tmp_path, own):
    """Three runs of two rounds each (each a new run id and Context: a resumed run gets a new
    run id), the second one's round 2 replayed: the node's ε after them is an independent
    accountant's over its 6 participations, not 2's."""
    cfg, weights = dp
    replies = []
    for run in (1, 2, 3):
        moved = [w + 1e-3 * run for w in weights]
        for server_round in (1, 2):
            ctx = node_context(cfg, 2, run, own, tmp_path)
            replies.append(app(dpsgd_message(cfg, moved, server_round), ctx))
    replay = app(dpsgd_message(cfg, [w + 2e-3 for w in weights], 2),
                 node_context(cfg, 2, 7, own, tmp_path))  # fmt: skip
    assert all(not r.has_error() for r in replies), [r.error for r in replies if r.has_error()]
    assert refused(replay) or same_arrays(arrays_of(replay), arrays_of(replies[3]))
    assert distinct([arrays_of(r) for r in replies]) == 6
    n = int(replies[0].content["metrics"]["num-examples"])
    eps = [float(r.content["metrics"]["dp-sgd-epsilon"]) for r in replies]
    for k, value in enumerate(eps, start=1):
        assert value == pytest.approx(independent_epsilon(cfg, n, k), rel=1e-3)
    assert eps[-1] > eps[1] + 1.0  # a per-run count would report ε(2) again


def test_dp_sgd_own_max_epsilon_refuses_past_it_in_one_line_across_runs(dp, tmp_path):
    cfg, weights = dp
    probe = app(dpsgd_message(cfg, weights, 1), node_context(cfg, 1, 1, "x", tmp_path / "p"))
    n = int(probe.content["metrics"]["num-examples"])
    eps3 = dpsgd.client_epsilon(
        num_examples=n, batch_size=int(cfg["batch-size"]), local_epochs=int(cfg["local-epochs"]),
        participations=3, noise_multiplier=float(cfg["noise-multiplier"]),
        delta=float(cfg["dp-delta"]),
    ).epsilon  # fmt: skip
    budget = {"max-epsilon": eps3 * 1.0001, STATE_DIR_KEY: str(tmp_path / "own")}
    replies = []
    for run in range(1, 6):  # five runs, one participation each: the 4th and 5th are refused
        ctx = Context(run, 1, {"partition-id": 1, **budget}, RecordDict(), cfg)
        replies.append(app(dpsgd_message(cfg, [w + 1e-3 * run for w in weights], 1), ctx))
    assert [r.has_error() for r in replies] == [False, False, False, True, True]
    reason = replies[3].error.reason
    assert refused(replies[3]) and "\n" not in reason
    assert "lifetime max-epsilon" in reason and "over its 4 releases" in reason
    assert ReleaseCounter(tmp_path / "own", "dp-sgd", 1).load().releases == 3
    assert math.isfinite(eps3)


@pytest.mark.parametrize("own", OWNERSHIP)
def test_an_in_server_ldp_client_answers_32_replays_with_one_release(tmp_path, own):
    """The in-server zonal runtime: an LDP zone's client (client task ``zonal``) answers the
    same round, replayed in 32 runs, with one noisy release."""
    from fedpriv.clients.keras_client import federated_data, initial_weights
    from fedpriv.scenarios.config.specs import data_spec, train_spec
    from flwr.app import ArrayRecord, MessageType

    from tests.test_privacy_keys import OWN
    from tests.test_release_counting import message

    cfg = resolve_run_config(OWN["zonal"])
    weights = initial_weights(train_spec(cfg), federated_data(data_spec(cfg)))
    sent = {"client-task": "zonal", "zonal-level": "ldp"}
    content = {"arrays": ArrayRecord(weights)}
    replies = [
        app(message(cfg, MessageType.TRAIN, sent, content, 1), node_context(cfg, 1, run, own,
                                                                          tmp_path))
        for run in range(1, 33)
    ]  # fmt: skip
    served = [r for r in replies if not r.has_error()]
    assert served and all(refused(r) for r in replies if r.has_error())
    assert distinct([arrays_of(r) for r in served]) == 1
    ledger = ledger_of(node_context(cfg, 1, 40, own, tmp_path), "zonal-ldp").load()
    assert ledger.releases == 1
