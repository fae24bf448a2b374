"""The privacy figures a run config implies, before any data or training (``fedpriv epsilon``).

:func:`privacy_plan` takes a *resolved* run config (a mapping of the run-config keys) and
returns one JSON-ready dict: the headline ``epsilon`` (a valid upper bound, or ``None`` for
mechanisms without a guarantee), ``delta``, ``accountant``, ``adjacency``, ``sampling``,
the per-round series and notes. It imports no TensorFlow, Ray or matplotlib and works for
any population size. :func:`headline_epsilon` is the one number (config -> ε) other tools
compare against (e.g. empirical lower bounds of an audit).

Per privacy mode:

* ``global-dp``: client level, the server-side Gaussian (σ = z·C/m'), ``client-sampling``
  fixed (replace-one, m of N without replacement) or poisson (add/remove-one), uniform
  aggregation (``dp-weighting = uniform``); with ``examples`` weighting the figure depends on
  the partition's example counts, which a config does not know: the plan gives the uniform
  figure and says so (the run reports the realised one);
* ``metric-dp``: no ε (a heuristic); σ's floor ``z·√L/(2m)`` for d on clipped models;
* ``dp-sgd``: example level per client, ``epochs = local-epochs x rounds`` (a client sampled
  every round, the worst case); needs the client's example count (``examples_per_client``);
* ``zonal``: a level's Gaussian (z, k of n per round; with and without amplification by
  sampling — the latter is what holds against the party that samples);
* IFCA (``ifca-noise-multiplier``): GP's heuristic leakage n/ν per participation, no ε;
* ``none``: ε = inf.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import fedpriv.accounting.gaussian as gaussian
from fedpriv.accounting.events import labels_for

__all__ = ["privacy_plan", "headline_epsilon", "PlanError"]

METRIC_NOTE = (
    "metric DP is a heuristic: sigma = z*C/(m*d) with a data-dependent distance d; no "
    "epsilon. With distance-on = clipped, sigma >= z*sqrt(L)/(2m) (L = number of layers)."
)


class PlanError(ValueError):
    """The config lacks what a figure needs (one line naming it)."""


def _num(value: Any) -> Any:
    """JSON-safe number: infinities as ``"inf"``."""
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return value


def _sampled(cfg: Mapping[str, Any]) -> tuple[int, int]:
    population = int(cfg.get("num-clients", 1))
    per_round = int(cfg.get("clients-per-round", 0) or 0)
    return (per_round if 0 < per_round < population else population), population


def _series(reports: list) -> dict[str, list]:
    return {
        "round": [r.rounds for r in reports],
        "epsilon": [_num(r.epsilon) for r in reports],
        "epsilon_pld": [_num(r.epsilon_pld) for r in reports],
        "epsilon_rdp": [_num(r.epsilon_rdp) for r in reports],
    }


def _gaussian_plan(
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
        "epsilon": _num(last.epsilon),
        "epsilon_pld": _num(last.epsilon_pld),
        "epsilon_rdp": _num(last.epsilon_rdp),
        "headline_from": last.headline_from,
        "delta": delta,
        "accountant": last.accountant,
        "adjacency": last.adjacency,
        "sampling": last.sampling,
        "rounds": rounds,
        "per_round": _series(reports),
    }


def _global_dp(cfg: Mapping[str, Any]) -> dict[str, Any]:
    sampled, population = _sampled(cfg)
    z = float(cfg.get("noise-multiplier", 0.0))
    m_noise = int(cfg.get("num-sampled-clients", 0) or 0) or sampled
    z_round = z * sampled / m_noise  # σ = z·C/m', uniform mean of `sampled` reports
    sampling = str(cfg.get("client-sampling", "fixed"))
    plan = _gaussian_plan(
        z_round,
        int(cfg.get("num-server-rounds", 1)),
        sampled,
        population,
        float(cfg.get("dp-delta", 1e-5)),
        sampling,
    )
    notes = ["client-level DP of the server-side Gaussian mechanism (every round noised)"]
    if str(cfg.get("dp-weighting", "uniform")) == "examples":
        notes.append(
            "dp-weighting = examples: the run charges z/(m*w_max) per round from the example "
            "counts it receives (and per-client epsilon); this plan assumes uniform weights"
        )
    if m_noise != sampled:
        notes.append(f"sigma is calibrated to m' = {m_noise} for {sampled} sampled clients")
    return {"mode": "global-dp", "round_noise_multiplier": z_round, **plan, "notes": notes}


def _dp_sgd(cfg: Mapping[str, Any], examples: int | None) -> dict[str, Any]:
    from fedpriv import dpsgd

    rounds = int(cfg.get("num-server-rounds", 1))
    local = int(cfg.get("local-epochs", 1))
    out: dict[str, Any] = {
        "mode": "dp-sgd",
        "delta": float(cfg.get("dp-sgd-delta", 1e-5)),
        "accountant": dpsgd.ACCOUNTANT_TEXT,
        "adjacency": dpsgd.ADJACENCY_TEXT,
        "sampling": dpsgd.SAMPLING_TEXT,
        "notes": ["worst case: a client sampled in every round (epochs = local-epochs x rounds)"],
    }
    if examples is None:
        out.update(epsilon=None, notes=out["notes"] + ["pass the client's example count"])
        return out
    batch = int(cfg.get("batch-size", 32))
    common = dict(
        num_examples=int(examples),
        batch_size=batch,
        local_epochs=local,
        noise_multiplier=float(cfg.get("dp-sgd-noise-multiplier", 1.0)),
        delta=out["delta"],
    )
    per_round = [dpsgd.client_epsilon(**common, participations=r) for r in range(1, rounds + 1)]
    out.update(
        epsilon=_num(per_round[-1].epsilon),
        rounds=rounds,
        per_round={
            "round": list(range(1, rounds + 1)),
            "epsilon": [_num(e.epsilon) for e in per_round],
        },
    )
    return out


def _zonal(cfg: Mapping[str, Any]) -> dict[str, Any]:
    sampled, population = _sampled(cfg)
    z = float(cfg.get("zonal-noise-multiplier", 0.0))
    rounds = int(cfg.get("num-server-rounds", 1))
    delta = float(cfg.get("zonal-delta", 1e-5))
    unsampled = _gaussian_plan(z, rounds, population, population, delta, "fixed")
    amplified = _gaussian_plan(z, rounds, sampled, population, delta, "fixed")
    return {
        "mode": "zonal",
        "placement": cfg.get("noise-placement"),
        **unsampled,
        "epsilon_with_sampling_amplification": amplified["epsilon"],
        "notes": [
            "headline: one noising level's Gaussian (z) for a client in every round, without "
            "amplification by sampling - what holds against the party that samples",
            "epsilon_with_sampling_amplification assumes the observer does not know who was "
            "sampled; HDP's eps/sqrt(k) aggregator figures are heuristics (see README)",
        ],
    }


def _ifca(cfg: Mapping[str, Any]) -> dict[str, Any]:
    nu = float(cfg.get("ifca-noise-multiplier", 0.0))
    per = None if nu == 0 else "n/nu per participation (n = number of model parameters)"
    return {
        "mode": "ifca",
        "epsilon": None,
        "leakage_per_participation": per,
        "noise_multiplier": nu,
        "notes": [
            "GP leakage is a heuristic relative to the data-dependent scale ||delta||; "
            "no (epsilon, delta) guarantee"
            if nu
            else "nu = 0: no sanitization"
        ],
    }


def privacy_plan(cfg: Mapping[str, Any], *, examples_per_client: int | None = None) -> dict:
    """All privacy figures the config implies (see the module docstring)."""
    mode = str(cfg.get("privacy", "none"))
    if "ifca-noise-multiplier" in cfg and str(cfg.get("scenario-kind", "")) == "ifca":
        return _ifca(cfg)
    if mode == "global-dp":
        return _global_dp(cfg)
    if mode == "metric-dp":
        sampled, population = _sampled(cfg)
        return {
            "mode": "metric-dp",
            "epsilon": None,
            "heuristic": METRIC_NOTE,
            "distance_on": cfg.get("distance-on", "clipped"),
            **{k: v for k, v in labels_for("fixed", sampled, population).items()},
            "accountant": "none (heuristic)",
        }
    if mode == "dp-sgd":
        return _dp_sgd(cfg, examples_per_client)
    if mode == "zonal":
        return _zonal(cfg)
    return {"mode": mode, "epsilon": "inf", "notes": ["no privacy mechanism"]}


def headline_epsilon(cfg: Mapping[str, Any], *, examples_per_client: int | None = None) -> float:
    """The headline ε (a valid upper bound) of a resolved config; ValueError if it has none."""
    plan = privacy_plan(cfg, examples_per_client=examples_per_client)
    value = plan.get("epsilon")
    if value is None:
        raise PlanError(f"privacy = {plan['mode']!r} has no epsilon guarantee (see its notes)")
    return math.inf if value == "inf" else float(value)
