"""The worker's check of weights updates: a proof of the admin key (HMAC-SHA256), once, within the window."""

from __future__ import annotations

import numpy as np
import pytest

from mslite_backend.errors import UpdateDenied
from mslite_backend.update_auth import UpdateGuard
from mslite_contract.protocol import parse_proof, sign_update, update_message
from mslite_contract.settings import ADMIN_KEY_ENV

KEY = "k" * 32
MANIFEST = '[{"name": "w0", "dtype": "<f4", "shape": [4]}]'
NOW = 1_800_000_000.0


def _guard(key: str | None = KEY) -> UpdateGuard:
    return UpdateGuard(key, clock=lambda: NOW)


def test_a_proof_made_with_the_key_is_accepted_once() -> None:
    guard = _guard()
    proof = sign_update(KEY, "m", MANIFEST, now=NOW)
    guard.check("m", MANIFEST, "", proof)
    with pytest.raises(UpdateDenied, match="model 'm': weights update refused: its proof was already used"):
        guard.check("m", MANIFEST, "", proof)


@pytest.mark.parametrize(
    ("model", "manifest", "file", "proof", "why"),
    [
        ("m", MANIFEST, "", None, "it must prove the server's admin key"),
        ("m", MANIFEST, "", "", "it must prove the server's admin key"),
        ("m", MANIFEST, "", "garbage", "a weights update proof looks like"),
        ("m", MANIFEST, "", sign_update("another key", "m", MANIFEST, now=NOW), "does not match the server's admin"),
        ("other", MANIFEST, "", sign_update(KEY, "m", MANIFEST, now=NOW), "does not match"),  # another model's
        ("m", MANIFEST.replace("4", "5"), "", sign_update(KEY, "m", MANIFEST, now=NOW), "does not match"),
        ("m", MANIFEST, "upload_1", sign_update(KEY, "m", MANIFEST, now=NOW), "does not match"),  # file swapped
        ("m", MANIFEST, "", sign_update(KEY, "m", MANIFEST, now=NOW - 301), "dated 301 s from the server's clock"),
        ("m", MANIFEST, "", sign_update(KEY, "m", MANIFEST, now=NOW - 61), r"dated 61 s .*at most 60 s either way"),
        ("m", MANIFEST, "", sign_update(KEY, "m", MANIFEST, now=NOW + 400), "dated -400 s"),
    ],
)
def test_updates_without_a_good_proof_are_refused(model: str, manifest: str, file: str, proof, why: str) -> None:
    with pytest.raises(UpdateDenied, match=f"model '{model}': weights update refused: .*{why}"):
        _guard().check(model, manifest, file, proof)


def test_a_tampered_mac_is_refused() -> None:
    proof = sign_update(KEY, "m", MANIFEST, now=NOW)
    flipped = proof[:-1] + ("0" if proof[-1] != "0" else "1")
    with pytest.raises(UpdateDenied, match="does not match"):
        _guard().check("m", MANIFEST, "", flipped)


def test_without_a_key_every_update_is_accepted() -> None:
    guard = _guard(None)
    assert not guard.required
    guard.check("m", MANIFEST, "", None)
    guard.check("m", MANIFEST, "", "garbage")


def test_the_key_comes_from_the_environment() -> None:
    assert UpdateGuard.from_environment({ADMIN_KEY_ENV: KEY}).required
    assert not UpdateGuard.from_environment({ADMIN_KEY_ENV: "  "}).required
    assert not UpdateGuard.from_environment({}).required


def test_the_signed_message_is_unambiguous() -> None:
    # length-prefixed fields: moving a character from one field to the next changes the message
    assert update_message("ab", "c", "", "", 1, "n") != update_message("a", "bc", "", "", 1, "n")
    timestamp, nonce, mac = parse_proof(sign_update(KEY, "m", MANIFEST, now=NOW))
    assert timestamp == int(NOW) and len(nonce) == 24 and len(mac) == 64


def test_a_proof_is_good_for_the_bytes_it_signs_only() -> None:
    data = np.arange(16, dtype=np.uint8)
    proof = sign_update(KEY, "m", MANIFEST, data=data, now=NOW)
    with pytest.raises(UpdateDenied, match="not those it was made for"):
        _guard().check("m", MANIFEST, "", proof, data[::-1].copy())  # other bytes: another worker never saw it
    with pytest.raises(UpdateDenied, match="not those it was made for"):
        _guard().check("m", MANIFEST, "", proof)  # the same proof for an update without inline values
    _guard().check("m", MANIFEST, "", proof, data.reshape(2, 8))  # the bytes count, not the shape they came in


class _Shared:
    """What every worker of a model shares (the weights store's `proofs`), as a set."""

    def __init__(self) -> None:
        self.nonces: set[str] = set()

    def nonce_used(self, nonce: str) -> bool:
        return nonce in self.nonces

    def claim_nonce(self, nonce: str, timestamp: int, oldest: float) -> bool:
        assert oldest == NOW - 60 and timestamp == int(NOW)
        fresh = nonce not in self.nonces
        self.nonces.add(nonce)
        return fresh


def test_a_proof_used_by_one_worker_is_refused_by_the_others() -> None:
    shared, data = _Shared(), np.ones(8, dtype=np.uint8)
    proof = sign_update(KEY, "m", MANIFEST, data=data, now=NOW)
    _guard().check("m", MANIFEST, "", proof, data, used=shared)
    with pytest.raises(UpdateDenied, match="its proof was already used"):
        _guard().check("m", MANIFEST, "", proof, data, used=shared)  # a second worker, same bytes
    forged = sign_update("another key", "m", MANIFEST, data=data, now=NOW)
    with pytest.raises(UpdateDenied, match="does not match"):
        _guard().check("m", MANIFEST, "", forged, data, used=shared)
    assert len(shared.nonces) == 1  # a proof that fails its MAC uses up nothing
