"""Scenario regression baselines: a run's figures, their bands, and the one comparer.

A run is read as flat ``{name: number}`` figures (:func:`run_figures`):

- ``round[i].KEY``: every number of line ``i`` of ``rounds.jsonl`` (nested keys joined with
  ``.``, list items as ``[j]``, bools as 0/1), except wall-clock times;
- ``final.KEY``: the numbers of ``summary.json``'s ``final`` block;
- ``privacy.KEY``: the typed privacy figures
  (:class:`fedpriv.reporting.records.PrivacyFigures`: z, σ, d, ε, ε_RDP, δ).

Runs with sub-runs (IFCA sweeps, zonal comparisons) prefix each figure with the sub-run's
folder, ``<folder>/round[i].KEY``.

Every figure gets a :class:`Band` from its values over the recorded seeds
(:func:`make_band`), by class (:func:`figure_class`):

- ``exact``: figures that do not depend on float training (sampling, replies, rounds, δ, and
  σ, z and ε whenever σ does not scale with a measured distance) must equal the recorded
  value of the SAME seed, to a relative 1e-6;
- ``score`` (accuracy, F1, precision, AUC, attack advantage, in [0, 1]) and ``value``
  (losses, norms, data-dependent σ of metric DP): the seed-spread band
  ``[min - k·s - tol, max + k·s + tol]`` with ``s = max - min`` over the seeds, ``k`` the
  rule's spread factor and ``tol`` its absolute tolerance (scores) or
  ``max(value_floor, value_rel · max|v|)`` (values); a score's band is capped to [0, 1];
- ``choice``: discrete outcomes picked on trained weights (IFCA's cluster of a client, the
  clients clipped by the DP wrapper): a float-level change may flip one; not compared.

:func:`compare` is the only comparer: ``fedpriv baseline check``
(``fedpriv.scenarios.baseline.feature``)
and the repository's own behaviour records (``tests/baseline.py``, one seed, a fixed band
rule) both use it. No Flower import.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fedpriv.reporting.runlog import read_rounds

TIMING_WORDS = ("seconds", "wall", "time", "duration", "elapsed")
REL_TOL = 1e-6
ABS_TOL = 1e-9

# Exact where the figure does not depend on float training (Keras 3 computes the
# same training at float precision with other kernels, and chaotic training amplifies that
# over rounds, so what depends on the trained weights is compared within a band).
EXACT_KEYS = (
    "round", "sampled[", "participants[", "replied[", "sweep-index", "num-zones",
    "dp-delta", "dp-noised", "dp-num-reports", "dp-num-failures", "dp-sgd-participations",
    "leakage_per_participation", "ledger.participations", "ledger.max_participations",
    "ledger.clients", "zonal.epsilon.", "zonal.sigma_", "zonal.supernodes.",
    "zonal.elections[", "zonal.failed_supernodes[", "zonal.offline[", "zonal.replied[",
    "zonal.aggregator_noise_multiplier", "aggregated", "aggregation-skipped",
    "validation.clients", "validation.num-examples", "cia.n_",
)  # fmt: skip
# Outcomes of a discrete choice made on trained weights: a float-level change may flip one.
CHOICE_KEYS = (
    "assignment.", "validation.choices[", "best_round", "since_best", "empty_clusters[",
    "cluster_sizes[", "dp-clipped[", "dp-num-clipped", "zonal.zones.",
)  # fmt: skip
SCORE_WORDS = ("accuracy", "f1_", "precision_", "roc_auc", "auc", "advantage")
# Round-line keys of a privacy figure: exact unless σ scales with a measured distance.
SIGMA_LIKE = ("dp-sigma", "dp-epsilon", "dp-distance")
# privacy.* figures (PrivacyFigures): exact unless the run measured a distance d.
PRIVACY_FIELDS = ("noise_multiplier", "sigma_mean", "distance_mean", "epsilon", "epsilon_rdp",
                  "delta")  # fmt: skip
PRIVACY_EXACT = ("privacy.noise_multiplier", "privacy.delta")


@dataclass(frozen=True)
class BandRule:
    """How wide a seed-spread band is: ``[min - k·s - tol, max + k·s + tol]``, ``s = max - min``.

    ``tol`` is ``score_tol`` for scores in [0, 1] and ``max(value_floor, value_rel · max|v|)``
    for other values.
    """

    spread_factor: float = 1.0
    score_tol: float = 0.02
    value_rel: float = 0.10
    value_floor: float = 0.01

    def tolerance(self, cls: str, values: Sequence[float]) -> float:
        """The absolute tolerance added on each side of the seed range."""
        if cls == "score":
            return self.score_tol
        return max(self.value_floor, self.value_rel * max(abs(v) for v in values))


# The repository's behaviour records (tests/baseline.py): one recorded seed, the bands of
# the Keras 3 stack (scores ± 0.08 absolute; values ± 35 % with a 0.05 floor).
RECORD_RULE = BandRule(spread_factor=0.0, score_tol=0.08, value_rel=0.35, value_floor=0.05)


@dataclass(frozen=True)
class Band:
    """What a figure must be: equal to ``exact`` (same seed), or in ``[lo, hi]``."""

    cls: str
    lo: float = math.nan
    hi: float = math.nan
    exact: float | None = None

    def contains(self, value: float) -> bool:
        """Whether ``value`` passes (NaN passes only a NaN record)."""
        if self.cls == "exact":
            return _close(value, float(self.exact))
        if math.isnan(self.lo) or math.isnan(value):
            return math.isnan(self.lo) and math.isnan(value)
        return self.lo <= value <= self.hi

    def text(self) -> str:
        """``= 1.234`` or ``[0.91, 0.97]`` for a table."""
        if self.cls == "exact":
            return f"= {_fmt(float(self.exact))}"
        return f"[{_fmt(self.lo)}, {_fmt(self.hi)}]"

    def to_json(self) -> dict[str, Any]:
        """JSON form (NaN and infinities as strings)."""
        return {k: _num_out(v) for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Band:
        """Inverse of :meth:`to_json`."""
        exact = doc.get("exact")
        hi = float(doc.get("hi", "nan"))
        return cls(
            cls=str(doc["cls"]),
            lo=float(doc.get("lo", "nan")),
            hi=min(hi, 1.0) if doc["cls"] == "score" else hi,  # records made before the cap
            exact=None if exact is None else float(exact),
        )


@dataclass(frozen=True)
class Verdict:
    """One figure checked: its name, band, value (None: missing) and whether it passed."""

    name: str
    band: Band
    value: float | None
    ok: bool


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _num_out(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def flatten(value: Any, prefix: str, out: dict[str, float]) -> None:
    """Every number below ``value`` into ``out`` as ``{dotted.key[i]: float}``."""
    if isinstance(value, dict):
        for key, item in value.items():
            flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            flatten(item, f"{prefix}[{i}]", out)
    elif isinstance(value, (bool, int, float)):
        out[prefix] = float(value)
    elif isinstance(value, str) and value in ("inf", "-inf", "nan"):
        out[prefix] = float(value)


def _untimed(numbers: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in numbers.items() if not any(w in k for w in TIMING_WORDS)}


def round_metrics(output_dir: str | Path) -> dict[str, list[dict[str, float]]]:
    """Every run below ``output_dir`` (folder relative to it) -> its flat round lines."""
    base = Path(output_dir)
    runs: dict[str, list[dict[str, float]]] = {}
    for path in sorted(base.rglob("rounds.jsonl")):
        lines = read_rounds(path.parent)  # the operator's view: sampled lists, clip flags
        flat = []
        for line in lines:
            numbers: dict[str, float] = {}
            flatten(line, "", numbers)
            flat.append(_untimed(numbers))
        runs[path.parent.relative_to(base).as_posix()] = flat
    return runs


def summary_figures(summary: Mapping[str, Any]) -> dict[str, float]:
    """``final.*`` and ``privacy.*`` figures of one summary.json."""
    from fedpriv.reporting.records import PrivacyFigures

    out: dict[str, float] = {}
    flatten(summary.get("final", {}), "final", out)
    figures = PrivacyFigures.from_summary(dict(summary))
    if figures is not None:
        for name in PRIVACY_FIELDS:
            value = getattr(figures, name, None)
            if value is not None:
                out[f"privacy.{name}"] = float(value)
    return _untimed(out)


def run_figures(output_dir: str | Path) -> dict[str, float]:
    """All figures of a run directory (see the module docstring), in a stable order."""
    base = Path(output_dir)
    out: dict[str, float] = {}
    for path in sorted(base.rglob("summary.json")):
        rel = path.parent.relative_to(base).as_posix()
        prefix = "" if rel == "." else f"{rel}/"
        figures = summary_figures(json.loads(path.read_text()))
        out.update({prefix + k: v for k, v in figures.items()})
    for rel, lines in round_metrics(base).items():
        prefix = "" if rel == "." else f"{rel}/"
        for i, line in enumerate(lines):
            out.update({f"{prefix}round[{i}].{k}": v for k, v in line.items()})
    return out


def _leaf(name: str) -> str:
    """``sub/round[3].server.loss`` -> ``server.loss``; ``final.accuracy`` unchanged."""
    tail = name.rsplit("/", 1)[-1]
    if tail.startswith("round["):
        return tail.split("].", 1)[1]
    return tail


def figure_class(name: str, data_dependent_sigma: bool) -> str:
    """``exact`` | ``score`` | ``value`` | ``choice`` of a figure (module docstring)."""
    key = _leaf(name)
    if key.startswith(CHOICE_KEYS):
        return "choice"
    if key.startswith(EXACT_KEYS) or key.startswith(PRIVACY_EXACT):
        return "exact"
    sigma_like = key.startswith(SIGMA_LIKE) or key.endswith("noise-multiplier")
    sigma_like = sigma_like or (key.startswith("privacy.") and key != "privacy.distance_mean")
    if sigma_like and not data_dependent_sigma:
        return "exact"
    if any(word in key for word in SCORE_WORDS):
        return "score"
    return "value"


def data_dependent(figures: Mapping[str, float], name: str) -> bool:
    """Metric DP: σ (and its comparison ε) scale with the measured model distance d.

    Judged per round line for ``round[i].*`` figures (``dp-distance`` in that line) and per
    summary for ``privacy.*`` (a mean distance recorded).
    """
    head, sep, _ = name.partition("].")
    if sep and "round[" in head:
        return f"{head}].dp-distance" in figures
    prefix = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
    return f"{prefix}privacy.distance_mean" in figures


def make_band(cls: str, values: Sequence[float], rule: BandRule) -> Band:
    """The band of a figure with ``values`` over the seeds (``exact``: the first value;
    callers keep one exact band per seed)."""
    if cls == "exact":
        return Band("exact", exact=float(values[0]))
    if any(math.isnan(v) for v in values):
        return Band(cls)  # NaN record: only NaN passes
    lo, hi = min(values), max(values)
    margin = rule.spread_factor * (hi - lo) + rule.tolerance(cls, values)
    lo, hi = lo - margin, hi + margin
    if cls == "score":  # a score lies in [0, 1]: a band never claims more
        lo, hi = max(lo, 0.0) if min(values) >= 0 else lo, min(hi, 1.0)
    return Band(cls, lo=lo, hi=hi)


def bands_of_runs(runs: Mapping[int, Mapping[str, float]], rule: BandRule) -> dict[str, Any]:
    """Per figure of seeded runs (seed -> figures): ``{"band": ...}`` or, exact figures,
    ``{"exact": {seed: value}}``. Figures missing from a seed's run are left out."""
    seeds = sorted(runs)
    names = [n for n in runs[seeds[0]] if all(n in runs[s] for s in seeds)]
    out: dict[str, Any] = {}
    for name in names:
        cls = figure_class(name, data_dependent(runs[seeds[0]], name))
        if cls == "choice":
            continue
        if cls == "exact":
            out[name] = {"exact": {str(s): _num_out(runs[s][name]) for s in seeds}}
        else:
            out[name] = {"band": make_band(cls, [runs[s][name] for s in seeds], rule).to_json()}
    return out


