"""Compiled local training: all epochs of one client call in ONE compiled call (Keras 3).

One :class:`CompiledTrainer` is built per worker process and model (and per DP setting).
It is functional: the state of a call is ``(trainable values, non-trainable values,
optimizer variable values)``; the forward pass is ``model.stateless_call`` and the update
``optimizer.stateless_apply``, so nothing is assigned into Keras variables and the same code
runs on the TensorFlow and JAX backends (the gradient, the loop and the compilation are in
:mod:`fedpriv.clients.backend_loop`, traced once per input dtype/feature shape). A call:

1. starts from the global weights w_g (also the FedProx anchors), the optimizer's freshly
   built variable values (a client keeps no optimizer state between rounds) and seed states
   ``[s_k, 0]`` of the model's random layers (Dropout) derived from the call's seed: a call
   is a function of its seed, whatever ran in the process before;
2. draws the batches in numpy (:func:`batch_schedule`): epoch e shuffles with the e-th
   ``rng.permutation(n)`` of ``np.random.default_rng(seed)`` and cuts it into batches of
   ``b = min(B, n)`` in order; the last short batch is padded to ``b`` with a zero mask, so
   every step has the same shape and its loss is the mean over its real examples only --
   the same loss as an unpadded short batch (a caller may pass its own ``schedule``);
3. runs every step of every epoch in one compiled loop. Each step minimises::

       L(w) = (1 / |b|) Σ_{i in b} m_i ℓ(f_w(x_i), y_i) + (mu / 2) ‖w − w_g‖²

   (FedProx, Li et al. 2020 §3; mu = 0 for FedAvg). DP-SGD (MP §4, Abadi et al. 2016 §3.1;
   ``dp=DpStepConfig``) replaces the gradient of each step with
   ``fedpriv.clients.dp_grads.private_grads`` of the per-example loss ``ℓ_i + (mu/2)‖w − w_g‖²``:
   (Σ_i m_i clip(∇ℓ_i, C) + N(0, (zC)² I)) / D, D the schedule's ``denominator`` (else b),
   noise seeded by the call's ``noise_seed`` + [0, step].

Reported metrics: ``train-loss`` (and ``train-accuracy`` for classifiers, not under DP) are
the example-weighted means over the LAST epoch of the data loss ℓ, measured on each batch
before its step (what Keras ``fit`` reports).

Options: ``jit_compile`` compiles the step with XLA on TF (JAX always compiles); mixed
precision is a property of the model (built under the ``mixed_float16`` policy, see
:func:`build_policy_model`) and adds dynamic loss scaling (``LossScaleOptimizer``) here;
op determinism is process wide (:func:`set_op_determinism`, TF only).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from collections import OrderedDict  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from typing import Any  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
from fedpriv.clients import backend_loop as bl  # noqa: E402
from fedpriv.clients.cohort import current_cohort  # noqa: E402
from fedpriv.clients.schedules import (  # noqa: E402,F401  (the trainer's call types, re-exported)
    DpStepConfig,
    Schedule,
    TrainCall,
    batch_schedule,
)
from keras import ops  # noqa: E402

EVAL_FLOATS = 1 << 22  # ~16 MB of input per evaluation chunk
DATA_CACHE = 8  # client (x, y) splits kept as backend tensors per trainer
SEED_TAG = 0x5EED  # the seed-state stream of a call (numpy SeedSequence entropy)


_DETERMINISM: list[bool] = []


def set_op_determinism(enabled: bool) -> None:
    """Turn op determinism on (reproducible TF kernels, the default) or off; a no-op on JAX.

    Process wide; a no-op when the setting is unchanged (cheap to call per client call).
    """
    if _DETERMINISM and _DETERMINISM[-1] == enabled:
        return
    bl.set_op_determinism(enabled)
    _DETERMINISM[:] = [enabled]


def build_policy_model(build: Callable[[], keras.Model], *, mixed_precision: bool) -> keras.Model:
    """``build()`` under the ``mixed_float16`` policy (float16 compute, float32 variables)."""
    if not mixed_precision:
        return build()
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        return build()
    finally:
        keras.mixed_precision.set_global_policy(previous)


def _prox(trainable: Sequence[Any], anchors: Sequence[Any]) -> Any:
    """‖w − w_g‖² over all trainable tensors."""
    return sum(ops.sum(ops.square(w - a)) for w, a in zip(trainable, anchors))


def _init(tr, nt, opt) -> tuple:
    """The loop's carry: state and the (loss, hits, count) sums of the last epoch."""
    zero = ops.zeros((), "float32")
    return (list(tr), list(nt), list(opt), zero, zero, zero)


