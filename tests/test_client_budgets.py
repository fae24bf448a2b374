"""Per-client budgets (``privacy = client-budgets``; individualized DP-FedAvg), in process.

* each budget's rate q_i is the largest whose ε after the run meets it (dp_accounting);
* a run with budgets 1, 3 and 10: every client's final ε is within its own budget by an
  independent accountant over the rounds it was exposed to, and summary.json and the console
  show the per-client ε and their distribution;
* a message that raises a client's sampling rate, changes its budget or goes past it is
  refused by the client.
"""

from __future__ import annotations

import copy
import json

import dp_accounting
import pytest
from flwr.app import ConfigRecord, Message

from fedpriv.privacy.client_budgets import client_epsilon, sampling_rate_for
from fedpriv.privacy.modes.client_budgets import RATE_KEY
from tests.test_modes_end_to_end import InProcessGrid

Z, ROUNDS, DELTA = 1.0, 4, 1e-5
BUDGETS = (1.0, 3.0, 10.0)


def independent_epsilon(q: float, rounds: int) -> float:
    """dp_accounting's PLD at its default (finer) discretization."""
    event = dp_accounting.GaussianDpEvent(Z)
    if q < 1:
        event = dp_accounting.PoissonSampledDpEvent(q, event)
    return dp_accounting.pld.PLDAccountant().compose(event, rounds).get_epsilon(DELTA)


@pytest.mark.parametrize("budget", BUDGETS)
def test_each_rate_is_the_largest_that_meets_its_budget(budget):
    q = sampling_rate_for(budget, Z, ROUNDS, DELTA)
    assert 0 < q <= 1
    assert independent_epsilon(q, ROUNDS) <= budget
    if q < 1:
        assert client_epsilon(min(1.0, q * 1.01), Z, ROUNDS, DELTA) > budget


class RecordingGrid(InProcessGrid):
    """Keeps the last train message each node received."""

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        self.last = getattr(self, "last", {})
        for msg in messages:
            if str(msg.metadata.message_type).startswith("train"):
                self.last[msg.metadata.dst_node_id] = msg
        return super().send_and_receive(messages, timeout=timeout)


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory):
    from fedpriv.scenarios.config.features import CATALOG

    out = tmp_path_factory.mktemp("budgets")
    run_config = {
        "scenario": "digits", "privacy": "client-budgets", "strategy": "fedavg",
        "num-clients": 6, "clients-per-round": 0, "num-server-rounds": ROUNDS,
        "local-epochs": 1, "noise-multiplier": Z, "clipping-norm": 1.0, "seed": 4,
        "client-epsilon-groups": ",".join(str(b) for b in BUDGETS), "output-dir": str(out),
    }  # fmt: skip
    cfg = CATALOG.resolve_run_config(run_config)
    grid = RecordingGrid(run_config, 6)
    from fedpriv.scenarios.config.specs import server_run

    CATALOG.runners[CATALOG.kind(cfg)](grid, server_run(cfg, CATALOG.kind(cfg)), CATALOG)
    return grid, json.loads((out / "summary.json").read_text())


def test_every_clients_final_epsilon_is_within_its_budget(budget_run):
    from fedpriv.reporting.console import privacy_statement

    _, summary = budget_run
    block = summary["privacy"]
    assert block["mode"] == "client-budgets" and block["noised_rounds"] == ROUNDS
    assert block["within_budgets"] is True
    for partition, client in block["epsilon_per_client"].items():
        budget = BUDGETS[int(partition) % 3]
        q = sampling_rate_for(budget, Z, ROUNDS, DELTA)
        assert client["budget"] == budget and client["sampling_rate"] == pytest.approx(q)
        # every round exposes every client (Poisson): its ε over the ROUNDS rounds run
        assert client["epsilon"] == pytest.approx(independent_epsilon(q, ROUNDS), rel=0.01)
        assert independent_epsilon(q, ROUNDS) <= budget
    distribution = block["epsilon_distribution"]
    assert sorted(float(b) for b in distribution) == list(BUDGETS)
    assert all(d["clients"] == 2 and d["max"] <= float(b) for b, d in distribution.items())
    text = privacy_statement(summary)
    assert text.startswith("client-budgets: (ε = ") and "budget 1.0: ε" in text


