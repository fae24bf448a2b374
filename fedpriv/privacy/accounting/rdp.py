"""Rényi-DP vectors of round events, capped per order, composed by addition.

``dp_accounting``'s ``RdpAccountant`` accounts ``SampledWithoutReplacementDpEvent`` under
replace-one with the bound of Wang, Balle & Kasiviswanathan (2019, Thm 27) and
``PoissonSampledDpEvent`` under add/remove-one (Mironov et al. 2019). The WBK bound is
loose near q = 1 and can exceed the RDP of the unsampled Gaussian; subsampling never
weakens a guarantee (couple the samples; joint convexity), so every sampled event's vector
is capped order by order by the unsampled one, ``α/(2σ²)``. The cap is applied to *every*
round's vector before the rounds are added — rounds with different noise multipliers are
composed exactly like equal ones (the old path composed raw events for unequal rounds and
jumped from 81.1 to 100.1 when one of 20 rounds had z = 0.99 instead of 1).
"""

from __future__ import annotations

import functools
import logging
import math

import dp_accounting
import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

import fedpriv.privacy.accounting._checks as _checks
from fedpriv.privacy.accounting.events import NeighborRel

__all__ = ["ORDERS", "event_rdp", "epsilon_from_rdp"]

ORDERS = np.array(rdp_lib.DEFAULT_RDP_ORDERS, dtype=np.float64)
ORDERS.flags.writeable = False

# dp_accounting's series for the sampled Gaussian at a fractional order may not converge
# (q 0.16, σ 1.65, α 1.1-1.9: DP-SGD's target search); it then logs one absl warning per
# order and returns inf there. The figure stays an upper bound (here the Gaussian's cap
# bounds that order; in RdpAccountant the order drops out), so the warning says nothing a
# user acts on. Only that message is dropped: every other absl record (a negative Rényi
# divergence, an error) still shows.
NON_CONVERGENCE = "_compute_log_a_frac failed to converge"


class _NonConvergenceFilter(logging.Filter):
    """Drops dp_accounting's non-convergence warning (:data:`NON_CONVERGENCE`), and no other
    record."""

    def filter(self, record: logging.LogRecord) -> bool:  # noqa: D102
        return not str(record.msg).startswith(NON_CONVERGENCE)


def _quiet_non_convergence() -> None:
    """Install the filter on absl's logger once (dp_accounting logs through ``absl.logging``)."""
    logger = logging.getLogger("absl")
    if not any(isinstance(f, _NonConvergenceFilter) for f in logger.filters):
        logger.addFilter(_NonConvergenceFilter())


_quiet_non_convergence()


def _is_sampled(event: dp_accounting.DpEvent) -> bool:  # noqa: D103
    return isinstance(
        event, (dp_accounting.PoissonSampledDpEvent, dp_accounting.SampledWithoutReplacementDpEvent)
    )


def _gaussian_rdp(sigma: float) -> np.ndarray:
    """RDP of the unsampled Gaussian with multiplier σ (sensitivity 1): ``α/(2σ²)``."""
    return ORDERS / (2.0 * sigma**2)


@functools.lru_cache(maxsize=256)
def _capped(event: dp_accounting.DpEvent, relation: NeighborRel) -> np.ndarray:
    """The event's RDP, from dp_accounting's RDP formulas called with the event's own σ.

    The formulas are called directly (not through ``RdpAccountant``) so the figure does not
    depend on how a dp_accounting version interprets a ``GaussianDpEvent`` under
    ``REPLACE_ONE`` (0.4.x takes σ as given, later versions double the sensitivity): our
    events already carry the replace-one factor (``GaussianDpEvent(z/2)``).
    """
    if isinstance(event, dp_accounting.GaussianDpEvent):
        vector = _gaussian_rdp(event.noise_multiplier)
    elif isinstance(event, dp_accounting.PoissonSampledDpEvent):
        if relation != NeighborRel.ADD_OR_REMOVE_ONE:
            raise ValueError("Poisson sampling is accounted under add/remove-one only")
        sigma = event.event.noise_multiplier
        vector = rdp_lib._compute_rdp_poisson_subsampled_gaussian(  # noqa: SLF001
            event.sampling_probability, sigma, ORDERS
        )
        vector = np.minimum(vector, _gaussian_rdp(sigma))
    elif isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent):
        if relation != NeighborRel.REPLACE_ONE:
            raise ValueError("sampling without replacement is accounted under replace-one only")
        sigma = event.event.noise_multiplier
        q = event.sample_size / event.source_dataset_size
        vector = rdp_lib._compute_rdp_sample_wor_gaussian(q, sigma, ORDERS)  # noqa: SLF001
        vector = np.minimum(vector, _gaussian_rdp(sigma))
    else:
        raise ValueError(f"event = {event!r} is not a (sampled) Gaussian round event")
    vector = np.asarray(vector, dtype=np.float64).copy()
    vector.flags.writeable = False
    return vector


def event_rdp(event: dp_accounting.DpEvent, relation: NeighborRel) -> np.ndarray:
    """RDP vector (at :data:`ORDERS`) of one round ``event``, capped per order; a fresh copy.

    A Gaussian with noise multiplier 0 gives ``inf`` at every order.
    """
    inner = event.event if _is_sampled(event) else event
    if isinstance(inner, dp_accounting.GaussianDpEvent) and inner.noise_multiplier == 0:
        return np.full_like(ORDERS, np.inf)
    return _capped(event, relation).copy()


def epsilon_from_rdp(orders: np.ndarray, rdp: np.ndarray, delta: float) -> float:
    """ε at ``delta`` of a composed RDP vector (``rdp_privacy_accountant.compute_epsilon``)."""
    delta = _checks.delta(delta)
    rdp = np.asarray(rdp, dtype=np.float64)
    if np.all(np.isinf(rdp)):
        return math.inf
    return float(rdp_lib.compute_epsilon(np.asarray(orders), rdp, delta)[0])
