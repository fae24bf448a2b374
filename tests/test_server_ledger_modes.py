"""The server's lifetime ledger of ``dp-ftrl`` (a row per tree) and ``client-budgets`` (a row
per client and release): lifetime ε over runs with different z, trees, rates and δ against
dp_accounting's own composition of the same events, computed here independently; the
``server-max-epsilon`` budget deciding through the real wrappers (before a round and at
release); a tree cut short charged whole (an upper bound); one kind of server ledger per
folder; the same experiment twice on a fresh server folder gives the same ε, and a second run
on the same folder reports a lifetime ε above this run's."""

from __future__ import annotations

import sqlite3

import dp_accounting
import numpy as np
import pytest
from fedpriv.scenarios.config.registry import resolve_run_config
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.strategies.client_budgets import ClientBudgetsDP
from fedpriv.strategies.dp_ftrl import DPFTRL
from flwr.common import ArrayRecord, ConfigRecord
from flwr.serverapp.strategy import FedAvg

from fedpriv.privacy.accounting import NeighborRel
from fedpriv.privacy.client_budgets import client_epsilon
from fedpriv.privacy.ftrl import tree_epsilon
from fedpriv.privacy.ledger.per_client import open_per_client_ledger
from fedpriv.privacy.ledger.server import ServerLedgerError, open_server_ledger
from fedpriv.privacy.ledger.store import DB_NAME
from tests.test_dp_ftrl import SHAPES, Nodes, answer, run_rounds

SPECIAL = NeighborRel.REPLACE_SPECIAL


def _trees_epsilon(trees: list[tuple[float, int]], delta: float) -> float:
    """dp_accounting's RDP accountant (replace-special) of one tree event per (z, leaves)."""
    events = [dp_accounting.SingleEpochTreeAggregationDpEvent(z, t) for z, t in trees]
    accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=SPECIAL)
    return accountant.compose(dp_accounting.ComposedDpEvent(events)).get_epsilon(delta)


def _ftrl(folder, z: float, restart: int, rounds, delta: float = 1e-5, budget=None) -> DPFTRL:
    wrapper = DPFTRL(FedAvg(), noise_multiplier=z, clipping_norm=1.0, num_sampled_clients=2,
                     restart_rounds=restart, delta=delta, seed=5, num_rounds=rounds,
                     rng=np.random.default_rng(1))  # fmt: skip
    wrapper.server_ledger = open_server_ledger(folder, SPECIAL, delta, budget)
    return wrapper


def _rows(folder, table: str = "releases") -> int:
    with sqlite3.connect(folder / DB_NAME) as db:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


NODES = range(100, 108)


def test_dp_ftrl_lifetime_epsilon_is_the_composition_of_every_stored_tree(tmp_path):
    """Three runs (z, restart, rounds, δ): trees [2, 2, 1], [3], [1, 1]. After each, the
    lifetime ε is dp_accounting's RDP of every tree so far at that run's δ, and this run's ε
    is the wrapper's own (its accountant of the trees it released)."""
    folder = tmp_path / "server"
    runs = [(1.2, 2, 5, 1e-5, [2, 2, 1]), (2.0, 4, 3, 1e-6, [3]), (0.8, 1, 2, 1e-4, [1, 1])]
    stored: list[tuple[float, int]] = []
    for z, restart, rounds, delta, trees in runs:
        wrapper = _ftrl(folder, z, restart, rounds, delta)
        run_rounds(wrapper, rounds, NODES)
        assert wrapper.ftrl.steps_per_tree == trees
        stored += [(z, t) for t in trees]
        got = wrapper.server_ledger.figures()
        assert got["adjacency"] == "REPLACE_SPECIAL" and _rows(folder) == len(stored)
        assert got["lifetime_epsilon"] == pytest.approx(_trees_epsilon(stored, delta), rel=1e-12)
        assert got["this_run_epsilon"] == pytest.approx(
            wrapper.round_metrics()["dp-epsilon"], rel=1e-12
        )
        assert (got["this_run_releases"], got["earlier_releases"]) == (
            len(trees), len(stored) - len(trees)
        )  # fmt: skip
    assert got["lifetime_epsilon"] > got["this_run_epsilon"] > 0


