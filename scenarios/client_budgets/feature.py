"""Feature ``client_budgets``: privacy mode ``client-budgets`` (individualized DP-FedAvg).

Declares the server wrapper (:class:`fedpriv.strategies.client_budgets.ClientBudgetsDP`: each client
sampled at its own rate, noise from the secret ``dp-noise`` stream), the config check (every
client offered each round, a mean strategy, each budget reachable) and the summary.json
``privacy`` block: every client's ε and budget, and their distribution per budget.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

import numpy as np
from fedpriv.scenarios.app.privacy_modes import declare
from fedpriv.scenarios.client_budgets.keys import KEYS
from fedpriv.scenarios.config.feature import Catalog, Feature
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import ServerRun, run_spec

from fedpriv import seeds
from fedpriv.privacy.disclosure import unaccounted_channels
from fedpriv.privacy.modes import client_budgets, mode_of
from fedpriv.reporting.records import PrivacyFigures, mean_of

MODE = client_budgets.MODE
STRATEGIES = ("fedavg", "fedprox")


def build_wrapper(strategy, run: ServerRun, rng: np.random.Generator):
    """:class:`fedpriv.strategies.client_budgets.ClientBudgetsDP` (``rng`` unused: sampling and
    noise from the secret ``dp-noise`` stream) with the server's per-client ledger
    (:func:`fedpriv.scenarios.dp.server_ledger.attach_per_client_ledger`)."""
    from fedpriv.strategies.client_budgets import ClientBudgetsDP

    del rng
    spec = run.spec
    p = spec.params
    wrapper = ClientBudgetsDP(
        strategy,
        rates={k: q for k, (_, q) in client_budgets.rates(spec).items()},
        delta=p.delta,
        noise_multiplier=p.noise_multiplier,
        clipping_norm=p.clipping_norm,
        rng=seeds.privacy_stream(int(spec.seed), "dp-noise", reproducible=spec.reproducible_noise),
        accept_failures=bool(spec.strategy.accept_failures),
    )
    from fedpriv.scenarios.dp.server_ledger import attach_per_client_ledger  # not at --help

    return attach_per_client_ledger(wrapper, run)


def check_client_budgets(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """Every client offered each round (the wrapper samples), a mean strategy, budgets that a
    rate q > 0 can meet (one line each)."""
    del catalog
    if mode_of(cfg) is not MODE:
        return
    if int(cfg["clients-per-round"]) not in (0, int(cfg["num-clients"])):
        raise ConfigError("clients-per-round", cfg["clients-per-round"],
                          f"0 with privacy = {MODE.name} (each client is sampled at its own "
                          "rate by the server)")  # fmt: skip
    if cfg["strategy"] not in STRATEGIES or cfg["client-sampling"] != "fixed":
        raise ConfigError("strategy", cfg["strategy"], f"{' | '.join(STRATEGIES)} with "
                          f"client-sampling = fixed for privacy = {MODE.name}")  # fmt: skip
    try:
        client_budgets.rates(run_spec(cfg))
    except ValueError as err:
        raise ConfigError("client-epsilon-groups", cfg["client-epsilon-groups"], str(err)) from err


def summary_block(run: ServerRun, rounds: list[dict]) -> dict:
    """summary.json ``privacy``: each client's final ε, its budget and q, and per budget the
    min / median / max ε (the console shows the distribution)."""
    spec = run.spec
    if spec.mode is not MODE:
        return {}
    p = spec.params
    noised = [r for r in rounds if r.get("round", 0) > 0 and r.get("dp-noised")]
    final = {str(k): float(v) for k, v in (noised[-1].get("dp-client-epsilon") or {}).items()} \
        if noised else {}  # fmt: skip
    per_client = {
        str(k): {"budget": b, "sampling_rate": q, "epsilon": final.get(str(k), 0.0)}
        for k, (b, q) in client_budgets.rates(spec).items()
    }
    by_budget: dict[float, list[float]] = {}
    for c in per_client.values():
        by_budget.setdefault(c["budget"], []).append(c["epsilon"])
    distribution = {
        str(b): {"clients": len(v), "min": min(v), "median": statistics.median(v), "max": max(v)}
        for b, v in sorted(by_budget.items())
    }
    worst = max((c["epsilon"] for c in per_client.values()), default=0.0)
    block = {
        "mode": MODE.name, "noise_multiplier": p.noise_multiplier,
        "clipping_norm": p.clipping_norm, "delta": p.delta, "noised_rounds": len(noised),
        "sigma_per_round": [r.get("dp-sigma") for r in noised],
        "epsilon_per_client": per_client, "epsilon_distribution": distribution,
        "epsilon": worst, "within_budgets": all(c["epsilon"] <= c["budget"]
                                                 for c in per_client.values()),
        "guarantee": "(epsilon_i, delta)-DP per client i (Poisson q_i, add/remove-one)",
        "unaccounted": unaccounted_channels(MODE.name, opted_in=spec.unaccounted_metrics),
    }  # fmt: skip
    spread = "; ".join(f"budget {b}: ε {d['min']:.3g}–{d['max']:.3g} ({d['clients']} clients)"
                       for b, d in distribution.items())  # fmt: skip
    figures = PrivacyFigures(
        mode=MODE.name, bound=f"per client, Poisson q_i, add/remove-one; {spread}",
        noise_multiplier=p.noise_multiplier, sigma_mean=mean_of(block["sigma_per_round"]),
        epsilon=worst, delta=p.delta,
    )  # fmt: skip
    return {MODE.summary_key: block, PrivacyFigures.KEY: figures.to_json()}


FEATURE = Feature(
    name="client_budgets",
    description="Per-client epsilon budgets: each client sampled at its own rate.",
    keys=KEYS,
    privacy_modes=(declare(MODE, build_wrapper),),
    summary=summary_block,
    client_tasks=(MODE.client_task,),
    checks=(check_client_budgets,),
)
