"""The benches' own code (not their timings): the plain-Keras floor trains what it says on
both backends, and ``make bench-gpu`` refuses a machine without a GPU in one line."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent

FLOOR_VS_NUMPY = """
import json, sys
import numpy as np
import keras
from bench.tf_floor import batch_schedule, evaluate_all, make_floor

rng = np.random.default_rng(0)
n, d, k, lr, epochs, batch = 7, 5, 3, 0.5, 2, 3
x = rng.standard_normal((n, d)).astype(np.float32)
y = rng.integers(0, k, n).astype(np.int64)
w0 = [rng.standard_normal((d, k)).astype(np.float32), rng.standard_normal(k).astype(np.float32)]
model = keras.Sequential([keras.layers.Input((d,)), keras.layers.Dense(k, activation="softmax")])
floor = make_floor(model, keras.optimizers.SGD(lr))
idx, mask = batch_schedule(n, batch, epochs, seed=4)
runs = [floor.train(w0, x, y, idx, mask) for _ in range(2)]  # optimizer state reset per call
loss, hits = evaluate_all(floor, x, y)
print(json.dumps({"backend": keras.backend.backend(), "idx": idx.tolist(),
                  "mask": mask.tolist(), "w": [[a.tolist() for a in r] for r in runs],
                  "loss": loss, "hits": hits}))