def _resend(grid, node: int, **changes):
    """A train message the server sent (the last one recorded), with ``changes`` in its
    config, sent to ``node`` and answered by it."""
    sent = grid.last[max(grid.last)]
    content = copy.deepcopy(sent.content)
    content["config"] = ConfigRecord({**dict(content["config"]), **changes})
    msg = Message(content=content, dst_node_id=node, message_type=sent.metadata.message_type)
    return grid.send_and_receive([msg])[0]


def test_a_message_raising_a_rate_or_a_budget_or_passing_it_is_refused(budget_run):
    grid, _ = budget_run
    node = next(n for n, p in grid.nodes.items() if p % 3 == 0)  # budget 1
    own = sampling_rate_for(1.0, Z, ROUNDS, DELTA)
    reply = _resend(grid, node, **{RATE_KEY: min(1.0, own * 2)})
    assert reply.has_error() and f"{RATE_KEY} = " in reply.error.reason
    assert "\n" not in reply.error.reason
    reply = _resend(grid, node, **{"client-epsilon-groups": "10,10,10", RATE_KEY: own})
    assert reply.has_error() and "client-epsilon-groups" in reply.error.reason
    reply = _resend(grid, node, **{"server-round": 60, RATE_KEY: own})
    assert reply.has_error() and "would pass this client's budget 1" in reply.error.reason


def test_the_rate_key_is_one_a_server_may_send():
    """In a real simulation the node checks every key a message sets against the allow-list:
    the per-message rate must be on it (the node bounds it by its own q_i instead), while the
    budget and the rounds stay the node's own."""
    from fedpriv.privacy.modes import client_budgets as budgets_mode
    from fedpriv.privacy.modes import global_dp
    from fedpriv.privacy.ownership import privacy_keys, server_keys

    allowed = server_keys(budgets_mode.MODE.name)
    assert RATE_KEY in allowed
    assert RATE_KEY not in server_keys(global_dp.MODE.name)  # the mode's own message key
    assert not {"client-epsilon", "client-epsilon-groups", "num-server-rounds"} & allowed
    assert {"client-epsilon-groups", "num-server-rounds"} <= set(
        privacy_keys(budgets_mode.MODE.name, reproducible=False)
    )


def _perturbed(grid, node: int, run: int, server_round: int, rate: float):
    """The node's last train message as a server of run ``run`` would send it for
    ``server_round`` (other arrays in each run: a new request, not a replay)."""
    import numpy as np
    from flwr.app import Array, ArrayRecord

    sent = grid.last[max(grid.last)]
    content = copy.deepcopy(sent.content)
    arrays = content["arrays"]
    content["arrays"] = ArrayRecord(
        {k: Array(np.asarray(a.numpy()) + 1e-3 * run) for k, a in arrays.items()}
    )
    content["config"] = ConfigRecord(
        {**dict(content["config"]), "server-round": server_round, RATE_KEY: rate}
    )
    msg = Message(content=content, dst_node_id=node, message_type=sent.metadata.message_type)
    return grid.send_and_receive([msg])[0]


def test_a_server_asking_every_round_in_every_run_gets_at_most_the_participation_bound(
    budget_run,
):
    """A dishonest server asks the budget-1 client every round of 3 runs (12 requests). The
    client counts its participations in its lifetime ledger and stops at k*, the bound that
    honest Poisson sampling at its rate passes with probability <= 1e-9; the ε it reports is
    the worst case of those k* releases."""
    from scipy.stats import binom

    from fedpriv.privacy.client_budgets import HONEST_TAIL, participation_bound

    grid, _ = budget_run
    node = next(n for n, p in grid.nodes.items() if p % 3 == 0)  # budget 1
    own = sampling_rate_for(1.0, Z, ROUNDS, DELTA)
    bound = participation_bound(own, ROUNDS)
    assert binom.sf(bound, ROUNDS, own) <= HONEST_TAIL < binom.sf(bound - 1, ROUNDS, own)
    replies = [
        _perturbed(grid, node, run, r, own) for run in (1, 2, 3) for r in range(1, ROUNDS + 1)
    ]
    answered = [r for r in replies if not r.has_error()]
    refused = [r.error.reason for r in replies if r.has_error()]
    assert len(answered) <= bound < len(replies)  # 12 asked, at most k* answered, ever
    assert refused and all("\n" not in why for why in refused)
    assert all("participation bound" in why or "would pass this client's budget" in why
               for why in refused), refused  # fmt: skip