def band_for_seed(entry: Mapping[str, Any], seed: int) -> Band | None:
    """The band of one recorded figure for ``seed`` (None: an exact figure of another seed)."""
    if "band" in entry:
        return Band.from_json(entry["band"])
    value = entry["exact"].get(str(seed))
    return None if value is None else Band("exact", exact=float(value))


def compare(bands: Mapping[str, Band], actual: Mapping[str, float]) -> list[Verdict]:
    """Every banded figure against ``actual``, in the bands' order (missing: fails)."""
    verdicts = []
    for name, band in bands.items():
        value = actual.get(name)
        ok = value is not None and band.contains(value)
        verdicts.append(Verdict(name, band, value, ok))
    return verdicts


def record_bands(
    expected: Mapping[str, float], rule: BandRule = RECORD_RULE, *, keep: Sequence[str] = ()
) -> dict[str, Band]:
    """Bands of ONE recorded round line (the repository's behaviour records): ``keep``
    prefixes limit the figures compared (empty: all)."""
    dependent = "dp-distance" in expected
    out = {}
    for key, value in expected.items():
        if keep and not key.startswith(tuple(keep)):
            continue
        cls = figure_class(f"round[0].{key}", dependent)
        if cls != "choice":
            out[key] = make_band(cls, [value], rule)
    return out