"""


def _numpy_sgd(w, b, x, y, idx, mask, lr):
    """Masked mean cross-entropy SGD, by hand: ∂L/∂z = m (p − onehot(y)) / Σm."""
    w, b = w.astype(np.float64), b.astype(np.float64)
    for rows, m in zip(idx, mask):
        xb, yb = x[rows].astype(np.float64), y[rows]
        z = xb @ w + b
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        dz = (p - np.eye(w.shape[1])[yb]) * (m / m.sum())[:, None]
        w, b = w - lr * xb.T @ dz, b - lr * dz.sum(0)
    return w, b


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_plain_keras_floor_is_masked_mean_sgd_on_both_backends(backend):
    """Two epochs of batch 3 over 7 examples (a padded last batch) from fixed weights: the
    floor's weights equal hand-written SGD on the masked mean cross-entropy, twice (the
    optimizer starts from its initial state every call, learning rate included)."""
    import json

    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    proc = subprocess.run(
        [sys.executable, "-c", FLOOR_VS_NUMPY], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["backend"] == backend
    idx, mask = np.array(out["idx"]), np.array(out["mask"])
    assert idx.shape == (6, 3) and mask.sum() == 14  # 3 batches per epoch, 2 padding slots
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 5)).astype(np.float32)
    y = rng.integers(0, 3, 7).astype(np.int64)
    w0, b0 = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal(3)
    w, b = _numpy_sgd(w0, b0.astype(np.float32), x, y, idx, mask, 0.5)
    for got_w, got_b in out["w"]:
        np.testing.assert_allclose(np.array(got_w), w, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.array(got_b), b, rtol=1e-4, atol=1e-5)
    z = x.astype(np.float64) @ w + b  # evaluate_all sees the last call's weights
    logp = z - z.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    assert out["loss"] == pytest.approx(-logp[np.arange(7), y].sum(), rel=1e-4)
    assert out["hits"] == float(np.sum(z.argmax(1) == y))


def test_batch_schedule_visits_every_example_once_per_epoch():
    from bench.tf_floor import batch_schedule

    idx, mask = batch_schedule(10, 4, 3, seed=1)
    assert idx.shape == (9, 4)
    for e in range(3):
        rows = slice(3 * e, 3 * e + 3)
        seen = np.sort(idx[rows][mask[rows] == 1])
        assert seen.tolist() == list(range(10))
    again, _ = batch_schedule(10, 4, 3, seed=1)
    assert np.array_equal(idx, again)
    with pytest.raises(ValueError, match="batch_size = 0"):
        batch_schedule(10, 0, 1, seed=0)


def _has_gpu() -> bool:
    if glob.glob("/dev/nvidia[0-9]*"):
        return True
    return (
        shutil.which("nvidia-smi") is not None
        and "GPU"
        in subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
    )


@pytest.mark.skipif(_has_gpu(), reason="a GPU is visible: make bench-gpu would run")
def test_bench_gpu_without_a_gpu_exits_2_with_one_line():
    """No traceback and no TensorFlow / JAX start-up noise: checked before either imports."""
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(ROOT))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    proc = subprocess.run(
        [sys.executable, "bench/bench_gpu.py"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and "no GPU" in lines[0] and "gpu]" in lines[0], lines


@pytest.mark.skipif(_has_gpu(), reason="a GPU is visible: make bench-gpu would run")
def test_bench_gpu_checks_for_a_gpu_before_importing_jax_or_tensorflow():
    code = (
        "import sys; from bench import bench_gpu; rc = bench_gpu.main([]); "
        "print(rc, sorted(m for m in ('jax', 'tensorflow', 'keras') if m in sys.modules))"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.stdout.strip().splitlines()[-1] == "2 []", proc.stdout + proc.stderr


def test_round_row_slope_and_process_tree_cpu():
    """The MP-CNN round-overhead row (bench/bench_round.py): the per-round figure is the slope
    over the rounds' stamps (start-up, i.e. the first stamp, drops out), refused for fewer
    than two stamps; the process-tree CPU of this process counts a busy child's CPU too."""
    import time

    from bench.bench_round import per_round, tree_cpu

    assert per_round([30.0, 32.5, 35.0, 37.5]) == pytest.approx(2.5)
    assert per_round([100.0, 101.0]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="expected >= 2"):
        per_round([5.0])
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        deadline = time.time() + 120  # the CI machine may be loaded: wait for 0.3 CPU-s
        while tree_cpu(child.pid) < 0.3 and time.time() < deadline:
            time.sleep(0.1)
        spent = tree_cpu(child.pid)
        alone = _own_cpu()  # this process without its children
        during = tree_cpu(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert spent >= 0.3
    # the spinning child is counted in the tree (against this process's own CPU, not an
    # earlier tree total: a child of an earlier test that exits in between leaves the tree)
    assert during >= alone + spent


def _own_cpu() -> float:
    """User + system CPU seconds of this process alone, read as ``tree_cpu`` reads them."""
    from bench.bench_round import TICKS

    with open(f"/proc/{os.getpid()}/stat", encoding="utf-8") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def test_bench_gpu_reads_where_a_runs_time_went_from_its_console_lines(tmp_path):
    from bench.bench_gpu import _timeline

    log = tmp_path / "run.log"
    lines = [
        "fedpriv: start-up · workers ready: 1 SuperNodes answered, serving 4 clients (10.9 s)",
        "fedpriv: start-up · model built: mp-cnn, 6,517,476 parameters (12.4 s)",
        "fedpriv: round 0/4 · server acc 0.075 loss 1.393 · 1.9 s",
        "fedpriv: round 1/4 · server acc 0.475 loss 1.116 · train loss 1.067 · 8.9 s",
        "fedpriv: round 2/4 · server acc 0.475 loss 0.9882 · 0.7 s",
        "fedpriv: round 3/4 · server acc 0.5 loss 0.9 · 0.5 s",
        "fedpriv: round 4/4 · server acc 0.5 loss 0.9 · 0.6 s · ε = 1.2 (δ = 1e-05)",
    ]
    log.write_text("\n".join(lines) + "\n")
    assert _timeline(log) == (
        "start-up 12.4 s, round 0 1.9 s, round 1 8.9 s, rounds 2+ 0.6 s (median)"
    )
    assert _timeline(tmp_path / "missing.log") == ""


def test_a_runs_cpu_is_split_by_process_role():
    """The start-up row's CPU split (bench/bench_speed.py): each process of the run's tree is
    classed by its command line, and a busy child's CPU is counted under its role."""
    from bench.bench_speed import cpu_by_role, monitored_run, process_role

    ray = "/v/lib/python3.12/site-packages/ray"
    assert process_role(f"python {ray}/_private/workers/default_worker.py --node-ip") == "workers"
    assert process_role("python -m fedpriv.scenarios.cli.simulation_runner --app .") == "driver"
    assert process_role(f"{ray}/core/src/ray/raylet/raylet --raylet_socket_name=x") == (
        "Ray daemons"
    )
    assert process_role("python .venv/bin/fedpriv run") == "other"
    assert cpu_by_role({1: ["workers", 2.0], 2: ["workers", 1.5], 3: ["driver", 4.0]}) == {
        "workers": (3.5, 2),
        "driver": (4.0, 1),
    }
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    res = monitored_run([sys.executable, "-c", spin], None, dict(os.environ), 0.05)
    seconds, processes = res["cpu"]["other"]
    assert processes == 1 and seconds >= 0.4
