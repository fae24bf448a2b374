"""``fedpriv audit``: run a scenario with canary clients and print one JSON audit object.

    fedpriv audit --run-config "privacy='global-dp' noise-multiplier=1.0 num-server-rounds=5"

runs the scenario once (``fedpriv run`` with ``audit-canaries`` = 100 unless given; the
simulation's own output goes to stderr) and prints the run's ``audit.json`` on stdout
(:mod:`fedpriv.scenarios.audit.feature`). Exit status: 0, 2 for a bad config (one line, before
training),
1 when the simulation fails or the audit fails (lower bound above the accountant's ε).

    fedpriv audit --grid --z 0.01 1 3 --out docs/results/audit --run-config "..."

runs the mechanism rows (none, global DP, metric DP raw / clipped) at every z and one DP-SGD
cell, all cells in ONE simulation (:mod:`fedpriv.scenarios.app.multirun`: one progress line per
cell, a
failed cell does not stop the others; a cell whose ``audit.json`` exists is kept, so an
interrupted grid resumes; ``--out`` holds ``plan.json``, ``cells.json`` and ``run.log``), and
writes ``audit.md`` (mechanism rows x accountant ε, estimate, lower bound, MIA TPR@1%FPR,
accuracy; plus the mechanism-level zonal / Laplace audits) and ``audit_epsilon_vs_z.png``
(:mod:`fedpriv.audit.report`) under ``--out``; ``--report-only`` rebuilds them from the
cells' ``audit.json`` files.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from fedpriv.scenarios.app import multirun, quiet
from fedpriv.scenarios.cli.launch import (
    add_federation_option,
    add_run_config_option,
    app_config,
    check_unique_keys,
    parse_overrides,
    preflight,
    run_config_text,
    simulate,
)
from fedpriv.scenarios.cli.ray_cluster import Federation, federation_of
from fedpriv.scenarios.config.feature import Catalog
from fedpriv.scenarios.config.schema import ConfigError

from fedpriv.privacy.modes import adaptive_clip, dp_sgd, global_dp, metric_dp, none
from fedpriv.reporting.records import mean_of, read_round_records

# the audited mechanisms that are privacy modes carry the mode's registered name
NO_DP, GLOBAL_DP, METRIC_DP, DP_SGD, ADAPTIVE_CLIP = (
    m.MODE.name for m in (none, global_dp, metric_dp, dp_sgd, adaptive_clip)
)
AUDIT_NAME = "audit.json"
DEFAULT_CANARIES = 100
DPSGD_Z = 1.1  # the DP-SGD MNIST tutorial value (Abadi et al.), the dp-sgd default
MECHANISMS = (
    "zonal-ldp", "zonal-hdp", "zonal-cdp", "ifca-laplace", GLOBAL_DP, DP_SGD, METRIC_DP,
    ADAPTIVE_CLIP,
)  # fmt: skip
# fedpriv.audit.planted: PLANTED (global-dp) and DPSGD_PLANTED (dp-sgd);
# fedpriv.audit.adaptive_clip_mechanism.PLANTED (adaptive-clip)
PLANTED_BUGS = (
    "count-noiseless", "fixed-batches", "no-clipping", "noise-halved", "public-seed",
    "sigma-2m", "update-at-z",
)  # fmt: skip
PLANTED_FOR = {  # every other bug: global-dp
    "fixed-batches": DP_SGD, "count-noiseless": ADAPTIVE_CLIP, "update-at-z": ADAPTIVE_CLIP,
}  # fmt: skip
ZONAL_BUDGET = {"num_canaries": 2000, "block": 2}  # orthogonal canaries
GRID_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    (NO_DP, {"privacy": NO_DP}),
    (GLOBAL_DP, {"privacy": GLOBAL_DP}),
    (f"{METRIC_DP} raw", {"privacy": METRIC_DP, "distance-on": "raw"}),
    (f"{METRIC_DP} clipped", {"privacy": METRIC_DP, "distance-on": "clipped"}),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fedpriv audit``."""
    add_run_config_option(parser, "settings of the audited run, e.g. \"privacy='global-dp'\"")
    add_federation_option(parser)
    parser.add_argument(
        "--grid", action="store_true", help="audit every mechanism at every --z value"
    )
    parser.add_argument(
        "--z", nargs="+", type=float, default=[0.01, 1.0, 3.0], help="noise multipliers"
    )
    parser.add_argument("--out", default="reports/audit", help="folder of the audit report")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the report from finished audits"
    )
    parser.add_argument(
        "--mechanism",
        choices=MECHANISMS,
        help="mechanism-level audit without training (zonal placements, GP Laplace); "
        "one JSON object per --z value (global-dp: the clipped Gaussian with 50000 canaries, "
        "m = N = 100, num-server-rounds rounds; dp-sgd: Poisson DP-SGD at --z (replace-one; "
        "the planted bug shows at --z 2), q = 0.001, "
        "one epoch, 50000 Dirac canaries; metric-dp: MP's settings (C = 5, m = 4, raw d; "
        "num-server-rounds, default 20; distance-on from --run-config); adaptive-clip: one "
        "mechanism copy per canary, 50000 canaries, m = N = 100, clipped-count-stddev "
        "(default 5) and num-server-rounds (default 6) from --run-config; exit 1 if the "
        "bound exceeds the accountant)",
    )
    parser.add_argument(
        "--planted",
        choices=PLANTED_BUGS,
        help="with --mechanism global-dp (fixed-batches: dp-sgd; count-noiseless, "
        "update-at-z: adaptive-clip): audit a version with this known error",
    )


