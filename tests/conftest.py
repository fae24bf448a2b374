"""Shared test setup: quiet TensorFlow, CPU only, the repo root on sys.path."""

import os
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# module- and session-scoped fixtures run before the per-test root below: they get one of
# this session's own, never the user's default root (whose ledgers outlive the session)
os.environ["FEDPRIV_STATE_ROOT"] = tempfile.mkdtemp(prefix="fedpriv-test-state-")
# JAX runs compile into this session's cache, not the user's (clients/compile_cache.py)
os.environ.setdefault("FEDPRIV_COMPILE_CACHE", tempfile.mkdtemp(prefix="fedpriv-test-xla-"))
# pytest-xdist's workers share the machine: each sizes its simulations (num-workers = auto,
# a local Ray with the CPUs of its actors) for its share of the CPUs, not for all of them
_XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
if _XDIST_WORKERS > 1:
    os.environ.setdefault("FEDPRIV_CPUS", str(max(1, (os.cpu_count() or 1) // _XDIST_WORKERS)))
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def pytest_collection_modifyitems(config, items):
    """Real simulations first (stable within each group): with ``make test``'s pytest-xdist
    workers (whole files per worker) the long files start first and the short unit-test files
    fill the gaps, instead of one worker finishing a long file alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("simulation") is None)


@pytest.fixture(autouse=True)
def flower_task_identity():
    """Flower >= 1.3x builds instruction messages only inside a task: unit tests that build
    them outside a ServerApp act as the task the runtime would set (no-op on older Flower)."""
    from tests.flower_reference import act_as_serverapp_task

    act_as_serverapp_task()


@pytest.fixture(scope="module", autouse=True)
def module_state_root(tmp_path_factory):
    """A module's fixtures get a ``FEDPRIV_STATE_ROOT`` of their own: a node's ledger is
    lifetime (per node, across runs: ``fedpriv.privacy.releases``), so the simulated nodes of
    two modules holding the same data must not be one node."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FEDPRIV_STATE_ROOT", str(tmp_path_factory.mktemp("module-state")))
        yield


@pytest.fixture(autouse=True)
def own_state_root(tmp_path_factory, monkeypatch):
    """Every test's nodes keep their release ledgers (``fedpriv.privacy.releases``) under a fresh
    ``FEDPRIV_STATE_ROOT`` (inherited by the simulations a test starts), so no test sees
    another's releases."""
    monkeypatch.setenv("FEDPRIV_STATE_ROOT", str(tmp_path_factory.mktemp("fedpriv-state")))
