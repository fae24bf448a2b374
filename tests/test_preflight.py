"""Fuzz of `fedpriv run`'s checks: bad configs and bad data folders.

Every case must exit 2 with a one-line error that names the key (or the file) and must
leave no output directory behind. Most cases go through ``fedpriv.scenarios.cli.main.main`` in this
process (the real check path, with the simulation launcher replaced by a tripwire so a
case that wrongly passes fails loudly instead of starting Ray); a handful go through a
real ``python -m fedpriv.scenarios.cli.main run`` subprocess (each pays a TensorFlow import).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.simulate import ROOT, to_override

CLASSES = ("Mild_Demented", "Moderate_Demented", "Non_Demented", "Very_Mild_Demented")


def _write_images(folder: Path, count: int, seed: int) -> None:
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        img = rng.integers(0, 255, size=(16, 16), dtype=np.uint8)
        assert cv2.imwrite(str(folder / f"img_{i:02d}.png"), img)


def _good_folder(root: Path, names=CLASSES) -> Path:
    for k, name in enumerate(names):
        _write_images(root / name, 3, k)
    return root


def _data_case(kind: str, tmp: Path) -> tuple[Path, str]:
    """A bad data folder of ``kind`` and the text its error must contain."""
    root = tmp / f"data-{kind}"
    if kind == "missing":
        return root, "data-path"
    if kind == "empty":
        root.mkdir()
        return root, "data-path"
    if kind == "misnamed":
        return _good_folder(root, ("mild", "moderate", "none", "very_mild")), "Mild_Demented"
    if kind == "class-missing":
        return _good_folder(root, CLASSES[:3]), "Very_Mild_Demented"
    if kind == "class-no-images":
        _good_folder(root, CLASSES[:3])
        (root / CLASSES[3]).mkdir()
        (root / CLASSES[3] / "notes.txt").write_text("no images here")
        return root, CLASSES[3]
    if kind == "corrupt-image":
        _good_folder(root)
        (root / CLASSES[2] / "img_99.jpg").write_bytes(b"\xff\xd8\xff not a jpeg at all")
        return root, "img_99.jpg"
    if kind == "zero-byte-image":
        _good_folder(root)
        (root / CLASSES[1] / "empty.png").write_bytes(b"")
        return root, "empty.png"
    if kind == "a-file":
        root.write_text("not a folder")
        return root, "data-path"
    if kind == "text-only":
        (root / "readme").mkdir(parents=True)
        (root / "readme" / "a.txt").write_text("x")
        return root, "data-path"
    if kind == "train-without-test-classes":
        _good_folder(root / "train")
        (root / "test").mkdir()
        return root, "Mild_Demented"
    raise AssertionError(kind)


DATA_CASES = [
    "missing",
    "empty",
    "misnamed",
    "class-missing",
    "class-no-images",
    "corrupt-image",
    "zero-byte-image",
    "a-file",
    "text-only",
    "train-without-test-classes",
]

NAN, INF = float("nan"), float("inf")
# (overrides, text the one-line error must contain)
CONFIG_CASES = [
    ({"learning-rate": NAN}, "learning-rate"),
    ({"learning-rate": INF}, "learning-rate"),
    ({"learning-rate": -INF}, "learning-rate"),
    ({"learning-rate": 0.0}, "learning-rate"),
    ({"learning-rate": "fast"}, "learning-rate"),
    ({"dirichlet-alpha": NAN}, "dirichlet-alpha"),
    ({"noise-multiplier": NAN}, "noise-multiplier"),
    ({"noise-multiplier": -1.0}, "noise-multiplier"),
    ({"clipping-norm": INF}, "clipping-norm"),
    ({"clipping-norm": 0.0}, "clipping-norm"),
    ({"min-distance": -1.0}, "min-distance"),
    ({"server-momentum": 1.0}, "server-momentum"),
    ({"beta-2": 1.5}, "beta-2"),
    ({"num-server-rounds": 0}, "num-server-rounds"),
    ({"num-server-rounds": 100_000}, "num-server-rounds"),
    ({"num-server-rounds": "3"}, "num-server-rounds"),
    ({"num-server-rounds": 2.5}, "num-server-rounds"),
    ({"local-epochs": -1}, "local-epochs"),
    ({"batch-size": 0}, "batch-size"),
    ({"seed": -1}, "seed"),
    ({"seed": 1.5}, "seed"),
    ({"num-clients": 0}, "num-clients"),
    ({"num-clients": 4, "clients-per-round": 9}, "clients-per-round"),
    ({"accept-failures": "yes"}, "accept-failures"),
    ({"accept-failures": 1}, "accept-failures"),
    ({"verbose": 0}, "verbose"),
    ({"strategy": "fedsgd"}, "strategy"),
    ({"privacy": "secret"}, "privacy"),
    ({"optimizer": "rmsprop"}, "optimizer"),
    ({"model": "resnet"}, "model"),
    ({"dataset": "mnist"}, "dataset"),
    ({"partition": "random"}, "partition"),
    ({"scenario": "nope"}, "scenario"),
    ({"scenario": ""}, "scenario"),
    ({"invalid-update": "ignore"}, "invalid-update"),
    ({"data-format": "zip"}, "data-format"),
    ({"distance-on": "cooked"}, "distance-on"),
    ({"no-such-key": 1}, "no-such-key"),
    ({"scenario": "alzheimer"}, "data-path"),
    ({"attack": "bogus"}, "attack"),
    ({"attack": "scale", "malicious-clients": ""}, "malicious-clients"),
    ({"attack": "scale", "malicious-clients": "9"}, "malicious-clients"),
    ({"attack": "nan", "malicious-clients": "0,x"}, "malicious-clients"),
    ({"attack-factor": NAN}, "attack-factor"),
    ({"attack-factor": -2.0}, "attack-factor"),
    ({"malicious-clients": 3}, "malicious-clients"),
]


def _items(overrides: dict) -> str:
    return " ".join(to_override(k, v) for k, v in overrides.items())


@pytest.fixture
def fedpriv_main(monkeypatch):
    """``fedpriv.scenarios.cli.main.main`` with the simulation launcher replaced by a tripwire
    (other
    subprocesses pass: a first TensorFlow import runs ``uname -p`` through h5py)."""
    from fedpriv.scenarios.cli import launch
    from fedpriv.scenarios.cli import main as cli

    def tripwire(real):
        def check(cmd, *args, **kwargs):
            if "fedpriv.scenarios.cli.simulation_runner" in map(str, cmd):
                raise AssertionError(f"a bad input reached the simulation: {cmd}")
            return real(cmd, *args, **kwargs)

        return check

    monkeypatch.setattr(launch.subprocess, "run", tripwire(subprocess.run))
    monkeypatch.setattr(launch.subprocess, "Popen", tripwire(subprocess.Popen))
    return cli.main


def _check_refused(rc: int, err: str, fragment: str, out: Path) -> None:
    """Exit 2, one short line (not counting the paths it names) with ``fragment``, no ``out``."""
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2, err
    assert len(lines) == 1 and len(lines[0].replace(str(out.parent), "")) < 400, err
    assert fragment in lines[0], lines[0]
    assert not out.exists(), f"{out} left behind"


@pytest.mark.parametrize("overrides,fragment", CONFIG_CASES, ids=lambda x: str(x)[:40])
def test_bad_config_exits_2_naming_the_key(overrides, fragment, tmp_path, fedpriv_main, capsys):
    out = tmp_path / "out"
    rc = fedpriv_main(["run", "--run-config", _items({**overrides, "output-dir": str(out)})])
    _check_refused(rc, capsys.readouterr().err, fragment, out)


@pytest.mark.parametrize(
    "make_dir",
    [
        lambda tmp: Path("/proc/fedpriv-x"),
        lambda tmp: Path("/proc/fedpriv-x/deeper"),
        lambda tmp: Path("/dev/null/x"),
        lambda tmp: (tmp / "afile").write_text("x") and tmp / "afile",
        lambda tmp: (tmp / "afile").write_text("x") and tmp / "afile" / "sub" / "dir",
    ],
    ids=["proc", "proc-deeper", "under-dev-null", "a-file", "under-a-file"],
)
def test_unusable_output_dir_exits_2(make_dir, tmp_path, fedpriv_main, capsys):
    out = make_dir(tmp_path)
    existed = out.exists()
    rc = fedpriv_main(["run", "--run-config", _items({"output-dir": str(out)})])
    err = capsys.readouterr().err
    assert rc == 2 and "output-dir" in err and len(err.strip().splitlines()) == 1, err
    assert out.exists() == existed


@pytest.mark.parametrize("kind", DATA_CASES)
def test_bad_data_folder_exits_2_naming_the_file(kind, tmp_path, fedpriv_main, capsys):
    path, fragment = _data_case(kind, tmp_path)
    out = tmp_path / "out"
    items = _items({"scenario": "alzheimer", "data-path": str(path), "output-dir": str(out)})
    rc = fedpriv_main(["run", "--run-config", items])
    _check_refused(rc, capsys.readouterr().err, fragment, out)


def test_output_dir_probe_leaves_nothing_behind(tmp_path):
    from fedpriv.scenarios.cli.preflight import check_output_dir
    from fedpriv.scenarios.config.schema import ConfigError

    deep = tmp_path / "a" / "b" / "c"
    check_output_dir(str(deep))  # writable: passes, and removes what it made
    assert not (tmp_path / "a").exists()
    existing = tmp_path / "kept"
    existing.mkdir()
    check_output_dir(str(existing))
    assert existing.is_dir() and not list(existing.iterdir())
    with pytest.raises(ConfigError, match="output-dir"):
        check_output_dir("/proc/fedpriv-x")


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        ({"output-dir": "/proc/x"}, "output-dir"),
        ({"learning-rate": NAN}, "learning-rate"),
        ({"scenario": "alzheimer", "data-path": "CORRUPT"}, "img_99.jpg"),
    ],
    ids=["proc", "nan", "corrupt-image"],
)
def test_cli_subprocess_exits_2(overrides, fragment, tmp_path):
    """The same checks through a real ``python -m fedpriv.scenarios.cli.main run`` (exit status,
    stderr)."""
    out = tmp_path / "out"
    if overrides.get("data-path") == "CORRUPT":
        overrides = {**overrides, "data-path": str(_data_case("corrupt-image", tmp_path)[0])}
    overrides = {"output-dir": str(out), **overrides}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedpriv.scenarios.cli.main",
            "run",
            "--run-config",
            _items(overrides),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    err_lines = [x for x in proc.stderr.splitlines() if x.startswith("fedpriv:")]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(err_lines) == 1 and fragment in err_lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and "ray" not in proc.stdout.lower()
    if overrides["output-dir"] != "/proc/x":
        assert not out.exists()
