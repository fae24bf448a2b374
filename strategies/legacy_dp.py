"""Server-side fixed-clipping global DP and metric DP for Flower's legacy strategy API.

The same mechanisms as :mod:`fedpriv.strategies.dp_wrappers` (one implementation, in
:mod:`fedpriv.privacy.dp`), adapted to ``flwr.server.strategy.Strategy``: ``configure_fit``
remembers the round's global ``Parameters``; ``aggregate_fit`` clips every ``FitRes``
relative to them (new ``FitRes`` objects, the inputs are not modified), delegates to the
wrapped strategy and adds ``N(0, σ²)`` to every element of the aggregate.

* :class:`LegacyServerSideFixedClippingDP`: ``σ = z·C/m``; the same output as
  ``flwr.server.strategy.DifferentialPrivacyServerSideFixedClipping`` for the same noise draw
  (``rng=np.random.RandomState(7)`` here equals ``np.random.seed(7)`` before Flower's call).
* :class:`LegacyMetricDP`: ``σ = z·C/(m·d)`` (a heuristic, no ε; d on clipped models by
  default so σ >= z·√L/(2m)).

Failures: Flower's legacy wrapper returns ``(None, {})`` when ``failures`` is non-empty;
that is the default here. ``accept_failures=True`` aggregates the results that arrived with σ
still calibrated to m — a weaker guarantee (noise multiplier ``z·n/m`` on the sum for n < m
results), logged and reported in ``round_metrics()``.

One line inside a legacy ``ServerApp``::

    def server_fn(context):
        strategy = LegacyMetricDP(FedAvg(), noise_multiplier=0.01, clipping_norm=5.0,
                                  num_sampled_clients=3, rng=np.random.default_rng(0))
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=3))
"""

from __future__ import annotations

from typing import Optional, Union

