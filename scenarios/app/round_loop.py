"""The round loop: Flower's ``Strategy.start`` (flwr 1.23) without its logging, with hook
points, a start round and one message per round for train + evaluate.

Per round ``configure_train`` -> ``send_and_receive`` -> ``aggregate_train`` ->
``configure_evaluate`` -> ``send_and_receive`` -> ``aggregate_evaluate`` -> server-side
evaluation (which writes the record) -> ``after_round`` hooks. With ``evaluate-in-train``
(:mod:`fedpriv.scenarios.app.fused`) round t's train replies also carry the clients' evaluation of
model t-1: round t-1 is recorded from them, and only the last round has an evaluate message.
:func:`fedpriv.scenarios.app.engine.train_run` builds a run around it.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from logging import INFO, WARNING
from typing import Any, Optional

from fedpriv.scenarios.app.fused import EVALUATE_RECEIVED_KEY, split_evaluations
from fedpriv.scenarios.app.recorder import wrapper_chain
from flwr.app import ArrayRecord, ConfigRecord
from flwr.common import log
from flwr.serverapp.strategy.strategy import Strategy

from fedpriv.checkpoint import capture_state


def budget_stop(strategy: Strategy, server_round: int) -> Optional[str]:
    """Why round ``server_round`` must not run, or None: the first wrapper of the chain
    whose privacy budget (``budget_stop``, e.g. ``max-epsilon`` of global DP) it would pass."""
    for wrapper in wrapper_chain(strategy):
        check = getattr(wrapper, "budget_stop", None)
        reason = check(server_round) if callable(check) else None
        if reason:
            return str(reason)
    return None


def budget_stopped(strategy: Strategy) -> dict[str, str]:
    """``{"stopped": reason}`` when a wrapper's budget stopped the run (before a round, or
    by withholding a round's release); ``{}`` otherwise."""
    for wrapper in wrapper_chain(strategy):
        reason = getattr(wrapper, "budget_stopped", None)
        if reason:
            return {"stopped": str(reason)}
    return {}


def server_ledger_figures(strategy: Strategy) -> dict[str, Any]:
    """``{"server_ledger": figures}`` of the first wrapper of the chain that keeps the
    server's release ledger (:class:`fedpriv.privacy.ledger.server.ServerLedger`: this run's
    and the lifetime ε, earlier releases); ``{}`` when none does."""
    for wrapper in wrapper_chain(strategy):
        ledger = getattr(wrapper, "server_ledger", None)
        if ledger is not None:
            return {"server_ledger": ledger.figures()}
    return {}


@dataclass
class RoundState:
    """What the loop hands the ``after_round`` hooks (everything a checkpoint needs).

    ``states``: the chain's state to checkpoint when it is not the live one (a round recorded
    with the next round's train replies, :mod:`fedpriv.scenarios.app.fused`: the state before that
    round's sampling); None: capture it from ``strategy``."""

    round: int
    arrays: ArrayRecord
    record: dict[str, Any]
    strategy: Strategy
    states: Optional[list[dict[str, Any]]] = None


