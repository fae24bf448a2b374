"""Experiment trackers: a run's config, round metrics, final metrics and plots sent to MLflow
or TensorBoard, both offline.

- MLflow (``tracking = 'mlflow'``): the client of ``mlflow-skinny`` with a local SQLite store
  (``sqlite:///<output-dir>/mlflow.db`` unless ``tracking-uri`` names another store; MLflow's
  plain ``./mlruns`` file store is in maintenance mode and refuses to open unless
  ``MLFLOW_ALLOW_FILE_STORE=true``). The experiment is the scenario, the run is named
  ``<strategy> <privacy> seed <seed>``; params are the resolved config, metrics are logged
  with ``step = round``, the plots and ``summary.json`` / ``rounds.jsonl`` are artifacts.
  The experiment is tagged ``mlflow.experimentKind = custom_model_development`` (MLflow 3's
  UI opens an experiment without a kind in its GenAI view, runs under "Evaluations"; with
  the tag: the classic runs table and the metric charts); a kind the user set is kept.
- TensorBoard (``tracking = 'tensorboard'``): event files written with TensorBoard's own
  record writer and protos (no TensorFlow needed): one scalar per metric and round, the
  config as text and as hparams, the plots as images.

What is logged is what a reader of ``rounds.jsonl`` may see (:func:`round_metrics` drops the
operator keys of :mod:`fedpriv.reporting.runlog`: the sampling schedule and clip counts would
void the amplification of the headline ε for whoever reads the tracker). Every ε is the
run's own (the accountant's upper bound, or absent when the mode has none, e.g. metric DP).

The packages are the ``tracking`` extra (``pip install 'fedpriv[tracking]'``), imported only
when a tracker opens. No Flower import here.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol

from fedpriv.reporting.records import RoundRecord, read_round_records
from fedpriv.reporting.runlog import ROUNDS_FILE, from_json_number, is_operator_key

# what a tracker gets of a run's directory (never operator.jsonl or checkpoint.pkl)
ARTIFACT_FILES = ("summary.json", ROUNDS_FILE, "report.md")
SOURCES = ("server", "distributed", "train")
# numeric reports that are one value for the whole run (the config's dp-delta): logged once
# with the config (MLflow params, TensorBoard's config table and hparams), never per round
RUN_CONSTANTS = ("dp-delta",)
# MLflow 3's experiment type (its UI's ExperimentKind): the classic model-training view
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
ML_EXPERIMENT_KIND = "custom_model_development"


@dataclass(frozen=True)
class TrackingSpec:
    """Where and how one run is tracked.

    ``kind``: ``mlflow`` or ``tensorboard``; ``uri``: MLflow's tracking URI or TensorBoard's log
    directory ('' = under ``output_dir``); ``experiment`` / ``run_name``: MLflow's names (the
    scenario; strategy, privacy and seed); ``tags``: short labels of the run."""

    kind: str
    output_dir: str
    uri: str = ""
    experiment: str = "fedpriv"
    run_name: str = "run"
    tags: Mapping[str, str] | None = None


class Tracker(Protocol):
    """What the run engine calls: once per round record, once at the end."""

    def log_round(self, record: RoundRecord) -> None:
        """Log one round's metrics with ``step = record.round``."""

    def finish(self, summary: Mapping[str, Any], output_dir: Path) -> None:
        """Log the final metrics and the run's plots and files; close the run."""

    def where(self) -> str:
        """One line: where the run was logged and how to look at it."""


# --- what is logged -----------------------------------------------------------------------------


def _numbers(prefix: str, value: Any) -> Iterator[tuple[str, float]]:
    """(name, finite number) pairs of a JSON value, nested keys joined with ``/``."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _numbers(f"{prefix}/{key}" if prefix else str(key), item)
        return
    number = from_json_number(value)
    if number is not None and math.isfinite(number):
        yield prefix, number


def round_metrics(record: RoundRecord) -> dict[str, float]:
    """A round's metrics as a reader of ``rounds.jsonl`` sees them: ``server/…``,
    ``distributed/…``, ``train/…``, the wrappers' numeric reports (``dp-sigma``,
    ``dp-epsilon``…; operator keys and the run's constants :data:`RUN_CONSTANTS` left out:
    :func:`run_constants`) and ``privacy/sigma`` / ``privacy/epsilon``
    (:meth:`RoundRecord.sigma`, :meth:`RoundRecord.epsilon`) under one name for every mode."""
    out: dict[str, float] = {}
    for source in SOURCES:
        out.update(_numbers(source, getattr(record, source) or {}))
    public = {
        k: v for k, v in record.reports.items() if not is_operator_key(k) and k not in RUN_CONSTANTS
    }
    out.update(_numbers("", public))
    for name, value in (("privacy/sigma", record.sigma()), ("privacy/epsilon", record.epsilon())):
        if value is not None and math.isfinite(value):
            out[name] = value
    return out


def run_constants(record: RoundRecord) -> dict[str, str]:
    """The round's :data:`RUN_CONSTANTS` as text (``{"dp-delta": "1e-05"}``): a tracker logs
    each once, where the config is, unless the config already holds it."""
    return {
        k: json.dumps(v) for k, v in record.reports.items() if k in RUN_CONSTANTS and v is not None
    }


def final_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """The run's final figures, all under ``final/``: the server test set's metrics
    (``final/accuracy``…), ``final/last5/…``, the typed privacy figures
    (``final/privacy/epsilon``, ``final/privacy/sigma_mean``…) and ``final/wall_seconds``
    (apart from the per-round ``privacy/…`` series)."""
    out = dict(_numbers("final", summary.get("final") or {}))
    out.update(_numbers("final/last5", summary.get("last5") or {}))
    out.update(_numbers("final/privacy", summary.get("privacy_figures") or {}))
    out.update(_numbers("final/wall_seconds", summary.get("wall_seconds")))
    return out


def run_params(params: Mapping[str, Any]) -> dict[str, str]:
    """The resolved config as text params (sorted; non-strings as JSON: ``true``, ``0.5``)."""
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in sorted(params.items())}


def last_round(output_dir: Path) -> int:
    """The last round a run directory records (the step of its final metrics)."""
    records = read_round_records(output_dir)
    return records[-1].round if records else 0


def artifact_paths(output_dir: Path) -> list[Path]:
    """The run's plots and public files (:data:`ARTIFACT_FILES`), in name order."""
    named = [output_dir / name for name in ARTIFACT_FILES]
    return sorted(p for p in [*output_dir.glob("*.png"), *named] if p.is_file())


