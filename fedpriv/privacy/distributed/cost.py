"""What one client sends per round of distributed DP, and the b-bit wire form of its vector.

Per round and client (SecAgg, Bonawitz et al. 2017 §4; SecAgg+, Bell et al. 2020 §3; k the
client's neighbours, d' the padded dimension, b the bits of Z_m):

* two public keys (mask agreement and the share channel): 2·32 bytes for X25519;
* step 2: for each of its k neighbours, a Shamir share of b_i and one of sk_i, each
  :data:`fedpriv.privacy.distributed.shamir.SHARE_BYTES` bytes, in an authenticated
  ciphertext (AES-GCM: 12-byte nonce, 16-byte tag);
* step 3: the masked vector, ``⌈b·d'/8⌉`` bytes (:func:`pack_bits`);
* step 4: one share per neighbour it holds shares for.

The first, second and fourth parts grow with k, not with the model: for a large model the
vector dominates, ``b/32`` of a float32 update. Messages' framing is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedpriv.privacy.distributed.quantize import MAX_BITS
from fedpriv.privacy.distributed.shamir import SHARE_BYTES
from fedpriv.validation import check_int

__all__ = ["UploadBytes", "client_upload_bytes", "pack_bits", "unpack_bits"]

PUBLIC_KEY_BYTES = 32  # X25519
AEAD_OVERHEAD = 12 + 16  # AES-GCM nonce + tag per ciphertext


@dataclass(frozen=True)
class UploadBytes:
    """Bytes one client sends in one round, by protocol step."""

    public_keys: int
    shares: int
    masked_vector: int
    unmasking: int

    @property
    def total(self) -> int:
        """All four steps."""
        return self.public_keys + self.shares + self.masked_vector + self.unmasking

    def ratio_to_float32(self, dimension: int) -> float:
        """``total`` over the 4·d bytes of the plain float32 update."""
        return self.total / (4.0 * check_int("dimension", dimension, lo=1))


def client_upload_bytes(padded_dim: int, bits: int, neighbours: int) -> UploadBytes:
    """:class:`UploadBytes` for a vector of ``padded_dim`` b-bit values and k neighbours."""
    padded_dim = check_int("padded_dim", padded_dim, lo=1)
    bits = check_int("bits", bits, lo=1, hi=MAX_BITS)
    neighbours = check_int("neighbours", neighbours, lo=0)
    return UploadBytes(
        public_keys=2 * PUBLIC_KEY_BYTES,
        shares=neighbours * (2 * SHARE_BYTES + AEAD_OVERHEAD),
        masked_vector=(bits * padded_dim + 7) // 8,
        unmasking=neighbours * SHARE_BYTES,
    )


def pack_bits(values: np.ndarray, bits: int) -> bytes:
    """The low ``bits`` bits of each value, little-endian, packed: ``⌈b·len/8⌉`` bytes.

    Builds a ``len × b`` bit matrix (one byte per bit): pack a very large vector in chunks.
    """
    bits = check_int("bits", bits, lo=1, hi=MAX_BITS)
    values = np.asarray(values, dtype=np.uint64).reshape(-1)
    if values.size and int(values.max()) >> bits:
        raise ValueError(f"values are not allowed: one is >= 2^{bits}; expected ring elements")
    shifts = np.arange(bits, dtype=np.uint64)
    matrix = ((values[:, None] >> shifts) & np.uint64(1)).astype(np.uint8)
    return np.packbits(matrix.reshape(-1), bitorder="little").tobytes()


def unpack_bits(packed: bytes, bits: int, size: int) -> np.ndarray:
    """The inverse of :func:`pack_bits`: ``size`` uint64 values of ``bits`` bits."""
    bits = check_int("bits", bits, lo=1, hi=MAX_BITS)
    size = check_int("size", size, lo=0)
    if len(packed) != (bits * size + 7) // 8:
        raise ValueError(
            f"len(packed) = {len(packed)} is not allowed; expected {(bits * size + 7) // 8}"
        )
    flat = np.unpackbits(
        np.frombuffer(packed, dtype=np.uint8), count=bits * size, bitorder="little"
    )
    weights = np.uint64(1) << np.arange(bits, dtype=np.uint64)
    return (flat.reshape(size, bits).astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
