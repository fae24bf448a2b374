"""Server-side fixed-clipping global DP and metric DP for Flower's Message API.

Thin adapters around the Flower-free mechanisms of :mod:`fedpriv.dp` (SPEC §3.1, §3.2):
``configure_train`` remembers the round's global arrays; ``aggregate_train`` clips every
reply relative to them (new ArrayRecords in copies of the replies, keys kept), delegates
to the wrapped strategy, and adds ``N(0, σ²)`` to every element of the aggregate.

* :class:`ServerSideFixedClippingDP`: ``σ = z·C/m`` — the same output as Flower's
  ``flwr.serverapp.strategy.DifferentialPrivacyServerSideFixedClipping`` for the same noise
  draw (ours draws ``rng.normal(0, σ, shape)`` layer by layer in order; Flower draws the
  global ``np.random.normal`` the same way, so ``rng=np.random.RandomState(7)`` here equals
  ``np.random.seed(7)`` there).
* :class:`MetricDP`: the same wrapper with :class:`fedpriv.dp.MetricScaledGaussian`,
  ``σ = z·C/(m·d)``. Its guarantee is d-privacy, not (ε, δ) (:data:`fedpriv.dp.METRIC_GUARANTEE`).

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
from collections import OrderedDict
from collections.abc import Iterable
from logging import INFO, WARNING
from typing import Any, Optional

import numpy as np
from flwr.common import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict, log
from flwr.server import Grid
from flwr.serverapp.strategy.strategy import Strategy

from fedpriv.dp import (
    FixedClippingGaussian,
    GaussianRoundsAccountant,
    MetricScaledGaussian,
    Rng,
    check_rng,
    round_report,
)
from strategies.base import StrategyWrapper

__all__ = ["ServerSideFixedClippingDP", "MetricDP", "arrays_with_keys", "copy_with_arrays"]


def arrays_with_keys(record: ArrayRecord, arrays: list[np.ndarray]) -> ArrayRecord:
    """A new ArrayRecord holding ``arrays`` under ``record``'s keys (in order)."""
    return ArrayRecord(OrderedDict({k: Array(v) for k, v in zip(record.keys(), arrays)}))


def copy_with_arrays(reply: Message, new_records: dict[str, ArrayRecord]) -> Message:
    """A copy of ``reply`` (same metadata) whose content has ``new_records`` swapped in."""
    content = RecordDict(
        {name: new_records.get(name, record) for name, record in reply.content.items()}
    )
    return Message(content=content, metadata=copy.copy(reply.metadata))


