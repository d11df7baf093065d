"""Where one of Triton's endpoints is, for the gateway's connections to it: `unix:PATH` or `host:port`.

Behind `mslite-triton serve` both are Unix sockets in a folder only the server's user may enter; `host:port`
serves a gateway run in front of a Triton on TCP (benchmarks, tests, a hand-made set-up).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mslite_contract.protocol import UNIX_ADDRESS_PREFIX


@dataclass(frozen=True)
class UpstreamAddress:
    """A Unix socket's `path`, or `host` and `port`."""

    host: str = "localhost"
    port: int = 0
    path: str | None = None

    @classmethod
    def parse(cls, text: str) -> UpstreamAddress:
        """`unix:PATH` or `host:port`.

        Raises:
            ValueError: neither (no port, or one that is not a number).
        """
        if text.startswith(UNIX_ADDRESS_PREFIX):
            return cls(path=text[len(UNIX_ADDRESS_PREFIX) :])
        host, _, port = text.rpartition(":")
        if not host:
            raise ValueError(f"an upstream is unix:PATH or host:port, got '{text}'")
        return cls(host=host, port=int(port))

    async def open_connection(self, **kwargs: Any) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """`asyncio.open_connection` to this endpoint (`open_unix_connection` for a socket)."""
        if self.path is not None:
            return await asyncio.open_unix_connection(self.path, **kwargs)
        return await asyncio.open_connection(self.host, self.port, **kwargs)

    async def create_connection(
        self, factory: Callable[[], asyncio.Protocol]
    ) -> tuple[asyncio.Transport, asyncio.Protocol]:
        """`loop.create_connection` to this endpoint (`create_unix_connection` for a socket)."""
        loop = asyncio.get_running_loop()
        if self.path is not None:
            return await loop.create_unix_connection(factory, self.path)  # type: ignore[return-value]
        return await loop.create_connection(factory, self.host, self.port)  # type: ignore[return-value]

    def __str__(self) -> str:
        return f"{UNIX_ADDRESS_PREFIX}{self.path}" if self.path is not None else f"{self.host}:{self.port}"
