"""A NEW privacy mode, defined entirely in this module, runs end to end.

The mode (``fixed-sigma-test``: the server clips each update to C, averages the m sampled
clients and adds N(0, σ²) with σ = z·C/m; a trusted server) is declared here: typed
parameters, threat model, the ε it reports against each party, disclosure, its planning
function and its report fields; :func:`fedpriv.privacy.modes.register` checks it. Its Flower side
is a wrapper builder and a summary block declared here too (one :class:`Feature`). Nothing else in
the code base names it. Then: plan (``fedpriv epsilon``'s function), a real run (the engine's
``train_run`` on digits, 3 clients, 2 rounds, every message answered by the real ClientApp
handlers in process: each node resolves its own spec), the run's ε against an independent
accountant, and the console's report of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest
from fedpriv.scenarios.config.specs import ServerRun, run_spec, server_run
from flwr.app import Context, MessageType, RecordDict

from fedpriv.privacy.modes import Mode, ModeError, names, register
from fedpriv.privacy.modes.base import PUBLIC
from fedpriv.privacy.modes.registry import unregister
from fedpriv.reporting.records import PrivacyFigures
from fedpriv.spec import RunSpec, key

NAME = "fixed-sigma-test"


@dataclass(frozen=True)
class FixedSigmaParams:
    """z, C, δ of the server's Gaussian."""

    noise_multiplier: float = key("noise-multiplier")  # the global-DP keys: no new key
    clipping_norm: float = key("clipping-norm")
    delta: float = key("dp-delta")


def plan(spec: RunSpec, examples_per_client: int | None = None) -> dict:
    """ε of ``spec.rounds`` Gaussian rounds at multiplier z (uniform mean, fixed m)."""
    from fedpriv.privacy.accounting.rounds import global_dp_epsilon

    del examples_per_client
    params: FixedSigmaParams = spec.params
    report = global_dp_epsilon(
        [params.noise_multiplier] * spec.rounds, spec.participation, delta=params.delta
    )
    return {
        "mode": NAME, "epsilon": report["epsilon"], "delta": params.delta, "rounds": spec.rounds
    }  # fmt: skip


def epsilon_of_z(spec: RunSpec, examples_per_client: int | None = None):
    """ε(z): the plan of the spec with its noise multiplier replaced by z."""
    return lambda z: float(plan(MODE.with_noise(spec, z), examples_per_client)["epsilon"])


MODE = Mode(
    name=NAME,
    params=FixedSigmaParams,
    threat_model={
        "server": "trusted to clip, noise and keep its noise secret.",
        "observers": "see only noised releases: client-level (epsilon, delta)-DP.",
    },
    epsilon_against={"server": "none (trusted)", "observers": "client-level (epsilon, delta)"},
    plan=plan,
    disclosure={"train": PUBLIC, "evaluate": PUBLIC},
    noise_field="noise_multiplier",
    epsilon_of_z=epsilon_of_z,
    against="observers of the released models (a test mode)",
    audit=None,
)


def build_wrapper(strategy, run: ServerRun, rng):
    """The Flower side: server clipping + Gaussian, noise from OS entropy."""
    from fedpriv.strategies.dp_wrappers import ServerSideFixedClippingDP

    from fedpriv import seeds
    from fedpriv.privacy.accounting.rounds import global_dp_accountant

    del rng
    spec = run.spec  # built once, at the server's boundary
    params, part = spec.params, spec.participation
    return ServerSideFixedClippingDP(
        strategy,
        noise_multiplier=params.noise_multiplier,
        clipping_norm=params.clipping_norm,
        num_sampled_clients=part.noise_clients,
        rng=seeds.privacy_stream(int(spec.seed), "dp-noise", reproducible=False),
        accept_failures=False,
        weighting="uniform",
        accountant=global_dp_accountant(part, delta=params.delta),
    )


def summary_block(run: ServerRun, rounds: list[dict]) -> dict:
    """The mode's report fields: ε of the released rounds and the typed figures."""
    if run.spec.mode is not MODE:
        return {}
    noised = [r for r in rounds if r.get("round", 0) > 0 and r.get("dp-noised")]
    epsilon = float(noised[-1]["dp-epsilon"]) if noised else None
    params = run.spec.params
    figures = PrivacyFigures(
        mode=NAME,
        bound="replace-one; fixed m of N",
        noise_multiplier=params.noise_multiplier,
        epsilon=epsilon,
        delta=params.delta,
    )
    block = {"mode": NAME, "epsilon": epsilon, "released_rounds": len(noised)}
    return {MODE.summary_key: block, PrivacyFigures.KEY: figures.to_json()}


@pytest.fixture(scope="module")
def catalog():
    """The app's catalog plus this module's feature; the mode registered for this module."""
    from fedpriv.scenarios.app.privacy_modes import declare
    from fedpriv.scenarios.config.feature import Catalog, Feature
    from fedpriv.scenarios.config.features import FEATURES

    register(MODE)
    feature = Feature(
        name="fixed-sigma-test",
        description="a privacy mode defined in one test module",
        privacy_modes=(declare(MODE, build_wrapper),),
        summary=summary_block,
    )
    yield Catalog([*FEATURES, feature])
    unregister(NAME)


