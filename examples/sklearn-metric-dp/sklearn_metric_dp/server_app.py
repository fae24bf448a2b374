"""sklearn_metric_dp: the ServerApp -- Flower's FedAvg wrapped in fedpriv's metric DP.

The only change to Flower's template is the ``MetricDP(...)`` line: every round the wrapper
clips each client's update to norm C relative to the global model, lets FedAvg aggregate the
clipped models, and adds N(0, sigma^2) to every weight with sigma = z*C/(m*d), d the largest
pairwise (mean over layers) distance of the clipped client models (MP paper, Sec. 6).
Metric DP is a heuristic relative to a data-dependent d (no formal guarantee); the epsilon
printed next to it is what a Gaussian accountant gives for the same sigma -- a comparison only.
"""

from __future__ import annotations

import json
from logging import INFO

import numpy as np
from fedpriv.strategies.dp_wrappers import MetricDP
from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from sklearn.metrics import accuracy_score

from fedpriv.privacy.dp import epsilon_for_rounds
from sklearn_metric_dp.task import (
    get_model,
    get_model_params,
    load_server_test,
    set_initial_params,
    set_model_params,
)

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run FedAvg with metric DP; log sigma, d and epsilon (comparison) every round."""
    cfg = context.run_config
    m = int(cfg["num-clients"])
    model = get_model(int(cfg["local-epochs"]))
    set_initial_params(model)
    fraction_evaluate = float(cfg["fraction-evaluate"])
    fedavg = FedAvg(fraction_train=1.0, fraction_evaluate=fraction_evaluate, min_available_nodes=m)

    z, c = float(cfg["noise-multiplier"]), float(cfg["clipping-norm"])
    rng = np.random.default_rng()  # secret noise (OS entropy): never from the public seed
    # The one line: FedAvg -> FedAvg with metric DP (clipping, d, sigma = z*C/(m*d), noise).
    strategy = MetricDP(fedavg, noise_multiplier=z, clipping_norm=c, num_sampled_clients=m,
                        distance_on="clipped", rng=rng)  # fmt: skip

    x_test, y_test = load_server_test()
    out_file = str(cfg["output-file"])
    sum_noise: list[float] = []  # sigma*n/C of each noised round (for the comparison epsilon)

    def report_round(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        set_model_params(model, arrays.to_numpy_ndarrays())
        accuracy = float(accuracy_score(y_test, model.predict(x_test)))
        dp = strategy.round_metrics()
        if dp.get("dp-noised"):
            sum_noise.append(float(dp["dp-sum-noise-multiplier"]))
        epsilon = None
        if sum_noise:
            report = epsilon_for_rounds(sum_noise, sampled=m, population=m, delta=1e-5)
            epsilon = report["epsilon_rdp"]
        row = {
            "round": server_round,
            "accuracy": accuracy,
            "sigma": dp.get("dp-sigma"),
            "d": dp.get("dp-distance"),
            "epsilon_comparison_only": epsilon,
            "delta": 1e-5,
            "num_clipped": dp.get("dp-num-clipped"),
        }
        log(INFO, "fedpriv metric DP %s", json.dumps(row))
        if out_file:
            with open(out_file, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
        return MetricRecord({"accuracy": accuracy})

    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(get_model_params(model)),
        num_rounds=int(cfg["num-server-rounds"]),
        evaluate_fn=report_round,
    )
    set_model_params(model, result.arrays.to_numpy_ndarrays())
