"""A client of one distributed-DP round across separate messages, and the share channel.

A federated client answers the four steps of secure aggregation (:mod:`.secagg`) in four
messages, possibly in four processes. :class:`RoundParty` rebuilds the same
:class:`.secagg.SecAggClient` for every step from the client's own 32-byte secret and the
round's label: its key pairs, self-mask seed and Shamir coefficients are drawn from
``SHAKE-256(secret ‖ label)`` (:class:`KeyStream`), so nothing but that secret (kept in the
client's own state folder) has to survive between messages, and the server never holds it.

The Shamir shares travel through the server as opaque bytes: each is encrypted to its
holder (:func:`seal` / :func:`open_sealed`, from :mod:`.channel`) under a key agreed with a
second key pair (the "c" keys of Bonawitz et al. 2017, §4; separate from the masking keys,
whose private halves a dropout's recovery reveals): X25519, HKDF-SHA-256 and AES-256-GCM with
the owner, the holder and the round's label as associated data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

from fedpriv.privacy.distributed import masks, secagg, shamir
from fedpriv.privacy.distributed.channel import open_sealed, seal

__all__ = [
    "KeyStream",
    "RoundParty",
    "cohort_params",
    "seal",
    "open_sealed",
    "pair_to_bytes",
    "pair_from_bytes",
    "reveal_to_bytes",
    "reveal_from_bytes",
]

SECRET_BYTES = 32


class KeyStream:
    """``n -> n`` bytes of ``SHAKE-256(secret ‖ label)``, read in order (a secagg Entropy)."""

    def __init__(self, secret: bytes, label: bytes) -> None:
        if not isinstance(secret, bytes) or len(secret) != SECRET_BYTES:
            raise ValueError(f"secret is not allowed; expected {SECRET_BYTES} bytes")
        self._xof = hashlib.shake_256(b"fedpriv-ddp-party\x00" + secret + label)
        self._used = 0
        self._buffer = b""

    def __call__(self, n: int) -> bytes:
        """The next ``n`` bytes. The XOF is squeezed in doubling blocks (its output is a
        prefix-stable stream: ``digest(a)`` is the first a bytes of ``digest(b)``, a <= b),
        so reading in small pieces costs O(total), not O(total²)."""
        end = self._used + n
        if end > len(self._buffer):
            self._buffer = self._xof.digest(max(end, 2 * len(self._buffer), 4096))
        out = self._buffer[self._used : end]
        self._used = end
        return out


def pair_to_bytes(pair: secagg.SharePair) -> bytes:
    """A :class:`.secagg.SharePair` as bytes."""
    s, k = pair.seed_share, pair.key_share
    return json.dumps([pair.owner, s.x, s.y, k.x, k.y]).encode()


def pair_from_bytes(data: bytes) -> secagg.SharePair:
    """The inverse of :func:`pair_to_bytes`."""
    owner, sx, sy, kx, ky = json.loads(data.decode())
    return secagg.SharePair(
        int(owner), shamir.Share(int(sx), int(sy)), shamir.Share(int(kx), int(ky))
    )


def reveal_to_bytes(reveal: secagg.Reveal) -> bytes:
    """A :class:`.secagg.Reveal` as bytes (what a survivor sends at unmasking)."""
    return json.dumps(
        {
            "seed": {str(o): [s.x, s.y] for o, s in reveal.seed_shares.items()},
            "key": {str(o): [s.x, s.y] for o, s in reveal.key_shares.items()},
        }
    ).encode()


def reveal_from_bytes(data: bytes) -> secagg.Reveal:
    """The inverse of :func:`reveal_to_bytes`."""
    raw = json.loads(data.decode())
    return secagg.Reveal(
        seed_shares={int(o): shamir.Share(int(x), int(y)) for o, (x, y) in raw["seed"].items()},
        key_shares={int(o): shamir.Share(int(x), int(y)) for o, (x, y) in raw["key"].items()},
    )


def cohort_params(
    *,
    threshold: int,
    bits: int,
    size: int,
    context: bytes,
    mask_keys: Sequence[bytes],
    neighbours: Optional[int] = None,
    colluders: int = 0,
) -> secagg.SecAggParams:
    """The round's :class:`.secagg.SecAggParams` for the cohort whose masking keys are
    ``mask_keys`` (ids 0..n−1 in that order): k = ``neighbours`` or
    :func:`.secagg.auto_neighbours` of n, the graph from :func:`.secagg.graph_seed` of the
    label and the keys, ``colluders`` assumed. The server and every client build it alike
    from what they hold."""
    n = len(mask_keys)
    k = secagg.auto_neighbours(n) if neighbours is None else neighbours
    return secagg.SecAggParams(
        num_clients=n,
        threshold=threshold,
        bits=bits,
        size=size,
        neighbours=None if k >= n - 1 else k,
        context=context,
        graph_seed=secagg.graph_seed(context, [bytes(key) for key in mask_keys]),
        colluders=colluders,
    )


@dataclass(frozen=True)
class PublicKeys:
    """A client's two public keys: ``mask`` (pairwise masks) and ``channel`` (shares)."""

    mask: bytes
    channel: bytes


