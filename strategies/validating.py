"""A Message-API wrapper that keeps malformed client updates away from the global model.

Before the wrapped strategy (and any DP wrapper inside it) sees a training reply, every
array is checked against the global arrays sent that round: same keys, same shapes, all
values finite, and its aggregation weight (``num-examples``) a number in (0, 1e9] (not a
bool, NaN or string). A reply that fails is dropped (``on_invalid="drop"``) or the whole
round is skipped (``on_invalid="fail"``); either way the offending node and the reason are
recorded in ``last_round`` and logged, one warning a round that names each sender by what
the grid knows it as (its zone or partition, else its node id) (SPEC §7).

A reply to a message that asked for no client (a zone node sent an empty sample: no client
of its zone sampled, or fewer than ``min-zone-clients``, which the zonal wrapper reports)
carries no update to weigh: it is left out like an invalid reply but is not one (``declined``,
no warning, and under ``on_invalid="fail"`` no reason to skip the round).
Evaluate replies are checked too (:mod:`fedpriv.strategies.reply_checks`): a malformed one is
dropped,
logged and named in the round record (``rejected-evaluation``), and the round goes on.

``accept_failures=False`` (the default, Flower's legacy rule) skips aggregation when any
client replied with an error; ``True`` aggregates the replies that arrived.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import WARNING
from typing import Any, Optional

import numpy as np
from fedpriv.strategies.array_records import array_view
from fedpriv.strategies.base import StrategyWrapper
from fedpriv.strategies.reply_checks import (
    MAX_WEIGHT,
    WEIGHT_KEY,
    checked_evaluations,
    weight_value_problem,
)
from flwr.common import ArrayRecord, ConfigRecord, Message, MetricRecord, log
from flwr.server import Grid
from flwr.serverapp.strategy.strategy import Strategy

from fedpriv.blockwise import max_abs_difference

__all__ = ["MAX_CHANGE", "MAX_WEIGHT", "WEIGHT_KEY", "ValidUpdatesOnly", "update_problem",
           "weight_key", "weight_problem"]  # fmt: skip

# The largest change of one weight in one round that a reply may carry: |w_i - w_g| <= 1e9.
# Beyond it a finite reply (1e18, say) overflows the float32 squared norm that clipping and
# the distances compute, and would stop the round; no model trained by SGD moves that far.
MAX_CHANGE = 1e9


def _max_change(value: np.ndarray, reference: np.ndarray) -> float:
    """``max |value - reference|`` (0 for an empty array), in the arrays' float dtype (float64
    for integer arrays, whose difference could wrap around), a block at a time
    (:func:`fedpriv.blockwise.max_abs_difference`: no model-sized temporaries)."""
    return max_abs_difference(value, reference)


def update_problem(reply: Message, reference: dict[str, np.ndarray]) -> Optional[str]:
    """Why a training reply is unusable, or None if it is fine: exactly one ArrayRecord with
    the global model's keys and shapes, finite values, no weight moved more than MAX_CHANGE.

    One pass per array in its own dtype: ``max |w - w_g|`` is NaN or inf exactly when the
    reply holds a NaN or an inf (w_g is finite) or, for finite float32 values, when the change
    overflows float32 (> 3.4e38, far above MAX_CHANGE); only then is the reply looked at
    again to name the reason. No float64 copy of a 25.7 MB model per reply.
    """
    records = list(reply.content.array_records.values())
    if len(records) != 1:
        return f"expected 1 ArrayRecord, got {len(records)}"
    arrays = records[0]
    if list(arrays.keys()) != list(reference.keys()):
        return "array keys differ from the global model"
    for key, array in arrays.items():
        value = array_view(array)
        if value.shape != reference[key].shape:
            return f"array {key!r} has shape {value.shape}, expected {reference[key].shape}"
        change = _max_change(value, reference[key])
        if not np.isfinite(change) and not np.all(np.isfinite(value)):
            return f"array {key!r} has NaN or Inf values"
        if not change <= MAX_CHANGE:
            return f"array {key!r} moved by {change:.3g}, more than {MAX_CHANGE:.0e}"
    return None


def weight_problem(reply: Message, key: str = WEIGHT_KEY) -> Optional[str]:
    """Why a reply's aggregation weight ``key`` is unusable, or None: it must be an int or
    float (not a bool, not a string or list), finite and in ``(0, MAX_WEIGHT]``.

    A weight outside that set would stop the round: 0 for every reply divides by zero in
    FedAvg's mean, -5 or NaN gives a non-finite mean, 1e308 overflows the sum of weights, a
    bool or a string is not a number Flower's mean or the example-weighted accounting takes.
    """
    found = [r[key] for r in reply.content.metric_records.values() if key in r]
    if len(found) != 1:
        return f"expected one {key!r} metric, got {len(found)}"
    return weight_value_problem(key, found[0])


def sender_name(grid: object, reply: Message) -> str:
    """``zone Z`` or ``partition P`` when the grid maps the reply's sender (a
    ``fedpriv.scenarios.nodes.federation`` grid), else ``node N`` (Flower's node id)."""
    for attr, label in (("zone_of", "zone"), ("partition_of", "partition")):
        find = getattr(grid, attr, None)
        if find is not None:
            try:
                return f"{label} {find(reply)}"
            except (KeyError, TypeError):
                continue
    return f"node {reply.metadata.src_node_id}"


def asked_for_no_client(grid: object, reply: Message) -> bool:
    """Whether the message ``reply`` answers listed no client for its node (a zone node's
    empty sample, ``ZoneGrid.partitions_of``); False when the grid does not say."""
    covers = getattr(grid, "partitions_of", None)
    if covers is None:
        return False
    try:
        return len(covers(reply)) == 0
    except (KeyError, TypeError):
        return False


def reply_check(strategy: Strategy) -> Any:
    """The first ``train_reply_problem(reply)`` of a wrapper chain (a wrapper whose replies
    are not models, e.g. distributed DP's masked vectors), or None: the model check."""
    current = strategy
    while current is not None:
        check = getattr(current, "train_reply_problem", None)
        if check is not None:
            return check
        current = getattr(current, "strategy", None)
    return None


def weight_key(strategy: Strategy) -> str:
    """The ``weighted_by_key`` of the innermost strategy of a wrapper chain (the stock
    strategy that aggregates), Flower's ``num-examples`` when none names one."""
    key, current = WEIGHT_KEY, strategy
    while current is not None:
        key = str(getattr(current, "weighted_by_key", key))
        current = getattr(current, "strategy", None)
    return key


class ValidUpdatesOnly(StrategyWrapper):
    """Drop (or fail the round on) malformed or non-finite updates before aggregation.

    A reply is malformed when its arrays fail :func:`update_problem` or its aggregation
    weight (the stock strategy's ``weighted_by_key``) fails :func:`weight_problem`.

    Parameters
    ----------
    strategy : Strategy
        The strategy that aggregates the valid replies.
    on_invalid : str
        ``"drop"`` removes an invalid reply; ``"fail"`` skips the round's aggregation.
    accept_failures : bool
        Aggregate when some clients failed (True) or skip the round (False).
    """

    # the global arrays of the round in flight, set by every configure_train before the
    # replies they check arrive: a checkpoint need not hold a second copy of the model
    CHECKPOINT_SKIP = ("reference",)

    def __init__(
        self, strategy: Strategy, *, on_invalid: str = "drop", accept_failures: bool = False
    ) -> None:
        if on_invalid not in ("drop", "fail"):
            raise ValueError(f"on_invalid = {on_invalid!r}: expected 'drop' or 'fail'")
        self.strategy = strategy
        self.on_invalid = on_invalid
        self.accept_failures = accept_failures
        self.reference: dict[str, np.ndarray] = {}
        self.weight_key = weight_key(strategy)
        self.last_round: dict = {}
        self._grid: object = None
        self.last_evaluate: dict[int, str] = {}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Remember the global arrays (the reference for checks) and the grid, and delegate."""
        self.reference = {k: array_view(v) for k, v in arrays.items()}
        self._grid = grid
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """Check replies; hand the valid ones to the wrapped strategy."""
        replies = list(replies)
        failed = [m.metadata.src_node_id for m in replies if m.has_error()]
        rejected: dict[int, str] = {}
        valid, declined, named = [], [], []
        for msg in replies:
            if msg.has_error():
                continue
            check = reply_check(self.strategy)
            problem = check(msg) if check else update_problem(msg, self.reference)
            problem = problem or weight_problem(msg, self.weight_key)
            if problem is None:
                valid.append(msg)
            elif asked_for_no_client(self._grid, msg):
                declined.append(msg.metadata.src_node_id)
            else:
                rejected[msg.metadata.src_node_id] = problem
                named.append(f"{sender_name(self._grid, msg)}: {problem}")
        if named:
            log(WARNING, "round %s: %d update(s) rejected: %s", server_round, len(named),
                "; ".join(named))  # fmt: skip
        self.last_round = {"failed-nodes": failed, "rejected": rejected, "skipped": False}
        self.last_round["declined"] = declined
        if (failed and not self.accept_failures) or (rejected and self.on_invalid == "fail"):
            log(
                WARNING,
                "round %s: aggregation skipped (%d failed, %d rejected)",
                server_round,
                len(failed),
                len(rejected),
            )
            self.last_round["skipped"] = True
            return None, None
        if not valid and replies:
            self.last_round["skipped"] = True
            return None, None
        # no replies at all (a Poisson sample drew nobody): the inner strategy decides (a DP
        # wrapper with Poisson sampling still releases w_g + noise)
        return self.strategy.aggregate_train(server_round, valid)

    def round_metrics(self) -> dict:
        """For the round record: rejected updates (node -> reason) and whether it was skipped."""
        return {
            "rejected-nodes": dict(self.last_round.get("rejected", {})),
            "aggregation-skipped": bool(self.last_round.get("skipped", False)),
        }

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> Optional[MetricRecord]:
        """Drop failed and malformed evaluate replies (:func:`checked_evaluations`: one
        MetricRecord of bounded finite numbers, a valid weight, the round's common keys), log
        and count the malformed ones, and delegate the rest (None when none is left)."""
        answered = [m for m in replies if not m.has_error()]
        valid, rejected = checked_evaluations(answered, weight_key=self.weight_key)
        self.last_evaluate = rejected
        for node, problem in rejected.items():
            log(WARNING, "round %s: evaluation from node %s rejected: %s",
                server_round, node, problem)  # fmt: skip
        if not valid:
            return None
        return self.strategy.aggregate_evaluate(server_round, valid)

    def evaluate_round_metrics(self) -> dict:
        """For the round record: rejected evaluations (node -> reason)."""
        return {"rejected-evaluation-nodes": dict(self.last_evaluate)}
