"""The last two lifetime budgets: IFCA's validation users and zone nodes' ε.

The real ClientApp (``fedpriv.scenarios.app.client_app.app``) answers a curious server that sends
its
requests in new runs (a new run id and a new ``Context``: a restarted node or a resumed run).
The node keeps its ledger in its own folder: its ``client-state-dir`` and its budget in its
``node_config`` ("sets-everything"), or the per-node default folder and its run config's
budget ("sets-nothing"). What is answered is counted here, from the replies:

- a held-out IFCA validation user answers crafted evaluate queries (new hypotheses each)
  up to its own ``validation-query-budget``, then refuses in one line; an identical query is
  the cached reply; the default (500) answers GP's scenarios; the server cannot raise it;
- a zone node's lifetime ε after N runs equals dp_accounting's own PLD accountant over its N
  releases (the level's Gaussian event, no amplification), and its own ``max-epsilon``
  refuses the release past it in one line.
"""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest
from fedpriv.scenarios.app.client_app import app
from fedpriv.scenarios.config.node_spec import node_ledger
from fedpriv.scenarios.config.registry import resolve_run_config
from flwr.app import Context, RecordDict

from fedpriv.ifca import HYPOTHESES_KEY, METRICS_KEY, unpack_hypotheses
from fedpriv.privacy.releases import STATE_DIR_KEY, ReleaseCounter
from fedpriv.zonal.accounting import lifetime_epsilon
from tests import test_release_counting as counting
from tests.test_release_counting import IFCA, message, refused, zone_message

zone, ifca = counting.zone, counting.ifca  # the same module fixtures
OWNERSHIP = ["sets-nothing", "sets-everything"]
BUDGET_KEY = "validation-query-budget"


def node_context(cfg: dict, partition: int, run: int, node: dict) -> Context:
    """A fresh Context (a restarted node) of run ``run`` with the node's own ``node``."""
    return Context(run, 1000 + run, {"partition-id": partition, **node}, RecordDict(), cfg)


def ledger_of(ctx: Context, party: str) -> ReleaseCounter:
    where = node_ledger(ctx)
    return ReleaseCounter(where.folder, party, where.identity)


def owner(own: str, tmp_path, key: str, value, base: dict) -> tuple[dict, dict]:
    """(run config, node config): the budget in the node's run config (sets nothing in its
    node config) or in its node config with its own folder (sets everything)."""
    if own == "sets-nothing":
        return resolve_run_config({**base, key: value}), {}
    return resolve_run_config(base), {STATE_DIR_KEY: str(tmp_path / "own"), key: value}


# --- IFCA validation users ---------------------------------------------------------------------


def query(cfg: dict, hypotheses: list, server_round: int = 1, **sent):
    from fedpriv.strategies.ifca import hypotheses_record

    config = {"client-task": "ifca", "ifca-eval-split": "all", **sent}
    return message(cfg, "evaluate.ifca", config, {HYPOTHESES_KEY: hypotheses_record(hypotheses)},
                   server_round)  # fmt: skip


def crafted(record, i: int) -> list:
    """Query ``i``'s hypotheses: the server's probes (a new point for every query)."""
    rng = np.random.default_rng(i)
    hypotheses = unpack_hypotheses(record)
    return [[rng.normal(size=a.shape).astype(a.dtype) for a in h] for h in hypotheses]


@pytest.mark.parametrize("own", OWNERSHIP)
def test_a_validation_user_answers_its_budget_of_crafted_queries_whatever_the_runs(
    ifca, tmp_path, own
):
    _, record, _ = ifca
    cfg, node = owner(own, tmp_path, BUDGET_KEY, 3, IFCA)
    user = int(cfg["num-clients"]) - 1  # a held-out validation user
    replies = [
        app(query(cfg, crafted(record, run)), node_context(cfg, user, run, node))
        for run in range(1, 7)  # 6 crafted queries, each in a new run and a new Context
    ]
    answered = [r for r in replies if not r.has_error()]
    assert len(answered) == 3 and all("hypothesis" in r.content[METRICS_KEY] for r in answered)
    for reply in replies[3:]:
        assert refused(reply) and "\n" not in reply.error.reason
        assert f"{BUDGET_KEY} = 3" in reply.error.reason, reply.error.reason
    ctx = node_context(cfg, user, 99, node)
    ledger = ledger_of(ctx, "ifca-validation").load()
    assert (ledger.releases, ledger.declined) == (3, 3)
    # the last answered query again, from yet another run: the cached reply, not counted
    again = app(query(cfg, crafted(record, 3)), ctx)
    assert not again.has_error() and dict(again.content[METRICS_KEY]) == dict(
        answered[-1].content[METRICS_KEY]
    )
    assert ledger_of(ctx, "ifca-validation").load().releases == 3


