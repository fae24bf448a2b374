"""One protocol for the noise mechanisms, and placement as a wrapper (SPEC §3).

In pfl-research's shape (``pfl/privacy/privacy_mechanism.py``): a mechanism has two steps and
a privacy event, and *where* the noise is added is a wrapper around the same mechanism, not
a new mechanism. Flower-free, numpy only.

:class:`Mechanism`, the protocol every mechanism of fedpriv satisfies:

1. ``constrain(update, reference=None) -> (update, metrics)``, per contributor: bound the
   sensitivity. FlatClip ``Δ·min(1, C/‖Δ‖)`` (flat L2 norm over all layers; relative to
   ``reference`` when given: ``w_g + clip(w − w_g)``, SPEC §3.1).
2. ``add_noise(aggregate, *, denominator, rng) -> (noised, metrics)``, on a sum of
   constrained contributions divided by ``denominator``: the Gaussian mechanism adds
   ``N(0, σ²)`` with ``σ = z·C/denominator`` (noise std ``z·C`` on the sum).
3. ``event(*, sampled, population, sampling, noise_multiplier) -> DpEvent | None``: the
   ``dp_accounting`` event of one release; ``None`` for a mechanism with no formal
   guarantee (metric DP, :class:`fedpriv.privacy.dp.MetricScaledGaussian`). ``accountable`` says
   which, without arguments.

Placement (:class:`Placement`): every contributor's update is constrained; the noise is
added once by the placement's party:

* :class:`ClientPlacement` (LDP; HDP §IV-C lemma, Algorithm 1 line 14 with q·W → 1): each
  client sends ``clip(Δ_k, C) + N(0, (z·C)²)`` (denominator 1);
* :class:`ZonePlacement` (HDP; HDP Algorithm 1 lines 12–14): the zone's super-node releases
  ``Δ(i) = Σ_k w_k clip(Δ_k, C)/(q·W_i) + N(0, σ_i²)``, ``σ_i = z·C/(q·W_i)``;
* :class:`CentralPlacement` (CDP / global DP; McMahan et al. 2018, DP-FedAvg; SPEC §3.1):
  the server noises its aggregate once: ``σ = z·C/m`` on the mean of m clipped updates
  (``σ_S = z·C/(q·W)`` on the zonal aggregate).

Each contributor's constrained update meets noise of multiplier z relative to its
sensitivity C at every placement (uniform weights), so all three have the same event
(``fedpriv.privacy.accounting.events.client_round_event``); what differs is whom it holds against
(``fedpriv.zonal.accounting.EPSILON_AGAINST``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Protocol, runtime_checkable

import numpy as np

from fedpriv.privacy.mechanisms import (
    add_gaussian_noise,
    clip_model_to_reference,
    clip_update,
    flat_norm,
)
from fedpriv.validation import Rng, check_choice, check_real

__all__ = [
    "Metrics",
    "Cohort",
    "PARTIES",
    "Mechanism",
    "GaussianMechanism",
    "noise_norm",
    "Placement",
    "ClientPlacement",
    "ZonePlacement",
    "CentralPlacement",
]

if TYPE_CHECKING:  # dp_accounting (and scipy) load when an event is built, not on import:
    import dp_accounting  # the zonal plan and the CLI's help import this module

NDArrays = list[np.ndarray]
Metrics = dict[str, Any]
# (raw updates, constrained updates) of a round's contributors: what a data-dependent
# mechanism (metric DP's distance d) reads; data-independent mechanisms ignore it
Cohort = tuple[Sequence[Sequence[np.ndarray]], Sequence[Sequence[np.ndarray]]]
PARTIES = ("client", "zone", "server")  # who adds the noise, by placement


@runtime_checkable
class Mechanism(Protocol):
    """Constrain per contributor, noise on an aggregate, the privacy event of one release."""

    accountable: bool  # True: event() is a DpEvent (a formal guarantee); False: None

    def constrain(
        self, update: Sequence[np.ndarray], reference: Optional[Sequence[np.ndarray]] = None
    ) -> tuple[NDArrays, Metrics]:
        """One contributor's update with bounded sensitivity, and ``{"clipped", ...}``."""
        ...

    def add_noise(
        self,
        aggregate: Sequence[np.ndarray],
        *,
        denominator: float,
        rng: Optional[Rng],
        cohort: Optional[Cohort] = None,
    ) -> tuple[NDArrays, Metrics]:
        """``aggregate`` (a sum of constrained updates / ``denominator``) with noise, and
        ``{"sigma", "noise_norm", ...}``."""
        ...

    def event(
        self,
        *,
        sampled: int,
        population: int,
        sampling: str = "fixed",
        noise_multiplier: Optional[float] = None,
    ) -> Optional[dp_accounting.DpEvent]:
        """The ``DpEvent`` of one release (None: no formal guarantee)."""
        ...


