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


@pytest.mark.parametrize("graph", ["complete", "sparse"])
@pytest.mark.parametrize("broken", [False, True], ids=["masked", "control-masks-cancelled"])
def test_each_masked_vector_is_uniform_on_z_m(broken: bool, graph: str, monkeypatch) -> None:
    n, t, sparse = (9, 5, SPARSE) if graph == "sparse" else (5, 3, {})
    params = S.SecAggParams(n, t, BITS, SIZE, context=b"round-1", **sparse)
    if broken:  # a mask that cancels (zero pads): y_i = x_i, a concentrated encoded update
        monkeypatch.setattr(
            masks, "prg_vector", lambda seed, size, bits, prg: np.zeros(size, np.uint64)
        )
    clients = _cohort(params, seed=4)
    enc = E.EncodingParams(dimension=SIZE, clip_norm=1.0, scale=200.0, bits=BITS)
    rng = np.random.default_rng(4)
    updates = [E.encode(rng.normal(size=SIZE) / 50, enc, rng).values for _ in range(n)]
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


SPARSE = dict(neighbours=4, share_threshold=3, graph_seed=b"graph-1")


@pytest.mark.parametrize("seed", range(12))
def test_secagg_plus_neighbour_graph_sums_exactly_or_refuses(seed: int) -> None:
    """k = 4 neighbours of n = 9, t = 5 survivors, t_k = 3 of 5 holders: exact when the
    survivors are connected, fewer than k dropped and every needed secret has t_k surviving
    holders, else one InsufficientShares error (predicted here from the graph)."""
    params = S.SecAggParams(9, 5, BITS, 128, context=b"r", **SPARSE)
    rng = np.random.default_rng(seed)
    dropped = set(rng.choice(9, size=int(rng.integers(0, 5)), replace=False).tolist())
    survivors = [i for i in range(9) if i not in dropped]
    clients, inputs = _cohort(params, seed=seed), _inputs(params, seed=seed)

    def alive_holders(owner: int) -> int:
        return sum(h not in dropped for h in params.shareholders_of(owner))

    needed = survivors + [j for j in dropped if set(params.neighbours_of(j)) - dropped]
    unsplit = _components(params, survivors) == 1 and len(dropped) < 4  # dropped + 0 < k
    if len(survivors) >= 5 and unsplit and all(alive_holders(o) >= 3 for o in needed):
        total = _round(params, clients, inputs, survivors, survivors)
        np.testing.assert_array_equal(total, _plain_sum(params, inputs, survivors))
    else:
        with pytest.raises(S.InsufficientShares):
            _round(params, clients, inputs, survivors, survivors)


def _components(params: S.SecAggParams, members: list[int]) -> int:
    """Connected components of the members' induced subgraph (union-find, not BFS)."""
    parent = {i: i for i in members}

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i in members:
        for j in params.neighbours_of(i):
            if j in parent:
                parent[root(i)] = root(j)
    return len({root(i) for i in members})


