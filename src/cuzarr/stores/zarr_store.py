"""Any other zarr-python ``Store`` (zip, fsspec, obstore, wrappers), through its async API.

Worker threads call the store's coroutines on an event loop that is free while the engine runs:
the loop that awaits the engine in the pipeline adapter, or zarr's own loop otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf, as_u8
from cuzarr.errors import StoreError
from cuzarr.stores.base import BufferPool, Scratch

__all__ = ["ZarrChunkStore"]


class ZarrChunkStore:
    """Adapter from a zarr ``Store`` to :class:`~cuzarr.stores.base.ChunkStore`.

    Parameters
    ----------
    store : zarr.abc.store.Store
        The store.
    loop : asyncio.AbstractEventLoop or None
        A running loop not blocked by the engine; ``None`` uses zarr's ``sync``.
    """

    def __init__(self, store: Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
        from zarr.core.buffer import default_buffer_prototype

        self._store = store
        self._loop = loop
        self._prototype = default_buffer_prototype()
        self.name = str(store)

    def _run[T](self, coro: Coroutine[Any, Any, T], what: str = "", key: str = "") -> T:
        try:
            if self._loop is not None:
                return asyncio.run_coroutine_threadsafe(coro, self._loop).result()
            from zarr.core.sync import sync

            return sync(coro)
        except (FileNotFoundError, StoreError):
            raise
        except OSError as exc:
            # Name what failed: the operation, the key and the store.
            raise StoreError(f"Failed to {what} '{key}' in {self.name}: {exc}") from exc

    @staticmethod
    def _bytes(value: Any) -> Buf:
        return as_u8(value.as_numpy_array())

    def get(self, key: str, scratch: Scratch | BufferPool | None = None) -> Buf | None:
        """Fetch a whole object."""
        value = self._run(self._store.get(key, self._prototype), "read", key)
        return None if value is None else self._bytes(value)

    def read_into(self, key: str, out: npt.NDArray[np.uint8]) -> int | None:
        """Fetch an object and copy it into ``out`` when the sizes match."""
        data = self.get(key)
        if data is None:
            return None
        n = memoryview(data).nbytes
        if n == out.nbytes:
            out[...] = as_u8(data)
        return n

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[Buf] | None:
        """Fetch byte ranges in one ``get_partial_values`` call."""
        from zarr.abc.store import RangeByteRequest

        requests = [(key, RangeByteRequest(start, start + length)) for start, length in ranges]
        values = self._run(
            self._store.get_partial_values(self._prototype, requests), "read ranges of", key
        )
        if any(v is None for v in values):
            return None
        return [self._bytes(v) for v in values]

    def get_suffix(self, key: str, length: int) -> tuple[Buf, int | None] | None:
        """Fetch the object's last ``length`` bytes in one request (its size stays unknown).

        An object shorter than ``length`` comes back whole, so a short result tells its size.
        """
        from zarr.abc.store import SuffixByteRequest

        try:
            value = self._run(
                self._store.get(key, self._prototype, SuffixByteRequest(length)), "read", key
            )
        except FileNotFoundError:
            return None
        if value is None:
            return None
        data = self._bytes(value)
        n = memoryview(data).nbytes
        return data, (n if n < length else None)

    def check_writable(self) -> None:
        """Raise if the store is read-only."""
        self._store._check_writable()

    def set(self, key: str, data: Buf) -> None:
        """Write a whole object through the store."""
        value = self._prototype.buffer.from_array_like(as_u8(data))
        self._run(self._store.set(key, value), "write", key)

    def delete(self, key: str) -> None:
        """Delete an object through the store (missing keys are ignored by zarr stores)."""
        self._run(self._store.delete(key), "delete", key)