def noise_norm(noised: Sequence[np.ndarray], clean: Sequence[np.ndarray]) -> float:
    """``‖noised − clean‖`` (flat L2, the difference taken in float64)."""
    return flat_norm([np.subtract(a, b, dtype=np.float64) for a, b in zip(noised, clean)])


class GaussianMechanism:
    """FlatClip to C and Gaussian noise ``σ = z·C/denominator`` (SPEC §3.1, §3.5).

    ``noise_multiplier`` z >= 0, ``clipping_norm`` C > 0. One contributor changes a sum of
    C-clipped updates by at most C (add/remove) or 2C (replace), and the noise std on the sum
    is z·C: the event is ``client_round_event(z)`` (sampled without replacement for
    ``sampling="fixed"``, Poisson for ``"poisson"``).
    """

    accountable: ClassVar[bool] = True

    def __init__(self, *, noise_multiplier: float, clipping_norm: float) -> None:
        self.noise_multiplier = float(check_real("noise_multiplier", noise_multiplier, lo=0.0))
        self.clipping_norm = float(check_real("clipping_norm", clipping_norm, lo=0.0, lo_open=True))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(noise_multiplier={self.noise_multiplier}, "
            f"clipping_norm={self.clipping_norm})"
        )

    def constrain(
        self, update: Sequence[np.ndarray], reference: Optional[Sequence[np.ndarray]] = None
    ) -> tuple[NDArrays, Metrics]:
        """FlatClip: ``Δ·min(1, C/‖Δ‖)`` (``fedpriv.privacy.mechanisms.clip_update``); with a
        ``reference`` w_g, ``w_g + clip(w − w_g)`` (``clip_model_to_reference``).

        Metrics: ``update_norm`` (‖Δ‖ before clipping, float64) and ``clipped``.
        """
        if reference is None:
            norm = flat_norm(update)
            out, was = clip_update(update, self.clipping_norm)
        else:
            norm = flat_norm(
                [np.subtract(w, g, dtype=np.float64) for w, g in zip(update, reference)]
            )
            out, was = clip_model_to_reference(update, reference, self.clipping_norm)
        return out, {"update_norm": norm, "clipped": bool(was)}

    def noise_std(self, denominator: float) -> float:
        """``σ = z·C/denominator``: std of the noise on a sum of C-clipped updates divided by
        ``denominator`` (m: the mean of m, SPEC §3.1; q·W_i: a zone, HDP line 14; 1: one
        client, LDP)."""
        den = check_real("denominator", denominator, lo=0.0, lo_open=True)
        return (self.noise_multiplier * self.clipping_norm) / den

    def add_noise(
        self,
        aggregate: Sequence[np.ndarray],
        *,
        denominator: float,
        rng: Optional[Rng],
        cohort: Optional[Cohort] = None,
    ) -> tuple[NDArrays, Metrics]:
        """``aggregate + N(0, σ²)``, ``σ = z·C/denominator`` (``cohort`` is not used).

        Drawn layer by layer with ``rng.normal(0, σ, shape)`` (``add_gaussian_noise``; a
        legacy RandomState gives Flower's ``add_gaussian_noise_inplace`` stream). Metrics:
        ``sigma``, ``noise_norm``.
        """
        del cohort
        sigma = self.noise_std(denominator)
        noised = add_gaussian_noise(aggregate, sigma, rng)
        return noised, {"sigma": sigma, "noise_norm": noise_norm(noised, aggregate)}

    def event(
        self,
        *,
        sampled: int,
        population: int,
        sampling: str = "fixed",
        noise_multiplier: Optional[float] = None,
    ) -> Optional[dp_accounting.DpEvent]:
        """``client_round_event(z)`` of one release; ``noise_multiplier`` overrides z (a
        round whose largest weight or report count leaves another multiplier)."""
        from fedpriv.privacy.accounting.events import client_round_event

        z = self.noise_multiplier if noise_multiplier is None else noise_multiplier
        return client_round_event(z, sampled=sampled, population=population, sampling=sampling)


