"""Tests for fedpriv.privacy.distributed's secure aggregation: Shamir sharing, masks that look
uniform, the exact modular sum of the survivors under drops, and refusal below t shares."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from fedpriv.privacy.distributed import encoding as E
from fedpriv.privacy.distributed import masks, shamir
from fedpriv.privacy.distributed import secagg as S

BITS, SIZE = 16, 2048


def _entropy(seed: int):
    return np.random.default_rng(seed).bytes


def _cohort(params: S.SecAggParams, seed: int = 0) -> list[S.SecAggClient]:
    """Steps 1–2 for every client: keys advertised, shares made and delivered."""
    clients = [
        S.SecAggClient(i, params, entropy=_entropy(seed * 1000 + i))
        for i in range(params.num_clients)
    ]
    public = {c.client_id: c.public_key for c in clients}
    made = {c.client_id: c.make_shares(public) for c in clients}
    for c in clients:
        c.receive_shares(
            {o: pairs[c.client_id] for o, pairs in made.items() if c.client_id in pairs}
        )
    return clients


def _inputs(params: S.SecAggParams, seed: int = 0) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    high = 1 << params.bits
    return {
        i: rng.integers(0, high, params.size, dtype=np.uint64) for i in range(params.num_clients)
    }


def _round(params, clients, inputs, masked_by, revealed_by) -> np.ndarray:
    """Steps 3–4 and the server: ``masked_by`` send y, ``revealed_by`` answer unmasking."""
    masked = {i: clients[i].mask(inputs[i]) for i in masked_by}
    dropped = sorted(set(range(params.num_clients)) - set(masked_by))
    reveals = {i: clients[i].reveal(sorted(masked_by), dropped) for i in revealed_by}
    server = S.SecAggServer(params, {c.client_id: c.public_key for c in clients})
    return server.unmask(masked, reveals)


def _plain_sum(params, inputs, members) -> np.ndarray:
    total = sum((inputs[i].astype(object) for i in members), np.zeros(params.size, dtype=object))
    return (total % (1 << params.bits)).astype(np.uint64)


# --- Shamir -----------------------------------------------------------------------------------


def test_any_t_shares_reconstruct_and_fewer_are_refused() -> None:
    secret = int.from_bytes(bytes(range(32)), "big")
    shares = shamir.share_secret(secret, 3, range(1, 6), _entropy(1))
    for subset in itertools.combinations(shares.values(), 3):
        assert shamir.reconstruct_secret(subset, 3) == secret
    with pytest.raises(
        ValueError, match="shares = 2 are not allowed; expected at least threshold = 3"
    ):
        shamir.reconstruct_secret(list(shares.values())[:2], 3)


def test_t_minus_one_shares_are_consistent_with_any_secret() -> None:
    """Two of a 3-of-n secret's shares fit every secret: for each candidate there is a
    degree-2 polynomial through (0, candidate) and the two shares."""
    shares = list(shamir.share_secret(12345, 3, range(1, 6), _entropy(2)).values())[:2]
    for other in (0, 999, 12345, shamir.PRIME - 1):
        assert shamir.reconstruct_secret([*shares, _through(shares, other, 7)], 3) == other


def _through(points: list[shamir.Share], secret: int, x: int) -> shamir.Share:
    """The value at x of the degree-2 polynomial through (0, secret) and ``points``."""
    nodes = [(0, secret), *((p.x, p.y) for p in points)]
    value = 0
    for k, (xk, yk) in enumerate(nodes):
        term = yk
        for m, (xm, _) in enumerate(nodes):
            if m != k:
                term = term * (x - xm) * pow(xk - xm, -1, shamir.PRIME) % shamir.PRIME
        value = (value + term) % shamir.PRIME
    return shamir.Share(x, value)


# --- masks look uniform -----------------------------------------------------------------------


def _uniform_pvalue(values: np.ndarray, bits: int) -> float:
    """The smaller p-value of a 64-bin chi-square and a KS test against uniform on Z_m."""
    bins = np.bincount((values >> np.uint64(bits - 6)).astype(np.int64), minlength=64)
    chi2 = stats.chisquare(bins).pvalue
    ks = stats.kstest(values.astype(np.float64) / (1 << bits), "uniform").pvalue
    return float(min(chi2, ks))


@pytest.mark.parametrize("broken", [False, True], ids=["masked", "control-masks-cancelled"])
def test_each_masked_vector_is_uniform_on_z_m(broken: bool, monkeypatch) -> None:
    params = S.SecAggParams(num_clients=5, threshold=3, bits=BITS, size=SIZE, context=b"round-1")
    if broken:  # a mask that cancels (zero pads): y_i = x_i, a concentrated encoded update
        monkeypatch.setattr(
            masks, "prg_vector", lambda seed, size, bits, prg: np.zeros(size, np.uint64)
        )
    clients = _cohort(params, seed=4)
    enc = E.EncodingParams(dimension=SIZE, clip_norm=1.0, scale=200.0, bits=BITS)
    rng = np.random.default_rng(4)
    updates = [E.encode(rng.normal(size=SIZE) / 50, enc, rng).values for _ in range(5)]
    pvalues = [_uniform_pvalue(c.mask(x), BITS) for c, x in zip(clients, updates)]
    if broken:
        assert max(pvalues) < 1e-12
    else:
        assert min(pvalues) > 1e-4


def test_the_prgs_are_uniform_and_distinct() -> None:
    for prg in masks.PRGS if masks.HAS_CRYPTOGRAPHY else ("philox",):
        first = masks.prg_vector(bytes(32), 50_000, 20, prg)
        assert _uniform_pvalue(first, 20) > 1e-4
        assert not np.array_equal(first, masks.prg_vector(bytes([1]) + bytes(31), 50_000, 20, prg))
        np.testing.assert_array_equal(first, masks.prg_vector(bytes(32), 50_000, 20, prg))


# --- the exact sum under drops ----------------------------------------------------------------


AGREEMENTS = [("modp-simulation", "philox")]
if masks.HAS_CRYPTOGRAPHY:  # Flower depends on it; the stand-ins cover an install without
    AGREEMENTS.insert(0, ("x25519", "aes-ctr"))


@pytest.mark.parametrize("agreement,prg", AGREEMENTS)
@pytest.mark.parametrize("drops", [0, 1, 2, 3])
def test_unmasked_sum_is_the_survivors_modular_sum(agreement: str, prg: str, drops: int) -> None:
    """n = 7, t = 4: up to n − t = 3 clients drop after sending their shares."""
    params = S.SecAggParams(7, 4, BITS, 256, agreement=agreement, prg=prg, context=b"r")
    clients, inputs = _cohort(params, seed=drops), _inputs(params, seed=drops)
    dropped = np.random.default_rng(drops).choice(7, size=drops, replace=False)
    survivors = [i for i in range(7) if i not in dropped]
    total = _round(params, clients, inputs, survivors, survivors)
    np.testing.assert_array_equal(total, _plain_sum(params, inputs, survivors))


def test_clients_that_drop_after_masking_still_count() -> None:
    """Two clients send y and then drop before unmasking: their x stays in the sum."""
    params = S.SecAggParams(7, 4, BITS, 256, context=b"r")
    clients, inputs = _cohort(params, seed=11), _inputs(params, seed=11)
    masked_by = [0, 1, 2, 4, 5, 6]  # 3 dropped before masking
    total = _round(params, clients, inputs, masked_by, revealed_by=[0, 2, 4, 6])
    np.testing.assert_array_equal(total, _plain_sum(params, inputs, masked_by))


@pytest.mark.parametrize("seed", range(12))
def test_secagg_plus_neighbour_graph_sums_exactly_or_refuses(seed: int) -> None:
    """k = 4 neighbours of n = 9, t = 3: exact when every needed secret has t surviving
    holders, else one InsufficientShares error (predicted here from the graph)."""
    params = S.SecAggParams(9, 3, BITS, 128, neighbours=4, context=b"r")
    rng = np.random.default_rng(seed)
    dropped = set(rng.choice(9, size=int(rng.integers(0, 5)), replace=False).tolist())
    survivors = [i for i in range(9) if i not in dropped]
    clients, inputs = _cohort(params, seed=seed), _inputs(params, seed=seed)

    def alive_holders(owner: int) -> int:
        return sum(h not in dropped for h in params.shareholders_of(owner))

    needed = survivors + [j for j in dropped if set(params.neighbours_of(j)) - dropped]
    if len(survivors) >= 3 and all(alive_holders(o) >= 3 for o in needed):
        total = _round(params, clients, inputs, survivors, survivors)
        np.testing.assert_array_equal(total, _plain_sum(params, inputs, survivors))
    else:
        with pytest.raises(S.InsufficientShares):
            _round(params, clients, inputs, survivors, survivors)


def test_encoded_updates_through_secagg_decode_to_the_mean() -> None:
    enc = E.EncodingParams(dimension=300, clip_norm=1.0, scale=500.0, bits=32, noise_variance=0.0)
    params = S.SecAggParams(5, 3, enc.bits, enc.padded_dim, context=b"r")
    rng = np.random.default_rng(8)
    updates = [rng.normal(size=300) * 0.03 for _ in range(5)]
    inputs = {i: E.encode(x, enc, rng).values for i, x in enumerate(updates)}
    survivors = [0, 1, 3, 4]
    mean = E.decode_mean(_round(params, _cohort(params), inputs, survivors, survivors), enc, 4)
    exact = np.mean([updates[i] for i in survivors], axis=0)
    assert np.linalg.norm(mean - exact) < np.sqrt(512) / 500  # the rounding bound / n·n


# --- refusals ---------------------------------------------------------------------------------


def test_fewer_than_t_shares_cannot_unmask() -> None:
    params = S.SecAggParams(6, 4, BITS, 64, context=b"r")
    clients, inputs = _cohort(params), _inputs(params)
    survivors = [0, 1, 2, 3, 4]
    with pytest.raises(
        S.InsufficientShares,
        match=r"shares of client \d's seed = 3 are not allowed; expected at least threshold = 4",
    ):
        _round(params, clients, inputs, survivors, revealed_by=[0, 1, 2])
    with pytest.raises(S.InsufficientShares, match="survivors = 3 is not allowed"):
        clients[0].reveal([0, 1, 2], [3, 4, 5])


def test_a_client_reveals_one_split_only_and_never_both_secrets() -> None:
    params = S.SecAggParams(5, 3, BITS, 64)
    client = _cohort(params)[0]
    with pytest.raises(ValueError, match="not allowed to overlap"):
        client.reveal([0, 1, 2, 3], [3, 4])
    first = client.reveal([0, 1, 2, 3], [4])
    assert set(first.seed_shares) == {0, 1, 2, 3} and set(first.key_shares) == {4}
    assert client.reveal([0, 1, 2, 3], [4]) == first
    with pytest.raises(ValueError, match="second unmasking request"):
        client.reveal([0, 1, 2], [3, 4])


def test_a_tampered_key_share_is_detected() -> None:
    params = S.SecAggParams(5, 3, BITS, 64)
    clients, inputs = _cohort(params), _inputs(params)
    masked = {i: clients[i].mask(inputs[i]) for i in range(4)}
    reveals = {i: clients[i].reveal(range(4), [4]) for i in range(4)}
    bad = reveals[0].key_shares[4]
    reveals[0].key_shares[4] = shamir.Share(bad.x, (bad.y + 1) % shamir.PRIME)
    server = S.SecAggServer(params, {c.client_id: c.public_key for c in clients})
    with pytest.raises(ValueError, match="does not match its public key"):
        server.unmask(masked, reveals)


def test_params_are_checked() -> None:
    with pytest.raises(ValueError, match="threshold = 2 is not allowed; expected an integer >= 3"):
        S.SecAggParams(5, 2, BITS, 64)
    with pytest.raises(ValueError, match="neighbours = 3 is not allowed; expected an even number"):
        S.SecAggParams(9, 3, BITS, 64, neighbours=3)
    with pytest.raises(ValueError, match="agreement = 'rsa' is not allowed"):
        S.SecAggParams(5, 3, BITS, 64, agreement="rsa")
    assert S.SecAggParams(9, 3, BITS, 64, neighbours=4).neighbours_of(0) == (1, 2, 7, 8)