# --- MLflow -------------------------------------------------------------------------------------


def mlflow_uri(spec: TrackingSpec) -> str:
    """The tracking URI: ``spec.uri`` (a path ending ``.db`` becomes ``sqlite:///PATH``),
    else ``MLFLOW_TRACKING_URI``, else ``sqlite:///<output-dir>/mlflow.db``."""
    uri = spec.uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri:
        uri = str(Path(spec.output_dir) / "mlflow.db")
    if "://" not in uri and uri.endswith(".db"):
        Path(uri).parent.mkdir(parents=True, exist_ok=True)
        return "sqlite:///" + str(Path(uri).resolve())
    return uri


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class MlflowTracker:
    """One MLflow run (see the module docstring); ``MlflowClient`` calls only."""

    def __init__(self, spec: TrackingSpec, params: Mapping[str, Any]) -> None:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # nothing leaves the machine
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        for name in ("mlflow", "alembic"):  # its store's INFO lines (set up on import)
            logging.getLogger(name).setLevel(logging.WARNING)

        self.spec, self.uri = spec, mlflow_uri(spec)
        self.client = MlflowClient(tracking_uri=self.uri)
        experiment = self.client.get_experiment_by_name(spec.experiment)
        kind = {EXPERIMENT_KIND_TAG: ML_EXPERIMENT_KIND}
        if experiment is None:
            experiment_id = self.client.create_experiment(
                spec.experiment, artifact_location=self._artifact_root(), tags=kind
            )
        else:
            experiment_id = experiment.experiment_id
            if EXPERIMENT_KIND_TAG not in experiment.tags:  # made before this tag (or by hand)
                self.client.set_experiment_tag(
                    experiment_id, EXPERIMENT_KIND_TAG, kind[EXPERIMENT_KIND_TAG]
                )
        tags = {"output-dir": str(spec.output_dir), **(spec.tags or {})}
        run = self.client.create_run(experiment_id, run_name=spec.run_name, tags=tags)
        self.run_id = run.info.run_id
        self.params = run_params(params)
        pairs = [Param(k, v) for k, v in self.params.items()]
        for chunk in _chunks(pairs, 100):  # MLflow's limit per batch
            self.client.log_batch(self.run_id, params=list(chunk))

    def _artifact_root(self) -> Optional[str]:
        """Artifacts beside a SQLite store (``<db dir>/mlartifacts``); the server's default
        for any other store."""
        if not self.uri.startswith("sqlite:///"):
            return None
        return (Path(self.uri.removeprefix("sqlite:///")).parent / "mlartifacts").as_uri()

    def _log(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(k, v, now, step) for k, v in metrics.items()]
        for chunk in _chunks(batch, 1000):
            self.client.log_batch(self.run_id, metrics=list(chunk))

    def log_round(self, record: RoundRecord) -> None:
        """Round metrics at ``step = round``; a run constant the config lacks, once as a
        param."""
        from mlflow.entities import Param

        new = {k: v for k, v in run_constants(record).items() if k not in self.params}
        if new:
            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in new.items()])
            self.params.update(new)
        self._log(round_metrics(record), record.round)

    def finish(self, summary: Mapping[str, Any], output_dir: Path) -> None:
        """Final metrics (at the last round's step), plots and files, run FINISHED."""
        self._log(final_metrics(summary), last_round(output_dir))
        for path in artifact_paths(output_dir):
            self.client.log_artifact(self.run_id, str(path), artifact_path="outputs")
        self.client.set_terminated(self.run_id, "FINISHED")

    def where(self) -> str:
        """The store, experiment and run name (``mlflow ui --backend-store-uri URI``)."""
        return f"MLflow {self.uri}, experiment {self.spec.experiment!r}, run {self.spec.run_name!r}"