def test_a_tree_cut_short_is_charged_whole_an_upper_bound(tmp_path):
    """Run length unknown, restart 4, stopped after 2 rounds: the ledger holds the 4-leaf tree
    (ε 4.01 at z = 2) above the accountant's 2 released leaves (3.19); a tree's ε never falls
    as it grows, so the whole tree bounds every prefix of it."""
    wrapper = _ftrl(tmp_path, 2.0, 4, None)
    run_rounds(wrapper, 2, NODES)
    got = wrapper.server_ledger.figures()
    assert got["this_run_epsilon"] == pytest.approx(_trees_epsilon([(2.0, 4)], 1e-5), rel=1e-12)
    released = tree_epsilon(2.0, wrapper.ftrl.steps_per_tree, 1e-5)["epsilon"]
    assert wrapper.ftrl.steps_per_tree == [2] and got["this_run_epsilon"] > released
    by_leaves = [_trees_epsilon([(2.0, t)], 1e-5) for t in range(1, 17)]
    assert all(a <= b for a, b in zip(by_leaves, by_leaves[1:]))


def test_a_server_budget_stops_dp_ftrl_before_the_tree_that_would_pass_it(tmp_path):
    """z = 2, restart 2: a budget between ε of 3 and 4 two-leaf trees. The first run's 2
    trees and the second run's first tree pass; the second run's round 2 is inside that tree
    (nothing more to charge); round 3 would open the 4th tree and is refused before it runs."""
    folder = tmp_path / "server"
    three, four = (_trees_epsilon([(2.0, 2)] * k, 1e-5) for k in (3, 4))
    budget = (three + four) / 2
    first = _ftrl(folder, 2.0, 2, 4, budget=budget)
    assert [first.budget_stop(r) for r in (1, 2, 3, 4)] == [None] * 4  # checked each round
    run_rounds(first, 4, NODES)
    second = _ftrl(folder, 2.0, 2, 4, budget=budget)
    assert second.budget_stop(1) is None
    run_rounds(second, 2, NODES)
    reason = second.budget_stop(3)
    assert reason and f"server-max-epsilon {budget:g} would be exceeded at round 3" in reason
    assert _rows(folder) == 3 and second.budget_stopped == reason
    assert second.server_ledger.figures()["lifetime_epsilon"] == pytest.approx(three, rel=1e-12)


def test_a_dp_ftrl_tree_past_the_budget_is_not_released_at_aggregation(tmp_path):
    """No check before the round: the charge at release declines the tree, nothing is
    released or charged, and the run is stopped with the reason."""
    folder = tmp_path / "server"
    run_rounds(_ftrl(folder, 2.0, 2, 2), 2, NODES)
    late = _ftrl(folder, 2.0, 2, 2, budget=_trees_epsilon([(2.0, 2)], 1e-5) * 1.1)
    model = [np.zeros(s) for s in SHAPES]
    messages = list(late.configure_train(1, ArrayRecord(model), ConfigRecord(), Nodes(NODES)))
    assert late.aggregate_train(1, answer(messages, model)) == (None, None)
    assert late.round_metrics()["dp-noised"] is False
    assert "server-max-epsilon" in late.budget_stopped
    assert _rows(folder) == 1 and _rows(folder, "declines") == 1
    assert late.ftrl.steps_per_tree == []  # the tree was never stepped