class RoundParty:
    """Client ``client_id`` of a round's cohort (``params``), rebuilt from ``secret`` and the
    round's ``label`` (the same keys, seed and shares in every message of the round)."""

    def __init__(
        self, secret: bytes, label: bytes, client_id: int, params: secagg.SecAggParams
    ) -> None:
        self.label = label
        self.params = params
        self.client_id = client_id
        self._client = secagg.SecAggClient(client_id, params, entropy=KeyStream(secret, label))
        channel_stream = KeyStream(secret, b"channel\x00" + label)
        self._channel = masks.generate_keypair(params.agreement, channel_stream)
        self._agree = masks.agreer(params.agreement, self._channel.private)

    @classmethod
    def public_keys_of(cls, secret: bytes, label: bytes, agreement: str) -> PublicKeys:
        """Both public keys, before the cohort is known (the keys do not depend on it)."""
        stub = secagg.SecAggParams(num_clients=1, threshold=1, bits=2, size=1, agreement=agreement)
        party = cls(secret, label, 0, stub)
        return PublicKeys(party._client.public_key, party._channel.public)

    def _agreed(self, peer_channel: bytes, peer: int) -> bytes:
        return masks.seed_of(
            self._agree(peer_channel), (self.client_id, peer), b"fedpriv-ddp-channel" + self.label
        )

    def sealed_shares(
        self, mask_keys: Sequence[bytes], channel_keys: Sequence[bytes]
    ) -> dict[int, bytes]:
        """``{holder: sealed SharePair}`` of this client's secrets (itself included)."""
        pairs = self._client.make_shares(dict(enumerate(mask_keys)))
        return {
            holder: seal(
                self._agreed(channel_keys[holder], holder),
                self.client_id,
                holder,
                self.label,
                pair_to_bytes(pair),
            )
            for holder, pair in pairs.items()
        }

    def mask(self, encoded, mask_keys: Sequence[bytes]):
        """The masked vector ``y_i`` of ``encoded`` (uint64 ring elements)."""
        self._client.set_peer_keys(dict(enumerate(mask_keys)))
        return self._client.mask(encoded)

    def reveal(
        self,
        channel_keys: Sequence[bytes],
        sealed: Mapping[int, bytes],
        survivors: Sequence[int],
        dropped: Sequence[int],
    ) -> bytes:
        """Open the shares held for others (``{owner: sealed}``) and answer the unmasking
        request: the serialised :class:`.secagg.Reveal`."""
        pairs = {
            owner: pair_from_bytes(
                open_sealed(
                    self._agreed(channel_keys[owner], owner),
                    owner,
                    self.client_id,
                    self.label,
                    blob,
                )
            )
            for owner, blob in sealed.items()
        }
        self._client.receive_shares(pairs)
        return reveal_to_bytes(self._client.reveal(survivors, dropped))
