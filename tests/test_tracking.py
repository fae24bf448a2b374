"""Experiment tracking: what a tracker logs, read back with MLflow's and TensorBoard's own
readers (``MlflowClient``, ``EventAccumulator``).

The unit tests write a run directory with the run's own writer (:class:`RunLog`, the
accuracy plot) and drive the trackers as the engine does (one typed record per round, then
``finish``); one simulation runs a tiny global-DP run with each tracker through ``fedpriv
run``'s engine (two cells of one simulation).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fedpriv.reporting.plots import plot_run_accuracy
from fedpriv.reporting.records import RoundRecord
from fedpriv.reporting.runlog import RunLog
from fedpriv.reporting.tracking import (
    EXPERIMENT_KIND_TAG,
    ML_EXPERIMENT_KIND,
    MlflowTracker,
    TrackingSpec,
    final_metrics,
    mlflow_uri,
    round_metrics,
    run_constants,
    run_params,
)

ROUNDS = 3
PARAMS = {"scenario": "digits", "seed": 3, "privacy": "global-dp", "noise-multiplier": 1.1}


def _record(r: int) -> dict:
    """A global-DP round line as the engine writes it (operator keys included)."""
    if r == 0:
        return {"round": 0, "server": {"accuracy": 0.1, "loss": 2.3}}
    return {
        "round": r,
        "server": {"accuracy": 0.5 + 0.1 * r, "loss": 1.0 / r},
        "distributed": {"accuracy": 0.45 + 0.1 * r},
        "sampled": [0, 1, 2],
        "dp-sigma": 0.25,
        "dp-epsilon": 0.7 * r,
        "dp-delta": 1e-5,
        "dp-num-clipped": 2,
        "dp-mode": "global-dp",
    }


def _run_dir(tmp_path: Path) -> tuple[Path, list[dict], dict]:
    """A finished run's directory: rounds.jsonl / operator.jsonl, summary.json, a plot."""
    out = tmp_path / "run"
    log = RunLog(out)
    rounds = [_record(r) for r in range(ROUNDS + 1)]
    for line in rounds:
        log.append_round(line)
    summary = {
        "config": PARAMS,
        "final": {"accuracy": 0.8, "f1_macro": 0.79},
        "last5": {"accuracy_mean": 0.7, "accuracy_std": 0.08},
        "privacy_figures": {"mode": "global-dp", "epsilon": 2.1, "sigma_mean": 0.25},
        "wall_seconds": 12.5,
    }
    log.write_summary(summary)
    plot_run_accuracy(rounds, out / "accuracy.png", title="test")
    return out, rounds, json.loads((out / "summary.json").read_text())


def test_round_metrics_are_what_a_reader_of_rounds_jsonl_sees():
    metrics = round_metrics(RoundRecord.from_json(_record(2)))
    assert metrics["server/accuracy"] == pytest.approx(0.7)
    assert metrics["distributed/accuracy"] == pytest.approx(0.65)
    assert metrics["dp-sigma"] == metrics["privacy/sigma"] == 0.25
    assert metrics["dp-epsilon"] == metrics["privacy/epsilon"] == pytest.approx(1.4)
    # the operator's keys (sample lists, clip counts) never reach a tracker, and a run constant
    # (the config's dp-delta) is no time series
    assert not {"sampled", "dp-num-clipped", "dp-delta"} & set(metrics)
    assert run_constants(RoundRecord.from_json(_record(2))) == {"dp-delta": "1e-05"}
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())


def test_epsilon_of_each_mode_and_none_for_metric_dp():
    assert RoundRecord.from_json({"round": 1, "dp-epsilon": 1.5}).epsilon() == 1.5
    assert RoundRecord.from_json({"round": 1, "dp-sgd-epsilon-max": 2.5}).epsilon() == 2.5
    zonal = {"round": 1, "zonal": {"epsilon": {"level": {"pld": 0.9, "rdp": 1.2}}}}
    assert RoundRecord.from_json(zonal).epsilon() == 0.9
    metric = {"round": 1, "dp-sigma": 0.02, "dp-heuristic": "metric DP: no epsilon"}
    assert RoundRecord.from_json(metric).epsilon() is None
    assert RoundRecord.from_json(metric).sigma() == 0.02


