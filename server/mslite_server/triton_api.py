"""Calls to tritonserver's own HTTP API, which the launcher inspects its server with: `TritonApi`.

Behind a gateway the API is a Unix socket only this user can reach (`triton_endpoints.py`); the launcher,
its supervisor and the tests ask it directly, past the gateway's checks, with the admin key where it needs one.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mslite_contract.protocol import ADMIN_KEY_GRPC_HEADER, ADMIN_KEY_HEADER
from mslite_server.config import ModelState
from mslite_server.errors import TritonUnavailableError
from mslite_server.triton_endpoints import TritonEndpoints


@dataclass(frozen=True)
class TritonApi:
    """tritonserver's HTTP API at `endpoints`; `admin_key` goes with each call that asks for it."""

    endpoints: TritonEndpoints
    admin_key: str | None = None
    url: str = "(tritonserver)"  # names the server in errors

    def call(
        self, method: str, path: str, body: bytes | None, *, timeout_s: float = 10, key: bool = True
    ) -> tuple[int, bytes]:
        """One call: (status, body).

        Raises:
            OSError, http.client.HTTPException: no answer.
        """
        conn = self.endpoints.http_connection(timeout_s)
        headers = {ADMIN_KEY_HEADER: self.admin_key} if key and self.admin_key else {}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return int(resp.status), resp.read()
        finally:
            conn.close()

    def status(self, method: str, path: str, timeout_s: float = 2.0) -> int:
        """The status of one call without the key; 0 when it does not answer."""
        try:
            return self.call(method, path, None, timeout_s=timeout_s, key=False)[0]
        except (OSError, http.client.HTTPException):
            return 0

    def json(self, method: str, path: str, payload: Any, timeout_s: float = 10) -> Any:
        """One JSON call, with the key.

        Raises:
            TritonUnavailableError: no answer, or an error status.
        """
        data = None if payload is None else json.dumps(payload).encode()
        try:
            status, body = self.call(method, path, data, timeout_s=timeout_s)
        except (OSError, http.client.HTTPException) as e:
            raise TritonUnavailableError(self.url, f"no answer to {path}: {e}") from e
        if status >= 400:
            raise TritonUnavailableError(self.url, f"{path} answered {status}: {body[:200]!r}")
        return json.loads(body or b"null")

    def answers_live(self, timeout_s: float = 2.0) -> bool:
        """True when tritonserver answers `/v2/health/live` within `timeout_s`."""
        return self.status("GET", "/v2/health/live", timeout_s) == 200

    def answers_ready(self) -> bool:
        """True when tritonserver answers `/v2/health/ready` (it has finished loading the models of its start)."""
        return self.status("GET", "/v2/health/ready") == 200

    def model_states(self) -> list[ModelState]:
        """Per-model readiness from the repository index (`POST /v2/repository/index`).

        Raises:
            TritonUnavailableError: no answer.
        """
        body = self.json("POST", "/v2/repository/index", {})
        return [
            ModelState(str(m.get("name")), str(m.get("version", "")), str(m.get("state", "")), str(m.get("reason", "")))
            for m in body or []
        ]

    def loaded_models(self) -> list[str]:
        """Every ready model, uploaded ones included (the repository index lists only the repository's).

        Raises:
            TritonUnavailableError: no answer.
        """
        stats = self.json("GET", "/v2/models/stats", None) or {}
        names = {str(m.get("name")) for m in stats.get("model_stats", [])}
        return sorted(n for n in names if self.status("GET", f"/v2/models/{n}/ready") == 200)

    def load_model(
        self, name: str, config: Mapping[str, Any], files: Mapping[str, bytes], timeout_s: float = 600
    ) -> None:
        """Load model `name` (again) with `config` and its `files` (`file:<path>` keys), over Triton's gRPC API.

        Over gRPC: Triton 2.51's HTTP load API crashes the server on bodies of a few MiB.

        Raises:
            TritonUnavailableError: no answer (not listening yet, or gone).
            RuntimeError: tritonserver answered, and the model did not load (its words).
        """
        import tritonclient.grpc as grpcclient  # only a heal loads models: not imported before one
        from tritonclient.utils import InferenceServerException

        headers = {ADMIN_KEY_GRPC_HEADER: self.admin_key} if self.admin_key else None
        client = grpcclient.InferenceServerClient(self.endpoints.grpc_address)
        try:
            client.load_model(name, headers=headers, config=json.dumps(config), files=dict(files) or None,
                              client_timeout=timeout_s)  # fmt: skip
        except InferenceServerException as e:
            if str(e.status()).endswith("UNAVAILABLE"):
                raise TritonUnavailableError(self.url, f"no answer to the load of {name}: {e.message()}") from None
            raise RuntimeError(f"tritonserver did not load {name}: {e.message()}") from None
        finally:
            client.close()
