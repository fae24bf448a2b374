"""The one round loop of a training run, with its hooks.

:func:`train_run` is what the standard run, each zonal-comparison variant and each CIA phase
execute: build the strategy chain (stock strategy -> privacy wrapper -> update validation ->
round recorder), run the rounds with :func:`run_rounds`, write ``rounds.jsonl`` as each round
ends (through the typed :class:`fedpriv.reporting.records.RoundRecord`) and ``summary.json`` / the
final
model / plots at the end. What differs between those runs is a hook, not a copy of the loop:

- ``grid`` — the federation the strategy sees (a CIA target-absent run passes a grid that
  never offers the target);
- ``strategy_cfg`` — the config the strategy is built from (the target-absent run's m);
- ``extra_evaluation(round, weights, record) -> dict`` — merged into the round record (the
  CIA attacker's view);
- ``on_record(record)`` — every round record after it is written (the zonal comparison's
  combined log; a resumed run hands it the records of the rounds run before the kill first);
- ``after_round(state)`` — after aggregation, evaluation and the round record are written:
  the place for a checkpoint (``RoundState`` holds the round, the global arrays, the record
  and the strategy chain, whose recorder holds the sampling Generator); a resumable run also
  checkpoints each round right after ``aggregate_train`` charged it and before
  ``configure_evaluate`` sends the new model out (:mod:`scenarios.app.resume`), so a kill
  in between resumes with that round charged once and its model released once;
- ``summary_extra(rounds) -> dict`` — merged into summary.json;
- ``after_run(RunEnd) -> dict`` — after the last round, with the final weights and the
  strategy chain (the audit of a canary run), merged into summary.json;
- ``first_round`` / ``initial`` / ``previous_rounds`` — start at round r from given global
  weights (resume) with the records of the rounds already run (for summary.json); the
  round-0 evaluation is only made when ``first_round == 1`` and rounds.jsonl is appended to.

:func:`run_rounds` is Flower's ``Strategy.start`` loop (flwr 1.23) without its logging, with
the hook point and the start round: per round ``configure_train`` -> ``send_and_receive`` ->
``aggregate_train`` -> ``configure_evaluate`` -> ``send_and_receive`` ->
``aggregate_evaluate`` -> server-side evaluation (which writes the record) -> hooks. With
``evaluate-in-train`` (:mod:`scenarios.app.fused`) round t's train replies also carry the
clients' evaluation of model t-1: round t-1 is recorded from them, and only the last round
has an evaluate message.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from logging import INFO, WARNING
from typing import Any, Optional

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord
from flwr.common import log
from flwr.serverapp.strategy.strategy import Strategy

from clients.keras_client import (
    TrainSettings,
    initial_weights,
    model_for,
    predict_proba,
    train_local,
)
from fedpriv import seeds
from fedpriv.checkpoint import capture_state
from fedpriv.data import FederatedData
from fedpriv.metrics import classification_report, last_k_stats, micro_roc_curve
from fedpriv.privacy.modes.registry import mode_of, selected
from fedpriv.reporting.console import round_line
from fedpriv.reporting.plots import plot_accuracy_per_round, plot_roc
from fedpriv.reporting.records import RoundRecord
from fedpriv.reporting.runlog import RunLog, read_rounds
from scenarios.app.federation import PartitionGrid, supernodes
from scenarios.app.fused import EVALUATE_RECEIVED_KEY, evaluate_in_train, split_evaluations
from scenarios.app.recorder import RoundRecorder, wrapper_chain
from scenarios.app.wire_config import wire_config
from scenarios.config.feature import Catalog
from scenarios.config.specs import run_spec, train_spec
from strategies.factory import build_stock_strategy, needs_initial_pretraining
from strategies.validating import ValidUpdatesOnly

# --- building blocks of a run -------------------------------------------------------------------


def run_config_as_record(cfg: Mapping[str, Any]) -> ConfigRecord:
    """What clients receive of the resolved config: the keys that differ from the run's
    ``run_config``, plus the config's digest (:mod:`scenarios.app.wire_config`)."""
    return ConfigRecord(wire_config(cfg))


def pretrain(cfg: Mapping[str, Any], data: FederatedData, weights: list) -> list:
    """Server-side pretraining of initial parameters on the validation split (MP)."""
    spec = train_spec(cfg)
    model = model_for(spec, data)
    settings = replace(TrainSettings.from_spec(spec, seed=spec.seed), proximal_mu=0.0)
    settings = replace(settings, epochs=int(cfg["pretrain-epochs"]))
    new_weights, _ = train_local(model, weights, data.x_val, data.y_val, settings)
    return [w.copy() for w in new_weights]