def test_mlflow_store_holds_params_round_metrics_and_artifacts(tmp_path):
    from mlflow.tracking import MlflowClient

    out, rounds, summary = _run_dir(tmp_path)
    spec = TrackingSpec("mlflow", str(out), experiment="digits", run_name="fedavg global-dp 3")
    tracker = MlflowTracker(spec, PARAMS)
    for line in rounds:
        tracker.log_round(RoundRecord.from_json(line))
    tracker.finish(summary, out)
    assert tracker.where() == (
        f"MLflow {mlflow_uri(spec)}, experiment 'digits', run 'fedavg global-dp 3'"
    )

    client = MlflowClient(tracking_uri=mlflow_uri(spec))
    assert mlflow_uri(spec) == f"sqlite:///{(out / 'mlflow.db').resolve()}"
    experiment = client.get_experiment_by_name("digits")
    # a classic ML experiment in MLflow 3's UI (runs table, metric charts), not a GenAI one
    assert experiment.tags[EXPERIMENT_KIND_TAG] == ML_EXPERIMENT_KIND == "custom_model_development"
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "fedavg global-dp 3" and run.info.status == "FINISHED"
    assert run_params(PARAMS) == {
        "noise-multiplier": "1.1", "privacy": "global-dp", "scenario": "digits", "seed": "3",
    }  # fmt: skip
    # dp-delta, a run constant the config here lacks: one param, no metric history
    assert run.data.params == {**run_params(PARAMS), "dp-delta": "1e-05"}
    assert "dp-delta" not in run.data.metrics
    eps = client.get_metric_history(run.info.run_id, "dp-epsilon")
    assert [(m.step, m.value) for m in sorted(eps, key=lambda m: m.step)] == [
        (r, pytest.approx(0.7 * r)) for r in range(1, ROUNDS + 1)
    ]
    acc = client.get_metric_history(run.info.run_id, "server/accuracy")
    assert sorted(m.step for m in acc) == list(range(ROUNDS + 1))
    assert "dp-num-clipped" not in run.data.metrics
    for name, value in final_metrics(summary).items():
        assert run.data.metrics[name] == pytest.approx(value)
    assert run.data.metrics["final/privacy/epsilon"] == pytest.approx(2.1)
    assert run.data.metrics["privacy/epsilon"] == pytest.approx(0.7 * ROUNDS)  # the last round
    files = {a.path for a in client.list_artifacts(run.info.run_id, "outputs")}
    assert files == {"outputs/accuracy.png", "outputs/rounds.jsonl", "outputs/summary.json"}
    local = Path(client.download_artifacts(run.info.run_id, "outputs/rounds.jsonl", str(tmp_path)))
    assert local.read_text() == (out / "rounds.jsonl").read_text()  # public lines only
    assert "sampled" not in local.read_text()


