"""``privacy = distributed-dp`` wired into Flower: the engine, the real ClientApp handlers in
process, the server's view, a dropped client, ε from the core accountant, bad keys."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
from fedpriv.scenarios.config.features import CATALOG
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import run_spec, server_run
from flwr.app import Context, Error, Message, MessageType, RecordDict

from fedpriv.privacy.distributed import accounting as acc
from fedpriv.privacy.modes import distributed_dp

RUN = {
    "scenario": "digits", "privacy": "distributed-dp", "num-clients": 4,
    "clients-per-round": 4, "num-server-rounds": 2, "local-epochs": 1, "seed": 3,
    "noise-multiplier": 0.05, "clipping-norm": 1.0, "model": "digits-mlp",
}  # fmt: skip


class InProcessGrid:
    """Every message answered by the real ClientApp handlers in process; ``fail`` names
    (round, step, partition) triples whose handler answers an error (a client that drops)."""

    def __init__(self, run_config: dict, nodes: Mapping[int, int], run_id: int, fail=()) -> None:
        self.run_config, self.nodes, self.run_id = dict(run_config), dict(nodes), run_id
        self.states = {n: RecordDict() for n in nodes}
        self.fail = set(fail)
        self.sent: list[Message] = []
        self.replies: list[Message] = []

    def get_node_ids(self) -> list[int]:
        return list(self.nodes)

    def send_and_receive(self, messages, timeout=None):
        from fedpriv.scenarios.app.client_app import evaluate, train

        out = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            ctx = Context(
                run_id=self.run_id, node_id=node, node_config={"partition-id": self.nodes[node]},
                state=self.states[node], run_config=self.run_config,
            )  # fmt: skip
            config = msg.content["config"]
            step = (int(config.get("server-round", 0)), str(config.get("secagg-step", "")))
            self.sent.append(msg)
            if (*step, self.nodes[node]) in self.fail:
                reply = Message(Error(code=1, reason="dropped"), reply_to=msg)
            elif msg.metadata.message_type == MessageType.TRAIN:
                reply = train(msg, ctx)
            else:
                reply = evaluate(msg, ctx)
            self.replies.append(reply)
            out.append(reply)
        return out


def _run(tmp_path, monkeypatch, fail=(), **overrides):
    from fedpriv.clients.keras_client import federated_data
    from fedpriv.scenarios.app.engine import RunHooks, train_run
    from fedpriv.scenarios.nodes.federation import PartitionGrid

    from tests.flower_reference import act_as_serverapp_task

    act_as_serverapp_task()
    monkeypatch.setenv("FEDPRIV_STATE_ROOT", str(tmp_path / "state"))
    run_config = {**RUN, "output-dir": str(tmp_path / "run"), **overrides}
    cfg = CATALOG.resolve_run_config(run_config)
    nodes = {100 + p: p for p in range(int(cfg["num-clients"]))}
    grid = InProcessGrid(run_config, nodes, run_id=4242, fail=fail)
    grid.state_root = tmp_path / "state"
    run = server_run(cfg, CATALOG.kind(cfg))
    chain = []

    def keep(end):
        chain.append(end.strategy)
        return {}

    data = federated_data(run.spec.data)
    outcome = train_run(
        PartitionGrid(grid, nodes), run, data, CATALOG, hooks=RunHooks(after_run=keep)
    )
    return cfg, grid, outcome, wrapper_in(chain[0])


def wrapper_in(strategy):
    from fedpriv.strategies.distributed_dp import DistributedDP

    current = strategy
    while current is not None and not isinstance(current, DistributedDP):
        current = getattr(current, "strategy", None)
    return current


@pytest.fixture(scope="module")
def monkeymodule():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def dropped_run(tmp_path_factory, monkeymodule):
    """One run in which partition 2 drops after the share step of round 2 (the server's
    view of each round written to ``audit/``)."""
    from fedpriv.strategies.distributed_dp import AUDIT_ENV

    root = tmp_path_factory.mktemp("ddp")
    monkeymodule.setenv(AUDIT_ENV, str(root / "audit"))
    return _run(
        root,
        monkeymodule,
        fail={(2, "masked", 2)},
        **{"accept-failures": True},
    )


def test_rounds_complete_and_a_dropped_client_is_recovered(dropped_run):
    cfg, grid, outcome, wrapper = dropped_run
    trained = [r for r in outcome.rounds if r.get("round", 0) > 0]
    assert [r["round"] for r in trained] == [1, 2]
    assert [r["distributed-survivors"] for r in trained] == [4, 3]
    assert trained[1]["distributed-dropped"] == [2] and not trained[1]["distributed-skipped"]
    assert trained[-1]["server"]["accuracy"] > 0.3  # a decoded mean, not noise or garbage
    # the three survivors revealed; the dropped client was asked for nothing after it failed
    reveals = [m for m in grid.sent if m.content["config"].get("secagg-step") == "reveal"]
    assert sorted(grid.nodes[m.metadata.dst_node_id] for m in reveals[-3:]) == [0, 1, 3]


def test_the_audit_file_is_the_servers_view_of_the_round(dropped_run):
    cfg, grid, outcome, wrapper = dropped_run
    audit = np.load(wrapper_audit_dir() / "round-2.npz")
    cohort = audit["cohort"].tolist()
    assert [grid.nodes[n] for n in cohort] == [0, 1, 2, 3]  # node ids, 64-bit
    assert audit["dropped"].tolist() == [2] and audit["survivors"].tolist() == [0, 1, 3]
    assert audit["revealed"].tolist() == [0, 1, 3]
    masked = {int(k.split("-")[1]): audit[k] for k in audit.files if k.startswith("masked-")}
    assert sorted(masked) == [0, 1, 3]
    for i, vector in masked.items():
        assert np.array_equal(vector, wrapper.view["masked"][i])
    assert np.array_equal(audit["sum"], wrapper.view["sum"])
    assert audit["mean"].shape == (wrapper._resolved().encoding.dimension,)
    assert int(audit["bits"]) == wrapper._resolved().encoding.bits


def wrapper_audit_dir():
    import os
    from pathlib import Path

    from fedpriv.strategies.distributed_dp import AUDIT_ENV

    return Path(os.environ[AUDIT_ENV])


def test_the_server_sees_only_masked_vectors_and_the_sum(dropped_run):
    cfg, grid, outcome, wrapper = dropped_run
    view = wrapper.view
    resolved = distributed_dp.resolve(run_spec(cfg), wrapper._resolved().encoding.dimension)
    m = 1 << resolved.encoding.bits
    assert set(view) == {"round", "public_keys", "sealed_shares", "masked", "reveals", "sum"}
    # no reply to the server carries a model, a clip flag or a loss: masked vectors, keys,
    # sealed shares, reveals and the public weight 1 only
    for reply in grid.replies:
        if reply.has_error():
            continue
        for name, record in reply.content.items():
            if name == "arrays":
                assert list(record.keys()) == ["masked"]
            if name == "metrics":
                assert set(record.keys()) <= {"num-examples", "accuracy", "loss"}
    masked = np.stack(list(view["masked"].values())).astype(np.float64)
    # uniform on Z_m: mean m/2 and variance m²/12 within a few standard errors, and the
    # top bit of each coordinate a fair coin
    n = masked.size
    assert abs(masked.mean() - m / 2) < 5 * m / np.sqrt(12 * n)
    assert masked.var() == pytest.approx(m**2 / 12, rel=0.05)
    assert abs(np.mean(masked >= m / 2) - 0.5) < 5 * 0.5 / np.sqrt(n)
    # the sum is not: it decodes to a small mean update (its centred values are far from m/2)
    from fedpriv.privacy.distributed import quantize

    centred = quantize.centred(view["sum"], resolved.encoding.bits).astype(np.float64)
    assert centred.var() < m**2 / 12 / 10
    # the sealed shares are opaque: no share's plaintext (a JSON list) is readable
    from fedpriv.privacy.distributed.party import pair_from_bytes

    for blob in view["sealed_shares"].values():
        with pytest.raises(ValueError):  # not the share's JSON: UnicodeDecodeError/JSONDecodeError
            pair_from_bytes(blob[:-32])


def test_each_client_charges_its_own_ledger(dropped_run, tmp_path_factory):
    cfg, grid, outcome, wrapper = dropped_run
    files = [p for p in grid.state_root.rglob("*") if p.is_file()]
    secrets = [p for p in files if p.name.startswith("distributed-dp-secret-")]
    assert len(secrets) == 4 and all(p.stat().st_mode & 0o777 == 0o600 for p in secrets)
    from fedpriv.privacy.releases import read_ledger

    folders = {p.parent for p in files if p.name == "ledger.sqlite3"}
    charged = {
        p: read_ledger(folder, "distributed-dp", p).releases for folder in folders for p in range(4)
    }
    assert folders and sum(charged.values()) > 0, charged


def test_epsilon_is_the_core_accountants(dropped_run):
    cfg, grid, outcome, wrapper = dropped_run
    spec = run_spec(cfg)
    d = wrapper._resolved().encoding.dimension
    r = distributed_dp.resolve(spec, d)
    params = r.encoding
    assert r.threshold == 3 and r.noisy_clients == 3
    z = float(cfg["noise-multiplier"])
    assert params.noise_variance == pytest.approx((z * params.norm_bound) ** 2 / 3)
    expected = acc.skellam_epsilon(
        params.noise_variance, rounds=2, delta=float(cfg["dp-delta"]), noisy_clients=3,
        norm_bound=params.norm_bound, dimension=params.padded_dim, sampled=1, population=1,
    )  # fmt: skip
    block = outcome.summary["privacy"]
    assert block["mode"] == "distributed-dp"
    assert block["epsilon"] == pytest.approx(expected, rel=1e-12)
    assert outcome.summary["privacy_figures"]["epsilon"] == pytest.approx(expected, rel=1e-12)


def test_a_target_epsilon_is_met_with_the_core_planner():
    cfg = CATALOG.resolve_run_config({**RUN, "distributed-target-epsilon": 30.0})
    r = distributed_dp.resolve(run_spec(cfg), 10_000)
    assert r.epsilon <= 30.0
    smaller = r.encoding.noise_variance * 0.99**2
    again = acc.skellam_epsilon(
        smaller, rounds=2, delta=float(cfg["dp-delta"]), noisy_clients=3,
        norm_bound=r.encoding.norm_bound, dimension=r.encoding.padded_dim, sampled=1,
        population=1,
    )  # fmt: skip
    assert again > 30.0


BAD = [
    ("distributed-target-epsilon", -1.0),
    ("distributed-scale", 0.0),
    ("distributed-bits", 63),
    ("distributed-threshold", 2),  # not a majority of 4
    ("distributed-colluders", 3),  # >= t = 3
    ("distributed-relation", "bernoulli"),
    ("distributed-inclusion-rate", 0.0),
    ("distributed-drop-clients", "1,x"),
    ("strategy", "fedmedian"),
]


@pytest.mark.parametrize(("key", "value"), BAD)
def test_a_bad_value_is_refused_in_one_line_naming_it(key, value):
    with pytest.raises(ConfigError) as err:
        CATALOG.resolve_run_config({**RUN, key: value})
    text = str(err.value)
    assert "\n" not in text and key in text and "expected" in text


def test_colluders_stay_below_the_neighbourhood_threshold_on_a_sparse_graph():
    """A cohort of 100: k = 20, t_k = 14 of 21 holders; 13 colluders pass, 14 are refused
    (below t = 67, but 14 colluding neighbours could rebuild a client's secrets)."""
    big = {**RUN, "num-clients": 100, "clients-per-round": 100}
    CATALOG.resolve_run_config({**big, "distributed-colluders": 13})
    with pytest.raises(ConfigError, match="distributed-colluders.*t_k = 14") as err:
        CATALOG.resolve_run_config({**big, "distributed-colluders": 14})
    assert "\n" not in str(err.value)


def test_a_client_resolves_its_noise_without_the_accountant():
    """The client's masked step needs μ, b and t, not ε: ``epsilon = False`` gives the
    server's parameters with ε NaN and loads no dp_accounting (seconds of imports in every
    worker process); a target ε still plans μ with the accountant."""
    import math
    import subprocess
    import sys
    from dataclasses import replace

    spec = run_spec(CATALOG.resolve_run_config({**RUN, "noise-multiplier": 0.7}))
    client = distributed_dp.resolve(spec, 4810, epsilon=False)
    server = distributed_dp.resolve(spec, 4810)
    assert math.isnan(client.epsilon) and math.isfinite(server.epsilon)
    assert (
        replace(client, epsilon=server.epsilon, epsilon_observers=server.epsilon_observers)
        == server
    )
    target = run_spec(CATALOG.resolve_run_config({**RUN, "distributed-target-epsilon": 8.0}))
    assert distributed_dp.resolve(target, 4810, epsilon=False).epsilon <= 8.0
    code = (
        "import sys; from fedpriv.scenarios.config.features import CATALOG; "
        "from fedpriv.scenarios.config.specs import run_spec; "
        "from fedpriv.privacy.modes import distributed_dp as m; "
        f"m.resolve(run_spec(CATALOG.resolve_run_config({RUN!r})), 4810, epsilon=False); "
        "print('dp_accounting' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_poisson_needs_every_client_in_the_cohort():
    with pytest.raises(ConfigError, match="clients-per-round"):
        CATALOG.resolve_run_config(
            {
                **RUN,
                "clients-per-round": 2,
                "distributed-relation": "poisson",
                "distributed-inclusion-rate": 0.5,
            }  # fmt: skip
        )


def test_poisson_self_sampling_and_a_discarded_vector(tmp_path, monkeypatch):
    """``poisson``: every client in every cohort, its update on a secret coin (q = 0.5),
    decoded with rate q; ε amplified by q (the core's Poisson bound); a vector the server
    discards (``distributed-drop-clients``) is recovered as a dropout."""
    from fedpriv.privacy.accounting.rdp import epsilon_from_rdp

    overrides = {
        "clients-per-round": 0, "distributed-relation": "poisson",
        "distributed-inclusion-rate": 0.5, "distributed-drop-clients": "1",
        "accept-failures": True,
    }  # fmt: skip
    cfg, grid, outcome, wrapper = _run(tmp_path, monkeypatch, **overrides)
    trained = [r for r in outcome.rounds if r.get("round", 0) > 0]
    assert [r["distributed-survivors"] for r in trained] == [3, 3]
    assert all(r["distributed-dropped"] == [1] for r in trained)
    r = wrapper._resolved()
    e = r.encoding
    l1, l2 = acc.skellam_sensitivities(e.norm_bound, e.padded_dim, sampling="poisson")

    def curve(alphas):
        return acc.skellam_rdp(alphas, l1=l1, l2=l2, variance=r.noisy_clients * e.noise_variance)

    rdp = 2 * acc.poisson_subsampled_rdp(curve, 0.5)
    expected = epsilon_from_rdp(acc.ORDERS, rdp, float(cfg["dp-delta"]))
    assert outcome.summary["privacy"]["epsilon"] == pytest.approx(expected, rel=1e-12)
    unamplified = acc.skellam_epsilon(
        e.noise_variance, rounds=2, delta=float(cfg["dp-delta"]), noisy_clients=r.noisy_clients,
        norm_bound=e.norm_bound, dimension=e.padded_dim, sampled=1, population=1,
        sampling="poisson",
    )  # fmt: skip
    assert expected < unamplified


def test_too_few_bits_for_the_model_are_refused_in_one_line():
    """b is checked against the model and cohort when the run plans (``fedpriv epsilon``)
    and when the wrapper starts round 1, before any message."""
    cfg = CATALOG.resolve_run_config({**RUN, "distributed-bits": 4})
    with pytest.raises(ValueError) as err:
        distributed_dp.resolve(run_spec(cfg), 10_000)
    assert "\n" not in str(err.value) and "distributed-bits = 4 is not allowed" in str(err.value)


def test_a_client_answers_one_unmasking_request_per_round(dropped_run, monkeypatch):
    """A repeat of the same reveal gets the same answer; another survivor list for the same
    round is refused (the server could otherwise get both secrets of one client)."""
    from flwr.app import ConfigRecord

    cfg, grid, outcome, wrapper = dropped_run
    monkeypatch.setenv("FEDPRIV_STATE_ROOT", str(grid.state_root))  # the nodes' own folders
    last = [m for m in grid.sent if m.content["config"].get("secagg-step") == "reveal"][-1]
    node = last.metadata.dst_node_id

    def resend(record: ConfigRecord) -> Message:
        content = RecordDict({"config": last.content["config"], "secagg": record})
        grid_msg = Message(content, node, MessageType.TRAIN, group_id="2")
        return grid.send_and_receive([grid_msg])[0]

    same = resend(last.content["secagg"])
    assert not same.has_error()
    first = [r for r in grid.replies if not r.has_error() and "secagg" in r.content]
    answers = [
        bytes(r.content["secagg"]["reveal"]) for r in first if "reveal" in r.content["secagg"]
    ]
    assert bytes(same.content["secagg"]["reveal"]) in answers
    other = ConfigRecord({**dict(last.content["secagg"]), "survivors": [0, 1], "dropped": [2, 3]})
    refused = resend(other)
    assert refused.has_error() and "already released" in refused.error.reason
