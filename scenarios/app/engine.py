"""The one round loop of a training run, with its hooks.

:func:`train_run` is what the standard run, each zonal-comparison variant and each CIA phase
execute: build the strategy chain (stock strategy -> privacy wrapper -> update validation ->
round recorder), run the rounds with :func:`run_rounds`, write ``rounds.jsonl`` as each round
ends (typed: :class:`fedpriv.reporting.records.RoundRecord`), ``summary.json``, the final model
and plots at the end. What differs between those runs is a hook, not a copy of the loop:

- ``grid`` — the federation the strategy sees (a CIA target-absent run passes a grid that
  never offers the target);
- ``strategy_run`` — the run the strategy is built from (the target-absent run's m);
- ``extra_evaluation(round, weights, record) -> dict`` — merged into the round record (the
  CIA attacker's view);
- ``on_record(record)`` — every round record after it is written (the zonal comparison's
  combined log; a resumed run hands it the records of the rounds run before the kill first);
- ``after_round(state)`` — after aggregation, evaluation and the round record are written:
  the place for a checkpoint (``RoundState`` holds the round, the global arrays, the record
  and the strategy chain, whose recorder holds the sampling Generator); a resumable run also
  checkpoints each round right after ``aggregate_train`` charged it and before
  ``configure_evaluate`` sends the new model out (:mod:`fedpriv.scenarios.app.resume`), so a kill
  in between resumes with that round charged once and its model released once;
- ``summary_extra(rounds) -> dict`` — merged into summary.json;
- ``after_run(RunEnd) -> dict`` — after the last round, with the final weights and the
  strategy chain (the audit of a canary run), merged into summary.json;
- ``on_finish(summary, output_dir)`` — after summary.json and the plots (the tracker's
  end; ``tracking``, :mod:`fedpriv.scenarios.app.tracking`, also adds an ``on_record``);
- ``first_round`` / ``initial`` / ``previous_rounds`` — start at round r from given global
  weights (resume) with the records of the rounds already run (for summary.json); the
  round-0 evaluation is only made when ``first_round == 1`` and rounds.jsonl is appended to.

:func:`run_rounds` is Flower's ``Strategy.start`` loop (flwr 1.23) without its logging, with
the hook point and the start round: per round ``configure_train`` -> ``send_and_receive`` ->
``aggregate_train`` -> ``configure_evaluate`` -> ``send_and_receive`` ->
``aggregate_evaluate`` -> server-side evaluation (which writes the record) -> hooks. With
``evaluate-in-train`` (:mod:`fedpriv.scenarios.app.fused`) round t's train replies also carry the
clients' evaluation of model t-1: round t-1 is recorded from them, and only the last round
has an evaluate message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

import numpy as np
from fedpriv.clients.keras_client import (
    TrainSettings,
    initial_weights,
    model_for,
    predict_proba,
    save_final_model,
    train_local,
    trainer_for,
)
from fedpriv.clients.records import arrays_of
from fedpriv.scenarios.app import startup
from fedpriv.scenarios.app.eval_ahead import EvaluationAhead
from fedpriv.scenarios.app.fused import evaluate_in_train
from fedpriv.scenarios.app.recorder import RoundRecorder
from fedpriv.scenarios.app.round_loop import (  # noqa: F401  (RoundState, run_rounds: re-exported)
    RoundState,
    budget_stop,
    budget_stopped,
    run_rounds,
    server_ledger_figures,
)
from fedpriv.scenarios.app.tracking import with_tracker
from fedpriv.scenarios.app.wire_config import wire_config
from fedpriv.scenarios.config.feature import Catalog
from fedpriv.scenarios.config.specs import ServerRun
from fedpriv.scenarios.nodes.federation import PartitionGrid, supernodes
from fedpriv.strategies.factory import build_stock_strategy, needs_initial_pretraining
from fedpriv.strategies.validating import ValidUpdatesOnly
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp.strategy.strategy import Strategy

from fedpriv import seeds
from fedpriv.checkpoint import CHECKPOINT, FINAL_WEIGHTS, CheckpointWriter, share_final_weights
from fedpriv.data import FederatedData
from fedpriv.metrics import classification_report, last_k_stats, micro_roc_curve
from fedpriv.privacy.modes.registry import selected
from fedpriv.reporting.console import round_line
from fedpriv.reporting.plots import plot_roc, plot_run_accuracy
from fedpriv.reporting.records import RoundRecord
from fedpriv.reporting.runlog import RunLog, read_rounds
from fedpriv.spec import RunSpec, TrainSpec

# --- building blocks of a run -------------------------------------------------------------------


def run_config_as_record(record: Mapping[str, Any]) -> ConfigRecord:
    """What clients receive of the resolved config (the run's record): the keys that differ
    from the run's ``run_config``, plus the config's digest
    (:mod:`fedpriv.scenarios.app.wire_config`)."""
    return ConfigRecord(wire_config(record))


def pretrain(spec: RunSpec, data: FederatedData, weights: list) -> list:
    """Server-side pretraining of initial parameters on the validation split (MP)."""
    model = model_for(spec.train, data)
    settings = replace(TrainSettings.from_spec(spec.train, seed=spec.train.seed), proximal_mu=0.0)
    settings = replace(settings, epochs=int(spec.pretrain_epochs))
    new_weights, _ = train_local(model, weights, data.x_val, data.y_val, settings)
    return [w.copy() for w in new_weights]


def start_weights(spec: RunSpec, data: FederatedData) -> list:
    """The seeded initial model, pretrained on the server for FedAvgM/FedOpt/FedYogi."""
    weights = initial_weights(spec.train, data)
    if needs_initial_pretraining(spec.train.strategy) and spec.pretrain_epochs > 0:
        weights = pretrain(spec, data, weights)
    return weights


def prepare_server(spec: RunSpec, data: FederatedData) -> Callable[[], Optional[list]]:
    """Start, in a thread, what the server needs before round 0 and no client takes part in:
    the initial model (:func:`start_weights`; not when ``output-dir`` holds a checkpoint, whose
    arrays a resume starts from) and its compiled evaluation (the server's forward pass over
    its test set, compiled once per process). Started while the federation is discovered (the
    workers start: seconds); the returned function waits for it and gives the initial weights,
    None for a checkpoint's run (or raises what the thread raised).

    Measured before, on an H200 (MP CNN, JAX, nothing compiled yet): the model was built 1.5 s
    after the workers answered and round 0 (the evaluation's compilation) took 1.9 s, after
    the server had waited 2.4 s for the workers; here both run in that wait (measured on the
    CPU machine, not yet on the GPU)."""
    done: dict[str, Any] = {"weights": None}
    resuming = (Path(spec.output_dir) / CHECKPOINT).exists()

    def work() -> None:
        try:
            if not resuming:
                done["weights"] = start_weights(spec, data)
            trainer_for(model_for(spec.train, data)).predict(None, data.x_test)
        except BaseException as err:  # noqa: BLE001 -- re-raised by the caller's wait
            done["error"] = err

    thread = threading.Thread(target=work, name="fedpriv-server-prepare", daemon=True)
    thread.start()

    def initial() -> Optional[list]:
        thread.join()
        if "error" in done:
            raise done["error"]
        return done["weights"]

    return initial


def server_evaluator(train: TrainSpec, data: FederatedData):
    """Server test-set metrics of a weight list (classification report + loss)."""
    model = model_for(train, data)

    def evaluate(weights: list) -> dict[str, float]:
        proba = predict_proba(model, weights, data.x_test)
        report = classification_report(data.y_test, proba)
        eps = 1e-7
        report["loss"] = float(
            -np.mean(np.log(np.clip(proba[np.arange(len(proba)), data.y_test], eps, 1)))
        )
        return report

    return evaluate


def build_strategy(
    run: ServerRun,
    grid: PartitionGrid,
    rng: np.random.Generator,
    catalog: Catalog,
    weights: list | None = None,
) -> RoundRecorder:
    """Stock strategy -> privacy wrapper -> (audit canaries) -> update validation -> recorder.

    With ``audit-canaries`` > 0, ``weights`` (the initial model) gives the canaries' shapes.
    """
    from fedpriv.scenarios.audit.feature import with_canaries

    spec = run.spec
    strategy = build_stock_strategy(spec.strategy)
    strategy = catalog.wrapper(spec.mode_name)(strategy, run, rng)
    strategy = with_canaries(strategy, run, weights)
    strategy = ValidUpdatesOnly(
        strategy, on_invalid=spec.invalid_update, accept_failures=spec.strategy.accept_failures
    )
    return RoundRecorder(
        strategy,
        grid=grid,
        num_clients=spec.participation.population,
        clients_per_round=spec.participation.sampler_per_round,
        rng=rng,
        sampling=spec.participation.sampling,
        evaluate_sampled_only=bool(spec.evaluate_sampled_only),
    )


def sampling_rng(spec: RunSpec) -> np.random.Generator:
    """The client-sampling Generator: OS entropy, or ``default_rng(seed)`` with reproducible-noise
    (secret by default: knowing the schedule voids amplification; :func:`seeds.privacy_rng`)."""
    return seeds.privacy_rng(int(spec.seed), reproducible=spec.reproducible_noise)


def summarise(run: ServerRun, rounds: list[dict], final: dict, extra: dict) -> dict:
    """summary.json content: final server metrics, last-5 stats, config, seed."""
    accs = [
        r["distributed"].get("accuracy", np.nan)
        for r in rounds
        if r.get("round", 0) > 0 and "distributed" in r
    ]
    server_accs = [r["server"]["accuracy"] for r in rounds if r.get("round", 0) > 0]
    mean, std = last_k_stats(server_accs, 5)
    dmean, dstd = last_k_stats(accs, 5)
    return {
        "scenario": run.spec.scenario,
        "seed": run.spec.seed,
        "config": dict(run.record),
        "final": final,
        "last5": {
            "accuracy_mean": mean,
            "accuracy_std": std,
            "distributed_accuracy_mean": dmean,
            "distributed_accuracy_std": dstd,
        },
        **extra,
    }


def environment() -> dict[str, str]:
    """The stack the run trained on: Keras backend and the versions that move numbers."""
    import platform
    from importlib.metadata import version

    import keras

    return {
        "keras-backend": keras.config.backend(),
        "keras": keras.__version__,
        "flwr": version("flwr"),
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def write_final_outputs(
    run: ServerRun, data, weights, rounds, runlog: RunLog, extra: dict, catalog: Catalog
) -> dict:
    """summary.json (with every feature's summary block), final model, accuracy/ROC plots."""
    spec = run.spec
    model = model_for(spec.train, data)
    proba = predict_proba(model, weights, data.x_test)
    final = classification_report(data.y_test, proba)
    summary = summarise(run, rounds, final, extra)
    summary["environment"] = environment()
    summary.update(catalog.summary_blocks(run, rounds))
    runlog.write_summary(summary)
    save_final_model(model, weights, runlog.dir / "final_model.keras")
    np.savez(runlog.dir / FINAL_WEIGHTS, *weights)
    share_final_weights(runlog.dir, weights)  # the checkpoint names it: one model copy less
    title = f"{spec.scenario} {spec.strategy.strategy} {selected(run.record)} seed {spec.seed}"
    plot_run_accuracy(rounds, runlog.dir / "accuracy.png", title=title)
    plot_roc({"micro": micro_roc_curve(data.y_test, proba)}, runlog.dir / "roc.png", title=title)
    np.savez(runlog.dir / "test_predictions.npz", y_true=data.y_test, proba=proba)
    return summary


# --- a run's types (its round loop: fedpriv.scenarios.app.round_loop)
# ------------------------------


def checkpoint_arrays(checkpoint: Mapping[str, Any]) -> list[np.ndarray]:
    """The global arrays a checkpoint holds."""
    return [np.asarray(a) for a in checkpoint["arrays"]]


@dataclass
class RunEnd:
    """What the ``after_run`` hook sees: the finished run, before summary.json is written."""

    run: ServerRun
    data: FederatedData
    strategy: Strategy
    weights: list[np.ndarray]
    rounds: list[dict]


@dataclass
class RunHooks:
    """The hooks of one training run (see the module docstring)."""

    extra_evaluation: Optional[Callable[[int, list[np.ndarray], dict], dict]] = None
    on_record: Sequence[Callable[[dict], None]] = ()
    after_round: Sequence[Callable[[RoundState], None]] = ()
    summary_extra: Optional[Callable[[list[dict]], dict]] = None
    after_run: Optional[Callable[[RunEnd], dict]] = None
    on_finish: Sequence[Callable[[dict, Any], None]] = ()


@dataclass
class RunOutcome:
    """A finished run: its summary, its round records and the final global weights."""

    summary: dict[str, Any]
    rounds: list[dict] = field(default_factory=list)
    weights: list[np.ndarray] = field(default_factory=list)


def train_run(
    grid: PartitionGrid,
    run: ServerRun,
    data: FederatedData,
    catalog: Catalog,
    *,
    strategy_run: Optional[ServerRun] = None,
    hooks: Optional[RunHooks] = None,
    first_round: int = 1,
    initial: Optional[list[np.ndarray]] = None,
    previous_rounds: Sequence[dict] = (),
    resumable: bool = False,
) -> RunOutcome:
    """One training run of ``run`` on an already discovered federation (module docstring).

    ``resumable``: checkpoint after every round and, when ``output-dir`` holds a checkpoint
    of this config, continue from it (:mod:`fedpriv.scenarios.app.resume`).
    """
    spec = run.spec  # the spec built once, at the server's boundary
    hooks = with_tracker(hooks or RunHooks(), run)  # tracking = mlflow | tensorboard
    t0 = time.time()
    rng = sampling_rng(spec)
    checkpoint, charged, before_release = None, None, ()
    if resumable:
        from fedpriv.scenarios.app.resume import CHARGED, checkpoint_hook, load_resumable, restore

        checkpoint = load_resumable(run)
        if checkpoint is not None:
            first_round, initial = int(checkpoint["round"]) + 1, checkpoint_arrays(checkpoint)
            charged = int(checkpoint["round"]) if checkpoint.get("stage") == CHARGED else None
        writer = CheckpointWriter(spec.output_dir)  # one per run: a model written once
        recorded = checkpoint_hook(run, writer=writer)
        hooks = replace(hooks, after_round=(*hooks.after_round, recorded))
        before_release = (checkpoint_hook(run, stage=CHARGED, writer=writer),)
    weights = initial if initial is not None else start_weights(spec, data)
    startup.model_built(spec, weights)
    recorder = build_strategy(strategy_run or run, grid, rng, catalog, weights)
    if checkpoint is not None:
        restore(recorder, checkpoint)
    runlog = RunLog(
        spec.output_dir,
        keep_rounds=first_round - 1 - (charged is not None) if first_round > 1 else None,
        labels=seeds.noise_labels(spec.reproducible_noise),
    )
    if first_round > 1 and not previous_rounds:
        previous_rounds = read_rounds(spec.output_dir)
    for record in previous_rounds if checkpoint is not None else ():
        for sink in hooks.on_record:  # a resumed run: the sinks see the earlier rounds too
            sink(record)
    ahead = EvaluationAhead(server_evaluator(spec.train, data))
    rounds: list[dict] = list(previous_rounds)
    clock = [time.time()]  # start of the round in flight (for its console line)

    def evaluate(server_round: int, arrays: ArrayRecord) -> dict:
        global_weights = arrays_of(arrays)  # read-only: evaluation reads the model
        metrics = ahead.metrics(arrays)  # started after the aggregation (fused rounds)
        current = recorder.current if server_round else {}
        typed = RoundRecord.from_json({**current, "round": server_round, "server": metrics})
        if hooks.extra_evaluation is not None:
            typed.reports.update(
                hooks.extra_evaluation(server_round, global_weights, typed.to_json())
            )
        record = typed.to_json()
        rounds.append(record)
        runlog.append_round(record)
        now = time.time()
        print(round_line(record, int(spec.rounds), now - clock[0]), flush=True)
        clock[0] = now
        for sink in hooks.on_record:
            sink(record)
        recorder.current = {}
        return record

    last = run_rounds(
        recorder,
        grid,
        ArrayRecord(weights),
        num_rounds=int(spec.rounds),
        config=run_config_as_record(run.record),
        evaluate=evaluate,
        first_round=first_round,
        after_round=hooks.after_round,
        before_release=before_release,
        charged_round=charged,
        stop_before=lambda r: budget_stop(recorder, r),
        fused=evaluate_in_train(spec),
        evaluate_ahead=ahead.start,
    )
    final = last.to_numpy_ndarrays() if last is not None else weights
    extra: dict[str, Any] = startup.run_times(t0)  # the whole run's and its start-up's
    extra["supernodes"] = supernodes(grid)
    extra.update(budget_stopped(recorder))
    extra.update(server_ledger_figures(recorder))
    if hooks.summary_extra is not None:
        extra.update(hooks.summary_extra(rounds))
    if hooks.after_run is not None:
        extra.update(hooks.after_run(RunEnd(run, data, recorder, final, rounds)))
    summary = write_final_outputs(run, data, final, rounds, runlog, extra, catalog)
    for hook in hooks.on_finish:
        hook(summary, runlog.dir)
    return RunOutcome(summary, rounds, final)
