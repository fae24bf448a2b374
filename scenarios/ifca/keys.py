"""Run-config keys of the IFCA feature (GP Algorithms 1–2, SPEC §3.4), declared in the feature.

- ``num-hypotheses`` — k, the number of hypotheses (k = 1 is FedAvg with a uniform mean).
- ``ifca-noise-multiplier`` — ν of GP Algorithm 2 (ε = n/(ν‖δ‖); leakage n/ν per
  participation). 0 = no sanitization (plain IFCA, no guarantee). A key of its own: DP's
  ``noise-multiplier`` (z of σ = z·C/m) is a different quantity.
- ``users-per-round`` — U, users sampled per round among the training (non-validation) users.
- ``leakage-budget`` — the per-client cap on the summed leakage (GP Thm 3.1); a client declines
  a round that would exceed it. 0 = no budget (TOML has no portable ``inf``).
- ``patience`` — early stopping: rounds without improvement of the mean validation loss.
- ``validation-clients`` — the last V partition ids are held-out validation users (never
  trained, never sanitized); 0 = no validation and no early stopping.
- ``validation-query-budget`` — a held-out validation user's own lifetime cap on the evaluate
  queries it answers (every run, one count per query: ``fedpriv.clients.ifca_client``); past it the
  user refuses in one line; an identical query gets the cached reply. 0 = it answers none.
  Default 500: GP's scenarios ask each validation user once per round (gp-synthetic <= 50
  rounds; ``make ifca-table``: 9 cells x <= 30 rounds = 270).
- ``ifca-sweep`` — several IFCA runs in one simulation (same SuperNodes, one Ray start-up):
  ``"key=value,key=value;key=value"`` (``;`` separates runs, ``,`` separates overrides), e.g.
  ``"ifca-noise-multiplier=0;ifca-noise-multiplier=1"``. '' = one run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedpriv.scenarios.config.schema import KeySpec, integer, real, text

KEYS = (
    KeySpec(
        "num-hypotheses",
        2,
        integer(1, 64),
        "an integer in [1, 64]",
        "k, the number of IFCA hypotheses (1 = FedAvg)",
    ),
    KeySpec(
        "ifca-noise-multiplier",
        0.0,
        real(0),
        "a float >= 0 (0 = no sanitization)",
        "GP noise multiplier nu: epsilon = n/(nu*||delta||), leakage n/nu",
    ),
    KeySpec(
        "users-per-round",
        7,
        integer(1),
        "an integer >= 1 (<= training users)",
        "U, users sampled per IFCA round",
    ),
    KeySpec(
        "leakage-budget",
        0.0,
        real(0),
        "a float >= 0 (0 = no budget)",
        "per-client cap on the summed GP leakage n/nu (a heuristic)",
    ),
    KeySpec(
        "patience",
        6,
        integer(1),
        "an integer >= 1",
        "early stopping: rounds without validation improvement",
    ),
    KeySpec(
        "validation-clients",
        0,
        integer(0),
        "an integer >= 0 (< num-clients)",
        "held-out validation users (the last partition ids)",
    ),
    KeySpec(
        "validation-query-budget",
        500,
        integer(0),
        "an integer >= 0 (0 = answers no query)",
        "a validation user's own lifetime cap on the evaluate queries it answers",
    ),
    KeySpec(
        "ifca-sweep",
        "",
        text,
        "'' or 'key=value,...;key=value,...' (IFCA runs)",
        "several IFCA runs in one simulation",
    ),
)


def _sweep_value(text: str) -> Any:
    """A sweep value: bool (true/false), int, float, or a (possibly quoted) string."""
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip("'\"")


def parse_sweep(text: str) -> list[dict[str, Any]]:
    """``"a=1,b=x;a=2"`` -> ``[{"a": 1, "b": "x"}, {"a": 2}]`` (raises ValueError)."""
    runs = []
    for entry in (e.strip() for e in str(text).split(";")):
        if not entry:
            continue
        overrides = {}
        for item in (i.strip() for i in entry.split(",")):
            key, sep, value = item.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise ValueError(f"{item!r} is not key=value")
            overrides[key.strip()] = _sweep_value(value.strip())
        runs.append(overrides)
    if not runs and str(text).strip():
        raise ValueError("no runs")
    return runs


SWEEP_FORBIDDEN = ("scenario", "num-clients", "output-dir", "ifca-sweep")


def sweep_overrides(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The unresolved config of each run of ``ifca-sweep`` ([] when it is ''): ``cfg`` with
    the run's overrides, ``ifca-sweep = ''`` and ``output-dir/sweep-NN``; raises ValueError
    for a malformed sweep or a forbidden key (:data:`SWEEP_FORBIDDEN`).

    The ServerApp resolves each (``fedpriv.scenarios.ifca.feature.sweep_configs``); a node builds
    the same
    runs from its own config (``fedpriv.scenarios.config.node_spec``)."""
    if not cfg["ifca-sweep"]:
        return []
    out = []
    for i, overrides in enumerate(parse_sweep(cfg["ifca-sweep"])):
        if any(key in SWEEP_FORBIDDEN for key in overrides):
            raise ValueError(f"{sorted(overrides)}: a key out of {SWEEP_FORBIDDEN}")
        out.append(
            {
                **cfg,
                **overrides,
                "ifca-sweep": "",
                "output-dir": f"{cfg['output-dir']}/sweep-{i:02d}",
            }
        )
    return out
