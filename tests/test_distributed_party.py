"""A client's SecAgg round across separate messages (fedpriv.privacy.distributed.party):
the same keys in every message, sealed shares only their holder opens, a dropout recovered."""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.privacy.distributed import channel as C
from fedpriv.privacy.distributed import party as P
from fedpriv.privacy.distributed import secagg as S

LABEL = b"run-1/round-3"


def _secrets(n: int) -> list[bytes]:
    return [bytes([i + 1]) * P.SECRET_BYTES for i in range(n)]


def test_a_party_is_rebuilt_with_the_same_keys_from_its_secret():
    params = S.SecAggParams(num_clients=3, threshold=2, bits=16, size=8)
    secret = _secrets(1)[0]
    keys = P.RoundParty.public_keys_of(secret, LABEL, params.agreement)
    again = P.RoundParty(secret, LABEL, 1, params)
    assert keys == P.RoundParty.public_keys_of(secret, LABEL, params.agreement)
    assert keys.mask == again._client.public_key and keys.channel == again._channel.public
    assert keys != P.RoundParty.public_keys_of(secret, b"run-1/round-4", params.agreement)
    assert keys.mask != keys.channel


def test_the_key_stream_is_the_shake_output_in_order():
    """Read in pieces of any size, the stream is SHAKE-256(tag ‖ secret ‖ label) itself."""
    import hashlib

    secret = _secrets(1)[0]
    stream = P.KeyStream(secret, LABEL)
    pieces = [stream(n) for n in (1, 32, 5000, 82, 9000, 3)]
    whole = hashlib.shake_256(b"fedpriv-ddp-party\x00" + secret + LABEL).digest(14118)
    assert b"".join(pieces) == whole and [len(p) for p in pieces] == [1, 32, 5000, 82, 9000, 3]


def test_a_sealed_share_opens_only_for_its_holder_and_detects_tampering():
    agreed, other = b"a" * 32, b"b" * 32
    sealed = P.seal(agreed, 0, 2, LABEL, b"[1, 2, 3]")
    assert b"[1, 2, 3]" not in sealed
    assert len(sealed) == C.NONCE_BYTES + len(b"[1, 2, 3]") + C.TAG_BYTES
    assert P.open_sealed(agreed, 0, 2, LABEL, sealed) == b"[1, 2, 3]"
    for key, owner, holder, label in (
        (other, 0, 2, LABEL), (agreed, 1, 2, LABEL), (agreed, 0, 1, LABEL),
        (agreed, 0, 2, b"run-1/round-4"),
    ):  # fmt: skip
        with pytest.raises(ValueError, match="tag is wrong"):
            P.open_sealed(key, owner, holder, label, sealed)
    for at in (0, C.NONCE_BYTES, len(sealed) - 1):  # the nonce, the ciphertext, the tag
        flipped = sealed[:at] + bytes([sealed[at] ^ 1]) + sealed[at + 1 :]
        with pytest.raises(ValueError, match="tag is wrong"):
            P.open_sealed(agreed, 0, 2, LABEL, flipped)
    with pytest.raises(ValueError, match="truncated"):
        P.open_sealed(agreed, 0, 2, LABEL, sealed[: C.NONCE_BYTES + C.TAG_BYTES - 1])