def test_the_participation_bound_is_the_honest_binomial_tail():
    """The reviewer's client (budget 1, q = 0.0287, 8 rounds) trained 8 of 8 rounds in each
    of 3 runs: now it answers at most k* = 6 requests in its lifetime, a count honest
    sampling exceeds with probability ~1e-10."""
    from scipy.stats import binom

    from fedpriv.privacy.client_budgets import participation_bound, worst_case_epsilon

    q, rounds = 0.0287, 8
    k = participation_bound(q, rounds)
    assert k == 6 and binom.sf(k, rounds, q) <= 1e-9 < binom.sf(k - 1, rounds, q)
    assert participation_bound(q, rounds, beta=1e-3) == 3
    assert participation_bound(0.0, rounds) == 0 and participation_bound(1.0, rounds) == rounds
    event = dp_accounting.GaussianDpEvent(2.0)
    expected = dp_accounting.pld.PLDAccountant().compose(event, k).get_epsilon(DELTA)
    assert worst_case_epsilon(k, 2.0, DELTA) == pytest.approx(expected, rel=1e-2)


@pytest.mark.parametrize("rate", [float("nan"), -0.1, "x"])
def test_a_nan_negative_or_garbled_announced_rate_is_refused(budget_run, rate):
    grid, _ = budget_run
    node = next(n for n, p in grid.nodes.items() if p % 3 == 2)  # budget 10
    reply = _resend(grid, node, **{RATE_KEY: rate})
    assert reply.has_error() and f"{RATE_KEY} = " in reply.error.reason


def test_a_deployed_nodes_own_client_epsilon_comes_from_its_node_config_never_a_message():
    """The app's pyproject.toml leaves ``client-epsilon`` at "auto": the server (which resolves
    it to 0, the group's budget) does not send it, so a SuperNode whose node config sets its
    own budget accepts the server's messages and trains at its own budget and rate; a message
    that carries another budget changes nothing (refused, naming the key). In a simulation the
    scenario's value reaches every simulated node through its node config."""
    from fedpriv.scenarios.app import wire_config
    from fedpriv.scenarios.cli.simulated_nodes import node_settings
    from fedpriv.scenarios.config.features import CATALOG
    from fedpriv.scenarios.config.node_spec import node_spec

    run_config = {key: "auto" for key in CATALOG.keys} | {
        "privacy": "client-budgets", "num-clients": 3, "clients-per-round": 0,
        "client-epsilon-groups": "1,3,10", "num-server-rounds": ROUNDS,
    }  # fmt: skip
    server = CATALOG.resolve_run_config(run_config)
    assert server["client-epsilon"] == 0.0  # the server's guess: every node its group's
    wire_config.set_base(run_config)
    try:
        wired = wire_config.wire_config(server)
    finally:
        wire_config.set_base({})
    assert "client-epsilon" not in wired
    # what the node reads: its own run_config (client-epsilon "auto") + the keys sent
    sent = {**wire_config.client_config(wired, run_config), "client-task": "client-budgets"}
    own = node_spec(11, run_config, {"partition-id": 0, "client-epsilon": 5.0})
    cfg, why = own.accept(sent, "train")
    assert why == "" and cfg["client-epsilon"] == 5.0  # its node config's, not the group's 1
    group = node_spec(11, run_config, {"partition-id": 0})
    assert group.accept(sent, "train")[0]["client-epsilon"] == 0.0  # auto: its group's
    for value in (0.0, 50.0):  # the old server's resolved 0, a curious server's looser budget
        cfg, why = own.accept({**sent, "client-epsilon": value}, "train")
        assert cfg is None and "key=client-epsilon " in why and "5.0" in why, why
    assert own.accept({**sent, "client-epsilon": 5.0}, "train")[0]["client-epsilon"] == 5.0
    simulated = node_settings(CATALOG.resolve_run_config({**run_config, "client-epsilon": 2.0}))
    assert simulated["client-epsilon"] == 2.0
