"""A zarr store that cuzarr reads through its own API, counting its gets.

A ``MemoryStore`` subclass that overrides ``get`` is, to cuzarr, any zarr store: it is read
through its API (``ZarrChunkStore``, a remote store: each request a round trip). Each ``get``
waits ``delay`` seconds and is recorded, with the most that were in flight at once, so tests
can see which requests a read sends together.
"""

from __future__ import annotations

import asyncio
from typing import Any

from zarr.storage import MemoryStore

__all__ = ["CountingStore"]


class CountingStore(MemoryStore):
    """Every ``get`` recorded (``gets``) with the most in flight at once (``max_in_flight``)."""

    def __init__(self, delay: float = 0.01) -> None:
        super().__init__()
        self.delay = delay
        self.gets: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        self.gets.append(key)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            return await super().get(key, prototype, byte_range)
        finally:
            self.in_flight -= 1