def test_tensorboard_event_file_read_back_by_its_own_reader(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from fedpriv.reporting.tb_events import TensorBoardTracker, log_dir, png_size

    out, rounds, summary = _run_dir(tmp_path)
    spec = TrackingSpec("tensorboard", str(out), run_name="fedavg global-dp 3")
    tracker = TensorBoardTracker(spec, PARAMS)
    for line in rounds:
        tracker.log_round(RoundRecord.from_json(line))
    tracker.finish(summary, out)

    assert log_dir(spec) == out / "tensorboard" / "fedavg_global-dp_3"
    acc = EventAccumulator(str(log_dir(spec)), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    eps = acc.Scalars("dp-epsilon")
    assert [e.step for e in eps] == [1, 2, 3]
    assert [e.value for e in eps] == pytest.approx([0.7, 1.4, 2.1], rel=1e-6)  # float32
    assert [e.step for e in acc.Scalars("server/accuracy")] == [0, 1, 2, 3]
    assert not {"dp-num-clipped", "dp-delta"} & set(acc.Tags()["scalars"])
    (constants,) = acc.Tensors("constants")  # once, as text
    assert "| dp-delta | 1e-05 |" in constants.tensor_proto.string_val[0].decode()
    (final,) = acc.Scalars("final/accuracy")
    assert final.step == ROUNDS and final.value == pytest.approx(0.8, rel=1e-6)
    (image,) = acc.Images("plots/accuracy")
    png = (out / "accuracy.png").read_bytes()
    assert image.encoded_image_string == png and (image.width, image.height) == png_size(png)
    config = acc.Tensors("config")[0].tensor_proto.string_val[0].decode()
    assert "| seed | 3 |" in config and "| privacy | global-dp |" in config
    assert "_hparams_/session_start_info" in acc.Tags()["tensors"]


def test_tensorboard_names_the_run_by_the_run_not_dot(tmp_path):
    """``tensorboard --logdir <output-dir>/tensorboard`` lists one run, named for the run (an
    event file directly in the log directory is the run ".")."""
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

    from fedpriv.reporting.tb_events import TensorBoardTracker, log_root

    out, rounds, summary = _run_dir(tmp_path)
    spec = TrackingSpec("tensorboard", str(out), run_name="fedavg global-dp seed 0")
    tracker = TensorBoardTracker(spec, PARAMS)
    for line in rounds:
        tracker.log_round(RoundRecord.from_json(line))
    tracker.finish(summary, out)
    board = EventMultiplexer().AddRunsFromDirectory(str(log_root(spec)))
    board.Reload()
    assert list(board.Runs()) == ["fedavg_global-dp_seed_0"]
    assert tracker.where() == f"TensorBoard {out / 'tensorboard'}, run 'fedavg_global-dp_seed_0'"


def test_an_mlflow_experiment_made_before_gets_the_ml_kind_and_a_set_kind_is_kept(tmp_path):
    from mlflow.tracking import MlflowClient

    out, _, _ = _run_dir(tmp_path)
    spec = TrackingSpec("mlflow", str(out), experiment="old")
    client = MlflowClient(tracking_uri=mlflow_uri(spec))
    old = client.create_experiment("old")  # no kind: MLflow 3's UI would open it as GenAI
    MlflowTracker(spec, PARAMS)
    assert client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == ML_EXPERIMENT_KIND
    mine = client.create_experiment("mine", tags={EXPERIMENT_KIND_TAG: "finetuning"})
    MlflowTracker(TrackingSpec("mlflow", str(out), experiment="mine"), PARAMS)
    assert client.get_experiment(mine).tags[EXPERIMENT_KIND_TAG] == "finetuning"


def test_a_shared_tensorboard_dir_gets_one_subdirectory_per_run(tmp_path):
    from fedpriv.reporting.tb_events import log_dir

    a = TrackingSpec("tensorboard", "runs/grid/fedavg/none/seed0", uri=str(tmp_path))
    b = TrackingSpec("tensorboard", "runs/grid/fedavg/none/seed1", uri=str(tmp_path))
    assert log_dir(a).parent == log_dir(b).parent == tmp_path
    assert log_dir(a) != log_dir(b)


def test_tracking_key_is_checked_before_anything_runs():
    from fedpriv.scenarios.config.features import CATALOG
    from fedpriv.scenarios.config.schema import ConfigError

    with pytest.raises(ConfigError, match=r"tracking.*none \| mlflow \| tensorboard"):
        CATALOG.resolve_run_config({"tracking": "wandb"})
    with pytest.raises(ConfigError, match="IFCA runs its own loop"):
        CATALOG.resolve_run_config({"scenario": "gp-synthetic", "tracking": "mlflow"})
    assert CATALOG.resolve_run_config({"tracking": "mlflow"})["tracking"] == "mlflow"


# --- a real run of each tracker (two cells of one simulation, as `fedpriv grid` runs them) ---

TINY = {
    "scenario": "digits", "privacy": "global-dp", "num-server-rounds": 2, "local-epochs": 1,
}  # fmt: skip


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    from tests.simulate import run_fedpriv_cells

    base = tmp_path_factory.mktemp("tracked")
    runs = {kind: ({**TINY, "tracking": kind}, base / kind) for kind in ("mlflow", "tensorboard")}
    return run_fedpriv_cells(runs, base / "plan", "local-in-process")  # not about the engine


@pytest.mark.simulation
def test_a_real_run_logs_to_mlflow(tracked):
    from mlflow.tracking import MlflowClient

    rc, summary, rounds, log = tracked["mlflow"]
    assert rc == 0, log[-3000:]
    out = Path(summary["config"]["output-dir"])
    client = MlflowClient(tracking_uri=f"sqlite:///{(out / 'mlflow.db').resolve()}")
    experiment = client.get_experiment_by_name("digits")
    assert experiment.tags[EXPERIMENT_KIND_TAG] == ML_EXPERIMENT_KIND
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.params["privacy"] == "global-dp" and run.data.params["num-server-rounds"] == "2"
    assert run.data.params == run_params(summary["config"])  # dp-delta among them, once
    assert "dp-delta" in rounds[1] and "dp-delta" not in run.data.metrics
    eps = sorted(client.get_metric_history(run.info.run_id, "dp-epsilon"), key=lambda m: m.step)
    assert [m.step for m in eps] == [1, 2]
    assert [m.value for m in eps] == pytest.approx([r["dp-epsilon"] for r in rounds[1:]])
    assert eps[1].value > eps[0].value > 0  # ε so far grows with the rounds
    sigma = client.get_metric_history(run.info.run_id, "privacy/sigma")
    assert [m.value for m in sigma] == pytest.approx([r["dp-sigma"] for r in rounds[1:]])
    assert run.data.metrics["final/accuracy"] == pytest.approx(summary["final"]["accuracy"])
    files = {a.path for a in client.list_artifacts(run.info.run_id, "outputs")}
    assert {"outputs/accuracy.png", "outputs/roc.png", "outputs/summary.json"} <= files
    assert run.info.status == "FINISHED"


@pytest.mark.simulation
def test_a_real_run_writes_tensorboard_events(tracked):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rc, summary, rounds, log = tracked["tensorboard"]
    assert rc == 0, log[-3000:]
    (run_dir,) = (Path(summary["config"]["output-dir"]) / "tensorboard").iterdir()
    assert run_dir.name == "fedavg_global-dp_seed_0"  # TensorBoard's run name, not "."
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    eps = acc.Scalars("privacy/epsilon")
    assert [e.step for e in eps] == [1, 2]
    assert [e.value for e in eps] == pytest.approx([r["dp-epsilon"] for r in rounds[1:]], 1e-6)
    server = acc.Scalars("server/accuracy")
    assert [e.value for e in server] == pytest.approx(
        [r["server"]["accuracy"] for r in rounds], rel=1e-6
    )
    assert {"plots/accuracy", "plots/roc"} <= set(acc.Tags()["images"])
    assert "dp-delta" in rounds[1] and "dp-delta" not in acc.Tags()["scalars"]


def _cfg(tmp_path: Path, **over):
    """The server's run (spec built once) of digits with ``over``."""
    from fedpriv.scenarios.config.registry import resolve_run_config
    from fedpriv.scenarios.config.specs import server_run

    cfg = {"scenario": "digits", "strategy": "fedavg", "privacy": "none", "seed": 0,
           "output-dir": str(tmp_path / "run"), "tracking-uri": "", **over}  # fmt: skip
    return server_run(resolve_run_config(cfg))


def test_a_tracker_that_fails_never_stops_the_run(tmp_path, capsys):
    from fedpriv.scenarios.app.tracking import tracker_hooks

    (tmp_path / "a-file").write_text("")  # a store below a file cannot be created
    uri = f"sqlite:///{tmp_path / 'a-file' / 'm.db'}"
    bad = _cfg(tmp_path, tracking="mlflow", **{"tracking-uri": uri})
    assert tracker_hooks(bad) == ((), ())
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedpriv: tracking (mlflow) failed")
    (on_record,), (on_finish,) = tracker_hooks(_cfg(tmp_path, tracking="tensorboard"))
    out, _, summary = _run_dir(tmp_path)
    on_record(_record(1))
    on_finish(summary, out)
    assert (
        capsys.readouterr().out.strip()
        == f"fedpriv:   tracked  TensorBoard {out / 'tensorboard'}, run 'fedavg_none_seed_0'"
    )
    on_finish(summary, out)  # its event file is closed now: one line, no exception
    on_record(_record(2))  # and nothing more is tried
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tracking (tensorboard) failed" in err[0]
    assert tracker_hooks(_cfg(tmp_path, tracking="none")) == ((), ())
