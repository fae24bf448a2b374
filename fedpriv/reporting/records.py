"""Typed records of a run: what happened in a round, and the privacy figures of a run.

:class:`RoundRecord` is one line of ``rounds.jsonl``: the round, the partitions sampled,
replied and failed, whether the round aggregated, the aggregated train / distributed metrics,
the server test metrics, and ``reports`` — what the privacy wrappers and run hooks reported
(``dp-sigma``, ``dp-distance``, ``dp-num-clipped``, ``dp-epsilon``..., ``zonal``, ``cia``,
``dp-sgd-epsilon``...). The engine builds it; :meth:`RoundRecord.to_json` writes the line
(one key convention: the fixed fields by name, the reports flat beside them, as every
rounds.jsonl since the first release); :func:`read_round_records` is the one reader.

:class:`PrivacyFigures` is what every report shows of a run's privacy (z, σ, d, ε, δ). The
summary block of each privacy feature writes it into summary.json under
``privacy_figures``; the reports read it back with :meth:`PrivacyFigures.from_summary`
instead of searching the feature's own block for alternative key names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from fedpriv.privacy.accounting.strength import protection
from fedpriv.reporting.runlog import from_json_number, read_rounds

CORE_FIELDS = ("round", "sampled", "replied", "failed", "aggregated", "train", "distributed")


@dataclass
class RoundRecord:
    """What happened in one round (one line of rounds.jsonl; see the module docstring)."""

    round: int
    server: dict[str, Any] = field(default_factory=dict)
    sampled: Optional[list[int]] = None
    replied: Optional[list[int]] = None
    failed: Optional[list[int]] = None
    aggregated: Optional[bool] = None
    train: Optional[dict[str, Any]] = None
    distributed: Optional[dict[str, Any]] = None
    reports: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, line: Mapping[str, Any]) -> RoundRecord:
        """A record from one rounds.jsonl line (or the recorder's dict of a round)."""
        names = {f.name for f in fields(cls)} - {"reports", "round"}
        known = {k: v for k, v in line.items() if k in names}
        reports = {k: v for k, v in line.items() if k not in names and k != "round"}
        return cls(round=int(line.get("round", 0)), **{**known, "reports": reports})

    def to_json(self) -> dict[str, Any]:
        """The rounds.jsonl line: fields that were set, and the reports beside them."""
        out = {k: v for k, v in asdict(self).items() if k != "reports" and v is not None}
        return {**out, **self.reports}

    def metric(self, source: str, name: str) -> float:
        """``server`` / ``distributed`` / ``train`` metric ``name`` (nan when absent)."""
        block = getattr(self, source) or {}
        number = from_json_number(block.get(name))
        return math.nan if number is None else number

    def report(self, key: str) -> Optional[float]:
        """A numeric report of a wrapper (e.g. ``dp-sigma``), None when absent."""
        return from_json_number(self.reports.get(key))

    def sigma(self) -> Optional[float]:
        """The round's noise std σ of the global or metric DP wrapper (None: not noised)."""
        return self.report("dp-sigma")

    def epsilon(self) -> Optional[float]:
        """The round's ε so far, as the console states it: global DP's accountant bound
        (``dp-epsilon``), DP-SGD's worst client (``dp-sgd-epsilon-max``), or zonal's
        per-level accountant ε (``zonal.epsilon.level.pld``). None when the mode gives no ε
        (metric DP, IFCA's leakage, no privacy)."""
        for key in ("dp-epsilon", "dp-sgd-epsilon-max"):
            if self.report(key) is not None:
                return self.report(key)
        block: Any = self.reports.get("zonal")
        for name in ("epsilon", "level", "pld"):
            block = block.get(name) if isinstance(block, Mapping) else None
        return from_json_number(block)


def read_round_records(output_dir: str | Path) -> list[RoundRecord]:
    """The round records of a run directory ([] without rounds.jsonl)."""
    return [RoundRecord.from_json(line) for line in read_rounds(output_dir)]


def mean_of(values: Sequence[Any]) -> Optional[float]:
    """Mean of the numbers among ``values`` (None when there are none)."""
    numbers = [n for n in (from_json_number(v) for v in values) if n is not None]
    return float(sum(numbers) / len(numbers)) if numbers else None


@dataclass(frozen=True)
class PrivacyFigures:
    """The privacy figures of one run, as every report shows them.

    ``epsilon`` is a guarantee (None when the mode has none, e.g. metric DP: its ε under the
    Gaussian accountant is for comparison only and is not put here); ``sigma_mean`` and
    ``distance_mean`` are means over the noised rounds.
    """

    mode: str
    bound: Optional[str] = None  # "adjacency; sampling" of ε, or "heuristic, no ε"
    noise_multiplier: Optional[float] = None
    sigma_mean: Optional[float] = None
    distance_mean: Optional[float] = None
    epsilon: Optional[float] = None
    epsilon_rdp: Optional[float] = None
    delta: Optional[float] = None

    KEY = "privacy_figures"

    def to_json(self) -> dict[str, Any]:
        """The summary.json block (non-finite numbers become strings on writing), with
        ``protection``: ``"weak"`` or ``"none"`` for an ε above 10 or 100, else None
        (:mod:`fedpriv.privacy.accounting.strength`)."""
        return {**asdict(self), "protection": protection(self.epsilon)}

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> Optional[PrivacyFigures]:
        """The figures a run's summary.json holds (None for a run without privacy)."""
        block = summary.get(cls.KEY)
        if not isinstance(block, Mapping):
            return None
        texts = ("mode", "bound")
        numbers = {f.name: from_json_number(block.get(f.name)) for f in fields(cls)}
        numbers = {k: v for k, v in numbers.items() if k not in texts}
        bound = block.get("bound")
        return cls(mode=str(block.get("mode", "")), bound=bound and str(bound), **numbers)
