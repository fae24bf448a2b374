"""The server's own release ledger (fedpriv.privacy.ledger.server, issue "node state"): its
lifetime ε against an independent dp_accounting composition of events with different z,
sampling and δ, this run's ε beside the lifetime one, the lifetime ``server-max-epsilon``
deciding through the real global-DP wrapper (before a round and at release), one relation
per ledger, and the server's state folder checked as a node's (another user's, a link)."""

from __future__ import annotations

import os
import sqlite3

import dp_accounting
import numpy as np
import pytest
from flwr.serverapp.strategy import FedAvg

from fedpriv.privacy.accounting import NeighborRel
from fedpriv.privacy.accounting.events import client_round_event
from fedpriv.privacy.accounting.rounds import GaussianRoundsAccountant
from fedpriv.privacy.ledger.lifetime import ledger_marks, party_figures
from fedpriv.privacy.ledger.server import (
    PER_RUN,
    SERVER_STATE_ENV,
    ServerLedger,
    ServerLedgerError,
    open_server_ledger,
    server_state_dir,
)
from fedpriv.privacy.ledger.store import DB_NAME
from tests.test_ledger_store import NOBODY, _as_nobody, _precreate, needs_root, shared_tmp

__all__ = ["shared_tmp"]  # the fixture, imported for the tests below

ADD_REMOVE = NeighborRel.ADD_OR_REMOVE_ONE.name


def _independent(events: list, delta: float) -> float:
    """min(RDP, PLD) of dp_accounting's own accountants (the headline: the smaller bound)."""
    composed = dp_accounting.ComposedDpEvent(list(events))
    rdp = dp_accounting.rdp.RdpAccountant().compose(composed).get_epsilon(delta)
    pld = dp_accounting.pld.PLDAccountant().compose(composed).get_epsilon(delta)
    return min(rdp, pld)


def _poisson(z: float, sampled: int, population: int):
    return client_round_event(z, sampled=sampled, population=population, sampling="poisson")


def test_lifetime_epsilon_composes_every_stored_event_whatever_its_run_settings(tmp_path):
    """Three runs with different z, sample sizes and δ: the lifetime ε at each run's δ is
    dp_accounting's composition of exactly the stored events; this run's ε is its own."""
    runs = [
        (1e-5, [(1.5, 10, 100)] * 3),
        (1e-6, [(2.0, 20, 100), (2.0, 20, 100)]),
        (1e-4, [(1.2, 5, 50)] * 2 + [(3.0, 50, 50)]),
    ]
    stored: list = []
    for delta, rounds in runs:
        ledger = open_server_ledger(tmp_path / "server", NeighborRel.ADD_OR_REMOVE_ONE, delta, None)
        mine = [_poisson(*r) for r in rounds]
        for i, event in enumerate(mine, start=1):
            assert ledger.charge(event, i) is None
        stored += mine
        got = ledger.figures()
        # PLD's discretisation interval differs from the default one here: 1e-4 relative
        assert got["lifetime_epsilon"] == pytest.approx(_independent(stored, delta), rel=1e-4)
        assert got["this_run_epsilon"] == pytest.approx(_independent(mine, delta), rel=1e-4)
        assert got["this_run_releases"] == len(mine)
        assert got["earlier_releases"] == len(stored) - len(mine)
    assert got["lifetime_epsilon"] > got["this_run_epsilon"] > 0


def test_this_run_epsilon_of_a_fresh_ledger_is_the_run_accountants(tmp_path):
    """Replace-one (fixed sampling): the ledger's composition of the rounds it charged is
    the figure the wrapper's accountant reports for the same rounds."""
    accountant = GaussianRoundsAccountant(sampled=4, population=10, delta=1e-5)
    ledger = open_server_ledger(tmp_path, NeighborRel.REPLACE_ONE, 1e-5, None)
    for r, z in enumerate([1.0, 1.3, 0.9], start=1):
        ledger.charge(accountant.event(z), r)
        accountant.step(z)
    got = ledger.figures()
    assert got["adjacency"] == "REPLACE_ONE" and got["earlier_releases"] == 0
    assert got["this_run_epsilon"] == pytest.approx(accountant.report().epsilon, rel=1e-9)
    assert got["lifetime_epsilon"] == got["this_run_epsilon"]


