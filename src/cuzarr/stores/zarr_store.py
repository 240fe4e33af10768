"""Any other zarr-python ``Store`` (zip, fsspec, wrappers, subclasses), through its own API.

Worker threads call the store's coroutines on an event loop that is free while the engine runs:
the loop that awaits the engine in the pipeline adapter, or zarr's own loop otherwise.

The requests are the ones zarr itself makes, so that a store which logs, counts, caches,
decrypts or fails on purpose in its methods sees what it would see under zarr's own pipeline:
whole objects with ``get``, a shard index with one ranged ``get``, the needed inner chunks of a
shard with one ``get_ranges`` call (zarr's coalescing API, which the store may override), with
zarr's ``array.sharding_coalesce_*`` bounds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf, as_u8
from cuzarr.errors import StoreError
from cuzarr.stores.base import BufferPool, Coalescing, Scratch

__all__ = ["ZarrChunkStore"]

#: zarr's defaults for ``array.sharding_coalesce_max_gap_bytes`` / ``..._max_bytes``.
ZARR_DEFAULT_COALESCING = Coalescing(max_gap=1 << 20, max_bytes=16 << 20)


class ZarrChunkStore:
    """Adapter from a zarr ``Store`` to :class:`~cuzarr.stores.base.ChunkStore`.

    It is a :class:`~cuzarr.stores.base.CoalescingStore`: ranges go to the store's own
    ``get_ranges``, which merges them.

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

    def get_range(self, key: str, start: int, length: int) -> Buf | None:
        """Fetch one byte range with one ranged ``get`` (how zarr reads a shard index)."""
        from zarr.abc.store import RangeByteRequest

        try:
            value = self._run(
                self._store.get(key, self._prototype, RangeByteRequest(start, start + length)),
                "read",
                key,
            )
        except FileNotFoundError:
            return None
        return None if value is None else self._bytes(value)

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[Buf] | None:
        """Fetch byte ranges through the store's ``get_ranges`` with zarr's default bounds."""
        got = self.get_ranges_coalesced(key, ranges, ZARR_DEFAULT_COALESCING)
        if got is None or any(b is None for b in got):
            return None
        return [b for b in got if b is not None]

    def get_ranges_coalesced(
        self, key: str, ranges: list[tuple[int, int]], limits: Coalescing
    ) -> list[Buf | None] | None:
        """Fetch byte ranges in one call of the store's ``get_ranges`` (it merges them).

        ``None`` when the object is missing, as zarr's sharding codec reads a shard that
        disappeared after its index was read; a range the store returns nothing for is
        ``None`` in the list (zarr reads that inner chunk as the fill value). Other failures
        of the store are raised (a single one as itself, named by
        :class:`~cuzarr.errors.StoreError` if it is an ``OSError``).
        """
        from zarr.abc.store import RangeByteRequest

        requests = [RangeByteRequest(start, start + length) for start, length in ranges]
        out: list[Buf | None] = [None] * len(requests)

        async def collect() -> bool:
            try:
                async for group in self._store.get_ranges(
                    key,
                    requests,
                    prototype=self._prototype,
                    max_gap_bytes=limits.max_gap,
                    max_coalesced_bytes=limits.max_bytes,
                ):
                    for i, buf in group:
                        if buf is not None:
                            out[i] = self._bytes(buf)
            except BaseExceptionGroup as group:
                _, rest = group.split(FileNotFoundError)
                if rest is None:
                    return False
                errors = [e for e in rest.exceptions if not isinstance(e, BaseExceptionGroup)]
                if len(errors) == 1 and isinstance(errors[0], Exception):
                    raise errors[0] from group
                raise
            return True

        if not self._run(collect(), "read ranges of", key):
            return None
        return out

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
