"""What a run shows on the console: start-up status lines, one line per round and a short
summary at the end.

Start-up lines (:func:`startup_line`) say what the run is waiting for between the command and
round 0 (the engine, its ClientApp workers, the data, the model), each with the seconds
since the command started; a multi-run command shows only the engine's (:data:`PER_RUN_STEPS`
are each cell's own).

Plain text (readable in a log file, no colour codes), built only from what the run writes
anyway: a round line from the round's record (one line of rounds.jsonl, the wrappers'
reports included), the summary from summary.json. Each mode states its privacy figure:

- global DP: σ, clipped replies, and ε so far with δ (the accountant's upper bound, client
  level) and whom it protects against;
- metric DP: σ and d, "heuristic, no ε" (σ = z·C/(m·d) depends on the data: MP §6);
- zonal: the per-level accountant ε so far and whom the noised level protects against
  (HDP §IV-C; the amplified figures are in summary.json, labelled heuristic);
- DP-SGD: the largest per-client example-level ε so far;
- IFCA: the leakage spent, max and median over clients (GP Thm 3.1: n/ν a participation).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedpriv.privacy.accounting.strength import warning
from fedpriv.privacy.modes import ModeError, dp_sgd, get, global_dp, name_of
from fedpriv.reporting.runlog import from_json_number

PREFIX = "fedpriv:"
SEP = " · "
NO_GUARANTEE = "no formal guarantee"
# the files a reader looks at first, in this order; every other file of the run follows
OUTPUT_FILES = (
    "rounds.jsonl",
    "summary.json",
    "report.md",
    "accuracy.png",
    "roc.png",
    "final_model.keras",
    "run.log",
)


STARTUP = "start-up ·"
# the start-up steps of one run (a grid's cells each have them: not shown for a multi-run)
PER_RUN_STEPS = ("data loaded", "model built")
_ROUND = re.compile(rf"^{PREFIX} round (\d+)/(\d+)\b")


def startup_line(step: str, detail: str = "", elapsed: float | None = None) -> str:
    """``fedpriv: start-up · STEP: DETAIL (12.3 s)``: one step between the command and round 0,
    with the seconds since the command started."""
    text = f"{PREFIX} {STARTUP} {step}" + (f": {detail}" if detail else "")
    return text + (f" ({elapsed:.1f} s)" if elapsed is not None else "")


def is_startup_line(line: str, steps: Sequence[str] = ()) -> bool:
    """Whether ``line`` is a start-up line (of one of ``steps`` when given)."""
    head = f"{PREFIX} {STARTUP} "
    if not line.startswith(head):
        return False
    return not steps or line[len(head) :].startswith(tuple(steps))


def round_progress(line: str) -> tuple[int, int] | None:
    """``(round, total)`` of a round line (``fedpriv: round 3/8 · ...``), else None."""
    found = _ROUND.match(line)
    return (int(found[1]), int(found[2])) if found else None


def num(value: Any, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits; "—" for None or non-numbers."""
    number = from_json_number(value)
    if number is None:
        return "—"
    if math.isinf(number):
        return "∞" if number > 0 else "-∞"
    return f"{number:.{digits}g}"


def _pair(label: str, block: Mapping[str, Any] | None, loss_key: str = "loss") -> str:
    block = block or {}
    acc, loss = block.get("accuracy"), block.get(loss_key)
    if acc is None and loss is None:
        return ""
    return f"{label}acc {num(acc, 4)} loss {num(loss, 4)}".strip()


def _short(text: str) -> str:
    """The head of a threat-model sentence (up to its first ':' or ';')."""
    for mark in (":", ";"):
        text = text.split(mark)[0]
    return text.strip()


def _dp_figure(record: Mapping[str, Any]) -> str:
    """Global or metric DP: σ, clipped replies, then ε (global) or d (metric)."""
    if record.get("dp-skipped"):
        return f"not released: {record['dp-skipped']}"
    reports = record.get("dp-num-reports")
    head = f"σ {num(record.get('dp-sigma'))}, {record.get('dp-num-clipped', 0)}/{reports} clipped"
    if "dp-heuristic" in record:
        return f"{head}, d {num(record.get('dp-distance'))} (heuristic, no ε)"
    if record.get("dp-epsilon") is not None:
        return (
            f"{head}, ε {num(record['dp-epsilon'])} so far (δ {num(record.get('dp-delta'))}) "
            f"against {global_dp.MODE.against}"
        )
    if record.get("dp-no-epsilon"):
        return f"{head}, no ε ({_short(str(record['dp-no-epsilon']))})"
    return head


