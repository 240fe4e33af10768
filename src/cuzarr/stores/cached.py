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

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf, as_u8
from cuzarr.stores.base import BufferPool, ChunkStore, Scratch

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


class CachedChunkStore:
    """A :class:`~cuzarr.stores.base.ChunkStore` serving whole objects from an :class:`ObjectCache`.

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
        self.name: str = str(getattr(inner, "name", repr(inner)))
        self.remote = True
        own = getattr(inner, "io_concurrency", None)
        self.io_concurrency: int | None = int(own) if own else None

    def __repr__(self) -> str:
        return f"CachedChunkStore({self.inner!r}, max_bytes={self.cache.max_bytes})"

    def get(self, key: str, scratch: Scratch | BufferPool | None = None) -> Buf | None:
        """A whole object: from the cache, or fetched (into a buffer of its own) and kept."""
        got = self.get_versioned(key)
        return None if got is None else got[0]

    def get_versioned(self, key: str) -> tuple[Buf, str | None] | None:
        """A whole object and its version: cached (version unknown), or fetched and kept."""
        hit = self.cache.lookup(key)
        if hit is not None:
            return None if hit is _MISSING else (hit, None)
        generation = self.cache.generation
        inner = getattr(self.inner, "get_versioned", None)
        got: tuple[Buf, str | None] | None
        if inner is not None:
            got = inner(key)
        else:
            value = self.inner.get(key)
            got = None if value is None else (value, None)
        self.cache.put(key, None if got is None else got[0], generation)
        return got

    def read_into(self, key: str, out: npt.NDArray[np.uint8]) -> int | None:
        """Copy an object into ``out`` when the sizes match; return its size."""
        data = self.get(key)
        if data is None:
            return None
        u8 = as_u8(data)
        if u8.nbytes == out.nbytes:
            out[...] = u8
        return int(u8.nbytes)

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[Buf] | None:
        """Byte ranges: slices of a cached object, else one batch from the store (not kept)."""
        return self.get_ranges_if(key, ranges, None)

    def get_ranges_if(
        self, key: str, ranges: list[tuple[int, int]], version: str | None
    ) -> list[Buf] | None:
        """Byte ranges: of a cached object, else from the store, conditional on ``version``."""
        hit = self.cache.lookup(key)
        if hit is not None:
            if hit is _MISSING:
                return None
            return [hit[start : start + length] for start, length in ranges]
        inner = getattr(self.inner, "get_ranges_if", None)
        if inner is None or version is None:
            return self.inner.get_ranges(key, ranges)
        return inner(key, ranges, version)  # type: ignore[no-any-return]

    def get_range_versioned(
        self, key: str, start: int, length: int
    ) -> tuple[Buf, str | None] | None:
        """One range and the version: from a cached object (version unknown), else the store."""
        hit = self.cache.lookup(key)
        if hit is not None:
            return None if hit is _MISSING else (hit[start : start + length], None)
        inner = getattr(self.inner, "get_range_versioned", None)
        if inner is not None:
            return inner(key, start, length)  # type: ignore[no-any-return]
        got = self.inner.get_ranges(key, [(start, length)])
        return None if got is None else (got[0], None)

    def get_suffix(self, key: str, length: int) -> tuple[Buf, int | None] | None:
        """The last ``length`` bytes and the size: from a cached object, else the store."""
        got = self.get_suffix_versioned(key, length)
        return None if got is None else (got[0], got[1])

    def get_suffix_versioned(
        self, key: str, length: int
    ) -> tuple[Buf, int | None, str | None] | None:
        """The last ``length`` bytes, the size and the version (unknown for cached objects)."""
        hit = self.cache.lookup(key)
        if hit is not None:
            if hit is _MISSING:
                return None
            return hit[max(0, hit.nbytes - length) :], int(hit.nbytes), None
        inner = getattr(self.inner, "get_suffix_versioned", None)
        if inner is not None:
            return inner(key, length)  # type: ignore[no-any-return]
        got = self.inner.get_suffix(key, length)
        return None if got is None else (got[0], got[1], None)

    def check_writable(self) -> None:
        """Raise if the store is read-only."""
        self.inner.check_writable()

    def set(self, key: str, data: Buf) -> None:
        """Write through; the cached object is dropped before and after."""
        self.cache.discard(key)
        try:
            self.inner.set(key, data)
        finally:
            self.cache.discard(key)

    def delete(self, key: str) -> None:
        """Delete through; the cached object is dropped before and after."""
        self.cache.discard(key)
        try:
            self.inner.delete(key)
        finally:
            self.cache.discard(key)


class _CachedUpdatableChunkStore(CachedChunkStore):
    """For stores with ``get_for_update`` (conditional writes): that read bypasses the cache."""

    def get_for_update(self, key: str) -> Buf | None:
        """Fetch for a read-modify-write from the store itself (it records the version)."""
        self.cache.discard(key)
        return self.inner.get_for_update(key)  # type: ignore[attr-defined]


def cached(inner: ChunkStore, cache: ObjectCache) -> CachedChunkStore:
    """Wrap ``inner`` so that reads of whole objects are served from ``cache``."""
    if getattr(inner, "get_for_update", None) is not None:
        return _CachedUpdatableChunkStore(inner, cache)
    return CachedChunkStore(inner, cache)
