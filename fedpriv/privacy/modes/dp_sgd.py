"""``privacy = dp-sgd``: example-level DP-SGD on each client (Abadi et al. 2016).

The server is not trusted: each client clips per-example gradients to C, adds N(0, (z·C)²)
and counts its own participations; its ε holds against the server and observers. Its
release depends on z, C, δ, the batch size B and local epochs E (q = B/n, E/q steps), which
the client owns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedpriv.privacy.modes.base import OPT_INS, PUBLIC, Mode
from fedpriv.spec import RunSpec
from fedpriv.spec import key as config_key

NAME = "dp-sgd"
# the node's own mechanism (z, C, δ of its node config), in each train reply beside its ε: the
# server reports these, not its run config's guess (public parameters of the mechanism)
OWN_MECHANISM_METRICS = ("dp-sgd-noise-multiplier", "dp-sgd-clipping-norm", "dp-sgd-delta")
UNACCOUNTED = (
    "train-loss: un-noised training loss (not part of DP-SGD's noised gradients)",
    "distributed evaluation metrics on each client's test split",
)


@dataclass(frozen=True)
class DPSGDParams:
    """z, C, δ, B and E of the client's DP-SGD."""

    noise_multiplier: float = config_key("noise-multiplier", mode_default=1.1)
    l2_norm_clip: float = config_key("clipping-norm", mode_default=1.0)
    delta: float = config_key("dp-delta")
    batch_size: int = config_key("batch-size")
    local_epochs: int = config_key("local-epochs")


def plan(spec: RunSpec, examples: int | None = None) -> dict[str, Any]:
    """Example level per client, ``epochs = local-epochs x rounds`` (a client sampled every
    round, the worst case); needs the client's example count."""
    from fedpriv.privacy import dpsgd
    from fedpriv.privacy.accounting.planning import json_number

    params: DPSGDParams = spec.params
    rounds = spec.rounds
    out: dict[str, Any] = {
        "mode": NAME,
        "delta": params.delta,
        "accountant": dpsgd.ACCOUNTANT_TEXT,
        "adjacency": dpsgd.ADJACENCY_TEXT,
        "sampling": dpsgd.SAMPLING_TEXT,
        "notes": ["worst case: a client sampled in every round (epochs = local-epochs x rounds)"],
    }
    if examples is None:
        out.update(epsilon=None, notes=out["notes"] + ["pass the client's example count"])
        return out
    common = dict(
        num_examples=int(examples),
        batch_size=params.batch_size,
        local_epochs=params.local_epochs,
        noise_multiplier=params.noise_multiplier,
        delta=params.delta,
    )
    per_round = [dpsgd.client_epsilon(**common, participations=r) for r in range(1, rounds + 1)]
    out.update(
        epsilon=json_number(per_round[-1].epsilon),
        rounds=rounds,
        per_round={
            "round": list(range(1, rounds + 1)),
            "epsilon": [json_number(e.epsilon) for e in per_round],
        },
    )
    return out


def epsilon_of_z(spec: RunSpec, examples: int | None = None):
    """ε(z) of a client in every round (:func:`fedpriv.privacy.accounting.target.dp_sgd_of_z`)."""
    from fedpriv.privacy.accounting.target import dp_sgd_of_z

    return dp_sgd_of_z(spec, examples)


MODE = Mode(
    name=NAME,
    params=DPSGDParams,
    threat_model={
        "server": "not trusted: it sees only updates trained with DP-SGD on each client.",
        "clients": "trusted with their own data and privacy settings only: example-level "
        "(epsilon, delta)-DP per client.",
    },
    epsilon_against={
        "server": "example-level (epsilon, delta) per client",
        "observers": "example-level (epsilon, delta) per client",
    },
    plan=plan,
    disclosure={"train": PUBLIC | {"dp-sgd-epsilon", *OWN_MECHANISM_METRICS}, "evaluate": PUBLIC},
    unaccounted=UNACCOUNTED,
    owned_keys={
        "client": (
            "privacy",
            "noise-multiplier",
            "clipping-norm",
            "dp-delta",
            "batch-size",
            "local-epochs",
            *OPT_INS,
        )
    },
    release_keys=("batch-size", "local-epochs"),
    report_label="DP-SGD",
    noise_field="noise_multiplier",
    epsilon_of_z=epsilon_of_z,
    against="the server and observers (each client's example-level ε)",
    client_task=NAME,
    audit="example",
)
