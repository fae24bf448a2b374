"""fedpriv.scenarios.app.eval_ahead: the server's evaluation of a fused round's model runs while the
next round trains, and the record gets exactly what evaluating at record time gives."""

import threading

import numpy as np
import pytest
from fedpriv.scenarios.app.eval_ahead import EvaluationAhead
from flwr.app import ArrayRecord


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


def test_the_server_prepares_its_initial_model_unless_a_checkpoint_gives_it(tmp_path, monkeypatch):
    """engine.prepare_server: the initial weights and the evaluation's compilation in a thread;
    with a checkpoint in output-dir the weights are not built (a resume starts from its
    arrays; no pretraining thrown away), the evaluation still compiles."""
    from types import SimpleNamespace

    from fedpriv.scenarios.app import engine

    from fedpriv.checkpoint import CHECKPOINT

    built, compiled = [], []
    monkeypatch.setattr(engine, "start_weights", lambda spec, data: built.append(1) or ["w"])
    monkeypatch.setattr(engine, "model_for", lambda train, data: "model")
    trainer = SimpleNamespace(predict=lambda weights, x: compiled.append((weights, x)))
    monkeypatch.setattr(engine, "trainer_for", lambda model: trainer)
    spec = SimpleNamespace(output_dir=str(tmp_path), train=None)
    data = SimpleNamespace(x_test="test set")
    assert engine.prepare_server(spec, data)() == ["w"]
    assert built == [1] and compiled == [(None, "test set")]
    (tmp_path / CHECKPOINT).write_bytes(b"")
    assert engine.prepare_server(spec, data)() is None
    assert built == [1] and len(compiled) == 2


def test_an_error_while_preparing_the_server_is_raised_where_it_waits(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from fedpriv.scenarios.app import engine

    def broken(spec, data):
        raise ValueError("no such model")

    monkeypatch.setattr(engine, "start_weights", broken)
    spec = SimpleNamespace(output_dir=str(tmp_path), train=None)
    with pytest.raises(ValueError, match="no such model"):
        engine.prepare_server(spec, SimpleNamespace(x_test=None))()