def test_the_channel_is_aes_gcm_under_an_hkdf_key():
    """Independently: HKDF-SHA-256 of the agreed bytes, AES-256-GCM with the 12-byte nonce
    in front and (owner, holder, label) as associated data; a fresh nonce per seal."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    agreed = bytes(range(32))
    key = HKDF(hashes.SHA256(), 32, None, b"fedpriv-ddp-channel").derive(agreed)
    sealed = P.seal(agreed, 3, 7, LABEL, b"share")
    aad = (3).to_bytes(4, "big") + (7).to_bytes(4, "big") + LABEL
    assert AESGCM(key).decrypt(sealed[:12], sealed[12:], aad) == b"share"
    again = P.seal(agreed, 3, 7, LABEL, b"share")
    assert again[:12] != sealed[:12] and again[12:] != sealed[12:]  # no nonce reuse
    nonce = bytes(12)  # and one sealed by anyone with the key opens
    assert P.open_sealed(agreed, 3, 7, LABEL, nonce + AESGCM(key).encrypt(nonce, b"x", aad)) == b"x"


def test_a_share_sealed_between_two_parties_opens_only_with_their_agreed_key():
    params = S.SecAggParams(num_clients=3, threshold=2, bits=16, size=8, context=LABEL)
    secrets = _secrets(3)
    keys = [P.RoundParty.public_keys_of(s, LABEL, params.agreement) for s in secrets]
    mask_keys, channel_keys = [k.mask for k in keys], [k.channel for k in keys]
    sealed = P.RoundParty(secrets[0], LABEL, 0, params).sealed_shares(mask_keys, channel_keys)
    holder = P.RoundParty(secrets[1], LABEL, 1, params)
    answer = holder.reveal(channel_keys, {0: sealed[1]}, [0, 1], [2])
    assert 0 in P.reveal_from_bytes(answer).seed_shares
    # the share sealed for client 2 does not open at client 1 (another agreed key)
    with pytest.raises(ValueError, match="tag is wrong"):
        P.RoundParty(secrets[1], LABEL, 1, params).reveal(channel_keys, {0: sealed[2]}, [0, 1], [2])
    # nor with a swapped channel key of its owner (a server substituting keys)
    forged = [channel_keys[2], channel_keys[1], channel_keys[0]]
    with pytest.raises(ValueError, match="tag is wrong"):
        P.RoundParty(secrets[1], LABEL, 1, params).reveal(forged, {0: sealed[1]}, [0, 1], [2])


@pytest.mark.parametrize("n,t,degree", [(5, 3, 4), (30, 20, 16)], ids=["complete", "secagg+"])
def test_a_round_across_messages_recovers_a_dropped_client(n, t, degree):
    """The wiring's path: the graph from the cohort's keys (complete at n = 5, k = 16 at
    n = 30); each client seals shares to its k + 1 holders only."""
    bits, size = 20, 64
    secrets = _secrets(n)
    # message 1: keys (every party rebuilt from its secret in every message)
    keys = [P.RoundParty.public_keys_of(s, LABEL, "x25519") for s in secrets]
    mask_keys, channel_keys = [k.mask for k in keys], [k.channel for k in keys]
    params = P.cohort_params(threshold=t, bits=bits, size=size, context=LABEL, mask_keys=mask_keys)
    assert params.degree == degree and params.complete == (degree == n - 1)
    # message 2: sealed shares, routed by the server as opaque bytes
    sealed = {}
    for i, s in enumerate(secrets):
        for holder, blob in (
            P.RoundParty(s, LABEL, i, params).sealed_shares(mask_keys, channel_keys).items()
        ):
            sealed[(i, holder)] = blob
    for i in range(n):
        assert sorted(h for (o, h) in sealed if o == i) == list(params.shareholders_of(i))
    # message 3: masked vectors; client 2 drops
    rng = np.random.default_rng(0)
    x = rng.integers(0, 1 << bits, size=(n, size), dtype=np.uint64)
    dropped = [2]
    survivors = [i for i in range(n) if i not in dropped]
    masked = {
        i: P.RoundParty(secrets[i], LABEL, i, params).mask(x[i], mask_keys) for i in survivors
    }
    # message 4: reveal
    reveals = {}
    for i in survivors:
        mine = {o: blob for (o, h), blob in sealed.items() if h == i}
        answer = P.RoundParty(secrets[i], LABEL, i, params).reveal(
            channel_keys, mine, survivors, dropped
        )
        reveals[i] = P.reveal_from_bytes(answer)
    total = S.SecAggServer(params, dict(enumerate(mask_keys))).unmask(masked, reveals)
    expected = x[survivors].sum(axis=0) & np.uint64((1 << bits) - 1)
    assert np.array_equal(total, expected)
    # a masked vector alone says nothing: far from its input
    assert np.mean(masked[0] == x[0]) < 0.05