def test_the_default_budget_answers_gp_and_counts_every_query(ifca, tmp_path):
    """A node that sets nothing: the default budget (500 >= GP's queries of a run) answers,
    and its ledger counts each query across runs; the server cannot raise the budget."""
    _, record, _ = ifca
    cfg = resolve_run_config(IFCA)
    assert cfg[BUDGET_KEY] == 500 >= int(cfg["num-server-rounds"])
    fig2 = resolve_run_config({"scenario": "gp-fig2"})
    assert fig2[BUDGET_KEY] >= (fig2["ifca-sweep"].count(";") + 1) * fig2["num-server-rounds"]
    user = int(cfg["num-clients"]) - 2
    replies = [
        app(query(cfg, crafted(record, 10 + run)), node_context(cfg, user, run, {}))
        for run in range(1, 5)
    ]
    assert not any(r.has_error() for r in replies)
    ctx = node_context(cfg, user, 9, {})
    assert ledger_of(ctx, "ifca-validation").load().releases == 4
    raised = app(query(cfg, crafted(record, 20), **{BUDGET_KEY: 10**6}), ctx)
    assert refused(raised) and BUDGET_KEY in raised.error.reason
    assert ledger_of(ctx, "ifca-validation").load().releases == 4


def test_a_validation_user_with_budget_zero_answers_nothing(ifca, tmp_path):
    _, record, _ = ifca
    cfg, node = owner("sets-everything", tmp_path, BUDGET_KEY, 0, IFCA)
    reply = app(query(cfg, crafted(record, 1)), node_context(cfg, int(cfg["num-clients"]) - 1, 1,
                                                             node))  # fmt: skip
    assert refused(reply) and f"{BUDGET_KEY} = 0" in reply.error.reason


# --- zone nodes: lifetime ε -------------------------------------------------------------------


def independent_epsilon(z: float, releases: int, delta: float) -> float:
    """dp_accounting's PLD accountant over ``releases`` Gaussian events of multiplier z."""
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), releases)
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    return pld.compose(event).get_epsilon(delta)


@pytest.mark.parametrize("own", OWNERSHIP)
def test_a_zone_nodes_lifetime_epsilon_is_one_accountant_and_caps_it(zone, tmp_path, own):
    """Three runs, each a fresh release of round 1 (other global arrays): the node's ε over
    its ledger equals dp_accounting's over 3 releases; with its own max-epsilon between that
    ε and 4 releases' the fourth run is refused in one line; the third run's request again
    is the cached reply; a message naming a larger max-epsilon is refused."""
    base, weights = zone
    z, delta = float(base["noise-multiplier"]), float(base["dp-delta"])
    three, four = independent_epsilon(z, 3, delta), independent_epsilon(z, 4, delta)
    cap = (three + four) / 2
    cfg, node = owner(own, tmp_path, "max-epsilon", cap, {**counting.ZONE_NODE})
    sent = [[w + 1e-3 * run for w in weights] for run in range(1, 5)]
    replies = [
        app(zone_message(cfg, sent[run - 1], 1), node_context(cfg, 0, run, node))
        for run in range(1, 5)
    ]
    assert all(not r.has_error() for r in replies[:3]), [r.error for r in replies[:3]]
    assert refused(replies[3]) and "\n" not in replies[3].error.reason
    assert "max-epsilon" in replies[3].error.reason, replies[3].error.reason
    ctx = node_context(cfg, 0, 50, node)
    ledger = ledger_of(ctx, "zone-node").load()
    assert ledger.releases == 3 and ledger.spent == pytest.approx(3 / z**2, rel=1e-12)
    assert lifetime_epsilon(ledger.spent, delta) == pytest.approx(three, rel=1e-3)
    assert not app(zone_message(cfg, sent[2], 1), ctx).has_error()  # cached, no new charge
    assert ledger_of(ctx, "zone-node").load().releases == 3
    raised = zone_message(cfg, sent[3], 1)  # the server names a larger budget: refused
    raised.content["config"]["max-epsilon"] = 1e6
    reply = app(raised, node_context(cfg, 0, 51, node))
    assert refused(reply) and "max-epsilon" in reply.error.reason
    assert ledger_of(ctx, "zone-node").load().releases == 3
