"""Cohort training (clients/cohort.py, clients/cohort_train.py): the clients of one message
train in one compiled call, each on its own data, start weights, seed and noise seed.

Reference: the same calls of the same trainer made one at a time (``CompiledTrainer.train``
outside a cohort, itself checked against an independent eager loop in
test_compiled_training.py). The cohort's pooling is checked with a runner of our own: calls
are pooled only when every running member waits, a member blocked elsewhere never stalls the
others, and every member gets its own outcome, in task order.
"""

from __future__ import annotations

import threading

import keras
import numpy as np
import pytest
from fedpriv.clients import cohort as cohort_mod
from fedpriv.clients.cohort import Call, current_cohort, run_cohort
from fedpriv.clients.cohort_train import run_cohort as train_as_cohort
from fedpriv.clients.compiled import CompiledTrainer, DpStepConfig

from fedpriv.models import build_model

TOL = dict(rtol=1e-5, atol=1e-6)
LOSS = keras.losses.SparseCategoricalCrossentropy(reduction=None)


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 8, 8, 1)).astype(np.float32), rng.integers(0, 10, n)


def _start(model: keras.Model, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.2 * rng.normal(size=w.shape)).astype(np.float32) for w in model.weights]


def _trainer(dp: DpStepConfig | None = None, name: str = "digits-mlp") -> CompiledTrainer:
    model = build_model(name, input_shape=(8, 8, 1), num_classes=10)
    return CompiledTrainer(model, keras.optimizers.SGD(0.1), LOSS, classifier=True, dp=dp)


def _close(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, **TOL)


# --- the cohort's pooling (a runner of our own) ---------------------------------------------


class Recorder:
    """A runner that records each batch's calls and answers ``owner * kwargs["v"]``."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __call__(self, calls: list[Call]) -> None:
        self.batches.append([c.kwargs["v"] for c in calls])
        for c in calls:
            if c.kwargs["v"] < 0:
                c.error = ValueError(f"v = {c.kwargs['v']}")
            else:
                c.result = c.owner * c.kwargs["v"]
            c.done = True


def _member_call(v: int):
    return lambda: current_cohort().submit(10, "work", v=v)


def test_a_cohort_pools_the_calls_of_all_waiting_members_and_answers_each_in_order():
    runner = Recorder()
    outcomes, cohort = run_cohort([_member_call(v) for v in range(6)], runner)
    assert [o.value for o in outcomes] == [10 * v for v in range(6)]
    assert len(runner.batches) == 1 and sorted(runner.batches[0]) == list(range(6))
    assert cohort.batches == 1


def test_a_members_error_is_its_own_and_a_raising_task_does_not_stall_the_others():
    def raises() -> None:
        raise KeyError("no partition")

    runner = Recorder()
    tasks = [_member_call(1), _member_call(-2), raises, _member_call(3)]
    outcomes, _ = run_cohort(tasks, runner)
    assert outcomes[0].value == 10 and outcomes[3].value == 30
    assert isinstance(outcomes[1].error, ValueError) and "v = -2" in str(outcomes[1].error)
    assert isinstance(outcomes[2].error, KeyError)
    assert sorted(v for b in runner.batches for v in b) == [-2, 1, 3]


def test_a_member_blocked_elsewhere_does_not_deadlock_the_cohort(monkeypatch):
    """B waits on an event that A sets only after A's own call returned: pooling A's call
    with B's would wait forever; after PATIENCE without progress A's call runs alone."""
    monkeypatch.setattr(cohort_mod, "PATIENCE", 0.05)
    released = threading.Event()

    def a() -> int:
        out = current_cohort().submit(10, "work", v=1)
        released.set()
        return out

    def b() -> int:
        assert released.wait(10)
        return current_cohort().submit(10, "work", v=2)

    runner = Recorder()
    outcomes, _ = run_cohort([a, b], runner)
    assert [o.value for o in outcomes] == [10, 20]
    assert runner.batches == [[1], [2]]


def test_one_task_runs_in_the_calling_thread_without_pooling():
    runner = Recorder()
    outcomes, cohort = run_cohort([lambda: current_cohort()], runner)
    assert cohort is None and outcomes[0].value is None and runner.batches == []


def test_the_tasks_of_members_join_their_cohort_and_pool_into_one_call():
    """A worker's zones each train their clients: every client of every zone is a member of
    the worker's one cohort, so all their calls run as one batch; each answer is its own."""
    runner = Recorder()

    def zone(z: int):
        def train_clients() -> list[int]:
            inner, cohort = run_cohort([_member_call(10 * z + k) for k in range(3)], runner)
            assert cohort is current_cohort()  # the zone's own cohort, joined
            return [o.value for o in inner]

        return train_clients

    outcomes, cohort = run_cohort([zone(z) for z in (1, 2, 3)], runner)
    assert [o.value for o in outcomes] == [[100 * z + 10 * k for k in range(3)] for z in (1, 2, 3)]
    assert len(runner.batches) == 1 and len(runner.batches[0]) == 9
    assert cohort.members == 0  # every zone and client left


