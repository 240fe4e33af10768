"""Reading inner chunks of a shard from a store: the strategies, the index caches, the retries.

:meth:`ShardReader.fetch` returns a shard's decoded index and the stored bytes of the inner
chunks asked for, choosing by what the store can do (its :class:`~cuzarr.stores.base.StoreCaps`):

- every inner chunk needed: the whole shard in one read, index included;
- a store that opens one version of an object (local files, memory): the index and the needed
  ranges from that one version; the decoded index is reused when the index bytes are equal to
  the last ones seen for the key (equal bytes, equal table: never stale, whoever writes). A
  caller may pass :class:`BackendReads` (the engine's backend's, see
  :meth:`~cuzarr.backends.base.Backend.range_reads`): the ranges, and for a whole shard one
  range over all its inner chunks, then go to it (the GPU backend reads them into device
  memory); where it declines (the object changed on disk), they are read from the open version;
- any other (remote) store: a cached index if one is usable, else the whole shard in one
  request when the unneeded bytes are few (``max_overfetch``), else the index (one request) and
  then the needed ranges, merged within the call's bounds. With a version (ETag) the ranges are
  conditional on it, so an index and data of different versions are never combined; a stale
  cached index (412) or an inconsistent one is re-read, three attempts in all. A store that
  merges ranges itself (a zarr store used through its API) gets zarr's requests: the index,
  then each needed range, no overfetch.

A shard gone (after its index was read, too) reads as missing, as in zarr.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf
from cuzarr.codecs.sharding.cache import ShardIndexCache
from cuzarr.codecs.sharding.format import EMPTY, InnerSources, ShardingCodec
from cuzarr.errors import CorruptChunkError, StaleObjectError
from cuzarr.stores.base import BufferPool, ChunkStore, ObjectReader, Range, Suffix
from cuzarr.stores.ranges import ByteRange, CoalescedRange, ReadPolicy, coalesce

__all__ = ["BackendReads", "ShardBytes", "ShardReader", "raw_index"]


def raw_index(sh: ShardingCodec, reader: ObjectReader) -> bytes:
    """The stored bytes of the index of the open shard ``reader`` (one read).

    Raises
    ------
    CorruptChunkError
        A shard shorter than its index.
    """
    n = sh.index_nbytes
    if reader.size < n:
        raise CorruptChunkError(
            f"shard is {reader.size} bytes, shorter than its {n}-byte index (truncated shard?)"
        )
    return bytes(reader.read([(sh.index_start(reader.size), n)])[0])

Table = npt.NDArray[np.uint64]
#: A cached index: table, shard size if known, version (ETag) if known.
Entry = tuple[Table, int | None, object]


class BackendReads(Protocol):
    """Reads byte ranges of one open shard into a backend's own memory.

    A backend that can (:meth:`~cuzarr.backends.base.Backend.range_reads`; the GPU backend:
    kvikio into device memory) hands one to the shard reader, which calls it with the reads it
    planned on a version it holds open; it knows nothing of the memory the bytes land in.
    """

    def __call__(
        self, key: str, reader: ObjectReader, reads: Sequence[CoalescedRange]
    ) -> Mapping[int, Any] | None:
        """The stored bytes of every part of ``reads``, by the part's tag.

        Parameters
        ----------
        key : str
            The shard's key.
        reader : ObjectReader
            The open version the shard's index was read from; the bytes must be this
            version's. Every read lies inside it (``reader.size``).
        reads : sequence of CoalescedRange
            The reads (ascending), each covering the inner chunks in its ``parts``.

        Returns
        -------
        Mapping or None
            Per part's tag, what the backend's ``decode`` takes as ``DecodeItem.raw``;
            ``None``: not done (the object changed since ``reader`` opened it, ...), the shard
            reader then reads the ranges from ``reader`` on the host.
        """
        ...


class ShardBytes(NamedTuple):
    """What :meth:`ShardReader.fetch` found: the index and the present inner chunks' bytes."""

    table: Table
    #: C-order inner chunk index -> its stored bytes (absent: empty, reads as the fill value):
    #: host bytes, or what the caller's :class:`BackendReads` returned for it.
    sources: Mapping[int, Any]
    #: The whole shard's bytes when it was read in one piece (the table's offsets index it),
    #: for decoders that take many inner chunks at once; else ``None``.
    whole: npt.NDArray[np.uint8] | None = None


