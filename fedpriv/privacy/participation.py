"""Who takes part in a round, resolved once.

A run config says ``num-clients`` N, ``clients-per-round`` (0 = all clients),
``num-sampled-clients`` (the m of ``σ = z·C/m``; 0 = the clients sampled per round) and
``client-sampling`` (fixed | poisson). :class:`Participation` turns them into numbers once
(:meth:`Participation.from_counts`; a run's is ``RunSpec.participation``); the sampler
(``fedpriv.scenarios.app.recorder``), σ's m (the DP wrappers), the accountant, summary.json,
planning
(``fedpriv epsilon``) and the audit all read this one object instead of repeating the
"0 = all" rule.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Participation", "SAMPLING"]

SAMPLING = ("fixed", "poisson")


@dataclass(frozen=True)
class Participation:
    """``population`` N, ``per_round`` clients sampled per round (expected size under
    Poisson; N when every client trains), ``noise_clients`` m of ``σ = z·C/m``, ``sampling``."""

    population: int
    per_round: int
    noise_clients: int
    sampling: str = "fixed"

    def __post_init__(self) -> None:
        if not isinstance(self.population, int) or self.population < 1:
            raise ValueError(f"num-clients = {self.population!r}: expected an integer >= 1")
        if not 1 <= self.per_round <= self.population:
            raise ValueError(
                f"clients-per-round = {self.per_round!r}: expected 1..{self.population} "
                "(0 in the config = all clients)"
            )
        if self.noise_clients < 1:
            raise ValueError(f"num-sampled-clients = {self.noise_clients!r}: expected >= 1")
        if self.sampling not in SAMPLING:
            raise ValueError(f"client-sampling = {self.sampling!r}: expected fixed | poisson")

    @classmethod
    def from_counts(
        cls, num_clients: int, clients_per_round: int, num_sampled: int, sampling: str
    ) -> Participation:
        """Resolve the "0 = all clients" / "0 = clients per round" rules of the keys
        ``num-clients``, ``clients-per-round``, ``num-sampled-clients``, ``client-sampling``."""
        population = int(num_clients)
        asked = int(clients_per_round or 0)
        per_round = asked if 0 < asked < population else population
        noise = int(num_sampled or 0) or per_round
        return cls(population, per_round, noise, str(sampling))

    @property
    def everyone(self) -> bool:
        """True when every client trains every round (no sampling, no amplification)."""
        return self.per_round >= self.population

    @property
    def sampler_per_round(self) -> int:
        """What the sampler takes: 0 (all clients) or the number per round."""
        return 0 if self.everyone else self.per_round