# --- training and evaluation in one compiled call -------------------------------------------


def _calls(trainer: CompiledTrainer, dp: bool) -> list[dict]:
    """Clients of different sizes (so different step counts), two start weight sets, FedProx
    for some; under DP each client its own noise seed."""
    starts = [_start(trainer.model, 1), _start(trainer.model, 2)]
    out = []
    for k, n in enumerate([40, 9, 23, 40, 17]):
        x, y = _data(n, seed=10 + k)
        kw = dict(weights=starts[k % 2], x=x, y=y, epochs=2, batch_size=8, seed=100 + k)
        kw["proximal_mu"] = 0.3 if k in (1, 3) else 0.0
        if dp:
            kw["noise_seed"] = np.array([k, 7 * k + 1], np.int32)
        out.append(kw)
    return out


def _train(trainer: CompiledTrainer, kw: dict):
    kw = dict(kw)
    return trainer.train(kw.pop("weights"), kw.pop("x"), kw.pop("y"), **kw)


@pytest.mark.parametrize("dp", [None, DpStepConfig(l2_norm_clip=0.5, noise_multiplier=1.1)])
def test_a_cohorts_training_equals_each_client_trained_on_its_own(dp):
    trainer = _trainer(dp)
    calls = _calls(trainer, dp is not None)
    alone = [_train(trainer, kw) for kw in calls]
    traces = trainer.traces
    outcomes = train_as_cohort([lambda kw=kw: _train(trainer, kw) for kw in calls])
    assert trainer.traces > traces  # the cohort's own compiled call ran
    for (w_alone, m_alone), outcome in zip(alone, outcomes):
        assert outcome.error is None, outcome.error
        w_cohort, m_cohort = outcome.value
        _close(w_alone, w_cohort)
        assert m_cohort.keys() == m_alone.keys()
        for key in m_alone:
            assert m_cohort[key] == pytest.approx(m_alone[key], rel=1e-5, abs=1e-6)
    moved = [max(float(np.abs(a - b).max()) for a, b in zip(w, kw["weights"])) for (w, _), kw in
             zip(alone, calls)]  # fmt: skip
    assert min(moved) > 1e-3  # every client trained


def test_in_a_cohort_each_client_gets_its_own_result_not_a_neighbours():
    """Swapping two clients' data swaps their results: nothing is read by position."""
    trainer = _trainer()
    calls = _calls(trainer, False)[:3]
    swapped = [calls[1], calls[0], calls[2]]
    first = train_as_cohort([lambda kw=kw: _train(trainer, kw) for kw in calls])
    second = train_as_cohort([lambda kw=kw: _train(trainer, kw) for kw in swapped])
    _close(first[0].value[0], second[1].value[0])
    _close(first[1].value[0], second[0].value[0])
    assert not np.allclose(first[0].value[0][0], first[1].value[0][0])


def test_dp_sgd_noise_in_a_cohort_is_each_clients_own_secret_seed():
    """Two clients with the same data, start and batches but different noise seeds get
    different results; with the same noise seed the same one."""
    trainer = _trainer(DpStepConfig(l2_norm_clip=0.5, noise_multiplier=1.0))
    kw = _calls(trainer, True)[0]
    calls = [dict(kw, noise_seed=np.array(s, np.int32)) for s in ([1, 2], [3, 4], [1, 2])]
    out = train_as_cohort([lambda c=c: _train(trainer, c) for c in calls])
    w = [o.value[0] for o in out]
    _close(w[0], w[2])
    assert max(float(np.abs(a - b).max()) for a, b in zip(w[0], w[1])) > 1e-4


def test_a_cohorts_evaluations_equal_each_clients_own():
    trainer = _trainer()
    starts = [_start(trainer.model, 1), _start(trainer.model, 2)]
    splits = [_data(n, seed=30 + n) for n in (12, 1, 40, 7)]
    evals = [(starts[k % 2], x, y) for k, (x, y) in enumerate(splits)]
    evals.append((starts[0], splits[0][0][:0], splits[0][1][:0]))  # an empty test split
    alone = [trainer.evaluate(*e) for e in evals]
    out = train_as_cohort([lambda e=e: trainer.evaluate(*e) for e in evals])
    for a, o in zip(alone[:-1], out[:-1]):
        assert o.value["loss"] == pytest.approx(a["loss"], rel=1e-5)
        assert o.value["accuracy"] == pytest.approx(a["accuracy"], abs=1e-9)
    assert np.isnan(out[-1].value["loss"])


