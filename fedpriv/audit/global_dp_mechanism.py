"""Mechanism-level audit of global DP with power.

The exact round of :class:`fedpriv.privacy.dp.FixedClippingGaussian` (SPEC §3.1), run on a flat
model vector of ``d = K·b`` parameters with ``K`` canary clients and a few real clients:

1. every client model ``w_t + Δ_i`` is clipped relative to the round's global model,
   ``Δ_i·min(1, C/‖Δ_i‖)`` (the real clients through :meth:`FixedClippingGaussian.clip`; the
   canaries with the same formula vectorised, cross-checked in the tests);
2. the clipped deltas are summed and divided by the FIXED denominator m, so one canary has a
   real client's sensitivity ``C/m`` on the mean (``2C/m`` replace-one);
3. :meth:`FixedClippingGaussian.add_noise_stdv` adds ``N(0, σ²)``, ``σ = z·C/m``
   (:meth:`FixedClippingGaussian.noise_stdv`), to every coordinate; that is ``w_{t+1}``.

Canaries (replace-one, the adjacency the accountant uses for ``fixed`` sampling): canary j
sends ``S_j·A·c_j``, ``S_j ∈ {−1, +1}`` secret and uniform, ``A >= C`` the canary norm (clipped
to C by a correct mechanism), ``c_j`` a random-sign unit vector on its own block of b
coordinates. The directions are exactly orthogonal; under isotropic Gaussian noise every
orthonormal set gives the same score law, so this is the ideal "nearly orthogonal" set
without cross-talk. Changing one ``S_j`` replaces one client's update: a replace-one
neighbour, which is what the one-run theorems need of each canary.

Threat models (scores ``⟨·, c_j⟩``):

- ``white-box``: the auditor sees every round's release and scores ``Σ_t ⟨w_{t+1} − w_t, c_j⟩``;
- ``final-model``: only ``w_T``, scored ``⟨w_T − w_0, c_j⟩``.

With FedAvg's server step (the noised mean is the next model) the two coincide — the sum of
the round deltas is the final delta — so the final model loses nothing for a canary that
repeats its direction; both are reported, named.

The accountant's figure: :func:`fedpriv.privacy.accounting.rounds.epsilon_for_rounds` with
``sampled = m``, ``population = N`` (``fixed``): ``GaussianDpEvent(z/2)`` per round, composed
by PLD. With ``N = m`` (every client every round) the per-canary score separation is
``μ = 2√T/z``, the accountant's μ-GDP exactly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np

from fedpriv.audit.one_run_fdp import exceeds, one_run_bounds
from fedpriv.privacy.accounting.rounds import epsilon_for_rounds
from fedpriv.privacy.dp import FixedClippingGaussian

__all__ = [
    "GlobalDPAudit",
    "MUST_SHOW",
    "canary_signs",
    "canary_directions",
    "simulate_releases",
    "scores",
    "audit",
    "soundness",
    "accountant_epsilon",
    "correct_round",
    "noise_rng",
]

# A hook a planted bug may replace: (mechanism, clipped deltas sum, m, rng) -> noised mean.
Round = Callable[..., np.ndarray]


@dataclass(frozen=True)
class GlobalDPAudit:
    """One audit's configuration: the mechanism (z, T, m, N, C, δ) and the audit budget.

    Defaults (the reference audit) — z = 12.6, T = 10, m = N = 100, δ = 1e-5 (accountant ε = 2.00),
    50 000 canaries of norm 4C on blocks of 2 coordinates (d = 100 000), 4 real clients.
    """

    noise_multiplier: float = 12.6
    rounds: int = 10
    clients_per_round: int = 100
    population: int = 100
    delta: float = 1e-5
    clipping_norm: float = 1.0
    num_canaries: int = 50_000
    block: int = 2
    canary_norm: float = 4.0
    real_clients: int = 4
    confidence: float = 0.95
    seed: int = 0

    @property
    def dim(self) -> int:
        return self.num_canaries * self.block

    def mechanism(self) -> FixedClippingGaussian:
        return FixedClippingGaussian(
            noise_multiplier=self.noise_multiplier,
            clipping_norm=self.clipping_norm,
            num_sampled_clients=self.clients_per_round,
        )

    def with_(self, **changes: Any) -> GlobalDPAudit:
        return replace(self, **changes)


MUST_SHOW = GlobalDPAudit()


def accountant_epsilon(cfg: GlobalDPAudit) -> float:
    """The run's reported ε: z on the sum, T rounds, m of N (fixed), at δ (PLD headline)."""
    if cfg.noise_multiplier == 0:
        return float("inf")
    report = epsilon_for_rounds(
        [cfg.noise_multiplier] * cfg.rounds,
        sampled=cfg.clients_per_round,
        population=cfg.population,
        delta=cfg.delta,
    )
    return float(report["epsilon"])


@functools.lru_cache(maxsize=8)
def canary_directions(cfg: GlobalDPAudit) -> np.ndarray:
    """``(K, b)`` block values of the unit directions: random signs / √b (seeded)."""
    rng = np.random.default_rng([cfg.seed, 22, 1])
    signs = rng.choice([-1.0, 1.0], size=(cfg.num_canaries, cfg.block))
    return signs / np.sqrt(cfg.block)


def canary_signs(cfg: GlobalDPAudit, trial: int = 0) -> np.ndarray:
    """The secret bits ``S_j ∈ {−1, +1}`` of one trial (uniform)."""
    rng = np.random.default_rng([cfg.seed, 22, 2, trial])
    return rng.choice([-1, 1], size=cfg.num_canaries)


