"""What ``fedpriv baseline check`` prints and writes: the verdict table and JUnit XML.

The table has one row per final metric and privacy figure of every run, and one row per
per-round figure that is out of its band (``--all``: every row), then one line per run
counting its per-round figures. The JUnit XML (the format CI systems read: GitLab, Jenkins,
GitHub Actions test reporters) has a test suite per run and a test case per figure; the
per-round figures of one key (``server.accuracy`` over all rounds) are one test case.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fedpriv.baseline import Verdict

_ROUND = re.compile(r"^(?P<sub>.*/)?round\[(?P<i>\d+)\]\.(?P<key>.+)$")


@dataclass(frozen=True)
class RunVerdicts:
    """The verdicts of one rerun (``failed``: the run wrote no summary, nothing compared)."""

    label: str
    verdicts: Sequence[Verdict]
    failed: bool = False

    @property
    def regressions(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.ok]


def is_round_figure(name: str) -> bool:
    """``round[3].server.loss`` (or ``sub/round[3]...``) rather than a final/privacy figure."""
    return _ROUND.match(name) is not None


def verdict_word(verdict: Verdict) -> str:
    """``ok``, ``REGRESSION`` or ``MISSING`` (the run did not report the figure)."""
    if verdict.value is None:
        return "MISSING"
    return "ok" if verdict.ok else "REGRESSION"


def _value(verdict: Verdict) -> str:
    return "-" if verdict.value is None else f"{verdict.value:.6g}"


def table(results: Sequence[RunVerdicts], *, every_row: bool = False) -> list[str]:
    """The console table: run, figure, band, value, verdict (module docstring)."""
    header = f"{'run':32s} {'figure':40s} {'band':30s} {'value':>12s}  verdict"
    lines = [header, "-" * len(header)]
    for result in results:
        if result.failed:
            lines.append(f"{result.label:32s} {'(the run)':40s} {'-':30s} {'-':>12s}  FAILED")
            continue
        rounds = [v for v in result.verdicts if is_round_figure(v.name)]
        for v in result.verdicts:
            if every_row or not v.ok or not is_round_figure(v.name):
                lines.append(
                    f"{result.label:32s} {v.name:40s} {v.band.text():30s} {_value(v):>12s}  "
                    f"{verdict_word(v)}"
                )
        bad = sum(not v.ok for v in rounds)
        lines.append(
            f"{result.label:32s} {'per-round figures':40s} {'':30s} {len(rounds):>12d}  "
            f"{'ok' if not bad else f'{bad} REGRESSION'}"
        )
    return lines


def _cases(result: RunVerdicts) -> dict[str, list[Verdict]]:
    """Test case name -> its verdicts (per-round figures grouped by key)."""
    cases: dict[str, list[Verdict]] = {}
    for v in result.verdicts:
        match = _ROUND.match(v.name)
        name = f"{match['sub'] or ''}round.{match['key']}" if match else v.name
        cases.setdefault(name, []).append(v)
    return cases


def _failure_text(verdicts: Sequence[Verdict]) -> str:
    bad = [v for v in verdicts if not v.ok]
    return "; ".join(f"{v.name} = {_value(v)}, expected {v.band.text()}" for v in bad)


def write_junit(path: str | Path, results: Sequence[RunVerdicts], seconds: float) -> Path:
    """JUnit XML of the check: a test suite per run, a test case per figure (or key)."""
    root = ET.Element("testsuites", name="fedpriv baseline", time=f"{seconds:.1f}")
    total = failures = 0
    for result in results:
        suite = ET.SubElement(root, "testsuite", name=result.label)
        cases = {"run": []} if result.failed else _cases(result)
        for name, verdicts in cases.items():
            case = ET.SubElement(suite, "testcase", name=name, classname=result.label)
            message = "the run failed (see its run.log)" if result.failed else ""
            message = message or _failure_text(verdicts)
            if message:
                ET.SubElement(case, "failure", message=message).text = message
        bad = sum(1 for c in suite if len(c))
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(bad))
        total, failures = total + len(cases), failures + bad
    root.set("tests", str(total))
    root.set("failures", str(failures))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    return path


def summary_line(results: Sequence[RunVerdicts], *, per_run: int = 6) -> str:
    """The last line: no regression, or each run's regressions named (the first ``per_run``
    figures of each run: final metrics, then privacy figures, then per-round figures)."""
    parts = []
    for result in results:
        names = ["run failed"] if result.failed else [v.name for v in result.regressions]
        if names:
            more = f" (+{len(names) - per_run} more)" if len(names) > per_run else ""
            parts.append(f"{result.label}: {', '.join(names[:per_run])}{more}")
    if not parts:
        checked = sum(len(r.verdicts) for r in results)
        return f"fedpriv baseline: no regression ({checked} figures in {len(results)} runs)"
    count = sum(1 if r.failed else len(r.regressions) for r in results)
    return f"fedpriv baseline: {count} regression(s): " + "; ".join(parts)