def test_dp_ftrl_mf_charges_one_gaussian_per_run_and_a_budget_stops_the_next(tmp_path):
    """``ftrl-estimator = mf``: a 6-round run in epochs of 2 is one factorization, one ledger
    row (a GaussianDpEvent(z)) charged at its first release whatever its epochs; a second
    run adds one; a budget between ε of 2 and 3 Gaussians refuses the third run before its
    first round."""
    folder = tmp_path / "server"
    relation = dp_accounting.NeighboringRelation.REPLACE_SPECIAL

    def gaussians(k: int) -> float:
        event = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(1.5)] * k)
        pld = dp_accounting.pld.PLDAccountant(neighboring_relation=relation).compose(event)
        rdp = dp_accounting.rdp.RdpAccountant(neighboring_relation=relation).compose(event)
        return min(pld.get_epsilon(1e-5), rdp.get_epsilon(1e-5))

    budget = (gaussians(2) + gaussians(3)) / 2
    for run in range(3):
        wrapper = DPFTRL(FedAvg(), noise_multiplier=1.5, clipping_norm=1.0,
                         num_sampled_clients=2, restart_rounds=2, seed=5, num_rounds=6,
                         rng=np.random.default_rng(run), estimator="mf")  # fmt: skip
        wrapper.server_ledger = open_server_ledger(folder, SPECIAL, 1e-5, budget)
        if run == 2:
            reason = wrapper.budget_stop(1)
            assert reason and "server-max-epsilon" in reason and _rows(folder) == 2
            break
        assert wrapper.budget_stop(1) is None
        run_rounds(wrapper, 6, NODES)
        assert wrapper.ftrl.steps_per_tree == [6] and _rows(folder) == run + 1
        got = wrapper.server_ledger.figures()
        assert got["lifetime_epsilon"] == pytest.approx(gaussians(run + 1), rel=1e-9)
        assert got["this_run_epsilon"] == pytest.approx(
            wrapper.round_metrics()["dp-epsilon"], rel=1e-9
        )


RATES_1 = {0: 0.3, 1: 0.7, 2: 1.0}
RATES_2 = {0: 0.5, 1: 0.2, 2: 0.9}


def _budgets(folder, rates, z: float, delta: float, budget=None) -> ClientBudgetsDP:
    wrapper = ClientBudgetsDP(FedAvg(), rates=rates, delta=delta, noise_multiplier=z,
                              clipping_norm=1.0, rng=np.random.default_rng(0))  # fmt: skip
    wrapper.server_ledger = open_per_client_ledger(folder, delta, budget)
    return wrapper


def _release(wrapper: ClientBudgetsDP, server_round: int) -> bool:
    """The wrapper's own decision points of a round: its budget check, then at release."""
    if wrapper.budget_stop(server_round):
        return False
    stdv, _ = wrapper.mechanism.noise_stdv([], [])
    return not wrapper.withhold(server_round, stdv, 1, None)


def _client_events(q: float, z: float, k: int) -> list[tuple]:
    """[(client i's event of one release, k)]."""
    base = dp_accounting.GaussianDpEvent(z)
    return [(base if q >= 1 else dp_accounting.PoissonSampledDpEvent(q, base), k)]


def _independent(events: list[tuple], delta: float) -> float:
    """min(RDP, PLD) of dp_accounting's own accountants (add/remove-one) of (event, count)
    pairs; PLD at a 1e-3 discretization (its default 1e-4 takes seconds a client here)."""
    rdp = dp_accounting.rdp.RdpAccountant()
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    for event, count in events:
        rdp.compose(event, count)
        pld.compose(event, count)
    return min(rdp.get_epsilon(delta), pld.get_epsilon(delta))


def test_client_budgets_lifetime_epsilon_per_client_over_runs_with_other_rates_and_z(tmp_path):
    """Run 1: q = (0.3, 0.7, 1), z = 1, 2 releases, δ 1e-5; run 2: q = (0.5, 0.2, 0.9),
    z = 1.5, 3 releases, δ 1e-6. Each client's lifetime ε is dp_accounting's composition of
    its own 5 events; the server's headline is the largest client's; this run's per client
    is the mode's own accountant's (its PLD, 1e-3 pessimistic discretization: within 2 %)."""
    folder = tmp_path / "server"
    first = _budgets(folder, RATES_1, 1.0, 1e-5)
    assert [_release(first, r) for r in (1, 2)] == [True, True]
    second = _budgets(folder, RATES_2, 1.5, 1e-6)
    assert [_release(second, r) for r in (1, 2, 3)] == [True, True, True]
    got = second.server_ledger.figures()
    assert _rows(folder) == 3 * 5 and (got["earlier_releases"], got["this_run_releases"]) == (2, 3)
    lifetime = {}
    for c in RATES_1:
        events = _client_events(RATES_1[c], 1.0, 2) + _client_events(RATES_2[c], 1.5, 3)
        lifetime[c] = _independent(events, 1e-6)
        mine = got["per_client"][str(c)]
        assert mine["lifetime_epsilon"] == pytest.approx(lifetime[c], rel=1e-3)
        own = client_epsilon(RATES_2[c], 1.5, 3, 1e-6)
        assert mine["this_run_epsilon"] == pytest.approx(own, rel=2e-2)
        assert mine["lifetime_epsilon"] > mine["this_run_epsilon"]
    assert got["lifetime_epsilon"] == max(p["lifetime_epsilon"] for p in got["per_client"].values())
    assert got["lifetime_epsilon"] == pytest.approx(max(lifetime.values()), rel=1e-3)


