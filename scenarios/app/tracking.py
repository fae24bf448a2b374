"""The run engine's tracker hooks: ``tracking = 'mlflow' | 'tensorboard'`` turns into an
``on_record`` hook (each round's typed record) and an ``on_finish`` hook (the final metrics,
plots and files) of :class:`fedpriv.scenarios.app.engine.RunHooks`; the trackers are in
:mod:`fedpriv.reporting.tracking` and :mod:`fedpriv.reporting.tb_events`, imported only when
a run tracks."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from fedpriv.scenarios.config.specs import ServerRun

from fedpriv.privacy.modes.registry import selected

RecordHook = Callable[[dict], None]
FinishHook = Callable[[dict, Path], None]


def tracking_spec(run: ServerRun) -> Any:
    """The :class:`fedpriv.reporting.tracking.TrackingSpec` of a server's run (None for
    ``tracking = 'none'``). The tracking keys are the feature's own (``run.record``)."""
    own, spec = run.record, run.spec
    if own.get("tracking", "none") == "none":
        return None
    from fedpriv.reporting.tracking import TrackingSpec

    privacy, strategy = selected(own), spec.strategy.strategy
    tags = {
        "scenario": str(spec.scenario),
        "strategy": str(strategy),
        "privacy": str(privacy),
        "seed": str(spec.seed),
    }
    return TrackingSpec(
        kind=str(own["tracking"]),
        output_dir=str(spec.output_dir),
        uri=str(own.get("tracking-uri", "")),
        experiment=str(spec.scenario),
        run_name=f"{strategy} {privacy} seed {spec.seed}",
        tags=tags,
    )


def open_tracker(spec: Any, params: Mapping[str, Any]) -> Any:
    """The tracker of ``spec.kind``, its run started with ``params`` as its parameters."""
    if spec.kind == "mlflow":
        from fedpriv.reporting.tracking import MlflowTracker

        return MlflowTracker(spec, params)
    from fedpriv.reporting.tb_events import TensorBoardTracker

    return TensorBoardTracker(spec, params)


def _warn(spec: Any, err: Exception) -> None:
    print(
        f"fedpriv: tracking ({spec.kind}) failed: {type(err).__name__}: {err}; the run goes on "
        "without it (its own files are complete)",
        file=sys.stderr,
        flush=True,
    )


def tracker_hooks(run: ServerRun) -> tuple[tuple[RecordHook, ...], tuple[FinishHook, ...]]:
    """``(on_record, on_finish)`` hooks of the run's tracker (both empty without one).

    A tracker never stops a run: when it fails (a store that cannot be opened or written) the
    run prints one line and goes on untracked; rounds.jsonl and summary.json are the record."""
    spec = tracking_spec(run)
    if spec is None:
        return (), ()
    from fedpriv.reporting.records import RoundRecord

    try:
        tracker = open_tracker(spec, dict(run.record))
    except Exception as err:  # noqa: BLE001 - any tracker failure leaves the run untracked
        _warn(spec, err)
        return (), ()
    alive = [True]

    def guarded(call: Callable[..., None], *args: Any) -> None:
        if not alive[0]:
            return
        try:
            call(*args)
        except Exception as err:  # noqa: BLE001
            alive[0] = False
            _warn(spec, err)

    def on_record(record: dict) -> None:
        guarded(tracker.log_round, RoundRecord.from_json(record))

    def on_finish(summary: dict, output_dir: Path) -> None:
        guarded(tracker.finish, summary, output_dir)
        if alive[0]:
            print(f"fedpriv:   tracked  {tracker.where()}", flush=True)

    return (on_record,), (on_finish,)


def with_tracker(hooks: Any, run: ServerRun) -> Any:
    """``hooks`` (a :class:`fedpriv.scenarios.app.engine.RunHooks`) with the run's tracker hooks
    added after its own (``hooks`` itself without a tracker)."""
    records, finish = tracker_hooks(run)
    if not records:
        return hooks
    return replace(
        hooks, on_record=(*hooks.on_record, *records), on_finish=(*hooks.on_finish, *finish)
    )
