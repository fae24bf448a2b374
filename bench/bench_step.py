"""``make bench``'s MP CNN step row: fedpriv's trainer vs plain Keras on the same backend.

One client's local training of the MP CNN (SPEC §4: 128×128×1 inputs, 4 classes, Adam 1e-3,
batch 32) on one synthetic-mri-sized shard (64 examples; random pixels and labels: the step
time does not depend on them), timed per optimizer step:

- fedpriv: ``fedpriv.clients.keras_client.trainer_for(model).train(weights, x, y, epochs=,
  batch_size=, seed=)``, the trainer every client call goes through;
- floor: :mod:`bench.tf_floor` (all epochs in one ``tf.function`` on TensorFlow, one
  ``jax.jit`` of a ``lax.scan`` over ``stateless_call`` on JAX, unrolled on the CPU).

Both start from the same weights, run one untimed call first (tracing / compilation) and then
``repeats`` timed calls; the figure is the median seconds per call / steps per call.
``python -m bench.bench_step [--quick]`` measures the backend of ``KERAS_BACKEND`` and prints
one JSON line; :func:`step_rows` runs it once per backend in a fresh process (CPU only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("tensorflow", "jax")
SHAPE, CLASSES, BATCH, EXAMPLES = (128, 128, 1), 4, 32, 64


def _median_seconds(call, repeats: int) -> float:
    call()  # trace / compile
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(*, epochs: int, repeats: int) -> dict[str, Any]:
    """Seconds per step of the trainer and of the floor on this process's backend."""
    import keras
    import numpy as np

    from bench.tf_floor import batch_schedule, make_floor, make_optimizer
    from fedpriv.models import build_model

    rng = np.random.default_rng(0)
    x = rng.random((EXAMPLES, *SHAPE), dtype=np.float32)
    y = rng.integers(0, CLASSES, EXAMPLES).astype(np.int64)
    steps = epochs * -(-EXAMPLES // BATCH)
    out: dict[str, Any] = {"backend": keras.backend.backend(), "steps": steps}
    plain = build_model("mp-cnn", input_shape=SHAPE, num_classes=CLASSES, seed=0)
    weights = plain.get_weights()
    floor = make_floor(plain, make_optimizer("adam", 1e-3))
    idx, mask = batch_schedule(EXAMPLES, BATCH, epochs, seed=0)
    out["floor"] = _median_seconds(lambda: floor.train(weights, x, y, idx, mask), repeats) / steps
    try:
        from fedpriv.clients.keras_client import trainer_for

        model = build_model("mp-cnn", input_shape=SHAPE, num_classes=CLASSES, seed=0)
        trainer = trainer_for(model)

        def train() -> None:
            trainer.train(weights, x, y, epochs=epochs, batch_size=BATCH, seed=0)

        out["fedpriv"] = _median_seconds(train, repeats) / steps
    except Exception as err:  # noqa: BLE001  (the floor's figure still stands)
        out["error"] = f"{type(err).__name__}: {' '.join(str(err).split())[-300:]}"
    return out


def run_backend(backend: str, quick: bool) -> dict[str, Any]:
    """:func:`measure` in a fresh process with ``KERAS_BACKEND=backend`` on the CPU."""
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    env.update(CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "bench.bench_step"] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"KERAS_BACKEND={backend}: {proc.stderr[-1500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def step_rows(quick: bool) -> list[str]:
    """One Markdown row per backend: trainer vs floor milliseconds per step."""
    rows = []
    for backend in BACKENDS:
        got = run_backend(backend, quick)
        name = (
            f"MP CNN step, KERAS_BACKEND={backend} (CPU): `trainer_for(model).train` vs "
            f"plain Keras compiled loop, {EXAMPLES} examples x {got['steps']} steps per call, "
            f"batch {BATCH}, Adam 1e-3, median"
        )
        floor = f"{got['floor'] * 1e3:.1f} ms/step"
        if "fedpriv" not in got:
            rows.append(f"| {name} | failed: {got.get('error', '?')} | {floor} | — |")
            continue
        ratio = got["fedpriv"] / got["floor"]
        rows.append(f"| {name} | {got['fedpriv'] * 1e3:.1f} ms/step | {floor} | **{ratio:.2f}x** |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 epoch, 2 timed calls")
    args = parser.parse_args()
    epochs, repeats = (1, 2) if args.quick else (5, 3)
    print(json.dumps(measure(epochs=epochs, repeats=repeats)))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
