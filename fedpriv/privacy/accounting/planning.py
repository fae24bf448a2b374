"""The privacy figures a run implies, before any data or training (``fedpriv epsilon``).

:func:`privacy_plan` takes a run's typed spec (:class:`fedpriv.spec.RunSpec`, built from a
resolved run config by ``fedpriv.scenarios.config.specs.run_spec``) and returns one JSON-ready
dict: the
headline ``epsilon`` (a valid upper bound, or ``None`` for mechanisms without a guarantee),
``delta``, ``accountant``, ``adjacency``, ``sampling``, the per-round series and notes. It
imports no TensorFlow, Ray or matplotlib and works for any population size.
:func:`headline_epsilon` is the one number (spec -> ε) other tools compare against (e.g.
empirical lower bounds of an audit).

Per privacy mode (each in its own module of :mod:`fedpriv.privacy.modes`, its ``plan``; the
helpers shared by the Gaussian modes stay here):

* ``global-dp``: client level, the server-side Gaussian (σ = z·C/m'), ``client-sampling``
  fixed (replace-one, m of N without replacement) or poisson (add/remove-one), uniform
  aggregation (``dp-weighting = uniform``); with ``examples`` weighting the worst w_max over
  the partition's example counts. ``epsilon`` holds when every sampled client's reply is
  valid and arrives (``epsilon_condition``); where the config lets a round aggregate fewer
  replies (``invalid-update = drop``, the default, or ``accept-failures = true``) and the
  denominator is not fixed, ``epsilon_worst_case`` bounds every outcome the config allows,
  down to one reply per round (multiplier z/m'), next to its condition;
* ``metric-dp``: no ε (a heuristic); σ's floor ``z·√L/(2m)`` for d on clipped models;
* ``dp-sgd``: example level per client, ``epochs = local-epochs x rounds`` (a client sampled
  every round, the worst case); needs the client's example count (``examples_per_client``);
* ``zonal``: a level's Gaussian (z, k of n per round; with and without amplification by
  sampling — the latter is what holds against the party that samples);
* IFCA (``ifca-noise-multiplier``): GP's heuristic leakage n/ν per participation, no ε;
* ``none``: ε = inf.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import fedpriv.privacy.accounting.gaussian as gaussian
from fedpriv.spec import DataSpec, RunSpec

__all__ = ["privacy_plan", "headline_epsilon", "PlanError", "gaussian_plan", "json_number"]


class PlanError(ValueError):
    """The config lacks what a figure needs (one line naming it)."""


def json_number(value: Any) -> Any:
    """JSON-safe number: infinities as ``"inf"``."""
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return value


def _series(reports: list) -> dict[str, list]:
    return {
        "round": [r.rounds for r in reports],
        "epsilon": [json_number(r.epsilon) for r in reports],
        "epsilon_pld": [json_number(r.epsilon_pld) for r in reports],
        "epsilon_rdp": [json_number(r.epsilon_rdp) for r in reports],
    }


def gaussian_plan(
    z: float, rounds: int, sampled: int, population: int, delta: float, sampling: str
) -> dict[str, Any]:
    reports = gaussian.epsilon_per_round_series(
        z,
        rounds=rounds,
        sampled=sampled,
        population=population,
        delta=delta,
        sampling=sampling,
        points=50 if rounds > 200 else 200,
    )
    last = reports[-1]
    return {
        "epsilon": json_number(last.epsilon),
        "epsilon_pld": json_number(last.epsilon_pld),
        "epsilon_rdp": json_number(last.epsilon_rdp),
        "headline_from": last.headline_from,
        "delta": delta,
        "accountant": last.accountant,
        "adjacency": last.adjacency,
        "sampling": last.sampling,
        "rounds": rounds,
        "per_round": _series(reports),
    }


NOT_A_MEAN = ("fedmedian",)


def worst_case_weight(counts: Sequence[int], per_round: int) -> float:
    """The largest normalised weight any sample of ``per_round`` clients gives one client:
    ``n_max / (n_max + Σ of the per_round − 1 smallest other counts)``."""
    ordered = sorted(int(c) for c in counts)
    top = ordered[-1]
    total = top + sum(ordered[: max(per_round - 1, 0)])
    return 1.0 if total <= 0 else top / total


def example_counts(data: DataSpec) -> tuple[list[int] | None, str]:
    """Every client's training-example count from the run's data (``fedpriv.data``), or
    None and why (the data may be absent where the plan is made)."""
    try:
        from fedpriv.data import load_federated

        federated = load_federated(**dataclasses.asdict(data))
    except Exception as err:  # noqa: BLE001 - any failure falls back to the worst case
        return None, f"{type(err).__name__}: {err}"
    return [len(c.x_train) for c in federated.clients], ""


def global_dp_round_factor(spec: RunSpec) -> tuple[float, list[str]]:
    """``z_round / z`` of the worst round the spec allows, and what it assumed.

    Uniform weights: ``m'/m`` (the run's ``z·m'/m``, σ = z·C/m, m' sampled). Example
    weights: ``1/(m·w_max)`` with w_max the worst over any sample of the partition's
    example counts (loaded from the data), or w_max = 1 when they cannot be loaded.
    """
    part = spec.participation
    if spec.dp_weighting != "examples":
        return part.per_round / part.noise_clients, []
    counts, why = example_counts(spec.data)
    w_max = 1.0 if counts is None else worst_case_weight(counts, part.per_round)
    note = (
        f"dp-weighting = examples: worst case over samples, w_max = {w_max:.6g} "
        + ("from the partition's example counts" if counts else f"(no counts: {why})")
        + "; the run charges its realised w_max, never more"
    )
    return 1.0 / (part.noise_clients * w_max), [note]


ALL_REPLY_CONDITION = (
    "holds when every sampled client's reply is valid and arrives; a round that aggregates "
    "fewer replies charges more (see epsilon_worst_case)"
)


def reply_losses(spec: RunSpec) -> list[str]:
    """Why the spec lets a round aggregate fewer replies than it sampled ([]: it cannot,
    or the denominator is fixed, so fewer replies do not raise the charge)."""
    if spec.participation.sampling == "poisson":
        return []  # the clipped sum is divided by the fixed m: the multiplier stays z
    reasons = []
    if spec.invalid_update == "drop":
        reasons.append("invalid-update = drop (an invalid reply is left out)")
    if spec.strategy.accept_failures:
        reasons.append("accept-failures = true (a failed reply is left out)")
    return reasons


def worst_case(spec: RunSpec, z: float, rounds: int, delta: float) -> dict[str, Any]:
    """The ε of every round aggregating a single reply (weight 1 of 1: multiplier z/m'), the
    most any outcome of :func:`reply_losses` charges; {} when no reply can be left out."""
    from fedpriv.privacy.accounting.rounds import global_dp_epsilon

    reasons = reply_losses(spec)
    if not reasons:
        return {}
    part = spec.participation
    z_one = z / part.noise_clients
    report = global_dp_epsilon([z_one] * rounds, part, delta=delta, weighting=spec.dp_weighting)
    return {
        "epsilon_worst_case": json_number(report.get("epsilon")),
        "epsilon_worst_case_condition": (
            "every outcome the config allows (" + "; ".join(reasons) + "): down to one "
            f"reply per round, multiplier z/m' = {z_one:.6g}"
        ),
    }


def privacy_plan(spec: RunSpec, *, examples_per_client: int | None = None) -> dict:
    """All privacy figures the spec implies: its mode's own planning function
    (``fedpriv.privacy.modes.<mode>.plan``)."""
    return spec.mode.plan(spec, examples_per_client)


def headline_epsilon(spec: RunSpec, *, examples_per_client: int | None = None) -> float:
    """The headline ε (a valid upper bound) of a run's spec; :class:`PlanError` if it has none."""
    plan = privacy_plan(spec, examples_per_client=examples_per_client)
    value = plan.get("epsilon")
    if value is None:
        raise PlanError(f"privacy = {plan['mode']!r} has no epsilon guarantee (see its notes)")
    return math.inf if value == "inf" else float(value)
