"""Feature ``dp_ftrl``: privacy mode ``dp-ftrl`` (Kairouz et al. 2021).

Declares the mode's server wrapper (:class:`fedpriv.strategies.dp_ftrl.DPFTRL` around FedAvg or
FedProx; tree seed and epoch permutations secret unless ``reproducible-noise``), its config
check (a mean strategy; an epoch of ``ftrl-restart-rounds`` blocks fits the clients; Poisson
sampling and ``max-epsilon`` are refused by the shared checks) and its summary.json
``privacy`` block (ε of the trees with its participation condition).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from fedpriv.scenarios.app.privacy_modes import declare
from fedpriv.scenarios.config.feature import Catalog, Feature
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import ServerRun
from fedpriv.scenarios.dp_ftrl.keys import KEYS

from fedpriv import seeds
from fedpriv.privacy.disclosure import unaccounted_channels
from fedpriv.privacy.ftrl_mf import MAX_ROUNDS as MF_MAX_ROUNDS
from fedpriv.privacy.modes import dp_ftrl, mode_of
from fedpriv.reporting.records import PrivacyFigures, mean_of

MODE = dp_ftrl.MODE
STRATEGIES = ("fedavg", "fedprox")  # DP-FTRL replaces the server's aggregation and optimizer


def build_wrapper(strategy, run: ServerRun, rng: np.random.Generator):
    """:class:`fedpriv.strategies.dp_ftrl.DPFTRL` around ``strategy``: ``rng`` (the run's
    sampling Generator: OS entropy unless ``reproducible-noise``) draws the epochs'
    permutations; the tree seed is OS entropy, or the ``dp-noise`` stream with
    ``reproducible-noise``. The server's ledger of trees is attached
    (:func:`fedpriv.scenarios.dp.server_ledger.attach_tree_ledger`)."""
    from fedpriv.strategies.dp_ftrl import DPFTRL

    spec = run.spec
    params = spec.params
    seed = None
    if spec.reproducible_noise:
        stream = seeds.privacy_stream(int(spec.seed), "dp-noise", reproducible=True)
        seed = int(stream.integers(2**63 - 1))
    wrapper = DPFTRL(
        strategy,
        noise_multiplier=params.noise_multiplier,
        clipping_norm=params.clipping_norm,
        num_sampled_clients=spec.participation.per_round,
        learning_rate=params.learning_rate,
        momentum=params.momentum,
        restart_rounds=dp_ftrl.restart_rounds(spec),
        delta=params.delta,
        seed=seed,
        rng=rng,
        estimator=params.estimator,
        num_rounds=spec.rounds,
    )
    from fedpriv.scenarios.dp.server_ledger import attach_tree_ledger  # Flower: not at --help

    return attach_tree_ledger(wrapper, run)


def check_dp_ftrl(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """A FedAvg/FedProx run whose epoch fits the clients (one line otherwise)."""
    del catalog
    if mode_of(cfg) is not MODE:
        return
    if cfg["strategy"] not in STRATEGIES:
        raise ConfigError(
            "strategy", cfg["strategy"], f"{' | '.join(STRATEGIES)} with privacy = {MODE.name} "
            "(DP-FTRL replaces the server's aggregation and optimizer)",
        )  # fmt: skip
    restart = int(cfg.get("ftrl-restart-rounds", 0) or 0)
    clients = int(cfg["num-clients"])
    asked = int(cfg.get("clients-per-round", 0) or 0)
    per_round = asked if 0 < asked < clients else clients
    if restart * per_round > clients:
        raise ConfigError(
            "ftrl-restart-rounds", restart, f"0 or 1..{clients // per_round} with "
            f"{per_round} clients a round of {clients} (each client once per epoch and tree)",
        )  # fmt: skip
    rounds = int(cfg["num-server-rounds"])
    if cfg.get("ftrl-estimator") == "mf" and rounds > MF_MAX_ROUNDS:
        raise ConfigError(
            "num-server-rounds", rounds, f"at most {MF_MAX_ROUNDS} with ftrl-estimator = 'mf' "
            "(its factorization is optimised for the run's rounds), or ftrl-estimator = honaker",
        )  # fmt: skip


def summary_block(run: ServerRun, rounds: list[dict]) -> dict:
    """summary.json ``privacy``: ε of the trees released (recomputed), its condition."""
    from fedpriv.privacy.ftrl import tree_epsilon

    spec = run.spec
    if spec.mode is not MODE:
        return {}
    params = spec.params
    trained = [r for r in rounds if r.get("round", 0) > 0 and r.get("dp-noised")]
    steps: dict[int, int] = {}
    for r in trained:
        steps[int(r["dp-tree"])] = max(steps.get(int(r["dp-tree"]), 0), int(r["dp-tree-step"]))
    report = tree_epsilon(
        params.noise_multiplier, [steps[k] for k in sorted(steps)], params.delta, params.estimator
    )
    block = {
        "mode": MODE.name, "noise_multiplier": params.noise_multiplier,
        "clipping_norm": params.clipping_norm, "learning_rate": params.learning_rate,
        "momentum": params.momentum, "restart_rounds": dp_ftrl.restart_rounds(spec),
        "estimator": params.estimator,
        "clients_per_round": spec.participation.per_round,
        "sampling": "shuffled epochs: a secret permutation of the clients per epoch, "
        "clients_per_round of it a round, "
        + ("one factorization for the run" if params.estimator == "mf" else "one tree per epoch"),
        "delta": params.delta,
        "sigma_per_round": [r.get("dp-sigma") for r in trained], "noised_rounds": len(trained),
        "formula": "theta_t = theta_{t-1} + lr*v_t, v_t = mu*v_{t-1} + (S~_t - S~_{t-1})/k_t, "
        "k_t the updates aggregated",
        "guarantee": "(epsilon, delta)-DP, client level, no amplification by sampling",
        "epsilon": report, "epsilon_condition": report["sampling"],
        "unaccounted": unaccounted_channels(MODE.name, opted_in=spec.unaccounted_metrics),
    }  # fmt: skip
    figures = PrivacyFigures(
        mode=MODE.name, bound=f"{report['adjacency']}; {report['sampling']}",
        noise_multiplier=params.noise_multiplier, sigma_mean=mean_of(block["sigma_per_round"]),
        epsilon=report["epsilon"], epsilon_rdp=report["epsilon"], delta=params.delta,
    )  # fmt: skip
    return {MODE.summary_key: block, PrivacyFigures.KEY: figures.to_json()}


FEATURE = Feature(
    name="dp_ftrl",
    description="DP-FTRL (Kairouz et al. 2021): tree-aggregated noise, no sampling assumed.",
    keys=KEYS,
    privacy_modes=(declare(MODE, build_wrapper),),
    summary=summary_block,
    checks=(check_dp_ftrl,),
)
