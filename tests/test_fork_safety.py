"""A process that imported fedpriv and computed a PLD ε can still fork: SciPy's FFT (ducc0)
keeps no idle worker pool, whose fork handler joined its threads and could wait forever (a
CI run hung in ``fork()`` inside the ledger's racing-process tests this way)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

COUNT_THREADS = """
import os, sys
if sys.argv[1] == "fedpriv":
    import fedpriv  # noqa: F401
import dp_accounting
from dp_accounting.pld import pld_privacy_accountant
accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
sampled = dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.0))
accountant.compose(sampled, 20)  # a Poisson-sampled Gaussian, self-convolved by scipy's FFT
accountant.get_epsilon(1e-5)
print(len(os.listdir(f"/proc/{os.getpid()}/task")))
"""


def _threads_after_a_pld_epsilon(first_import: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "DUCC0_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", COUNT_THREADS, first_import],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return int(out.stdout.strip())


@pytest.mark.skipif(
    not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
    reason="counts threads in /proc; ducc0 starts no pool on one CPU",
)
def test_a_pld_epsilon_leaves_no_fft_thread_pool_behind_after_importing_fedpriv():
    without = _threads_after_a_pld_epsilon("none")
    with_fedpriv = _threads_after_a_pld_epsilon("fedpriv")
    assert with_fedpriv < without, (with_fedpriv, without)


def test_a_user_set_fft_thread_count_is_kept():
    out = subprocess.run(
        [sys.executable, "-c", "import fedpriv, os; print(os.environ['DUCC0_NUM_THREADS'])"],
        env={**os.environ, "DUCC0_NUM_THREADS": "3"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "3"
