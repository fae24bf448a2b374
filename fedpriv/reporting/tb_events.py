"""TensorBoard event files of a run, written with TensorBoard's own record writer and protos.

No TensorFlow is needed (a GPU host runs Keras on JAX): ``RecordWriter`` frames each
serialized ``Event`` as a TFRecord (length, masked CRC-32C, payload, masked CRC-32C), the
format ``EventAccumulator`` and ``tensorboard --logdir`` read. TensorBoard names a run by its
folder below the ``--logdir`` it was given, so each run's event file is in a folder named for
the run (:func:`log_dir`: ``<output-dir>/tensorboard/<run name>``, never the log directory
itself, which TensorBoard lists as the run "."). One ``events.out.tfevents.<time>.<host>`` file
per run holds:

- a scalar per metric and round (``step = round``;
  :func:`fedpriv.reporting.tracking.round_metrics`: no run constant such as ``dp-delta``);
- the resolved config as a text table (tag ``config``) and as hparams (the HParams tab); a
  run constant the config lacks, once as text (tag ``constants``);
- the final metrics at the last round's step, the run's PNG plots as images (``plots/<name>``)
  and ``summary.json`` as text (tag ``summary``).
"""

from __future__ import annotations

import json
import re
import socket
import struct
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedpriv.reporting.records import RoundRecord
from fedpriv.reporting.tracking import (
    TrackingSpec,
    final_metrics,
    last_round,
    round_metrics,
    run_constants,
    run_params,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_folder_name(run_name: str) -> str:
    """A run name as one folder name (``fedavg global-dp seed 0`` ->
    ``fedavg_global-dp_seed_0``)."""
    return re.sub(r"[^A-Za-z0-9.=+-]+", "_", run_name).strip("_.") or "run"


def log_root(spec: TrackingSpec) -> Path:
    """What to give ``tensorboard --logdir``: ``<output-dir>/tensorboard``, else
    ``tracking-uri`` (a log directory shared by many runs)."""
    return Path(spec.uri) if spec.uri else Path(spec.output_dir) / "tensorboard"


def log_dir(spec: TrackingSpec) -> Path:
    """The run's own folder under :func:`log_root` (TensorBoard's run name):
    ``<output-dir>/tensorboard/<run name>``, or ``<tracking-uri>/<output-dir as one name>``
    (one sub-directory per run, output folders being distinct where run names repeat)."""
    if not spec.uri:
        return log_root(spec) / run_folder_name(spec.run_name)
    name = str(spec.output_dir).strip("/").replace("/", "_") or "run"
    return Path(spec.uri) / name


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG from its IHDR chunk (bytes 16..24, big-endian)."""
    if not data.startswith(PNG_MAGIC):
        raise ValueError("not a PNG file")
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


class TensorBoardTracker:
    """One run's event file (see the module docstring)."""

    def __init__(self, spec: TrackingSpec, params: Mapping[str, Any]) -> None:
        from tensorboard.plugins.hparams import summary_v2 as hparams
        from tensorboard.summary.writer.record_writer import RecordWriter

        self.root, self.dir = log_root(spec), log_dir(spec)
        self.dir.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{time.time():.6f}.{socket.gethostname()}"
        self._file = (self.dir / name).open("wb")
        self._writer = RecordWriter(self._file)
        self._write_event(file_version="brain.Event:2")
        text = self.params = run_params(params)
        table = "| key | value |\n| --- | --- |\n" + "\n".join(
            f"| {k} | {v} |" for k, v in text.items()
        )
        self._write_summary(self._text("config", table), step=0)
        self._write_summary(hparams.hparams_pb(text, trial_id=spec.run_name), step=0)

    # -- protos --

    def _write_event(self, step: int = 0, **fields: Any) -> None:
        from tensorboard.compat.proto import event_pb2

        event = event_pb2.Event(wall_time=time.time(), step=step, **fields)
        self._writer.write(event.SerializeToString())
        self._file.flush()

    def _write_summary(self, summary: Any, step: int) -> None:
        self._write_event(step=step, summary=summary)

    @staticmethod
    def _scalars(metrics: Mapping[str, float]) -> Any:
        from tensorboard.compat.proto import summary_pb2

        values = [summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in metrics.items()]
        return summary_pb2.Summary(value=values)

    @staticmethod
    def _text(tag: str, text: str) -> Any:
        from tensorboard.compat.proto import summary_pb2, tensor_pb2, types_pb2

        metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text")
        )
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[text.encode()])
        value = summary_pb2.Summary.Value(tag=tag, metadata=metadata, tensor=tensor)
        return summary_pb2.Summary(value=[value])

    @staticmethod
    def _image(tag: str, data: bytes) -> Any:
        from tensorboard.compat.proto import summary_pb2

        width, height = png_size(data)
        image = summary_pb2.Summary.Image(
            height=height, width=width, colorspace=4, encoded_image_string=data
        )
        return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, image=image)])

    # -- the tracker --

    def log_round(self, record: RoundRecord) -> None:
        """One scalar per metric at ``step = round``; a run constant the config lacks, once as
        text."""
        new = {k: v for k, v in run_constants(record).items() if k not in self.params}
        if new:
            self.params = {**self.params, **new}
            lines = "\n".join(f"| {k} | {v} |" for k, v in new.items())
            table = "| constant | value |\n| --- | --- |\n" + lines
            self._write_summary(self._text("constants", table), step=record.round)
        self._write_summary(self._scalars(round_metrics(record)), step=record.round)

    def finish(self, summary: Mapping[str, Any], output_dir: Path) -> None:
        """Final metrics, plots and summary.json at the last round's step; close the file."""
        step = last_round(output_dir)
        self._write_summary(self._scalars(final_metrics(summary)), step=step)
        for png in sorted(Path(output_dir).glob("*.png")):
            self._write_summary(self._image(f"plots/{png.stem}", png.read_bytes()), step=step)
        text = json.dumps(summary, indent=1, sort_keys=True, default=str)
        self._write_summary(self._text("summary", f"```\n{text}\n```"), step=step)
        self._file.close()

    def where(self) -> str:
        """The log directory and the run's name in it (``tensorboard --logdir DIR``)."""
        return f"TensorBoard {self.root}, run {self.dir.name!r}"