from fedpriv.strategies.dp_core import DPWrapperCore, MetricOptions
from flwr.common import (
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    NDArrays,
    Parameters,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Bulyan, FedMedian, FedTrimmedAvg, Krum, QFedAvg, Strategy
from flwr.server.strategy.aggregate import aggregate_inplace

__all__ = ["LegacyServerSideFixedClippingDP", "LegacyMetricDP"]

FitResults = list[tuple[ClientProxy, FitRes]]
FitFailures = list[Union[tuple[ClientProxy, FitRes], BaseException]]


class LegacyServerSideFixedClippingDP(DPWrapperCore, Strategy):
    """Central DP with server-side fixed clipping around a legacy ``strategy``.

    Keyword-only options as :class:`fedpriv.strategies.dp_core.DPWrapperCore`: ``noise_multiplier``
    z >= 0, ``clipping_norm`` C > 0, ``num_sampled_clients`` m >= 1, ``rng``,
    ``accept_failures`` (default False, Flower's rule), ``mechanism``, ``accountant`` and
    ``weighting`` ("uniform": the inner strategy sees ``num_examples = 1`` for every clipped
    result; "examples": FedAvg's weights kept, accounted by the largest weight); ``poisson``
    must stay False (Poisson sampling is the Message API's).
    """

    strategy_type = Strategy
    other_api = "use fedpriv.strategies.dp_wrappers for the Message API"
    step_name = "aggregate_fit"
    reply_name = "results"
    not_mean_types = (FedMedian, FedTrimmedAvg, Krum, Bulyan, QFedAvg)

    def reset_reference(self) -> None:
        """No global parameters yet (``configure_fit`` sets them)."""
        self.current_round_params: NDArrays = []

    def initialize_parameters(self, client_manager: ClientManager) -> Optional[Parameters]:
        """Delegate."""
        return self.strategy.initialize_parameters(client_manager)

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """Remember the round's global parameters (the clipping reference) and delegate."""
        self.current_round_params = parameters_to_ndarrays(parameters)
        self.last_round = {}
        return self.strategy.configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(
        self, server_round: int, results: FitResults, failures: FitFailures
    ) -> tuple[Optional[Parameters], dict[str, Scalar]]:
        """Clip each result, noise their mean, let the wrapped strategy post-process it
        (as :meth:`fedpriv.strategies.dp_wrappers.ServerSideFixedClippingDP.aggregate_train`)."""
        if self.skip_round(len(results), len(failures), "no results"):
            return None, {}
        rnd = self.mechanism.process(
            [parameters_to_ndarrays(res.parameters) for _, res in results],
            self.current_round_params,
        )
        unit = self.weighting == "uniform"
        weights = None if unit else [float(res.num_examples) for _, res in results]
        if self.withhold(server_round, rnd.stdv, len(results), weights):
            return None, {}  # max_epsilon: nothing released, nothing charged
        clipped_results = [
            (proxy, _with_parameters(res, arrays, unit_weight=unit))
            for (proxy, res), arrays in zip(results, rnd.models)
        ]
        if self.noise_first:
            params, metrics = self._noised_mean_through(server_round, clipped_results, rnd.stdv)
        else:
            params, metrics = self.strategy.aggregate_fit(server_round, clipped_results, failures)
            if params:
                noisy = self.mechanism.add_noise_stdv(
                    parameters_to_ndarrays(params), rnd.stdv, self.rng
                )
                params = ndarrays_to_parameters(noisy)
        noised = bool(params)
        ids = [getattr(proxy, "node_id", i) for i, (proxy, _) in enumerate(results)]
        self.record_round(rnd.stdv, rnd.info, ids=ids, flags=list(rnd.clipped),
                          weights=weights, noised=noised, num_failures=len(failures))  # fmt: skip
        return params, metrics

    def _noised_mean_through(
        self, server_round: int, clipped: FitResults, stdv: float
    ) -> tuple[Optional[Parameters], dict[str, Scalar]]:
        """``w_g + mean Δ + N(0, σ²)`` (legacy FedAvg's in-place arithmetic for the mean),
        handed to the wrapped strategy as one result of weight 1; metrics from ``clipped``."""
        mean = aggregate_inplace(clipped)  # fresh arrays: the results are not modified
        noisy = self.mechanism.add_noise_stdv(mean, stdv, self.rng)
        proxy, res = clipped[0]
        one = [(proxy, _with_parameters(res, noisy, unit_weight=True))]
        params, _ = self.strategy.aggregate_fit(server_round, one, [])
        metrics_fn = getattr(self.strategy, "fit_metrics_aggregation_fn", None)
        metrics = (
            metrics_fn([(r.num_examples, r.metrics) for _, r in clipped]) if metrics_fn else {}
        )
        return params, metrics

    def configure_evaluate(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, EvaluateIns]]:
        """Delegate."""
        return self.strategy.configure_evaluate(server_round, parameters, client_manager)

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[Union[tuple[ClientProxy, EvaluateRes], BaseException]],
    ) -> tuple[Optional[float], dict[str, Scalar]]:
        """Delegate."""
        return self.strategy.aggregate_evaluate(server_round, results, failures)

    def evaluate(
        self, server_round: int, parameters: Parameters
    ) -> Optional[tuple[float, dict[str, Scalar]]]:
        """Delegate (server-side evaluation of the wrapped strategy)."""
        return self.strategy.evaluate(server_round, parameters)


def _with_parameters(res: FitRes, arrays: NDArrays, *, unit_weight: bool = False) -> FitRes:
    """A new FitRes like ``res`` carrying ``arrays`` (``num_examples = 1`` if ``unit_weight``)."""
    return FitRes(
        status=res.status,
        parameters=ndarrays_to_parameters(arrays),
        num_examples=1 if unit_weight else res.num_examples,
        metrics=dict(res.metrics),
    )


class LegacyMetricDP(MetricOptions, LegacyServerSideFixedClippingDP):
    """Metric privacy (``σ = z·C/(m·d)``) for the legacy API: swaps in
    :class:`fedpriv.privacy.dp.MetricScaledGaussian`; options in
    :class:`fedpriv.strategies.dp_core.MetricOptions`.
    """