def run_rounds(
    strategy: Strategy,
    grid: Any,
    initial: ArrayRecord,
    *,
    num_rounds: int,
    config: ConfigRecord,
    evaluate: Callable[[int, ArrayRecord], dict],
    first_round: int = 1,
    after_round: Sequence[Callable[[RoundState], None]] = (),
    before_release: Sequence[Callable[[RoundState], None]] = (),
    charged_round: Optional[int] = None,
    timeout: float = 3600,
    stop_before: Optional[Callable[[int], Optional[str]]] = None,
    fused: bool = False,
    evaluate_ahead: Optional[Callable[[ArrayRecord], None]] = None,
) -> Optional[ArrayRecord]:
    """Rounds ``first_round..num_rounds``; returns the last aggregated arrays (None if none).

    ``fused`` (``evaluate-in-train``, :mod:`fedpriv.scenarios.app.fused`): round t's train message
    also
    evaluates model t-1 and round t-1 is recorded from those replies; an evaluate message is
    sent only for a round no train message follows (the last, or one before a stop).

    ``evaluate_ahead(arrays)``: told a fused round's new model as soon as it is aggregated,
    before the next round's messages go out (:mod:`fedpriv.scenarios.app.eval_ahead`: the server's
    evaluation then runs while the clients train).

    ``stop_before(round)``: a reason not to run that round (then no later round runs).
    ``before_release``: hooks after ``aggregate_train`` (the round is charged) and before
    ``configure_evaluate`` sends the new global model out (the checkpoint that makes
    a resume never release a round twice uncharged). ``charged_round``: a round that such a
    checkpoint holds (its arrays are ``initial``) but whose evaluation and record did not
    happen: it is finished first (the same arrays are sent again, no new noise).
    """
    arrays, last, pending = initial, None, None
    if first_round == 1 and charged_round is None:
        evaluate(0, arrays)
    if charged_round is not None:
        _finish_round(strategy, grid, charged_round, arrays, config, evaluate, after_round, timeout)
    for server_round in range(first_round, num_rounds + 1):
        reason = stop_before(server_round) if stop_before is not None else None
        if reason:
            log(WARNING, "stopping before round %s: %s", server_round, reason)
            break
        log(INFO, "[ROUND %s/%s]", server_round, num_rounds)
        held = _Held.of(strategy, bool(after_round)) if pending is not None else None
        train_config = ConfigRecord({**config, EVALUATE_RECEIVED_KEY: True}) if held else config
        messages = strategy.configure_train(server_round, arrays, train_config, grid)
        replies = grid.send_and_receive(messages=messages, timeout=timeout)
        if held is not None and pending is not None:  # round t-1's evaluation came back
            held.record(pending, arrays, split_evaluations(replies), evaluate, after_round)
            pending = None
        aggregated, _ = strategy.aggregate_train(server_round, replies)
        if aggregated is not None:
            arrays = last = aggregated
        for hook in before_release:
            hook(RoundState(server_round, arrays, {}, strategy))
        if fused and server_round < num_rounds:
            pending = server_round  # recorded with the next round's train replies
            if evaluate_ahead is not None:
                evaluate_ahead(arrays)
            continue
        _finish_round(strategy, grid, server_round, arrays, config, evaluate, after_round, timeout)
    if pending is not None:  # no train message followed it (a stop): evaluate it on its own
        _finish_round(strategy, grid, pending, arrays, config, evaluate, after_round, timeout)
    return last


@dataclass
class _Held:
    """A round awaiting its evaluation (``fused``): its recorder ``current`` and the chain's
    state before the next round's sampling (deep-copied, only for hooks: a checkpoint)."""

    strategy: Strategy
    current: dict[str, Any]
    states: Optional[list[dict[str, Any]]]

    @classmethod
    def of(cls, strategy: Strategy, snapshot: bool) -> _Held:
        """Hold the round now, before the next round's ``configure_train``."""
        chain = capture_state(wrapper_chain(strategy)) if snapshot else None
        states = pickle.loads(pickle.dumps(chain)) if snapshot else None
        return cls(strategy, dict(getattr(strategy, "current", {})), states)

    def record(self, server_round, arrays, evaluations, evaluate, after_round) -> None:
        """Record the held round with ``evaluations`` (then back to the live ``current``)."""
        own = getattr(self.strategy, "current", {})
        self.strategy.current = self.current
        self.strategy.aggregate_evaluate(server_round, evaluations)
        record = evaluate(server_round, arrays)
        for hook in after_round:
            hook(RoundState(server_round, arrays, record, self.strategy, self.states))
        self.strategy.current = own


def _finish_round(
    strategy: Strategy,
    grid: Any,
    server_round: int,
    arrays: ArrayRecord,
    config: ConfigRecord,
    evaluate: Callable[[int, ArrayRecord], dict],
    after_round: Sequence[Callable[[RoundState], None]],
    timeout: float,
) -> None:
    """A round after its aggregation: federated evaluation (the release of the new global
    model), the server-side evaluation that writes the record, the ``after_round`` hooks."""
    messages = strategy.configure_evaluate(server_round, arrays, config, grid)
    replies = grid.send_and_receive(messages=messages, timeout=timeout)
    strategy.aggregate_evaluate(server_round, replies)
    record = evaluate(server_round, arrays)
    for hook in after_round:
        hook(RoundState(server_round, arrays, record, strategy))
