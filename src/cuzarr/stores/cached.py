"""An LRU cache of whole objects fetched from a remote store, held by one ``cuzarr.Array``.

On an object store every request costs a round trip (tens of milliseconds), so reads that come
back to the same chunks or shards (a viewer panning, training crops, overlapping windows)
should not fetch them again. :class:`CachedChunkStore` keeps the bytes of whole objects the
engine fetched (chunks, and shards small enough to be fetched whole, see
``Settings.max_overfetch``), and the fact that a key is missing, bounded by ``max_bytes``;
byte ranges of a cached object are served from it, without a request.

Trust model (as TensorStore's cache pool without revalidation): the cache assumes nobody else
rewrites the objects while this array is open. The array's own writes go through the wrapper
and drop what they touch; a reader that must see another writer's changes re-opens the array
(or leaves the cache off, the default). A fetch that overlaps a write of this array never
stores its possibly older bytes: entries are only added if no write happened since the fetch
began.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf, as_u8
from cuzarr.stores.base import (
    BaseChunkStore,
    BufferPool,
    ChunkStore,
    Coalescing,
    GetResult,
    PutMode,
    Range,
    Scratch,
    Suffix,
)

__all__ = ["CachedChunkStore", "ObjectCache", "cached"]

_MISSING = np.empty(0, np.uint8)
_MISSING.flags.writeable = False


class ObjectCache:
    """Key -> bytes of a whole object (or "missing"), least recently used out first.

    Parameters
    ----------
    max_bytes : int
        Bound on the bytes held, counting ``ENTRY_OVERHEAD`` per entry (so that remembered
        missing keys are bounded too); an object larger than a quarter of it is not kept.
    """

    #: Bytes charged per entry on top of its data (key, bookkeeping).
    ENTRY_OVERHEAD = 128

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, npt.NDArray[np.uint8]] = OrderedDict()
        self._nbytes = 0
        self._lock = threading.Lock()
        #: Bumped by every write or delete through the cache: a fetch that began before one
        #: may hold older bytes and is not stored.
        self.generation = 0
        #: Lookups answered from the cache, and the ones that were not.
        self.hits = 0
        self.misses = 0

    @property
    def nbytes(self) -> int:
        """Bytes held (data and per-entry overhead)."""
        return self._nbytes

    def __len__(self) -> int:
        return len(self._entries)

    def held(self) -> list[str]:
        """Keys held, least recently used first."""
        with self._lock:
            return list(self._entries)

    def lookup(self, key: str) -> npt.NDArray[np.uint8] | None:
        """The cached bytes of ``key`` (``_MISSING`` if known absent), or ``None``."""
        with self._lock:
            value = self._entries.get(key)
            if value is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: str, value: Buf | None, generation: int) -> None:
        """Keep ``value`` (``None``: missing) unless a write happened since ``generation``."""
        data = _MISSING if value is None else as_u8(value)
        cost = data.nbytes + self.ENTRY_OVERHEAD
        if cost * 4 > self.max_bytes:
            return
        if data.flags.writeable:
            data = data.copy()
            data.flags.writeable = False
        with self._lock:
            if generation != self.generation:
                return
            old = self._entries.pop(key, None)
            if old is not None:
                self._nbytes -= old.nbytes + self.ENTRY_OVERHEAD
            self._entries[key] = data
            self._nbytes += cost
            while self._nbytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._nbytes -= dropped.nbytes + self.ENTRY_OVERHEAD

    def discard(self, key: str) -> None:
        """Forget ``key``; fetches already under way will not store theirs."""
        with self._lock:
            self.generation += 1
            old = self._entries.pop(key, None)
            if old is not None:
                self._nbytes -= old.nbytes + self.ENTRY_OVERHEAD


class CachedChunkStore(BaseChunkStore):
    """A :class:`~cuzarr.stores.base.ChunkStore` serving whole objects from an :class:`ObjectCache`.

    Its capabilities are the inner store's, less positional, open-object and device reads
    (served from memory or fetched whole); reads with ``fresh=True`` (a read-modify-write about
    to put a new version) or ``if_match`` bypass the cache.

    Parameters
    ----------
    inner : ChunkStore
        The remote store.
    cache : ObjectCache
        Where fetched objects are kept.
    """

    def __init__(self, inner: ChunkStore, cache: ObjectCache) -> None:
        self.inner = inner
        self.cache = cache
        self.name: str = inner.name
        self.caps = replace(
            inner.caps,
            remote=True,
            read_into=False,
            open_object=False,
            small_reads=False,
            device_reads=False,
            box_puts=False,
        )

    def __repr__(self) -> str:
        return f"CachedChunkStore({self.inner!r}, max_bytes={self.cache.max_bytes})"

    def _fetch_whole(self, key: str) -> GetResult | None:
        generation = self.cache.generation
        got = self.inner.get(key)
        self.cache.put(key, None if got is None else got.data, generation)
        return got

    def get(
        self,
        key: str,
        byte_range: Range | Suffix | None = None,
        *,
        if_match: str | None = None,
        scratch: Scratch | BufferPool | None = None,
        size_hint: int | None = None,
        fresh: bool = False,
    ) -> GetResult | None:
        """A whole object or a range: from the cache (version unknown), or from the store.

        Whole objects fetched from the store are kept; ranges of objects not cached are read
        from the store and not kept.
        """
        if fresh:
            self.cache.discard(key)
            return self.inner.get(key, byte_range, if_match=if_match, fresh=True)
        if if_match is None:
            hit = self.cache.lookup(key)
            if hit is not None:
                if hit is _MISSING:
                    return None
                n = int(hit.nbytes)
                if byte_range is None:
                    return GetResult(hit, n)
                if isinstance(byte_range, Suffix):
                    return GetResult(hit[max(0, n - byte_range.length) :], n)
                return GetResult(hit[byte_range.start : byte_range.start + byte_range.length], n)
            if byte_range is None:
                return self._fetch_whole(key)
        return self.inner.get(key, byte_range, if_match=if_match)

    def get_many(self, keys: Sequence[str], size_hint: int | None = None) -> list[Buf | None]:
        """Whole objects: cached ones from the cache, the others in one ``get_many`` of the store.

        Those fetched are kept, as :meth:`get` keeps them.
        """
        out: list[Buf | None] = [None] * len(keys)
        misses: list[int] = []
        for i, key in enumerate(keys):
            hit = self.cache.lookup(key)
            if hit is None:
                misses.append(i)
            elif hit is not _MISSING:
                out[i] = hit
        if misses:
            generation = self.cache.generation
            fetched = self.inner.get_many([keys[i] for i in misses])
            for i, data in zip(misses, fetched, strict=True):
                self.cache.put(keys[i], data, generation)
                out[i] = data
        return out

    def get_ranges(
        self,
        key: str,
        ranges: Sequence[tuple[int, int]],
        *,
        if_match: str | None = None,
        limits: Coalescing | None = None,
    ) -> list[Buf | None] | None:
        """Byte ranges: slices of a cached object, else one batch from the store (not kept)."""
        hit = self.cache.lookup(key)
        if hit is not None:
            if hit is _MISSING:
                return None
            return [hit[start : start + length] for start, length in ranges]
        return self.inner.get_ranges(key, ranges, if_match=if_match, limits=limits)

    def check_writable(self) -> None:
        """Raise if the store is read-only."""
        self.inner.check_writable()

    def put(
        self, key: str, data: Buf, *, mode: PutMode = PutMode.OVERWRITE, version: str | None = None
    ) -> None:
        """Write through; the cached object is dropped before and after."""
        self.cache.discard(key)
        try:
            self.inner.put(key, data, mode=mode, version=version)
        finally:
            self.cache.discard(key)

    def put_many(self, keys: Sequence[str], blobs: Sequence[Buf]) -> None:
        """Write through (the inner store's batch); cached objects dropped before and after."""
        for key in keys:
            self.cache.discard(key)
        try:
            self.inner.put_many(keys, blobs)
        finally:
            for key in keys:
                self.cache.discard(key)

    def settle(self) -> None:
        """The inner store's (:meth:`ChunkStore.settle`)."""
        self.inner.settle()

    def delete(self, key: str) -> None:
        """Delete through; the cached object is dropped before and after."""
        self.cache.discard(key)
        try:
            self.inner.delete(key)
        finally:
            self.cache.discard(key)

    def list_dir(self, prefix: str) -> list[str]:
        """The inner store's listing."""
        return self.inner.list_dir(prefix)

    def list_sizes(self, prefix: str) -> list[tuple[str, int]]:
        """The inner store's listing."""
        return self.inner.list_sizes(prefix)


def cached(inner: ChunkStore, cache: ObjectCache) -> CachedChunkStore:
    """Wrap ``inner`` so that reads of whole objects are served from ``cache``."""
    return CachedChunkStore(inner, cache)
