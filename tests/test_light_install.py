"""The base install: the wrappers import and run without Keras, TensorFlow, JAX, Ray, matplotlib.

Each check runs in a fresh interpreter. Flower is imported first (Flower 1.23 imports
TensorFlow and Ray by itself when they are installed -- that is Flower's, not ours); then
the heavy packages are made unimportable (``sys.modules[name] = None``), and fedpriv's
wrapper modules are imported and wrap a Flower ``FedAvg`` for both APIs. An import of a
heavy package anywhere in fedpriv's wrapper path fails the check on every stack, so the
pinned simulation stack guards the base install too. In an environment without TensorFlow
(CI's base-install environment, ``make test-base-install``) the plain statement of the problem
is checked as well.
The feature list and the ``fedpriv`` CLI are checked the same way: the commands that only
compute run without the simulation extra; the others exit 2 naming the extra.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("tensorflow", "keras", "jax", "ray", "matplotlib", "sklearn", "cv2")

WRAP_AND_AGGREGATE = textwrap.dedent(
    """
    import sys
    import flwr.common, flwr.server, flwr.server.strategy, flwr.serverapp.strategy
    HEAVY = {heavy!r}
    for name in HEAVY:
        if name not in sys.modules:
            sys.modules[name] = None  # any later `import name` raises ImportError

    import numpy as np
    from flwr.common import ArrayRecord, Message, MessageType, MetricRecord, RecordDict
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import FedAvg as LegacyFedAvg
    from flwr.serverapp.strategy import FedAvg

    from fedpriv.strategies.dp_wrappers import MetricDP, ServerSideFixedClippingDP
    from fedpriv.strategies.legacy_dp import LegacyMetricDP
    from fedpriv.privacy.accounting import dp_epsilon

    try:  # newer Flower builds instruction messages only inside a task
        from flwr.supercore.task_identity import TaskIdentity
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    except ImportError:
        pass

    rng = np.random.default_rng(0)
    models = [[rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=2).astype(np.float32)]
              for _ in range(3)]
    replies = []
    for i, arrays in enumerate(models):
        content = RecordDict({{"arrays": ArrayRecord(arrays),
                               "metrics": MetricRecord({{"num-examples": 10}})}})
        ins = Message(content=content, dst_node_id=10 + i, message_type=MessageType.TRAIN)
        replies.append(Message(content=content, reply_to=ins))
    mean = [np.mean([m[k] for m in models], axis=0) for k in range(2)]
    for cls in (ServerSideFixedClippingDP, MetricDP):
        wrapper = cls(FedAvg(), noise_multiplier=0.0, clipping_norm=100.0, num_sampled_clients=3)
        wrapper.current_arrays = ArrayRecord([np.zeros_like(a) for a in models[0]])
        arrays, _ = wrapper.aggregate_train(1, replies)
        for got, want in zip(arrays.to_numpy_ndarrays(), mean):
            assert np.allclose(got, want, atol=2e-7), (cls, got, want)
    legacy = LegacyMetricDP(LegacyFedAvg(), noise_multiplier=0.0, clipping_norm=100.0,
                            num_sampled_clients=3)
    legacy.current_round_params = [np.zeros_like(a) for a in models[0]]
    results = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(m), 10, {{}}))
               for m in models]
    params, _ = legacy.aggregate_fit(1, results, [])
    for got, want in zip(parameters_to_ndarrays(params), mean):
        assert np.allclose(got, want, atol=2e-7)
    assert dp_epsilon(1.0, rounds=3, sampled=3, population=3, delta=1e-5).epsilon_rdp > 0
    print("ok")
    """
)


CLI_WITHOUT_EXTRA = textwrap.dedent(
    """
    import contextlib, io, sys
    import flwr.common, flwr.common.config, flwr.server, flwr.serverapp
    for name in {heavy!r}:
        if name not in sys.modules:
            sys.modules[name] = None
    from fedpriv.scenarios.cli.main import main
    from fedpriv.scenarios.config.features import CATALOG

    light = [c for c in ("keys", "scenarios", "epsilon") if c in CATALOG.commands]
    for command in light:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main([command]) == 0, command
        assert out.getvalue().strip(), command
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["run", "--run-config", "output-dir={out!r}"]) == 2
    assert "pip install 'fedpriv[simulation]'" in err.getvalue(), err.getvalue()
    print("ok", *light)
    """
)


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
        check=False, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_wrappers_wrap_and_aggregate_with_heavy_packages_unimportable():
    proc = _python(WRAP_AND_AGGREGATE.format(heavy=HEAVY))
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def test_feature_list_and_cli_without_the_simulation_extra(tmp_path):
    """``fedpriv keys`` / ``scenarios`` / ``epsilon`` run; ``fedpriv run`` names the extra.

    The run goes to a fresh output directory: the default one may already hold a finished
    ``make run`` (then ``fedpriv run`` rightly has nothing to do and exits 0)."""
    proc = _python(CLI_WITHOUT_EXTRA.format(heavy=HEAVY, out=str(tmp_path / "run")))
    assert proc.returncode == 0 and "ok keys scenarios" in proc.stdout, proc.stderr[-3000:]


@pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is not None,
    reason="TensorFlow installed (simulation stack); checked in the base-install environment",
)
def test_base_install_imports_no_tensorflow_ray_or_matplotlib():
    code = (
        "import fedpriv.strategies.dp_wrappers, fedpriv.strategies.legacy_dp, "
        "fedpriv.privacy.accounting, sys; "
        "assert 'tensorflow' not in sys.modules; "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"
