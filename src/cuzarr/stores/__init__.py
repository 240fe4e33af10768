"""Stores the engine reads and writes: local folders, memory, object stores, any zarr Store.

:mod:`cuzarr.stores.base` holds the contract (:class:`ChunkStore`, :class:`StoreCaps`); one
module per store; :func:`from_zarr_store` picks the store for a zarr-python ``Store``.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

from cuzarr import _zarr_compat as compat
from cuzarr import _zarr_equivalence as equivalence
from cuzarr.stores.base import ChunkStore, Scratch, StoreCaps
from cuzarr.stores.io_loop import track_loop
from cuzarr.stores.local import LocalChunkStore
from cuzarr.stores.memory import MemoryChunkStore
from cuzarr.stores.obstore_ import ObstoreChunkStore
from cuzarr.stores.zarr_store import FolderReadsChunkStore, ZarrChunkStore

if TYPE_CHECKING:
    from cuzarr.config import Settings

__all__ = [
    "ChunkStore",
    "FolderReadsChunkStore",
    "LocalChunkStore",
    "MemoryChunkStore",
    "ObstoreChunkStore",
    "Scratch",
    "StoreCaps",
    "ZarrChunkStore",
    "from_zarr_store",
    "io_threads",
    "is_remote",
    "track_zarr_loop",
]


def from_zarr_store(
    store: Any,
    loop: asyncio.AbstractEventLoop | None = None,
    *,
    name: str | None = None,
    concurrency: int | None = None,
) -> ChunkStore:
    """Return the fastest :class:`ChunkStore` for a zarr-python store.

    ``LocalStore``, ``MemoryStore`` and ``ObjectStore`` are accessed directly (an
    ``ObjectStore`` through obstore, with many requests in flight) when they behave exactly as
    zarr's classes: the class itself, or a subclass overriding none of their data methods,
    none of them patched (:func:`cuzarr._zarr_equivalence.behaves_as`). kvikio's ``GDSStore`` (a
    ``LocalStore`` whose ``get`` reads the same files with kvikio, into the caller's buffers)
    is read as its folder and written through its own ``set``
    (:class:`~cuzarr.stores.zarr_store.FolderReadsChunkStore`, the reasons at
    :func:`cuzarr._zarr_equivalence.gds_store_root`); a subclass of it that overrides a data
    method is not. Every other store (``FsspecStore``, zip, wrappers, mocks, subclasses that
    decrypt or count in ``get``) is used through its own API, with the requests zarr itself
    would make.

    Parameters
    ----------
    store : zarr.abc.store.Store
        The store.
    loop : asyncio.AbstractEventLoop, optional
        A running loop free while the engine runs (for stores used through their async API).
    name : str, optional
        What messages call an object store (e.g. the URL it was opened from).
    concurrency : int, optional
        Requests in flight on an object store (pass ``Settings.io_concurrency`` when the user
        chose none; obstore stores otherwise allow 32).
    """
    root = equivalence.local_store_root(store)
    if root is not None:
        return _local_chunk_store(root, bool(store.read_only))
    root = equivalence.gds_store_root(store)
    if root is not None:
        local = _local_chunk_store(root, bool(store.read_only))
        return FolderReadsChunkStore(local, ZarrChunkStore(store, loop))
    if equivalence.is_memory_store(store):
        return MemoryChunkStore(store)
    inner = equivalence.obstore_of(store)
    if inner is not None:
        track_zarr_loop()
        return ObstoreChunkStore(
            inner, name=name or str(store), read_only=store.read_only, concurrency=concurrency
        )
    return ZarrChunkStore(store, loop)


@functools.lru_cache(maxsize=64)
def _local_chunk_store(root: Any, read_only: bool) -> LocalChunkStore:
    """One :class:`LocalChunkStore` per folder and mode, shared by every call.

    Building one costs ~40 us (the root's real path and URI), paid per zarr call otherwise;
    the store holds no per-call state.
    """
    return LocalChunkStore(root, read_only=read_only)


def track_zarr_loop() -> None:
    """Drain zarr's event loop at exit too (it performs obstore requests of zarr stores).

    See :mod:`cuzarr.stores.io_loop`: obstore calls back into whichever loop awaits a request,
    and zarr's loop awaits the metadata requests of a zarr ``ObjectStore``.
    """
    track_loop(compat.zarr_io_loop())


def is_remote(store: ChunkStore) -> bool:
    """Whether requests to ``store`` cost a round trip (its :attr:`StoreCaps.remote`)."""
    return store.caps.remote


def io_threads(store: ChunkStore, settings: Settings) -> int:
    """Engine threads for one batch on ``store``: more than the cores for remote stores.

    Remote stores spend their time waiting on requests: the engine keeps the store's
    :attr:`StoreCaps.concurrency` (else ``Settings.io_concurrency``) of them in flight.
    """
    n = settings.n_threads
    caps = store.caps
    if not caps.remote:
        return n
    return max(n, caps.concurrency or settings.io_concurrency)
