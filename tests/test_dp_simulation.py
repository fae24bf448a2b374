"""DP wrappers in real Flower simulations (legacy API in-process; Message API via ``fedpriv run``).

Slow (each simulation pays Ray start-up): marked ``simulation``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tests.baseline import assert_matches_baseline
from tests.simulate import run_fedpriv, run_fedpriv_cells

pytestmark = pytest.mark.simulation


# --- (1) legacy API: ServerApp(server_fn=...) + NumPyClient, 2 rounds ----------------------------


def _legacy_apps(wrapper_cls, captured: dict):
    """A legacy ServerApp/ClientApp pair; the server side records into ``captured``.

    Everything the ClientApp needs is defined inside this function so that Ray ships it by
    value to its workers.
    """
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import Context, ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg

    def client_fn(context: Context):
        import numpy as np  # noqa: F811  (shipped by value to the Ray worker)

        pid = int(context.node_config["partition-id"])
        rng = np.random.default_rng(100 + pid)
        x = rng.normal(size=(64, 3))
        y = x @ np.array([1.0, -2.0, 0.5]) + 0.1 * pid

        class Client(NumPyClient):
            def fit(self, parameters, config):
                w, b = (np.array(p, dtype=np.float64) for p in parameters)
                for _ in range(20):
                    err = x @ w + b[0] - y
                    w = w - 0.1 * x.T @ err / len(y)
                    b = b - 0.1 * np.array([err.mean()])
                return [w.astype(np.float32), b.astype(np.float32)], len(y), {}

            def evaluate(self, parameters, config):
                w, b = parameters
                return float(np.mean((x @ w + b[0] - y) ** 2)), len(y), {}

        return Client().to_client()

    def evaluate_fn(server_round, parameters, config):
        captured.setdefault("params", []).append([np.array(p) for p in parameters])
        return None

    def server_fn(context: Context) -> ServerAppComponents:
        initial = [np.zeros(3, dtype=np.float32), np.zeros(1, dtype=np.float32)]
        inner = FedAvg(
            min_available_clients=3,
            min_fit_clients=3,
            fraction_evaluate=0.0,
            initial_parameters=ndarrays_to_parameters(initial),
            evaluate_fn=evaluate_fn,
        )
        strategy = wrapper_cls(
            inner, noise_multiplier=0.5, clipping_norm=1.0, num_sampled_clients=3,
            rng=np.random.default_rng(0),
        )  # fmt: skip
        captured["strategy"] = strategy
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=2))

    return ServerApp(server_fn=server_fn), ClientApp(client_fn=client_fn)


# slow only (make test-all): the legacy-API wrapper; metric DP's simulation path stays in the
# fast tier (test_metric_dp_with_identical_client_models_completes_with_fallback)
@pytest.mark.slow
def test_legacy_metric_dp_runs_in_the_simulation_engine():
    from fedpriv.strategies.legacy_dp import LegacyMetricDP
    from flwr.simulation import run_simulation

    captured: dict = {}
    server_app, client_app = _legacy_apps(LegacyMetricDP, captured)
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=3,
        backend_config={"client_resources": {"num_cpus": 1}},
    )
    history = captured["strategy"].history
    assert len(history) == 2
    for report in history:
        assert report["dp-noised"] and report["dp-num-reports"] == 3
        assert report["dp-distance"] > 0 and report["dp-fallback"] is None
        # σ = z·C/(m·d), recomputed from the recorded d
        assert report["dp-sigma"] == pytest.approx(0.5 * 1.0 / (3 * report["dp-distance"]))
    params = captured["params"]  # round 0 (initial), 1, 2
    assert len(params) == 3
    moved = [np.linalg.norm(np.concatenate([a.ravel() - b.ravel() for a, b in zip(p, params[0])]))
             for p in params[1:]]  # fmt: skip
    assert all(m > 0.1 for m in moved)
    # Round 1 starts from zeros, so every update has norm > C = 1 and is clipped.
    assert history[0]["dp-num-clipped"] == 3


# --- (2) small seeded grid on digits (Message API, `fedpriv run`) --------------------------------

GRID_ROUNDS = 3
BANDS = {"fedavg": 0.85, "fedyogi": 0.7}  # final server accuracy after 3 rounds, lower bounds


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> dict:
    """The six runs as cells of one simulation (the same rounds as six separate runs: the
    baseline records came from separate runs of the old code)."""
    base = tmp_path_factory.mktemp("dpgrid")
    runs = {
        f"{strategy}-{privacy}": (
            {
                "scenario": "digits",
                "strategy": strategy,
                "privacy": privacy,
                "seed": 3,
                "num-server-rounds": GRID_ROUNDS,
                # MP's z, at which the baselines were recorded (global DP's default is now 1)
                "noise-multiplier": 0.01,
            },
            base / f"{strategy}-{privacy}",
        )  # fmt: skip
        for strategy in ("fedavg", "fedyogi")
        for privacy in ("none", "global-dp", "metric-dp")
    }
    results = run_fedpriv_cells(runs, base / "plan")
    return {tuple(label.split("-", 1)): (*results[label], runs[label][1]) for label in runs}


def test_grid_rounds_match_the_baseline(grid):
    for (strategy, privacy), (rc, _, _, tail, path) in grid.items():
        assert rc == 0, tail
        assert_matches_baseline(f"dp-grid-{strategy}-{privacy}", path)


def _weights(path: Path) -> list[np.ndarray]:
    with np.load(path / "final_weights.npz") as data:
        return [data[k] for k in sorted(data.files, key=lambda k: int(k.split("_")[1]))]


@pytest.mark.parametrize("strategy", ["fedavg", "fedyogi"])
def test_grid_accuracy_noise_and_reports(grid, strategy):
    for privacy in ("none", "global-dp", "metric-dp"):
        rc, summary, rounds, tail, _ = grid[(strategy, privacy)]
        assert rc == 0, tail
        assert summary["final"]["accuracy"] >= BANDS[strategy], (privacy, summary["final"])
        trained = [r for r in rounds if r["round"] > 0]
        assert len(trained) == GRID_ROUNDS
        if privacy == "none":
            assert "privacy" not in summary
            assert all("dp-sigma" not in r for r in trained)
            continue
        block = summary["privacy"]
        assert block["mode"] == privacy and block["noised_rounds"] == GRID_ROUNDS
        for r in trained:
            assert r["dp-noised"] and r["dp-sigma"] > 0
        if privacy == "global-dp":
            assert all(r["dp-sigma"] == pytest.approx(0.01 * 5.0 / 4) for r in trained)
            eps = [r["dp-epsilon"] for r in trained]
            assert eps == sorted(eps) and eps[0] > 0
            assert block["epsilon"]["epsilon"] == pytest.approx(eps[-1], rel=1e-6)
            assert block["epsilon"]["epsilon_rdp"] >= block["epsilon"]["epsilon"]
            assert all("replace-one" in r["dp-adjacency"] and r["dp-accountant"] for r in trained)
        else:
            for r in trained:
                assert r["dp-distance"] > 0 and r["dp-fallback"] is None
                assert r["dp-sigma"] == pytest.approx(0.01 * 5.0 / (4 * r["dp-distance"]))
            assert block["distance_per_round"] == [r["dp-distance"] for r in trained]
            assert "heuristic" in block["guarantee"] and "epsilon" not in block
    # the noise was really added: final weights differ from the noiseless run, same seed
    clean = _weights(grid[(strategy, "none")][4])
    for privacy in ("global-dp", "metric-dp"):
        noisy = _weights(grid[(strategy, privacy)][4])
        diff = max(float(np.max(np.abs(a - b))) for a, b in zip(clean, noisy))
        assert diff > 1e-3, (strategy, privacy, diff)


# --- (3) metric DP with a single client: the floor, never a crash -----------------------------


@pytest.mark.slow
def test_metric_dp_single_client_completes_with_fallback(tmp_path):
    rc, summary, rounds, tail = run_fedpriv(
        {"scenario": "digits", "privacy": "metric-dp", "num-clients": 1, "num-server-rounds": 2,
         "seed": 1},
        tmp_path / "one",
    )  # fmt: skip
    assert rc == 0, tail
    trained = [r for r in rounds if r["round"] > 0]
    assert len(trained) == 2
    for r in trained:
        assert r["dp-fallback"] == "fewer-than-2-clients"
        assert r["dp-distance"] == 1e-6 and r["dp-distance-measured"] is None
        # the default floor: the largest noise the wrapper adds, sigma = z*C/(m*min-distance)
        assert math.isfinite(r["dp-sigma"])
        assert r["dp-sigma"] == pytest.approx(0.01 * 5.0 / (1 * 1e-6))
    assert summary["privacy"]["fallback_per_round"] == ["fewer-than-2-clients"] * 2


# --- (4) identical client models in the simulation engine (Message API) ----------------------


def test_metric_dp_with_identical_client_models_completes_with_fallback():
    """Every client returns the same model (w_g + 0.1): d = 0, the floor is used, rounds finish
    (Flower's simulation engine on the in-process backend)."""
    from fedpriv.scenarios.cli.in_process import in_process_simulation
    from fedpriv.strategies.dp_wrappers import MetricDP
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    captured: dict = {"reports": []}
    client_app = ClientApp()

    @client_app.train()
    def train(msg: Message, context: Context) -> Message:
        arrays = [a + 0.1 for a in msg.content["arrays"].to_numpy_ndarrays()]
        content = RecordDict(
            {"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 5})}
        )
        return Message(content=content, reply_to=msg)

    server_app = ServerApp()

    class Recording(MetricDP):
        def aggregate_train(self, server_round, replies):
            out = super().aggregate_train(server_round, replies)
            captured["reports"].append(self.round_metrics())
            return out

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = Recording(
            FedAvg(fraction_evaluate=0.0, min_available_nodes=3, min_train_nodes=3),
            noise_multiplier=0.5,
            clipping_norm=1.0,
            num_sampled_clients=3,
            min_distance=0.01,
            rng=np.random.default_rng(0),
        )
        result = strategy.start(
            grid=grid, initial_arrays=ArrayRecord([np.zeros(4, np.float32)]), num_rounds=2
        )
        captured["final"] = result.arrays.to_numpy_ndarrays()

    with in_process_simulation():  # the engine is not the subject: no Ray in this worker
        run_simulation(
            server_app=server_app,
            client_app=client_app,
            num_supernodes=3,
            backend_config={"client_resources": {"num_cpus": 1}},
        )
    assert len(captured["reports"]) == 2
    for report in captured["reports"]:
        assert report["dp-fallback"] == "distance-below-floor"
        assert report["dp-distance"] == pytest.approx(0.01)
        assert report["dp-sigma"] == pytest.approx(0.5 * 1.0 / (3 * 0.01))
    assert np.all(np.isfinite(captured["final"][0]))