def _wrapper(folder, max_epsilon):
    from fedpriv.strategies.dp_wrappers import ServerSideFixedClippingDP

    accountant = GaussianRoundsAccountant(sampled=4, population=4, delta=1e-5)
    wrapper = ServerSideFixedClippingDP(
        FedAvg(), noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=4,
        accountant=accountant, rng=np.random.default_rng(0),
    )  # fmt: skip
    wrapper.server_ledger = open_server_ledger(folder, NeighborRel.REPLACE_ONE, 1e-5, max_epsilon)
    return wrapper


def _release(wrapper, server_round: int) -> bool:
    """The wrapper's own steps of a round: its budget check, then its release decision."""
    if wrapper.budget_stop(server_round):
        return False
    stdv, _ = wrapper.mechanism.noise_stdv([], [])
    return not wrapper.withhold(server_round, stdv, 4, None)


def _rows(folder) -> int:
    with sqlite3.connect(folder / DB_NAME) as db:
        return int(db.execute("SELECT count(*) FROM releases").fetchone()[0])


def test_a_server_budget_stops_the_second_run_at_the_round_that_would_pass_it(tmp_path):
    """z = 1, all 4 of 4 clients (replace-one): lifetime ε after 2, 3, 4, 5 rounds is
    15.46, 20.13, 24.38, 28.37. A budget of 25: the first run's 2 rounds pass, the second
    run's rounds 1 and 2 pass, its round 3 (the 5th release) is refused before it runs."""
    folder = tmp_path / "server"
    first = _wrapper(folder, 25.0)
    assert [_release(first, r) for r in (1, 2)] == [True, True]
    second = _wrapper(folder, 25.0)
    assert [_release(second, r) for r in (1, 2)] == [True, True]
    reason = second.budget_stop(3)
    assert reason and "server-max-epsilon 25 would be exceeded at round 3" in reason
    assert second.budget_stopped == reason and _rows(folder) == 4
    figures = second.server_ledger.figures()
    assert figures["earlier_releases"] == 2 and figures["this_run_releases"] == 2
    assert 24.0 < figures["lifetime_epsilon"] <= 25.0
    assert figures["this_run_epsilon"] == pytest.approx(
        first.server_ledger.figures()["this_run_epsilon"], rel=1e-12
    )


def test_a_release_past_the_server_budget_is_withheld_and_not_charged(tmp_path):
    """The check at release (after the replies arrived) declines and charges nothing, even
    when no check ran before the round."""
    folder = tmp_path / "server"
    for r in (1, 2, 3, 4):
        assert _release(_wrapper(folder, None), r)
    late = _wrapper(folder, 25.0)
    stdv, _ = late.mechanism.noise_stdv([], [])
    assert late.withhold(1, stdv, 4, None)
    assert "server-max-epsilon 25" in late.budget_stopped and _rows(folder) == 4
    with sqlite3.connect(folder / DB_NAME) as db:
        assert db.execute("SELECT count(*) FROM declines").fetchone()[0] == 1


def test_a_ledger_refuses_a_run_under_another_neighbouring_relation(tmp_path):
    ledger = open_server_ledger(tmp_path, NeighborRel.REPLACE_ONE, 1e-5, None)
    ledger.charge(dp_accounting.GaussianDpEvent(1.0), 1)
    with pytest.raises(ServerLedgerError, match="REPLACE_ONE adjacency; this run accounts ADD"):
        open_server_ledger(tmp_path, NeighborRel.ADD_OR_REMOVE_ONE, 1e-5, None)