def start_weights(cfg: Mapping[str, Any], data: FederatedData) -> list:
    """The seeded initial model, pretrained on the server for FedAvgM/FedOpt/FedYogi."""
    weights = initial_weights(train_spec(cfg), data)
    if needs_initial_pretraining(cfg["strategy"]) and cfg["pretrain-epochs"] > 0:
        weights = pretrain(cfg, data, weights)
    return weights


def server_evaluator(cfg: Mapping[str, Any], data: FederatedData):
    """Server test-set metrics of a weight list (classification report + loss)."""
    model = model_for(train_spec(cfg), data)

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
    cfg: Mapping[str, Any],
    grid: PartitionGrid,
    rng: np.random.Generator,
    catalog: Catalog,
    weights: list | None = None,
) -> RoundRecorder:
    """Stock strategy -> privacy wrapper -> (audit canaries) -> update validation -> recorder.

    With ``audit-canaries`` > 0, ``weights`` (the initial model) gives the canaries' shapes.
    """
    from scenarios.audit.feature import with_canaries

    strategy = build_stock_strategy(run_spec(cfg).strategy)
    strategy = catalog.wrapper(mode_of(cfg).name)(strategy, cfg, rng)
    strategy = with_canaries(strategy, cfg, weights)
    strategy = ValidUpdatesOnly(
        strategy, on_invalid=cfg["invalid-update"], accept_failures=cfg["accept-failures"]
    )
    return RoundRecorder(
        strategy,
        grid=grid,
        num_clients=int(cfg["num-clients"]),
        clients_per_round=run_spec(cfg).participation.sampler_per_round,
        rng=rng,
        sampling=str(cfg["client-sampling"]),
        evaluate_sampled_only=bool(cfg.get("evaluate-sampled-only", False)),
    )


def sampling_rng(cfg: Mapping[str, Any]) -> np.random.Generator:
    """The client-sampling Generator: OS entropy, or ``default_rng(seed)`` with reproducible-noise
    (secret by default: knowing the schedule voids amplification; :func:`seeds.privacy_rng`)."""
    return seeds.privacy_rng(int(cfg["seed"]), reproducible=run_spec(cfg).reproducible_noise)


def summarise(cfg: Mapping[str, Any], rounds: list[dict], final: dict, extra: dict) -> dict:
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
        "scenario": cfg["scenario"],
        "seed": cfg["seed"],
        "config": dict(cfg),
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
    cfg, data, weights, rounds, runlog: RunLog, extra: dict, catalog: Catalog
) -> dict:
    """summary.json (with every feature's summary block), final model, accuracy/ROC plots."""
    model = model_for(train_spec(cfg), data)
    proba = predict_proba(model, weights, data.x_test)
    final = classification_report(data.y_test, proba)
    summary = summarise(cfg, rounds, final, extra)
    summary["environment"] = environment()
    summary.update(catalog.summary_blocks(cfg, rounds))
    runlog.write_summary(summary)
    model.set_weights(weights)
    model.save(runlog.dir / "final_model.keras")
    np.savez(runlog.dir / "final_weights.npz", *weights)
    series = {
        "server test": [r["server"]["accuracy"] for r in rounds if r["round"] > 0],
        "distributed": [
            r.get("distributed", {}).get("accuracy", np.nan) for r in rounds if r["round"] > 0
        ],
    }
    title = f"{cfg['scenario']} {cfg['strategy']} {selected(cfg)} seed {cfg['seed']}"
    plot_accuracy_per_round(series, runlog.dir / "accuracy.png", title=title)
    plot_roc({"micro": micro_roc_curve(data.y_test, proba)}, runlog.dir / "roc.png", title=title)
    np.savez(runlog.dir / "test_predictions.npz", y_true=data.y_test, proba=proba)
    return summary


# --- the round loop ----------------------------------------------------------------------------


def budget_stop(strategy: Strategy, server_round: int) -> Optional[str]:
    """Why round ``server_round`` must not run, or None: the first wrapper of the chain
    whose privacy budget (``budget_stop``, e.g. ``max-epsilon`` of global DP) it would pass."""
    for wrapper in wrapper_chain(strategy):
        check = getattr(wrapper, "budget_stop", None)
        reason = check(server_round) if callable(check) else None
        if reason:
            return str(reason)
    return None


def budget_stopped(strategy: Strategy) -> dict[str, str]:
    """``{"stopped": reason}`` when a wrapper's budget stopped the run (before a round, or
    by withholding a round's release); ``{}`` otherwise."""
    for wrapper in wrapper_chain(strategy):
        reason = getattr(wrapper, "budget_stopped", None)
        if reason:
            return {"stopped": str(reason)}
    return {}


def checkpoint_arrays(checkpoint: Mapping[str, Any]) -> list[np.ndarray]:
    """The global arrays a checkpoint holds."""
    return [np.asarray(a) for a in checkpoint["arrays"]]