def _zonal_figure(report: Mapping[str, Any]) -> str:
    """Zonal: the per-level accountant ε so far and whom the noised level protects against."""
    eps = report.get("epsilon") or {}
    level = (eps.get("level") or {}).get("pld")
    against = eps.get("epsilon-against") or {}
    whom = "; ".join(f"{lv}: {_short(str(t))}" for lv, t in against.items())
    return f"ε {num(level)} so far per noised level ({report.get('placement', '?')}) against {whom}"


def _ifca_figure(record: Mapping[str, Any]) -> str:
    """IFCA: leakage spent over the clients (the server's mirror of their ledgers)."""
    ledger = record.get("ledger") or {}
    if ledger.get("max") is None:
        return "ν = 0: no sanitization, no leakage bound"
    return f"leakage spent max {num(ledger['max'])}, median {num(ledger.get('median'))}"


def privacy_figure(record: Mapping[str, Any]) -> str:
    """The privacy figure of one round record ("" when the run has no privacy mode)."""
    if "dp-mode" in record:
        return _dp_figure(record)
    if isinstance(record.get("zonal"), Mapping):
        return _zonal_figure(record["zonal"])
    if "dp-sgd-epsilon-max" in record:
        return (
            f"ε {num(record['dp-sgd-epsilon-max'])} so far, worst client, against "
            + dp_sgd.MODE.against
        )
    if isinstance(record.get("ledger"), Mapping):
        return _ifca_figure(record)
    return ""


def round_line(record: Mapping[str, Any], total_rounds: int, seconds: float) -> str:
    """One console line for a round: accuracy and loss (server, clients), train loss, time,
    then the mode's privacy figure."""
    parts = [f"{PREFIX} round {record.get('round', '?')}/{total_rounds}"]
    parts.append(_pair("server ", record.get("server")))
    parts.append(_pair("clients ", record.get("distributed")))
    train = record.get("train") or {}
    loss = train.get("train-loss", train.get("loss"))
    if loss is not None:
        parts.append(f"train loss {num(loss, 4)}")
    validation = record.get("validation") or {}
    if validation.get("objective") is not None:  # IFCA: validation users' objective
        parts.append(f"validation {num(validation['objective'], 4)}")
    parts.append(f"{seconds:.1f} s")
    parts.append(privacy_figure(record))
    return SEP.join(p for p in parts if p)


# --- the summary at the end of a run ---------------------------------------------------------


def privacy_statement(summary: Mapping[str, Any]) -> str:
    """Mode, ε and δ and against whom — or "no formal guarantee" — from summary.json."""
    recorded = summary.get("config") or {}  # the run config summary.json records
    mode = name_of(recorded)
    try:
        declared = get(mode)
    except ModeError:  # a summary written by a mode this install does not know
        declared = None
    figures = summary.get("privacy_figures") or {}
    if isinstance(summary.get("runs"), list):  # a comparison of several runs
        return f"{mode}: one figure per run (report.md and each run's summary.json)"
    leakage = summary.get("leakage")
    if isinstance(leakage, Mapping):  # IFCA
        return _leakage_statement(leakage)
    if isinstance(summary.get("zonal"), Mapping):
        zonal = {**summary["zonal"], "placement": recorded.get("noise-placement")}
        return f"zonal, {_zonal_figure(zonal)}"
    if declared is not None and not declared.filters:  # a mode that protects nothing
        return f"{mode}: {NO_GUARANTEE} (no noise is added)"
    if figures.get("epsilon") is not None:
        whom = (declared and declared.against) or "see the threat model of the mode"
        return (
            f"{mode}: (ε = {num(figures['epsilon'])}, δ = {num(figures.get('delta'))})"
            f" [{figures.get('bound', '')}] against {whom}"
        )
    sigma = num(figures.get("sigma_mean"))
    extra = f", d mean {num(figures['distance_mean'])}" if figures.get("distance_mean") else ""
    bound = figures.get("bound") or "no ε"
    return f"{mode}: {NO_GUARANTEE} ({bound}); σ mean {sigma}{extra}"


