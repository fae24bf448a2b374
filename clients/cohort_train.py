"""The calls a cohort filed (:mod:`fedpriv.clients.cohort`), run together.

**Training.** The calls of one :class:`fedpriv.clients.compiled.CompiledTrainer` with the same input
shapes and batch width b run as ONE compiled call: a map over the clients
(:func:`fedpriv.clients.backend_loop.map_clients`) whose body is the trainer's own loop of one call
(``CompiledTrainer._body``, all its steps) on that client's own

- data: the cohort's (x, y) are concatenated once, and client k's batch indices are offset
  into its own rows only (``idx_k + o_k``; its padded steps and padded columns are masked
  and never run);
- start weights (the distinct weight sets are passed once, each client takes its own by
  index), seed states, step count, last-epoch start, FedProx μ, DP denominator and secret
  noise seed (DP-SGD's clipping and noise stay per client and per example).

So client k's result is the loop of its own call; only the floating-point schedule may
differ from a call on its own (within float tolerance, ``tests/test_cohort.py``). Calls
without a step, a cohort of one, JAX's host loop (:data:`fedpriv.clients.backend_loop.HOST_LOOP`)
and widths of one client run alone.

**Evaluation.** The calls that evaluate the same weights run as one chunked forward pass
over their concatenated test splits; each client's loss and hit sums are its own rows' sums.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
from fedpriv.clients import backend_loop as bl
from fedpriv.clients.cohort import Call, Outcome
from fedpriv.clients.cohort import run_cohort as _run_cohort
from fedpriv.clients.compiled import CompiledTrainer, TrainCall, _finish, _init
from keras import ops

__all__ = ["run_calls", "run_cohort"]


MAX_MEMBERS = 256  # threads of one cohort: a message to thousands of clients runs in chunks


def run_cohort(tasks: Sequence[Callable[[], Any]]) -> list[Outcome]:
    """:func:`fedpriv.clients.cohort.run_cohort` with this module's runner, :data:`MAX_MEMBERS`
    tasks at a time: the outcomes in order."""
    out: list[Outcome] = []
    for start in range(0, len(tasks), MAX_MEMBERS):
        out += _run_cohort(tasks[start : start + MAX_MEMBERS], run_calls)[0]
    return out


def run_calls(calls: list[Call]) -> None:
    """Run the filed calls, grouped by trainer and kind; set each one's outcome."""
    groups: dict[tuple, list[Call]] = {}
    for call in calls:
        groups.setdefault((id(call.owner), call.kind), []).append(call)
    for group in groups.values():
        run = _train_group if group[0].kind == "train" else _evaluate_group
        run(group[0].owner, group)


def _settle(call: Call, fn: Callable[[], Any]) -> None:
    try:
        call.result = fn()
    except Exception as err:  # noqa: BLE001 (that client's own error)
        call.error = err
    call.done = True


def _train_group(trainer: CompiledTrainer, calls: list[Call]) -> None:
    """Prepare each call; run those of one shape and width together (module docstring)."""
    ready: dict[tuple, list[tuple[Call, TrainCall]]] = {}
    for call in calls:
        try:
            prepared = trainer.prepare_train(**call.kwargs)
        except Exception as err:  # noqa: BLE001
            call.error, call.done = err, True
            continue
        if not isinstance(prepared, TrainCall):
            call.result, call.done = prepared, True
            continue
        ready.setdefault((prepared.key, prepared.width), []).append((call, prepared))
    for group in ready.values():
        if len(group) == 1 or bl.HOST_LOOP:
            for call, prepared in group:
                _settle(call, lambda p=prepared: trainer.run_train(p))
            continue
        try:
            results = train_cohort(trainer, [p for _, p in group])
        except Exception as err:  # noqa: BLE001 (every member of the compiled call)
            for call, _ in group:
                call.error, call.done = err, True
            continue
        for (call, _), result in zip(group, results):
            call.result, call.done = result, True


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """``a`` and ``b`` hold the same values: the same memory (a worker's clients read one
    received model in place, :mod:`fedpriv.clients.records`: no byte compared), else compared."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    same_memory = a.ctypes.data == b.ctypes.data and a.strides == b.strides
    return same_memory or bool(np.array_equal(a, b))


def _distinct(rows: list[list[np.ndarray]]) -> tuple[list[list[np.ndarray]], list[int]]:
    """The distinct weight sets among ``rows`` (compared by value) and each row's index."""
    kept: list[list[np.ndarray]] = []
    index: list[int] = []
    for row in rows:
        for u, seen in enumerate(kept):
            if all(_same(a, b) for a, b in zip(row, seen)):
                index.append(u)
                break
        else:
            index.append(len(kept))
            kept.append(row)
    return kept, index


