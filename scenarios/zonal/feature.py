"""Feature ``zonal``: super-node aggregation — scenario, runner, wrapper (SPEC §3.5, HDP).

- ``privacy = "zonal"`` plugs :class:`fedpriv.strategies.zonal.ZonalAggregation` around the stock
  strategy of the standard run (privacy mode ``zonal``), e.g.
  ``fedpriv run -c "privacy='zonal' noise-placement='hdp' num-zones=2"``.
- Runtime (``zonal-runtime``). ``zone-nodes`` (default): one Flower SuperNode per
  zone (:class:`fedpriv.scenarios.nodes.federation.ZoneGrid`,
  :class:`fedpriv.strategies.zonal_nodes.ZoneNodeAggregation`,
  client task ``zone-node`` in :mod:`fedpriv.scenarios.zonal.zone_node`): the server sends each
  zone node
  one message (global arrays, its sampled client ids, level, super-node); the node trains them,
  clips, adds the LDP noise in each client's step or the HDP noise to the zone sum, and
  replies with its zone aggregate only. ``in-server``: one SuperNode per client (client task
  ``zonal``: train, clip, LDP noise, :func:`fedpriv.scenarios.app.client_tasks.train_zonal`) and
  the zone
  arithmetic in the ServerApp (:class:`fedpriv.strategies.zonal.ZonalAggregation`).
- Who is trusted for what, per placement, with zone nodes: ``none`` — nobody clips or noises
  (the baseline). ``ldp`` — each client's update is noised in its own training step inside the
  zone node that hosts it; the ServerApp sees zone sums of noised updates (ε holds against
  it). ``hdp`` — the zone node is trusted with its clients' clipped updates and noises their
  sum before it leaves; the ServerApp sees noised zone aggregates (ε holds against it, not
  against the zone node). ``cdp`` — the server is trusted: zone nodes send clipped un-noised
  zone sums and the server adds the noise once (ε only against observers of the model). With
  ``in-server`` the zone arithmetic runs in the ServerApp: HDP's ε holds against no one there.
  A failed super-node takes its zone's message out of the round (HDP §V); re-election is
  recorded and the run goes on.
- Scenario ``hdp-digits`` (kind ``zonal-compare``, HDP §VII-A on embedded data): digits over
  100 Dirichlet(0.5) non-IID clients, 10 zones, 20 clients sampled per round, FedAvg, a
  one-hidden-layer MLP (HDP's EMNIST model is "a shallow 1 hidden layer DNN"), SGD with
  learning rate 0.02, 5 local epochs, server learning rate 1 (HDP §VI). HDP trains 200
  rounds with k = 100; digits has 1,437 training images in all, so 30 rounds with k = 20
  here. The batch size (8) is not given by HDP. One simulation runs every placement of
  ``zonal-compare-placements`` (default none, ldp, hdp, cdp — same seed, same client samples
  with ``reproducible-noise``, same z and C) one after the other, each in
  ``output-dir/<placement>/``, and writes ``report.md`` (accuracy per round, HDP Fig. 2; ε
  at the aggregator, HDP Table III), ``comparison.png``, ``summary.json`` and all round
  records (``rounds.jsonl``, each tagged with its run) in ``output-dir``.
  ``zonal-sweep-zones = "1,2,5,10"`` repeats the placements for each number of zones and
  adds ``sweep.png`` (accuracy vs ε, HDP Fig. 3).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from fedpriv.scenarios.app import multirun
from fedpriv.scenarios.app.privacy_modes import declare
from fedpriv.scenarios.app.task_names import ZONAL_TASK, ZONE_NODE_TASK
from fedpriv.scenarios.config.feature import Catalog, Feature, Scenario
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import ServerRun
from fedpriv.scenarios.zonal.keys import (
    KEYS,
    clients_per_round,
    compare_variants,
    parse_placements,
    parse_zone_counts,
    plan_from_config,
    secagg_from_config,
    zone_nodes,
)

from fedpriv import seeds
from fedpriv.privacy.modes import mode_of
from fedpriv.privacy.modes import zonal as zonal_mode
from fedpriv.reporting.runlog import RunLog, read_rounds
from fedpriv.zonal import (
    NOISE_PLACEMENTS,
    ZonalPlan,
    ZoneMapError,
    assign_zones,
    epsilon_at_aggregator,
)

ZONAL_MODE = zonal_mode.MODE

if TYPE_CHECKING:
    from fedpriv.scenarios.nodes.federation import PartitionGrid
    from flwr.serverapp import Grid

KIND = "zonal-compare"
MEAN_STRATEGIES = ("fedavg", "fedprox", "fedavgm", "fedopt", "fedyogi")

HDP_DIGITS = {
    "dataset": "digits",
    "model": "digits-mlp",
    "partition": "dirichlet",
    "num-clients": 100,
    "clients-per-round": 20,
    "num-zones": 10,
    "num-server-rounds": 30,
    "local-epochs": 5,
    "batch-size": 8,
    "optimizer": "sgd",
    "learning-rate": 0.02,
    "strategy": "fedavg",
    "privacy": zonal_mode.MODE.name,
    "noise-placement": "hdp",
    "noise-multiplier": 0.5,
    "clipping-norm": 0.5,
    "zonal-distributed-eval": "sampled",
    "zonal-compare-placements": "none,ldp,hdp,cdp",
    "zonal-sweep-zones": "",
}

SCENARIOS = (
    Scenario(
        "hdp-digits",
        KIND,
        "HDP Fig. 2 / Table III on digits: 100 Dirichlet clients in 10 zones, 20 per round, "
        "FedAvg + SGD 0.02, 5 epochs; none vs LDP vs HDP vs CDP at the same z, one report.",
        HDP_DIGITS,
    ),
)


# --- config -----------------------------------------------------------------------------------


def check_zonal(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """Cross-key checks of the zonal feature (only when ``privacy = "zonal"``)."""
    mode = mode_of(cfg)
    if mode is not ZONAL_MODE:
        if catalog.kind(cfg) == KIND:
            raise ConfigError(
                "privacy", mode.name, f"{ZONAL_MODE.name!r} for scenario {cfg['scenario']}"
            )
        return
    n, s = int(cfg["num-clients"]), int(cfg["num-zones"])
    if s > n:
        raise ConfigError("num-zones", s, f"an integer in [1, num-clients = {n}]")
    if cfg["strategy"] not in MEAN_STRATEGIES:
        raise ConfigError(
            "strategy",
            cfg["strategy"],
            "a mean-based strategy with privacy = 'zonal': " + " | ".join(MEAN_STRATEGIES),
        )
    if cfg["zone-map"] and cfg["zone-assignment"] != "map":
        raise ConfigError("zone-assignment", cfg["zone-assignment"], "'map' when zone-map is set")
    if cfg["zone-assignment"] == "map":
        if not cfg["zone-map"]:
            raise ConfigError(
                "zone-map",
                cfg["zone-map"],
                "a zone map (e.g. '0:0,1:0,2:1') when zone-assignment = 'map'",
            )
        try:
            assign_zones(n, s, method="map", zone_map=cfg["zone-map"])
        except ZoneMapError as err:
            raise ConfigError(
                "zone-map",
                cfg["zone-map"],
                f"every partition 0..{n - 1} in one zone 0..{s - 1}, no empty zone ({err})",
            ) from err
    alpha, beta = float(cfg["hdp-fraction"]), float(cfg["ldp-fraction"])
    if alpha + beta > 1.0 + 1e-12:
        raise ConfigError(
            "hdp-fraction",
            alpha,
            f"a float in [0, 1 - ldp-fraction = {1 - beta:g}] (hdp-fraction + ldp-fraction <= 1)",
        )
    try:
        parse_placements(cfg["zonal-compare-placements"])
    except ValueError as err:
        raise ConfigError(
            "zonal-compare-placements",
            cfg["zonal-compare-placements"],
            "comma-separated placements out of " + " | ".join(NOISE_PLACEMENTS),
        ) from err
    try:
        sweep = parse_zone_counts(cfg["zonal-sweep-zones"], n)
    except ValueError as err:
        raise ConfigError(
            "zonal-sweep-zones",
            cfg["zonal-sweep-zones"],
            f"'' or comma-separated integers in [1, num-clients = {n}]",
        ) from err
    dropouts = int(cfg.get("zonal-secagg-dropouts", 0))
    if dropouts and not cfg.get("zonal-secagg", False):
        raise ConfigError(
            "zonal-secagg-dropouts", dropouts, "0 unless zonal-secagg = true (no SecAgg: no drops)"
        )
    if sweep and cfg["zone-assignment"] == "map":
        raise ConfigError(
            "zonal-sweep-zones",
            cfg["zonal-sweep-zones"],
            "'' when zone-assignment = 'map' (a map fixes the zones)",
        )


def epsilon_for(cfg: Mapping[str, Any], plan: ZonalPlan, round_: int, *, text: bool = False):
    """The ε block after ``round_`` rounds of this config."""
    return epsilon_at_aggregator(
        plan,
        round_=round_,
        total_rounds=int(cfg["num-server-rounds"]),
        clients_per_round=clients_per_round(cfg),
        delta=float(cfg["dp-delta"]),
        with_text=text,
        runtime=str(cfg.get("zonal-runtime", "zone-nodes")),
        secure_aggregation=bool(cfg.get("zonal-secagg", False)),
        min_cohort=int(cfg.get("min-zone-clients", 2)) if zone_nodes(cfg) else 1,
        secagg_dropouts=int(cfg.get("zonal-secagg-dropouts", 0)),
    )


# --- server side ------------------------------------------------------------------------------


def build_zonal_wrapper(strategy, run: ServerRun, rng: np.random.Generator):
    """Privacy mode ``zonal``: zonal aggregation around the stock ``strategy``.

    ``rng`` (the run's sampling Generator) is not used: the elections are seeded from
    ``seed`` on their own streams; the zone and server noise are OS entropy unless the run
    sets ``reproducible-noise`` (:class:`fedpriv.strategies.zonal.ZonalAggregation`).
    """
    from fedpriv.scenarios.nodes.federation import save_replies
    from fedpriv.strategies.zonal import ZonalAggregation
    from fedpriv.strategies.zonal_nodes import ZoneNodeAggregation

    del rng
    cfg, spec = run.record, run.spec  # the record: the zonal keys the spec does not type
    plan = plan_from_config(cfg, spec.data)
    extra: dict[str, Any] = {}
    if zone_nodes(cfg):
        folder = Path(spec.output_dir) / "zone-replies"
        extra["reply_log"] = save_replies(folder) if cfg["zonal-save-replies"] else None
        extra["min_zone_clients"] = int(cfg.get("min-zone-clients", 2))
    wrapper = ZoneNodeAggregation if zone_nodes(cfg) else ZonalAggregation
    return wrapper(
        strategy,
        plan=plan,
        seed=int(spec.seed),
        reproducible_noise=spec.reproducible_noise,
        failure_rate=float(cfg["supernode-failure-rate"]),
        placement=spec.zones.placement,
        distributed_eval=cfg["zonal-distributed-eval"],
        epsilon_fn=lambda r: epsilon_for(cfg, plan, r),
        secure=secagg_from_config(cfg),
        **extra,
    )


def zonal_summary(run: ServerRun, rounds: list[dict]) -> dict:
    """Summary block: plan, election log and final ε of a zonal run."""
    if run.spec.mode is not ZONAL_MODE:
        return {}
    cfg = run.record
    plan = plan_from_config(cfg, run.spec.data)
    done = [r for r in rounds if r.get("round", 0) > 0 and "zonal" in r]
    elections = [e for r in done for e in r["zonal"].get("elections", [])]
    block: dict[str, Any] = {
        "placement": run.spec.zones.placement,
        "plan": plan.describe(),
        "elections": elections,
        "reelections": sum(e["reason"] != "initial" for e in elections),
        "supernode_failures": sum(len(r["zonal"].get("failed_supernodes", [])) for r in done),
    }
    if done:
        block["epsilon"] = epsilon_for(cfg, plan, len(done), text=True)
    return {"zonal": block}


def _tagged(cfg: Mapping[str, Any], label: str, record: dict) -> dict:
    """A variant's round record as it goes into the comparison's combined rounds.jsonl."""
    return {
        "run": label,
        "noise-placement": cfg["noise-placement"],
        "num-zones": cfg["num-zones"],
        **record,
    }


def run_variant(
    pgrid: PartitionGrid, run: ServerRun, label: str, data, top: RunLog, catalog: Catalog
) -> dict:
    """One standard zonal run (variant ``label``) on the shared grid; returns its summary.
    Resumable (a killed variant continues after its last completed round:
    ``engine.train_run``)."""
    from fedpriv.scenarios.app.engine import RunHooks, train_run

    def to_top(record: dict) -> None:
        top.append_round(_tagged(run.record, label, record))

    def summary_extra(rounds: list[dict]) -> dict:
        trained = [r for r in rounds if r["round"] > 0]
        return {
            "label": label,
            "accuracy_per_round": [r["server"]["accuracy"] for r in trained],
            "rounds_aggregated": sum(bool(r.get("aggregated")) for r in trained),
        }

    hooks = RunHooks(on_record=(to_top,), summary_extra=summary_extra)
    return train_run(pgrid, run, data, catalog, hooks=hooks, resumable=True).summary


def _variant_run(run: ServerRun, cell: multirun.Cell) -> ServerRun:
    """The run of one comparison variant (its config without the ``_label`` tag)."""
    return run.variant({k: v for k, v in cell.cfg.items() if k != "_label"})


def run_zonal_compare(grid: Grid, run: ServerRun, catalog: Catalog) -> None:
    """Every placement (and zone count) in one simulation, then the comparison report."""
    from fedpriv.clients.partitions import federated_data
    from fedpriv.scenarios.app import startup as status
    from fedpriv.scenarios.nodes.virtual_grid import federation_grid
    from fedpriv.scenarios.zonal.report import write_compare_outputs

    t0 = time.time()
    cfg, spec = run.record, run.spec
    top = RunLog(spec.output_dir, labels=seeds.noise_labels(spec.reproducible_noise))
    data = federated_data(spec.data)
    status.data_loaded(spec, data)
    pgrid = federation_grid(grid, run)
    variants = compare_variants(cfg)
    cells = [multirun.Cell(v["_label"], v) for v in variants]

    def done_before(cell: multirun.Cell) -> bool:  # resume: keep a complete variant, re-log it
        if not multirun.summary_complete(cell):
            return False
        for record in read_rounds(cell.cfg["output-dir"]):
            top.append_round(_tagged(cell.cfg, cell.label, record))
        return True

    rows = multirun.run_cells(
        cells,
        lambda cell: run_variant(pgrid, _variant_run(run, cell), cell.label, data, top, catalog),
        is_complete=done_before,
        prefix="fedpriv zonal",
    )
    summaries = [multirun.result_or_summary(row, cell) for row, cell in zip(rows, cells)]
    write_compare_outputs(cfg, summaries, Path(spec.output_dir), time.time() - t0, top)


FEATURE = Feature(
    name="zonal",
    description="Zones with elected super-nodes; noise at client / super-node / server (HDP).",
    keys=KEYS,
    privacy_modes=(declare(ZONAL_MODE, build_zonal_wrapper),),
    scenarios=SCENARIOS,
    runners={KIND: run_zonal_compare},
    client_tasks=(ZONAL_TASK, ZONE_NODE_TASK),
    summary=zonal_summary,
    checks=(check_zonal,),
)
