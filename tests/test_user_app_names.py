"""fedpriv inside someone else's Flower app: one import name, no clash (issue "in any Flower app").

A user's app with its own ``strategies.py``, ``clients/`` and ``scenarios/`` (names as common in
Flower apps as they were in fedpriv) imports fedpriv's wrappers, its ClientApp module and its
release ledger next to them: fedpriv installs one top-level package, ``fedpriv``
(``setup.py``), so each name means the user's module in the user's app and fedpriv's under
``fedpriv.``. ``tests/test_example_app.py`` runs the example app so modified on Flower's
simulation engine (the deployment tier).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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