def _stack(rows: list[list[np.ndarray]], count: int) -> list[np.ndarray]:
    """Tensor j of every row stacked on a new leading axis, padded to ``count`` rows with
    copies of the first row. One row: views with a leading axis of 1 (no copy of a model
    that every client of the cohort starts from)."""
    if len(rows) == 1 and count == 1:
        return [np.asarray(t)[np.newaxis] for t in rows[0]]
    rows = rows + [rows[0]] * (count - len(rows))
    return [np.stack([np.asarray(r[j]) for r in rows]) for j in range(len(rows[0]))]


def _cohort_data(calls: list[TrainCall]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The cohort's distinct (x, y) concatenated, and each call's row offset into them."""
    firsts: dict[tuple[int, int], int] = {}
    xs, ys, offsets, total = [], [], [], 0
    for c in calls:
        key = (id(c.x), id(c.y))
        if key not in firsts:
            firsts[key] = total
            xs.append(c.x)
            ys.append(c.y)
            total += len(c.x)
        offsets.append(firsts[key])
    rows = bl.bucket(total, "data")
    return bl.pad_rows(np.concatenate(xs), rows), bl.pad_rows(np.concatenate(ys), rows), offsets


def _device_data(trainer: CompiledTrainer, calls: list[TrainCall]) -> tuple:
    """:func:`_cohort_data` on the device, kept there between rounds while the cohort's
    splits are the same arrays (a worker's clients keep theirs for the run): the 16 MB of an
    MP cohort's images are concatenated, padded and copied to the GPU once, not every round.
    Holds the split arrays themselves, so an id is never another array's."""
    splits = [(c.x, c.y) for c in calls]
    held = getattr(trainer, "_cohort_data_held", None)
    if held is not None and len(held[0]) == len(splits):
        if all(a is x and b is y for (a, b), (x, y) in zip(held[0], splits)):
            return held[1]
    x, y, offsets = _cohort_data(calls)
    on_device = (*bl.to_device((x, y)), offsets)
    trainer._cohort_data_held = (splits, on_device)
    return on_device


def cohort_args(trainer: CompiledTrainer, calls: list[TrainCall]) -> tuple:
    """The arguments of :func:`_cohort_loop` for ``calls`` (one shape and width)."""
    x, y, offsets = _device_data(trainer, calls)
    k = bl.bucket(len(calls), "clients")
    steps_rows = max(len(c.args[0]) for c in calls)
    width = calls[0].width
    idx = np.zeros((k, steps_rows, width), np.int32)
    mask = np.zeros((k, steps_rows, width), np.float32)
    scalars = np.zeros((5, k), np.float32)  # steps, last start, mu, denominator, weight set
    noise = np.zeros((k, 2), np.int32)
    for i, (c, o) in enumerate(zip(calls, offsets)):
        rows = len(c.args[0])
        idx[i, :rows] = c.args[0] + o
        mask[i, :rows] = c.args[1]
        scalars[:4, i] = (c.args[2], c.args[3], c.args[4], c.args[5])
        noise[i] = c.args[6]
    weight_sets, which = _distinct([list(c.args[7]) for c in calls])
    scalars[4, : len(which)] = which
    ints = scalars[[0, 1, 4]].astype(np.int32)
    return (
        x,
        y,
        idx,
        mask,
        ints[0],
        ints[1],
        scalars[2],
        scalars[3],
        noise,
        ints[2],
        _stack(weight_sets, len(weight_sets)),
        _stack([list(c.args[8]) for c in calls], k),
        calls[0].args[9],
    )


def _like(stacked: Sequence[Any]) -> list[SimpleNamespace]:
    """Per-client shapes and dtypes of stacked tensors (the map's output signature)."""
    return [SimpleNamespace(shape=tuple(t.shape[1:]), dtype=t.dtype) for t in stacked]


def _cohort_loop(trainer, x, y, idx, mask, steps, last, mu, den, noise, which, w_sets, nt, opt):
    """Every client's loop (``CompiledTrainer._loop``'s body) mapped over the cohort."""
    trainer.traces += 1

    def one(client):
        c_idx, c_mask, c_steps, c_last, c_mu, c_den, c_noise, c_which, c_nt = client
        tr = [ops.take(w, c_which, axis=0) for w in w_sets]
        consts = (x, y, c_idx, c_mask, c_last, c_mu, c_den, c_noise, tr)
        carry = bl.fori_loop(
            c_steps, lambda s, c: trainer._body(s, c, consts), _init(tr, c_nt, opt)
        )
        return _finish(carry)

    scalar = SimpleNamespace(shape=(), dtype="float32")
    out_like = (scalar, scalar, _like(w_sets), _like(nt))
    return bl.map_clients(one, (idx, mask, steps, last, mu, den, noise, which, list(nt)), out_like)


FREE = (1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0)  # free leading dims of each argument (TF)


def train_cohort(
    trainer: CompiledTrainer, calls: list[TrainCall]
) -> list[tuple[list[np.ndarray], dict[str, float]]]:
    """The calls (one shape and width) as one compiled call; each one's (weights, metrics)."""
    args = cohort_args(trainer, calls)
    key = ("cohort", *calls[0].key)
    compiled = trainer._compiled_fn(key, lambda *a: _cohort_loop(trainer, *a), args, FREE)
    loss, acc, tr, nt = compiled(*args)
    loss, acc = bl.to_numpy(loss), bl.to_numpy(acc)
    tr, nt = [bl.to_numpy(t) for t in tr], [bl.to_numpy(t) for t in nt]
    return [
        trainer.train_outputs((loss[i], acc[i], [t[i] for t in tr], [t[i] for t in nt]))
        for i in range(len(calls))
    ]


# --- evaluation ---------------------------------------------------------------------------


def _evaluate_group(trainer: CompiledTrainer, calls: list[Call]) -> None:
    """The calls on the same weights as one forward pass over their splits (module doc)."""
    live = [c for c in calls if len(c.kwargs["x"]) > 0]
    for call in calls:
        if len(call.kwargs["x"]) == 0:
            call.result, call.done = {"loss": float("nan")}, True
    try:
        states = [trainer._state(c.kwargs["weights"], 0) for c in live]
    except Exception as err:  # noqa: BLE001
        for call in live:
            call.error, call.done = err, True
        return
    weight_sets, which = _distinct([tr + nt for tr, nt in states])
    for u in range(len(weight_sets)):
        members = [c for c, w in zip(live, which) if w == u]
        if len(members) == 1:
            _settle(members[0], lambda c=members[0]: trainer._evaluate_alone(**c.kwargs))
            continue
        try:
            rows = _evaluate_rows(trainer, states[which.index(u)], members)
        except Exception as err:  # noqa: BLE001
            for call in members:
                call.error, call.done = err, True
            continue
        for call, (loss, hits, n) in zip(members, rows):
            metrics = {"loss": loss / n}
            if trainer.classifier:
                metrics["accuracy"] = hits / n
            call.result, call.done = metrics, True


def _evaluate_rows(trainer: CompiledTrainer, state: tuple, members: list[Call]) -> list[tuple]:
    """(loss sum, hit sum, rows) of each member's split, from one chunked forward pass."""
    x = np.concatenate([c.kwargs["x"] for c in members])
    y = np.concatenate([c.kwargs["y"] for c in members])
    tr, nt = bl.to_device(state)
    chunk, losses, hits = trainer._chunk(x), [], []
    key = ("evaluate-rows", x.dtype.str, x.shape[1:], y.dtype.str, y.shape[1:])
    for i in range(0, len(x), chunk):
        n = min(chunk, len(x) - i)
        rows = min(chunk, bl.bucket(n, "data"))
        args = [tr, nt, bl.pad_rows(x[i : i + n], rows), bl.pad_rows(y[i : i + n], rows)]
        compiled = trainer._compiled_fn(key, trainer._rows, args, (0, 0, 1, 1))
        loss, hit = compiled(*args)
        losses.append(bl.to_numpy(loss)[:n])
        hits.append(bl.to_numpy(hit)[:n])
    loss_rows = np.concatenate(losses).astype(np.float64)
    hit_rows = np.concatenate(hits).astype(np.float64)
    out, start = [], 0
    for c in members:
        n = len(c.kwargs["x"])
        out.append(
            (float(loss_rows[start : start + n].sum()), float(hit_rows[start : start + n].sum()), n)
        )
        start += n
    return out