# --- the SecAgg+ graph ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [20, 57, 100, 300])
def test_the_graph_is_k_regular_symmetric_and_k_connected(n: int) -> None:
    """auto k: even, k-regular, no self-loops, symmetric; removing any k − 1 clients (random
    sets, and each client's k − 1 first neighbours) leaves the rest connected."""
    k = S.auto_neighbours(n)
    params = S.SecAggParams(n, n // 2 + 1, BITS, 8, neighbours=k, graph_seed=n.to_bytes(2, "big"))
    assert k % 2 == 0 and k < n - 1 and k >= 3 * np.log2(n)
    for i in range(n):
        row = params.neighbours_of(i)
        assert len(set(row)) == k and i not in row
        assert all(i in params.neighbours_of(j) for j in row)
    rng = np.random.default_rng(n)
    cuts = [rng.choice(n, size=k - 1, replace=False) for _ in range(40)]
    cuts += [params.neighbours_of(i)[: k - 1] for i in range(0, n, 7)]
    for cut in cuts:
        rest = sorted(set(range(n)) - {int(c) for c in cut})
        assert _components(params, rest) == 1
        assert S.is_connected(params.graph, rest)
    assert not S.is_connected(params.graph, sorted(set(range(n)) - set(params.neighbours_of(0))))


def test_the_graph_follows_its_seed_and_small_cohorts_are_complete() -> None:
    keys = [bytes([i]) * 32 for i in range(100)]
    seed = S.graph_seed(b"round-1", keys)
    assert seed == S.graph_seed(b"round-1", list(keys))
    assert seed != S.graph_seed(b"round-2", keys) != S.graph_seed(b"round-1", keys[::-1])
    a, b = S.neighbour_graph(100, 20, seed), S.neighbour_graph(100, 20, seed)
    assert a == b and a != S.neighbour_graph(100, 20, S.graph_seed(b"round-2", keys))
    # the order is random: client 0's neighbours are not the ring's 1..10 and 90..99
    assert a[0] != tuple(sorted({*range(1, 11), *range(90, 100)}))
    assert [S.auto_neighbours(n) for n in (2, 10, 20, 100, 1000)] == [1, 9, 14, 20, 30]
    complete = S.SecAggParams(10, 7, BITS, 8, neighbours=S.auto_neighbours(10))
    assert complete.complete and complete.shamir_threshold == 7
    for i in range(10):
        assert complete.neighbours_of(i) == tuple(j for j in range(10) if j != i)
    assert S.SecAggParams(100, 67, BITS, 8, neighbours=20).shamir_threshold == 14


def test_a_clients_masks_involve_only_its_neighbours() -> None:
    """Independently: y_i − x_i − PRG(b_i) equals the signed pads of i's neighbours' seeds
    computed from the other side (j's key and i's public key); nothing else is in y_i."""
    params = S.SecAggParams(12, 7, BITS, 256, context=b"r", **SPARSE)
    clients, inputs = _cohort(params, seed=5), _inputs(params, seed=5)
    m = np.uint64((1 << BITS) - 1)
    for i, client in enumerate(clients):
        rest = (client.mask(inputs[i]) - inputs[i]) & m
        rest = (rest - masks.prg_vector(client._self_seed, params.size, BITS, params.prg)) & m
        for j in params.neighbours_of(i):
            seed = masks.pair_seed(
                params.agreement, clients[j]._keys.private, client.public_key, (j, i), b"r"
            )
            pad = masks.prg_vector(seed, params.size, BITS, params.prg)
            rest = (rest - pad if j > i else rest + pad) & m
        assert not rest.any()
        others = set(range(12)) - set(params.neighbours_of(i)) - {i}
        assert len(others) == 12 - 1 - 4
        with pytest.raises(ValueError, match="not allowed for this client"):
            client.receive_shares({o: clients[o].make_shares(_keys(clients))[o] for o in others})


def _keys(clients: list[S.SecAggClient]) -> dict[int, bytes]:
    return {c.client_id: c.public_key for c in clients}


def test_worst_tolerated_dropout_in_one_neighbourhood_is_exact_and_one_more_refuses() -> None:
    """n = 100, auto k = 20, t_k = 14 of 21 holders: the k + 1 − t_k = 7 drops a
    neighbourhood tolerates, all in client 0's (itself included), unmask exactly; an eighth
    drop there leaves a secret (client 0's key, or a survivor's seed) 13 < 14 shares."""
    n = 100
    keys = [bytes([i]) * 32 for i in range(n)]
    params = S.SecAggParams(
        n, 67, BITS, 64, neighbours=S.auto_neighbours(n), context=b"r",
        graph_seed=S.graph_seed(b"r", keys),
    )  # fmt: skip
    k, tk = params.degree, params.shamir_threshold
    assert (k, tk) == (20, 14)
    clients, inputs = _cohort(params, seed=9), _inputs(params, seed=9)
    worst = [0, *params.neighbours_of(0)[: k - tk]]
    survivors = [i for i in range(n) if i not in worst]
    total = _round(params, clients, inputs, survivors, survivors)
    np.testing.assert_array_equal(total, _plain_sum(params, inputs, survivors))
    clients = _cohort(params, seed=9)
    one_more = [0, *params.neighbours_of(0)[: k - tk + 1]]
    survivors = [i for i in range(n) if i not in one_more]
    short = "'s (key|seed) = 13 are not allowed; expected at least threshold = 14"
    with pytest.raises(S.InsufficientShares, match=short):
        _round(params, clients, inputs, survivors, survivors)


def test_survivors_split_on_the_graph_get_no_reveal() -> None:
    """Dropping client 0's four neighbours isolates it: five survivors (>= t) but the server
    would learn client 0's vector alone, so no survivor reveals."""
    params = S.SecAggParams(9, 5, BITS, 64, context=b"r", **SPARSE)
    clients = _cohort(params)
    survivors = [i for i in range(9) if i not in params.neighbours_of(0)]
    assert len(survivors) == 5 and _components(params, survivors) == 2
    with pytest.raises(S.InsufficientShares, match="expected survivors connected"):
        clients[0].reveal(survivors, params.neighbours_of(0))


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


def test_dropped_plus_colluders_reaching_k_get_no_reveal() -> None:
    """k = 4, c = 2 assumed colluders: one drop reveals (1 + 2 < 4), two do not, though the
    survivors are connected and the shares would suffice."""
    params = S.SecAggParams(9, 5, BITS, 64, context=b"r", colluders=2, **SPARSE)
    clients, inputs = _cohort(params, seed=3), _inputs(params, seed=3)
    survivors = list(range(1, 9))
    total = _round(params, clients, inputs, survivors, survivors)
    np.testing.assert_array_equal(total, _plain_sum(params, inputs, survivors))
    clients = _cohort(params, seed=3)
    far = next(j for j in range(1, 9) if j not in params.neighbours_of(0))
    survivors = [i for i in range(9) if i not in (0, far)]
    assert _components(params, survivors) == 1
    with pytest.raises(S.InsufficientShares, match=r"dropped = 2 .* colluders \(2\) < k = 4"):
        clients[survivors[0]].reveal(survivors, [0, far])
    with pytest.raises(ValueError, match="colluders = 3 is not allowed"):
        S.SecAggParams(9, 5, BITS, 64, colluders=3, **SPARSE)


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
        S.SecAggParams(9, 5, BITS, 64, neighbours=3)
    with pytest.raises(ValueError, match="agreement = 'rsa' is not allowed"):
        S.SecAggParams(5, 3, BITS, 64, agreement="rsa")
    with pytest.raises(ValueError, match="share_threshold = 2 is not allowed; expected an intege"):
        S.SecAggParams(9, 5, BITS, 64, neighbours=4, share_threshold=2)
    with pytest.raises(ValueError, match="threshold = 3 is not allowed; expected an integer >= 5"):
        S.SecAggParams(9, 3, BITS, 64, neighbours=4)
