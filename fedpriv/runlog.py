"""Run outputs: ``rounds.jsonl`` appended as each round ends, ``summary.json`` at the end.

Each round line is flushed and fsynced, so a killed run loses at most the round in flight
(SPEC §7). ``summary.json`` is written to a temporary file and renamed (never half-written).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np


def to_jsonable(value: Any) -> Any:
    """Numpy scalars/arrays and non-finite floats made JSON-safe (inf/nan -> strings)."""
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def from_json_number(value: Any) -> float | None:
    """Inverse of :func:`to_jsonable` for a scalar: a float ("inf"/"nan" strings too), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


class RunLog:
    """Writer for one run's output directory."""

    def __init__(
        self,
        output_dir: str | Path,
        *,
        keep_rounds: int | None = None,
        labels: Mapping[str, Any] | None = None,
    ) -> None:
        """Start ``rounds.jsonl`` afresh, or (``keep_rounds = k``, a resumed run) keep the
        records of rounds 0..k and drop any later line (a round in flight when killed).

        ``labels`` (e.g. ``fedpriv.seeds.noise_labels``) go into every round line and the
        summary."""
        self.labels = dict(labels or {})
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rounds_path = self.dir / "rounds.jsonl"
        self.summary_path = self.dir / "summary.json"
        kept = []
        if keep_rounds is not None and self.rounds_path.exists():
            for line in self.rounds_path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # a line cut by the kill
                    break
                if record.get("round", 0) > keep_rounds:
                    break
                kept.append(line + "\n")
        self.rounds_path.write_text("".join(kept))

    def append_round(self, record: Mapping[str, Any]) -> None:
        """Append one JSON line and flush it to disk."""
        with self.rounds_path.open("a") as fh:
            fh.write(json.dumps(to_jsonable({**record, **self.labels}), sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """Write ``summary.json`` atomically."""
        tmp = self.summary_path.with_suffix(".json.tmp")
        summary = {**summary, **self.labels}
        tmp.write_text(json.dumps(to_jsonable(summary), indent=2, sort_keys=True))
        tmp.replace(self.summary_path)


def read_rounds(output_dir: str | Path) -> list[dict]:
    """The round lines of a run's rounds.jsonl, in order: THE reader of rounds.jsonl.

    [] without the file; a line cut by a kill (SPEC §7) is skipped. Typed records:
    :func:`fedpriv.records.read_round_records`.
    """
    path = Path(output_dir) / "rounds.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out
