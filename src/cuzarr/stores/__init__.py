"""Stores the engine reads and writes: local folders, memory, and any zarr Store."""

from __future__ import annotations

import asyncio
from typing import Any

from cuzarr.stores.base import ChunkStore, Scratch
from cuzarr.stores.local import LocalChunkStore
from cuzarr.stores.memory import MemoryChunkStore
from cuzarr.stores.zarr_store import ZarrChunkStore

__all__ = [
    "ChunkStore",
    "LocalChunkStore",
    "MemoryChunkStore",
    "Scratch",
    "ZarrChunkStore",
    "from_zarr_store",
]


def from_zarr_store(store: Any, loop: asyncio.AbstractEventLoop | None = None) -> ChunkStore:
    """Return the fastest :class:`ChunkStore` for a zarr-python store.

    ``LocalStore`` and ``MemoryStore`` (exactly those classes, not wrappers) are accessed
    directly; every other store through its own async API.
    """
    from zarr.storage import LocalStore, MemoryStore

    if type(store) is LocalStore:
        return LocalChunkStore(store.root, read_only=store.read_only)
    if type(store) is MemoryStore:
        return MemoryChunkStore(store)
    return ZarrChunkStore(store, loop)
