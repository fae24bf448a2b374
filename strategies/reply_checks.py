"""Evaluate replies checked like train replies before any metric is aggregated (SPEC §7).

An evaluate reply (a client's, a zone node's, a fused ``evaluation`` record, an IFCA
validation user's) is usable when

- its content is exactly one record, a ``MetricRecord`` (named ``record`` when the caller
  expects a name): no ArrayRecord, no ConfigRecord, nothing else;
- it carries the aggregation weight ``weight_key`` (``num-examples``) and every ``required``
  key; the weight is a number in (0, MAX_WEIGHT] (:func:`weight_value_problem`);
- every metric is a single finite number (an int or a float, not a bool or a list) in its
  bounds: ``*accuracy`` in [0, 1], anything else in [-MAX_METRIC, MAX_METRIC].

Then the weighted mean Σ w_i v_i / Σ w_i of any metric over the usable replies is finite and
lies in [min v_i, max v_i] (w_i ≤ 1e9 and ``|v_i|`` ≤ 1e9: every product and sum is far below
float64's 1.8e308): an accuracy stays a fraction. :func:`checked_evaluations` also keeps only
the replies whose metric names are the round's most common set, as Flower's
``aggregate_metricrecords`` needs (``validate_message_reply_consistency`` raises otherwise).
A reply that fails is dropped and named with its reason; the round goes on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Optional

import numpy as np
from flwr.common import Message, MetricRecord

# The largest aggregation weight (``num-examples``) a reply may carry. Beyond it a finite
# weight (1e308, say) overflows the sum of weights in FedAvg's mean and the example-weighted
# DP accounting; no client of a federated run holds more than 10^9 examples.
MAX_WEIGHT = 1e9
WEIGHT_KEY = "num-examples"  # Flower's default ``weighted_by_key``
# The largest |metric| an evaluate reply may carry: a loss of 1e9 is already a diverged model;
# with MAX_WEIGHT it keeps every weighted sum below 1e18.
MAX_METRIC = 1e9
FRACTION_SUFFIX = "accuracy"  # accuracy, balanced-accuracy, ...: a fraction of examples


def weight_value_problem(key: str, value: object) -> Optional[str]:
    """Why ``value`` is no aggregation weight, or None: an int or float (not a bool, a string
    or a list), finite and in ``(0, MAX_WEIGHT]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return f"{key} = {value!r} is not a number"
    weight = float(value)
    if not np.isfinite(weight):
        return f"{key} = {weight!r} is not finite"
    if not 0.0 < weight <= MAX_WEIGHT:
        return f"{key} = {weight:.6g} is outside (0, {MAX_WEIGHT:.0e}]"
    return None


def metric_bounds(name: str) -> tuple[float, float]:
    """[low, high] of the metric ``name``: [0, 1] for an accuracy, else ±MAX_METRIC."""
    return (0.0, 1.0) if name.endswith(FRACTION_SUFFIX) else (-MAX_METRIC, MAX_METRIC)


def metric_value_problem(name: str, value: object) -> Optional[str]:
    """Why ``value`` is not a usable metric ``name``, or None (one finite number in bounds)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return f"{name} = {str(value)[:60]} is not a number"
    number = float(value)
    low, high = metric_bounds(name)
    if not np.isfinite(number):
        return f"{name} = {number!r} is not finite"
    if not low <= number <= high:
        return f"{name} = {number:.6g} is outside [{low:g}, {high:g}]"
    return None


def evaluate_problem(
    reply: Message,
    *,
    weight_key: str = WEIGHT_KEY,
    record: Optional[str] = None,
    required: Sequence[str] = (),
) -> Optional[str]:
    """Why an evaluate reply is unusable, or None (the rules of this module's docstring)."""
    content = reply.content
    names = list(content.keys())
    if len(names) != 1 or (record is not None and names != [record]):
        expected = f"one MetricRecord {record!r}" if record else "one MetricRecord"
        return f"records {names}; expected {expected}"
    metrics = content[names[0]]
    if not isinstance(metrics, MetricRecord):
        return f"record {names[0]!r} is a {type(metrics).__name__}; expected a MetricRecord"
    missing = [k for k in (weight_key, *required) if k not in metrics]
    if missing:
        return f"metrics {missing} missing"
    for name, value in metrics.items():
        check = weight_value_problem if name == weight_key else metric_value_problem
        problem = check(name, value)
        if problem is not None:
            return problem
    return None


def checked_evaluations(
    replies: Iterable[Message],
    *,
    weight_key: str = WEIGHT_KEY,
    record: Optional[str] = None,
    required: Sequence[str] = (),
    same_keys: bool = True,
) -> tuple[list[Message], dict[int, str]]:
    """(usable replies, {node id: reason} of the dropped ones). With ``same_keys`` a usable
    reply whose metric names differ from the round's most common set (ties: the first
    reply's) is dropped too. Error replies are the caller's to filter first."""
    valid: list[Message] = []
    rejected: dict[int, str] = {}
    for reply in replies:
        problem = evaluate_problem(reply, weight_key=weight_key, record=record, required=required)
        if problem is None:
            valid.append(reply)
        else:
            rejected[reply.metadata.src_node_id] = problem
    if not same_keys or not valid:
        return valid, rejected
    keys = [_keys(m) for m in valid]
    common = Counter(keys).most_common(1)[0][0]
    for reply, names in zip(valid, keys):
        if names != common:
            rejected[reply.metadata.src_node_id] = (
                f"metrics {sorted(names)} differ from the round's {sorted(common)}"
            )
    return [m for m, names in zip(valid, keys) if names == common], rejected


def _keys(reply: Message) -> frozenset[str]:
    return frozenset(next(iter(reply.content.metric_records.values())).keys())