class InProcessGrid:
    """Every message answered by the real ClientApp handlers, in process: each node holds
    ``run_config`` as its ``context.run_config`` and resolves its own spec from it."""

    def __init__(self, run_config: dict, nodes: Mapping[int, int], run_id: int) -> None:
        self.run_config, self.nodes, self.run_id = dict(run_config), dict(nodes), run_id
        self.states = {n: RecordDict() for n in nodes}
        self.replies: list = []

    def get_node_ids(self) -> list[int]:
        return list(self.nodes)

    def send_and_receive(self, messages, timeout=None):
        from fedpriv.scenarios.app.client_app import evaluate, train

        out = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            ctx = Context(
                run_id=self.run_id,
                node_id=node,
                node_config={"partition-id": self.nodes[node]},
                state=self.states[node],
                run_config=self.run_config,
            )
            handler = train if msg.metadata.message_type == MessageType.TRAIN else evaluate
            reply = handler(msg, ctx)
            self.replies.append((msg.metadata.message_type, reply))
            out.append(reply)
        return out


def test_the_new_mode_is_registered_and_fails_closed_when_incomplete(catalog):
    import dataclasses

    assert NAME in names() and catalog.modes[NAME].mode is MODE
    assert catalog.keys["privacy"].coerce(NAME) == NAME
    with pytest.raises(ModeError, match="no disclosure policy"):
        register(dataclasses.replace(MODE, name="fixed-sigma-broken", disclosure=None))


def test_a_mode_defined_in_one_test_module_runs_end_to_end(catalog, tmp_path):
    """Plan, run, ε, report for the mode above; the ClientApp enforces its disclosure."""
    from fedpriv.clients.keras_client import federated_data
    from fedpriv.scenarios.app.engine import train_run
    from fedpriv.scenarios.nodes.federation import PartitionGrid

    from fedpriv.privacy.accounting.budget import REL_TOL
    from fedpriv.privacy.accounting.planning import headline_epsilon, privacy_plan
    from fedpriv.privacy.accounting.rounds import GaussianRoundsAccountant
    from fedpriv.privacy.accounting.target import noise_for_target
    from fedpriv.reporting.console import privacy_statement

    run_config = {
        "scenario": "digits", "privacy": NAME, "num-clients": 3, "clients-per-round": 3,
        "num-server-rounds": 2, "local-epochs": 1, "noise-multiplier": 1.0,
        "clipping-norm": 1.0, "seed": 5, "reproducible-noise": False,
        "unaccounted-metrics": False, "output-dir": str(tmp_path / "run"),
    }  # fmt: skip
    cfg = catalog.resolve_run_config(run_config)
    # plan (what `fedpriv epsilon` prints): the mode's own function, against an independent
    # accountant of 2 Gaussian rounds at z = 1 with all 3 of 3 clients
    spec = run_spec(cfg)
    assert spec.mode is MODE and spec.params == FixedSigmaParams(1.0, 1.0, float(cfg["dp-delta"]))
    planned = privacy_plan(spec)

    def independent_epsilon(z: float) -> float:
        independent = GaussianRoundsAccountant(
            sampled=3, population=3, delta=float(cfg["dp-delta"]), sampling="fixed"
        )
        for _ in range(2):
            independent.step(z)
        return float(independent.report().epsilon)

    expected = independent_epsilon(1.0)
    assert planned["mode"] == NAME
    assert headline_epsilon(spec) == pytest.approx(expected, rel=1e-9)
    # target ε (`fedpriv epsilon --target-epsilon`): the smallest z with ε(z) <= 2 x expected
    target = noise_for_target(spec, 2 * expected)
    assert target["key"] == "noise-multiplier" and target["mode"] == NAME
    assert independent_epsilon(target["noise_multiplier"]) <= 2 * expected
    assert independent_epsilon(target["noise_multiplier"] * (1 - REL_TOL)) > 2 * expected
    # run: the engine with this catalog; every node answers through the real ClientApp
    nodes = {100 + p: p for p in range(3)}
    grid = InProcessGrid(run_config, nodes, run_id=926_007)
    run = server_run(cfg, catalog.kind(cfg))
    outcome = train_run(PartitionGrid(grid, nodes), run, federated_data(spec.data), catalog)
    trained = [r for r in outcome.rounds if r.get("round", 0) > 0]
    assert [r["round"] for r in trained] == [1, 2]
    assert all(r.get("dp-noised") for r in trained)
    # the ClientApp filtered every reply by the mode's disclosure (train-loss never left)
    assert grid.replies and not any(reply.has_error() for _, reply in grid.replies)
    for kind, reply in grid.replies:
        sent = set(reply.content["metrics"].keys())
        allowed = MODE.disclosure["train" if kind == MessageType.TRAIN else "evaluate"]
        assert sent <= allowed, (kind, sent)
    # ε: the run's charge equals the plan and the independent count of its releases
    assert float(trained[-1]["dp-epsilon"]) == pytest.approx(expected, rel=1e-9)
    block = outcome.summary[MODE.summary_key]
    assert block["mode"] == NAME and block["released_rounds"] == 2
    assert block["epsilon"] == pytest.approx(expected, rel=1e-9)
    # report: the console's statement names the mode, its ε and whom it holds against
    text = privacy_statement(outcome.summary)
    assert text.startswith(f"{NAME}: (ε = ") and MODE.against in text
