"""Secure aggregation with pairwise masks and Shamir-shared seeds (SecAgg / SecAgg+).

Bonawitz et al. 2017, "Practical Secure Aggregation for Privacy-Preserving Machine Learning",
§4 (Fig. 4, the honest-but-curious protocol), with the sparse neighbour graph of Bell et al.
2020, "Secure Single-Server Aggregation with (Poly)Logarithmic Overhead" (SecAgg+; Flower's
``SecAggPlus``). Client i of the cohort, with key pair (sk_i, pk_i) and self-mask seed b_i:

1. sends pk_i; gets its neighbours' public keys; s_ij = KA(sk_i, pk_j) (:mod:`.masks`);
2. Shamir-shares b_i and sk_i, threshold t_k, among its shareholders (its neighbours and
   itself) (:mod:`.shamir`);
3. sends ``y_i = x_i + PRG(b_i) + Σ_{j∈N(i), j>i} PRG(s_ij) − Σ_{j∈N(i), j<i} PRG(s_ij) mod m``;
4. told the survivors S (whose y arrived) and the dropped D, reveals its share of b_j for
   j ∈ S and of sk_j for j ∈ D — never both for one j, and nothing when ``|S| < t``.

The server sums y over S (pairwise masks between survivors cancel), removes PRG(b_i) for
i ∈ S, and for j ∈ D rebuilds sk_j, checks it against pk_j and removes the masks j shared with
its surviving neighbours: it gets ``Σ_{i∈S} x_i mod m`` exactly and nothing else, as long as
fewer than t_k of any client's shareholders collude with it (and, on a sparse graph, the
honest survivors stay connected: see below).

Simulated parties in one process: the shares travel in-process (the real protocol encrypts
each share to its holder under a second agreed key; not simulated here), and the cohort is
the clients that completed step 2 (a client that drops earlier leaves the cohort).

The neighbour graph (SecAgg+): with ``neighbours = k < n − 1`` it is the Harary graph H_{k,n}
(circulant: position p is adjacent to p ± 1, ..., p ± k/2 mod n; k-regular and k-connected,
Harary 1962) on a random order of the clients, the order drawn from ``graph_seed``
(:func:`graph_seed`: SHA-256 of the round's label and the cohort's public keys, which every
client recomputes from the keys it receives, so the server cannot choose the graph without
choosing the cohort) — Flower's ``SecAggPlusWorkflow`` builds the same shape from the server's
own shuffle. ``neighbours = None`` is SecAgg's complete graph. Two thresholds: ``threshold``
t, the fewest survivors for which a client reveals anything (a cohort-level rule), and the
Shamir threshold t_k over each client's k + 1 shareholders (``share_threshold``; the
complete graph's is t). A client also refuses to reveal when the survivors do not induce a
connected subgraph (the server would otherwise learn the sum of each component) or when
dropped + ``colluders`` >= k (the colluders could then cut the honest survivors apart).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional

import numpy as np

from fedpriv.privacy.distributed import masks, shamir
from fedpriv.privacy.distributed.quantize import MAX_BITS
from fedpriv.validation import check_choice, check_int

__all__ = [
    "SecAggParams",
    "SharePair",
    "Reveal",
    "InsufficientShares",
    "auto_neighbours",
    "auto_share_threshold",
    "graph_seed",
    "neighbour_graph",
    "is_connected",
    "SecAggClient",
    "SecAggServer",
]


class InsufficientShares(ValueError):
    """Fewer than t shares of a secret the server needs: the sum cannot be unmasked."""


def auto_neighbours(num_clients: int) -> int:
    """k for a cohort of n: ``2·⌈1.5·log2 n⌉`` (the smallest even k >= 3·log2 n), or n − 1
    (the complete graph) when that is not smaller.

    O(log n) as SecAgg+ needs (Bell et al. 2020, §3-4); a documented choice, not the paper's
    bound for a security parameter: what it guarantees is stated with t_k in
    docs/distributed-dp.md. n = 10: 9 (complete); n = 20: 14; n = 100: 20; n = 1000: 30.
    """
    n = check_int("num_clients", num_clients, lo=1)
    if n <= 2:
        return n - 1
    k = 2 * math.ceil(1.5 * math.log2(n))
    return n - 1 if k >= n - 1 else k


def auto_share_threshold(holders: int) -> int:
    """t_k = max(⌊h/2⌋ + 1, ⌈2h/3⌉) for h = k + 1 shareholders: a majority of a client's
    neighbourhood, with room for a third of it to drop (the cohort rule of
    :func:`fedpriv.privacy.modes.distributed_dp.auto_threshold`, per neighbourhood)."""
    h = check_int("holders", holders, lo=1)
    return max(h // 2 + 1, math.ceil(2 * h / 3))


def graph_seed(context: bytes, public_keys: Sequence[bytes]) -> bytes:
    """``SHA-256("fedpriv-secagg-graph" ‖ context ‖ n ‖ (len ‖ pk_i) for i = 0..n−1)``: the
    round's graph seed, from the label and every cohort member's masking public key."""
    digest = hashlib.sha256(b"fedpriv-secagg-graph\x00" + bytes(context) + b"\x00")
    digest.update(len(public_keys).to_bytes(4, "big"))
    for key in public_keys:
        digest.update(len(key).to_bytes(2, "big") + bytes(key))
    return digest.digest()


def neighbour_graph(num_clients: int, degree: int, seed: bytes) -> tuple[tuple[int, ...], ...]:
    """The neighbours of each client (sorted): H_{k,n} on the order drawn from ``seed``.

    Position p of the order (a permutation from numpy's Philox keyed by ``seed``) is adjacent
    to positions p ± 1, ..., p ± k/2 mod n; k = n − 1 is the complete graph (no order).
    """
    n, k = num_clients, degree
    if k >= n - 1:
        return tuple(tuple(j for j in range(n) if j != i) for i in range(n))
    key = int.from_bytes(hashlib.sha256(b"fedpriv-secagg-order" + seed).digest()[:16], "little")
    order = np.random.Generator(np.random.Philox(key=key)).permutation(n)
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    offsets = np.array([o for step in range(1, k // 2 + 1) for o in (step, -step)])
    rows = np.sort(order[(position[:, None] + offsets[None, :]) % n], axis=1)
    return tuple(map(tuple, rows.tolist()))


def is_connected(graph: Sequence[Collection[int]], members: Collection[int]) -> bool:
    """Whether ``members`` induce a connected subgraph of ``graph`` (breadth-first)."""
    inside = set(members)
    if not inside:
        return True
    start = min(inside)
    seen, frontier = {start}, [start]
    while frontier:
        nxt = [j for i in frontier for j in graph[i] if j in inside and j not in seen]
        seen.update(nxt)
        frontier = list(set(nxt))
    return len(seen) == len(inside)


@dataclass(frozen=True)
class SecAggParams:
    """The cohort's agreement: ``num_clients`` n (ids 0..n−1), ``threshold`` t (the fewest
    survivors for which a client reveals), ``bits`` b (m = 2^b), ``size`` of the vectors,
    ``neighbours`` k (None: all n − 1), ``share_threshold`` t_k (Shamir, over a client's
    k + 1 shareholders; None: t on the complete graph, :func:`auto_share_threshold` on a
    sparse one), ``graph_seed`` (:func:`graph_seed`), the key agreement, the PRG,
    ``context`` (the round's label, mixed into every pair seed) and ``colluders`` c, the
    clients assumed to collude with the server (< t_k; on a sparse graph a client reveals
    only while dropped + c < k)."""

    num_clients: int
    threshold: int
    bits: int
    size: int
    neighbours: Optional[int] = None
    agreement: str = masks.DEFAULT_AGREEMENT
    prg: str = masks.DEFAULT_PRG
    context: bytes = b""
    share_threshold: Optional[int] = None
    graph_seed: bytes = b""
    colluders: int = 0

    def __post_init__(self) -> None:
        n = check_int("num_clients", self.num_clients, lo=1)
        check_int("bits", self.bits, lo=1, hi=MAX_BITS)
        check_int("size", self.size, lo=1)
        check_choice("agreement", self.agreement, masks.AGREEMENTS)
        check_choice("prg", self.prg, masks.PRGS)
        if self.neighbours is not None:
            k = check_int("neighbours", self.neighbours, lo=0, hi=n - 1)
            if k % 2 and k != n - 1:
                raise ValueError(
                    f"neighbours = {k} is not allowed; expected an even number or n − 1 = {n - 1}"
                )
        check_int("threshold", self.threshold, lo=n // 2 + 1, hi=n)
        holders = self.degree + 1
        t_k = check_int("share_threshold", self.shamir_threshold, lo=holders // 2 + 1, hi=holders)
        check_int("colluders", self.colluders, lo=0, hi=t_k - 1)

    @property
    def degree(self) -> int:
        """k: how many neighbours each client masks with."""
        return self.num_clients - 1 if self.neighbours is None else self.neighbours

    @property
    def complete(self) -> bool:
        """Whether every client neighbours every other (SecAgg's graph)."""
        return self.degree == self.num_clients - 1

    @property
    def shamir_threshold(self) -> int:
        """t_k: shares that rebuild one client's secret (of its k + 1 shareholders)."""
        if self.share_threshold is not None:
            return self.share_threshold
        return self.threshold if self.complete else auto_share_threshold(self.degree + 1)

    @cached_property
    def graph(self) -> tuple[tuple[int, ...], ...]:
        """Every client's neighbours (:func:`neighbour_graph` of ``graph_seed``)."""
        return neighbour_graph(self.num_clients, self.degree, self.graph_seed)

    def neighbours_of(self, client: int) -> tuple[int, ...]:
        """The clients ``client`` shares pairwise masks with (sorted)."""
        return self.graph[client]

    def shareholders_of(self, client: int) -> tuple[int, ...]:
        """Who holds a share of ``client``'s secrets: its neighbours and itself."""
        return tuple(sorted((*self.neighbours_of(client), client)))

    @property
    def modulus_mask(self) -> np.uint64:
        """m − 1 (m = 2^b): ``v & mask`` is ``v mod m``."""
        return np.uint64((1 << self.bits) - 1)


@dataclass(frozen=True)
class SharePair:
    """What ``owner`` gives one shareholder: a share of its self-mask seed and of its key."""

    owner: int
    seed_share: shamir.Share
    key_share: shamir.Share


@dataclass(frozen=True)
class Reveal:
    """A shareholder's answer to the unmasking request: shares of survivors' seeds and of
    dropped clients' keys, by owner."""

    seed_shares: dict[int, shamir.Share] = field(default_factory=dict)
    key_shares: dict[int, shamir.Share] = field(default_factory=dict)


def _point(client: int) -> int:
    return client + 1  # Shamir points are >= 1


class SecAggClient:
    """One client's side of a round: keys, shares, masking, one answer to unmasking."""

    def __init__(
        self, client_id: int, params: SecAggParams, *, entropy: Optional[masks.Entropy] = None
    ) -> None:
        """``entropy`` (n -> n random bytes) replaces OS entropy for the keys, the self-mask
        seed and the Shamir coefficients: for seeded, reproducible tests only."""
        self.client_id = check_int("client_id", client_id, lo=0, hi=params.num_clients - 1)
        self.params = params
        self._entropy = entropy
        self._keys = masks.generate_keypair(params.agreement, entropy)
        self._self_seed = masks.new_seed(entropy)
        self._peer_keys: dict[int, bytes] = {}
        self._held: dict[int, SharePair] = {}
        self._answered: Optional[tuple[frozenset[int], frozenset[int]]] = None

    @property
    def public_key(self) -> bytes:
        """pk_i, sent to the server for the neighbours."""
        return self._keys.public

    def set_peer_keys(self, public_keys: Mapping[int, bytes]) -> None:
        """Record the neighbours' public keys (all a masking step needs; no sharing)."""
        neighbours = self.params.neighbours_of(self.client_id)
        missing = [j for j in neighbours if j not in public_keys]
        if missing:
            raise ValueError(f"public_keys is not allowed: it lacks neighbours {missing}")
        self._peer_keys = {j: public_keys[j] for j in neighbours}

    def make_shares(self, public_keys: Mapping[int, bytes]) -> dict[int, SharePair]:
        """Record the neighbours' public keys; Shamir-share b_i and sk_i with threshold t_k
        among the k + 1 shareholders: ``{holder: pair}``."""
        self.set_peer_keys(public_keys)
        holders = self.params.shareholders_of(self.client_id)
        points = [_point(h) for h in holders]
        t = self.params.shamir_threshold
        seed_int = int.from_bytes(self._self_seed, "big")
        seed = shamir.share_secret(seed_int, t, points, self._entropy)
        key = shamir.share_secret(self._keys.private, t, points, self._entropy)
        return {h: SharePair(self.client_id, seed[_point(h)], key[_point(h)]) for h in holders}

    def receive_shares(self, pairs: Mapping[int, SharePair]) -> None:
        """Keep the shares this client holds for others (``{owner: pair}``)."""
        for owner, pair in pairs.items():
            if pair.owner != owner or self.client_id not in self.params.shareholders_of(owner):
                raise ValueError(f"share from owner = {owner} is not allowed for this client")
        self._held = dict(pairs)

    def mask(self, encoded: np.ndarray) -> np.ndarray:
        """``y_i = x_i + PRG(b_i) + Σ_{j>i} PRG(s_ij) − Σ_{j<i} PRG(s_ij) mod m`` (uint64)."""
        p = self.params
        encoded = np.asarray(encoded)
        if encoded.shape != (p.size,) or encoded.dtype != np.uint64:
            raise ValueError(
                f"encoded is not allowed: shape {encoded.shape}, dtype {encoded.dtype}; "
                f"expected ({p.size},) uint64 ring elements"
            )
        if not self._peer_keys and p.degree:
            raise ValueError("mask is not allowed before set_peer_keys: no pair seeds yet")
        masked = encoded + masks.prg_vector(self._self_seed, p.size, p.bits, p.prg)
        seeds = masks.pair_seeds(
            p.agreement, self._keys.private, self._peer_keys, self.client_id, p.context
        )
        for j, seed in seeds.items():
            pad = masks.prg_vector(seed, p.size, p.bits, p.prg)
            masked = masked + pad if j > self.client_id else masked - pad
        return masked & p.modulus_mask

    def _check_split(self, alive: frozenset[int]) -> None:
        """On a sparse graph: the survivors must be connected, and dropped + colluders < k,
        so that the honest survivors stay connected whoever colludes (H_{k,n} is
        k-connected): else the server could learn the sum of a part of them."""
        p = self.params
        if p.complete:
            return
        if not is_connected(p.graph, alive):
            raise InsufficientShares(
                f"survivors = {sorted(alive)} is not allowed; expected survivors connected on "
                "the neighbour graph (else the server learns partial sums)"
            )
        gone = p.num_clients - len(alive)
        if gone + p.colluders >= p.degree:
            raise InsufficientShares(
                f"dropped = {gone} is not allowed; expected dropped + colluders "
                f"({p.colluders}) < k = {p.degree} (else colluders could split the survivors)"
            )

    def reveal(self, survivors: Collection[int], dropped: Collection[int]) -> Reveal:
        """Shares of b_j for j in ``survivors`` and of sk_j for j in ``dropped`` (held ones).

        Refused when the two sets overlap, when fewer than t survived, on a sparse graph when
        the survivors are split or dropped + colluders >= k (:meth:`_check_split`), or when
        the server already asked this round with other sets (it could then learn both
        secrets of a j).
        """
        alive, gone = frozenset(survivors), frozenset(dropped)
        if alive & gone:
            overlap = sorted(alive & gone)
            raise ValueError(f"survivors and dropped = {overlap} are not allowed to overlap")
        if len(alive) < self.params.threshold:
            raise InsufficientShares(
                f"survivors = {len(alive)} is not allowed; expected at least "
                f"threshold = {self.params.threshold}"
            )
        self._check_split(alive)
        if self._answered is not None and self._answered != (alive, gone):
            raise ValueError("a second unmasking request with other survivors is not allowed")
        self._answered = (alive, gone)
        return Reveal(
            seed_shares={o: pair.seed_share for o, pair in self._held.items() if o in alive},
            key_shares={o: pair.key_share for o, pair in self._held.items() if o in gone},
        )


class SecAggServer:
    """The server's side: sums the masked vectors and removes what the shares let it."""

    def __init__(self, params: SecAggParams, public_keys: Mapping[int, bytes]) -> None:
        if sorted(public_keys) != list(range(params.num_clients)):
            raise ValueError(
                f"public_keys of clients {sorted(public_keys)} are not allowed; "
                f"expected clients 0..{params.num_clients - 1}"
            )
        self.params = params
        self.public_keys = dict(public_keys)

    def _secret(self, kind: str, owner: int, reveals: Mapping[int, Reveal]) -> int:
        """Rebuild ``owner``'s self-mask seed (``kind = "seed"``) or key from the shares its
        shareholders revealed (a share counts only at its holder's own point)."""
        holders = self.params.shareholders_of(owner)
        shares = []
        for holder, reveal in reveals.items():
            book = reveal.seed_shares if kind == "seed" else reveal.key_shares
            share = book.get(owner)
            if holder in holders and share is not None and share.x == _point(holder):
                shares.append(share)
        t = self.params.shamir_threshold
        if len(shares) < t:
            raise InsufficientShares(
                f"shares of client {owner}'s {kind} = {len(shares)} are not allowed; "
                f"expected at least threshold = {t} to unmask"
            )
        return shamir.reconstruct_secret(shares, t)

    def unmask(self, masked: Mapping[int, np.ndarray], reveals: Mapping[int, Reveal]) -> np.ndarray:
        """``Σ_{i∈S} x_i mod m`` from the survivors' masked vectors (S = keys of ``masked``)
        and the shareholders' reveals (``{holder: Reveal}``)."""
        p = self.params
        survivors = sorted(masked)
        if any(i not in self.public_keys for i in survivors):
            raise ValueError(f"masked vectors from clients {survivors} are not all in the cohort")
        total = np.zeros(p.size, dtype=np.uint64)
        for i in survivors:
            total = total + np.asarray(masked[i], dtype=np.uint64)
            seed = self._secret("seed", i, reveals).to_bytes(masks.SEED_BYTES, "big")
            total = total - masks.prg_vector(seed, p.size, p.bits, p.prg)
        alive = set(survivors)
        for j in sorted(set(self.public_keys) - alive):
            partners = [i for i in p.neighbours_of(j) if i in alive]
            if partners:
                total = self._remove_pair_masks(total, j, partners, reveals)
        return total & p.modulus_mask

    def _remove_pair_masks(
        self, total: np.ndarray, dropped: int, partners: list[int], reveals: Mapping[int, Reveal]
    ) -> np.ndarray:
        """Subtract the masks survivor i added for the dropped j: +PRG(s_ij) when j > i."""
        p = self.params
        private = self._secret("key", dropped, reveals)
        if masks.public_from_private(p.agreement, private) != self.public_keys[dropped]:
            raise ValueError(f"reconstructed key of client {dropped} does not match its public key")
        peers = {i: self.public_keys[i] for i in partners}
        for i, seed in masks.pair_seeds(p.agreement, private, peers, dropped, p.context).items():
            pad = masks.prg_vector(seed, p.size, p.bits, p.prg)
            total = total - pad if dropped > i else total + pad
        return total
