"""``fedpriv run``'s command line on Flower 1.42: bad input is one line, federations, no rewrite.

- A ``--run-config`` key given twice (a user appending an override: ``-c "seed=1" -c
  "seed=2"`` or ``"seed=1 seed=2"``) and an item that is not TOML are one-line config errors
  (exit 2) naming the key, in every command that takes ``--run-config``.
- A config error and ``--help`` import no TensorFlow, JAX, Keras or Ray (checked in a fresh
  interpreter through the module list at exit, so stderr holds only what the CLI printed).
- The federations are ``pyproject.toml [tool.fedpriv.federations]``: the GPU one runs Keras on
  JAX with on-demand GPU memory and a quarter GPU per client; an unknown name is one line.
- The repository's pyproject.toml holds nothing Flower >= 1.24's ``flwr run`` migrates (it
  would rewrite the file): no ``[tool.flwr.federations]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.simulate import ROOT

HEAVY = {"tensorflow", "jax", "keras", "ray"}


@pytest.fixture
def fedpriv_main(monkeypatch):
    """``fedpriv.scenarios.cli.main.main`` with the simulation launcher replaced by a tripwire
    (other
    subprocesses pass: a first TensorFlow import runs ``uname -p`` through h5py)."""
    from fedpriv.scenarios.cli import launch
    from fedpriv.scenarios.cli import main as cli

    real_run, real_popen = subprocess.run, subprocess.Popen

    def tripwire(real):
        def call(cmd, *args, **kwargs):
            if "fedpriv.scenarios.cli.simulation_runner" in map(str, cmd):
                raise AssertionError(f"a bad input reached the simulation: {cmd}")
            return real(cmd, *args, **kwargs)

        return call

    monkeypatch.setattr(launch.subprocess, "run", tripwire(real_run))
    monkeypatch.setattr(launch.subprocess, "Popen", tripwire(real_popen))
    return cli.main


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "items",
    [["seed=1", "seed=2"], ["seed=1 seed=2"], ["scenario='digits' seed=1", "rounds=1 seed=1"]],
    ids=["two-items", "one-item", "same-value"],
)
def test_duplicated_key_is_one_line_naming_it(items, fedpriv_main, capsys, tmp_path):
    out = tmp_path / "out"
    argv = ["run", "-c", f"output-dir='{out}'"]
    for item in items:
        argv += ["-c", item]
    assert fedpriv_main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("fedpriv: config error:") and "seed twice" in line, line
    assert not out.exists()


@pytest.mark.parametrize(
    "argv,prefix",
    [
        (["audit"], "fedpriv: "),
        (["epsilon"], "fedpriv: "),
        (["attack", "cia"], "fedpriv attack cia: "),
        (
            ["grid", "--scenario", "digits", "--strategies", "fedavg", "--privacy", "none"]
            + ["--seeds", "0", "--output-dir", "GRID"],
            "fedpriv grid: ",
        ),
    ],
    ids=["audit", "epsilon", "attack-cia", "grid"],
)
def test_every_command_refuses_a_duplicated_key(argv, prefix, fedpriv_main, capsys, tmp_path):
    argv = [str(tmp_path / "g") if a == "GRID" else a for a in argv]
    assert fedpriv_main([*argv, "-c", "seed=1", "-c", "seed=2"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(prefix) and "seed twice" in line, line
    assert not (tmp_path / "g").exists()


def test_item_that_is_not_toml_is_one_line(fedpriv_main, capsys):
    assert fedpriv_main(["run", "-c", "seed=1 strategy=fed avg"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--run-config" in line and "TOML" in line, line


@pytest.mark.parametrize(
    ("flags", "item"),
    [
        (["--output-dir", "X"], "-c \"output-dir='X'\""),
        (["--seed=3"], '-c "seed=3"'),
        (["--num-server-rounds", "5", "--verbose"], '-c "num-server-rounds=5"'),
        (["--reproducible-noise", "true"], '-c "reproducible-noise=true"'),
        (["--dp-delta"], '-c "dp-delta=..."'),
    ],
    ids=["output-dir", "equals", "before-an-option", "bool", "no-value"],
)
def test_a_run_config_key_given_as_an_option_names_the_c_item(flags, item, fedpriv_main, capsys,
                                                                tmp_path, monkeypatch):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert fedpriv_main(["run", *flags]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "is a run-config key, not an option" in line and item in line, line
    assert not (tmp_path / "X").exists() and not (tmp_path / "runs").exists()
    assert fedpriv_main(["epsilon", *flags]) == 2  # every command with -c
    assert item in _one_line(capsys.readouterr().err)
    if flags[0] == "--num-server-rounds":  # a value argparse took for show's SCENARIO
        assert fedpriv_main(["show", *flags]) == 2
        assert item in _one_line(capsys.readouterr().err)


def test_an_unknown_option_is_still_argparses_error(fedpriv_main, capsys):
    with pytest.raises(SystemExit) as exit_:
        fedpriv_main(["run", "--no-such-option"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("item", "problem"),
    [("missing.toml", "does not exist"), ("conf/missing", "does not exist"),
     (".", "is not a file"), ("run.txt", "is not named *.toml")],
)  # fmt: skip
def test_a_c_file_that_is_not_there_is_a_missing_file(item, problem, fedpriv_main, capsys,
                                                       tmp_path, monkeypatch):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.txt").write_text("seed = 1\n")
    assert fedpriv_main(["run", "-c", item]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"--run-config file {item!r} {problem}" in line, line
    assert "key=value pairs with TOML" not in line
    (tmp_path / "run.toml").write_text("seed = 1\n")
    assert fedpriv_main(["show", "digits", "-c", "run.toml"]) == 0  # an existing file still reads


def test_a_mistyped_choice_suggests_the_nearest(fedpriv_main, capsys):
    assert fedpriv_main(["run", "-c", "scenario='digit'"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "scenario = 'digit'" in line and line.endswith("did you mean 'digits'?"), line
    assert fedpriv_main(["epsilon", "-c", "privacy='global_dp'"]) == 2
    assert "did you mean 'global-dp'?" in _one_line(capsys.readouterr().err)
    assert fedpriv_main(["epsilon", "-c", "scenario='xyzzy'"]) == 2
    assert "did you mean" not in _one_line(capsys.readouterr().err)


def test_distinct_keys_parse_as_flower_parses_them():
    from fedpriv.scenarios.cli.launch import parse_overrides
    from flwr.common.config import parse_config_args

    items = ["scenario='digits' seed=3", "verbose=true run-plan='a=b c'", "learning-rate=0.5"]
    assert parse_overrides(items) == parse_config_args(items)
    assert parse_overrides(items)["run-plan"] == "a=b c"


def _fresh_cli(args: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, set]:
    """``python -m fedpriv.scenarios.cli.main ARGS`` in a fresh interpreter; (process, top-level
    modules
    imported by the end), the module list written at exit, off stdout and stderr."""
    dump = tmp_path / "modules.json"
    code = (
        "import atexit, json, runpy, sys\n"
        f"atexit.register(lambda: open({str(dump)!r}, 'w').write("
        "json.dumps(sorted({m.split('.')[0] for m in sys.modules}))))\n"
        f"sys.argv = ['fedpriv', *{args!r}]\n"
        "runpy.run_module('fedpriv.scenarios.cli.main', run_name='__main__')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for var in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND"):
        env.pop(var, None)  # no help from a quiet environment: the CLI must be quiet alone
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc, set(json.loads(dump.read_text()))


@pytest.mark.parametrize(
    "items,fragment",
    [(["strategy='nope'"], "strategy = 'nope'"), (["seed=1", "seed=2"], "seed twice")],
    ids=["bad-value", "duplicated-key"],
)
def test_config_error_is_exactly_one_line_without_tensorflow_or_jax(items, fragment, tmp_path):
    args = ["run", "-c", f"output-dir='{tmp_path / 'out'}'"]
    for item in items:
        args += ["-c", item]
    proc, modules = _fresh_cli(args, tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("fedpriv: config error:") and fragment in proc.stderr
    assert not HEAVY & modules, sorted(HEAVY & modules)


def test_run_help_imports_no_tensorflow_or_jax(tmp_path):
    proc, modules = _fresh_cli(["run", "--help"], tmp_path)
    assert proc.returncode == 0 and "--federation" in proc.stdout, proc.stderr
    assert proc.stderr == ""
    assert not HEAVY & modules, sorted(HEAVY & modules)


def test_unknown_federation_is_one_line(tmp_path):
    proc, modules = _fresh_cli(["run", "--federation", "local-deployment"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "federation = 'local-deployment'" in proc.stderr
    assert "local-simulation | local-simulation-gpu" in proc.stderr
    assert not HEAVY & modules


def test_gpu_federation_runs_keras_on_jax_with_a_quarter_gpu_per_client():
    from fedpriv.scenarios.cli.launch import federation_env, simulation_command

    cmd = simulation_command({"num-clients": 4}, ["seed=1"], "local-simulation-gpu")
    assert cmd[cmd.index("--num-supernodes") + 1] == "4"
    backend = json.loads(cmd[cmd.index("--backend-config") + 1])
    assert backend["client-resources"] == {"num-cpus": 1, "num-gpus": 0.25}
    assert cmd[cmd.index("--run-config") + 1] == "seed=1"
    env = federation_env("local-simulation-gpu", {"PATH": "/bin"})
    assert env["KERAS_BACKEND"] == "jax" and env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert "CUDA_VISIBLE_DEVICES" not in env
    # the user's own setting wins over the federation's
    assert (
        federation_env("local-simulation-gpu", {"KERAS_BACKEND": "tensorflow"})["KERAS_BACKEND"]
        == "tensorflow"
    )


def test_cpu_federation_hides_gpus_and_uses_one_cpu_per_client():
    from fedpriv.scenarios.cli.launch import federation_env, simulation_command

    cmd = simulation_command({"num-clients": 7}, [], "local-simulation")
    assert cmd[cmd.index("--num-supernodes") + 1] == "7" and "--run-config" not in cmd
    backend = json.loads(cmd[cmd.index("--backend-config") + 1])
    assert backend["client-resources"] == {"num-cpus": 1, "num-gpus": 0.0}
    env = federation_env("local-simulation", {})
    assert env["CUDA_VISIBLE_DEVICES"] == "" and "KERAS_BACKEND" not in env
    # the runner decides whether Ray prestarts workers
    # (fedpriv.scenarios.cli.ray_cluster.prestart_env)
    assert "RAY_prestart_worker_first_driver" not in env
    gpu = federation_env("local-simulation-gpu", {})  # its Ray sized to its actors
    assert gpu["RAY_prestart_worker_first_driver"] == "0"


def test_simulate_starts_the_runner_with_the_federation_env(monkeypatch):
    """What :func:`fedpriv.scenarios.cli.launch.simulate` hands the simulation process (no process
    started)."""
    from fedpriv.scenarios.cli import launch

    seen = {}

    def fake_run(cmd, *, env, **kwargs):
        seen.update(cmd=cmd, env=env)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(launch.subprocess, "run", fake_run)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert launch.simulate({"num-clients": 4}, ["seed=1"], "local-simulation-gpu") == 0
    assert seen["cmd"][1:3] == ["-m", "fedpriv.scenarios.cli.simulation_runner"]
    assert seen["env"]["KERAS_BACKEND"] == "jax"
    assert seen["env"]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


def test_pyproject_holds_nothing_flwr_run_would_migrate():
    """``flwr run .`` (Flower >= 1.24) moves ``[tool.flwr.federations]`` to $FLWR_HOME and
    comments it out in the app's pyproject.toml; the repository's has none, and Flower's own
    check agrees; the app config still validates."""
    import tomllib

    from flwr.cli.config_migration import _is_migratable
    from flwr.cli.config_utils import load_and_validate

    with (ROOT / "pyproject.toml").open("rb") as fh:
        project = tomllib.load(fh)
    assert "federations" not in project["tool"]["flwr"]
    assert set(project["tool"]["fedpriv"]["federations"]) == {
        "local-simulation",
        "local-simulation-gpu",
        "local-in-process",
        "ray-cluster",
    }
    migratable, reason = _is_migratable(ROOT)
    assert not migratable and "No '[tool.flwr.federations]' section" in reason, reason
    config, warnings = load_and_validate(ROOT / "pyproject.toml", check_module=False)
    assert config["tool"]["flwr"]["app"]["components"] and not warnings
