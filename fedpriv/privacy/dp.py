"""Server-side DP mechanisms of one round, Flower-free (SPEC §3.1, §3.2; MP §6).

In the style of tensorflow-privacy's ``dp_query``: a mechanism object owns the parameters
and the math of one round; the Flower adapters (``strategies/dp_wrappers.py`` for the
Message API, ``strategies/legacy_dp.py`` for the legacy API) only move arrays in and out
of Flower's records. One round, for a global model ``w_g`` and client models ``w_i``:

1. clip every client model relative to the round's global model (FlatClip):
   ``w_i ← w_g + Δ_i · min(1, C/‖Δ_i‖)``, ``Δ_i = w_i − w_g``, flat L2 norm over all layers
   (:meth:`FixedClippingGaussian.clip`, ``fedpriv.privacy.mechanisms.clip_model_to_reference``);
2. the clipped models are averaged (FedAvg's arithmetic: uniform, or by example counts);
3. Gaussian noise ``N(0, σ²)`` is added to every element of that mean, which the inner
   strategy (its server optimizer) then receives as its only reply
   (:meth:`FixedClippingGaussian.add_noise_stdv`), with

   * global DP (:class:`FixedClippingGaussian`): ``σ = z·C/m``;
   * metric DP (:class:`MetricScaledGaussian`): ``σ = z·C/(m·d)``, d the maximum pairwise
     mean-over-layers Frobenius distance of the client models (``fedpriv.privacy.distance``).

z is the noise multiplier, C the clipping norm, m the number of sampled clients. This is
Flower's ``DifferentialPrivacyServerSideFixedClipping`` arithmetic exactly (same σ, same
output for the same noise draw).

Privacy meaning (global DP). Clipping each client's whole update to norm C and adding
noise of std ``z·C/m`` to the *uniform mean* of m updates is the Gaussian mechanism with
noise multiplier z on the sum (client-level DP). Each round the mechanism returns the
round's ``DpEvent`` (:meth:`FixedClippingGaussian.round_event`) and one
:class:`fedpriv.privacy.accounting.rounds.GaussianRoundsAccountant` composes them (headline ε: a
valid upper bound, named with its accountant, adjacency and sampling). Honest cases:

* aggregation weights: the wrappers make the inner strategy aggregate **uniformly** by
  default (``weighting="uniform"``). With ``weighting="examples"`` (FedAvg's num-examples,
  MP's setting) client i's weight w_i can exceed 1/m; the round's noise multiplier is then
  ``z/(m·w_max)`` (:meth:`FixedClippingGaussian.round_noise_multiplier`; example counts are
  treated as public) and per-client figures use each client's own weight;
* fewer reports than m (failures accepted, invalid updates dropped): weight 1/n > 1/m with
  σ calibrated to m, noise multiplier ``z·n/m`` — accounted that way and reported;
* the wrappers noise the clipped mean BEFORE the inner strategy and hand it the noised mean
  as one reply, so stateful server optimizers (FedAvgM, FedOpt/FedYogi) only post-process
  noised means and ε holds for them; an aggregator that is not a mean (FedMedian) gets the
  noise after its aggregate, as Flower does, and no ε (its sensitivity is not C/m).

Metric DP is a heuristic (:data:`METRIC_HEURISTIC`): no ε is reported for it, only σ, d and
the floor :func:`fedpriv.privacy.mechanisms.metric_sigma_lower_bound` that σ never goes below.

Randomness only through an explicit generator: a ``numpy.random.Generator`` (preferred) or
a legacy ``numpy.random.RandomState`` (whose ``normal`` draws are the same stream as
Flower's global ``np.random.normal`` after ``np.random.seed``; used for parity tests).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import dp_accounting
import numpy as np

from fedpriv.privacy.accounting.rounds import GaussianRoundsAccountant, epsilon_for_rounds
from fedpriv.privacy.distance import max_pairwise_layer_distance
from fedpriv.privacy.mechanisms import (
    add_gaussian_noise,
    clip_model_to_reference,
    gaussian_stdv,
    metric_sigma_lower_bound,
    metric_stdv,
)
from fedpriv.privacy.modes import global_dp, metric_dp
from fedpriv.privacy.protocol import Cohort, GaussianMechanism, Metrics, noise_norm
from fedpriv.validation import Rng, check_random_state

__all__ = [
    "NDArrays",
    "Rng",
    "DISTANCE_ON",
    "FALLBACK_FEW_CLIENTS",
    "FALLBACK_BELOW_FLOOR",
    "METRIC_HEURISTIC",
    "METRIC_GUARANTEE",
    "WEIGHTING",
    "metric_sigma_lower_bound",
    "FixedClippingGaussian",
    "MetricScaledGaussian",
    "ClippedRound",
    "GaussianRoundsAccountant",
    "epsilon_for_rounds",
    "round_report",
]

NDArrays = list[np.ndarray]
check_rng = check_random_state  # the one check (fedpriv.validation); name kept for callers

DISTANCE_ON = ("raw", "clipped")
FALLBACK_FEW_CLIENTS = "fewer-than-2-clients"
FALLBACK_BELOW_FLOOR = "distance-below-floor"
WEIGHTING = ("uniform", "examples")
METRIC_HEURISTIC = (
    "Metric DP (MP section 6) is a HEURISTIC, not a privacy guarantee: sigma = z*C/(m*d) "
    "scales the noise by the distance d between this round's client models, a data-dependent "
    "quantity, so no (epsilon, delta) and no formal d-privacy guarantee follows (neither the "
    "paper nor the code establishes one). What holds: with distance-on = clipped (the "
    "default) d <= 2C/sqrt(L), so sigma >= z*sqrt(L)/(2m) whatever the clients send "
    "(sigma_lower_bound); with distance-on = raw (the MP authors' code, an explicit choice) "
    "one client can inflate d and shrink sigma without limit. No epsilon is reported."
)
METRIC_GUARANTEE = METRIC_HEURISTIC  # previous name

_log = logging.getLogger("fedpriv.privacy.dp")


# --- validation -------------------------------------------------------------------------------


def _number(name: str, value: Any, *, lo: float = 0.0, lo_open: bool = False) -> float:
    """``float(value)`` if it is a finite real >= lo (> lo when ``lo_open``), else ValueError."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
    if ok:
        value = float(value)
        ok = math.isfinite(value) and value >= lo and not (lo_open and value == lo)
    if not ok:
        rel = ">" if lo_open else ">="
        raise ValueError(f"{name} = {value!r} is not allowed; expected a finite number {rel} {lo}")
    return float(value)