def _overrides(items: list[str]) -> dict[str, Any]:
    values = parse_overrides(items)
    values.setdefault("audit-canaries", DEFAULT_CANARIES)
    return values


def run_one(
    values: dict[str, Any], federation: Federation, catalog: Catalog
) -> tuple[int, dict[str, Any] | None]:
    """One audited simulation; (exit status, audit dict or None)."""
    from fedpriv.data import DataError

    try:
        cfg = preflight(app_config(values), catalog)
    except (ConfigError, DataError) as err:
        print(f"fedpriv: {err}", file=sys.stderr)
        return 2, None
    # a directory holding another config is refused by preflight; a finished run of this
    # config is not re-run and its audit.json is the answer
    audit_path = Path(cfg["output-dir"]) / AUDIT_NAME
    rc = simulate(
        cfg,
        [run_config_text(values)],
        federation,
        log_path=Path(cfg["output-dir"]) / quiet.LOG_NAME,  # the full log; the console: ours
        show=quiet.is_console_line,
        to_stderr=True,
    )
    if rc != 0 or not audit_path.exists():
        print("fedpriv audit: the simulation ended without an audit.json", file=sys.stderr)
        return 1, None
    return 0, json.loads(audit_path.read_text())


def global_dp_audit(z: float, rounds: int, planted_bug: str | None = None) -> dict[str, Any]:
    """:mod:`fedpriv.audit.global_dp_mechanism` at z and T (optionally a planted bug)."""
    from fedpriv.audit import global_dp_mechanism as gdm
    from fedpriv.audit import planted

    cfg = gdm.MUST_SHOW.with_(noise_multiplier=z, rounds=rounds)
    simulate = planted.PLANTED[planted_bug] if planted_bug else gdm.simulate_releases
    out = gdm.audit(cfg, simulate=simulate, view=planted.VIEWS.get(planted_bug or ""))
    claimed = out["accountant_epsilon"]
    failed = any(out[v]["best"] > claimed for v in ("white-box", "final-model"))
    out["accountant_epsilon"] = claimed if math.isfinite(claimed) else "inf"
    return {"row": GLOBAL_DP, "z": z, "planted": planted_bug, **out, "audit_failed": failed}


def dpsgd_audit(z: float, planted_bug: str | None = None) -> dict[str, Any]:
    """:mod:`fedpriv.audit.dpsgd_mechanism` at z: Poisson batches, or the planted bug's."""
    from fedpriv.audit import dpsgd_mechanism as dm
    from fedpriv.audit import planted

    schedule = planted.DPSGD_PLANTED[planted_bug] if planted_bug else "poisson"
    out = dm.audit(dm.FIXED_BATCHES.with_(noise_multiplier=z), schedule=schedule)
    return {"row": DP_SGD, "z": z, "planted": planted_bug, **out}


