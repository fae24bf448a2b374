"""The run console: round lines, the summary, framework noise off, the CLI's help.

The simulation checks run the real ``fedpriv run`` as a subprocess (digits, tiny) twice:
by default and with ``--verbose``, in an environment without the quiet variables that
``make`` or a user may export.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fedpriv.scenarios.app import quiet

from fedpriv.reporting import console

ROOT = Path(__file__).resolve().parent.parent

# What framework noise looks like (absl, oneDNN, Ray's tip, Keras's numpy-2 warning, Flower's
# INFO lines and its worker lines).
NOISE = {
    "absl/oneDNN": re.compile(r"absl::InitializeLog|oneDNN|^[EWI]\d{4} \d\d:\d\d:\d\d"),
    "Ray tip": re.compile(r"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO|FutureWarning"),
    "DeprecationWarning": re.compile(r"DeprecationWarning"),
    "Flower INFO": re.compile(r"^(\x1b\[\d+m)?INFO\b"),
    "Ray worker": re.compile(r"ClientAppActor pid="),
}
RST_OR_INTERNAL = re.compile(r"``|:func:|:mod:|:class:|:data:|\bCommand\b|feature list|catalog")


def _noise(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        for name, pattern in NOISE.items():
            if pattern.search(line):
                found.setdefault(name, []).append(line)
    return found


# --- round lines and the summary (formatting only) -----------------------------------------


def test_round_line_of_metric_dp_names_sigma_d_and_no_epsilon():
    record = {
        "round": 3,
        "server": {"accuracy": 0.91234, "loss": 0.30111},
        "distributed": {"accuracy": 0.9, "loss": 0.322},
        "train": {"train-loss": 0.2111},
        "dp-mode": "metric-dp",
        "dp-sigma": 0.0123456,
        "dp-num-reports": 4,
        "dp-num-clipped": 1,
        "dp-distance": 1.52,
        "dp-heuristic": "metric DP: no epsilon",
    }
    line = console.round_line(record, 8, 2.44)
    assert line.startswith("fedpriv: round 3/8")
    for part in ("server acc 0.9123 loss 0.3011", "clients acc 0.9 loss 0.322"):
        assert part in line
    assert "train loss 0.2111" in line and "2.4 s" in line
    assert "σ 0.0123, 1/4 clipped, d 1.52 (heuristic, no ε)" in line
    assert "\n" not in line and "\x1b" not in line


def test_round_line_of_global_dp_gives_epsilon_so_far_and_against_whom():
    record = {"round": 2, "server": {"accuracy": 0.5, "loss": 1.0}, "dp-mode": "global-dp"}
    record |= {"dp-sigma": 0.5, "dp-num-reports": 4, "dp-num-clipped": 0}
    record |= {"dp-epsilon": 3.14159, "dp-delta": 1e-5}
    line = console.round_line(record, 5, 1.0)
    assert "ε 3.14 so far (δ 1e-05) against clients and observers" in line


@pytest.mark.parametrize(
    "record,expected",
    [
        ({"dp-sgd-epsilon-max": 0.8123}, "ε 0.812 so far, worst client"),
        ({"ledger": {"max": 2.4, "median": 1.2}}, "leakage spent max 2.4, median 1.2"),
        ({"ledger": {"max": None}}, "no leakage bound"),
        ({"dp-mode": "global-dp", "dp-skipped": "client failures"}, "not released"),
        ({}, ""),
    ],
)
def test_privacy_figure_of_each_mode(record, expected):
    figure = console.privacy_figure(record)
    assert (expected in figure) if expected else figure == ""


def test_zonal_round_figure_names_the_level_epsilon_and_whom_it_protects_against():
    zonal = {
        "placement": "hdp",
        "epsilon": {
            "level": {"pld": 1.234, "rdp": 2.0},
            "epsilon-against": {"hdp": "the ServerApp and observers: the zone node adds it"},
        },
    }
    figure = console.privacy_figure({"zonal": zonal})
    assert figure == "ε 1.23 so far per noised level (hdp) against hdp: the ServerApp and observers"


def test_privacy_statement_says_heuristic_or_gives_epsilon_and_delta():
    metric = {
        "config": {"privacy": "metric-dp"},
        "privacy_figures": {"bound": "heuristic, no ε", "sigma_mean": 0.02, "distance_mean": 1.5},
    }
    assert console.privacy_statement(metric) == (
        "metric-dp: no formal guarantee (heuristic, no ε); σ mean 0.02, d mean 1.5"
    )
    global_dp = {
        "config": {"privacy": "global-dp"},
        "privacy_figures": {"epsilon": 2.5, "delta": 1e-5, "bound": "replace-one; fixed"},
    }
    text = console.privacy_statement(global_dp)
    assert text.startswith("global-dp: (ε = 2.5, δ = 1e-05)") and "against clients" in text
    assert "no formal guarantee" in console.privacy_statement({"config": {"privacy": "none"}})


def test_a_comparison_summary_lists_each_run():
    summary = {"config": {"privacy": "zonal"}, "final": {"hdp": 0.91234, "ldp": 0.8}, "runs": []}
    assert console.final_metrics(summary) == "hdp 0.9123, ldp 0.8"
    assert console.privacy_statement(summary).startswith("zonal: one figure per run")


def test_summary_lists_the_files_that_exist(tmp_path):
    for name in ("rounds.jsonl", "summary.json", "accuracy.png", "run.log"):
        (tmp_path / name).write_text("x")
    summary = {"config": {"privacy": "none"}, "final": {"accuracy": 0.97777, "loss": 0.1}}
    lines = console.summary_lines(summary, tmp_path, 12.34)
    assert lines[0] == "fedpriv: done in 12.3 s"
    assert "accuracy 0.9778" in lines[1] and "loss 0.1" in lines[1]
    assert lines[3].endswith("rounds.jsonl, summary.json, accuracy.png, run.log")
    assert all(line.startswith("fedpriv:") for line in lines)


@pytest.mark.parametrize("as_json", [False, True])
def test_the_last_line_stays_machine_readable(tmp_path, capsys, as_json):
    import argparse

    from fedpriv.scenarios.cli.launch import _finish

    final = {"accuracy": 0.9777777777777777, "f1_macro": 0.97}
    figures = {"mode": "metric-dp", "bound": "heuristic, no ε", "sigma_mean": 0.01}
    summary = {"config": {"privacy": "metric-dp"}, "final": final, "privacy_figures": figures}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    cfg = {"output-dir": str(tmp_path)}
    _finish(cfg, tmp_path / "summary.json", argparse.Namespace(json=as_json), 0.0)
    lines = capsys.readouterr().out.splitlines()
    if as_json:  # stdout is exactly one JSON object
        assert len(lines) == 1
        doc = json.loads(lines[0])
        assert doc["final"] == final and doc["privacy_figures"] == figures
        assert doc["output_dir"] == str(tmp_path)
    else:  # the summary, then the line scripts parse, as before
        assert lines[-1] == "fedpriv: final " + json.dumps(final, sort_keys=True)
        assert "fedpriv:   privacy  metric-dp: no formal guarantee" in "\n".join(lines)


# --- framework noise: the environment and the console filter -------------------------------


@pytest.mark.parametrize(
    "line,shown",
    [
        ("fedpriv: round 1/8 · server acc 0.9", True),
        ("fedpriv zonal: [1/4] hdp: running ...", True),
        ("\x1b[93mWARNING \x1b[0m:   aggregate_train: 3 replies but num_sampled_clients = 4", True),
        ("ERROR :   federation error: 4 SuperNodes", True),
        ("\x1b[92mINFO \x1b[0m:      aggregate_train: Received 1 results and 0 failures", False),
        ("\x1b[36m(ClientAppActor pid=9917)\x1b[0m \x1b[93mWARNING \x1b[0m:   Manually", False),
        ("WARNING: All log messages before absl::InitializeLog() is called are written", False),
        ("I0000 00:00:1732 port.cc:153] oneDNN custom operations are on.", False),
        (".../ray/_private/worker.py:2051: FutureWarning: Tip: In future versions of Ray", False),
        (".../keras/src/backend/tensorflow/core.py:172: DeprecationWarning: __array__", False),
    ],
)
def test_console_filter(line, shown):
    assert quiet.is_console_line(line) is shown


def test_simulation_env_is_quiet_by_default_and_loud_with_verbose():
    env = quiet.simulation_env({"PATH": "/bin"})
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "3" and env["RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"] == "0"
    assert quiet.simulation_env({"TF_CPP_MIN_LOG_LEVEL": "1"})["TF_CPP_MIN_LOG_LEVEL"] == "1"
    loud = quiet.simulation_env({"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/bin"}, loud=True)
    assert loud["TF_CPP_MIN_LOG_LEVEL"] == "0" and loud["FEDPRIV_LOG"] == "debug"
    assert "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO" not in loud
    assert quiet.verbose({"FEDPRIV_LOG": "DEBUG"}) and not quiet.verbose({})


# --- a DP wrapper with 4 replies says what happened, not "Received 1 results" ---------------


def _replies(models):
    from flwr.common import ArrayRecord, Message, MessageType, MetricRecord, RecordDict

    out = []
    for i, arrays in enumerate(models):
        content = RecordDict(
            {"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 10})}
        )
        sent = Message(content=content, dst_node_id=100 + i, message_type=MessageType.TRAIN)
        out.append(Message(content=content, reply_to=sent))
    return out


@pytest.mark.parametrize("wrapper_name", ["ServerSideFixedClippingDP", "MetricDP"])
def test_dp_wrapper_with_four_replies_never_logs_received_1_results(caplog, wrapper_name):
    from fedpriv.strategies import dp_wrappers
    from flwr.common import ArrayRecord
    from flwr.serverapp.strategy import FedAvg

    rng = np.random.default_rng(0)
    reference = [np.zeros((3, 2), np.float32), np.zeros(2, np.float32)]
    models = [[a + rng.normal(size=a.shape).astype(np.float32) for a in reference]]
    models += [[a + 0.01 for a in reference] for _ in range(3)]  # 1 far (clipped), 3 close
    with caplog.at_level(logging.INFO, logger="flwr"):  # Flower's own line, for contrast
        FedAvg().aggregate_train(1, _replies(models[:1]))
    assert any("Received 1 results" in r.getMessage() for r in caplog.records)
    caplog.clear()
    wrapper = getattr(dp_wrappers, wrapper_name)(
        FedAvg(), noise_multiplier=0.1, clipping_norm=0.5, num_sampled_clients=4, rng=rng
    )
    wrapper.note_global_arrays(ArrayRecord(reference))  # what configure_train remembers
    with caplog.at_level(logging.INFO, logger="flwr"):
        arrays, _ = wrapper.aggregate_train(1, _replies(models))
    messages = [r.getMessage() for r in caplog.records]
    assert arrays is not None
    assert not [m for m in messages if "Received 1 results" in m], messages
    sigma = wrapper.round_metrics()["dp-sigma"]
    said = [m for m in messages if "4 replies, 0 failures, 1 clipped" in m]
    assert len(said) == 1 and f"noise σ = {sigma:.6g}" in said[0], messages
    assert ("(d = " in said[0]) is (wrapper_name == "MetricDP")


# --- the CLI's help ------------------------------------------------------------------------


def _cli(*args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m fedpriv.scenarios.cli.main ARGS`` in its own session: on a timeout the whole
    group
    (the simulation and its Ray processes included) is killed, not only the CLI."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedpriv.scenarios.cli.main", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_top_help_lists_each_command_in_a_sentence_without_internal_words():
    from fedpriv.scenarios.config.features import CATALOG

    proc = _cli("--help")
    assert proc.returncode == 0, proc.stderr
    assert not RST_OR_INTERNAL.search(proc.stdout), proc.stdout
    flat = " ".join(proc.stdout.split())
    for name, command in CATALOG.commands.items():
        sentence = " ".join(command.help.split())
        assert sentence.endswith(".") and sentence.count(". ") == 0, sentence
        assert f"{name} {sentence}" in flat, (name, proc.stdout)
        assert command.example.startswith(f"fedpriv {name}"), name
    assert "examples:" in proc.stdout


@pytest.mark.parametrize("command", ["run", "keys", "scenarios", "show", "epsilon", "grid",
                                     "report", "attack", "audit", "compare"])  # fmt: skip
def test_each_command_help_has_an_example_and_no_internal_words(command):
    proc = _cli(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert not RST_OR_INTERNAL.search(proc.stdout), proc.stdout
    example = proc.stdout.split("example:", 1)
    assert len(example) == 2 and f"fedpriv {command}" in example[1], proc.stdout


SLOW_IMPORTS = {"flwr", "scipy", "dp_accounting", "tensorflow", "keras", "jax", "ray", "sklearn"}


@pytest.mark.parametrize(
    "args,rc",
    [(["--help"], 0), (["run", "--help"], 0), (["run", "-c", "scenario='nope'"], 2)],
    ids=["help", "run-help", "config-error"],
)
def test_help_and_a_config_error_import_nothing_heavy(args, rc, tmp_path):
    """What keeps them under a second (``make bench`` times them): no Flower, SciPy,
    dp-accounting, TensorFlow or Ray is imported (module list of a fresh interpreter)."""
    dump = tmp_path / "modules.json"
    code = (
        "import atexit, json, runpy, sys\n"
        f"atexit.register(lambda: open({str(dump)!r}, 'w').write("
        "json.dumps(sorted({m.split('.')[0] for m in sys.modules}))))\n"
        f"sys.argv = ['fedpriv', *{args!r}]\n"
        "runpy.run_module('fedpriv.scenarios.cli.main', run_name='__main__')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), check=False,
    )  # fmt: skip
    assert proc.returncode == rc, proc.stderr
    modules = set(json.loads(dump.read_text()))
    assert not SLOW_IMPORTS & modules, sorted(SLOW_IMPORTS & modules)


def test_run_config_parsing_equals_flowers():
    from fedpriv.scenarios.cli.launch import parse_overrides
    from flwr.common.config import parse_config_args

    items = ["a=1 b='x y' c=true", 'd.e=0.5 f="q"', "g=-3"]
    assert parse_overrides(items) == parse_config_args(items)


def test_attack_membership_prints_no_tensorflow_start_up_lines(tmp_path):
    """``fedpriv attack membership`` imports TensorFlow quietly (``quiet.configure_process``):
    its report, no absl banner or oneDNN notice (a finished digits-mlp run, random weights)."""
    from fedpriv.scenarios.config.registry import resolve_run_config

    run = tmp_path / "run"
    run.mkdir()
    cfg = resolve_run_config({"model": "digits-mlp", "privacy": "none", "num-clients": 2})
    (run / "summary.json").write_text(json.dumps({"config": cfg}))
    rng = np.random.default_rng(0)
    shapes = [(64, 64), (64,), (64, 10), (10,)]  # digits-mlp on 8x8 digits
    np.savez(run / "final_weights.npz", *[rng.normal(0, 0.1, s) for s in shapes])
    env = {k: v for k, v in os.environ.items() if k not in quiet.QUIET_ENV and k != quiet.LOG_ENV}
    env["CUDA_VISIBLE_DEVICES"] = ""
    proc = _cli("attack", "membership", "--run-dir", str(run), "--out", str(tmp_path / "m"),
                env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "| digits |" in proc.stdout
    assert not _noise(proc.stdout + proc.stderr).get("absl/oneDNN"), proc.stderr


# --- the default run, on the console, and with --verbose -----------------------------------

TINY = "num-server-rounds=2 local-epochs=1 reproducible-noise=true"


def _run(out: Path, *extra: str, rounds: str = TINY) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in quiet.QUIET_ENV and k != quiet.LOG_ENV}
    env["CUDA_VISIBLE_DEVICES"] = ""
    args = ("run", *extra, "--run-config", f"{rounds} output-dir='{out}'")
    return _cli(*args, env=env, timeout=900)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("console") / "default"
    return out, _run(out)


@pytest.mark.simulation
def test_default_run_console_has_round_lines_summary_and_no_noise(default_run):
    out, proc = default_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    console_text = proc.stdout + proc.stderr
    assert _noise(console_text) == {}, _noise(console_text)
    assert "Received 1 results" not in console_text
    lines = proc.stdout.splitlines()
    rounds = [x for x in lines if x.startswith("fedpriv: round ")]
    assert [x.split()[2] for x in rounds] == ["0/2", "1/2", "2/2"], lines
    # not a terminal: the start-up lines before round 0, plain lines, no progress bar
    head = lines[: lines.index(rounds[0])]
    for step in ("starting the simulation engine", "engine started", "workers ready",
                 "data loaded", "model built"):  # fmt: skip
        assert sum(f"fedpriv: start-up · {step}" in x for x in head) == 1, (step, head)
    engine = next(x for x in head if "starting the simulation engine" in x)
    ready = next(x for x in head if "workers ready" in x)
    started = re.search(r"Ray and (\d+) SuperNodes", engine).group(1)  # the workers, not clients
    assert re.search(rf"· workers ready: {started} SuperNodes answered", ready), (engine, ready)
    assert "━" not in console_text and "\x1b[" not in proc.stdout
    records = [json.loads(x) for x in (out / "rounds.jsonl").read_text().splitlines()]
    for line, record in zip(rounds, records):  # each line shows its round's record
        assert f"server acc {record['server']['accuracy']:.4g} " in line, line
        assert f"loss {record['server']['loss']:.4g}" in line, line
        if record.get("distributed", {}).get("accuracy") is not None:
            assert f"clients acc {record['distributed']['accuracy']:.4g}" in line, line
    for line in rounds[1:]:  # digits' default mode is metric DP
        assert re.search(r"σ [\d.e-]+, \d/4 clipped, d [\d.e-]+ \(heuristic, no ε\)", line), line
    text = "\n".join(lines)
    assert "privacy  metric-dp: no formal guarantee (heuristic, no ε)" in text
    assert f"files    {out}/ rounds.jsonl, summary.json" in text and "run.log" in text
    listed = next(x for x in lines if "files    " in x).split(f"{out}/ ", 1)[1].split(", ")
    assert sorted(listed) == sorted(p.name for p in out.iterdir())  # every file it wrote
    done = re.search(r"fedpriv: done in ([\d.]+) s", text)
    assert done
    # summary.json's wall time is the whole run, the one the console shows, start-up apart
    times = json.loads((out / "summary.json").read_text())
    assert times["wall_seconds"] == pytest.approx(float(done[1]), abs=0.1)
    assert 0 < times["startup_seconds"] < times["wall_seconds"]
    assert times["startup_seconds"] + times["training_seconds"] <= times["wall_seconds"]
    # the last line stays machine-readable: the final metrics of summary.json
    summary = json.loads((out / "summary.json").read_text())
    assert lines[-1] == "fedpriv: final " + json.dumps(summary["final"], sort_keys=True)


@pytest.mark.simulation
def test_default_run_log_keeps_the_full_log(default_run):
    out, proc = default_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = (out / "run.log").read_text()
    assert "[ROUND 2/2]" in log  # Flower's driver lines are in the log, not on the console
    assert "2 failures" not in log and "Received 1 results" not in log
    assert re.search(r"4 replies, 0 failures, \d clipped, noise σ = ", log)
    # so it is the operator's: its first line says so, only its owner reads it, and
    # summary.json's output-readers agree
    from fedpriv.reporting.runlog import RUN_LOG_NOTICE

    assert log.splitlines()[0] == f"# {RUN_LOG_NOTICE}"
    assert (out / "run.log").stat().st_mode & 0o077 == 0
    readers = json.loads((out / "summary.json").read_text())["output-readers"]
    assert readers["run.log"].startswith("operator only") and "sample sizes" in readers["run.log"]


@pytest.mark.slow
@pytest.mark.simulation
def test_verbose_brings_the_framework_lines_back(tmp_path):
    proc = _run(tmp_path / "loud", "--verbose", rounds="num-server-rounds=1 local-epochs=1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = _noise(proc.stdout + proc.stderr)
    for name in ("absl/oneDNN", "Ray tip", "DeprecationWarning", "Flower INFO"):
        assert name in found, (name, sorted(found))
    assert "fedpriv: final " in proc.stdout.splitlines()[-1]


def test_an_ifca_final_evaluation_declined_by_every_user_says_why():
    """Each node decides its own opt-in: when every user declines, the final line
    says so instead of printing the counts as metrics."""
    declined = {"config": {"privacy": "none"}, "final": {"clients": 0, "declined": 100}}
    line = console.final_metrics(declined)
    assert line.startswith("none: 100 users declined") and "unaccounted-metrics" in line
    answered = {"final": {"clients": 3, "declined": 1, "objective": 0.51234}}
    assert console.final_metrics(answered) == "clients 3, declined 1, objective 0.5123"