@dataclass
class RoundState:
    """What the loop hands the ``after_round`` hooks (everything a checkpoint needs).

    ``states``: the chain's state to checkpoint when it is not the live one (a round recorded
    with the next round's train replies, :mod:`scenarios.app.fused`: the state before that
    round's sampling); None: capture it from ``strategy``."""

    round: int
    arrays: ArrayRecord
    record: dict[str, Any]
    strategy: Strategy
    states: Optional[list[dict[str, Any]]] = None


@dataclass
class RunEnd:
    """What the ``after_run`` hook sees: the finished run, before summary.json is written."""

    cfg: Mapping[str, Any]
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


@dataclass
class RunOutcome:
    """A finished run: its summary, its round records and the final global weights."""

    summary: dict[str, Any]
    rounds: list[dict] = field(default_factory=list)
    weights: list[np.ndarray] = field(default_factory=list)


def run_rounds(
    strategy: Strategy,
    grid: Any,
    initial: ArrayRecord,
    *,
    num_rounds: int,
    config: ConfigRecord,
    evaluate: Callable[[int, ArrayRecord], dict],
    first_round: int = 1,
    after_round: Sequence[Callable[[RoundState], None]] = (),
    before_release: Sequence[Callable[[RoundState], None]] = (),
    charged_round: Optional[int] = None,
    timeout: float = 3600,
    stop_before: Optional[Callable[[int], Optional[str]]] = None,
    fused: bool = False,
) -> Optional[ArrayRecord]:
    """Rounds ``first_round..num_rounds``; returns the last aggregated arrays (None if none).

    ``fused`` (``evaluate-in-train``, :mod:`scenarios.app.fused`): round t's train message also
    evaluates model t-1 and round t-1 is recorded from those replies; an evaluate message is
    sent only for a round no train message follows (the last, or one before a stop).

    ``stop_before(round)``: a reason not to run that round (then no later round runs).
    ``before_release``: hooks after ``aggregate_train`` (the round is charged) and before
    ``configure_evaluate`` sends the new global model out (the checkpoint that makes
    a resume never release a round twice uncharged). ``charged_round``: a round that such a
    checkpoint holds (its arrays are ``initial``) but whose evaluation and record did not
    happen: it is finished first (the same arrays are sent again, no new noise).
    """
    arrays, last, pending = initial, None, None
    if first_round == 1 and charged_round is None:
        evaluate(0, arrays)
    if charged_round is not None:
        _finish_round(strategy, grid, charged_round, arrays, config, evaluate, after_round, timeout)
    for server_round in range(first_round, num_rounds + 1):
        reason = stop_before(server_round) if stop_before is not None else None
        if reason:
            log(WARNING, "stopping before round %s: %s", server_round, reason)
            break
        log(INFO, "[ROUND %s/%s]", server_round, num_rounds)
        held = _Held.of(strategy, bool(after_round)) if pending is not None else None
        train_config = ConfigRecord({**config, EVALUATE_RECEIVED_KEY: True}) if held else config
        messages = strategy.configure_train(server_round, arrays, train_config, grid)
        replies = grid.send_and_receive(messages=messages, timeout=timeout)
        if held is not None and pending is not None:  # round t-1's evaluation came back
            held.record(pending, arrays, split_evaluations(replies), evaluate, after_round)
            pending = None
        aggregated, _ = strategy.aggregate_train(server_round, replies)
        if aggregated is not None:
            arrays = last = aggregated
        for hook in before_release:
            hook(RoundState(server_round, arrays, {}, strategy))
        if fused and server_round < num_rounds:
            pending = server_round  # recorded with the next round's train replies
            continue
        _finish_round(strategy, grid, server_round, arrays, config, evaluate, after_round, timeout)
    if pending is not None:  # no train message followed it (a stop): evaluate it on its own
        _finish_round(strategy, grid, pending, arrays, config, evaluate, after_round, timeout)
    return last


@dataclass
class _Held:
    """A round awaiting its evaluation (``fused``): its recorder ``current`` and the chain's
    state before the next round's sampling (deep-copied, only for hooks: a checkpoint)."""

    strategy: Strategy
    current: dict[str, Any]
    states: Optional[list[dict[str, Any]]]

    @classmethod
    def of(cls, strategy: Strategy, snapshot: bool) -> _Held:
        """Hold the round now, before the next round's ``configure_train``."""
        chain = capture_state(wrapper_chain(strategy)) if snapshot else None
        states = pickle.loads(pickle.dumps(chain)) if snapshot else None
        return cls(strategy, dict(getattr(strategy, "current", {})), states)

    def record(self, server_round, arrays, evaluations, evaluate, after_round) -> None:
        """Record the held round with ``evaluations`` (then back to the live ``current``)."""
        own = getattr(self.strategy, "current", {})
        self.strategy.current = self.current
        self.strategy.aggregate_evaluate(server_round, evaluations)
        record = evaluate(server_round, arrays)
        for hook in after_round:
            hook(RoundState(server_round, arrays, record, self.strategy, self.states))
        self.strategy.current = own