def adaptive_clip_audit(
    z: float, rounds: int, count_stddev: float, planted_bug: str | None = None
) -> dict[str, Any]:
    """:mod:`fedpriv.audit.adaptive_clip_mechanism` at z, σ_b and T (optionally a planted bug)."""
    from fedpriv.audit import adaptive_clip_mechanism as am

    cfg = am.MUST_SHOW.with_(noise_multiplier=z, rounds=rounds, count_stddev=count_stddev)
    return {"row": ADAPTIVE_CLIP, "z": z, **am.audit(cfg, planted=planted_bug or "")}


def metric_dp_audit(z: float, rounds: int, distance_on: str) -> dict[str, Any]:
    """:mod:`fedpriv.audit.metric_dp_mechanism` at MP's settings with z and T (no ε claimed)."""
    from fedpriv.audit import metric_dp_mechanism as mm

    cfg = mm.MP_SETTINGS.with_(noise_multiplier=z, rounds=rounds)
    return {"row": METRIC_DP, "z": z, **mm.audit(cfg, distance_on=distance_on)}


def mechanism_audit(name: str, z: float, rounds: int) -> dict[str, Any]:
    """One mechanism-level audit (:mod:`fedpriv.audit.mechanism_audits`); z is ν for Laplace."""
    from fedpriv.audit import mechanism_audits as ma

    if name == GLOBAL_DP:
        return global_dp_audit(z, rounds)
    if name == DP_SGD:
        return dpsgd_audit(z)
    if name == "ifca-laplace":
        return {"row": name, "z": z, **ma.audit_laplace_sanitizer(noise_multiplier=z)}
    placement = name.split("-")[1]
    out = ma.audit_zonal_mechanism(
        placement=placement, noise_multiplier=z, rounds=rounds, **ZONAL_BUDGET
    )
    return {"row": name, "z": z, **out}


def audit_command(args: argparse.Namespace, catalog: Catalog) -> int:
    """``fedpriv audit`` (module docstring)."""
    try:
        check_unique_keys(args.run_config)
    except ConfigError as err:
        print(f"fedpriv: {err}", file=sys.stderr)
        return 2
    if args.mechanism:
        return _mechanisms(args)
    if args.grid or args.report_only:
        return _grid(args, catalog)
    rc, audit = run_one(_overrides(args.run_config), federation_of(args), catalog)
    if audit is None:
        return rc
    print(json.dumps(audit, sort_keys=False))
    if audit.get("audit_failed"):
        print(
            "fedpriv audit: FAILED — the empirical lower bound exceeds the accountant's "
            "upper bound (a bug in the mechanism or the accounting)",
            file=sys.stderr,
        )
        return 1
    return 0


def _mechanisms(args: argparse.Namespace) -> int:
    """``--mechanism``: one JSON line per z; 1 if a global-DP or DP-SGD audit fails, 2 for a
    bad flag."""
    wanted = PLANTED_FOR.get(args.planted, GLOBAL_DP)
    values = parse_overrides(args.run_config)
    distance_on = str(values.get("distance-on", "raw"))
    if args.planted and args.mechanism != wanted:
        error = f"--planted = {args.planted!r} is not allowed with --mechanism {args.mechanism}"
        error += f"; expected --mechanism {wanted}"
    elif distance_on not in ("raw", "clipped"):
        error = str(ConfigError("distance-on", distance_on, "raw | clipped"))
    else:
        error = ""
    if error:
        print(f"fedpriv: {error}", file=sys.stderr)
        return 2
    default_rounds = {METRIC_DP: 20, ADAPTIVE_CLIP: 6}.get(args.mechanism, 5)
    rounds = int(values.get("num-server-rounds", default_rounds))
    failed = False
    for z in args.z:
        if args.mechanism == ADAPTIVE_CLIP:
            sigma_b = float(values.get("clipped-count-stddev", 5.0))
            try:
                out = adaptive_clip_audit(z, rounds, sigma_b, args.planted)
            except ValueError as err:  # z >= 2*sigma_b: no z_update (one line)
                print(f"fedpriv: {err}", file=sys.stderr)
                return 2
        else:
            out = _one_mechanism(args.mechanism, z, rounds, args.planted, distance_on)
        failed = failed or bool(out.get("audit_failed"))
        print(json.dumps(out))
    return 1 if failed else 0


