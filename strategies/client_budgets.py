"""Per-client budgets around a Message-API FedAvg (individualized DP-FedAvg;
:mod:`fedpriv.privacy.client_budgets`).

:class:`fedpriv.strategies.dp_wrappers.ServerSideFixedClippingDP` with its Poisson path (a fixed
denominator m = round(Σ q_i), a round with nobody sampled still releases ``w_g + N(0, σ²)``),
sampling each offered node itself with its own rate q_i from the secret generator, telling
each sampled node the rate it was sampled at (``client-sampling-rate`` in its message: the
node refuses a rate above its own), and reporting every client's ε after each round
(``dp-client-epsilon``: partition -> ε of ``PoissonSampled(q_i, Gaussian(z))`` over the
rounds released so far; every client is charged every round, sampled or not).

The server's lifetime ledger (``server_ledger``, a
:class:`fedpriv.privacy.ledger.per_client.PerClientLedger`, set by the run's builder): each
release is charged, before it leaves, one row per client with that client's event
``PoissonSampled(q_i, Gaussian(z))``; ``server-max-epsilon`` caps the largest client's lifetime
ε (:meth:`ClientBudgetsDP.budget_stop` before a round, :meth:`ClientBudgetsDP.withhold` at
release).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from fedpriv.strategies.dp_ftrl import _Nodes
from fedpriv.strategies.dp_wrappers import ServerSideFixedClippingDP
from flwr.common import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.server import Grid

from fedpriv.privacy.client_budgets import client_epsilon, client_round_event
from fedpriv.privacy.dp import round_report
from fedpriv.privacy.modes.client_budgets import MODE, RATE_KEY

__all__ = ["ClientBudgetsDP"]

_log = logging.getLogger("flwr")


class ClientBudgetsDP(ServerSideFixedClippingDP):
    """Per-client Poisson rates around ``strategy`` (FedAvg or FedProx: a uniform mean).

    ``rates``: partition -> q_i; ``delta`` of the per-client ε; the rest as
    :class:`fedpriv.strategies.dp_core.DPWrapperCore` (``num_sampled_clients`` is m = round(Σ q_i)).
    """

    def __init__(self, strategy: Any, *, rates: Mapping[int, float], delta: float,
                 **options: Any) -> None:  # fmt: skip
        self.rates = {int(p): float(q) for p, q in rates.items()}
        self.delta = float(delta)
        m = max(1, round(sum(self.rates.values())))
        super().__init__(strategy, num_sampled_clients=m, poisson=True, **options)

    def client_events(self) -> dict[int, Any]:
        """partition -> the DpEvent one release costs it (sampled or not)."""
        z = self.mechanism.noise_multiplier
        return {p: client_round_event(q, z) for p, q in self.rates.items()}

    def budget_stop(self, server_round: int) -> Optional[str]:
        """Before a round: why its release would push a client past ``server-max-epsilon``."""
        ledger = self.server_ledger
        if self.budget_stopped or ledger is None:
            return self.budget_stopped
        self.budget_stopped = ledger.plan(self.client_events(), server_round)
        return self.budget_stopped

    def withhold(
        self, server_round: int, stdv: float, num_reports: int, weights: Optional[list[float]]
    ) -> bool:
        """At release: charge every client's event on the server's ledger (committed before
        the release leaves); True (recorded as skipped, nothing released) when declined."""
        if self.server_ledger is None:
            return super().withhold(server_round, stdv, num_reports, weights)
        reason = self.server_ledger.charge(self.client_events(), server_round)
        if reason is None:
            return False
        self.budget_stopped = reason
        _log.warning("%s: %s; nothing released", self.step_name, reason)
        self.finish_round(round_report(self.mechanism, stdv=None, skipped=reason,
                                       num_reports=num_reports))  # fmt: skip
        return True

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Sample each offered node with its own q_i; tell it the rate in its message (and the
        ``client-budgets`` task, whose client checks its own ε before it releases)."""
        self.note_global_arrays(arrays)
        partition_of = getattr(grid, "node_to_partition", {})
        chosen = {}
        for node in grid.get_node_ids():
            partition = int(partition_of.get(node, node))
            if self.rng.random() < self.rates.get(partition, 0.0):
                chosen[node] = self.rates[partition]
        if not chosen:
            return []
        config = ConfigRecord({**dict(config), "client-task": MODE.client_task})
        messages = list(self.strategy.configure_train(server_round, arrays, config,
                                                      _Nodes(grid, list(chosen))))  # fmt: skip
        return [_with_rate(msg, chosen[msg.metadata.dst_node_id]) for msg in messages]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """The clipped, noised mean over m; then every client's ε so far."""
        out = super().aggregate_train(server_round, replies)
        if self.last_round.get("dp-noised"):
            released = sum(1 for r in self.history if r.get("dp-noised"))
            z = self.mechanism.noise_multiplier
            self.last_round["dp-client-epsilon"] = {
                str(p): client_epsilon(q, z, released, self.delta) for p, q in self.rates.items()
            }
            self.last_round["dp-delta"] = self.delta
        return out


def _with_rate(msg: Message, rate: float) -> Message:
    """A copy of ``msg`` whose config says ``client-sampling-rate = rate`` (the strategy's
    messages share one content object: each node gets its own)."""
    items = dict(msg.content.items())
    items["config"] = ConfigRecord({**dict(msg.content["config"]), RATE_KEY: rate})
    meta = msg.metadata
    return Message(content=RecordDict(items), dst_node_id=meta.dst_node_id,
                   message_type=meta.message_type, group_id=meta.group_id)  # fmt: skip
