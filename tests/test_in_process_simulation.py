"""The in-process backend (federation ``local-in-process``) gives the Ray backend's run.

The same seeded experiment (digits, 4 clients as 2 worker SuperNodes, global DP with
``reproducible-noise``, 2 rounds) runs through ``fedpriv run`` on ``local-simulation`` (Ray)
and on ``local-in-process``: every round record (metrics, sampled and replied clients, σ,
clipping, ε) and the final model agree within float tolerance, and while the in-process run
runs its process tree holds no Ray process (no GCS, raylet, agent or worker), only the CLI and
the simulation. A federation of this backend that names a Ray cluster or GPUs is one line,
exit 2, before anything starts; a ClientApp's exception reaches Flower as an actor's does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fedpriv.scenarios.cli.in_process import problem, run_client_app
from fedpriv.scenarios.cli.ray_start import descendants

from tests.simulate import (
    ROOT,
    assert_close,
    final_weights,
    nodes_of,
    run_outputs,
    to_override,
    with_reproducible,
)

pytestmark = pytest.mark.simulation

EXPERIMENT = {
    "scenario": "digits",
    "privacy": "global-dp",
    "noise-multiplier": 0.5,
    "num-server-rounds": 2,
    "local-epochs": 1,
    "num-workers": 2,
    "seed": 3,
}
TIMING = {"seconds", "wall_seconds", "time", "duration"}
RAY_WORDS = ("raylet", "gcs_server", "ray::", "ray/dashboard", "log_monitor", "default_worker")


def _run(federation: str, out: Path) -> dict:
    """``fedpriv run --federation FEDERATION`` of :data:`EXPERIMENT`, its process tree's
    command lines sampled every 0.2 s."""
    items = {**with_reproducible(EXPERIMENT), "output-dir": str(out)}
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.main", "run", "--federation", federation,
           "--run-config", " ".join(to_override(k, v) for k, v in items.items())]  # fmt: skip
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env["FEDPRIV_STATE_ROOT"] = nodes_of(out)
    commands: set[str] = set()
    with (out.parent / f"{out.name}.console").open("w+") as console:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=console, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            for pid in descendants(proc.pid):
                try:
                    commands.add(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " "))
                except OSError:
                    pass
            time.sleep(0.2)
        console.seek(0)
        output = console.read()
    summary, rounds = run_outputs(out)
    return {"rc": proc.returncode, "output": output, "summary": summary, "rounds": rounds,
            "commands": commands, "dir": out}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("in-process")
    return {name: _run(name, base / name) for name in ("local-simulation", "local-in-process")}


def _close(a, b, path: str) -> None:
    """``a`` equals ``b`` with floats within tolerance (recursively), timings aside."""
    # bit-identical on the 2-core machine; the driver's TensorFlow may split a reduction over
    # more threads than a 1-CPU Ray worker on a bigger machine: float32 rounding, far below
    # what another noise draw or sampling would change
    assert_close(a, b, path, rel=1e-4, abs_tol=1e-5, ignore=TIMING)


def test_the_in_process_run_is_the_ray_run(runs):
    ray, local = runs["local-simulation"], runs["local-in-process"]
    for run in (ray, local):
        assert run["rc"] == 0, run["output"][-3000:]
    assert "in-process: every ClientApp in this process" in local["output"]
    assert len(ray["rounds"]) == len(local["rounds"]) == EXPERIMENT["num-server-rounds"] + 1
    for a, b in zip(ray["rounds"], local["rounds"]):
        _close(a, b, f"round {a.get('round')}")
    assert local["rounds"][-1]["dp-epsilon"] > 0  # the ε compared is a real one
    _close(ray["summary"]["final"], local["summary"]["final"], "summary.final")
    _close(ray["summary"]["privacy_figures"], local["summary"]["privacy_figures"], "privacy")
    for a, b in zip(final_weights(ray["dir"]), final_weights(local["dir"])):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_the_in_process_run_starts_no_ray_process(runs):
    ray, local = runs["local-simulation"], runs["local-in-process"]
    assert any("raylet" in c for c in ray["commands"]), ray["commands"]  # the sampler sees Ray
    found = [c for c in local["commands"] if any(word in c for word in RAY_WORDS)]
    assert found == [], found
    assert any("simulation_runner" in c for c in local["commands"]), local["commands"]


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--ray-address", "127.0.0.1:6379"], "ray-address = '127.0.0.1:6379' is not allowed"),
    ],
)
def test_a_ray_cluster_for_the_in_process_backend_is_one_line_and_exit_2(extra, fragment, tmp_path):
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.main", "run", "--federation",
           "local-in-process", *extra, "-c", f"output-dir='{tmp_path / 'out'}'"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "local-in-process" in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_gpus_for_the_in_process_backend_are_refused_with_the_key():
    backend = {"name": "in-process", "client-resources": {"num-cpus": 1, "num-gpus": 0.5}}
    key, value, allowed = problem(backend)
    assert (key, value) == ("backend.client-resources.num-gpus", 0.5) and "CPU" in allowed
    assert problem({"name": "in-process", "client_resources": {"num_gpus": 0.0}}) is None


def test_a_client_apps_exception_reaches_flower_as_an_actors_does():
    from flwr.clientapp.client_app import ClientAppException, LoadClientAppError

    def failing(message, context):
        raise RuntimeError("the client broke")

    with pytest.raises(ClientAppException, match="the client broke"):
        run_client_app(lambda: failing, "message", "context")
    with pytest.raises(LoadClientAppError):
        run_client_app(lambda: (_ for _ in ()).throw(LoadClientAppError("no app")), "m", "c")
    assert run_client_app(lambda: lambda message, context: message, "m", "c") == ("m", "c")


def test_the_runner_given_an_in_process_backend_with_a_cluster_refuses_in_one_line(tmp_path):
    """The simulation runner called directly (not through ``fedpriv run``'s checks) refuses
    too, before it imports Flower or starts anything."""
    backend = '{"name": "in-process", "init-args": {"address": "127.0.0.1:6379"}}'
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.simulation_runner", "--app", str(ROOT),
           "--num-supernodes", "1", "--backend-config", backend,
           "--run-config", f"output-dir='{tmp_path / 'out'}'"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, lines
    assert "ray-address = '127.0.0.1:6379' is not allowed" in lines[0]
    assert not (tmp_path / "out").exists()
