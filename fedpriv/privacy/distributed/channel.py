"""The share channel of secure aggregation: authenticated encryption from one client to another.

Bonawitz et al. 2017, §4 (Fig. 4, round 1, "ShareKeys"): client u encrypts its Shamir shares
for v under ``c_{u,v} = KA.agree(c_u^SK, c_v^PK)`` with an IND-CPA and INT-CTXT scheme, and the
server relays only ciphertexts. As Flower's SecAgg+ (``flwr.common.secure_aggregation.crypto.
symmetric_encryption``: ECDH, HKDF-SHA-256 to 32 bytes, Fernet), the agreed bytes go through
HKDF-SHA-256 (RFC 5869; ``info = "fedpriv-ddp-channel"``) to a 32-byte key; the cipher is
AES-256-GCM (NIST SP 800-38D) with a fresh random 96-bit nonce per message and, as associated
data, the owner, the holder and the round's label, so a ciphertext opens only for the pair and
the round it was sealed for. A sealed message is ``nonce ‖ ciphertext ‖ 16-byte tag``;
anything altered, or opened under another key, pair or label, is refused (``ValueError``).

Needs the ``cryptography`` package (a dependency of Flower).
"""

from __future__ import annotations

import os

try:  # Flower depends on it; fedpriv's core imports it only here and in .masks
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
except ImportError:  # pragma: no cover - exercised where cryptography is absent
    AESGCM = None

__all__ = ["NONCE_BYTES", "TAG_BYTES", "channel_key", "seal", "open_sealed"]

NONCE_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32
INFO = b"fedpriv-ddp-channel"


def _need_cryptography() -> None:
    if AESGCM is None:
        raise ValueError(
            "the share channel (AES-GCM) is not allowed here; expected the `cryptography` "
            "package installed"
        )


def channel_key(agreed: bytes) -> bytes:
    """``HKDF-SHA-256(agreed, salt = none, info = "fedpriv-ddp-channel")`` -> 32 bytes."""
    _need_cryptography()
    if not isinstance(agreed, bytes) or len(agreed) < 16:
        raise ValueError("agreed is not allowed; expected at least 16 bytes of agreed secret")
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=INFO).derive(agreed)


def header(owner: int, holder: int, label: bytes) -> bytes:
    """The associated data: owner and holder (4 bytes each, big-endian) and the label."""
    return int(owner).to_bytes(4, "big") + int(holder).to_bytes(4, "big") + bytes(label)


def seal(agreed: bytes, owner: int, holder: int, label: bytes, plaintext: bytes) -> bytes:
    """``plaintext`` from ``owner`` to ``holder``: ``nonce ‖ AES-256-GCM(key, nonce,
    plaintext, header)`` with ``key = channel_key(agreed)``."""
    nonce = os.urandom(NONCE_BYTES)
    aead = AESGCM(channel_key(agreed))
    return nonce + aead.encrypt(nonce, bytes(plaintext), header(owner, holder, label))


def open_sealed(agreed: bytes, owner: int, holder: int, label: bytes, sealed: bytes) -> bytes:
    """The plaintext of :func:`seal`; ``ValueError`` when the tag does not verify (altered,
    truncated, or sealed under another key, pair or label)."""
    key = channel_key(agreed)
    sealed = bytes(sealed)
    if len(sealed) < NONCE_BYTES + TAG_BYTES:
        raise ValueError(f"sealed share from client {owner} is not allowed: it is truncated")
    nonce, body = sealed[:NONCE_BYTES], sealed[NONCE_BYTES:]
    try:
        return AESGCM(key).decrypt(nonce, body, header(owner, holder, label))
    except InvalidTag:
        raise ValueError(
            f"sealed share from client {owner} is not allowed: its tag is wrong"
        ) from None
