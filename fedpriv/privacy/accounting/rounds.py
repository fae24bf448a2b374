"""Client-level ε of a run, round by round: the accountant the DP wrappers hold.

:class:`GaussianRoundsAccountant` turns each noised round of the server-side Gaussian
mechanism (its noise multiplier on the sum, ``σ/(C·w_max)``, see
:func:`fedpriv.privacy.accounting.events.effective_noise_multiplier`) into the round's
``DpEvent`` (:func:`fedpriv.privacy.accounting.events.client_round_event`) and composes the events
in one :class:`fedpriv.privacy.accounting.accountant.PrivacyAccountant`. Every report carries the
headline ε (a valid upper bound), the PLD and RDP figures, the accountant, the adjacency
and the sampling.

``conditional=True`` accounts each round *without* sampling amplification — the bound
that holds given the realised sample (used when the aggregation weights depend on which
clients were sampled, so a fixed subsampled event does not describe the round).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import fedpriv.privacy.accounting._checks as _checks
from fedpriv.privacy.accounting.accountant import EpsilonReport, PrivacyAccountant
from fedpriv.privacy.accounting.events import client_round_event, labels_for, relation_for
from fedpriv.privacy.participation import Participation

__all__ = [
    "GaussianRoundsAccountant",
    "epsilon_for_rounds",
    "global_dp_accountant",
    "global_dp_epsilon",
    "is_conditional",
]


class GaussianRoundsAccountant:
    """Per-round cumulative ε at ``delta`` of the server-side Gaussian mechanism.

    ``sampled`` of ``population`` clients per round with ``sampling`` = ``fixed``
    (without replacement, replace-one) or ``poisson`` (add/remove-one).
    """

    def __init__(
        self,
        *,
        sampled: int,
        population: int,
        delta: float,
        sampling: str = "fixed",
        conditional: bool = False,
    ) -> None:
        self.sampled, self.population = _checks.population(sampled, population)
        self.delta = _checks.delta(delta)
        self.sampling = _checks.sampling(sampling)
        self.conditional = bool(conditional)
        m = self.population if self.conditional else self.sampled
        labels = labels_for(self.sampling, m, self.population)
        if self.conditional and self.sampled < self.population:
            labels["sampling"] = (
                f"{labels_for(self.sampling, self.sampled, self.population)['sampling']}; "
                "accounted given the realised sample (no amplification by sampling)"
            )
        self._labels = labels
        self._accountant = PrivacyAccountant(
            delta=self.delta, relation=relation_for(self.sampling), labels=labels
        )
        self.noise_multipliers: list[float] = []
        self.per_client: dict[Any, GaussianRoundsAccountant] = {}

    def sampling_spec(self) -> dict[str, Any]:
        """``sampled``/``population``/``sampling`` a mechanism's ``round_event`` needs."""
        m = self.population if self.conditional else self.sampled
        return {"sampled": m, "population": self.population, "sampling": self.sampling}

    def event(self, noise_multiplier: float):
        """The ``DpEvent`` of one round with this noise multiplier on the sum."""
        m = self.population if self.conditional else self.sampled
        return client_round_event(
            noise_multiplier, sampled=m, population=self.population, sampling=self.sampling
        )

    def step(self, noise_multiplier: float, *, compute: bool = True) -> dict[str, Any]:
        """Compose one noised round; return the cumulative report (see :meth:`current`)."""
        z = _checks.number("noise_multiplier", noise_multiplier)
        return self.compose(self.event(z), z, compute=compute)

    def compose(self, event, noise_multiplier: float, *, compute: bool = True) -> dict[str, Any]:
        """Compose a mechanism's round ``event`` (its noise multiplier kept for the record)."""
        self.noise_multipliers.append(_checks.number("noise_multiplier", noise_multiplier))
        self._accountant.compose(event)
        return self.current() if compute else {}

    def epsilon_if(self, event) -> float:
        """The headline ε if ``event`` were composed next (this accountant unchanged)."""
        trial = copy.deepcopy(self._accountant)
        return float(trial.compose(event).report().epsilon)

    def charge_clients(self, multipliers: dict[Any, float]) -> dict[Any, Any]:
        """Per-client ε given the realised participation: client -> its own multiplier.

        Each client's rounds are composed without sampling amplification (a valid bound
        given who was sampled, which the sampler decides independently of the data); a
        client weighted w_i in a round is charged ``σ/(C·w_i)``. Returns client -> headline ε.
        """
        out: dict[Any, Any] = {}
        for client, z in multipliers.items():
            accountant = self.per_client.get(client)
            if accountant is None:
                accountant = GaussianRoundsAccountant(
                    sampled=self.population, population=self.population,
                    delta=self.delta, sampling=self.sampling, conditional=True,
                )  # fmt: skip
                self.per_client[client] = accountant
            out[client] = accountant.step(z)["epsilon"]
        return out

    def current(self) -> dict[str, Any]:
        """``{"epsilon", "epsilon_pld", "epsilon_rdp", "delta", "rounds", "accountant",
        "adjacency", "sampling", ...}`` so far (infinities as ``"inf"``)."""
        out = self.report().to_dict()
        out.update(sampled=self.sampled, population=self.population)
        return out

    def report(self) -> EpsilonReport:
        """The cumulative report so far (:meth:`current` is its dict)."""
        return self._accountant.report()

    def extend(self, noise_multipliers: Sequence[float]) -> GaussianRoundsAccountant:
        """Compose one round per noise multiplier on the sum; returns this accountant."""
        for z in noise_multipliers:
            self.step(z, compute=False)
        return self


def epsilon_for_rounds(
    noise_multipliers: Sequence[float],
    *,
    sampled: int,
    population: int,
    delta: float,
    sampling: str = "fixed",
    conditional: bool = False,
) -> dict[str, Any]:
    """Cumulative report of rounds whose noise multipliers on the sum are given."""
    accountant = GaussianRoundsAccountant(
        sampled=sampled,
        population=population,
        delta=delta,
        sampling=sampling,
        conditional=conditional,
    )
    return accountant.extend(noise_multipliers).current()


# --- THE ε of global DP (one path) -------------------------------------------------------------


def is_conditional(weighting: str, participation: Participation) -> bool:
    """Example weighting with client sampling: the weights depend on the realised sample, so
    each round is accounted given it (no amplification by sampling)."""
    return weighting == "examples" and not participation.everyone


def global_dp_accountant(
    participation: Participation, *, delta: float, weighting: str = "uniform"
) -> GaussianRoundsAccountant:
    """The accountant a global-DP run's wrapper holds (its sampling, its conditioning)."""
    return GaussianRoundsAccountant(
        sampled=participation.per_round,
        population=participation.population,
        delta=delta,
        sampling=participation.sampling,
        conditional=is_conditional(weighting, participation),
    )


def global_dp_epsilon(
    round_multipliers: Sequence[float],
    participation: Participation,
    *,
    delta: float,
    weighting: str = "uniform",
) -> dict[str, Any]:
    """Client-level ε of global DP after rounds with these noise multipliers on the sum.

    The one function behind the run's per-round ε (the same accountant,
    :func:`global_dp_accountant`), summary.json's recomposition, ``fedpriv epsilon``
    (planning feeds its worst-case multipliers) and the audit's comparison figure.
    """
    accountant = global_dp_accountant(participation, delta=delta, weighting=weighting)
    return accountant.extend(round_multipliers).current()
