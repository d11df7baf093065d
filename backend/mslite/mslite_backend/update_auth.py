"""Who may change a model's weights: the worker checks each update's proof of the admin key.

An update is an inference request, and the inference port is open to anyone who can reach it (the
admin key guards only Triton's admin APIs). So the worker itself refuses an update unless it carries
`protocol.PROOF_PARAMETER`: an HMAC-SHA256, under the admin key, of the model name, the update's
manifest, the SHA-256 of its inline values or its file's name, a timestamp and a nonce
(`protocol.update_message`). The check holds whether or not a gateway stands in front of Triton.

A proof is good once, within `PROOF_WINDOW_S` of its timestamp, for the bytes it signs: its nonce is
recorded in the model's weights store (`UsedNonces`), which every worker of the model shares, so a copy
sent to another worker is refused too.

The key reaches the worker through its environment (`settings.ADMIN_KEY_ENV`), inherited from
tritonserver, which the launcher (or the container's entrypoint) starts with it: never through the model
config or metadata, which any client can read. With no key there (a server started without one), every
update is accepted, as the admin APIs are then open too.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from mslite_contract.protocol import PROOF_PARAMETER, PROOF_WINDOW_S, parse_proof, payload_digest, update_mac
from mslite_contract.settings import ADMIN_KEY_ENV, admin_key

from .errors import UpdateDenied

MAX_NONCES = 100_000  # proofs remembered for replay checks; older ones age out of the window first


class UsedNonces(Protocol):
    """The nonces of the proofs that every worker of a model accepted (`weight_store.WeightStore`)."""

    def nonce_used(self, nonce: str) -> bool:
        """True when a worker of the model accepted a proof with this nonce."""

    def claim_nonce(self, nonce: str, timestamp: int, oldest: float) -> bool:
        """Record the nonce unless it is recorded; False when it was. Entries dated before `oldest` may go."""


class UpdateGuard:
    """Checks the proofs of weights updates against the admin key; remembers nonces to refuse replays."""

    def __init__(
        self, key: str | None, *, window_s: float = PROOF_WINDOW_S, clock: Callable[[], float] = time.time
    ) -> None:
        self._key = key or None
        self._window_s = window_s
        self._clock = clock
        self._seen: dict[str, float] = {}  # nonce -> its proof's timestamp

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> UpdateGuard:
        """The guard for the admin key in `environ` (default: this process's environment)."""
        return cls((admin_key(environ) or "").strip() or None)

    @property
    def required(self) -> bool:
        """True when updates must prove the admin key (the server has one)."""
        return self._key is not None

    def check(
        self,
        model: str,
        manifest: str,
        file: str,
        proof: str | None,
        data: Any = None,
        *,
        used: UsedNonces | None = None,
    ) -> None:
        """Accept the update or raise; a proof is good once.

        Args:
            model: the model's name.
            manifest: the update's UPDATE_PARAMETER value.
            file: its FILE_PARAMETER value, or "" when the data is inline.
            proof: its PROOF_PARAMETER value, or None when it carries none.
            data: its inline values (WEIGHTS_INPUT as received), or None with a file.
            used: the nonces the model's other workers accepted (None: this worker's alone).

        Raises:
            UpdateDenied: no proof, a malformed or expired one, one already used, or a MAC that does not match.
        """
        if self._key is None:
            return
        refused = f"model '{model}': weights update refused"
        if not proof:
            raise UpdateDenied(
                f"{refused}: it must prove the server's admin key (request parameter '{PROOF_PARAMETER}'); "
                f"the mslite_triton client adds it when it has the key ({ADMIN_KEY_ENV} or the server's key file)"
            )
        try:
            timestamp, nonce, mac = parse_proof(proof)
        except ValueError as e:
            raise UpdateDenied(f"{refused}: {e}") from None
        now = self._clock()
        if abs(now - timestamp) > self._window_s:
            raise UpdateDenied(
                f"{refused}: its proof is dated {int(now - timestamp)} s from the server's clock "
                f"(at most {self._window_s:.0f} s either way)"
            )
        if nonce in self._seen or (used is not None and used.nonce_used(nonce)):  # before hashing the data
            raise UpdateDenied(f"{refused}: its proof was already used")
        digest = "" if data is None else payload_digest(data)
        expected = update_mac(self._key, model, manifest, file, digest, timestamp, nonce)
        if not hmac.compare_digest(expected, mac):
            raise UpdateDenied(
                f"{refused}: its proof does not match the server's admin key "
                "(or the update's contents are not those it was made for)"
            )
        # recorded only once the MAC holds: nobody without the key can use up a nonce
        if used is not None and not used.claim_nonce(nonce, timestamp, now - self._window_s):
            raise UpdateDenied(f"{refused}: its proof was already used")
        self._remember(nonce, timestamp, now)

    def _remember(self, nonce: str, timestamp: float, now: float) -> None:
        if len(self._seen) >= MAX_NONCES:  # drop what the window refuses anyway, then the oldest
            self._seen = {n: t for n, t in self._seen.items() if abs(now - t) <= self._window_s}
            while len(self._seen) >= MAX_NONCES:
                del self._seen[min(self._seen, key=self._seen.__getitem__)]
        self._seen[nonce] = timestamp
