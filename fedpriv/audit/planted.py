"""Planted bugs: versions of the global-DP round with known errors.

Each variant has the signature of :func:`fedpriv.audit.global_dp_mechanism.simulate_releases`
(``cfg, signs, rng -> (T, d) deltas``) and is audited against the CORRECT mechanism's
accountant ε, as a run with the bug would report it. None of them is used by a wrapper; they
exist so that a test can show the audit flags each error (lower bound above the claimed ε)
with the default budget :data:`fedpriv.audit.global_dp_mechanism.MUST_SHOW`.

- ``noise-halved``: ``σ/2`` is added (a factor lost in the noise draw);
- ``sigma-2m``: σ calibrated to 2m (``z·C/(2m)``, e.g. counting canaries and clients twice)
  while the mean divides by m;
- ``no-clipping``: the updates are averaged unclipped (a canary of norm 4C keeps it);
- ``public-seed``: the noise generator is seeded with the run's public seed; the auditor
  regenerates the noise (:func:`public_seed_noise`) and subtracts it from what it sees.

DP-SGD's planted bug is in :data:`DPSGD_PLANTED` (a client-side, example-level mechanism,
audited by :mod:`fedpriv.audit.dpsgd_mechanism`): ``fixed-batches`` — batches from a public
partition by example index accounted as Poisson at q = B/n. A secretly shuffled variant
audited on the final update could not be flagged (one-run bounds 1.1–2.4 against Poisson ε
5.8–12.2 at z = 0.4–0.6); with the public partition and the white-box per-step view the
accountant covers, each canary is an unamplified Gaussian and the audit flags it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedpriv.audit.global_dp_mechanism import GlobalDPAudit, correct_round, simulate_releases
from fedpriv.privacy.dp import FixedClippingGaussian

__all__ = ["PLANTED", "DPSGD_PLANTED", "public_seed_noise", "VIEWS"]


def _noise_halved(mech: FixedClippingGaussian, total: np.ndarray, m: int, rng) -> np.ndarray:
    stdv, _ = mech.noise_stdv([], [])
    return mech.add_noise_stdv([total / m], stdv / 2.0, rng)[0]


def _sigma_2m(mech: FixedClippingGaussian, total: np.ndarray, m: int, rng) -> np.ndarray:
    wrong = FixedClippingGaussian(
        noise_multiplier=mech.noise_multiplier,
        clipping_norm=mech.clipping_norm,
        num_sampled_clients=2 * m,
    )
    stdv, _ = wrong.noise_stdv([], [])
    return mech.add_noise_stdv([total / m], stdv, rng)[0]


def _public_rng(cfg: GlobalDPAudit) -> np.random.Generator:
    return np.random.default_rng(cfg.seed)  # the run's seed, printed in its config


def _public_seed(cfg: GlobalDPAudit, signs: np.ndarray, rng) -> np.ndarray:
    del rng  # the bug: the secret generator is not used
    return simulate_releases(cfg, signs, _public_rng(cfg), round_fn=correct_round)


def public_seed_noise(cfg: GlobalDPAudit, deltas: np.ndarray) -> np.ndarray:
    """The auditor's regeneration of the noise from the public seed (σ = z·C/m is public)."""
    del deltas
    mech = cfg.mechanism()
    stdv, _ = mech.noise_stdv([], [])
    rng = _public_rng(cfg)
    return np.stack([rng.normal(0.0, stdv, cfg.dim) for _ in range(cfg.rounds)])


PLANTED: dict[str, Callable[..., np.ndarray]] = {
    "noise-halved": lambda cfg, signs, rng: simulate_releases(
        cfg, signs, rng, round_fn=_noise_halved
    ),
    "sigma-2m": lambda cfg, signs, rng: simulate_releases(cfg, signs, rng, round_fn=_sigma_2m),
    "no-clipping": lambda cfg, signs, rng: simulate_releases(cfg, signs, rng, clip=False),
    "public-seed": _public_seed,
}
# What the auditor subtracts from its view, per variant (None: nothing).
VIEWS = {"public-seed": public_seed_noise}
# DP-SGD's planted bugs: the batch schedule its client runs (fedpriv.audit.dpsgd_mechanism).
DPSGD_PLANTED = {"fixed-batches": "fixed-batches"}