def _one_mechanism(
    name: str, z: float, rounds: int, planted_bug: str | None, distance_on: str
) -> dict[str, Any]:
    if name == METRIC_DP:
        return metric_dp_audit(z, rounds, distance_on)
    if name == DP_SGD:
        return dpsgd_audit(z, planted_bug)
    if name == GLOBAL_DP:
        return global_dp_audit(z, rounds, planted_bug)
    return mechanism_audit(name, z, rounds)


def _noise_per_round(cell_dir: Path) -> dict[str, Any]:
    """Mean σ and metric DP's d over the trained rounds of a cell (its round records)."""
    trained = [r for r in read_round_records(cell_dir) if r.round > 0]
    if not trained:
        return {}
    return {
        f"{name}_mean": mean_of([r.report(f"dp-{name}") or None for r in trained])
        for name in ("sigma", "distance")
    }


def grid_cells(z_values: list[float]) -> list[tuple[str, float, dict[str, Any]]]:
    """(row label, z, overrides) of the grid; the no-privacy row once (z does not apply) and
    one DP-SGD cell with example canaries at its default z."""
    cells = [(NO_DP, 0.0, dict(GRID_ROWS[0][1]))]
    for label, values in GRID_ROWS[1:]:
        cells += [(label, z, {**values, "noise-multiplier": z}) for z in z_values]
    dpsgd = {"privacy": DP_SGD, "noise-multiplier": DPSGD_Z}
    return cells + [(f"{DP_SGD} (example canaries)", DPSGD_Z, dpsgd)]


def cell_dir(out: Path, label: str, z: float) -> Path:
    """The run directory of a grid cell."""
    return out / "runs" / f"{re.sub(r'[^A-Za-z0-9.]+', '-', label).strip('-')}-z{z:g}"


def _run_grid(
    out: Path,
    cells: list[tuple[str, float, dict[str, Any]]],
    federation: Federation,
    catalog: Catalog,
) -> int:
    """The cells without an ``audit.json`` (a finished cell is kept: resume), all in ONE
    simulation (:func:`fedpriv.scenarios.app.multirun.launch_plan`: one progress line per cell); 2
    when
    a cell's config or data is bad (checked before training)."""
    from fedpriv.clients.partitions import federated_data

    from fedpriv.data import DataError

    todo, top = [], {}
    try:
        for label, z, values in cells:
            path = cell_dir(out, label, z)
            if not (path / AUDIT_NAME).exists():
                cfg = preflight(app_config({**values, "output-dir": str(path)}), catalog)
                todo.append(multirun.Cell(f"{label} z={z:g}", cfg))
                top = top or values  # the simulation's own config: a valid cell's
    except (ConfigError, DataError) as err:
        print(f"fedpriv: {err}", file=sys.stderr)
        return 2
    federated_data.cache_clear()  # the simulation loads the data in its own processes
    if todo:
        rc = multirun.launch_plan(out, todo, top, federation, catalog)
        if rc:
            print(f"fedpriv audit --grid: the simulation exited with {rc}", file=sys.stderr)
    return 0


def _grid(args: argparse.Namespace, catalog: Catalog) -> int:
    from fedpriv.audit.report import audit_grid_report

    out = Path(args.out)
    base = _overrides(args.run_config)
    cells = [(label, z, {**base, **values}) for label, z, values in grid_cells(list(args.z))]
    if not args.report_only and _run_grid(out, cells, federation_of(args), catalog) == 2:
        return 2
    results = []
    for label, z, _ in cells:
        path = cell_dir(out, label, z)
        if (path / AUDIT_NAME).exists():
            cell = {"row": label, "z": z, **json.loads((path / AUDIT_NAME).read_text())}
            results.append({**cell, **_noise_per_round(path)})
    if not results:
        print("fedpriv audit --grid: no cell produced an audit.json", file=sys.stderr)
        return 1
    rounds = int(base.get("num-server-rounds", 5))
    mechanisms = [mechanism_audit(m, z, rounds) for m in MECHANISMS[:3] for z in args.z]
    mechanisms += [mechanism_audit("ifca-laplace", nu, 1) for nu in (1.0, 5.0, 20.0)]
    text = audit_grid_report(results, out, settings=base, mechanisms=mechanisms)
    print(text)
    return 1 if any(r.get("audit_failed") for r in results) else 0
