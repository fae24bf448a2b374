"""``privacy = distributed-dp``: Skellam noise shares under secure aggregation.

Each client clips, rotates, rounds and noises its update (its own Skellam share μ) and
masks it (:mod:`fedpriv.privacy.distributed`); the server sees masked vectors and their
modular sum only, and decodes the mean. The ε holds against the server (honest but curious;
at most ``distributed-colluders`` clients collude with it; no sum is unmasked with fewer
than t survivors) and against observers of the models. The clients own every setting that
decides their noise: each computes μ and b itself from its own config (:func:`resolve`).

Relations (``distributed-relation``): ``fixed`` — the server's cohort of
``clients-per-round``, replace-one, not amplified against the server (it picks the
cohort); ``poisson`` — every client is in the cohort every round and adds its noise, but
includes its update only with probability q = ``distributed-inclusion-rate`` by a secret
coin of its own: amplified against the server too (docs/distributed-dp.md).

The noise: ``distributed-target-epsilon`` > 0 plans the smallest μ that meets it; 0 takes
``noise-multiplier`` z as the noise on the sum in units of the integer sensitivity B,
``μ = (z·B)²/(t − colluders)`` per client (the Gaussian's z·C of global DP, in B units).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

from fedpriv.privacy.modes.base import OPT_INS, PUBLIC, Mode
from fedpriv.spec import RunSpec
from fedpriv.spec import key as config_key

NAME = "distributed-dp"
TASK = NAME
RELATIONS = ("fixed", "poisson")
STEP_KEY = "secagg-step"  # which SecAgg step a message asks for (a message key)
ACCOUNTANT = "Skellam RDP (Agarwal, Kairouz & Liu 2021, Thm 3.5), dp_accounting conversion"
UNIT = "one participation (one noised, masked release in a round)"
UNACCOUNTED = ("distributed evaluation metrics on each client's test split",)


@dataclass(frozen=True)
class DistributedDPParams:
    """z (or a target ε), C, δ, the scale γ, bits b, threshold t, colluders, relation, q."""

    noise_multiplier: float = config_key("noise-multiplier", mode_default=1.0)
    clipping_norm: float = config_key("clipping-norm", mode_default=1.0)
    delta: float = config_key("dp-delta")
    target_epsilon: float = config_key("distributed-target-epsilon")
    scale: float = config_key("distributed-scale")
    bits: int = config_key("distributed-bits")
    threshold: int = config_key("distributed-threshold")
    colluders: int = config_key("distributed-colluders")
    relation: str = config_key("distributed-relation")
    inclusion_rate: float = config_key("distributed-inclusion-rate")


@dataclass(frozen=True)
class Resolved:
    """What every party of a round uses: the encoding (μ, b), the cohort size n, t, the
    clients whose noise is guaranteed in a sum, q, and ε (against the server and against
    observers who do not know the cohort)."""

    encoding: Any  # fedpriv.privacy.distributed.encoding.EncodingParams
    cohort: int
    threshold: int
    noisy_clients: int
    rate: float
    relation: str
    rounds: int
    delta: float
    epsilon: float
    epsilon_observers: float
    colluders: int = 0


def auto_threshold(cohort: int) -> int:
    """t = max(⌊n/2⌋ + 1, ⌈2n/3⌉): a majority (SecAgg's bound) with room for a third to drop."""
    return max(cohort // 2 + 1, math.ceil(2 * cohort / 3))


def colluder_limit(cohort: int) -> int | None:
    """t_k of the cohort's SecAgg+ graph (colluders must stay below it), or None on the
    complete graph (then t bounds them): k from
    :func:`~fedpriv.privacy.distributed.secagg.auto_neighbours`, t_k from
    :func:`~fedpriv.privacy.distributed.secagg.auto_share_threshold`."""
    from fedpriv.privacy.distributed import secagg

    k = secagg.auto_neighbours(cohort)
    return None if k >= cohort - 1 else secagg.auto_share_threshold(k + 1)


def cohort_size(spec: RunSpec) -> int:
    """n: ``clients-per-round`` (fixed) or every client (poisson)."""
    part = spec.participation
    return part.population if spec.params.relation == "poisson" else part.per_round


def threshold_of(spec: RunSpec) -> int:
    """t: ``distributed-threshold``, or :func:`auto_threshold` of the planned cohort."""
    return spec.params.threshold or auto_threshold(cohort_size(spec))


def _epsilon(mu: float, r: Resolved, *, sampled: int, population: int) -> float:
    """ε of ``r.rounds`` rounds at μ per client (the core accountant)."""
    from fedpriv.privacy.accounting.rdp import epsilon_from_rdp
    from fedpriv.privacy.distributed import accounting as acc

    if mu <= 0:
        return math.inf
    params = r.encoding
    common = dict(
        noisy_clients=r.noisy_clients, norm_bound=params.norm_bound, dimension=params.padded_dim
    )
    if r.relation == "fixed":
        return acc.skellam_epsilon(
            mu, rounds=r.rounds, delta=r.delta, sampled=sampled, population=population,
            sampling="fixed", **common,
        )  # fmt: skip
    l1, l2 = acc.skellam_sensitivities(params.norm_bound, params.padded_dim, sampling="poisson")

    def curve(alphas: np.ndarray) -> np.ndarray:
        return acc.skellam_rdp(alphas, l1=l1, l2=l2, variance=r.noisy_clients * mu)

    if r.rate >= 1.0:
        rdp = curve(acc.ORDERS)
    else:
        rdp = acc.poisson_subsampled_rdp(curve, r.rate)
    return epsilon_from_rdp(acc.ORDERS, r.rounds * rdp, r.delta)


def resolve(spec: RunSpec, dimension: int, *, epsilon: bool = True) -> Resolved:
    """The round parameters of ``spec`` for a model of ``dimension`` weights (the server and
    every client compute them alike, each from its own config). ``ValueError`` (one line)
    when the settings cannot work (t, colluders, bits). ``epsilon = False`` (a client that
    only encodes): ε is left NaN unless a target ε needs the accountant for μ, and the
    accountant (dp_accounting, SciPy: seconds to import) is not loaded."""
    p: DistributedDPParams = spec.params
    part = spec.participation
    return _resolve(
        p, int(dimension), cohort_size(spec), part.per_round, part.population, int(spec.rounds),
        bool(epsilon) or p.target_epsilon > 0,
    )  # fmt: skip


@lru_cache(maxsize=32)
def _resolve(
    p: DistributedDPParams, dimension: int, cohort: int, per_round: int, population: int,
    rounds: int, with_epsilon: bool = True,
) -> Resolved:  # fmt: skip
    from fedpriv.privacy.distributed import encoding as enc

    t = p.threshold or auto_threshold(cohort)
    if not cohort // 2 + 1 <= t <= cohort:
        raise ValueError(
            f"distributed-threshold = {t} is not allowed; expected an integer in "
            f"[{cohort // 2 + 1}, {cohort}] for a cohort of {cohort} (a majority, SecAgg)"
        )
    if p.colluders >= t:
        raise ValueError(
            f"distributed-colluders = {p.colluders} is not allowed; expected an integer < "
            f"threshold = {t}"
        )
    neighbourhood = colluder_limit(cohort)
    if neighbourhood is not None and p.colluders >= neighbourhood:
        raise ValueError(
            f"distributed-colluders = {p.colluders} is not allowed; expected an integer < "
            f"t_k = {neighbourhood}, the SecAgg+ threshold of a client's neighbourhood in a "
            f"cohort of {cohort}"
        )
    noisy = t - p.colluders  # accounting.guaranteed_noisy_clients (colluders < t checked)
    rate = p.inclusion_rate if p.relation == "poisson" else 1.0
    base = enc.EncodingParams(dimension, p.clipping_norm, p.scale, bits=2)
    bound = base.norm_bound
    r = Resolved(
        base, cohort, t, noisy, rate, p.relation, rounds, p.delta, math.inf, math.inf, p.colluders
    )
    if p.target_epsilon > 0:
        from fedpriv.privacy.accounting.budget import smallest_noise_multiplier

        z, _ = smallest_noise_multiplier(
            lambda z: _epsilon((z * bound) ** 2 / noisy, r, sampled=1, population=1),
            p.target_epsilon,
        )
    else:
        z = p.noise_multiplier
    mu = (z * bound) ** 2 / noisy
    needed = enc.bits_for(replace(base, noise_variance=mu), cohort)
    bits = p.bits or needed
    if bits < needed or bits > 62:
        raise ValueError(
            f"distributed-bits = {bits} is not allowed; expected an integer in [{needed}, 62] "
            f"for this model and cohort (0 = auto)"
        )
    params = replace(base, noise_variance=mu, bits=bits)
    r = replace(r, encoding=params)
    if not with_epsilon:
        return replace(r, epsilon=math.nan, epsilon_observers=math.nan)
    server = _epsilon(mu, r, sampled=1, population=1)
    observers = server
    if p.relation == "fixed" and per_round < population:
        observers = _epsilon(mu, r, sampled=per_round, population=population)
    return replace(r, epsilon=server, epsilon_observers=observers)


def model_dimension(spec: RunSpec) -> int:
    """d: the number of weights of the run's model (builds it once; loads the data)."""
    import dataclasses

    from fedpriv.data import load_federated
    from fedpriv.models import build_model

    data = load_federated(**dataclasses.asdict(spec.data))
    model = build_model(
        spec.train.model, input_shape=tuple(data.input_shape), num_classes=data.num_classes
    )
    return int(sum(np.asarray(w).size for w in model.get_weights()))


def plan(spec: RunSpec, examples_per_client: int | None = None) -> dict[str, Any]:
    """ε against the server (and against observers) before the run, from :func:`resolve`."""
    from fedpriv.privacy.accounting.planning import json_number

    del examples_per_client
    r = resolve(spec, model_dimension(spec))
    e = r.encoding
    return {
        "mode": NAME,
        "epsilon": json_number(r.epsilon),
        "epsilon_observers": json_number(r.epsilon_observers),
        "delta": r.delta,
        "rounds": r.rounds,
        "relation": r.relation,
        "inclusion_rate": r.rate,
        "cohort": r.cohort,
        "threshold": r.threshold,
        "noisy_clients": r.noisy_clients,
        "noise_variance": e.noise_variance,
        "noise_std_over_bound": math.sqrt(r.noisy_clients * e.noise_variance) / e.norm_bound,
        "norm_bound": e.norm_bound,
        "bits": e.bits,
        "dimension": e.dimension,
        "padded_dimension": e.padded_dim,
        "accountant": ACCOUNTANT,
        "adjacency": "replace-one client" if r.relation == "fixed" else "update present or absent",
        "sampling": (
            "fixed cohort, not amplified against the server"
            if r.relation == "fixed"
            else f"secret Poisson coin q = {r.rate:g} (Zhu & Wang 2019, Thm 6)"
        ),
        "notes": [
            f"assumes an honest-but-curious server, at least t = {r.threshold} survivors to "
            f"unmask a sum and at most {spec.params.colluders} clients colluding with it"
            + _graph_note(r.cohort),
            "epsilon counts only the noise of t - colluders clients (the guaranteed minimum)",
        ],
    }


def _graph_note(cohort: int) -> str:
    """The SecAgg+ part of the plan's assumption (empty on the complete graph)."""
    from fedpriv.privacy.distributed import secagg

    t_k = colluder_limit(cohort)
    if t_k is None:
        return ""
    k = secagg.auto_neighbours(cohort)
    return (
        f", none of them more than {t_k - 1} in one client's neighbourhood of k + 1 = "
        f"{k + 1} (SecAgg+, Shamir threshold t_k = {t_k}), and dropped + colluders < k"
    )


def epsilon_of_z(spec: RunSpec, examples: int | None = None):
    """ε against the server as a function of z (``fedpriv epsilon --target-epsilon``)."""
    del examples
    dimension = model_dimension(spec)

    def epsilon(z: float) -> float:
        params = replace(spec.params, noise_multiplier=z, target_epsilon=0.0)
        return resolve(replace(spec, params=params), dimension).epsilon

    return epsilon


_OWNED = (
    "privacy",
    "noise-multiplier",
    "clipping-norm",
    "dp-delta",
    "distributed-target-epsilon",
    "distributed-scale",
    "distributed-bits",
    "distributed-threshold",
    "distributed-colluders",
    "distributed-relation",
    "distributed-inclusion-rate",
    "num-server-rounds",
    "num-clients",
    "clients-per-round",
    *OPT_INS,
)

MODE = Mode(
    name=NAME,
    params=DistributedDPParams,
    threat_model={
        "server": "honest but curious: it routes public keys and sealed shares and sees only "
        "masked vectors (uniform on Z_m) and their sum; it learns nothing beyond the noisy "
        "sum while fewer than t clients collude with it (on the SecAgg+ graph of a cohort "
        "of more than 10: fewer than t_k of any client's k + 1 neighbourhood, and dropped + "
        "colluders < k).",
        "clients": "each adds its own Skellam share, keeps its keys, answers one unmasking "
        "request per round and never reveals both secrets of one client.",
    },
    epsilon_against={
        "server": "client-level (epsilon, delta) of the noisy sums (t - colluders noise shares)",
        "observers": "client-level (epsilon, delta) of the released models",
    },
    plan=plan,
    disclosure={"train": PUBLIC, "evaluate": PUBLIC},
    unaccounted=UNACCOUNTED,
    owned_keys={"client": _OWNED},
    message_keys=(STEP_KEY,),
    report_label="Distributed-DP",
    noise_field="noise_multiplier",
    epsilon_of_z=epsilon_of_z,
    against="the server and observers (secure aggregation; t - colluders noise shares)",
    client_task=TASK,
)