def test_where_the_server_keeps_its_ledger_and_a_budget_without_one(tmp_path):
    out = tmp_path / "out"
    assert server_state_dir("", out, {}) is None
    assert server_state_dir("", out, {SERVER_STATE_ENV: PER_RUN}) == out / "server-state"
    own = str(tmp_path / "mine")  # the run config's server-state-dir
    assert server_state_dir(own, out, {SERVER_STATE_ENV: PER_RUN}) == tmp_path / "mine"
    assert open_server_ledger(None, NeighborRel.REPLACE_ONE, 1e-5, None) is None
    with pytest.raises(ServerLedgerError, match="server-max-epsilon = 3 needs a server ledger"):
        open_server_ledger(None, NeighborRel.REPLACE_ONE, 1e-5, 3.0)
    with pytest.raises(ServerLedgerError, match="server-max-epsilon = -1"):
        ServerLedger(str(tmp_path), ADD_REMOVE, 1e-5, -1.0)


@needs_root
def test_a_server_state_dir_of_another_user_is_refused(shared_tmp):
    folder = shared_tmp / "server-state"
    assert _as_nobody(_precreate, str(folder)) == 0
    assert os.stat(folder).st_uid == NOBODY
    with pytest.raises(ServerLedgerError, match="server-state-dir.*owned by uid 65534|owned by"):
        open_server_ledger(folder, NeighborRel.REPLACE_ONE, 1e-5, None)
    assert not (folder / DB_NAME).exists()


def test_a_symlinked_server_state_dir_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(ServerLedgerError, match="is a symbolic link"):
        open_server_ledger(tmp_path / "link", NeighborRel.REPLACE_ONE, 1e-5, None)
    assert not (real / DB_NAME).exists()


def test_party_figures_split_each_nodes_rows_at_the_runs_start(tmp_path):
    """A node's lifetime ε over releases with different z and batch sizes is dp_accounting's
    composition of its events; this run's is the composition of the rows after the mark."""
    from fedpriv.privacy.dpsgd import dpsgd_event
    from fedpriv.privacy.releases import ReleaseCounter

    counter = ReleaseCounter(tmp_path / "node-abc", "dp-sgd", 3)
    before = [dpsgd_event(num_examples=200, batch_size=16, epochs=1, noise_multiplier=1.5)] * 2
    after = [dpsgd_event(num_examples=200, batch_size=32, epochs=2, noise_multiplier=2.0)]
    for i, event in enumerate(before, start=1):
        assert counter.begin("s", i, f"a{i}", event=event, rewind="charge").fresh
    marks = ledger_marks(tmp_path)
    assert counter.begin("s", 1, "b1", run="r2", event=after[0], rewind="charge").fresh
    got = party_figures(tmp_path, marks, 1e-5)["node-abc/dp-sgd/3"]
    assert (got["earlier_releases"], got["this_run_releases"]) == (2, 1)
    assert got["lifetime_epsilon"] == pytest.approx(_independent(before + after, 1e-5), rel=1e-4)
    assert got["this_run_epsilon"] == pytest.approx(_independent(after, 1e-5), rel=1e-4)


def test_the_console_gives_this_runs_epsilon_beside_the_lifetime_one_only_when_they_differ():
    from fedpriv.scenarios.cli.node_state import lifetime_lines

    server = {"this_run_epsilon": 15.456, "lifetime_epsilon": 24.3816, "this_run_releases": 2,
              "earlier_releases": 2, "delta": 1e-5}  # fmt: skip
    nodes = {
        "node-a/dp-sgd/0": {"this_run_epsilon": 1.5, "lifetime_epsilon": 2.25,
                            "earlier_releases": 3, "this_run_releases": 2, "delta": 1e-5},
        "node-b/dp-sgd/1": {"this_run_epsilon": 1.25, "lifetime_epsilon": "inf",
                            "earlier_releases": 1, "this_run_releases": 2, "delta": 1e-5},
        "node-c/ifca/0": {"earlier_releases": 4, "this_run_releases": 1},
    }  # fmt: skip
    lines = lifetime_lines({"parties": {"server": server, **nodes}})
    assert lines == [
        "fedpriv:   server   this run's ε 15.46 (2 releases), lifetime ε 24.38 (2 earlier "
        "releases) at δ 1e-05",
        "fedpriv:   nodes    this run's ε up to 1.5, lifetime ε up to inf (4 earlier releases "
        "over 2 nodes) at δ 1e-05",
    ]
    assert lifetime_lines({"persistent": False, "earlier_releases": 0}) == []
