"""scenarios.app.eval_ahead: the server's evaluation of a fused round's model runs while the
next round trains, and the record gets exactly what evaluating at record time gives."""

import threading

import numpy as np
import pytest
from flwr.app import ArrayRecord

from scenarios.app.eval_ahead import EvaluationAhead


def _record(value: float) -> ArrayRecord:
    return ArrayRecord([np.full(3, value, np.float32)])


def test_the_evaluation_runs_ahead_in_another_thread_and_the_record_takes_it():
    release, calls = threading.Event(), []

    def server_eval(weights):
        calls.append(threading.current_thread().name)
        assert release.wait(10)  # blocks until the "next round" in the main thread is done
        return {"sum": float(sum(w.sum() for w in weights))}

    ahead = EvaluationAhead(server_eval)
    arrays = _record(2.0)
    ahead.start(arrays)
    # the main thread goes on (the next round's messages) while the evaluation waits
    release.set()
    assert ahead.metrics(arrays) == {"sum": 6.0}
    assert calls == ["fedpriv-evaluation-ahead"]  # evaluated once, not again at record time


def test_other_arrays_than_those_ahead_are_evaluated_at_record_time():
    seen = []

    def server_eval(weights):
        seen.append(float(weights[0][0]))
        return {"first": float(weights[0][0])}

    ahead = EvaluationAhead(server_eval)
    ahead.start(_record(1.0))
    assert ahead.metrics(_record(5.0)) == {"first": 5.0}  # equal values, another record
    assert seen == [1.0, 5.0]
    assert ahead.metrics(_record(7.0)) == {"first": 7.0}  # nothing ahead any more


def test_an_error_ahead_is_raised_by_the_record():
    def server_eval(weights):
        raise RuntimeError("the test set is gone")

    ahead = EvaluationAhead(server_eval)
    arrays = _record(0.0)
    ahead.start(arrays)
    with pytest.raises(RuntimeError, match="test set is gone"):
        ahead.metrics(arrays)