def _leakage_statement(leakage: Mapping[str, Any]) -> str:
    """IFCA: the leakage the server's mirror of the client ledgers recorded."""
    stats = leakage.get("stats") or {}
    if stats.get("max") is None:
        return f"ifca: {NO_GUARANTEE} (ν = 0, no sanitization)"
    return (
        f"ifca: d-privacy leakage spent max {num(stats['max'])}, median "
        f"{num(stats.get('median'))} (GP's n/ν = {num(leakage.get('per_participation'))} a "
        "participation, heuristic) against the server and observers"
    )


def final_metrics(summary: Mapping[str, Any]) -> str:
    """The final server test metrics, 4 significant digits."""
    final = summary.get("final") or {}
    keys = [k for k in ("accuracy", "f1_macro", "roc_auc_micro", "loss") if k in final]
    if final.get("declined") and not final.get("clients"):  # IFCA: every user kept its own
        return (
            f"none: {final['declined']} users declined the final test evaluation (their own "
            "unaccounted-metrics is off; a node sets it in its run or node config)"
        )
    if not keys:  # a comparison (run -> accuracy), IFCA: every number it holds
        keys = [k for k, v in final.items() if from_json_number(v) is not None]
    return ", ".join(f"{k} {num(final[k], 4)}" for k in keys) or "—"


def files_written(output_dir: str | Path, names: Sequence[str] = OUTPUT_FILES) -> list[str]:
    """Every file of the run's folder: ``names`` first (those that exist, in that order),
    then the others by name, then its sub-folders (``none/``: a comparison's runs); not a
    file half-written (``*.tmp``)."""
    out = Path(output_dir)
    entries = sorted(out.iterdir()) if out.is_dir() else []
    found = [n for n in names if (out / n).is_file()]
    found += [p.name for p in entries if p.is_file() and p.name not in found
              and p.suffix != ".tmp"]  # fmt: skip
    return found + [f"{p.name}/" for p in entries if p.is_dir()]


def cell_line(summary: Mapping[str, Any]) -> str:
    """One run of a grid in a line: its final metrics, its privacy statement and the warning
    about an ε that protects little (:func:`epsilon_warning`)."""
    caution = epsilon_warning(summary)
    tail = f"{SEP}warning: {caution}" if caution else ""
    return f"{final_metrics(summary)}{SEP}{privacy_statement(summary)}{tail}"


def epsilon_warning(summary: Mapping[str, Any]) -> str | None:
    """The warning about a run's ε above a threshold
    (:mod:`fedpriv.privacy.accounting.strength`), from summary.json; None for an ε that needs
    none, a run without ε (metric DP, no mode) or a comparison of several runs."""
    if isinstance(summary.get("runs"), list):
        return None
    figures = summary.get("privacy_figures") or {}
    epsilon = from_json_number(figures.get("epsilon"))
    if epsilon is None and isinstance(summary.get("zonal"), Mapping):
        level = (summary["zonal"].get("epsilon") or {}).get("level") or {}
        epsilon = from_json_number(level.get("pld"))
    return None if epsilon is None else warning(epsilon)


def summary_lines(summary: Mapping[str, Any], output_dir: str | Path, wall: float) -> list[str]:
    """The short summary a run ends with: metrics, privacy (and a warning about an ε that
    protects little), wall time, files."""
    files = ", ".join(files_written(output_dir)) or "—"
    caution = epsilon_warning(summary)
    return [
        f"{PREFIX} done in {wall:.1f} s",
        f"{PREFIX}   final    {final_metrics(summary)}",
        f"{PREFIX}   privacy  {privacy_statement(summary)}",
        *([f"{PREFIX}   warning  {caution}"] if caution else []),
        f"{PREFIX}   files    {output_dir}/ {files}",
    ]