def _finish(carry) -> tuple:
    """(mean loss, mean accuracy, trainable, non-trainable) from the final carry."""
    tr, nt, _, loss_sum, hit_sum, count = carry
    count = ops.maximum(count, 1.0)
    return loss_sum / count, hit_sum / count, tr, nt


class CompiledTrainer:
    """A model, its optimizer and one compiled train-all-epochs function (see module doc)."""

    def __init__(
        self,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        loss_fn: Callable,
        *,
        classifier: bool,
        dp: DpStepConfig | None = None,
        jit_compile: bool = False,
    ) -> None:
        if dp is not None and not isinstance(dp, DpStepConfig):
            raise ValueError(f"dp = {dp!r}: expected None or a DpStepConfig")
        self.model = model
        self.classifier = classifier
        self.dp = dp
        self.jit_compile = bool(jit_compile)
        self.loss_fn = loss_fn
        self.loss_scale = model.compute_dtype == "float16" and dp is None
        optimizer = bl.stateless_optimizer(optimizer)
        if self.loss_scale:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
        self.optimizer = optimizer
        self._opt_init = [bl.to_numpy(v.value) for v in optimizer.variables]
        # the fresh optimizer state of every call (Adam: 2 x the model), converted once
        self._opt_device = bl.to_device(list(self._opt_init))
        self._data: OrderedDict[tuple, tuple] = OrderedDict()
        self._scale_slot = (
            [id(v) for v in optimizer.variables].index(id(optimizer.dynamic_scale))
            if self.loss_scale
            else -1
        )
        slot = {id(v): i for i, v in enumerate(model.weights)}
        self._trainable_slots = [slot[id(v)] for v in model.trainable_variables]
        # non-trainable state that is not a weight: the SeedGenerator states (Dropout)
        self._nt_slots = [slot.get(id(v)) for v in model.non_trainable_variables]
        self._seed_dtypes = [
            v.dtype for v, s in zip(model.non_trainable_variables, self._nt_slots) if s is None
        ]
        self._step = bl.compile_step(self._dp_step if dp else self._plain_step, self.jit_compile)
        self._compiled: dict[tuple, Any] = {}
        self.traces = 0  # Python side effect: counts traces of the train loop

    # --- state ----------------------------------------------------------------------------

    def _cast(self, weights: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``weights`` as arrays of the variables' dtypes (aggregates may come as float64)."""
        if len(weights) != len(self.model.weights):
            raise ValueError(
                f"{len(weights)} weight arrays for a model with {len(self.model.weights)}"
            )
        return [np.asarray(w, dtype=v.dtype) for w, v in zip(weights, self.model.weights)]

    def _seed_states(self, seed: int) -> list[np.ndarray]:
        """One ``[s_k, 0]`` per random layer, ``s_k`` drawn from the call's seed."""
        if not self._seed_dtypes:
            return []
        draws = np.random.SeedSequence([int(seed), SEED_TAG]).generate_state(len(self._seed_dtypes))
        return [
            np.array([int(d) % (2**31 - 1), 0], dtype=dt) for d, dt in zip(draws, self._seed_dtypes)
        ]

    def _state(
        self, weights: Sequence[np.ndarray] | None, seed: int
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(trainable, non-trainable) values: ``weights`` (None: the model's own) and seeds."""
        values = (
            self._cast(weights)
            if weights is not None
            else [bl.to_numpy(v.value) for v in self.model.weights]
        )
        seeds = iter(self._seed_states(seed))
        trainable = [values[s] for s in self._trainable_slots]
        non_trainable = [next(seeds) if s is None else values[s] for s in self._nt_slots]
        return trainable, non_trainable

    def _weights(self, trainable: Sequence[Any], non_trainable: Sequence[Any]) -> list[np.ndarray]:
        """The ``model.weights`` list (numpy) from trainable and non-trainable values."""
        out: list[Any] = [None] * len(self.model.weights)
        for s, v in zip(self._trainable_slots, trainable):
            out[s] = v
        for s, v in zip(self._nt_slots, non_trainable):
            if s is not None:
                out[s] = v
        return [bl.to_numpy(v) for v in out]

    def load(self, weights: Sequence[np.ndarray]) -> None:
        """Assign ``weights`` into the model's variables (for ``model.save`` and Keras calls)."""
        for var, value in zip(self.model.weights, self._cast(weights)):
            var.assign(value)

    # --- traced parts ---------------------------------------------------------------------

    def _forward(self, trainable, non_trainable, xb, training: bool):
        pred, non_trainable = self.model.stateless_call(
            trainable, non_trainable, xb, training=training
        )
        return ops.cast(pred, "float32"), list(non_trainable)

    def _hits(self, yb, pred):
        if not self.classifier:
            return ops.zeros(ops.shape(pred)[:1], "float32")
        labels = ops.cast(ops.reshape(yb, (-1,)), "int32")
        return ops.cast(ops.equal(ops.cast(ops.argmax(pred, axis=-1), "int32"), labels), "float32")

    def _plain_step(self, tr, nt, opt, anchors, mu, xb, yb, mb, s, denominator, noise_seed):
        """One minibatch step on the masked mean loss + FedProx term (module doc, step 3)."""
        del s, denominator, noise_seed

        def objective(trainable, non_trainable):
            pred, non_trainable = self._forward(trainable, non_trainable, xb, True)
            per_example = self.loss_fn(yb, pred)
            data = ops.sum(per_example * mb) / ops.maximum(ops.sum(mb), 1.0)
            loss = data + 0.5 * mu * _prox(trainable, anchors)
            if self.loss_scale:
                loss = loss * opt[self._scale_slot]
            return loss, (per_example, self._hits(yb, pred), non_trainable)

        (_, (per_example, hits, nt)), grads = bl.value_and_grad(objective)(tr, nt)
        tr, opt = self.optimizer.stateless_apply(opt, grads, tr)
        return list(tr), list(nt), list(opt), per_example, hits

    def _dp_step(self, tr, nt, opt, anchors, mu, xb, yb, mb, s, denominator, noise_seed):
        """One DP-SGD step: ``private_grads`` of the per-example loss (module doc, step 3).

        The random layers use seed states ``[s_k, step]`` (the same for every example of
        the step); non-trainable state is read, not updated.
        """
        from fedpriv.clients.dp_grads import private_grads

        step_nt = [
            v if slot is not None else v + ops.cast(ops.convert_to_tensor([0, 1]) * s, v.dtype)
            for v, slot in zip(nt, self._nt_slots)
        ]

        def example_loss(trainable, x_i, y_i):
            pred, _ = self._forward(trainable, step_nt, x_i, True)
            return self.loss_fn(y_i, pred) + 0.5 * mu * _prox(trainable, anchors)

        grads, losses = private_grads(
            example_loss,
            tr,
            xb,
            yb,
            mb,
            l2_norm_clip=float(self.dp.l2_norm_clip),
            noise_multiplier=float(self.dp.noise_multiplier),
            denominator=denominator,
            noise_seed=noise_seed + ops.convert_to_tensor([0, 1], "int32") * s,
        )
        per_example = ops.reshape(losses, (-1,)) - 0.5 * mu * _prox(tr, anchors)
        tr, opt = self.optimizer.stateless_apply(opt, list(grads), tr)
        return list(tr), list(nt), list(opt), per_example, ops.zeros_like(per_example)

    def _body(self, s, carry, consts):
        """Step ``s`` of the call on the carried state; accumulates last-epoch metrics."""
        x, y, idx, mask, last_start, mu, denominator, noise_seed, anchors = consts
        tr, nt, opt, loss_sum, hit_sum, count = carry
        ids, mb = idx[s], mask[s]
        xb, yb = ops.take(x, ids, axis=0), ops.take(y, ids, axis=0)
        out = self._step(tr, nt, opt, anchors, mu, xb, yb, mb, s, denominator, noise_seed)
        tr, nt, opt, per_example, hits = out
        weight = mb * ops.cast(s >= last_start, "float32")
        loss_sum = loss_sum + ops.sum(ops.cast(per_example, "float32") * weight)
        hit_sum = hit_sum + ops.sum(hits * weight)
        return (tr, nt, opt, loss_sum, hit_sum, count + ops.sum(weight))

    def _loop(self, x, y, idx, mask, steps, last_start, mu, denominator, noise_seed, tr, nt, opt):
        """Every step of the call (``steps`` of the rows of ``idx``) in one compiled loop."""
        self.traces += 1
        consts = (x, y, idx, mask, last_start, mu, denominator, noise_seed, list(tr))
        carry = bl.fori_loop(steps, lambda s, c: self._body(s, c, consts), _init(tr, nt, opt))
        return _finish(carry)

    def _host_step(self, s, carry, consts):
        """One compiled step for the host loop (:data:`fedpriv.clients.backend_loop.HOST_LOOP`)."""
        self.traces += 1
        return self._body(s, carry, consts)

    def _run_on_host(self, key: tuple, args: tuple):
        """The steps as a Python loop over one compiled step (state stays on the device)."""
        x, y, idx, mask, steps, last_start, mu, denominator, noise_seed, tr, nt, opt = args
        consts = bl.device_put((x, y, idx, mask, last_start, mu, denominator, noise_seed, tr))
        step = self._compiled_fn(("step", *key), self._host_step, (), ())
        carry = bl.device_put(_init(tr, nt, opt))
        for s in range(int(steps)):
            carry = step(np.int32(s), carry, consts)
        return _finish(carry)

    def _device_data(self, x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
        """(x, y) padded to their bucket and converted to backend tensors, kept for the
        last :data:`DATA_CACHE` pairs of this process (a client's split is the same array
        every round: it is converted once, not at every call). Keyed by the arrays'
        identity; the entry holds them, so an id is not reused while it is cached."""
        key = (id(x), id(y))
        hit = self._data.get(key)
        if hit is not None and hit[0] is x and hit[1] is y:
            self._data.move_to_end(key)
            return hit[2], hit[3]
        n = bl.bucket(len(x), "data")
        xd, yd = bl.to_device((bl.pad_rows(x, n), bl.pad_rows(y, n)))
        self._data[key] = (x, y, xd, yd)
        while len(self._data) > DATA_CACHE:
            self._data.popitem(last=False)
        return xd, yd

    def _compiled_fn(self, key: tuple, fn: Callable, args: Sequence[Any], free: Sequence[int]):
        if key not in self._compiled:
            self._compiled[key] = bl.compile_fn(fn, args, free)
        return self._compiled[key]

    # --- one client call ------------------------------------------------------------------

    def _noise_seed(self, noise_seed: Any) -> np.ndarray:
        if self.dp is None:
            return np.zeros(2, np.int32)
        seed = None if noise_seed is None else np.asarray(noise_seed)
        if seed is None or seed.shape != (2,) or seed.dtype.kind not in "iu":
            raise ValueError(f"noise_seed = {noise_seed!r}: expected an int array of shape (2,)")
        return (seed.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)

    def train(self, weights: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray, **kw: Any):
        """Train from ``weights`` for ``epochs`` on (x, y); new weights and train metrics.

        Keywords: ``epochs``, ``batch_size``, ``seed``, ``proximal_mu`` (0), ``schedule``
        (``idx``, ``mask``, ``steps_per_epoch``, optionally ``denominator``; replaces
        :func:`batch_schedule`) and ``noise_seed`` (int, shape (2,); required under DP and
        secret from every other party). One compiled call (module doc); in a cohort
        (:mod:`fedpriv.clients.cohort`) the cohort's calls run as one compiled call.
        """
        cohort = current_cohort()
        if cohort is not None:
            return cohort.submit(self, "train", weights=weights, x=x, y=y, **kw)
        call = self.prepare_train(weights, x, y, **kw)
        return self.run_train(call) if isinstance(call, TrainCall) else call

    def run_train(self, call: TrainCall) -> tuple[list[np.ndarray], dict[str, float]]:
        """One prepared call on its own (:meth:`prepare_train`)."""
        key = ("train", *call.key)
        args = (*self._device_data(call.x, call.y), *call.args)
        if bl.HOST_LOOP:
            return self.train_outputs(self._run_on_host(key, args))
        loop = self._compiled_fn(key, self._loop, args, (1, 1, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0))
        return self.train_outputs(loop(*args))

    def prepare_train(
        self,
        weights: Sequence[np.ndarray],
        x: np.ndarray,
        y: np.ndarray,
        *,
        epochs: int,
        batch_size: int,
        seed: int,
        proximal_mu: float = 0.0,
        schedule: Any = None,
        noise_seed: Any = None,
    ) -> TrainCall | tuple[list[np.ndarray], dict[str, float]]:
        """The compiled loop's arguments of one call (:meth:`train`), or its result when it
        has no step (the weights, unchanged)."""
        noise = self._noise_seed(noise_seed)
        if schedule is None:
            schedule = batch_schedule(
                len(x), batch_size, epochs, seed, drop_remainder=bool(self.dp)
            )
        steps = len(schedule.idx)
        if steps == 0:
            return [np.array(w, copy=True) for w in weights], {"train-loss": float("nan")}
        tr, nt = self._state(weights, seed)
        rows = bl.bucket(steps, "steps")
        denominator = getattr(schedule, "denominator", None) or schedule.idx.shape[1]
        args = (
            bl.pad_rows(np.asarray(schedule.idx, np.int32), rows),
            bl.pad_rows(np.asarray(schedule.mask, np.float32), rows),
            np.int32(steps),
            np.int32(steps - schedule.steps_per_epoch),
            np.float32(proximal_mu),
            np.float32(denominator),
            noise,
            tr,
            nt,
            list(self._opt_device),
        )
        key = (x.dtype.str, x.shape[1:], y.dtype.str, y.shape[1:])
        return TrainCall(args=args, key=key, x=x, y=y, width=int(schedule.idx.shape[1]))

    def train_outputs(self, out: tuple) -> tuple[list[np.ndarray], dict[str, float]]:
        """(weights, metrics) of one call from the loop's ``(loss, accuracy, tr, nt)``."""
        loss, acc, tr, nt = out
        metrics = {"train-loss": float(loss)}
        if self.classifier and self.dp is None:
            metrics["train-accuracy"] = float(acc)
        return self._weights(tr, nt), metrics

    # --- evaluation -----------------------------------------------------------------------

    def _chunk(self, x: np.ndarray) -> int:
        """Rows per evaluation chunk: ~16 MB of input, a power of two in 32..4096."""
        rows = EVAL_FLOATS // max(1, int(np.prod(x.shape[1:])))
        return 1 << int(np.clip(rows, 32, 4096)).bit_length() - 1

    def _chunks(self, weights, x: np.ndarray, y: np.ndarray | None, kind: str, fn: Callable):
        """``fn(tr, nt, xb[, yb, mb])`` over padded chunks of x (and y): a list of outputs."""
        tr, nt = bl.to_device(self._state(weights, 0))
        chunk, out = self._chunk(x), []
        key = (kind, x.dtype.str, x.shape[1:], None if y is None else (y.dtype.str, y.shape[1:]))
        for i in range(0, len(x), chunk):
            xb = x[i : i + chunk]
            rows = min(chunk, bl.bucket(len(xb), "data"))
            args = [tr, nt, bl.pad_rows(xb, rows)]
            if y is not None:
                mb = bl.pad_rows(np.ones(len(xb), np.float32), rows)
                args += [bl.pad_rows(y[i : i + chunk], rows), mb]
            compiled = self._compiled_fn(key, fn, args, (0, 0, 1, 1, 1))
            out.append((compiled(*args), len(xb)))
        return out

    def _outputs(self, tr, nt, xb):
        return self._forward(tr, nt, xb, False)[0]

    def predict(self, weights: Sequence[np.ndarray] | None, x: np.ndarray) -> np.ndarray:
        """Model outputs on x in chunks of ~16 MB of input (one compiled forward pass)."""
        if len(x) == 0:
            return np.zeros((0, *self.model.output_shape[1:]), np.float32)
        parts = self._chunks(weights, x, None, "predict", self._outputs)
        return np.concatenate([bl.to_numpy(p)[:k] for p, k in parts])

    def _sums(self, tr, nt, xb, yb, mb):
        pred = self._forward(tr, nt, xb, False)[0]
        loss = ops.sum(ops.cast(self.loss_fn(yb, pred), "float32") * mb)
        return loss, ops.sum(self._hits(yb, pred) * mb)

    def _rows(self, tr, nt, xb, yb):
        """Per-example loss and hit (1/0) of a chunk (a cohort's evaluation)."""
        pred = self._forward(tr, nt, xb, False)[0]
        return ops.cast(self.loss_fn(yb, pred), "float32"), self._hits(yb, pred)

    def evaluate(
        self, weights: Sequence[np.ndarray] | None, x: np.ndarray, y: np.ndarray
    ) -> dict[str, float]:
        """Mean loss (and accuracy for classifiers) over (x, y), chunked and compiled (in a
        cohort, :mod:`fedpriv.clients.cohort`, with the other members' evaluations)."""
        cohort = current_cohort()
        if cohort is not None and weights is not None:
            return cohort.submit(self, "evaluate", weights=weights, x=x, y=y)
        return self._evaluate_alone(weights, x, y)

    def _evaluate_alone(
        self, weights: Sequence[np.ndarray] | None, x: np.ndarray, y: np.ndarray
    ) -> dict[str, float]:
        if len(x) == 0:
            return {"loss": float("nan")}
        parts = self._chunks(weights, x, y, "evaluate", self._sums)
        loss = sum(float(p[0]) for p, _ in parts)
        metrics = {"loss": loss / len(x)}
        if self.classifier:
            metrics["accuracy"] = sum(float(p[1]) for p, _ in parts) / len(x)
        return metrics
