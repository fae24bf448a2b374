"""``privacy = distributed-dp``: Skellam noise shares under secure aggregation (declared here).

- privacy mode ``distributed-dp`` (:mod:`fedpriv.privacy.modes.distributed_dp`):
  :class:`fedpriv.strategies.distributed_dp.DistributedDP` around the stock strategy (a
  mean: FedAvg, FedAvgM, FedProx, FedOpt, FedYogi), which runs the four SecAgg steps per
  round and hands the decoded mean to the stock strategy;
- client task ``distributed-dp`` (:mod:`fedpriv.scenarios.distributed_dp.client`);
- summary block: ``privacy`` with ε against the server and against observers, from the
  core accountant (:func:`fedpriv.privacy.modes.distributed_dp.resolve`) at the run's model
  size, with its assumptions, and the ``privacy_figures`` every report shows;
- checks: a mean strategy, fixed client sampling (the mode samples by itself), poisson
  relation with every client in the cohort, the drop list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedpriv.scenarios.app.privacy_modes import declare
from fedpriv.scenarios.config.feature import Catalog, Feature
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import ServerRun
from fedpriv.scenarios.distributed_dp.keys import drop_list

from fedpriv.privacy.modes import distributed_dp, mode_of
from fedpriv.reporting.records import PrivacyFigures

MODE = distributed_dp.MODE
TASK = distributed_dp.TASK
NOT_A_MEAN = ("fedmedian",)


def build(strategy: Any, run: ServerRun, rng: Any) -> Any:
    """The SecAgg wrapper (``rng`` unused: the clients draw their own noise)."""
    del rng
    from fedpriv.strategies.distributed_dp import DistributedDP

    spec = run.spec

    def resolve(dimension: int) -> distributed_dp.Resolved:
        return distributed_dp.resolve(spec, dimension)

    return DistributedDP(strategy, resolve, drop=drop_list(run.record["distributed-drop-clients"]))


def summary(run: ServerRun, rounds: list[dict]) -> dict:
    """summary.json's ``privacy`` block (ε from the core accountant, its assumptions)."""
    spec = run.spec
    if spec.mode is not MODE:
        return {}
    plan = distributed_dp.plan(spec)
    trained = [r for r in rounds if r.get("round", 0) > 0]
    block = {
        **plan,
        "noise_std_per_round": [r.get("distributed-noise-std") for r in trained],
        "ledger_unit": distributed_dp.UNIT,
    }
    figures = PrivacyFigures(
        mode=MODE.name,
        bound=f"{plan['adjacency']}; {plan['sampling']}",
        noise_multiplier=plan["noise_std_over_bound"],
        epsilon=plan["epsilon"],
        epsilon_rdp=plan["epsilon"],
        delta=plan["delta"],
    )
    return {"privacy": block, PrivacyFigures.KEY: figures.to_json()}


def check_distributed(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """Settings distributed DP cannot run with, refused before training (one line each)."""
    del catalog
    drop_list(cfg["distributed-drop-clients"])  # raises ConfigError
    if mode_of(cfg) is not MODE:
        return
    if cfg["strategy"] in NOT_A_MEAN:
        raise ConfigError("strategy", cfg["strategy"], "a mean (fedavg | fedavgm | fedprox | "
                          "fedopt | fedyogi): secure aggregation releases a sum")  # fmt: skip
    if cfg.get("client-sampling", "fixed") != "fixed":
        why = "fixed with distributed-dp (distributed-relation = poisson samples in secret)"
        raise ConfigError("client-sampling", cfg["client-sampling"], why)
    everyone = int(cfg["clients-per-round"]) in (0, int(cfg["num-clients"]))
    if cfg["distributed-relation"] == "poisson" and not everyone:
        why = "0 (every client) with distributed-relation = poisson: every client adds noise"
        raise ConfigError("clients-per-round", cfg["clients-per-round"], why)
    if cfg["distributed-relation"] == "fixed" and float(cfg["distributed-inclusion-rate"]) < 1:
        raise ConfigError("distributed-inclusion-rate", cfg["distributed-inclusion-rate"],
                          "1 with distributed-relation = fixed (q < 1 needs poisson)")  # fmt: skip
    cohort = int(cfg["num-clients"]) if everyone else int(cfg["clients-per-round"])
    t = int(cfg["distributed-threshold"]) or distributed_dp.auto_threshold(cohort)
    if not cohort // 2 + 1 <= t <= cohort:
        raise ConfigError("distributed-threshold", cfg["distributed-threshold"],
                          f"0 (auto) or an integer in [{cohort // 2 + 1}, {cohort}] for a "
                          f"cohort of {cohort} (a majority)")  # fmt: skip
    if int(cfg["distributed-colluders"]) >= t:
        raise ConfigError("distributed-colluders", cfg["distributed-colluders"],
                          f"an integer < the threshold t = {t}")  # fmt: skip
    t_k = distributed_dp.colluder_limit(cohort)
    if t_k is not None and int(cfg["distributed-colluders"]) >= t_k:
        raise ConfigError("distributed-colluders", cfg["distributed-colluders"],
                          f"an integer < t_k = {t_k} (SecAgg+: the threshold of a client's "
                          f"neighbourhood in a cohort of {cohort})")  # fmt: skip


FEATURE = Feature(
    name=MODE.name,
    description="Distributed DP: Skellam noise shares under secure aggregation (SecAgg).",
    keys=(),  # declared with the DP keys (scenarios/dp/keys.py), which every node knows
    privacy_modes=(declare(MODE, build),),
    client_tasks=(TASK,),
    summary=summary,
    checks=(check_distributed,),
)
