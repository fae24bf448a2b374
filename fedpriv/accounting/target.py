"""The smallest noise multiplier that meets a target ε (``fedpriv epsilon --target-epsilon``).

For a resolved run config, ε(z) is the headline ε the run would report with noise multiplier
z, computed by the same function as the run and :func:`fedpriv.accounting.planning.privacy_plan`:

* ``global-dp``: :func:`fedpriv.accounting.rounds.global_dp_epsilon` of ``num-server-rounds``
  rounds at ``z·f`` (f of :func:`fedpriv.accounting.planning.global_dp_round_factor`: m'/m
  uniform, the worst 1/(m·w_max) with example weights);
* ``dp-sgd``: :func:`fedpriv.dpsgd.client_epsilon` of a client with ``examples_per_client``
  examples that trains in every round (the plan's worst case);
* ``zonal``: one noising level's Gaussian for a client in every round, without amplification
  by sampling (the plan's headline).

:func:`fedpriv.accounting.budget.smallest_noise_multiplier` bisects it (relative tolerance
:data:`fedpriv.accounting.budget.REL_TOL`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from fedpriv.accounting.budget import REL_TOL, smallest_noise_multiplier
from fedpriv.accounting.planning import PlanError, global_dp_round_factor

__all__ = ["epsilon_function", "noise_for_target", "target_modes"]


def target_modes() -> tuple[str, ...]:
    """The modes with an ε to target (``Mode.epsilon_of_z``)."""
    from fedpriv.modes import get, names

    return tuple(n for n in names() if get(n).epsilon_of_z is not None)


def _as_float(value: Any) -> float:
    return math.inf if value == "inf" else float(value)


def global_dp_of_z(cfg: Mapping[str, Any]) -> Callable[[float], float]:
    from fedpriv.accounting.rounds import global_dp_epsilon
    from fedpriv.participation import Participation

    if str(cfg.get("strategy", "fedavg")) == "fedmedian":
        raise PlanError("strategy = 'fedmedian' has no epsilon (not a mean); no target to meet")
    part = Participation.from_config(cfg)
    factor, _ = global_dp_round_factor(cfg)
    rounds, delta = int(cfg.get("num-server-rounds", 1)), float(cfg.get("dp-delta", 1e-5))
    weighting = str(cfg.get("dp-weighting", "uniform"))

    def epsilon(z: float) -> float:
        report = global_dp_epsilon([z * factor] * rounds, part, delta=delta, weighting=weighting)
        return _as_float(report["epsilon"])

    return epsilon


def dp_sgd_of_z(cfg: Mapping[str, Any], examples: int | None) -> Callable[[float], float]:
    from fedpriv import dpsgd

    if examples is None:
        raise PlanError("dp-sgd: pass --examples-per-client (a client's training examples)")
    common = dict(
        num_examples=int(examples),
        batch_size=int(cfg.get("batch-size", 32)),
        local_epochs=int(cfg.get("local-epochs", 1)),
        participations=int(cfg.get("num-server-rounds", 1)),
        delta=float(cfg.get("dp-delta", 1e-5)),
    )
    return lambda z: float(dpsgd.client_epsilon(**common, noise_multiplier=z).epsilon)


def zonal_of_z(cfg: Mapping[str, Any]) -> Callable[[float], float]:
    from fedpriv.accounting.gaussian import dp_epsilon

    population = int(cfg.get("num-clients", 1))
    rounds, delta = int(cfg.get("num-server-rounds", 1)), float(cfg.get("dp-delta", 1e-5))
    return lambda z: float(
        dp_epsilon(z, rounds=rounds, sampled=population, population=population, delta=delta).epsilon
    )


def epsilon_function(
    cfg: Mapping[str, Any], *, examples_per_client: int | None = None
) -> Callable[[float], float]:
    """ε(z) of the config's privacy mode (module docstring); PlanError if it has none."""
    from fedpriv.modes import ModeError, mode_of, name_of

    try:
        mode = mode_of(cfg)
    except ModeError as err:
        raise PlanError(str(err)) from None
    if mode.epsilon_of_z is None:
        raise PlanError(
            f"privacy = {name_of(cfg)!r} has no epsilon to target; expected one of "
            + " | ".join(target_modes())
        )
    return mode.epsilon_of_z(cfg, examples_per_client)


def noise_for_target(
    cfg: Mapping[str, Any],
    target: float,
    *,
    examples_per_client: int | None = None,
    rel_tol: float = REL_TOL,
) -> dict[str, Any]:
    """The smallest noise multiplier with ε <= ``target`` for this config, and its ε."""
    epsilon_of = epsilon_function(cfg, examples_per_client=examples_per_client)
    z, epsilon = smallest_noise_multiplier(epsilon_of, target, rel_tol=rel_tol)
    from fedpriv.modes import mode_of

    mode = mode_of(cfg)
    return {
        "mode": mode.name,
        "key": mode.noise_key,
        "noise_multiplier": z,
        "epsilon": epsilon,
        "target_epsilon": float(target),
        "rel_tol": rel_tol,
        "rounds": int(cfg.get("num-server-rounds", 1)),
    }
