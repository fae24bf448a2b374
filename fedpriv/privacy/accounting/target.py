"""The smallest noise multiplier that meets a target ε (``fedpriv epsilon --target-epsilon``).

For a run's spec (:class:`fedpriv.spec.RunSpec`), ε(z) is the headline ε the run would report
with noise multiplier z (the spec at z: ``spec.mode.with_noise(spec, z)``), computed by the
same function as the run and :func:`fedpriv.privacy.accounting.planning.privacy_plan`:

* ``global-dp``: :func:`fedpriv.privacy.accounting.rounds.global_dp_epsilon` of ``spec.rounds``
  rounds at ``z·f`` (f of :func:`fedpriv.privacy.accounting.planning.global_dp_round_factor`: m'/m
  uniform, the worst 1/(m·w_max) with example weights);
* ``dp-sgd``: :func:`fedpriv.privacy.dpsgd.client_epsilon` of a client with ``examples_per_client``
  examples that trains in every round (the plan's worst case);
* ``zonal``: one noising level's Gaussian for a client in every round, without amplification
  by sampling (the plan's headline).

:func:`fedpriv.privacy.accounting.budget.smallest_noise_multiplier` bisects it (relative tolerance
:data:`fedpriv.privacy.accounting.budget.REL_TOL`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from fedpriv.privacy.accounting.budget import REL_TOL, smallest_noise_multiplier
from fedpriv.privacy.accounting.planning import NOT_A_MEAN, PlanError, global_dp_round_factor
from fedpriv.spec import RunSpec

__all__ = ["epsilon_function", "noise_for_target", "target_modes"]


def target_modes() -> tuple[str, ...]:
    """The modes with an ε to target (``Mode.epsilon_of_z``)."""
    from fedpriv.privacy.modes import get, names

    return tuple(n for n in names() if get(n).epsilon_of_z is not None)


def _as_float(value: Any) -> float:
    return math.inf if value == "inf" else float(value)


def global_dp_of_z(spec: RunSpec) -> Callable[[float], float]:
    """ε(z) of global DP: ``spec.rounds`` rounds at ``z·f`` (uniform or worst-case weights)."""
    from fedpriv.privacy.accounting.rounds import global_dp_epsilon

    if spec.strategy.strategy in NOT_A_MEAN:
        raise PlanError(
            f"strategy = {spec.strategy.strategy!r} has no epsilon (not a mean); no target to meet"
        )
    part, params = spec.participation, spec.params
    factor, _ = global_dp_round_factor(spec)
    rounds, delta, weighting = spec.rounds, float(params.delta), spec.dp_weighting

    def epsilon(z: float) -> float:
        report = global_dp_epsilon([z * factor] * rounds, part, delta=delta, weighting=weighting)
        return _as_float(report["epsilon"])

    return epsilon


def dp_sgd_of_z(spec: RunSpec, examples: int | None) -> Callable[[float], float]:
    """ε(z) of a DP-SGD client with ``examples`` examples that trains in every round."""
    from fedpriv.privacy import dpsgd

    if examples is None:
        raise PlanError("dp-sgd: pass --examples-per-client (a client's training examples)")
    params = spec.params
    common = dict(
        num_examples=int(examples),
        batch_size=int(params.batch_size),
        local_epochs=int(params.local_epochs),
        participations=int(spec.rounds),
        delta=float(params.delta),
    )
    return lambda z: float(dpsgd.client_epsilon(**common, noise_multiplier=z).epsilon)


def zonal_of_z(spec: RunSpec) -> Callable[[float], float]:
    """ε(z) of one noising level's Gaussian for a client in every round (no amplification)."""
    from fedpriv.privacy.accounting.gaussian import dp_epsilon

    population = spec.participation.population
    rounds, delta = int(spec.rounds), float(spec.params.delta)
    return lambda z: float(
        dp_epsilon(z, rounds=rounds, sampled=population, population=population, delta=delta).epsilon
    )


def epsilon_function(
    spec: RunSpec, *, examples_per_client: int | None = None
) -> Callable[[float], float]:
    """ε(z) of the spec's privacy mode (module docstring); PlanError if it has none."""
    mode = spec.mode
    if mode.epsilon_of_z is None:
        raise PlanError(
            f"privacy = {mode.name!r} has no epsilon to target; expected one of "
            + " | ".join(target_modes())
        )
    return mode.epsilon_of_z(spec, examples_per_client)


def noise_for_target(
    spec: RunSpec,
    target: float,
    *,
    examples_per_client: int | None = None,
    rel_tol: float = REL_TOL,
) -> dict[str, Any]:
    """The smallest noise multiplier with ε <= ``target`` for this spec, and its ε."""
    epsilon_of = epsilon_function(spec, examples_per_client=examples_per_client)
    z, epsilon = smallest_noise_multiplier(epsilon_of, target, rel_tol=rel_tol)
    return {
        "mode": spec.mode.name,
        "key": spec.mode.noise_key,
        "noise_multiplier": z,
        "epsilon": epsilon,
        "target_epsilon": float(target),
        "rel_tol": rel_tol,
        "rounds": int(spec.rounds),
    }
