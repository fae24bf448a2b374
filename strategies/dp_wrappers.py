"""Server-side fixed-clipping global DP and metric DP for Flower's Message API.

Thin adapters around the Flower-free mechanisms of :mod:`fedpriv.privacy.dp` (SPEC §3.1, §3.2):
``configure_train`` remembers the round's global arrays; ``aggregate_train`` clips every
reply relative to them (new ArrayRecords in copies of the replies, keys kept), delegates
to the wrapped strategy, and adds ``N(0, σ²)`` to every element of the aggregate.

* :class:`ServerSideFixedClippingDP`: ``σ = z·C/m`` — the same output as Flower's
  ``flwr.serverapp.strategy.DifferentialPrivacyServerSideFixedClipping`` for the same noise
  draw (ours draws ``rng.normal(0, σ, shape)`` layer by layer in order; Flower draws the
  global ``np.random.normal`` the same way, so ``rng=np.random.RandomState(7)`` here equals
  ``np.random.seed(7)`` there).
* :class:`MetricDP`: the same wrapper with :class:`fedpriv.privacy.dp.MetricScaledGaussian`,
  ``σ = z·C/(m·d)``: a heuristic without ε (:data:`fedpriv.privacy.dp.METRIC_HEURISTIC`); d on
  clipped models by default, so σ >= ``z·√L/(2m)``.

Weights. By default (``weighting="uniform"``) the clipped copies carry weight 1 under the
inner strategy's ``weighted_by_key`` (``num-examples``), so FedAvg takes the uniform mean the
accountant assumes. ``weighting="examples"`` keeps FedAvg's example weights (MP's setting)
and charges each round ``σ/(C·w_max)`` (``z/(m·w_max)``), plus per-client ε
(``dp-client-epsilon``) with each client's own weight.

Failures. Like Flower, a round where any reply carries an error is not aggregated
(``(None, None)``). With ``accept_failures=True`` the replies that arrived are clipped,
aggregated and noised — but σ stays calibrated to m = ``num_sampled_clients``: with n < m
reports the sensitivity of the mean is C/n > C/m, so the guarantee weakens (noise multiplier
``σ·n/C = z·n/m`` on the sum). A warning is logged, ``round_metrics()`` reports
``dp-underfilled``, and an attached accountant charges the weaker figure.

Usage::

    strategy = MetricDP(FedAvg(), noise_multiplier=0.01, clipping_norm=5.0,
                        num_sampled_clients=4, rng=np.random.default_rng(0))
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from logging import INFO
from typing import Optional

import numpy as np
from fedpriv.strategies.array_records import named_record
from fedpriv.strategies.base import StrategyWrapper
from fedpriv.strategies.dp_core import DPWrapperCore, MetricOptions, inner_count_hidden
from flwr.common import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict, log
from flwr.server import Grid
from flwr.serverapp.strategy import Bulyan, FedMedian, FedTrimmedAvg, Krum, MultiKrum, QFedAvg
from flwr.serverapp.strategy.strategy import Strategy
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords, aggregate_metricrecords

__all__ = ["ServerSideFixedClippingDP", "MetricDP", "copy_with_arrays"]


def copy_with_arrays(
    reply: Message, new_records: dict[str, ArrayRecord], *, unit_weight_key: str | None = None
) -> Message:
    """A copy of ``reply`` (same metadata) whose content has ``new_records`` swapped in.

    With ``unit_weight_key``, every MetricRecord holding that key carries 1 there instead
    (uniform aggregation by a weighting strategy such as FedAvg).
    """
    items = {}
    for name, record in reply.content.items():
        record = new_records.get(name, record)
        if unit_weight_key and isinstance(record, MetricRecord) and unit_weight_key in record:
            record = MetricRecord({**dict(record), unit_weight_key: 1})
        items[name] = record
    return Message(content=RecordDict(items), metadata=copy.copy(reply.metadata))


def _one_reply(template: Message, arrays: ArrayRecord, weight_key: str) -> Message:
    """A copy of ``template`` whose only ArrayRecord is ``arrays`` (under the template's first
    ArrayRecord name) and whose weight under ``weight_key`` is 1."""
    name = next(iter(template.content.array_records))
    items = {
        k: r for k, r in template.content.items() if not isinstance(r, ArrayRecord) or k == name
    }
    reply = Message(content=RecordDict(items), metadata=copy.copy(template.metadata))
    return copy_with_arrays(reply, {name: arrays}, unit_weight_key=weight_key)


def _has_metrics(contents: list[RecordDict]) -> bool:
    return all(len(c.metric_records) > 0 for c in contents)


def reply_weight(reply: Message, key: str) -> float:
    """The value under ``key`` in the reply's MetricRecords (1.0 when absent)."""
    for record in reply.content.metric_records.values():
        if key in record:
            return float(record[key])
    return 1.0


