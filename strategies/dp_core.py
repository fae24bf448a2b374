"""What the server-side DP wrappers of both Flower APIs share (SPEC §3.1, §3.2; MP §6).

:class:`fedpriv.strategies.dp_wrappers.ServerSideFixedClippingDP` (Message API) and
:class:`fedpriv.strategies.legacy_dp.LegacyServerSideFixedClippingDP` (legacy API) differ only in
how
arrays move in and out of Flower's records. Everything else is this one class: the keyword-only
options and their validation, the mechanism built from them (``σ = z·C/m``, or
``σ = z·C/(m·d)`` for metric DP), Flower's failure rule, the accounting of a noised round and
the ``round_metrics()`` report. :class:`MetricOptions` is the one explicit signature of the
two metric-DP wrappers. This module imports no Flower: the API's ``Strategy`` class comes in as
the subclass's ``strategy_type``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from logging import INFO, WARNING, Filter, LogRecord, getLogger
from typing import Any, Optional

from fedpriv.privacy.accounting.budget import EpsilonBudget
from fedpriv.privacy.dp import (
    WEIGHTING,
    FixedClippingGaussian,
    GaussianRoundsAccountant,
    MetricScaledGaussian,
    Rng,
    check_rng,
    round_report,
)
from fedpriv.validation import not_allowed

NO_EPSILON_NOT_A_MEAN = (
    "no epsilon: the inner strategy is not a mean of the clipped updates (the median's "
    "sensitivity is not C/m); the noise is added to its output as Flower does"
)

_log = getLogger("flwr")  # Flower's logger, as ``flwr.common.log`` writes to


class _ReplyCountFilter(Filter):
    """Drops Flower's "Received N results and M failures" line of a strategy's aggregation."""

    def filter(self, record: LogRecord) -> bool:
        return "Received %s results" not in str(record.msg)


@contextmanager
def inner_count_hidden() -> Iterator[None]:
    """While a wrapper hands its ONE noised (or synthetic) reply to the inner strategy:
    Flower's strategies log "Received 1 results and 0 failures" for it, which reads as if
    the other clients had failed. The wrapper logs what really arrived instead
    (:func:`round_line`)."""
    hide = _ReplyCountFilter()
    _log.addFilter(hide)
    try:
        yield
    finally:
        _log.removeFilter(hide)


def round_line(step: str, record: dict[str, Any]) -> str:
    """The wrapper's log line of a noised round: "4 replies, 1 clipped, noise σ = …"
    (metric DP adds the distance d the noise was divided by)."""
    text = (
        f"{step}: {record.get('dp-num-reports', 0)} replies, "
        f"{record.get('dp-num-failures', 0)} failures, {record.get('dp-num-clipped', 0)} clipped, "
        f"noise σ = {record.get('dp-sigma', 0.0):.6g}"
    )
    if record.get("dp-distance") is not None:
        text += f" (d = {record['dp-distance']:.6g})"
    return text


class DPWrapperCore:
    """Central DP with server-side fixed clipping around ``strategy`` (either Flower API).

    Everything after ``strategy`` is keyword-only.

    Parameters
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
        what arrived, σ still calibrated to m (with n < m reports the noise multiplier on the
        sum is ``z·n/m``: logged, reported as ``dp-underfilled`` and charged that way).
    mechanism : fedpriv.privacy.dp.FixedClippingGaussian | None
        The mechanism; built from z, C, m when None (subclasses swap ``mechanism_class``).
    accountant : fedpriv.privacy.dp.GaussianRoundsAccountant | None
        If given, each noised round's ``DpEvent`` (``mechanism.round_event``) is composed and
        ε so far is in ``round_metrics()`` (global DP only; metric DP reports no ε).
    weighting : "uniform" | "examples"
        "uniform" (default): the inner strategy sees weight 1 for every clipped reply.
        "examples": keep its example weights; accounted by the largest weight.
    poisson : bool
        Poisson client sampling (Message API only; see
        :class:`fedpriv.strategies.dp_wrappers.ServerSideFixedClippingDP`).
    max_epsilon : float | None
        A privacy budget (needs ``accountant`` and a mean; not metric DP): :meth:`budget_stop`
        says before a round whether its planned charge would push ε past it, and a round
        whose real charge would (fewer replies or larger weights than planned) is not
        released (:meth:`withhold`), so the accountant's ε never exceeds ``max_epsilon``.
    **mechanism_kwargs
        Extra keyword arguments of ``mechanism_class`` (used by :class:`MetricOptions`).
    """

    mechanism_class: type[FixedClippingGaussian] = FixedClippingGaussian
    strategy_type: type = object  # the API's Strategy class
    other_api = ""  # where the other API's wrappers are (for the error message)
    step_name = "aggregate"  # the API's aggregation step (log lines)
    reply_name = "replies"  # what the API calls the clients' answers (log lines)
    supports_poisson = False
    # the API's aggregators that are not a (weighted) mean: noised after them, no ε
    not_mean_types: tuple[type, ...] = ()
    # the server's own release ledger across runs (fedpriv.privacy.ledger.server.ServerLedger;
    # None: this run's accountant only); set by the run's builder after construction
    server_ledger: Any = None

    def __init__(
        self,
        strategy: Any,
        *,
        noise_multiplier: float,
        clipping_norm: float,
        num_sampled_clients: int,
        rng: Optional[Rng] = None,
        accept_failures: bool = False,
        mechanism: Optional[FixedClippingGaussian] = None,
        accountant: Optional[GaussianRoundsAccountant] = None,
        weighting: str = "uniform",
        poisson: bool = False,
        max_epsilon: Optional[float] = None,
        **mechanism_kwargs: Any,
    ) -> None:
        if poisson and not self.supports_poisson:
            raise not_allowed("poisson", poisson, "False with the legacy API")
        if poisson and weighting != "uniform":
            raise ValueError("poisson = True is not allowed with weighting = 'examples'")
        if weighting not in WEIGHTING:
            raise not_allowed("weighting", weighting, "one of " + ", ".join(WEIGHTING))
        if not isinstance(strategy, self.strategy_type):
            api = self.strategy_type
            raise not_allowed(
                "strategy", strategy, f"a {api.__module__}.{api.__name__} ({self.other_api})"
            )
        if not isinstance(accept_failures, bool):
            raise not_allowed("accept_failures", accept_failures, "True or False")
        self.strategy = strategy
        # noise the clipped mean BEFORE the inner strategy (its optimizer state then only
        # sees noised means); only for a mean: a median/trimmed/Krum aggregator gets the
        # noise after it and no ε
        self.noise_first = not isinstance(strategy, self.not_mean_types)
        self.mechanism = mechanism or self.mechanism_class(
            noise_multiplier=noise_multiplier,
            clipping_norm=clipping_norm,
            num_sampled_clients=num_sampled_clients,
            **mechanism_kwargs,
        )
        self.rng = check_rng(rng)
        self.accept_failures = accept_failures
        self.accountant = accountant
        self.weighting = weighting
        self.poisson = bool(poisson)
        # the clipped sum is divided by m whatever the number of replies (Poisson sampling;
        # audit canaries: fedpriv.strategies.canaries.CanaryInsertion turns it on)
        self.fixed_denominator = self.poisson
        self.last_round: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []
        self.budget, self.budget_stopped = self._budget(max_epsilon), None
        self.reset_reference()

    def _budget(self, max_epsilon: Optional[float]) -> Optional[EpsilonBudget]:
        """The :class:`EpsilonBudget` of ``max_epsilon`` (None: no budget)."""
        if max_epsilon is None:
            return None
        if self.accountant is None or not self.noise_first:
            raise not_allowed("max_epsilon", max_epsilon, "None without an epsilon to bound "
                              "(no accountant, or an aggregator that is not a mean)")  # fmt: skip
        if not self.mechanism.accountable:
            raise not_allowed("max_epsilon", max_epsilon, "None for metric DP (no epsilon)")
        return EpsilonBudget(max_epsilon)  # type: ignore[arg-type]

    def reset_reference(self) -> None:
        """Forget the round's global model, the clipping reference (held in the API's type)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.mechanism!r}, strategy={self.strategy!r})"

    def round_metrics(self) -> dict[str, Any]:
        """What the wrapper did in the last round (σ, d, clipped, reports, ε)."""
        return dict(self.last_round)

    def budget_stop(self, server_round: int) -> Optional[str]:
        """Before round ``server_round``: why it must not run, or None.

        Its planned charge is the round in which every sampled client replies with uniform
        weights: multiplier ``z·n/m`` on the sum (n sampled, m of σ; z under Poisson). Fewer
        replies or larger weights charge more; :meth:`withhold` catches those at release.
        """
        ledger = self.server_ledger if self._ledger_charges() else None
        if self.budget_stopped or self.accountant is None:
            return self.budget_stopped
        if self.budget is None and ledger is None:
            return None
        stdv, _ = self.mechanism.noise_stdv([], [])  # σ = z·C/m
        m = self.mechanism.num_sampled_clients
        n = m if self.fixed_denominator else self.accountant.sampled
        event = self.mechanism.round_event(stdv, num_reports=n, **self.accountant.sampling_spec())
        reason = self.budget.check(self.accountant, event, server_round) if self.budget else None
        if reason is None and ledger is not None:  # the lifetime server-max-epsilon
            reason = ledger.plan(event, server_round)
        self.budget_stopped = reason
        return self.budget_stopped

    def _ledger_charges(self) -> bool:
        """The server's ledger records this wrapper's releases: it has one, an accountant,
        an accountable mechanism and a mean (the releases with an ε)."""
        return (
            self.server_ledger is not None
            and self.accountant is not None
            and self.mechanism.accountable
            and self.noise_first
        )

    def withhold(
        self, server_round: int, stdv: float, num_reports: int, weights: Optional[list[float]]
    ) -> bool:
        """At release: True when this round's real charge would push ε past
        ``max_epsilon`` or the server's lifetime ``server-max-epsilon``; the round is then
        recorded as skipped and nothing is released. Otherwise the server's ledger (when
        it has one) has charged the round's event, committed, before the release leaves."""
        ledger = self.server_ledger if self._ledger_charges() else None
        if (self.budget is None and ledger is None) or self.accountant is None:
            return False
        n = self.mechanism.num_sampled_clients if self.fixed_denominator else num_reports
        event = self.mechanism.round_event(
            stdv, num_reports=n, weights=weights, **self.accountant.sampling_spec()
        )
        reason = self.budget.check(self.accountant, event, server_round) if self.budget else None
        if reason is None and ledger is not None:
            reason = ledger.charge(event, server_round)  # charged and committed, or declined
        if reason is None:
            return False
        self.budget_stopped = reason
        _log.log(WARNING, "%s: %s; nothing released", self.step_name, reason)
        self.finish_round(round_report(self.mechanism, stdv=None, skipped=reason,
                                       num_reports=num_reports))  # fmt: skip
        return True

    def skip_round(self, num_ok: int, num_failures: int, empty_reason: str) -> bool:
        """Flower's failure rule: True (round recorded as skipped) when any reply failed and
        failures are not accepted, or nothing arrived; warns when ``num_ok != m``."""
        if (num_failures and not self.accept_failures) or not num_ok:
            reason = empty_reason if not num_ok else "client failures"
            _log.log(INFO, "%s: %d failures, %d %s; skipping aggregation",
                     self.step_name, num_failures, num_ok, self.reply_name)  # fmt: skip
            self.finish_round(
                round_report(
                    self.mechanism,
                    stdv=None,
                    skipped=reason,
                    num_reports=num_ok,
                    num_failures=num_failures,
                )  # fmt: skip
            )
            return True
        # a fixed denominator keeps the sensitivity C/m whatever the number of replies
        if num_ok != self.mechanism.num_sampled_clients and not self.fixed_denominator:
            _log.log(WARNING, "%s: %d %s but num_sampled_clients = %d (sigma is calibrated to "
                     "m; fewer %s weaken the guarantee)", self.step_name, num_ok,
                     self.reply_name, self.mechanism.num_sampled_clients,
                     self.reply_name)  # fmt: skip
        return False

    def record_round(
        self,
        stdv: float,
        info: dict[str, Any],
        *,
        ids: list[int],
        flags: list[bool],
        weights: Optional[list[float]],
        noised: bool,
        num_failures: int = 0,
    ) -> dict[str, Any]:
        """Account a noised round and record its ``round_metrics()``; returns the record."""
        accounted = self._account(stdv, ids, weights) if noised else {}
        record = round_report(
            self.mechanism, stdv=stdv, info=info, num_clipped=sum(flags),
            clipped_nodes=[i for i, f in zip(ids, flags) if f], noised=noised,
            weighting=self.weighting, num_reports=len(ids), num_failures=num_failures,
            **accounted,
        )  # fmt: skip
        clients = (accounted.get("epsilon") or {}).get("clients")
        if clients is not None:
            record["dp-client-epsilon-nodes"] = clients
        if self.poisson and noised:  # fixed denominator: n < m is the sampling, not a loss
            record.pop("dp-underfilled", None)
            record["dp-sum-noise-multiplier"] = self.mechanism.noise_multiplier
        if noised:
            _log.log(INFO, "%s", round_line(self.step_name, record))
        return self.finish_round(record)

    def finish_round(self, record: dict[str, Any]) -> dict[str, Any]:
        """Make ``record`` the last round's report and append it to the history."""
        self.last_round = record
        self.history.append(record)
        return record

    def _account(
        self, stdv: float, ids: list[int], weights: Optional[list[float]]
    ) -> dict[str, Any]:
        """Compose the round's ``DpEvent``; the round's multiplier and ε so far."""
        # fixed denominator m (Poisson, canaries): the multiplier on the sum is z whatever n is
        n = self.mechanism.num_sampled_clients if self.fixed_denominator else len(ids)
        z_round = self.mechanism.round_noise_multiplier(stdv, n, weights)
        out: dict[str, Any] = {"round_noise_multiplier": z_round}
        if self.accountant is None or not self.mechanism.accountable:
            return out
        if not self.noise_first:
            return {**out, "no_epsilon": NO_EPSILON_NOT_A_MEAN}
        event = self.mechanism.round_event(
            stdv, num_reports=n, weights=weights, **self.accountant.sampling_spec()
        )
        out["epsilon"] = self.accountant.compose(event, z_round)
        if weights is not None:
            per = self.mechanism.client_noise_multipliers(stdv, weights)
            clients = self.accountant.charge_clients(dict(zip(ids, per)))
            out["epsilon"] = {**out["epsilon"], "clients": clients}
        return out


