"""Run outputs: ``rounds.jsonl`` appended as each round ends, ``summary.json`` at the end.

Each round line is flushed and fsynced, so a killed run loses at most the round in flight
(SPEC §7). ``summary.json`` is written to a temporary file and renamed (never half-written).

Who may read what. The headline ε of a sampled run is amplified by sampling, which
holds only while the sampling schedule is secret. So the round's partition lists (sampled,
replied, failed, rejected, clipped, per-client ε and participations: :data:`OPERATOR_KEYS`)
and the counts that are functions of the raw updates (``dp-num-clipped``) or of the sample
(``dp-num-reports``, ``dp-num-failures``) never go to ``rounds.jsonl``: each round line's
operator part goes, at the same line number, to ``operator.jsonl``, every line of which says
that its reader is outside the headline guarantee (:data:`OPERATOR_NOTICE`); ``run.log``
(the simulation's whole output) is the operator's too (:data:`RUN_LOG_NOTICE`). ``summary.json``
lists every output with who may read it (:data:`OUTPUT_READERS`). :func:`read_rounds` is the
operator's view (both files merged: the reports and plots of the run's owner);
``read_rounds(d, public=True)`` is what a reader of ``rounds.jsonl`` sees.
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


ROUNDS_FILE = "rounds.jsonl"
OPERATOR_FILE = "operator.jsonl"
# top-level round keys that reveal who was sampled or clipped (partition lists; counts of the
# sample and of clipped updates); a wrapper's ``*-nodes`` report lands here without "-nodes"
OPERATOR_KEYS = frozenset(
    {
        "sampled", "replied", "failed", "rejoined", "empty-sample", "rejected",
        "rejected-evaluation", "participants",
        "declined", "zone", "dp-clipped", "dp-num-clipped", "dp-num-reports",
        "dp-num-failures", "dp-client-epsilon", "dp-sgd-epsilon", "dp-sgd-participations",
        "dp-sgd-noise-multiplier", "dp-sgd-clipping-norm", "dp-sgd-delta",
        "dp-empty-sample", "audit-real-reports",
        "distributed-cohort", "distributed-survivors", "distributed-dropped",
    }
)  # fmt: skip
# keys that say which round line an operator line belongs to (copied to both files)
LINE_KEYS = ("round", "sweep-index", "run", "label")
OPERATOR_NOTICE = (
    "operator only: this file reveals the sampling schedule and clip flags; amplification by "
    "sampling does not hold against its reader (ε without amplification, per participation)"
)
RUN_LOG_FILE = "run.log"
# run.log is the simulation's whole output: Flower's own per-round lines ("received N results
# and M failures": the sample size), the DP wrappers' clip counts, the rejected nodes, the
# progress line's "k/m clipped", tracebacks. Filtering each framework's lines is not a
# guarantee, so the file is the operator's, like operator.jsonl; its first line says so.
RUN_LOG_NOTICE = (
    "operator only: the simulation's whole output, with per-round sample sizes, clip counts "
    "and node ids; amplification by sampling does not hold against its reader (ε without "
    "amplification, per participation)"
)
OUTPUT_READERS = {
    ROUNDS_FILE: "anyone: the headline ε holds (no sampling schedule, no clip flags)",
    "summary.json": "anyone: the headline ε holds",
    "final model, plots, report.md, test_predictions.npz": "anyone: post-processing of "
    "the releases and of rounds.jsonl / summary.json (the headline ε holds)",
    OPERATOR_FILE: OPERATOR_NOTICE,
    RUN_LOG_FILE: RUN_LOG_NOTICE,
    "checkpoint.pkl": "operator only: the chain's state (accountants, schedule-derived "
    "ledgers, clip flags) and, in checkpoint-model-*.pkl, its model, for resuming; the "
    "headline ε does not hold against its reader",
    "zone-replies/": "operator only (zonal-save-replies): every message and reply of the "
    "zone nodes, what the server saw; each zone's ε without amplification holds",
    "node-state/": "the simulated nodes' own ledgers (owner-only; the researcher plays every "
    "node): each release's round, request digest and privacy event, the nodes' cached "
    "replies; what each node released, not more (absent with federation-dir or "
    "FEDPRIV_STATE_ROOT, which keep them elsewhere)",
    "server-state/": "the server's own ledger (owner-only; global-dp, adaptive-clip: each "
    "noised round's privacy event; dp-ftrl: each tree's; client-budgets: each client's per "
    "release): what the server released, not more (absent with "
    "federation-dir or server-state-dir, which keep it elsewhere)",
}


def is_operator_key(key: str) -> bool:
    """Whether a round-line key belongs to the operator log (:data:`OPERATOR_KEYS`)."""
    return key in OPERATOR_KEYS or key.endswith("-nodes")


def split_round(record: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A round line -> (its ``rounds.jsonl`` part, its ``operator.jsonl`` part)."""
    public = {k: v for k, v in record.items() if not is_operator_key(k)}
    operator = {k: v for k, v in record.items() if is_operator_key(k)}
    operator.update({k: record[k] for k in LINE_KEYS if k in record})
    return public, {**operator, "reader": OPERATOR_NOTICE}


