"""examples/sklearn-metric-dp on Flower 1.42: simulation engine and a real SuperLink.

The app (scikit-learn logistic regression, Flower's template plus one ``MetricDP`` line) is
submitted with ``flwr run`` exactly as its README says, to Flower's own ``flower-superlink``
(``--simulation`` for the simulation engine; with four ``flower-supernode`` processes for
the deployment engine) on free loopback ports, started with
``--disable-runtime-dependency-installation`` (offline: nothing is installed at run time),
with a throwaway ``FLWR_HOME`` holding the SuperLink connection in ``config.toml``. Runs in
the main environment, in CI's ``make test-deployment`` (marker ``deployment``; not in ``make
test``); needs Flower >= 1.40 (SuperLink connections in ``$FLWR_HOME/config.toml``, one HTTP
port per SuperLink). Every process is started in its own session and ended, with everything
below it, when the test ends (:mod:`tests.localflower`); ``flwr run`` has a hard timeout, and
a step that fails or runs out of time fails the test with one line.

Checked per round from the app's ``output-file``: σ = z·C/(m·d) with the d it reports,
d > 0, ε (comparison) strictly growing, and the model learns (accuracy well above chance);
and the app's ``pyproject.toml`` is byte-identical after ``flwr run`` (Flower >= 1.24 rewrites
an app's pyproject.toml that still holds ``[tool.flwr.federations]``).
On the SuperLink the clients only train (``fraction-evaluate=0``): every message starts a
ClientApp process there, and CI time matters; the simulation run has client evaluation.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.localflower import (
    Failure,
    Processes,
    command_of,
    free_ports,
    holding,
    processes,
    wait_http_ok,
)

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "examples" / "sklearn-metric-dp"
BIN = Path(sys.executable).parent
FLWR = tuple(int(x) for x in version("flwr").split(".")[:2])
Z, C, M, ROUNDS = 0.1, 10.0, 4, 2
RUN_S = 420  # flwr run --stream of the whole run
APP_STARTED_S = 240  # until a ClientApp process of a submitted run is seen

# The example submitted with flwr run to Flower's own SuperLink (simulation and deployment):
# not in `make test` (slow); CI runs it in `make test-deployment`. The MetricDP wrapper it uses
# is also checked in the fast tier (tests/test_dp_wrappers.py: the same sigma = z*C/(m*d)).
pytestmark = [
    pytest.mark.example,
    pytest.mark.slow,
    pytest.mark.deployment,
    pytest.mark.skipif(FLWR < (1, 40), reason="the run commands of Flower >= 1.40"),
]


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "flwr-home"
    home.mkdir()
    return dict(
        os.environ,
        PATH=f"{BIN}:{os.environ['PATH']}",
        FLWR_HOME=str(home),
        FLWR_DISABLE_UPDATE_CHECK="1",
        RAY_DISABLE_USAGE_STATS="1",
    )


def _connection(env: dict[str, str], name: str, port: int) -> None:
    """A SuperLink connection ``name`` at 127.0.0.1:port in $FLWR_HOME/config.toml."""
    path = Path(env["FLWR_HOME"]) / "config.toml"
    path.write_text(
        f'[superlink]\ndefault = "{name}"\n\n'
        f'[superlink.{name}]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
    )


def _superlink(procs, tmp_path: Path, port: int, *extra: str) -> None:
    procs.start(
        "superlink",
        [str(BIN / "flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
         "--host", "127.0.0.1", "--port", str(port),
         "--database", str(tmp_path / "superlink.db"), *extra],
    )  # fmt: skip
    wait_http_ok(f"http://127.0.0.1:{port}/health", timeout_s=120, procs=procs)


def _supernodes(procs: Processes, tmp_path: Path, port: int, count: int) -> None:
    """``count`` SuperNodes (partition i of ``count``), each with its own state folder."""
    for i, node_port in enumerate(free_ports(count)):
        state = tmp_path / f"state-node{i}"
        state.mkdir(mode=0o700)
        config = f'partition-id={i} num-partitions={count} client-state-dir="{state}"'
        procs.start(
            f"supernode{i}",
            [str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{port}",
             "--port", str(node_port), "--node-config", config],
        )  # fmt: skip


def _flwr_run(
    procs: Processes,
    connection: str,
    out: Path,
    *extra: str,
    clients: int = M,
    rounds: int = ROUNDS,
    timeout_s: float = RUN_S,
    stream: bool = True,
) -> str:
    """``flwr run`` of the app in the repository, which it must leave untouched; its output.
    Past ``timeout_s``: :class:`Failure`, one line."""
    before = (APP / "pyproject.toml").read_bytes()
    overrides = f"output-file='{out}' noise-multiplier={Z} clipping-norm={C} num-clients={clients}"
    output = procs.run(
        "flwr-run",
        [str(BIN / "flwr"), "run", str(APP), connection, *(["--stream"] if stream else []),
         "--run-config", f"{overrides} num-server-rounds={rounds}", *extra],
        timeout_s=timeout_s,
    )  # fmt: skip
    assert (APP / "pyproject.toml").read_bytes() == before, "flwr run rewrote pyproject.toml"
    return output


@contextlib.contextmanager
def one_line_failures(procs: Processes):
    """A :class:`Failure` fails the test with its one line (the logs in the captured output)."""
    try:
        yield
    except Failure as err:
        print(procs.logs())
        pytest.fail(str(err), pytrace=False)


def _check_rounds(
    out: Path, context: str, clients: int = M, rounds: int = ROUNDS, min_accuracy: float = 0.6
) -> list[dict]:
    assert out.exists(), context
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["round"] for r in rows] == list(range(rounds + 1)), context
    for r in rows[1:]:
        assert r["d"] > 0 and math.isfinite(r["d"]), r
        assert r["sigma"] == pytest.approx(Z * C / (clients * r["d"]), rel=1e-9), r
    eps = [r["epsilon_comparison_only"] for r in rows[1:]]
    assert all(b > a > 0 for a, b in zip(eps, eps[1:])), eps
    assert rows[-1]["accuracy"] > min_accuracy, rows  # chance is 0.1
    return rows


def test_example_on_a_local_superlink_and_supernodes_then_a_run_stopped_mid_round(tmp_path):
    """The example on a SuperLink and four SuperNodes to its end (the checked rounds); then a
    second run on the same federation (20 rounds, submitted, not streamed: ``flwr run``
    returns and the run goes on in Flower's processes) is stopped while its ClientApps work:
    every process the test ever saw (SuperLink, SuperNodes, SuperExecs, ServerApps,
    ClientApps) is gone after the stop, by the recorded tree and by a scan of every process
    for the test's ``FLWR_HOME`` (:func:`tests.localflower.holding`). (The stop had a
    federation of its own in tests/test_deployment_cleanup.py: ~1 min of CI more.)"""
    env, (port,) = _env(tmp_path), free_ports(1)
    _connection(env, "deploy", port)
    out = tmp_path / "rounds.jsonl"
    with processes(tmp_path, env) as procs, one_line_failures(procs):
        _superlink(procs, tmp_path, port)
        _supernodes(procs, tmp_path, port, M)
        output = _flwr_run(procs, "deploy", out, "--run-config", "fraction-evaluate=0.0")
        _check_rounds(out, output[-4000:] + procs.logs())
        _flwr_run(procs, "deploy", tmp_path / "stopped.jsonl", rounds=20, stream=False,
                  timeout_s=120)  # fmt: skip
        _wait_live(procs, "flwr-clientapp", APP_STARTED_S)
    kinds = " ".join(procs.seen.values())
    for kind in ("flower-superlink", "flower-supernode", "flower-superexec", "flwr-clientapp"):
        assert kind in kinds, f"the test never saw a {kind} process: {sorted(procs.seen.values())}"
    assert procs.leftovers() == []
    assert [f"{pid} {cmd}" for pid, cmd in procs.seen.items() if command_of(pid) == cmd] == []
    assert holding("FLWR_HOME", env["FLWR_HOME"]) == []


def _wait_live(procs: Processes, needle: str, timeout_s: float) -> None:
    """Until a live process of the test has ``needle`` in its command line (:class:`Failure`
    past ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while not any(needle in command_of(pid) for pid in procs.tree()):
        if time.monotonic() > deadline:
            raise Failure(f"no {needle} process within {timeout_s:.0f} s")
        time.sleep(0.2)


def test_example_in_the_simulation_engine_beside_the_users_own_modules(tmp_path):
    """The example app on Flower's simulation engine (a ``--simulation`` SuperLink, four
    virtual SuperNodes), given the user's own ``strategies.py``, ``clients/`` and
    ``scenarios/`` (:data:`tests.test_user_app_names.USER_MODULES`), which its ServerApp
    imports beside fedpriv's MetricDP: it runs to the end with the checked rounds (fedpriv
    installs one top-level name, ``fedpriv``, and shadows none of them), and ``flwr run``
    leaves its pyproject.toml as it was. (One run for both: the plain example on the same
    engine was a separate run, ~1 min of CI, that checked nothing more.)"""
    import shutil
    import subprocess

    from tests.test_user_app_names import user_app

    app = tmp_path / "app"
    shutil.copytree(APP, app)
    user_app(app)
    server = app / "sklearn_metric_dp" / "server_app.py"
    server.write_text(
        server.read_text().replace(
            "app = ServerApp()",
            "import clients, scenarios, strategies  # noqa: E402  (the user's own)\n\n"
            "assert strategies.OWNER.startswith('user') and clients.OWNER.startswith('user')\n"
            "assert scenarios.OWNER.startswith('user')\n\napp = ServerApp()",
        )
    )
    env, (port,) = _env(tmp_path), free_ports(1)
    env.pop("PYTHONPATH", None)
    _connection(env, "sim", port)
    out = tmp_path / "rounds.jsonl"
    before = (app / "pyproject.toml").read_bytes()
    with processes(tmp_path, env) as procs, one_line_failures(procs):
        _superlink(procs, tmp_path, port, "--simulation")
        try:
            run = subprocess.run(
                [str(BIN / "flwr"), "run", str(app), "sim", "--stream", "--run-config",
                 f"output-file='{out}' noise-multiplier={Z} clipping-norm={C} num-clients={M} "
                 f"num-server-rounds={ROUNDS}", "--federation-config", f"num-supernodes={M}"],
                env=env, capture_output=True, text=True, timeout=RUN_S, check=False,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired:  # one line (the processes' logs printed above it)
            raise Failure(f"flwr run did not finish within {RUN_S} s") from None
        _check_rounds(out, run.stdout[-3000:] + run.stderr[-2000:] + procs.logs())
    assert (app / "pyproject.toml").read_bytes() == before, "flwr run rewrote pyproject.toml"
    assert not procs.leftovers()