def _clip_rows(rows: np.ndarray, clipping_norm: float) -> np.ndarray:
    """FlatClip of every row, ``Δ·min(1, C/‖Δ‖)``
    (:func:`fedpriv.privacy.mechanisms.clip_update`)."""
    norms = np.sqrt(np.sum(rows * rows, axis=1, keepdims=True))
    scale = np.minimum(1.0, clipping_norm / np.where(norms > 0, norms, 1.0))
    return rows * scale


@functools.lru_cache(maxsize=8)
def _real_total(cfg: GlobalDPAudit, clip: bool) -> np.ndarray:
    """Sum of the real clients' deltas (norm 3C, random), clipped by the mechanism's own
    :meth:`FixedClippingGaussian.clip` (the same every round and every trial)."""
    rng = np.random.default_rng([cfg.seed, 22, 3])
    mech, zero, total = cfg.mechanism(), [np.zeros(cfg.dim)], np.zeros(cfg.dim)
    for v in rng.normal(size=(cfg.real_clients, cfg.dim)):
        update = 3.0 * cfg.clipping_norm * v / np.linalg.norm(v)
        total += mech.clip([update], zero)[0][0] if clip else update
    return total


def correct_round(mech: FixedClippingGaussian, total: np.ndarray, m: int, rng) -> np.ndarray:
    """Mean over the fixed m plus ``N(0, σ²)``, σ from the mechanism (:mod:`fedpriv.privacy.dp`)."""
    stdv, _ = mech.noise_stdv([], [])
    return mech.add_noise_stdv([total / m], stdv, rng)[0]


def simulate_releases(
    cfg: GlobalDPAudit,
    signs: np.ndarray,
    rng: np.random.Generator,
    *,
    clip: bool = True,
    round_fn: Optional[Round] = None,
) -> np.ndarray:
    """``(T, d)`` model deltas ``w_{t+1} − w_t`` of T rounds (module docstring, steps 1–3).

    The canaries and real clients send the same delta every round (their updates do not
    depend on the model in this mechanism-level audit), so step 1 is done once.
    """
    mech = cfg.mechanism()
    dirs = canary_directions(cfg)
    canary = cfg.canary_norm * signs[:, None] * dirs
    canary = _clip_rows(canary, cfg.clipping_norm) if clip else canary
    total = canary.reshape(-1) + _real_total(cfg, clip)
    step = round_fn or correct_round
    return np.stack([step(mech, total, cfg.clients_per_round, rng) for _ in range(cfg.rounds)])


def scores(cfg: GlobalDPAudit, deltas: np.ndarray) -> dict[str, np.ndarray]:
    """Canary scores under both threat models (module docstring)."""
    dirs = canary_directions(cfg)
    per_round = np.sum(deltas.reshape(cfg.rounds, cfg.num_canaries, -1) * dirs, axis=2)
    final = deltas.sum(axis=0).reshape(cfg.num_canaries, -1)
    return {"white-box": per_round.sum(axis=0), "final-model": np.sum(final * dirs, axis=1)}


def noise_rng(cfg: GlobalDPAudit, trial: int) -> np.random.Generator:
    """The mechanism's secret noise generator of one trial."""
    return np.random.default_rng([cfg.seed, 22, 4, trial])


def audit(
    cfg: GlobalDPAudit = MUST_SHOW,
    *,
    trial: int = 0,
    simulate: Callable[..., np.ndarray] = simulate_releases,
    view: Optional[Callable[[GlobalDPAudit, np.ndarray], np.ndarray]] = None,
) -> dict[str, Any]:
    """One audit: lower bounds (ε-DP, f-DP, best) per threat model vs the accountant's ε.

    ``simulate`` is the mechanism (a planted variant may replace it); ``view`` what the
    auditor subtracts from what it sees (e.g. noise it can regenerate from a public seed).
    """
    signs = canary_signs(cfg, trial)
    deltas = simulate(cfg, signs, noise_rng(cfg, trial))
    if view is not None:
        deltas = deltas - view(cfg, deltas)
    out: dict[str, Any] = {
        "mechanism": "global DP, FixedClippingGaussian (clip, mean over fixed m, sigma = z*C/m)",
        "config": {
            "noise_multiplier": cfg.noise_multiplier,
            "rounds": cfg.rounds,
            "m": cfg.clients_per_round,
            "N": cfg.population,
            "delta": cfg.delta,
            "clipping_norm": cfg.clipping_norm,
        },
        "canaries": {"count": cfg.num_canaries, "dim": cfg.dim, "norm": cfg.canary_norm},
        "adjacency": "replace-one client (canary update +A*c_j or -A*c_j)",
        "accountant_epsilon": accountant_epsilon(cfg),
    }
    views = scores(cfg, deltas)
    for name, values in views.items():
        same = name == "final-model" and np.allclose(values, views["white-box"])
        out[name] = (
            dict(out["white-box"], same_as="white-box")
            if same
            else one_run_bounds(values, signs, delta=cfg.delta, confidence=cfg.confidence).as_dict()
        )
    return out


def soundness(cfg: GlobalDPAudit = MUST_SHOW, *, trials: int = 200, first: int = 1) -> list[int]:
    """Trials (of ``trials`` fresh secrets and noise) whose best bound exceeds the accountant.

    White-box scores (the stronger view); an empty list is the soundness check.
    """
    claimed = accountant_epsilon(cfg)
    bad = []
    for trial in range(first, first + trials):
        signs = canary_signs(cfg, trial)
        white = scores(cfg, simulate_releases(cfg, signs, noise_rng(cfg, trial)))["white-box"]
        if exceeds(white, signs, claimed, delta=cfg.delta, confidence=cfg.confidence):
            bad.append(trial)
    return bad