class ServerSideFixedClippingDP(StrategyWrapper):
    """Central DP with server-side fixed clipping around a Message-API ``strategy``.

    Parameters (keyword-only after ``strategy``)
    ----------
    noise_multiplier : float
        z >= 0.
    clipping_norm : float
        C > 0 (flat L2 norm of a client's whole update ``w_i − w_g``).
    num_sampled_clients : int
        m >= 1, the number of clients sampled per round (σ is calibrated to it).
    rng : numpy Generator | RandomState | None
        Source of the noise; None gives a fresh, unseeded Generator.
    accept_failures : bool
        False (Flower's rule): skip aggregation when any reply has an error. True: aggregate
        what arrived (weaker guarantee, see the module docstring).
    mechanism : fedpriv.dp.FixedClippingGaussian | None
        The mechanism; built from z, C, m when None (subclasses swap the class).
    accountant : fedpriv.dp.GaussianRoundsAccountant | None
        If given, each noised round is charged and ε so far is in ``round_metrics()``.
    **mechanism_kwargs
        Extra keyword arguments of ``mechanism_class`` (used by :class:`MetricDP`).
    """

    mechanism_class: type[FixedClippingGaussian] = FixedClippingGaussian

    def __init__(
        self,
        strategy: Strategy,
        *,
        noise_multiplier: float,
        clipping_norm: float,
        num_sampled_clients: int,
        rng: Optional[Rng] = None,
        accept_failures: bool = False,
        mechanism: Optional[FixedClippingGaussian] = None,
        accountant: Optional[GaussianRoundsAccountant] = None,
        **mechanism_kwargs: Any,
    ) -> None:
        if not isinstance(strategy, Strategy):
            raise ValueError(
                f"strategy = {strategy!r} is not allowed; expected a "
                "flwr.serverapp.strategy.Strategy (use strategies.legacy_dp for the legacy API)"
            )
        if not isinstance(accept_failures, bool):
            raise ValueError(
                f"accept_failures = {accept_failures!r} is not allowed; expected True or False"
            )
        self.strategy = strategy
        self.mechanism = mechanism or self.mechanism_class(
            noise_multiplier=noise_multiplier,
            clipping_norm=clipping_norm,
            num_sampled_clients=num_sampled_clients,
            **mechanism_kwargs,
        )
        self.rng = check_rng(rng)
        self.accept_failures = accept_failures
        self.accountant = accountant
        self.current_arrays: ArrayRecord = ArrayRecord()
        self.last_round: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.mechanism!r}, strategy={self.strategy!r})"

    def summary(self) -> None:
        """Log the DP settings, then the wrapped strategy's summary."""
        log(INFO, "\t├──> %s: %r", type(self).__name__, self.mechanism)
        self.strategy.summary()

    def round_metrics(self) -> dict[str, Any]:
        """What the wrapper did in the last round (σ, d, clipped, reports, ε)."""
        return dict(self.last_round)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Remember the round's global arrays (the clipping reference) and delegate."""
        self.current_arrays = arrays
        self.last_round = {}
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Clip each reply, aggregate with the wrapped strategy, add Gaussian noise."""
        replies = list(replies)
        ok = [m for m in replies if not m.has_error()]
        failures = len(replies) - len(ok)
        report = dict(num_reports=len(ok), num_failures=failures)
        if (failures and not self.accept_failures) or not ok:
            reason = "no replies with content" if not ok else "client failures"
            log(INFO, "aggregate_train: %d failures, %d replies; skipping aggregation",
                failures, len(ok))  # fmt: skip
            self.last_round = round_report(self.mechanism, stdv=None, skipped=reason, **report)
            self.history.append(self.last_round)
            return None, None
        if len(ok) != self.mechanism.num_sampled_clients:
            log(WARNING, "aggregate_train: %d replies but num_sampled_clients = %d (sigma is "
                "calibrated to m; fewer replies weaken the guarantee)",
                len(ok), self.mechanism.num_sampled_clients)  # fmt: skip
        clipped_replies, stdv, info, flags = self._clip(ok)
        arrays, metrics = self.strategy.aggregate_train(server_round, clipped_replies)
        noised = bool(arrays)
        if noised:
            noisy = self.mechanism.add_noise(arrays.to_numpy_ndarrays(), stdv, self.rng)
            arrays = arrays_with_keys(arrays, noisy)
            log(INFO, "aggregate_train: DP noise with stdev %.6g added", stdv)
        epsilon = None
        if noised and self.accountant is not None:
            z_sum = self.mechanism.sum_noise_multiplier(stdv, len(ok))
            epsilon = self.accountant.step(z_sum)
        self.last_round = round_report(
            self.mechanism, stdv=stdv, info=info, num_clipped=sum(flags),
            clipped_nodes=[m.metadata.src_node_id for m, f in zip(ok, flags) if f],
            noised=noised, epsilon=epsilon, **report,
        )  # fmt: skip
        self.history.append(self.last_round)
        return arrays, metrics

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
                new_records[name] = arrays_with_keys(record, new_arrays)
                raw += arrays
                clipped += new_arrays
                was_clipped |= flag
            out.append(copy_with_arrays(reply, new_records))
            raw_models.append(raw)
            clipped_models.append(clipped)
            flags.append(was_clipped)
        stdv, info = self.mechanism.noise_stdv(raw_models, clipped_models)
        return out, stdv, info, flags


class MetricDP(ServerSideFixedClippingDP):
    """Metric privacy (``σ = z·C/(m·d)``): :class:`ServerSideFixedClippingDP` with
    :class:`fedpriv.dp.MetricScaledGaussian` (extra keyword arguments ``distance_on`` =
    ``"raw"`` | ``"clipped"`` and ``min_distance`` > 0; see that class for the d fallback).
    """

    mechanism_class = MetricScaledGaussian

    def __init__(
        self,
        strategy: Strategy,
        *,
        noise_multiplier: float,
        clipping_norm: float,
        num_sampled_clients: int,
        distance_on: str = "raw",
        min_distance: float = 1e-6,
        rng: Optional[Rng] = None,
        accept_failures: bool = False,
        mechanism: Optional[MetricScaledGaussian] = None,
        accountant: Optional[GaussianRoundsAccountant] = None,
    ) -> None:
        super().__init__(
            strategy,
            noise_multiplier=noise_multiplier,
            clipping_norm=clipping_norm,
            num_sampled_clients=num_sampled_clients,
            rng=rng,
            accept_failures=accept_failures,
            mechanism=mechanism,
            accountant=accountant,
            distance_on=distance_on,
            min_distance=min_distance,
        )