class Placement:
    """ONE mechanism, with the party that adds its noise (``party`` in :data:`PARTIES`).

    pfl's ``CentrallyAppliedPrivacyMechanism``: the same ``constrain`` runs for every
    contributor at every placement; ``add_noise`` runs once, at ``party``.
    """

    party: ClassVar[str] = "server"

    def __init__(self, mechanism: Mechanism) -> None:
        if not isinstance(mechanism, Mechanism):
            raise ValueError(
                f"mechanism = {mechanism!r} is not allowed; expected a Mechanism "
                "(constrain, add_noise, event)"
            )
        self.mechanism = mechanism

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.mechanism!r})"

    def contribute(
        self,
        update: Sequence[np.ndarray],
        *,
        rng: Optional[Rng] = None,
        reference: Optional[Sequence[np.ndarray]] = None,
    ) -> tuple[NDArrays, Metrics]:
        """One contributor's term: constrained; the client placement also noises it
        (``add_noise`` with denominator 1: ``clip(Δ, C) + N(0, (z·C)²)``)."""
        out, metrics = self.mechanism.constrain(update, reference)
        if self.party == "client":
            out, noise = self.mechanism.add_noise(out, denominator=1, rng=rng)
            metrics = {**metrics, **noise}
        return out, metrics

    def release(
        self, aggregate: Sequence[np.ndarray], *, party: str, denominator: float, rng: Any = None
    ) -> tuple[NDArrays, Metrics]:
        """What ``party`` releases from its aggregate (a weighted sum / ``denominator``):
        noised iff ``party`` is this placement's (then ``rng`` is drawn from), else as is."""
        check_choice("party", party, PARTIES)
        if party == self.party:
            return self.mechanism.add_noise(aggregate, denominator=denominator, rng=rng)
        return [np.asarray(a) for a in aggregate], {"sigma": 0.0, "noise_norm": 0.0}

    def run(
        self,
        updates: Sequence[Sequence[np.ndarray]],
        weights: Sequence[float],
        *,
        denominator: float,
        rng: Optional[Rng],
    ) -> tuple[NDArrays, Metrics]:
        """One round in one place (pfl's ``CentrallyAppliedPrivacyMechanism``): each term
        from :meth:`contribute` (the client placement's clients draw from ``rng`` in order),
        ``Σ_k w_k·term_k / denominator`` in float64, then noised once by the zone or the
        server placement (the client placement's sum is released as it is)."""
        if len(updates) != len(weights):
            raise ValueError(f"{len(updates)} updates but {len(weights)} weights")
        terms = [self.contribute(u, rng=rng) for u in updates]
        total = [np.zeros(np.shape(a), np.float64) for a in updates[0]] if updates else []
        for (term, _), w in zip(terms, weights):
            for acc, layer in zip(total, term):
                acc += float(w) * np.asarray(layer, np.float64)
        mean = [acc / denominator for acc in total]
        if self.party == "client":  # the clients noised their terms: the sum goes as it is
            out, metrics = mean, {"sigma": 0.0, "noise_norm": 0.0}
        else:
            out, metrics = self.release(mean, party=self.party, denominator=denominator, rng=rng)
        metrics["clipped"] = [bool(m["clipped"]) for _, m in terms]
        return out, metrics

    def event(self, **kwargs: Any) -> Optional[dp_accounting.DpEvent]:
        """The mechanism's event (the same at every placement, see the module docstring)."""
        return self.mechanism.event(**kwargs)


class ClientPlacement(Placement):
    """LDP: each client adds ``N(0, (z·C)²)`` to its own clipped update (HDP §IV-C)."""

    party = "client"


class ZonePlacement(Placement):
    """HDP: the zone's super-node adds ``N(0, σ_i²)``, ``σ_i = z·C/(q·W_i)`` (Alg. 1 l. 14)."""

    party = "zone"


class CentralPlacement(Placement):
    """CDP / global DP: the server adds ``N(0, σ²)`` once, ``σ = z·C/m`` (SPEC §3.1)."""

    party = "server"
