"""A cohort: the clients one message serves, trained together in one compiled call.

A worker SuperNode serves the virtual clients of a packed message
(:mod:`fedpriv.scenarios.nodes.worker`) and a zone SuperNode the sampled clients of its zone
(:mod:`fedpriv.scenarios.zonal.zone_node`). Each client still runs its own, unchanged code: its
handler, its checks, its ledger, its clipping and noise. Only the compiled work is pooled:

- :func:`run_cohort` runs each client's task in a thread of its own, all members of one
  :class:`Cohort`;
- a member's :meth:`fedpriv.clients.compiled.CompiledTrainer.train` or ``evaluate`` does not run the
  call itself: it files the call with the cohort (:meth:`Cohort.submit`) and waits;
- when every member that is still running waits on a call, the cohort runs the filed calls
  together (:func:`fedpriv.clients.cohort_train.train_cohort`: the calls of one trainer as ONE
  compiled call, each client on its own data, seed, schedule and secret noise seed) and
  hands each member its own result, or its own error;
- a member that waited :data:`PATIENCE` seconds in which no other member filed a call or
  finished (one is blocked elsewhere, e.g. on a file lock) runs the calls filed so far: the
  cohort never waits on itself.

What each client computes is a function of its own call only; which other clients share the
compiled call changes the floating-point schedule at most, never whose data, seed or noise a
result comes from (``tests/test_cohort.py``). The members' outcomes come back in task order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

PATIENCE = 0.25  # seconds a waiting member gives the others before running what is filed

_MEMBER = threading.local()


@dataclass
class Call:
    """One filed call: ``owner.<kind>`` with ``kwargs``, and its outcome once run."""

    owner: Any
    kind: str
    kwargs: dict[str, Any]
    done: bool = False
    result: Any = None
    error: BaseException | None = None


@dataclass
class Outcome:
    """A member task's return value, or the exception it raised."""

    value: Any = None
    error: BaseException | None = None


@dataclass
class Cohort:
    """The members of one message and the calls they filed (module docstring).

    ``runner(calls)`` runs a batch of filed calls and sets each one's ``result`` or
    ``error`` (:func:`fedpriv.clients.cohort_train.run_calls`).
    """

    members: int
    runner: Callable[[list[Call]], None]
    pending: list[Call] = field(default_factory=list)
    batches: int = 0  # how many batches ran (tests and benchmarks)
    progress: int = 0  # calls filed + members left: a waiting member sees whether others move
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def submit(self, owner: Any, kind: str, **kwargs: Any) -> Any:
        """File ``owner.<kind>(**kwargs)``, wait until the cohort ran it, return its result."""
        call = Call(owner, kind, kwargs)
        with self._cond:
            self.pending.append(call)
            self.progress += 1
            self._run_if_all_wait()
            seen = self.progress
            while not call.done:
                self._cond.wait(PATIENCE)
                if not call.done and self.progress == seen:
                    self._run_pending()  # no member filed or left: one is held elsewhere
                seen = self.progress
        if call.error is not None:
            raise call.error
        return call.result

    def leave(self) -> None:
        """A member's task returned or raised: it files no more calls."""
        with self._cond:
            self.members -= 1
            self.progress += 1
            self._run_if_all_wait()

    def _run_if_all_wait(self) -> None:
        if self.pending and len(self.pending) >= self.members:
            self._run_pending()

    def _run_pending(self) -> None:
        """Run the filed calls (the lock is held: the members that filed them all wait)."""
        calls, self.pending = self.pending, []
        if not calls:
            return
        self.batches += 1
        try:
            self.runner(calls)
        except BaseException as err:  # noqa: BLE001 (each member gets it as its own error)
            for call in calls:
                if not call.done:
                    call.error, call.done = err, True
        for call in calls:
            if not call.done:
                call.error = RuntimeError(f"the cohort did not run {call.kind}")
                call.done = True
        self._cond.notify_all()


def current_cohort() -> Cohort | None:
    """The cohort the calling thread is a member of (None: a client on its own)."""
    return getattr(_MEMBER, "cohort", None)


def _member(cohort: Cohort, task: Callable[[], Any], out: Outcome) -> None:
    _MEMBER.cohort = cohort
    try:
        out.value = task()
    except BaseException as err:  # noqa: BLE001 (the member's own outcome)
        out.error = err
    finally:
        _MEMBER.cohort = None
        cohort.leave()


def run_cohort(
    tasks: Sequence[Callable[[], Any]], runner: Callable[[list[Call]], None]
) -> tuple[list[Outcome], Cohort | None]:
    """Run ``tasks`` as the members of one cohort (module docstring) whose filed calls
    ``runner`` runs (:func:`fedpriv.clients.cohort_train.run_calls`); their outcomes in order, and
    the cohort. One task: it runs in the calling thread (cohort None). Called by a thread
    that is itself a member (a zone of a worker's packed message training its clients), the
    tasks join that member's cohort (:func:`_join`): one compiled call for all of them."""
    parent = current_cohort()
    if len(tasks) < 2:
        return [alone(task) for task in tasks], None
    if parent is not None:
        return _join(parent, tasks), parent
    cohort = Cohort(members=len(tasks), runner=runner)
    outcomes = [Outcome() for _ in tasks]
    threads = [
        threading.Thread(target=_member, args=(cohort, task, out), daemon=True)
        for task, out in zip(tasks, outcomes)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes, cohort


def _join(cohort: Cohort, tasks: Sequence[Callable[[], Any]]) -> list[Outcome]:
    """``tasks`` as members of ``cohort``, which the calling member (it files nothing while
    it waits on them) leaves until they are done: the cohort never waits on it meanwhile."""
    with cohort._cond:
        cohort.members += len(tasks) - 1
        cohort.progress += 1
    outcomes = [Outcome() for _ in tasks]
    threads = [
        threading.Thread(target=_member, args=(cohort, task, out), daemon=True)
        for task, out in zip(tasks, outcomes)
    ]
    started: list[threading.Thread] = []
    try:
        for thread in threads:
            thread.start()
            started.append(thread)
    finally:
        for _ in range(len(threads) - len(started)):
            cohort.leave()  # a member that never started files nothing
        for thread in started:
            thread.join()
        with cohort._cond:
            cohort.members += 1  # the caller is a member again
            cohort.progress += 1
    return outcomes


def alone(task: Callable[[], Any]) -> Outcome:
    """``task``'s outcome, run in the calling thread (no cohort)."""
    try:
        return Outcome(value=task())
    except Exception as err:  # noqa: BLE001 (the task's own outcome)
        return Outcome(error=err)
