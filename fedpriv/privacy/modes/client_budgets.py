"""``privacy = client-budgets``: each client owns its ε budget; the server samples it at its
own rate so that its ε at the last round meets it (individualized DP-FedAvg).

A client's budget is its own ``client-epsilon`` (its ``node_config`` may set it) or its group's
in ``client-epsilon-groups`` (client p: group p mod the number of groups). The server clips,
sums, adds N(0, (z·C)²) and divides by the expected count; each client i is Poisson-sampled
with q_i from :func:`fedpriv.privacy.client_budgets.sampling_rate_for`. The client recomputes
q_i itself, refuses a message that asks it at a higher rate or changes its budget, and
declines once its own ε would pass its budget. The server is trusted to clip, noise and keep
the sampling secret, as in global DP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedpriv.privacy.modes.base import OPT_INS, PUBLIC, Mode
from fedpriv.spec import RunSpec
from fedpriv.spec import key as config_key

NAME = "client-budgets"
OWN_BUDGET_KEY = "client-epsilon"  # per node: "auto" is the node's own (its group's budget)
BUDGET_KEYS = (OWN_BUDGET_KEY, "client-epsilon-groups")
RATE_KEY = "client-sampling-rate"  # the rate the server says it samples a client at
UNACCOUNTED = (
    "train-loss: un-noised training loss of each client (aggregated into rounds.jsonl)",
    "distributed evaluation metrics on each client's test split",
)


@dataclass(frozen=True)
class ClientBudgetsParams:
    """z, C, δ and the budgets."""

    noise_multiplier: float = config_key("noise-multiplier", mode_default=1.0)
    clipping_norm: float = config_key("clipping-norm", mode_default=5.0)
    delta: float = config_key("dp-delta")
    groups: str = config_key("client-epsilon-groups")
    own_budget: float = config_key("client-epsilon")


def rates(spec: RunSpec) -> dict[int, tuple[float, float]]:
    """partition -> (budget, q) for every client of the run."""
    from fedpriv.privacy.client_budgets import budget_of, sampling_rate_for

    p: ClientBudgetsParams = spec.params
    out = {}
    for partition in range(spec.participation.population):
        budget = budget_of(p.groups, partition, p.own_budget)
        out[partition] = (budget, sampling_rate_for(budget, p.noise_multiplier, spec.rounds,
                                                    p.delta))  # fmt: skip
    return out


def plan(spec: RunSpec, examples_per_client: int | None = None) -> dict[str, Any]:
    """Each budget's rate q and its ε after the run (the largest is the headline)."""
    from fedpriv.privacy.client_budgets import client_epsilon

    del examples_per_client
    p: ClientBudgetsParams = spec.params
    groups = {}
    for budget, q in rates(spec).values():
        eps = client_epsilon(q, p.noise_multiplier, spec.rounds, p.delta)
        groups[str(budget)] = {"budget": budget, "sampling_rate": q, "epsilon": eps}
    return {
        "mode": NAME, "epsilon": max(g["epsilon"] for g in groups.values()),
        "delta": p.delta, "rounds": spec.rounds, "per_budget": groups,
        "accountant": "dp_accounting PLD of PoissonSampledDpEvent(q_i, GaussianDpEvent(z))",
        "adjacency": "add/remove-one client", "sampling": "Poisson, client i with its own q_i",
        "notes": ["per-client epsilon: each client's own rate q_i meets its own budget at the "
                  "last round; the headline is the largest client's"],
    }  # fmt: skip


MODE = Mode(
    name=NAME,
    params=ClientBudgetsParams,
    threat_model={
        "server": "trusted to clip, noise and keep its sampling secret; it cannot raise a "
        "client's budget or sampling rate (the client refuses the message).",
        "clients and observers": "see only noised releases: client i gets client-level "
        "(epsilon_i, delta)-DP within its own budget.",
    },
    epsilon_against={
        "server": "none (trusted for clipping and noise); each client enforces its own budget",
        "clients and observers": "client-level (epsilon_i, delta) per client, within its budget",
    },
    plan=plan,
    disclosure={"train": PUBLIC, "evaluate": PUBLIC},
    unaccounted=UNACCOUNTED,
    owned_keys={"client": ("privacy", "noise-multiplier", "dp-delta", *BUDGET_KEYS, *OPT_INS)},
    release_keys=(*BUDGET_KEYS, "num-server-rounds"),  # q_i is calibrated to T rounds
    message_keys=(RATE_KEY,),  # the server's word for q_i: the client refuses one above its own
    report_label="Client budgets",
    against="clients and observers, each client within its own budget (server trusted)",
    client_task=NAME,
    server_noise=True,
    audit=None,
)