def test_a_bad_call_fails_only_its_own_member():
    trainer = _trainer()
    calls = _calls(trainer, False)[:3]
    bad = dict(calls[1], weights=calls[1]["weights"][:2])  # two arrays for a 4-array model
    out = train_as_cohort([lambda kw=kw: _train(trainer, kw) for kw in (calls[0], bad, calls[2])])
    assert out[0].error is None and out[2].error is None
    assert isinstance(out[1].error, ValueError) and "2 weight arrays" in str(out[1].error)


def test_a_cold_cohort_builds_one_model_and_one_trainer_for_all_its_clients():
    """The first message of a process: its clients' threads all ask for the model at once;
    one model and one trainer are built (a model built per thread failed the round)."""
    from fedpriv.clients import keras_client
    from fedpriv.clients.partitions import federated_data
    from fedpriv.scenarios.config.registry import resolve_run_config
    from fedpriv.scenarios.config.specs import data_spec, train_spec

    cfg = resolve_run_config({"scenario": "digits", "num-clients": 6, "model": "digits-mlp"})
    train, data = train_spec(cfg), federated_data(data_spec(cfg))
    keras_client._cached_model.cache_clear()
    keras_client._TRAINERS.clear()

    def client(p: int):
        model = keras_client.model_for(train, data)
        settings = keras_client.TrainSettings.from_spec(train, seed=p)
        c = data.clients[p]
        return id(model), keras_client.train_local(model, model.get_weights(), c.x_train,
                                                   c.y_train, settings)  # fmt: skip

    out = train_as_cohort([lambda p=p: client(p) for p in range(6)])
    assert [o.error for o in out] == [None] * 6
    assert len({o.value[0] for o in out}) == 1 and len(keras_client._TRAINERS) == 1


def test_a_message_to_more_clients_than_a_cohort_holds_runs_in_chunks_in_order(monkeypatch):
    from fedpriv.clients import cohort_train

    sizes = []
    inner = cohort_train._run_cohort
    monkeypatch.setattr(cohort_train, "MAX_MEMBERS", 3)

    def counted(tasks, runner):
        sizes.append(len(tasks))
        return inner(tasks, runner)

    monkeypatch.setattr(cohort_train, "_run_cohort", counted)
    trainer = _trainer()
    calls = _calls(trainer, False)
    alone = [_train(trainer, kw) for kw in calls]
    out = train_as_cohort([lambda kw=kw: _train(trainer, kw) for kw in calls])
    assert sizes == [3, 2]
    for (w, _), o in zip(alone, out):
        _close(w, o.value[0])


def test_weight_sets_are_told_apart_by_value_and_shared_bytes_need_no_compare(monkeypatch):
    """A worker's clients read one received model in place: the same memory is the same
    set without comparing bytes; an equal copy is the same set, a changed one is not."""
    from fedpriv.clients import cohort_train

    data = np.arange(12, dtype=np.float32).tobytes()
    view = lambda: np.frombuffer(data, np.float32).reshape(3, 4)  # noqa: E731
    copy, changed = view().copy(), view() + 1
    compared = []
    real = np.array_equal
    monkeypatch.setattr(cohort_train.np, "array_equal",
                        lambda a, b: compared.append(1) or real(a, b))  # fmt: skip
    sets, which = cohort_train._distinct([[view()], [view()], [copy], [changed]])
    assert which == [0, 0, 0, 1] and len(sets) == 2
    assert len(compared) == 2  # the copy (equal) and the changed set (not): not the views


def test_a_cohorts_data_stays_on_the_device_while_its_splits_are_the_same_arrays():
    """The second round of the same clients reuses the concatenated data on the device (and
    trains as before); other splits replace it."""
    trainer = _trainer()
    calls = _calls(trainer, False)
    first = train_as_cohort([lambda kw=kw: _train(trainer, kw) for kw in calls])
    held = trainer._cohort_data_held[1]
    second = train_as_cohort([lambda kw=kw: _train(trainer, kw) for kw in calls])
    assert trainer._cohort_data_held[1] is held
    for a, b in zip(first, second):
        _close(a.value[0], b.value[0])
    copied = [dict(kw, x=kw["x"].copy()) for kw in calls]
    third = train_as_cohort([lambda kw=kw: _train(trainer, kw) for kw in copied])
    assert trainer._cohort_data_held[1] is not held
    for a, b in zip(first, third):
        _close(a.value[0], b.value[0])