class ShardReader:
    """Reads inner chunks of the shards of one array.

    Parameters
    ----------
    codec : ShardingCodec
        The array's shard format.
    shard_nbytes : int
        Decoded size of a shard (estimates the bytes a whole-shard read would waste).
    max_overfetch : int
        On remote stores, fetch a whole shard instead of index + ranges when the unneeded
        bytes are at most this (``Settings.max_overfetch``; 0: never).
    trust_cache : bool
        Use cached indexes of remote stores that have no version (the explicit API, whose own
        writes invalidate them); indexes with a version are used either way (reads are then
        conditional on it).
    """

    def __init__(
        self, codec: ShardingCodec, *, shard_nbytes: int, max_overfetch: int, trust_cache: bool
    ) -> None:
        self.codec = codec
        self.shard_nbytes = shard_nbytes
        self.max_overfetch = max_overfetch
        self.trust_cache = trust_cache
        #: Decoded indexes of shards read through ``open_object``, keyed by the index bytes.
        self.version_cache = ShardIndexCache()
        #: Decoded indexes of remote shards, across calls.
        self.index_cache = ShardIndexCache()

    def forget(self, key: str) -> None:
        """Drop the cached index of shard ``key`` (its writer calls this)."""
        self.index_cache.discard(key)

    def fetch(
        self,
        store: ChunkStore,
        key: str,
        flat: Sequence[int],
        policy: ReadPolicy,
        pool: BufferPool | None = None,
        backend_reads: BackendReads | None = None,
    ) -> ShardBytes | None:
        """The index of shard ``key`` and the bytes of its inner chunks ``flat`` (sorted).

        ``None`` if the shard is missing. With ``backend_reads``, on a store that opens one
        version of an object, the inner chunks' bytes are read by it (see
        :class:`BackendReads`), the whole shard too (as one range over its inner chunks, the
        index read on its own).

        Raises
        ------
        CorruptChunkError
            If the index or the shard is malformed (the caller names the shard).
        """
        whole = len(flat) == self.codec.n_inner
        if store.caps.open_object and (backend_reads is not None or not whole):
            reader = store.open_object(key)
            if reader is None:
                return None
            try:
                return self._one_version(key, reader, flat, policy, backend_reads)
            finally:
                reader.close()
        if whole:
            return self._whole(store, key, flat, pool, policy.remote)
        return self._partial(store, key, flat, pool, policy)

    # ------------------------------------------------------------------ strategies

    def _whole(
        self,
        store: ChunkStore,
        key: str,
        flat: Sequence[int],
        pool: BufferPool | None,
        remote: bool,
    ) -> ShardBytes | None:
        """One read of the whole shard, index included; its index is cached if remote."""
        got = store.get(key, scratch=pool)
        if got is None:
            return None
        u8, table = self.codec.split(got.data)
        if remote:
            self.index_cache.put(key, table, u8.nbytes, got.version)
        return ShardBytes(table, InnerSources(u8, table), np.ascontiguousarray(u8))

    def _one_version(
        self,
        key: str,
        reader: ObjectReader,
        flat: Sequence[int],
        policy: ReadPolicy,
        backend_reads: BackendReads | None = None,
    ) -> ShardBytes:
        """Index and needed inner chunks of one open version of the shard.

        The raw index is always read (one small read from the open object); its decoded and
        validated table is reused when the bytes equal the last ones seen for this key. The
        inner chunks are read by ``backend_reads`` when given (every inner chunk: one read
        over them all), else (or where it declines) from the open object.
        """
        sh = self.codec
        raw = raw_index(sh, reader)
        # The shard size bounds the offsets, so it is part of what must match.
        token = (reader.size, raw)
        cached = self.version_cache.get(key, token)
        if cached is not None:
            table = cached[0]
        else:
            table = sh.decode_index(raw, shard_nbytes=reader.size)
            self.version_cache.put(key, table, reader.size, token)
        if backend_reads is not None:
            # The table was checked against ``reader.size``: every read lies inside it.
            reads = self._plan(table, flat, policy, whole=len(flat) == sh.n_inner)
            got = backend_reads(key, reader, reads) if reads else {}
            if got is not None:
                return ShardBytes(table, got)
            # Declined (the file changed since it was opened): this version's bytes, on the host.
            return ShardBytes(table, self._split(reads, reader.read(_spans(reads))))
        sources = self._ranges(reader.read, table, flat, policy)
        assert sources is not None  # an open object cannot go missing
        return ShardBytes(table, sources)

    def _usable_index(self, key: str, remote: bool) -> Entry | None:
        """A cached index of shard ``key`` that may be used, or ``None``."""
        entry = self.index_cache.peek(key)
        if entry is None:
            return None
        if entry[2] is None and not (self.trust_cache and remote):
            return None
        return entry

    def _overfetch(self, n_needed: int) -> bool:
        """Whether a remote partial read of ``n_needed`` inner chunks should fetch the shard.

        The unneeded bytes are estimated from the decoded shard size (compressed shards are
        smaller), so the estimate errs towards two requests.
        """
        n_inner = self.codec.n_inner
        unneeded = self.shard_nbytes * (n_inner - n_needed) // n_inner
        return unneeded <= self.max_overfetch

    def _partial(
        self,
        store: ChunkStore,
        key: str,
        flat: Sequence[int],
        pool: BufferPool | None,
        policy: ReadPolicy,
    ) -> ShardBytes | None:
        """Some inner chunks of a shard on a store without ``open_object`` (remote stores)."""
        remote = policy.remote
        entry = self._usable_index(key, remote) if remote else None
        if entry is None and remote and not policy.delegated and self._overfetch(len(flat)):
            return self._whole(store, key, flat, pool, remote)
        for attempt in range(3):
            cached = entry is not None
            if entry is None:
                entry = self._index(store, key)
                if entry is None:
                    return None
            table, _size, version = entry
            fetch = functools.partial(
                store.get_ranges,
                key,
                if_match=version if isinstance(version, str) else None,
                limits=policy.limits,
            )
            try:
                sources = self._ranges(fetch, table, flat, policy)
            except StaleObjectError:
                # Rewritten since the index was read (cached, or just now by a racing writer).
                self.index_cache.discard(key)
                if attempt == 2:
                    raise
                entry = None
                continue
            except CorruptChunkError:
                if not cached:
                    raise
                # A cached index without a version, found stale: read it again.
                self.index_cache.discard(key)
                entry = None
                continue
            if sources is None:
                return None
            if not cached and remote:
                self.index_cache.put(key, table, entry[1], version)
            return ShardBytes(table, sources)
        raise AssertionError("unreachable")  # pragma: no cover

    def _index(self, store: ChunkStore, key: str) -> Entry | None:
        """The shard's decoded index, its size if known and its version (ETag) if known."""
        sh = self.codec
        n = sh.index_nbytes
        request = sh.index_request()
        got = store.get(key, request)
        if got is None:
            return None
        if isinstance(request, Suffix):
            got_n = memoryview(got.data).nbytes
            short = got.size if got.size is not None else got_n
            if short < n:
                raise CorruptChunkError(f"shard is {short} bytes, shorter than its {n}-byte index")
            return sh.decode_index(got.data, shard_nbytes=got.size), got.size, got.version
        assert isinstance(request, Range)
        return sh.decode_index(got.data, shard_nbytes=None), None, got.version

    def _ranges(
        self,
        fetch: Callable[[list[tuple[int, int]]], Sequence[Buf | None] | None],
        table: Table,
        flat: Sequence[int],
        policy: ReadPolicy,
    ) -> dict[int, Buf] | None:
        """The stored bytes of the present inner chunks among ``flat``; ``None``: shard gone.

        Ranges are merged here within ``policy.limits``, or handed over one per inner chunk
        to a store that merges them itself (an inner chunk it returns nothing for reads as
        the fill value, as in zarr).
        """
        reads = self._plan(table, flat, policy)
        if not reads:
            return {}
        data = fetch(_spans(reads))
        if data is None:
            return None
        return self._split(reads, data)

    @staticmethod
    def _plan(
        table: Table, flat: Sequence[int], policy: ReadPolicy, *, whole: bool = False
    ) -> list[CoalescedRange]:
        """The reads of the present inner chunks among ``flat``, merged within the policy.

        ``whole``: one read from the first inner chunk's start to the last one's end (a
        whole-shard read without its index). A store that merges ranges itself gets one
        read per inner chunk.
        """
        ranges = [
            ByteRange(int(table[i, 0]), int(table[i, 1]), i) for i in flat if table[i, 0] != EMPTY
        ]
        if not ranges:
            return []
        if whole:
            start = min(r.start for r in ranges)
            end = max(r.start + r.length for r in ranges)
            return [CoalescedRange(start, end - start, tuple(ranges))]
        if policy.delegated:
            return [CoalescedRange(r.start, r.length, (r,)) for r in ranges]
        limits = policy.limits
        return coalesce(ranges, max_gap=limits.max_gap, max_size=limits.max_bytes)

    @staticmethod
    def _split(reads: Sequence[CoalescedRange], data: Sequence[Buf | None]) -> dict[int, Buf]:
        """Each part's bytes out of its read's (a read with nothing returned is left out)."""
        sources: dict[int, Buf] = {}
        for read, buf in zip(reads, data, strict=True):
            if buf is None:
                continue
            if memoryview(buf).nbytes < read.length:
                raise CorruptChunkError(
                    f"index points past the end of the shard (wanted bytes {read.start}.."
                    f"{read.start + read.length}, got {memoryview(buf).nbytes})"
                )
            for part in read.parts:
                off = part.start - read.start
                sources[part.tag] = buf[off : off + part.length]
        return sources


def _spans(reads: Sequence[CoalescedRange]) -> list[tuple[int, int]]:
    """``(start, length)`` of each read."""
    return [(r.start, r.length) for r in reads]
