"""The simulation runner's own start and end (:mod:`fedpriv.scenarios.cli.simulation_runner`).

The ClientApp's module is imported in a thread while Ray starts (an error in it surfaces in
the main thread); the process ends with its ``atexit`` handlers run and its output flushed,
with the runner's exit status, but without the interpreter's module teardown.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_end_process_runs_the_atexit_handlers_flushes_and_keeps_the_status():
    code = (
        "import atexit, sys\n"
        "from fedpriv.scenarios.cli.simulation_runner import end_process\n"
        "atexit.register(lambda: print('handler ran', flush=False))\n"
        "print('buffered', end=' ')\n"
        "sys.stderr.write('err kept')\n"
        "end_process(3)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 3
    assert proc.stdout == "buffered handler ran\n"
    assert proc.stderr == "err kept"


def test_the_preloaded_module_is_imported_and_its_error_raised_in_the_caller(tmp_path, monkeypatch):
    from fedpriv.scenarios.cli.simulation_runner import _Preload

    (tmp_path / "good_app.py").write_text("VALUE = 2\n")
    (tmp_path / "bad_app.py").write_text("raise ImportError('no such thing')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "good_server.py").write_text("import good_app\nVALUE = good_app.VALUE + 1\n")
    good = _Preload("good_app", "good_server")
    good.start()
    good.result()
    assert sys.modules["good_app"].VALUE == 2 and sys.modules["good_server"].VALUE == 3
    bad = _Preload("bad_app")
    bad.start()
    with pytest.raises(ImportError, match="no such thing"):
        bad.result()


def test_backend_keys_are_underscored_as_flower_does():
    from fedpriv.scenarios.cli.simulation_runner import _backend_config
    from flwr.simulation.run_simulation import _replace_keys

    text = '{"client-resources": {"num-cpus": 1}, "init-args": {"include-dashboard": false}}'
    ours = _backend_config(text)
    assert ours == _replace_keys(__import__("json").loads(text), match="-", target="_")
    assert ours == {"client_resources": {"num_cpus": 1}, "init_args": {"include_dashboard": False}}
    assert _backend_config("") == {}
