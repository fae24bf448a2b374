"""End to end, fedpriv.privacy.distributed: a plan for a target ε, then rounds of clients that
encode and mask, drop out, and a server that unmasks and decodes the survivors' mean."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.privacy.distributed import accounting as A
from fedpriv.privacy.distributed import encoding as E
from fedpriv.privacy.distributed import plan as P
from fedpriv.privacy.distributed import quantize as Q
from fedpriv.privacy.distributed import secagg as S

DELTA = 1e-5


def _plan(**overrides) -> P.DistributedPlan:
    args = dict(dimension=1000, clip_norm=1.0, scale=256.0, clients=8, threshold=5, rounds=20,
                target_epsilon=8.0, delta=DELTA)  # fmt: skip
    args.update(overrides)
    return P.plan_round(**args)


def test_the_plan_meets_its_target_with_the_guaranteed_noise_only() -> None:
    plan = _plan(colluders=1)
    assert plan.noisy_clients == 4 and plan.epsilon <= 8.0
    params = plan.encoding
    again = A.skellam_epsilon(
        params.noise_variance,
        rounds=20,
        delta=DELTA,
        noisy_clients=4,
        norm_bound=params.norm_bound,
        dimension=params.padded_dim,
        sampled=8,
        population=8,
    )
    assert again == pytest.approx(plan.epsilon, rel=1e-12)
    assert params.bits == E.bits_for(params, 8)
    secagg = plan.secagg(b"round-3")
    assert (secagg.num_clients, secagg.threshold, secagg.bits) == (8, 5, params.bits)
    assert secagg.size == params.padded_dim == 1024


def _one_round(plan: P.DistributedPlan, updates, dropped, seed: int) -> np.ndarray:
    params, secagg = plan.encoding, plan.secagg(f"round-{seed}".encode())
    rng = np.random.default_rng(seed)
    clients = [S.SecAggClient(i, secagg) for i in range(secagg.num_clients)]
    public = {c.client_id: c.public_key for c in clients}
    made = {c.client_id: c.make_shares(public) for c in clients}
    for c in clients:
        c.receive_shares({o: pairs[c.client_id] for o, pairs in made.items()})
    survivors = [i for i in range(secagg.num_clients) if i not in dropped]
    masked = {i: clients[i].mask(E.encode(updates[i], params, rng).values) for i in survivors}
    reveals = {i: clients[i].reveal(survivors, sorted(dropped)) for i in survivors}
    total = S.SecAggServer(secagg, public).unmask(masked, reveals)
    return E.decode_mean(total, params, len(survivors))


@pytest.mark.parametrize("dropped", [(), (2,), (0, 5, 7)])
def test_a_round_decodes_the_survivors_mean_within_the_noise(dropped: tuple[int, ...]) -> None:
    plan = _plan()
    rng = np.random.default_rng(len(dropped))
    updates = [rng.normal(size=1000) * 0.05 + 0.02 * i for i in range(8)]
    mean = _one_round(plan, updates, set(dropped), seed=len(dropped))
    survivors = [i for i in range(8) if i not in dropped]
    exact = np.mean([Q.clip_l2(updates[i], 1.0) for i in survivors], axis=0)
    n = len(survivors)
    noise_std = math.sqrt(n * plan.encoding.noise_variance + n / 4) / plan.encoding.scale / n
    error = mean - exact
    assert abs(error.std() / noise_std - 1) < 0.1  # the noise is the survivors' Skellam
    assert abs(error.mean()) < 4 * noise_std / math.sqrt(1000)


def test_a_plan_with_too_fine_a_scale_is_refused() -> None:
    with pytest.raises(
        ValueError, match="scale = 1e\\+18 is not allowed; expected a scale whose sum fits 62 bits"
    ):
        _plan(scale=1e18)


def test_self_sampling_keeps_the_noise_and_decodes_an_unbiased_mean() -> None:
    """Poisson self-sampling: each client includes its update with probability q by its own
    coin, noise always; dividing by q·n gives an unbiased mean."""
    rng = np.random.default_rng(12)
    update = np.ones(16)
    kept = [E.self_sample(update, 0.3, rng) for _ in range(2000)]
    included = np.mean([k.any() for k in kept])
    assert abs(included - 0.3) < 0.03 and all(k.any() == k.all() for k in kept)
    params = E.EncodingParams(dimension=16, clip_norm=10.0, scale=64.0, bits=40, noise_variance=9.0)
    total = np.zeros(16, dtype=np.uint64)
    for k in kept:
        total = (total + E.encode(k, params, rng).values) & np.uint64((1 << 40) - 1)
    mean = E.decode_mean(total, params, 2000, rate=0.3)
    assert np.allclose(mean, 1.0, atol=0.12)  # sampling error ~ √(0.7/(0.3·2000)) ≈ 0.034
    noise = E.decode_sum(E.encode(np.zeros(16), params, rng).values, params)
    assert noise.any()  # an excluded client still sends its noise share
