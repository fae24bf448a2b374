"""``fedpriv attack cia | dlg | membership``: the attack reports (MP §5, GP Fig. 5, HDP Table IV).

``cia`` runs (or reports from) a grid of CIA runs, one ``fedpriv run`` per (strategy, privacy)
cell, skipping finished cells; ``dlg`` runs the DLG reconstruction experiments; ``membership``
runs a loss-threshold membership inference on finished runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedpriv.scenarios.app import multirun, quiet
from fedpriv.scenarios.cli.launch import (
    add_federation_option,
    add_run_config_option,
    app_config,
    parse_overrides,
)
from fedpriv.scenarios.cli.ray_cluster import federation_of
from fedpriv.scenarios.config.feature import Catalog, Command
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import run_spec

from fedpriv.names import STRATEGIES as STRATEGY_NAMES
from fedpriv.privacy.modes import global_dp, metric_dp, none
from fedpriv.privacy.modes.registry import selected
from fedpriv.spec import RunSpec

CIA_KIND = "cia"
PRIVACY_GRID = tuple(mode.name for mode in (none.MODE, global_dp.MODE, metric_dp.MODE))
DLG_MODELS = ("dlg-cnn", "digits-cnn", "digits-mlp")


def _csv(text: str) -> list[str]:
    return [t.strip() for t in str(text).split(",") if t.strip()]


def _floats(name: str, text: str) -> list[float]:
    try:
        values = [float(t) for t in _csv(text)]
    except ValueError:
        raise ValueError(
            f"{name} = {text!r} is not allowed; expected comma-separated numbers"
        ) from None
    if any(not v >= 0 for v in values):
        raise ValueError(f"{name} = {text!r} is not allowed; expected numbers >= 0")
    return values


def _attack_args(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="attack", required=True)
    cia = sub.add_parser("cia", help="client inference attack grid (MP Tables 9-11, D.13-D.16)")
    cia.add_argument(
        "--run-dir",
        nargs="*",
        default=None,
        help="report from finished CIA run directories instead of running",
    )
    cia.add_argument(
        "--scenario", default="cia", help="a scenario of kind cia (cia, cia-alzheimer, cia-digits)"
    )
    cia.add_argument("--strategies", default=",".join(STRATEGY_NAMES))
    cia.add_argument("--privacy", default=",".join(PRIVACY_GRID))
    add_run_config_option(cia, "Flower-style overrides for every cell")
    cia.add_argument("--runs-root", default="runs/cia", help="one run directory per cell")
    add_federation_option(cia)
    cia.add_argument("--out", default="reports/cia")
    dlg = sub.add_parser("dlg", help="DLG reconstruction (GP Fig. 5, HDP Table IV)")
    dlg.add_argument("--model", default="dlg-cnn", help=" | ".join(DLG_MODELS))
    dlg.add_argument("--images", type=int, default=4, help="examples attacked (Laplace)")
    dlg.add_argument("--nu", default="0.001,0.01,0.1,1,10", help="Laplace noise multipliers")
    dlg.add_argument(
        "--zonal-z",
        default="0.003,0.01,0.03",
        help="zonal noise multipliers ('' = skip the zonal experiment)",
    )
    dlg.add_argument("--groups", type=int, default=2, help="zonal groups of 4 clients")
    dlg.add_argument("--learning-rate", type=float, default=0.1)
    dlg.add_argument("--max-iter", type=int, default=300)
    dlg.add_argument("--seed", type=int, default=0)
    dlg.add_argument("--out", default="reports/dlg")
    mem = sub.add_parser("membership", help="loss-threshold membership inference on runs")
    mem.add_argument("--run-dir", nargs="+", required=True)
    mem.add_argument("--out", default="reports/membership")
    mem.add_argument(
        "--lira-references",
        type=int,
        default=0,
        help="also run offline LiRA with this many reference models (0 = off; >= 2)",
    )
    mem.add_argument("--lira-epochs", type=int, default=10)


def _attack(args: argparse.Namespace, catalog: Catalog) -> int:
    handlers = {
        "cia": lambda a: _attack_cia(a, catalog),
        "dlg": _attack_dlg,
        "membership": _attack_membership,
    }
    try:
        return handlers[args.attack](args)
    except (ValueError, ConfigError) as err:  # DataError is a ValueError
        print(f"fedpriv attack {args.attack}: {err}", file=sys.stderr)
        return 2


# --- cia ---------------------------------------------------------------------------------


def _cell_overrides(args: argparse.Namespace, strategy: str, privacy: str) -> list[str]:
    root = Path(args.runs_root)
    item = (
        f"scenario='{args.scenario}' strategy='{strategy}' privacy='{privacy}' "
        f"output-dir='{root / f'{strategy}-{privacy}'}'"
    )
    return [*args.run_config, item]


def plan_cia_grid(
    args: argparse.Namespace, catalog: Catalog
) -> list[tuple[str, str, dict[str, Any]]]:
    """Resolve and check every cell before anything runs (one-line error on the first bad one)."""
    if catalog.scenario(args.scenario).kind != CIA_KIND:
        raise ConfigError(
            "scenario",
            args.scenario,
            "a scenario of kind cia: "
            + " | ".join(sorted(s.name for s in catalog.scenarios.values() if s.kind == CIA_KIND)),
        )
    cells = []
    for strategy in _csv(args.strategies):
        for privacy in _csv(args.privacy):
            overrides = parse_overrides(_cell_overrides(args, strategy, privacy))
            cfg = catalog.resolve_run_config(app_config(overrides))
            cells.append((strategy, privacy, cfg))
    if not cells:
        raise ValueError("--strategies/--privacy select no cell; expected at least one each")
    return cells


def cia_complete(cfg: Mapping[str, Any]) -> bool:
    """A cell whose cia.json records the same values for every key it recorded.

    ``local-epochs`` is not compared (the runner replaces it by ``cia-local-epochs``); keys
    added to the registry after the run was made are not in the record and are not compared.
    """
    path = Path(cfg["output-dir"]) / "cia.json"
    if not path.exists():
        return False
    try:
        done = json.loads(path.read_text()).get("config", {})
    except ValueError:
        return False
    return bool(done) and all(
        done[k] == v for k, v in cfg.items() if k in done and k != "local-epochs"
    )


def _attack_cia(args: argparse.Namespace, catalog: Catalog) -> int:
    from fedpriv.attacks.report import cia_report, plot_cia_auc

    t0 = time.time()
    failed: list[str] = []
    if args.run_dir:
        dirs = [Path(d) for d in args.run_dir]
    else:
        cells = plan_cia_grid(args, catalog)
        dirs = [Path(cfg["output-dir"]) for _, _, cfg in cells]
        todo = []
        for strategy, privacy, cfg in cells:
            if cia_complete(cfg):
                print(
                    f"fedpriv attack cia: {strategy} / {privacy}: finished run in "
                    f"{cfg['output-dir']}, skipped (delete it to re-run)",
                    flush=True,
                )
            else:
                todo.append(multirun.Cell(f"{strategy}/{privacy}", cfg))
        if todo:
            top = {"scenario": args.scenario, "num-clients": todo[0].cfg["num-clients"]}
            top.update(parse_overrides(args.run_config))
            rc = multirun.launch_plan(Path(args.runs_root), todo, top, federation_of(args), catalog)
            failed = [c.label for c in todo if not cia_complete(c.cfg)]
            if rc:
                print(f"fedpriv attack cia: the simulation exited with {rc}", file=sys.stderr)
    cells_doc = []
    for d in dirs:
        path = d / "cia.json"
        if not path.exists():
            if args.run_dir:
                raise ValueError(
                    f"run directory {str(d)!r} has no cia.json; expected the "
                    "output-dir of a finished CIA run (scenario kind cia)"
                )
            continue
        cells_doc.append(json.loads(path.read_text()))
    if not cells_doc:
        print("fedpriv attack cia: no finished CIA run to report", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = cia_report(
        cells_doc, title=f"Client inference attack ({cells_doc[0]['info']['dataset']})"
    )
    text += f"\nTotal wall time of this command: {time.time() - t0:.0f} s.\n"
    if failed:
        text += "\nFailed cells: " + ", ".join(failed) + "\n"
    (out / "cia.md").write_text(text)
    plot_cia_auc(cells_doc, out / "cia_auc.png")
    print(text)
    print(f"fedpriv attack cia: wrote {out / 'cia.md'} and {out / 'cia_auc.png'}")
    return 1 if failed else 0


# --- dlg ---------------------------------------------------------------------------------


def dlg_model(name: str, *, input_shape: tuple[int, ...], num_classes: int, seed: int):
    """The model DLG attacks: ``dlg-cnn`` (sigmoid CNN) or a fedpriv image classifier.

    Raises a one-line ValueError for a model that is not an image classifier on digits
    (``linear``, ``mp-cnn`` which takes 128×128 images, or an unknown name).
    """
    if name not in DLG_MODELS:
        raise ValueError(
            f"model = {name!r} is not allowed; DLG needs an image classifier of 8x8 digits: "
            + " | ".join(DLG_MODELS)
        )
    from fedpriv.attacks.dlg import build_dlg_cnn, check_image_model

    if name == "dlg-cnn":
        model = build_dlg_cnn(input_shape=input_shape, num_classes=num_classes, seed=seed)
    else:
        from fedpriv.models import build_model

        model = build_model(name, input_shape=input_shape, num_classes=num_classes, seed=seed)
    check_image_model(model)
    return model


def _distinct_labels(order: Sequence[int], y, count: int) -> list[int]:
    """The first ``count`` indices of ``order`` with pairwise distinct labels (then repeats)."""
    seen: set[int] = set()
    first = []
    for i in order:
        if int(y[i]) not in seen:
            seen.add(int(y[i]))
            first.append(int(i))
    extra = [int(i) for i in order if int(i) not in set(first)]
    return (first + extra)[:count]


def _attack_dlg(args: argparse.Namespace) -> int:
    if args.model not in DLG_MODELS:  # before TensorFlow is imported
        raise ValueError(
            f"model = {args.model!r} is not allowed; DLG needs an image classifier of 8x8 "
            "digits: " + " | ".join(DLG_MODELS)
        )
    if args.images < 1 or args.groups < 0:
        raise ValueError(
            f"images = {args.images}, groups = {args.groups}: expected images >= 1 and groups >= 0"
        )
    nus = _floats("nu", args.nu)
    zs = _floats("zonal-z", args.zonal_z) if args.zonal_z else []
    quiet.configure_process()  # TensorFlow's start-up notices off (FEDPRIV_LOG=debug: on)
    import numpy as np

    from fedpriv.attacks import dlg
    from fedpriv.attacks.report import (
        dlg_laplace_table,
        dlg_zonal_table,
        plot_reconstructions,
    )
    from fedpriv.data.digits import load_digits_arrays

    dlg.tensorflow_backend()  # one line naming KERAS_BACKEND on JAX, before any work
    t0 = time.time()
    x, y = load_digits_arrays()
    model = dlg_model(args.model, input_shape=(8, 8, 1), num_classes=10, seed=args.seed)
    order = [int(i) for i in np.random.default_rng(args.seed).permutation(len(y))]
    picked = _distinct_labels(order, y, args.images)
    rest = [i for i in order if i not in set(picked)]
    groups = [_distinct_labels(rest[40 * g : 40 * (g + 1)], y, 4) for g in range(args.groups)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# DLG reconstruction (digits, model {args.model}, {model.count_params()} params)",
        "",
        f"One SGD step (batch 1, lr {args.learning_rate}) from the initial weights; the "
        "attacker infers g = −δ/lr and matches it with L-BFGS (box [0, 1]). "
        "SSIM: Gaussian window σ = 1.5 (Wang et al. 2004); PSNR in dB; LPIPS is not "
        "available (needs downloaded weights). Mean ± std over the examples.",
        "",
    ]
    attacker = {"learning_rate": args.learning_rate, "seed": args.seed, "model": model}
    t = time.time()
    rows, images = dlg.laplace_experiment(
        x, y, indices=picked, nus=nus, max_iter=args.max_iter, **attacker
    )
    lines += [
        "## Laplace sanitization (GP §4.3, Fig. 5; per-layer sanitize_laplace)",
        "",
        dlg_laplace_table(rows),
        "",
        f"({time.time() - t:.0f} s)",
        "",
    ]
    plot_reconstructions(
        x[picked],
        images,
        out / "dlg_laplace.png",
        title="DLG vs Laplace noise multiplier ν",
    )
    doc: dict[str, Any] = {"laplace": rows}
    if zs and args.groups > 0:
        t = time.time()
        zrows, zimages = dlg.zonal_experiment(
            x, y, groups=groups, zs=zs, max_iter=max(args.max_iter, 500), **attacker
        )
        lines += [
            "## Level-0 adversary, zonal aggregation (HDP §VII-B, Table IV shape)",
            "",
            "s = 2 zones, k = 4 clients (batch 1 each); the adversary (client 0) subtracts "
            "its own contribution from the noisy global update and matches the rest with 3 "
            "dummies; score = the target's (client 1) best-matching dummy. Noise "
            "σ = z·C/W at the level that adds it (LDP W = 1, HDP W = clients per zone, "
            "CDP W = k); C = the largest update norm (no clipping).",
            "",
            dlg_zonal_table(zrows, "ssim"),
            "",
            dlg_zonal_table(zrows, "psnr"),
            "",
            f"({time.time() - t:.0f} s)",
            "",
        ]
        originals = x[[g[1] for g in groups]]
        plot_reconstructions(
            originals,
            zimages,
            out / "dlg_zonal.png",
            title="Level-0 DLG on the zonal aggregate (target = client 1)",
        )
        doc["zonal"] = zrows
    lines.append(f"Total wall time: {time.time() - t0:.0f} s.")
    from fedpriv.reporting.runlog import to_jsonable

    (out / "dlg.md").write_text("\n".join(lines) + "\n")
    (out / "dlg.json").write_text(json.dumps(to_jsonable(doc), indent=2))
    print("\n".join(lines))
    print(f"fedpriv attack dlg: wrote {out / 'dlg.md'} and PNGs in {out}")
    return 0


# --- membership ---------------------------------------------------------------------------


def _attack_membership(args: argparse.Namespace) -> int:
    dirs = [Path(d) for d in args.run_dir]
    for d in dirs:  # every input checked before any model is loaded
        if not (d / "summary.json").exists():
            raise ValueError(
                f"run directory {str(d)!r} has no summary.json; expected the "
                "output-dir of a finished `fedpriv run`"
            )
    quiet.configure_process()  # TensorFlow's start-up notices off (FEDPRIV_LOG=debug: on)
    from fedpriv.attacks.membership import membership_from_run
    from fedpriv.attacks.report import membership_report

    specs = [recorded_spec(d) for d in dirs]
    results = [membership_from_run(d, spec) for d, spec in zip(dirs, specs)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = membership_report(results)
    curves = {
        f"{r.get('strategy')} {selected(r)} s{r.get('seed')}": (
            r["roc"]["fpr"],
            r["roc"]["tpr"],
        )
        for r in results
    }
    if args.lira_references:
        text += _lira_section(args, dirs, specs, results, curves)
    (out / "membership.md").write_text(text)
    from fedpriv.reporting.plots import plot_roc

    plot_roc(curves, out / "membership_roc_log.png", title="membership", log_scale=True)
    print(text)
    print(f"fedpriv attack membership: wrote {out / 'membership.md'}")
    return 0


def recorded_spec(run_dir: Path) -> RunSpec:
    """The :class:`fedpriv.spec.RunSpec` of a finished run, from the config its
    ``summary.json`` records."""
    from fedpriv.attacks.membership import read_run_config

    return run_spec(read_run_config(run_dir))


def _lira_section(
    args, dirs: list[Path], specs: list[RunSpec], results: list[dict], curves: dict
) -> str:
    """Offline LiRA on every run (``fedpriv.audit.lira``): AUC and TPR at low FPR, ROC curves."""
    from fedpriv.audit.lira import lira_from_run

    text = "\n## Offline LiRA (reference models)\n\n"
    for d, spec, r in zip(dirs, specs, results):
        lira = lira_from_run(d, spec, references=args.lira_references, epochs=args.lira_epochs)
        text += (
            f"- {d}: AUC {lira['auc']:.3f}, TPR@1%FPR {lira['tpr_at_1pct_fpr']:.3f}, "
            f"TPR@0.1%FPR {lira['tpr_at_0.1pct_fpr']:.3f} ({args.lira_references} reference "
            f"models x {args.lira_epochs} epochs on half the server validation split)\n"
        )
        curves[f"LiRA {selected(r)} s{r.get('seed')}"] = (
            lira["roc"]["fpr"],
            lira["roc"]["tpr"],
        )
    return text


ATTACK_COMMAND = Command(
    "attack",
    _attack_args,
    _attack,
    "Attack trained models (client inference, gradient inversion, membership) and report.",
    "fedpriv attack cia --strategies fedavg --privacy none,metric-dp\n"
    "fedpriv attack membership --run-dir runs/digits-fedavg-metric-dp-s0",
)
