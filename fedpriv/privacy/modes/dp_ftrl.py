"""``privacy = dp-ftrl``: tree-aggregated noise and the FTRL step, no sampling assumed.

Kairouz et al. (2021), DP-FTRL with momentum and restarts (:mod:`fedpriv.privacy.ftrl`): the
server clips each update to C, adds the online binary tree's noise (std z·C per node) to the
prefix sums of the clipped sums and steps from the noisy prefix sums (``ftrl-momentum``,
default 0: the paper's FTRL). Who is asked: shuffled epochs, as the paper's FL runs sample:
each epoch a secret permutation of the clients, ``clients-per-round`` of it per round, and
one tree per epoch (``ftrl-restart-rounds`` rounds; 0 = ``num-clients // clients-per-round``,
the whole permutation). ε from dp_accounting's tree-aggregation events with NO
amplification: it holds for any participation in which a client contributes at most once
per restart, which the epochs give. A trusted server, as in global DP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedpriv.privacy.modes.base import PUBLIC, Mode
from fedpriv.spec import RunSpec
from fedpriv.spec import key as config_key

UNACCOUNTED = (
    "train-loss: un-noised training loss of each client (aggregated into rounds.jsonl)",
    "distributed evaluation metrics on each client's test split",
)
DEFAULT_NOISE_MULTIPLIER = 2.0  # ε = 9.0 with 100 clients, 20 a round, 20 rounds (4 trees of 5)
AUTO_RESTART = 0  # ftrl-restart-rounds = 0: an epoch of rounds, num-clients // clients-per-round


@dataclass(frozen=True)
class DPFTRLParams:
    """z (node noise / C), C, δ, the server's learning rate and momentum, the restart. z's
    default 2 lands below ε = 10 (docs/privacy.md, "What an ε protects"): ε = 9.0 with 100
    clients, 20 a round, 20 rounds (the privacy-utility page's setting) and with 1,000 clients,
    20 a round, 100 rounds; 7.1 on the default digits run (4 clients, 8 rounds)."""

    noise_multiplier: float = config_key("noise-multiplier", mode_default=DEFAULT_NOISE_MULTIPLIER)
    clipping_norm: float = config_key("clipping-norm", mode_default=5.0)
    delta: float = config_key("dp-delta")
    learning_rate: float = config_key("server-learning-rate")
    momentum: float = config_key("ftrl-momentum")
    restart_rounds: int = config_key("ftrl-restart-rounds")
    estimator: str = config_key("ftrl-estimator")


def restart_rounds(spec: RunSpec) -> int:
    """R: the configured restart, or an epoch of rounds (N // m, at least 1) when 0."""
    value = int(spec.params.restart_rounds)
    if value != AUTO_RESTART:
        return value
    part = spec.participation
    return max(1, part.population // max(1, part.per_round))


def steps_per_tree(rounds: int, restart: int, estimator: str = "honaker") -> list[int]:
    """The leaves of each tree of a ``rounds``-round run restarted every ``restart`` rounds
    (``mf``: one factorization of all the rounds)."""
    if estimator == "mf":
        return [int(rounds)]
    full, rest = divmod(int(rounds), int(restart))
    return [restart] * full + ([rest] if rest else [])


def plan(spec: RunSpec, examples_per_client: int | None = None) -> dict[str, Any]:
    """ε of the run's trees (dp_accounting, no amplification), with its condition."""
    from fedpriv.privacy.ftrl import tree_epsilon

    del examples_per_client
    params: DPFTRLParams = spec.params
    restart = restart_rounds(spec)
    steps = steps_per_tree(spec.rounds, restart, params.estimator)
    report = tree_epsilon(params.noise_multiplier, steps, params.delta, params.estimator)
    noise = (
        f"a matrix factorization optimised for {spec.rounds} rounds in epochs of {restart}"
        if params.estimator == "mf"
        else f"tree-aggregated Gaussian noise, std z*C per node, restart every {restart} rounds"
    )
    return {
        "mode": MODE.name, **report, "noise_multiplier": params.noise_multiplier,
        "restart_rounds": restart, "epsilon_condition": report["sampling"],
        "notes": [f"DP-FTRL (Kairouz et al. 2021): {noise}; epsilon {report['sampling']}"],
    }  # fmt: skip


def epsilon_of_z(spec: RunSpec, examples: int | None = None):
    """ε(z) of the run's trees."""
    from fedpriv.privacy.ftrl import tree_epsilon

    del examples
    estimator = spec.params.estimator
    steps = steps_per_tree(spec.rounds, restart_rounds(spec), estimator)
    return lambda z: float(tree_epsilon(z, steps, spec.params.delta, estimator)["epsilon"])


MODE = Mode(
    name="dp-ftrl",
    params=DPFTRLParams,
    threat_model={
        "server": "trusted to clip, add the tree's noise, keep its tree seed and its epochs' "
        "permutations secret and ask each client at most once per tree; it sees every "
        "client's un-noised update.",
        "clients and observers": "see only the released models: client-level "
        "(epsilon, delta)-DP with no sampling assumption.",
    },
    epsilon_against={
        "server": "none (trusted)",
        "clients and observers": "client-level (epsilon, delta) of the released models, "
        "for any participation with at most one contribution per client per restart",
    },
    plan=plan,
    disclosure={"train": PUBLIC, "evaluate": PUBLIC},
    unaccounted=UNACCOUNTED,
    report_label="DP-FTRL",
    noise_field="noise_multiplier",
    epsilon_of_z=epsilon_of_z,
    against="clients and observers of the model, any participation pattern (server trusted)",
    server_noise=True,
    audit=None,
)