def _count(name: str, value: Any, *, lo: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ValueError(f"{name} = {value!r} is not allowed; expected an integer >= {lo}")
    return int(value)


# --- mechanisms -------------------------------------------------------------------------------


@dataclass
class ClippedRound:
    """Result of :meth:`FixedClippingGaussian.process`: clipped models, σ and what happened."""

    models: list[NDArrays]
    clipped: list[bool]
    stdv: float
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def num_clipped(self) -> int:
        """How many client updates were scaled down."""
        return int(sum(self.clipped))


class FixedClippingGaussian(GaussianMechanism):
    """Server-side fixed clipping + Gaussian noise, global DP (SPEC §3.1, MP §6).

    ``σ = z·C/m`` (``noise_multiplier`` z >= 0, ``clipping_norm`` C > 0,
    ``num_sampled_clients`` m >= 1), Flower's ``compute_stdv``. The noise multiplier on the
    sum of updates is z when n = m clients report; :meth:`sum_noise_multiplier` gives it for
    any n (``σ·n/C``). A :class:`fedpriv.privacy.protocol.GaussianMechanism` placed
    centrally (``add_noise`` with denominator m); the wrappers call :meth:`add_noise_stdv`.
    """

    mode = global_dp.MODE.name
    guarantee = "(epsilon, delta)-DP, client level"

    def __init__(
        self, *, noise_multiplier: float, clipping_norm: float, num_sampled_clients: int
    ) -> None:
        super().__init__(
            noise_multiplier=_number("noise_multiplier", noise_multiplier),
            clipping_norm=_number("clipping_norm", clipping_norm, lo_open=True),
        )
        self.num_sampled_clients = _count("num_sampled_clients", num_sampled_clients)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(noise_multiplier={self.noise_multiplier}, "
            f"clipping_norm={self.clipping_norm}, num_sampled_clients={self.num_sampled_clients})"
        )

    def clip(self, model: Sequence[np.ndarray], reference: Sequence[np.ndarray]):
        """``w_g + clip(w − w_g)`` for one client model; returns ``(arrays, was_clipped)``."""
        return clip_model_to_reference(model, reference, self.clipping_norm)

    def noise_stdv(
        self, raw_models: Sequence[NDArrays], clipped_models: Sequence[NDArrays]
    ) -> tuple[float, dict[str, Any]]:
        """``σ = z·C/m`` and an info dict (the models are not used by global DP)."""
        del raw_models, clipped_models
        stdv = gaussian_stdv(self.noise_multiplier, self.clipping_norm, self.num_sampled_clients)
        return stdv, {"round_noise_multiplier": self.noise_multiplier}

    def process(
        self, models: Sequence[Sequence[np.ndarray]], reference: Sequence[np.ndarray]
    ) -> ClippedRound:
        """Clip every client model relative to ``reference`` and compute σ of the round."""
        raw = [[np.asarray(a) for a in model] for model in models]
        pairs = [self.clip(model, reference) for model in raw]
        clipped = [arrays for arrays, _ in pairs]
        stdv, info = self.noise_stdv(raw, clipped)
        return ClippedRound(clipped, [flag for _, flag in pairs], stdv, info)

    def add_noise_stdv(self, arrays: Sequence[np.ndarray], stdv: float, rng: Rng) -> NDArrays:
        """New arrays ``a + N(0, σ²)`` for a given σ
        (``fedpriv.privacy.mechanisms.add_gaussian_noise``;
        a RandomState reproduces Flower's ``add_gaussian_noise_inplace`` after
        ``np.random.seed``). The protocol's :meth:`add_noise` computes σ from a denominator."""
        return add_gaussian_noise(arrays, _number("stdv", stdv), check_rng(rng))

    def sum_noise_multiplier(self, stdv: float, num_reports: int) -> float:
        """Noise multiplier on the sum of n uniformly weighted updates: ``σ·n/C``."""
        if num_reports == self.num_sampled_clients:
            return self.noise_multiplier
        return stdv * num_reports / self.clipping_norm

    def round_noise_multiplier(
        self, stdv: float, num_reports: int, weights: Optional[Sequence[float]] = None
    ) -> float:
        """``σ/(C·w_max)``: the noise multiplier the largest aggregation weight leaves.

        Uniform weights (None) over n reports: ``σ·n/C`` (z when n = m). Weights w
        (normalised here): client i contributes ``w_i·Δ_i``, ‖w_i·Δ_i‖ <= w_i·C, so
        relative to σ its multiplier is ``σ/(C·w_i)``; ``z/(m·w_max)`` for σ = z·C/m.
        """
        if not weights:
            return self.sum_noise_multiplier(stdv, num_reports)
        values = [float(w) for w in weights]
        total = sum(values)
        if total <= 0 or any(not math.isfinite(w) or w < 0 for w in values):
            raise ValueError(f"weights = {values!r} are not allowed; expected numbers >= 0")
        return stdv / (self.clipping_norm * max(values) / total)

    def client_noise_multipliers(self, stdv: float, weights: Sequence[float]) -> list[float]:
        """Each client's own multiplier ``σ/(C·w_i)`` (weights normalised; w_i = 0: inf)."""
        total = float(sum(weights))
        c = self.clipping_norm
        return [math.inf if w <= 0 else stdv * total / (c * float(w)) for w in weights]

    def round_event(
        self,
        stdv: float,
        *,
        num_reports: int,
        sampled: int,
        population: int,
        sampling: str = "fixed",
        weights: Optional[Sequence[float]] = None,
    ) -> Optional[dp_accounting.DpEvent]:
        """The ``DpEvent`` this round spent (:meth:`event` with
        :meth:`round_noise_multiplier`), for one accountant to compose; None when the
        mechanism is not :attr:`accountable`."""
        z_round = self.round_noise_multiplier(stdv, num_reports, weights)
        return self.event(
            noise_multiplier=z_round, sampled=sampled, population=population, sampling=sampling
        )

    def round_fields(self, info: dict[str, Any]) -> dict[str, Any]:
        """The mechanism's own keys of a round's report (:func:`round_report`): none."""
        return {}


class MetricScaledGaussian(FixedClippingGaussian):
    """Metric privacy (SPEC §3.2, MP §6, the authors' Flower fork): ``σ = z·C/(m·d)``.

    ``d = max_{i<j} (1/|L|) Σ_ℓ ‖w_i(ℓ) − w_j(ℓ)‖_F`` over the client models of the round.

    * ``distance_on="clipped"`` (default): d on ``w_g + clip(Δ_i)`` — what the paper's
      text says; then ``d <= 2C/√L`` and σ never drops below
      :meth:`sigma_lower_bound` = ``z·√L/(2m)``, whatever one client sends. ``"raw"``: d on
      the client weights as received, before clipping — what the authors' code does (the
      MP scenarios choose it explicitly); one client moved far away then inflates d and
      shrinks σ without limit unless ``max_distance`` caps d.
    * The paper's sentence "if d > 1 we add more noise" contradicts dividing by d; we follow
      the authors' code: larger d, less noise.
    * Fallback (never a crash or a division by zero): with fewer than two models d is
      undefined, and identical models give d = 0. Then, and whenever d < ``min_distance``,
      the wrapper uses ``d = min_distance`` (the largest σ it will add), records
      ``info["fallback"]`` = ``"fewer-than-2-clients"`` or ``"distance-below-floor"`` and
      logs a warning.
    * Guarantee: none formal, see :data:`METRIC_HEURISTIC`.
    """

    mode = metric_dp.MODE.name
    guarantee = "heuristic (metric DP): noise scaled by a data-dependent distance; no epsilon"
    accountable = False  # event() is None: no formal guarantee, no epsilon

    def __init__(
        self,
        *,
        noise_multiplier: float,
        clipping_norm: float,
        num_sampled_clients: int,
        distance_on: str = "clipped",
        min_distance: float = 1e-6,
        max_distance: Optional[float] = None,
    ) -> None:
        super().__init__(
            noise_multiplier=noise_multiplier,
            clipping_norm=clipping_norm,
            num_sampled_clients=num_sampled_clients,
        )
        if distance_on not in DISTANCE_ON:
            raise ValueError(
                f"distance_on = {distance_on!r} is not allowed; expected 'raw' or 'clipped'"
            )
        self.distance_on = distance_on
        self.min_distance = _number("min_distance", min_distance, lo_open=True)
        self.max_distance = (
            None if max_distance is None else _number("max_distance", max_distance, lo_open=True)
        )
        if self.max_distance is not None and self.max_distance < self.min_distance:
            raise ValueError(
                f"max_distance = {max_distance!r} is not allowed; expected >= min_distance"
            )

    def sigma_lower_bound(self, num_layers: int) -> float:
        """σ never goes below this (``fedpriv.privacy.mechanisms.metric_sigma_lower_bound``)."""
        return metric_sigma_lower_bound(
            self.noise_multiplier, self.clipping_norm, self.num_sampled_clients, num_layers,
            distance_on=self.distance_on, max_distance=self.max_distance,
        )  # fmt: skip

    def __repr__(self) -> str:
        return (
            super().__repr__()[:-1]
            + f", distance_on={self.distance_on!r}, min_distance={self.min_distance})"
        )

    def distance(
        self, raw_models: Sequence[NDArrays], clipped_models: Sequence[NDArrays]
    ) -> tuple[Optional[float], float, Optional[str]]:
        """``(d measured or None if undefined, d used, fallback or None)`` for the round."""
        models = raw_models if self.distance_on == "raw" else clipped_models
        if len(models) < 2:
            return None, self.min_distance, FALLBACK_FEW_CLIENTS
        measured = max_pairwise_layer_distance(models)
        if measured < self.min_distance:
            return measured, self.min_distance, FALLBACK_BELOW_FLOOR
        if self.max_distance is not None and measured > self.max_distance:
            return measured, self.max_distance, None
        return measured, measured, None

    def noise_stdv(
        self, raw_models: Sequence[NDArrays], clipped_models: Sequence[NDArrays]
    ) -> tuple[float, dict[str, Any]]:
        """``σ = z·C/(m·d)`` with the floored d, and an info dict (d, fallback)."""
        measured, used, fallback = self.distance(raw_models, clipped_models)
        if fallback is not None:
            _log.warning(
                "metric DP: %s (%d models, measured d = %s); using d = min_distance = %g",
                fallback, len(raw_models), measured, used,
            )  # fmt: skip
        z, c, m = self.noise_multiplier, self.clipping_norm, self.num_sampled_clients
        stdv = metric_stdv(z, c, m, used)
        info = {
            "distance": used,
            "distance_measured": measured,
            "distance_on": self.distance_on,
            "fallback": fallback,
            "round_noise_multiplier": self.noise_multiplier / used,
            "sigma_lower_bound": self.sigma_lower_bound(len(clipped_models[0]))
            if clipped_models
            else None,
        }
        return stdv, info

    def add_noise(
        self,
        aggregate: Sequence[np.ndarray],
        *,
        denominator: float,
        rng: Optional[Rng],
        cohort: Optional[Cohort] = None,
    ) -> tuple[NDArrays, Metrics]:
        """The protocol's noise step: ``aggregate + N(0, σ²)``, ``σ = (z/d)·C/denominator``.

        d from ``cohort`` = (raw models, clipped models) of the round (:meth:`distance`; no
        cohort: the fallback d = ``min_distance``, the largest σ). With denominator m this is
        :meth:`noise_stdv`'s σ exactly. Metrics: ``sigma``, ``noise_norm`` and the info of
        :meth:`noise_stdv` (d, fallback).
        """
        raw, clipped = cohort if cohort is not None else ([], [])
        den = _number("denominator", denominator, lo_open=True)
        _, info = self.noise_stdv(raw, clipped)
        sigma = ((self.noise_multiplier / info["distance"]) * self.clipping_norm) / den
        noised = add_gaussian_noise(aggregate, sigma, check_rng(rng))
        return noised, {**info, "sigma": sigma, "noise_norm": noise_norm(noised, aggregate)}

    def event(self, **kwargs: Any) -> None:
        """No ``DpEvent``: metric DP is a heuristic (:data:`METRIC_HEURISTIC`)."""

    def round_fields(self, info: dict[str, Any]) -> dict[str, Any]:
        """Metric DP's keys of a round's report: d used and measured, the fallback, the σ
        floor and the heuristic's label."""
        return {
            "dp-distance": info.get("distance"),
            "dp-distance-measured": info.get("distance_measured"),
            "dp-fallback": info.get("fallback"),
            "dp-sigma-lower-bound": info.get("sigma_lower_bound"),
            "dp-heuristic": "metric DP: no epsilon (noise scaled by a data-dependent d)",
        }

    def sum_noise_multiplier(self, stdv: float, num_reports: int) -> float:
        """``σ·n/C`` — the noise multiplier on the sum that the same σ gives (comparison)."""
        return stdv * num_reports / self.clipping_norm


# --- round report -----------------------------------------------------------------------------


def round_report(
    mechanism: FixedClippingGaussian,
    *,
    stdv: Optional[float],
    info: Optional[dict[str, Any]] = None,
    num_clipped: int = 0,
    clipped_nodes: Sequence[int] = (),
    num_reports: int = 0,
    num_failures: int = 0,
    noised: bool = False,
    skipped: Optional[str] = None,
    epsilon: Optional[dict[str, Any]] = None,
    round_noise_multiplier: Optional[float] = None,
    weighting: str = "uniform",
    no_epsilon: Optional[str] = None,
) -> dict[str, Any]:
    """The ``round_metrics()`` dict both adapters return (keys of rounds.jsonl).

    ``dp-sigma``, ``dp-num-reports``, ``dp-num-clipped``, ``dp-clipped-nodes`` (node ids; the
    recorder turns them into partition ids under ``dp-clipped``), ``dp-noised``,
    ``dp-weighting``, ``dp-round-noise-multiplier`` (σ/(C·w_max), what the accountant
    charged). Metric DP adds ``dp-distance`` (used), ``dp-distance-measured``,
    ``dp-fallback``, ``dp-sigma-lower-bound`` and ``dp-heuristic`` — and no ε. When fewer
    than m clients report, ``dp-underfilled`` says so. Global DP with an accountant:
    ``dp-epsilon`` (the headline upper bound), ``dp-epsilon-pld``, ``dp-epsilon-rdp``,
    ``dp-delta``, ``dp-accountant``, ``dp-adjacency``, ``dp-sampling``, ``dp-noised-rounds``;
    an aggregator that is not a mean (FedMedian) gets ``dp-no-epsilon`` (why) instead.
    """
    info = info or {}
    out: dict[str, Any] = {
        "dp-mode": mechanism.mode,
        "dp-sigma": stdv,
        "dp-num-reports": num_reports,
        "dp-num-failures": num_failures,
        "dp-num-clipped": num_clipped,
        "dp-clipped-nodes": list(clipped_nodes),
        "dp-noised": noised,
        "dp-weighting": weighting,
    }
    if skipped:
        out["dp-skipped"] = skipped
    out.update(mechanism.round_fields(info))
    if noised and stdv is not None:
        out["dp-sum-noise-multiplier"] = mechanism.sum_noise_multiplier(stdv, num_reports)
        if round_noise_multiplier is not None:
            out["dp-round-noise-multiplier"] = round_noise_multiplier
    if noised and num_reports < mechanism.num_sampled_clients:
        out["dp-underfilled"] = (
            f"{num_reports} of m = {mechanism.num_sampled_clients} reports: sensitivity of the "
            "mean is C/n > C/m with sigma calibrated to m; the guarantee is weaker "
            "(accounted with noise multiplier sigma*n/C)"
        )
    if no_epsilon:
        out["dp-no-epsilon"] = no_epsilon
    if epsilon is not None and mechanism.accountable:
        for key in ("epsilon", "epsilon_pld", "epsilon_rdp"):
            out["dp-" + key.replace("_", "-")] = epsilon.get(key)
        out["dp-delta"] = epsilon.get("delta")
        out["dp-accountant"] = epsilon.get("accountant")
        out["dp-adjacency"] = epsilon.get("adjacency")
        out["dp-sampling"] = epsilon.get("sampling")
        out["dp-noised-rounds"] = epsilon.get("rounds")
    return out
