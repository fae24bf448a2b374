"""Feature ``dp``: privacy modes ``global-dp`` and ``metric-dp`` (SPEC §3.1–3.2).

Declares (``FEATURE``):

* privacy mode ``global-dp`` -> :class:`fedpriv.strategies.dp_wrappers.ServerSideFixedClippingDP`
  and ``metric-dp`` -> :class:`fedpriv.strategies.dp_wrappers.MetricDP` around the stock strategy,
  with m = ``num-sampled-clients`` (0: ``clients-per-round``, 0: all ``num-clients``), the
  noise drawn from the ``dp-noise`` stream of :mod:`fedpriv.seeds`, uniform aggregation
  unless ``dp-weighting = examples``, and (global DP) a
  :class:`fedpriv.privacy.dp.GaussianRoundsAccountant` that composes each round's ``DpEvent``
  (``client-sampling`` fixed: replace-one; poisson: add/remove-one), so each round line of
  rounds.jsonl has the headline ε so far with its accountant, adjacency and sampling;
* a summary block adding ``privacy`` to summary.json (with ``unaccounted``: what clients
  sent outside the accounting, only with ``unaccounted-metrics = true``);
* consistency checks (``num-sampled-clients`` <= ``num-clients``; Poisson sampling only
  with a uniform-mean strategy);
* the ``fedpriv epsilon`` command: the privacy figures of a config, no data, no training
  (:func:`fedpriv.privacy.accounting.planning.privacy_plan`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
from fedpriv.scenarios.app.privacy_modes import declare
from fedpriv.scenarios.config.feature import Catalog, Command, Feature
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import ServerRun, server_run
from fedpriv.scenarios.dp.keys import KEYS
from fedpriv.scenarios.zonal.keys import zone_nodes

from fedpriv import seeds
from fedpriv.privacy.disclosure import unaccounted_channels
from fedpriv.privacy.modes import client_budgets as client_budgets_mode
from fedpriv.privacy.modes import dp_ftrl as dp_ftrl_mode
from fedpriv.privacy.modes import dp_sgd as dp_sgd_mode
from fedpriv.privacy.modes import global_dp, metric_dp, mode_of
from fedpriv.reporting.records import PrivacyFigures, mean_of
from fedpriv.spec import RunSpec

# the server-noise modes this feature wraps (their declarations: fedpriv.privacy.modes)
SERVER_NOISE_MODES = (global_dp.MODE, metric_dp.MODE)
DP_MODES = tuple(m.name for m in SERVER_NOISE_MODES)
PRIVACY_BLOCK = "privacy"  # the summary.json block of the server-noise modes

SENSITIVITY_NOTE = (
    "The (epsilon, delta) accounting is of the Gaussian mechanism on the mean of the clipped "
    "client updates (sensitivity C/m uniform; C*w_max with dp-weighting = examples). The noise "
    "is added to that mean BEFORE the server optimizer, so FedAvg, FedAvgM, FedProx, FedOpt and "
    "FedYogi release post-processing of noised means only (their momentum / moments never see "
    "an un-noised aggregate). FedMedian is not a mean: noised after its aggregate, no epsilon."
)
NOT_A_MEAN_STRATEGIES = ("fedmedian",)


def build_dp_wrapper(strategy, run: ServerRun, rng: np.random.Generator):
    """The DP wrapper of the config's privacy mode around the Message-API ``strategy``.

    ``rng`` (the run's sampling Generator) is deliberately not used for the noise. The noise
    Generator is OS entropy unless the run sets ``reproducible-noise`` (then the seeded
    ``dp-noise`` stream, :func:`fedpriv.seeds.privacy_stream`).
    Metric DP gets no accountant: it is a heuristic and reports no ε.
    """
    del rng
    from fedpriv.strategies.dp_wrappers import MetricDP, ServerSideFixedClippingDP

    from fedpriv.privacy.accounting.rounds import global_dp_accountant

    cfg, spec = run.record, run.spec
    common = dict(
        noise_multiplier=float(cfg["noise-multiplier"]),
        clipping_norm=float(cfg["clipping-norm"]),
        num_sampled_clients=spec.participation.noise_clients,
        rng=seeds.privacy_stream(int(spec.seed), "dp-noise", reproducible=spec.reproducible_noise),
        accept_failures=bool(spec.strategy.accept_failures),
        weighting=str(spec.dp_weighting),
    )
    if spec.mode is metric_dp.MODE:
        return MetricDP(
            strategy,
            distance_on=cfg["distance-on"],
            min_distance=float(cfg["min-distance"]),
            **common,
        )
    accountant = global_dp_accountant(
        spec.participation,
        delta=float(cfg["dp-delta"]),
        weighting=str(spec.dp_weighting),
    )
    poisson = cfg["client-sampling"] == "poisson"
    wrapper = ServerSideFixedClippingDP(
        strategy, accountant=accountant, poisson=poisson, max_epsilon=budget_of(cfg), **common
    )
    from fedpriv.scenarios.dp.server_ledger import attach_server_ledger  # Flower: not at --help

    return attach_server_ledger(wrapper, run)


def budget_of(cfg: Mapping[str, Any]) -> float | None:
    """``max-epsilon`` as the wrapper's ``max_epsilon`` (0 in the config: None, no budget)."""
    value = float(cfg.get("max-epsilon", 0.0))
    return value if value > 0 else None


def check_max_epsilon(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """``max-epsilon`` > 0 only where a server-side accountant has an ε to bound: global DP
    around a mean (standard run), and DP-SGD, where it is each client's own lifetime budget
    (the client refuses a participation past it, docs/privacy.md), and a zone node's own
    lifetime budget (``zonal-runtime = zone-nodes``: ``fedpriv.scenarios.zonal.zone_node``). Metric
    DP has no ε; in-server zonal and none: refused."""
    value = float(cfg.get("max-epsilon", 0.0))
    if value == 0:
        return
    allowed = "0 (no budget) unless privacy = global-dp around a mean (not fedmedian)"
    mode = mode_of(cfg)
    if mode is dp_sgd_mode.MODE or zone_nodes(cfg):  # each node's own lifetime budget
        return
    if not mode.budgeted or catalog.kind(cfg) != "standard":
        raise ConfigError(
            "max-epsilon", value, f"{allowed} (privacy = {mode.name}: no server-side epsilon)"
        )
    if cfg["strategy"] in NOT_A_MEAN_STRATEGIES:
        raise ConfigError("max-epsilon", value, f"{allowed}: {cfg['strategy']} has no epsilon")


def check_server_budget(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """``server-max-epsilon`` > 0 only where the server's releases have an ε on its ledger:
    global DP or adaptive clipping around a mean, DP-FTRL (its trees) and client budgets
    (the largest client's), in a standard run."""
    value = float(cfg.get("server-max-epsilon", 0.0))
    if value == 0:
        return
    allowed = ("0 (no budget) unless privacy = global-dp | adaptive-clip | dp-ftrl | "
               "client-budgets around a mean")  # fmt: skip
    mode = mode_of(cfg)
    ledgered = mode.budgeted or mode.name in (dp_ftrl_mode.MODE.name, client_budgets_mode.NAME)
    if not ledgered or catalog.kind(cfg) != "standard":
        raise ConfigError(
            "server-max-epsilon", value, f"{allowed} (privacy = {mode.name}: no server epsilon)"
        )
    if cfg["strategy"] in NOT_A_MEAN_STRATEGIES:
        raise ConfigError("server-max-epsilon", value, f"{allowed}: {cfg['strategy']} is not")


def check_dp_config(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """``num-sampled-clients`` <= ``num-clients``; Poisson sampling needs a uniform mean."""
    if int(cfg["num-sampled-clients"]) > int(cfg["num-clients"]):
        raise ConfigError(
            "num-sampled-clients",
            cfg["num-sampled-clients"],
            f"an integer in [0, num-clients = {cfg['num-clients']}] (0 = clients per round)",
        )
    if cfg["client-sampling"] != "poisson":
        return
    if not mode_of(cfg).poisson or catalog.kind(cfg) != "standard":
        raise ConfigError(
            "client-sampling", "poisson", "fixed unless privacy = none | global-dp (standard run)"
        )
    if cfg["strategy"] not in ("fedavg", "fedprox") or cfg["dp-weighting"] != "uniform":
        raise ConfigError(
            "client-sampling",
            "poisson",
            "fixed unless strategy = fedavg | fedprox with dp-weighting = uniform "
            "(the fixed denominator needs a uniform mean)",
        )


def _noised_rounds(rounds: list[dict]) -> list[dict]:
    return [r for r in rounds if r.get("round", 0) > 0 and r.get("dp-noised")]


def privacy_summary(run: ServerRun, rounds: list[dict]) -> dict:
    """The ``privacy`` block of summary.json (empty for other privacy modes)."""
    from fedpriv.privacy.accounting.rounds import global_dp_epsilon
    from fedpriv.privacy.dp import METRIC_HEURISTIC

    cfg, spec = run.record, run.spec
    declared = spec.mode
    mode, opted = declared.name, spec.unaccounted_metrics
    if declared.summary_key != PRIVACY_BLOCK and declared.selectable:
        # a mode reported in its own block (zonal): here only what left its clients
        return {
            PRIVACY_BLOCK: {"mode": mode, "unaccounted": unaccounted_channels(mode, opted_in=opted)}
        }
    if declared not in SERVER_NOISE_MODES:
        return {}
    trained = [r for r in rounds if r.get("round", 0) > 0]
    noised = _noised_rounds(rounds)
    block: dict[str, Any] = {
        "mode": mode,
        "noise_multiplier": float(cfg["noise-multiplier"]),
        "clipping_norm": float(cfg["clipping-norm"]),
        "num_sampled_clients": spec.participation.noise_clients,
        "clients_per_round": spec.participation.per_round,
        "num_clients": spec.participation.population,
        "client_sampling": cfg["client-sampling"],
        "weighting": spec.dp_weighting,
        "delta": float(cfg["dp-delta"]),
        "sigma_per_round": [r.get("dp-sigma") for r in trained],
        # clip and sample counts are operator-only (operator.jsonl): not here
        "noised_rounds": len(noised),
        "underfilled_rounds": [r["round"] for r in noised if "dp-underfilled" in r],
        "sensitivity_note": SENSITIVITY_NOTE,
        "unaccounted": unaccounted_channels(mode, opted_in=opted),
    }
    if declared is global_dp.MODE and spec.strategy.strategy in NOT_A_MEAN_STRATEGIES:
        from fedpriv.strategies.dp_core import NO_EPSILON_NOT_A_MEAN

        block["guarantee"] = NO_EPSILON_NOT_A_MEAN
        block["epsilon"] = None
        return {"privacy": block, **_figures(cfg, block, None, "no ε: not a mean (FedMedian)")}
    if declared is global_dp.MODE:
        report = global_dp_epsilon(
            [r.get("dp-round-noise-multiplier", r.get("dp-sum-noise-multiplier")) for r in noised],
            spec.participation,
            delta=float(cfg["dp-delta"]),
            weighting=str(spec.dp_weighting),
        )
        block["formula"] = "sigma = z*C/m"
        block["guarantee"] = "(epsilon, delta)-DP, client level (one client's whole update)"
        block["epsilon"] = _epsilon_block(report)
        clients = _last_client_epsilon(trained)
        if clients:
            block["epsilon_per_client"] = clients
        return {"privacy": block, **_figures(cfg, block, report)}
    block["formula"] = "sigma = z*C/(m*d)"
    block["distance_on"] = cfg["distance-on"]
    block["min_distance"] = float(cfg["min-distance"])
    block["distance_per_round"] = [r.get("dp-distance") for r in trained]
    block["distance_measured_per_round"] = [r.get("dp-distance-measured") for r in trained]
    block["fallback_per_round"] = [r.get("dp-fallback") for r in trained]
    block["sigma_lower_bound_per_round"] = [r.get("dp-sigma-lower-bound") for r in trained]
    block["heuristic"] = METRIC_HEURISTIC
    block["guarantee"] = "none (heuristic): no epsilon is reported for metric DP"
    return {"privacy": block, **_figures(cfg, block, None)}


def _figures(
    cfg: Mapping[str, Any], block: Mapping[str, Any], report: Any, no_bound: str = "heuristic, no ε"
) -> dict:
    """The typed figures every report shows (metric DP: a heuristic, no ε)."""
    bound = no_bound
    if report is not None:
        bound = "; ".join(dict.fromkeys(str(report.get(k, "")) for k in ("adjacency", "sampling")))
    figures = PrivacyFigures(
        mode=mode_of(cfg).name,
        bound=bound,
        noise_multiplier=float(cfg["noise-multiplier"]),
        sigma_mean=mean_of(block["sigma_per_round"]),
        distance_mean=mean_of(block.get("distance_per_round", [])),
        epsilon=None if report is None else report.get("epsilon"),
        epsilon_rdp=None if report is None else report.get("epsilon_rdp"),
        delta=float(cfg["dp-delta"]),
    )
    return {PrivacyFigures.KEY: figures.to_json()}


def _last_client_epsilon(trained: list[dict]) -> dict[str, Any]:
    """Per-client ε (examples weighting): each client's latest cumulative figure."""
    out: dict[str, Any] = {}
    for record in trained:
        out.update({str(k): v for k, v in (record.get("dp-client-epsilon") or {}).items()})
    return out


def _epsilon_block(report: Mapping[str, Any]) -> dict[str, Any]:
    def num(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        return value

    keys = ("epsilon", "epsilon_pld", "epsilon_rdp", "delta", "rounds", "headline_from")
    out = {k: num(report.get(k)) for k in keys}
    out.update({k: report.get(k, "") for k in ("accountant", "adjacency", "sampling")})
    return out


def _epsilon_args(parser: argparse.ArgumentParser) -> None:
    from fedpriv.scenarios.cli.launch import add_run_config_option

    add_run_config_option(
        parser, "Flower-style overrides, e.g. \"privacy='global-dp' noise-multiplier=1.1\""
    )
    parser.add_argument(
        "--examples-per-client",
        type=int,
        default=None,
        help="DP-SGD: a client's number of training examples (the config does not know it)",
    )
    parser.add_argument(
        "--target-epsilon",
        default=None,
        metavar="E",
        help="print the smallest noise multiplier whose epsilon is <= E for this config "
        "(global-dp, dp-sgd, zonal; bisection to 0.1%% relative) and that epsilon, one line",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the whole plan as one JSON object (per-round figures, notes, "
        "conditions) instead of its headline",
    )


def _epsilon(args: argparse.Namespace, catalog: Catalog) -> int:
    """``fedpriv epsilon``: the privacy plan's headline (``--json``: the whole plan, one JSON
    object), no data, no training."""
    from fedpriv.scenarios.cli.launch import app_config, parse_overrides

    from fedpriv.privacy.accounting.planning import privacy_plan
    from fedpriv.reporting.plan_text import plan_headline

    try:
        cfg = catalog.resolve_run_config(app_config(parse_overrides(args.run_config)))
    except ConfigError as err:
        print(f"fedpriv: {err}", file=sys.stderr)
        return 2
    spec = server_run(cfg, catalog.kind(cfg)).spec  # a command's boundary: its config, resolved
    if args.target_epsilon is not None:
        return _target(spec, args.target_epsilon, args.examples_per_client)
    plan = privacy_plan(spec, examples_per_client=args.examples_per_client)
    if args.json:
        print(json.dumps(plan, indent=2, sort_keys=True))
        return 0
    print("\n".join(plan_headline(plan)))
    print("(the whole plan, per round: fedpriv epsilon --json)")
    return 0


def _target(spec: RunSpec, text: str, examples: int | None) -> int:
    """``fedpriv epsilon --target-epsilon E``: one JSON line ``{"key", "noise_multiplier",
    "epsilon", ...}`` (:func:`fedpriv.privacy.accounting.target.noise_for_target`), or a one-line
    error and exit status 2."""
    from fedpriv.privacy.accounting.planning import PlanError
    from fedpriv.privacy.accounting.target import noise_for_target

    try:
        target = float(text)
    except ValueError:
        target = math.nan
    if not (math.isfinite(target) and target > 0):
        print(f"fedpriv: --target-epsilon = {text!r} is not allowed; expected a float > 0",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        result = noise_for_target(spec, target, examples_per_client=examples)
    except (PlanError, ValueError) as err:
        print(f"fedpriv: --target-epsilon: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result, sort_keys=True))
    return 0


FEATURE = Feature(
    name="dp",
    description="Server-side global DP (sigma = z*C/m) and metric DP (sigma = z*C/(m*d)).",
    keys=KEYS,
    privacy_modes=tuple(declare(mode, build_dp_wrapper) for mode in SERVER_NOISE_MODES),
    summary=privacy_summary,
    checks=(check_dp_config, check_max_epsilon, check_server_budget),
    commands=(
        Command(
            "epsilon",
            _epsilon_args,
            _epsilon,
            "Compute the privacy figures (noise, ε) of a configuration without training.",
            "fedpriv epsilon -c \"privacy='global-dp' noise-multiplier=1.1\"\n"
            "fedpriv epsilon -c \"privacy='global-dp'\" --json\n"
            "fedpriv epsilon -c \"privacy='global-dp'\" --target-epsilon 8",
        ),
    ),
)