def _kept_lines(path: Path, keep: int) -> list[str]:
    """The first ``keep`` complete JSON lines of ``path``."""
    kept = []
    for line in path.read_text().splitlines()[:keep]:
        try:
            json.loads(line)
        except json.JSONDecodeError:  # a line cut by the kill
            break
        kept.append(line + "\n")
    return kept


def _append_line(path: Path, record: Mapping[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(to_jsonable(record), sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


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
        self.rounds_path = self.dir / ROUNDS_FILE
        self.operator_path = self.dir / OPERATOR_FILE
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
        operator: list[str] = []
        if keep_rounds is not None and self.operator_path.exists():  # same line count
            operator = _kept_lines(self.operator_path, len(kept))
            kept = kept[: len(operator)]
        self.rounds_path.write_text("".join(kept))
        self.operator_path.touch(mode=0o600)
        self.operator_path.chmod(0o600)  # the operator's only (an older one too)
        self.operator_path.write_text("".join(operator))

    def append_round(self, record: Mapping[str, Any]) -> None:
        """Append the round's public line to rounds.jsonl and its operator line to
        operator.jsonl (:func:`split_round`), each flushed to disk (operator first: a kill
        between the two leaves an operator line that the next resume drops)."""
        public, operator = split_round({**record, **self.labels})
        _append_line(self.operator_path, operator)
        _append_line(self.rounds_path, public)

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """Write ``summary.json`` atomically, with who may read each output of the run."""
        tmp = self.summary_path.with_suffix(".json.tmp")
        summary = {**summary, **self.labels, "output-readers": OUTPUT_READERS}
        tmp.write_text(json.dumps(to_jsonable(summary), indent=2, sort_keys=True))
        tmp.replace(self.summary_path)


def _read_lines(path: Path) -> list[dict]:
    """The complete JSON lines of ``path`` ([] without it; a line cut by a kill is skipped)."""
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


def read_rounds(output_dir: str | Path, *, public: bool = False) -> list[dict]:
    """The round lines of a run, in order: THE reader of rounds.jsonl.

    The operator's view by default: each rounds.jsonl line merged with the operator.jsonl
    line of the same number (sampled lists and clip flags back in, the reader notice left
    out); ``public=True``: rounds.jsonl alone, what a reader of the public outputs sees.
    [] without the file; a line cut by a kill (SPEC §7) is skipped. Typed records:
    :func:`fedpriv.reporting.records.read_round_records`.
    """
    rounds = _read_lines(Path(output_dir) / ROUNDS_FILE)
    if public:
        return rounds
    operator = _read_lines(Path(output_dir) / OPERATOR_FILE)
    merged = []
    for i, line in enumerate(rounds):
        extra = operator[i] if i < len(operator) else {}
        extra = {k: v for k, v in extra.items() if k != "reader"}
        merged.append({**line, **extra})
    return merged