class MetricOptions:
    """Metric privacy (``σ = z·C/(m·d)``, MP §6): the explicit signature of both metric-DP
    wrappers, put before the API's global-DP wrapper in the bases. It swaps in
    :class:`fedpriv.privacy.dp.MetricScaledGaussian` (``distance_on`` = ``"clipped"`` (default;
    σ >= z·√L/(2m)) | ``"raw"``, ``min_distance`` > 0 and an optional ``max_distance`` cap;
    see that class for the d fallback). A heuristic: no ε; no Poisson sampling.
    """

    mechanism_class = MetricScaledGaussian

    def __init__(
        self,
        strategy: Any,
        *,
        noise_multiplier: float,
        clipping_norm: float,
        num_sampled_clients: int,
        distance_on: str = "clipped",
        min_distance: float = 1e-6,
        max_distance: Optional[float] = None,
        rng: Optional[Rng] = None,
        accept_failures: bool = False,
        mechanism: Optional[MetricScaledGaussian] = None,
        accountant: Optional[GaussianRoundsAccountant] = None,
        weighting: str = "uniform",
    ) -> None:
        super().__init__(  # type: ignore[call-arg]
            strategy, noise_multiplier=noise_multiplier, clipping_norm=clipping_norm,
            num_sampled_clients=num_sampled_clients, rng=rng, accept_failures=accept_failures,
            mechanism=mechanism, accountant=accountant, weighting=weighting,
            distance_on=distance_on, min_distance=min_distance, max_distance=max_distance,
        )  # fmt: skip