class ServerSideFixedClippingDP(DPWrapperCore, StrategyWrapper):
    """Central DP with server-side fixed clipping around a Message-API ``strategy``.

    Keyword-only options as :class:`fedpriv.strategies.dp_core.DPWrapperCore` (z, C, m, ``rng``,
    ``accept_failures``, ``mechanism``, ``accountant``, ``weighting``), plus

    poisson : bool
        Poisson client sampling (``client-sampling = poisson``): the aggregate is rescaled
        to ``w_g + Σ clip(Δ_i)/m`` (a fixed denominator m, the expected sample size, instead
        of the realised count n; needs a uniform-mean inner strategy) and a round in which
        nobody was sampled still releases ``w_g + N(0, σ²)`` — the Gaussian mechanism on the
        sum that the add/remove PLD accounts exactly.
    """

    strategy_type = Strategy
    other_api = "use fedpriv.strategies.legacy_dp for the legacy API"
    step_name = "aggregate_train"
    reply_name = "replies"
    supports_poisson = True
    not_mean_types = (FedMedian, FedTrimmedAvg, Krum, MultiKrum, Bulyan, QFedAvg)
    # the round's global arrays (set by every configure_train, or note_global_arrays for an
    # empty Poisson sample, before the replies they clip against) and the noised mean handed
    # to the inner strategy within one aggregate_train: a checkpoint need not hold either
    # model-sized copy (the MP CNN: 26 MB each, pickled twice a round in fused mode)
    CHECKPOINT_SKIP = ("current_arrays", "noised_mean")

    def reset_reference(self) -> None:
        """No global arrays yet (``configure_train`` sets them)."""
        self.current_arrays = ArrayRecord()

    def summary(self) -> None:
        """Log the DP settings, then the wrapped strategy's summary."""
        log(INFO, "\t├──> %s: %r", type(self).__name__, self.mechanism)
        self.strategy.summary()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Remember the round's global arrays (the clipping reference) and delegate."""
        self.note_global_arrays(arrays)
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def note_global_arrays(self, arrays: ArrayRecord) -> None:
        """The round's global arrays (also told when a Poisson sample is empty)."""
        self.current_arrays = arrays
        self.last_round = {}

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Clip each reply, noise their mean, let the wrapped strategy post-process it.

        A mean (FedAvg, FedAvgM, FedProx, FedOpt, FedYogi): ``w_g + mean(clip(Δ_i)) + N(0, σ²)``
        is handed to the wrapped strategy as ONE reply of weight 1, so its aggregate is the
        noised mean and its optimizer state (momentum, Adam/Yogi moments) only ever sees noised
        means: every release is post-processing of the accounted Gaussian mechanism. Metrics
        are aggregated from the clipped replies by the wrapped strategy's metric function.
        Not a mean (FedMedian, trimmed mean, Krum): noise after its aggregate, no ε.
        """
        replies = list(replies)
        ok = [m for m in replies if not m.has_error()]
        failures = len(replies) - len(ok)
        if self.poisson and not replies:
            return self._noise_only(server_round)
        if self.skip_round(len(ok), failures, "no replies with content"):
            return None, None
        clipped_replies, stdv, info, flags = self._clip(ok)
        if self.withhold(server_round, stdv, len(ok), self._weights(ok)):
            return None, None  # max_epsilon: nothing released, nothing charged
        if self.noise_first:
            arrays, metrics = self._noised_mean_through(server_round, clipped_replies, stdv)
        else:
            arrays, metrics = self._noise_after(server_round, clipped_replies, stdv)
        ids = [m.metadata.src_node_id for m in ok]
        self.record_round(stdv, info, ids=ids, flags=flags, weights=self._weights(ok),
                          noised=bool(arrays), num_failures=failures)  # fmt: skip
        return arrays, metrics

    def _noised_mean_through(
        self, server_round: int, clipped: list[Message], stdv: float
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """``w_g + mean Δ + N(0, σ²)`` (FedAvg's own arithmetic for the mean) as one reply."""
        key = self._weight_key()
        contents = [m.content for m in clipped]
        mean = aggregate_arrayrecords(contents, key)
        if self.fixed_denominator:
            mean = self._fixed_denominator(mean, len(clipped))
        noisy = self.mechanism.add_noise_stdv(mean.to_numpy_ndarrays(), stdv, self.rng)
        self.noised_mean = named_record(mean.keys(), noisy)
        one = _one_reply(clipped[0], self.noised_mean, key)
        with inner_count_hidden():  # not "Received 1 results": record_round says what came
            arrays, _ = self.strategy.aggregate_train(server_round, [one])
        metrics_fn = getattr(self.strategy, "train_metrics_aggr_fn", aggregate_metricrecords)
        metrics = metrics_fn(contents, key) if _has_metrics(contents) else None
        return arrays, metrics

    def _noise_after(
        self, server_round: int, clipped: list[Message], stdv: float
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Not a mean (FedMedian): the wrapped strategy aggregates, the noise comes after."""
        arrays, metrics = self.strategy.aggregate_train(server_round, clipped)
        if arrays:
            noisy = self.mechanism.add_noise_stdv(arrays.to_numpy_ndarrays(), stdv, self.rng)
            arrays = named_record(arrays.keys(), noisy)
        return arrays, metrics

    def use_fixed_denominator(self) -> bool:
        """Divide the clipped sum by m whatever the number of replies; False (nothing
        changed) unless the aggregate is a uniform mean.

        For audit canaries (:class:`fedpriv.strategies.canaries.CanaryInsertion`): K canary replies
        beside m clients give ``w_g + (Σ_real clip Δ_i + Σ_canary clip Δ_j)/m + N(0, σ²)``,
        σ = z·C/m unchanged, so each canary has a real client's sensitivity C/m (not
        C/(m + K)) and the real clients' ε is the run's own.
        """
        if self.weighting != "uniform" or not self.noise_first:
            return False
        self.fixed_denominator = True
        return True

    def _fixed_denominator(self, arrays: ArrayRecord, num_reports: int) -> ArrayRecord:
        """``w_g + (n/m)·(mean − w_g)`` = ``w_g + Σ Δ_i / m`` for a uniform mean of n."""
        scale = num_reports / self.mechanism.num_sampled_clients
        ref = self.current_arrays.to_numpy_ndarrays()
        out = [
            (g + scale * (np.asarray(a, np.float64) - g)).astype(np.asarray(a).dtype)
            for a, g in zip(arrays.to_numpy_ndarrays(), (np.asarray(r, np.float64) for r in ref))
        ]
        return named_record(arrays.keys(), out)

    def _noise_only(
        self, server_round: int
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Poisson round with nobody sampled: release ``w_g + N(0, σ²)`` (Σ Δ = 0)."""
        stdv, info = self.mechanism.noise_stdv([], [])
        if self.withhold(server_round, stdv, 0, None):
            return None, None
        noisy = self.mechanism.add_noise_stdv(
            self.current_arrays.to_numpy_ndarrays(), stdv, self.rng
        )
        record = self.record_round(stdv, info, ids=[], flags=[], weights=None, noised=True)
        record["dp-empty-sample"] = True
        return named_record(self.current_arrays.keys(), noisy), MetricRecord()

    def _weight_key(self) -> str:
        return str(getattr(self.strategy, "weighted_by_key", "num-examples"))

    def _weights(self, replies: list[Message]) -> Optional[list[float]]:
        """Aggregation weights of the replies (None: uniform)."""
        if self.weighting == "uniform":
            return None
        return [reply_weight(m, self._weight_key()) for m in replies]

    def _clip(self, replies: list[Message]) -> tuple[list[Message], float, dict, list[bool]]:
        """Clipped copies of the replies, σ of the round, its info, and per-reply flags.

        Every ArrayRecord of a reply is clipped against the global arrays (as Flower does);
        the model a reply contributes to the distance is its records' arrays in order.
        """
        reference = self.current_arrays.to_numpy_ndarrays()
        out, raw_models, clipped_models, flags = [], [], [], []
        for reply in replies:
            new_records, raw, clipped, was_clipped = {}, [], [], False
            for name, record in reply.content.array_records.items():
                arrays = record.to_numpy_ndarrays()
                new_arrays, flag = self.mechanism.clip(arrays, reference)
                new_records[name] = named_record(record.keys(), new_arrays)
                raw += arrays
                clipped += new_arrays
                was_clipped |= flag
            unit = self._weight_key() if self.weighting == "uniform" else None
            out.append(copy_with_arrays(reply, new_records, unit_weight_key=unit))
            raw_models.append(raw)
            clipped_models.append(clipped)
            flags.append(was_clipped)
        stdv, info = self.mechanism.noise_stdv(raw_models, clipped_models)
        return out, stdv, info, flags


class MetricDP(MetricOptions, ServerSideFixedClippingDP):
    """Metric privacy (``σ = z·C/(m·d)``): :class:`ServerSideFixedClippingDP` with
    :class:`fedpriv.privacy.dp.MetricScaledGaussian`; options in
    :class:`fedpriv.strategies.dp_core.MetricOptions`.
    """