def _finish_round(
    strategy: Strategy,
    grid: Any,
    server_round: int,
    arrays: ArrayRecord,
    config: ConfigRecord,
    evaluate: Callable[[int, ArrayRecord], dict],
    after_round: Sequence[Callable[[RoundState], None]],
    timeout: float,
) -> None:
    """A round after its aggregation: federated evaluation (the release of the new global
    model), the server-side evaluation that writes the record, the ``after_round`` hooks."""
    messages = strategy.configure_evaluate(server_round, arrays, config, grid)
    replies = grid.send_and_receive(messages=messages, timeout=timeout)
    strategy.aggregate_evaluate(server_round, replies)
    record = evaluate(server_round, arrays)
    for hook in after_round:
        hook(RoundState(server_round, arrays, record, strategy))


def train_run(
    grid: PartitionGrid,
    cfg: Mapping[str, Any],
    data: FederatedData,
    catalog: Catalog,
    *,
    strategy_cfg: Optional[Mapping[str, Any]] = None,
    hooks: Optional[RunHooks] = None,
    first_round: int = 1,
    initial: Optional[list[np.ndarray]] = None,
    previous_rounds: Sequence[dict] = (),
    resumable: bool = False,
) -> RunOutcome:
    """One training run of ``cfg`` on an already discovered federation (module docstring).

    ``resumable``: checkpoint after every round and, when ``output-dir`` holds a checkpoint
    of this config, continue from it (:mod:`scenarios.app.resume`).
    """
    hooks = hooks or RunHooks()
    t0 = time.time()
    rng = sampling_rng(cfg)
    checkpoint, charged, before_release = None, None, ()
    if resumable:
        from scenarios.app.resume import CHARGED, checkpoint_hook, load_resumable, restore

        checkpoint = load_resumable(cfg)
        if checkpoint is not None:
            first_round, initial = int(checkpoint["round"]) + 1, checkpoint_arrays(checkpoint)
            charged = int(checkpoint["round"]) if checkpoint.get("stage") == CHARGED else None
        hooks = replace(hooks, after_round=(*hooks.after_round, checkpoint_hook(cfg)))
        before_release = (checkpoint_hook(cfg, stage=CHARGED),)
    weights = initial if initial is not None else start_weights(cfg, data)
    recorder = build_strategy(strategy_cfg or cfg, grid, rng, catalog, weights)
    if checkpoint is not None:
        restore(recorder, checkpoint)
    runlog = RunLog(
        cfg["output-dir"],
        keep_rounds=first_round - 1 - (charged is not None) if first_round > 1 else None,
        labels=seeds.noise_labels(run_spec(cfg).reproducible_noise),
    )
    if first_round > 1 and not previous_rounds:
        previous_rounds = read_rounds(cfg["output-dir"])
    for record in previous_rounds if checkpoint is not None else ():
        for sink in hooks.on_record:  # a resumed run: the sinks see the earlier rounds too
            sink(record)
    server_eval = server_evaluator(cfg, data)
    rounds: list[dict] = list(previous_rounds)
    clock = [time.time()]  # start of the round in flight (for its console line)

    def evaluate(server_round: int, arrays: ArrayRecord) -> dict:
        global_weights = arrays.to_numpy_ndarrays()
        metrics = server_eval(global_weights)
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
        print(round_line(record, int(cfg["num-server-rounds"]), now - clock[0]), flush=True)
        clock[0] = now
        for sink in hooks.on_record:
            sink(record)
        recorder.current = {}
        return record

    last = run_rounds(
        recorder,
        grid,
        ArrayRecord(weights),
        num_rounds=int(cfg["num-server-rounds"]),
        config=run_config_as_record(cfg),
        evaluate=evaluate,
        first_round=first_round,
        after_round=hooks.after_round,
        before_release=before_release,
        charged_round=charged,
        stop_before=lambda r: budget_stop(recorder, r),
        fused=evaluate_in_train(cfg, catalog.kind(cfg)),
    )
    final = last.to_numpy_ndarrays() if last is not None else weights
    extra: dict[str, Any] = {"wall_seconds": time.time() - t0, "supernodes": supernodes(grid)}
    extra.update(budget_stopped(recorder))
    if hooks.summary_extra is not None:
        extra.update(hooks.summary_extra(rounds))
    if hooks.after_run is not None:
        extra.update(hooks.after_run(RunEnd(cfg, data, recorder, final, rounds)))
    summary = write_final_outputs(cfg, data, final, rounds, runlog, extra, catalog)
    return RunOutcome(summary, rounds, final)
