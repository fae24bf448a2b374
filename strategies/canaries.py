"""Canary clients for privacy auditing, a thin Message-API wrapper.

:class:`CanaryInsertion` sits *outside* the privacy wrapper (``ValidUpdatesOnly ->
CanaryInsertion -> privacy wrapper -> stock strategy``). Every round it adds one reply per
included canary of a :class:`fedpriv.audit.canaries.CanarySet` to the real replies, as if a
client had sent it: the arrays are the round's global model plus ``norm · c_j`` (the canary
never trains), and each of its metrics (``num-examples`` included) is the mean of the real
replies' (so FedAvg weights it like an average client and the train metrics keep their
values). The privacy wrapper then clips, measures (metric DP's distance d
includes the canaries) and noises the canaries with everything else. The wrapper keeps the
global model of every round (θ_0 … θ_T) for the audit and reports the number of inserted
canaries and of real replies per round.

Denominator. Where the privacy wrapper can (:meth:`fedpriv.strategies.dp_wrappers.
ServerSideFixedClippingDP.use_fixed_denominator`: a uniform mean, global or metric DP), the
wrapper divides the clipped sum by the fixed m whatever the number of replies, so a canary
has a real client's sensitivity C/m with σ unchanged (``denominator`` = ``"fixed m"``);
otherwise (no privacy wrapper, example weights, a median) the aggregate divides by all
replies and the canaries are diluted (``"all replies"``).

Canary replies carry ``src_node_id`` = :data:`CANARY_NODE_ID` (no real node has it), so a
wrapper's per-node report never confuses a canary with a client.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Optional

import numpy as np
from fedpriv.strategies.array_records import named_record
from fedpriv.strategies.base import StrategyWrapper
from flwr.common import (
    ArrayRecord,
    ConfigRecord,
    Message,
    Metadata,
    MetricRecord,
    RecordDict,
)
from flwr.server import Grid
from flwr.serverapp.strategy.strategy import Strategy

from fedpriv.audit.canaries import CanarySet

__all__ = ["CanaryInsertion", "CANARY_NODE_ID"]

CANARY_NODE_ID = 2**63 - 1


def _mean(values: list[Any]) -> Any:
    """Mean of scalar metric values (element-wise for list values, kept as a list)."""
    if isinstance(values[0], list):
        return np.mean(np.asarray(values, dtype=np.float64), axis=0).tolist()
    return float(np.mean([float(v) for v in values]))


class CanaryInsertion(StrategyWrapper):
    """Insert the included canaries' replies before the wrapped (privacy) strategy.

    Parameters
    ----------
    strategy : Strategy
        Usually a privacy wrapper around the stock strategy.
    canaries : CanarySet
        Directions, norm and inclusion of the canaries (model shapes must match).
    """

    def __init__(self, strategy: Strategy, *, canaries: CanarySet) -> None:
        if not isinstance(canaries, CanarySet):
            raise ValueError(f"canaries = {canaries!r} is not allowed; expected a CanarySet")
        self.strategy = strategy
        self.canaries = canaries
        fix = getattr(strategy, "use_fixed_denominator", None)
        self.denominator = "fixed m" if fix is not None and fix() else "all replies"
        self.models: list[list[np.ndarray]] = []
        self.real_reports: list[int] = []
        self.current_arrays: ArrayRecord = ArrayRecord()
        self.last_round: dict[str, Any] = {}

    def round_metrics(self) -> dict[str, Any]:
        """Inserted canaries and real replies of the last round."""
        return dict(self.last_round)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Remember the round's global model (θ_0 at the first round) and delegate."""
        self.current_arrays = arrays
        if not self.models:
            self.models.append(arrays.to_numpy_ndarrays())
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Add the canary replies, delegate, keep the new global model."""
        replies = list(replies)
        ok = [m for m in replies if not m.has_error()]
        canary_replies = self._canary_replies(ok) if ok else []
        self.real_reports.append(len(ok))
        self.last_round = {
            "audit-canaries-inserted": len(canary_replies),
            "audit-real-reports": len(ok),
        }
        arrays, metrics = self.strategy.aggregate_train(server_round, replies + canary_replies)
        previous = self.models[-1] if self.models else self.current_arrays.to_numpy_ndarrays()
        self.models.append(arrays.to_numpy_ndarrays() if arrays is not None else previous)
        return arrays, metrics

    def _canary_replies(self, real: list[Message]) -> list[Message]:
        template = real[0]
        record_name = next(iter(template.content.array_records))
        metric_records = {
            name: MetricRecord({key: _mean([m.content[name][key] for m in real]) for key in record})
            for name, record in template.content.metric_records.items()
        }
        reference = self.current_arrays.to_numpy_ndarrays()
        keys = list(self.current_arrays.keys())
        out = []
        for j in self.canaries.inserted:
            model = self.canaries.model(int(j), reference)
            content = RecordDict(
                {
                    record_name: named_record(keys, model),
                    **metric_records,
                }
            )  # fmt: skip
            meta = template.metadata
            metadata = Metadata(
                run_id=meta.run_id,
                message_id=f"canary-{int(j)}",
                src_node_id=CANARY_NODE_ID,
                dst_node_id=meta.dst_node_id,
                reply_to_message_id=meta.reply_to_message_id,
                group_id=meta.group_id,
                created_at=time.time(),
                ttl=meta.ttl,
                message_type=meta.message_type,
            )
            out.append(Message(content=content, metadata=metadata))
        return out
