"""The server's test-set evaluation of a round's model, started as soon as the model exists.

With ``evaluate-in-train`` (:mod:`fedpriv.scenarios.app.fused`) round t is recorded only when round
t+1's train replies arrive (they carry the clients' evaluation of model t). The server's own
evaluation of model t needs nothing from them: started in a thread right after round t's
aggregation, it runs while the clients train round t+1, and the record takes its result.
Measured before (py-spy on an H200 host, MP CNN): the server's evaluation was ~65 ms of a
0.8 s round, in series with the clients' training.

The values are those of evaluating at record time (the same weights, the same compiled
forward pass); only one evaluation is ahead at a time, and one for other arrays than the
record's is not used (the record evaluates its own).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Optional

from fedpriv.clients.records import arrays_of
from flwr.app import ArrayRecord


class EvaluationAhead:
    """``server_eval(weights) -> metrics`` run ahead of the record in a thread."""

    def __init__(self, server_eval: Callable[[list], dict]) -> None:
        self._eval = server_eval
        self._ahead: Optional[tuple[ArrayRecord, threading.Thread, dict[str, Any]]] = None

    def start(self, arrays: ArrayRecord) -> None:
        """Begin evaluating ``arrays`` (after waiting for an earlier one still running)."""
        self._settle()
        done: dict[str, Any] = {}

        def work() -> None:
            try:
                done["metrics"] = self._eval(arrays_of(arrays))
            except BaseException as err:  # noqa: BLE001 -- re-raised by metrics()
                done["error"] = err

        thread = threading.Thread(target=work, name="fedpriv-evaluation-ahead", daemon=True)
        thread.start()
        self._ahead = (arrays, thread, done)

    def metrics(self, arrays: ArrayRecord) -> dict:
        """The server metrics of ``arrays``: the evaluation ahead when it was of this very
        record (its error raised here), else evaluated now."""
        ahead, done = self._ahead, self._settle()
        if ahead is not None and ahead[0] is arrays:
            if "error" in done:
                raise done["error"]
            return done["metrics"]
        return self._eval(arrays_of(arrays))

    def _settle(self) -> dict[str, Any]:
        """Wait for the evaluation ahead (if any) and forget it; its outcome."""
        if self._ahead is None:
            return {}
        _, thread, done = self._ahead
        thread.join()
        self._ahead = None
        return done