def test_a_server_budget_stops_client_budgets_at_the_release_that_would_pass_it(tmp_path):
    """q = (0.3, 0.7, 1), z = 1: a budget between client 2's (q = 1) ε after 3 and 4 releases.
    The first run's 2 and the second run's 1st pass; its 2nd is refused before the round,
    naming the client; at release a late wrapper declines it too and charges nothing."""
    folder = tmp_path / "server"
    three, four = (_independent(_client_events(1.0, 1.0, k), 1e-5) for k in (3, 4))
    budget = (three + four) / 2
    first = _budgets(folder, RATES_1, 1.0, 1e-5, budget)
    assert [_release(first, r) for r in (1, 2)] == [True, True]
    second = _budgets(folder, RATES_1, 1.0, 1e-5, budget)
    assert _release(second, 1) and not _release(second, 2)
    assert "would be exceeded at round 2 (client 2's lifetime epsilon" in second.budget_stopped
    assert _rows(folder) == 3 * 3
    late = _budgets(folder, RATES_1, 1.0, 1e-5, budget)
    stdv, _ = late.mechanism.noise_stdv([], [])
    assert late.withhold(1, stdv, 1, None) and late.round_metrics()["dp-skipped"]
    assert _rows(folder) == 3 * 3 and _rows(folder, "declines") == 1  # the plan writes none
    assert second.server_ledger.figures()["lifetime_epsilon"] <= budget


def test_one_kind_of_server_ledger_per_folder(tmp_path):
    """Rows charged to every client alike and rows charged per client have no single
    composition: each kind refuses a folder holding the other (one line, before training)."""
    uniform, per_client = tmp_path / "a", tmp_path / "b"
    open_server_ledger(uniform, NeighborRel.ADD_OR_REMOVE_ONE, 1e-5, None).charge(
        dp_accounting.GaussianDpEvent(1.0), 1
    )
    with pytest.raises(ServerLedgerError, match="another privacy mode .charged to every client"):
        open_per_client_ledger(uniform, 1e-5, None)
    charged = open_per_client_ledger(per_client, 1e-5, None)
    charged.charge({0: dp_accounting.GaussianDpEvent(1.0)}, 1)
    with pytest.raises(ServerLedgerError, match="charged to each client at its own rate"):
        open_server_ledger(per_client, NeighborRel.ADD_OR_REMOVE_ONE, 1e-5, None)
    with pytest.raises(ServerLedgerError, match="ADD_OR_REMOVE_ONE adjacency; this run accounts"):
        open_server_ledger(per_client, SPECIAL, 1e-5, None)
    with pytest.raises(ServerLedgerError, match="server-max-epsilon = 2 needs a server ledger"):
        open_per_client_ledger(None, 1e-5, 2.0)


def test_server_max_epsilon_is_accepted_for_dp_ftrl_and_client_budgets_only_with_an_epsilon():
    base = {"scenario": "digits", "num-clients": 4, "strategy": "fedavg", "num-server-rounds": 2,
            "client-epsilon-groups": "5", "server-max-epsilon": 5.0}  # fmt: skip
    assert resolve_run_config({**base, "privacy": "dp-ftrl"})["server-max-epsilon"] == 5.0
    budgets = {**base, "privacy": "client-budgets", "clients-per-round": 0}
    assert resolve_run_config(budgets)["server-max-epsilon"] == 5.0
    with pytest.raises(ConfigError, match="server-max-epsilon.*dp-ftrl | client-budgets"):
        resolve_run_config({**base, "privacy": "metric-dp"})


