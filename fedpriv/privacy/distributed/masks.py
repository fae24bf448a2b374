"""Key agreement and the pseudo-random generator of secure aggregation's masks.

* Key agreement: X25519 (``cryptography``; Bernstein 2006) as in SecAgg (Bonawitz et al.
  2017, §4 "Diffie–Hellman key agreement") and Flower's SecAgg+. Without ``cryptography`` the
  stand-in ``modp-simulation`` does Diffie–Hellman in the multiplicative group mod
  p = 2^521 − 1 with generator 3: the protocol's algebra is the same, but p − 1 has small
  factors (Pohlig–Hellman), so it is SIMULATION-ONLY: never use it to protect anything.
* The shared seed of a pair: ``SHA-256("fedpriv-secagg-pair" ‖ K ‖ context)``, K the agreed
  group element, context = the two ids and the round's label (a fresh seed per pair and round).
* PRG(seed) -> ``size`` elements of Z_m, m = 2^b: ``aes-ctr`` takes AES-256 in counter mode
  (key = seed, nonce 0; each seed keys one vector) and keeps the low b bits of each
  little-endian 64-bit word; ``philox`` (no ``cryptography`` needed; not a cryptographic PRG,
  simulation-only) takes the raw 64-bit output of numpy's Philox4x64 keyed by
  ``SHA-256("fedpriv-prg" ‖ seed)[:16]``. m divides 2^64, so both are uniform on Z_m.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Optional

import numpy as np

from fedpriv.privacy.distributed.quantize import MAX_BITS
from fedpriv.validation import check_choice, check_int

try:  # the optional cryptographic backend (Flower depends on it)
    from cryptography.hazmat.primitives.asymmetric import x25519
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
except ImportError:  # pragma: no cover - exercised where cryptography is absent
    x25519 = None

__all__ = [
    "HAS_CRYPTOGRAPHY",
    "AGREEMENTS",
    "PRGS",
    "DEFAULT_AGREEMENT",
    "DEFAULT_PRG",
    "KeyPair",
    "generate_keypair",
    "public_from_private",
    "pair_seed",
    "new_seed",
    "random_below",
    "prg_vector",
    "agreer",
    "seed_of",
    "pair_seeds",
]

Entropy = Callable[[int], bytes]  # n -> n random bytes

HAS_CRYPTOGRAPHY = x25519 is not None
AGREEMENTS = ("x25519", "modp-simulation")
PRGS = ("aes-ctr", "philox")
DEFAULT_AGREEMENT = "x25519" if HAS_CRYPTOGRAPHY else "modp-simulation"
DEFAULT_PRG = "aes-ctr" if HAS_CRYPTOGRAPHY else "philox"
SEED_BYTES = 32
_MODP = (1 << 521) - 1
_MODP_GENERATOR = 3


@dataclass(frozen=True)
class KeyPair:
    """A key-agreement key pair: ``private`` as an integer (what Shamir shares), ``public``
    as the bytes sent to the other parties."""

    agreement: str
    private: int
    public: bytes


def _need_cryptography(what: str) -> None:
    if not HAS_CRYPTOGRAPHY:
        raise ValueError(f"{what} is not allowed; expected the `cryptography` package installed")


def random_below(bound: int, entropy: Optional[Entropy] = None) -> int:
    """A uniform integer in [0, bound): :func:`secrets.randbelow`, or from ``entropy`` bytes
    (16 bytes beyond the bound's width, so the modular bias is below 2^-128)."""
    if entropy is None:
        return secrets.randbelow(bound)
    width = (bound.bit_length() + 7) // 8 + 16
    return int.from_bytes(entropy(width), "big") % bound


def generate_keypair(
    agreement: str = DEFAULT_AGREEMENT, entropy: Optional[Entropy] = None
) -> KeyPair:
    """A fresh key pair, from OS entropy unless ``entropy`` is given (seeded tests only)."""
    agreement = check_choice("agreement", agreement, AGREEMENTS)
    if agreement == "x25519":
        _need_cryptography("agreement = 'x25519'")
        raw = secrets.token_bytes(32) if entropy is None else entropy(32)
        private = int.from_bytes(raw, "little")
    else:
        private = random_below(_MODP - 3, entropy) + 2
    return KeyPair(agreement, private, public_from_private(agreement, private))


def public_from_private(agreement: str, private: int) -> bytes:
    """The public key of ``private`` (the server checks a reconstructed key against it)."""
    agreement = check_choice("agreement", agreement, AGREEMENTS)
    if agreement == "x25519":
        _need_cryptography("agreement = 'x25519'")
        key = x25519.X25519PrivateKey.from_private_bytes(private.to_bytes(32, "little"))
        return key.public_key().public_bytes_raw()
    return pow(_MODP_GENERATOR, private, _MODP).to_bytes(66, "big")


def agreer(agreement: str, private: int) -> Callable[[bytes], bytes]:
    """``peer_public -> K``, the agreed group element, with ``private`` loaded once (a client
    agrees with each of its k neighbours)."""
    agreement = check_choice("agreement", agreement, AGREEMENTS)
    if agreement == "x25519":
        _need_cryptography("agreement = 'x25519'")
        key = x25519.X25519PrivateKey.from_private_bytes(private.to_bytes(32, "little"))
        return lambda peer: key.exchange(x25519.X25519PublicKey.from_public_bytes(peer))
    return lambda peer: pow(int.from_bytes(peer, "big"), private, _MODP).to_bytes(66, "big")


def seed_of(element: bytes, ids: tuple[int, int], context: bytes) -> bytes:
    """``SHA-256(tag ‖ K ‖ min id ‖ max id ‖ context)`` for an agreed element K."""
    low, high = sorted(ids)
    digest = hashlib.sha256(b"fedpriv-secagg-pair")
    digest.update(element)
    digest.update(low.to_bytes(8, "big") + high.to_bytes(8, "big") + context)
    return digest.digest()


def pair_seed(
    agreement: str, private: int, peer_public: bytes, ids: tuple[int, int], context: bytes
) -> bytes:
    """The 32-byte seed two parties share: ``SHA-256(tag ‖ K ‖ min id ‖ max id ‖ context)``."""
    return seed_of(agreer(agreement, private)(peer_public), ids, context)


def pair_seeds(
    agreement: str, private: int, peers: Mapping[int, bytes], me: int, context: bytes
) -> dict[int, bytes]:
    """:func:`pair_seed` with each of ``peers`` (``{id: public key}``), the key loaded once."""
    agree = agreer(agreement, private)
    return {j: seed_of(agree(public), (me, j), context) for j, public in peers.items()}


def new_seed(entropy: Optional[Entropy] = None) -> bytes:
    """A fresh 32-byte self-mask seed b_i, from OS entropy unless ``entropy`` is given."""
    return secrets.token_bytes(SEED_BYTES) if entropy is None else entropy(SEED_BYTES)


def prg_vector(seed: bytes, size: int, bits: int, prg: str = DEFAULT_PRG) -> np.ndarray:
    """``size`` pseudo-random elements of Z_{2^bits} (uint64) expanded from ``seed``."""
    prg = check_choice("prg", prg, PRGS)
    size = check_int("size", size, lo=0)
    mask = np.uint64((1 << check_int("bits", bits, lo=1, hi=MAX_BITS)) - 1)
    if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
        raise ValueError(f"seed = {seed!r} is not allowed; expected {SEED_BYTES} bytes")
    if prg == "aes-ctr":
        _need_cryptography("prg = 'aes-ctr'")
        encryptor = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor()
        words = np.frombuffer(encryptor.update(bytes(8 * size)), dtype="<u8")
    else:
        key = int.from_bytes(hashlib.sha256(b"fedpriv-prg" + seed).digest()[:16], "little")
        words = np.random.Philox(key=key).random_raw(size)
    return words.astype(np.uint64) & mask
