"""fedpriv inside someone else's Flower app: one import name, no clash (issue "in any Flower app").

A user's app with its own ``strategies.py``, ``clients/`` and ``scenarios/`` (names as common in
Flower apps as they were in fedpriv) imports fedpriv's wrappers, its ClientApp module and its
release ledger next to them: fedpriv installs one top-level package, ``fedpriv``
(``setup.py``), so each name means the user's module in the user's app and fedpriv's under
``fedpriv.``. The slow test runs the example app so modified on Flower's simulation engine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "sklearn-metric-dp"
BIN = Path(sys.executable).parent
HAS_KERAS = importlib.util.find_spec("keras") is not None

USER_MODULES = {
    "strategies.py": "OWNER = 'user: strategies.py'\n",
    "clients/__init__.py": "OWNER = 'user: clients/'\n",
    "scenarios/__init__.py": "OWNER = 'user: scenarios/'\n",
}


def user_app(folder: Path) -> Path:
    """A folder with the user's own ``strategies``, ``clients`` and ``scenarios``."""
    for name, text in USER_MODULES.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def _probe(app: Path, *modules: str) -> dict[str, str]:
    """Import the user's three names and ``modules`` in a fresh interpreter started in the
    user's app folder (its sys.path[0]); each name -> the file it came from."""
    code = (
        "import json, importlib, strategies, clients, scenarios\n"
        f"mods = {list(modules)!r}\n"
        "found = {m: importlib.import_module(m).__file__ for m in mods}\n"
        "found.update({n: getattr(importlib.import_module(n), 'OWNER') "
        "for n in ('strategies', 'clients', 'scenarios')})\n"
        "print(json.dumps(found))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=app, env={**env, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_users_strategies_clients_and_scenarios_keep_their_names(tmp_path):
    modules = ["fedpriv.strategies.dp_wrappers", "fedpriv.strategies.legacy_dp",
               "fedpriv.privacy.releases"]  # fmt: skip
    if HAS_KERAS:  # the simulation install: fedpriv's ClientApp and its Keras clients too
        modules += ["fedpriv.scenarios.app.client_app", "fedpriv.clients.releases"]
    found = _probe(user_app(tmp_path), *modules)
    assert found["strategies"] == "user: strategies.py"
    assert found["clients"] == "user: clients/" and found["scenarios"] == "user: scenarios/"
    for module in modules:
        assert not found[module].startswith(str(tmp_path)), (module, found[module])


def test_the_old_top_level_names_fail_in_one_line_from_a_checkout():
    """From the repository root the folders are visible under their old names: importing them
    so fails at once, in one line naming the new path (never a second copy of a module)."""
    for old in ("strategies", "clients", "scenarios"):
        out = subprocess.run(
            [sys.executable, "-c", f"import {old}.x"], cwd=ROOT, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip
        last = out.stderr.strip().splitlines()[-1]
        assert out.returncode != 0 and f"is now 'fedpriv.{old}'" in last, out.stderr


@pytest.mark.slow
@pytest.mark.guard
@pytest.mark.example
@pytest.mark.skipif(not HAS_KERAS, reason="the simulation install (Flower's simulation engine)")
def test_the_example_app_with_the_users_names_runs_on_the_simulation_engine(tmp_path):
    """The example app (its ServerApp wraps FedAvg with fedpriv's MetricDP) given the user's
    own strategies / clients / scenarios, which its ServerApp imports beside fedpriv's, runs
    to the end on Flower's simulation engine (a local SuperLink in simulation mode)."""
    from tests.localflower import free_ports, processes, wait_http_ok

    app = tmp_path / "app"
    shutil.copytree(EXAMPLE, app)
    user_app(app)
    server = app / "sklearn_metric_dp" / "server_app.py"
    text = server.read_text()
    server.write_text(
        text.replace(
            "app = ServerApp()",
            "import clients, scenarios, strategies  # noqa: E402  (the user's own)\n\n"
            "assert strategies.OWNER.startswith('user') and clients.OWNER.startswith('user')\n"
            "assert scenarios.OWNER.startswith('user')\n\napp = ServerApp()",
        )
    )
    home, out = tmp_path / "flwr-home", tmp_path / "rounds.jsonl"
    home.mkdir()
    (port,) = free_ports(1)
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "sim"\n\n[superlink.sim]\naddress = "127.0.0.1:{port}"\n'
        "insecure = true\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PATH=f"{BIN}:{env['PATH']}", FLWR_HOME=str(home), FLWR_DISABLE_UPDATE_CHECK="1",
               RAY_DISABLE_USAGE_STATS="1")  # fmt: skip
    with processes(tmp_path, env) as procs:
        procs.start(
            "superlink",
            [str(BIN / "flower-superlink"), "--insecure", "--simulation",
             "--disable-runtime-dependency-installation", "--host", "127.0.0.1",
             "--port", str(port), "--database", str(tmp_path / "superlink.db")],
        )  # fmt: skip
        wait_http_ok(f"http://127.0.0.1:{port}/health", timeout_s=120, procs=procs)
        run = subprocess.run(
            [str(BIN / "flwr"), "run", str(app), "sim", "--stream", "--run-config",
             f"output-file='{out}' num-clients=2 num-server-rounds=2",
             "--federation-config", "num-supernodes=2"],
            env=env, capture_output=True, text=True, timeout=420, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        context = run.stdout[-3000:] + run.stderr[-2000:] + procs.logs()
        assert out.exists(), context
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1, 2], context
    assert all(r["sigma"] > 0 for r in rows[1:]), rows