TINY = {"scenario": "digits", "strategy": "fedavg", "num-clients": 4, "num-server-rounds": 2,
        "local-epochs": 1, "seed": 3, "reproducible-noise": True}  # fmt: skip
EXPERIMENTS = {
    "dp-ftrl": {**TINY, "privacy": "dp-ftrl", "clients-per-round": 2},
    "client-budgets": {**TINY, "privacy": "client-budgets", "clients-per-round": 0,
                       "noise-multiplier": 1.0, "clipping-norm": 1.0,
                       "client-epsilon-groups": "2,5"},
}  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "kind", "adjacency"),
    [("dp-ftrl", "ServerLedger", "REPLACE_SPECIAL"),
     ("client-budgets", "PerClientLedger", "ADD_OR_REMOVE_ONE")],
)  # fmt: skip
def test_each_modes_builder_attaches_its_ledger_and_budget(mode, kind, adjacency, tmp_path):
    """The feature's own builder (what the ServerApp calls): the ledger in server-state-dir,
    its budget, and its relation; without a folder, none (and a budget is refused)."""
    from fedpriv.scenarios.config.features import CATALOG
    from fedpriv.scenarios.config.specs import server_run

    config = {**EXPERIMENTS[mode], "output-dir": str(tmp_path / "out"), "server-max-epsilon": 9.0}
    build = CATALOG.wrapper(mode)

    def wrapper(run_config):
        cfg = CATALOG.resolve_run_config(run_config)
        return build(FedAvg(), server_run(cfg, CATALOG.kind(cfg)), np.random.default_rng(0))

    ledger = wrapper({**config, "server-state-dir": str(tmp_path / "server")}).server_ledger
    assert type(ledger).__name__ == kind and ledger.max_epsilon == 9.0
    assert ledger.relation == adjacency and ledger.folder == str(tmp_path / "server")
    assert wrapper({**config, "server-max-epsilon": 0.0}).server_ledger is None
    with pytest.raises(ServerLedgerError, match="server-max-epsilon = 9 needs a server ledger"):
        wrapper(config)


@pytest.mark.slow  # 2 in-process runs each (12 s and 29 s on the loaded 2-core machine)
@pytest.mark.parametrize("mode", sorted(EXPERIMENTS))
def test_a_second_run_on_the_servers_folder_reports_its_lifetime_beside_this_runs(mode, tmp_path):
    """The real engine and ClientApp in process, twice on one server-state-dir: the first
    run's ledger figure is the run's own ε (a fresh folder), the second's this-run ε is the
    first's (the same experiment) and its lifetime ε composes both (larger)."""
    from tests.test_adaptive_clip import run_in_process

    config = {**EXPERIMENTS[mode], "server-state-dir": str(tmp_path / "server")}
    _, first = run_in_process(config, tmp_path / "a", 4)
    _, second = run_in_process(config, tmp_path / "b", 4)
    a, b = first.summary["server_ledger"], second.summary["server_ledger"]
    assert a["earlier_releases"] == 0 and a["this_run_releases"] > 0
    assert a["lifetime_epsilon"] == a["this_run_epsilon"]
    headline = first.summary["privacy_figures"]["epsilon"]
    # dp-ftrl: the same RDP composition; client-budgets: the mode's PLD at 1e-3 (pessimistic)
    assert a["this_run_epsilon"] == pytest.approx(headline, rel=1e-9 if mode == "dp-ftrl" else 2e-2)
    assert second.summary["privacy_figures"]["epsilon"] == headline
    assert (b["earlier_releases"], b["this_run_releases"]) == (a["this_run_releases"],) * 2
    assert b["this_run_epsilon"] == pytest.approx(a["this_run_epsilon"], rel=1e-12)
    assert b["lifetime_epsilon"] > b["this_run_epsilon"] > 0
