"""The engine: read and write batches of chunk requests for one array on one store.

Reads fetch, decode and scatter each chunk in one task on the CPU backend, decoding straight
into the output where the chunk maps onto a contiguous region of it and otherwise into a
per-thread scratch chunk followed by a single strided copy. Sharded arrays are read in two
phases per wave of shards: fetch (whole shard, or its index and then coalesced ranges of the
needed inner chunks), then decode every needed inner chunk of the wave in parallel.

Writes merge, encode and store each chunk in one task; a shard is rebuilt once per write
call, keeping the stored bytes of inner chunks the write does not touch.

On remote stores (object stores) the fetch phases run on ``Settings.io_concurrency`` threads,
so that many requests are in flight at once, and an engine created with
``cache_shard_indexes=True`` (one per ``cuzarr.Array``) keeps decoded shard indexes across
calls. Read-modify-writes read the old object (``fresh``: past any cache) and put the new one
conditional on the version read where the store has conditional puts.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr import _zarr_compat as compat
from cuzarr.backends.cpu import parallel_map
from cuzarr.codecs.base import Buf
from cuzarr.codecs.chain import ChunkCodec, V2ChunkCodec
from cuzarr.codecs.numcodecs_ import zstd_decode_many
from cuzarr.codecs.sharding import EMPTY, ShardingCodec
from cuzarr.config import Settings
from cuzarr.errors import CorruptChunkError, CuzarrError, MetadataError, StaleObjectError
from cuzarr.locks import write_locks
from cuzarr.metadata.spec import ArraySpec
from cuzarr.plan import ByteRange, ChunkRequest, CoalescedRange, coalesce
from cuzarr.selection import is_full, iter_blocks, needed_blocks, rebase, selection_box
from cuzarr.shard_cache import ShardIndexCache
from cuzarr.stores import io_threads, is_remote
from cuzarr.stores.base import (
    BufferPool,
    ChunkStore,
    Coalescing,
    GetResult,
    ObjectReader,
    PutMode,
    Range,
    Scratch,
    Suffix,
)

__all__ = ["ArrayEngine"]

Codec = ChunkCodec | V2ChunkCodec

#: Chunks per task of the batched zstd read path, and the largest chunk it takes (larger
#: chunks decode straight into the output, where a batch would add a copy).
_ZSTD_BATCH = 16
_ZSTD_BATCH_MAX_CHUNK = 128 * 1024


def _where(key: str, path: str) -> str:
    """``chunk 'key'``, plus the array path when it is known and not already in the key."""
    if path and not key.startswith(path + "/"):
        return f"chunk '{key}' of array '{path}'"
    return f"chunk '{key}'"


def _decode_failure(key: str, path: str, exc: Exception) -> CorruptChunkError:
    if isinstance(exc, CorruptChunkError):
        return CorruptChunkError(f"Corrupt {_where(key, path)}: {exc}")
    return CorruptChunkError(f"Failed to decode {_where(key, path)}: {type(exc).__name__}: {exc}")


def _view(out: npt.NDArray[Any], out_selection: Any) -> npt.NDArray[Any] | None:
    """``out[out_selection]`` when that is a view (basic slices), else ``None``."""
    if isinstance(out_selection, slice):
        out_selection = (out_selection,)
    if isinstance(out_selection, tuple) and all(isinstance(s, slice) for s in out_selection):
        # The trailing Ellipsis keeps a 0-d result a view (``out[()]`` is a scalar copy).
        return out[(*out_selection, Ellipsis)]
    return None


class _ChunkScratch:
    """Per-thread decoded-chunk buffers keyed by shape and dtype."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        cache: dict[tuple[tuple[int, ...], str], npt.NDArray[Any]] | None = getattr(
            self._local, "cache", None
        )
        if cache is None:
            cache = self._local.cache = {}
        key = (shape, dtype.str)
        buf = cache.get(key)
        if buf is None:
            if len(cache) > 8:
                cache.clear()
            buf = cache[key] = np.empty(shape, dtype=dtype)
        return buf


@dataclass(frozen=True, slots=True)
class _FetchPolicy:
    """How one read call fetches shards from its store (decided once per call)."""

    #: Requests cost a round trip (object stores, any zarr store used through its API).
    remote: bool
    #: Bounds on merged byte ranges.
    limits: Coalescing
    #: The store merges ranges itself and gets the requests zarr's sharding codec would make
    #: (a zarr ``Store`` used through its API): no whole-shard overfetch, no pre-merging.
    delegated: bool


@dataclass(slots=True)
class _ShardRead:
    """What phase one of a sharded read found for one request."""

    request: ChunkRequest
    present: bool
    #: Where the request's selection goes, and the axes it drops.
    out: npt.NDArray[Any] | None = None
    drop_axes: tuple[int, ...] = ()
    table: npt.NDArray[np.uint64] | None = None
    sources: dict[int, Buf] = field(default_factory=dict)
    dest: npt.NDArray[Any] | None = None
    in_place: bool = False
    origin: tuple[int, ...] = ()
    blocks: list[tuple[int, ...]] = field(default_factory=list)


@dataclass(slots=True)
class _ShardWrite:
    """One shard being rewritten: where the new values of its touched inner chunks are."""

    key: str
    #: Array holding the new values of the touched inner chunks (the caller's value, or a
    #: merge buffer over their bounding box).
    src: npt.NDArray[Any]
    #: (C-order inner chunk index, region of ``src``) of every touched inner chunk.
    touched: list[tuple[int, tuple[slice, ...]]]
    #: Encoded inner chunks of the new shard: kept ones, then replaced ones.
    stored: dict[int, Buf]
    #: Whether the shard was read (a read-modify-write), and what was read (``None``: missing).
    read: bool = False
    old: GetResult | None = None

    def set_inner(self, i: int, encoded: Buf | None) -> None:
        """Record the new bytes of inner chunk ``i`` (``None``: empty, left out of the shard)."""
        if encoded is None:
            self.stored.pop(i, None)
        else:
            self.stored[i] = encoded


class ArrayEngine:
    """Reads and writes chunks of one array.

    Parameters
    ----------
    spec : ArraySpec
        Parsed metadata.
    codec : ChunkCodec or V2ChunkCodec
        The compiled codec chain of the array's chunks.
    settings : Settings
        Thread count, coalescing and memory bounds.
    cache_shard_indexes : bool, default False
        Trust decoded shard indexes of remote stores kept across calls even when the store
        cannot check their version (see :class:`~cuzarr.shard_cache.ShardIndexCache`); this
        engine's writes invalidate them. Indexes with a version (an object store's ETag) are
        kept and used either way: ranges are then read only if the shard still has it.
    """

    def __init__(
        self,
        spec: ArraySpec,
        codec: Codec,
        settings: Settings,
        *,
        cache_shard_indexes: bool = False,
    ) -> None:
        if codec.nbytes > settings.max_chunk_nbytes:
            # Refused before anything is allocated: metadata may come from anyone.
            raise MetadataError(
                f"Refusing array '{spec.path}': one chunk decodes to {codec.nbytes} bytes, over "
                f"the max_chunk_nbytes limit of {settings.max_chunk_nbytes} (raise it with "
                "cuzarr.configure(max_chunk_nbytes=...) if you trust this data)"
            )
        self.spec = spec
        self.codec = codec
        self.settings = settings
        self.fill = compat.fill_for_missing(spec.fill_value, spec.data_type)
        self.sharding: ShardingCodec | None = codec.sharding
        # Decoded indexes of shards read through ``open_object`` (local files, memory), keyed
        # by the index bytes themselves: reused only for identical bytes.
        self._version_cache = ShardIndexCache()
        # Decoded indexes of remote shards, across calls: entries with a version (ETag) are
        # always used (reads are conditional on it); entries without one only if trusted.
        self.index_cache: ShardIndexCache | None = (
            ShardIndexCache() if self.sharding is not None else None
        )
        self._trust_indexes = cache_shard_indexes
        self._scratch = Scratch()
        self._chunks = _ChunkScratch()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "codec": self.codec,
            "settings": self.settings,
            "cache_shard_indexes": self._trust_indexes,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["spec"],
            state["codec"],
            state["settings"],
            cache_shard_indexes=state.get("cache_shard_indexes", False),
        )

    def __eq__(self, other: object) -> bool:
        # Value equality (what a pickled copy keeps): same metadata, codecs, settings, policy.
        if not isinstance(other, ArrayEngine):
            return NotImplemented
        return (
            self.spec == other.spec
            and self.codec == other.codec
            and self.settings == other.settings
            and self._trust_indexes == other._trust_indexes
        )

    def __hash__(self) -> int:
        return hash((self.spec.path, self.codec.shape, self.settings))

    # ------------------------------------------------------------------ decoding helpers

    def _decode_into(self, codec: Codec, key: str, raw: Buf, dest: npt.NDArray[Any]) -> None:
        """Decode one chunk into ``dest`` (chunk-shaped), through scratch if ``dest`` is strided."""
        try:
            if dest.flags.c_contiguous or not codec.direct:
                codec.decode_into(raw, dest)
            else:
                tmp = self._chunks.get(codec.shape, codec.dtype)
                codec.decode_into(raw, tmp)
                dest[...] = tmp
        except CuzarrError as exc:
            if isinstance(exc, CorruptChunkError):
                raise _decode_failure(key, self.spec.path, exc) from exc
            raise
        except Exception as exc:
            raise _decode_failure(key, self.spec.path, exc) from exc

    def _decode(self, codec: Codec, key: str, raw: Buf) -> npt.NDArray[Any]:
        """Decode one chunk to an array (a per-thread scratch buffer when possible)."""
        try:
            if codec.direct:
                tmp = self._chunks.get(codec.shape, codec.dtype)
                codec.decode_into(raw, tmp)
                return tmp
            return codec.decode(raw)
        except CuzarrError as exc:
            if isinstance(exc, CorruptChunkError):
                raise _decode_failure(key, self.spec.path, exc) from exc
            raise
        except Exception as exc:
            raise _decode_failure(key, self.spec.path, exc) from exc

    # ------------------------------------------------------------------ reads

    def read(
        self,
        store: ChunkStore,
        requests: Sequence[ChunkRequest],
        out: npt.NDArray[Any],
        drop_axes: tuple[int, ...] = (),
        *,
        coalescing: Coalescing | None = None,
    ) -> list[bool]:
        """Read requests into ``out``; return, per request, whether the chunk was present.

        ``coalescing`` is zarr's ``array.sharding_coalesce_*`` configuration of the array (zarr
        pipeline path); see :meth:`fetch_policy` for how it bounds merged reads.
        """
        if self.sharding is not None:
            return self._read_shard_items(
                store, [(req, out, drop_axes) for req in requests], coalescing
            )

        if (
            len(requests) >= 2 * _ZSTD_BATCH
            and self.codec.zstd_frames
            and self.codec.nbytes <= _ZSTD_BATCH_MAX_CHUNK
            and not is_remote(store)
        ):
            return self._read_zstd_batches(store, requests, out, drop_axes)

        def one(req: ChunkRequest) -> bool:
            return self._read_chunk(store, req, out, drop_axes)

        return parallel_map(one, requests, io_threads(store, self.settings))

    def _read_zstd_batches(
        self,
        store: ChunkStore,
        requests: Sequence[ChunkRequest],
        out: npt.NDArray[Any],
        drop_axes: tuple[int, ...],
    ) -> list[bool]:
        """Many small zstd chunks of a local store: read and decode them in batches.

        Each task reads ``_ZSTD_BATCH`` chunks, decodes them in one GIL-free call
        (:func:`~cuzarr.codecs.numcodecs_.zstd_decode_many`) and copies them into the output.
        Per chunk this saves the Python of a separate decode and, with several threads, the
        GIL hand-over around every decode. A batch with any bad frame is read again chunk by
        chunk, which names the chunk in its error.
        """
        codec = self.codec
        shape, dtype, size = codec.shape, codec.dtype, codec.nbytes
        results = [False] * len(requests)
        # A zstd frame of ``size`` bytes is at most ZSTD_COMPRESSBOUND(size) plus its header
        # and checksum; anything longer is not a well-formed chunk (read again one by one).
        limit = size + (size >> 8) + (((128 << 10) - size) >> 11 if size < (128 << 10) else 0)
        limit += 64
        hint = limit if store.caps.small_reads else None

        def fetch(key: str) -> Buf | None:
            got = store.get(key, size_hint=hint)
            return None if got is None else got.data

        def run(lo: int) -> None:
            batch = requests[lo : lo + _ZSTD_BATCH]
            raws = [fetch(req.key) for req in batch]
            present = [i for i, raw in enumerate(raws) if raw is not None]
            frames = [raw for raw in raws if raw is not None]
            try:
                if any(memoryview(f).nbytes > limit for f in frames):
                    raise CorruptChunkError("a chunk is larger than any zstd frame of its size")
                decoded = zstd_decode_many(frames, size) if frames else []
            except CorruptChunkError:
                for i, req in enumerate(batch):
                    results[lo + i] = self._read_chunk(store, req, out, drop_axes)
                return
            for i, raw in enumerate(raws):
                if raw is None:
                    out[batch[i].out_selection] = self.fill
            for j, i in enumerate(present):
                req = batch[i]
                chunk = np.frombuffer(decoded[j], dtype).reshape(shape)
                selected = chunk[req.chunk_selection]
                if drop_axes:
                    selected = selected.squeeze(axis=drop_axes)
                out[req.out_selection] = selected
                results[lo + i] = True

        parallel_map(run, range(0, len(requests), _ZSTD_BATCH), self.settings.n_threads)
        return results

    def read_batch(
        self,
        store: ChunkStore,
        jobs: Sequence[tuple[Sequence[ChunkRequest], npt.NDArray[Any]]],
        *,
        coalescing: Coalescing | None = None,
    ) -> None:
        """Read the requests of several selections, each into its own output, as one batch.

        A chunk or shard touched by several selections is fetched (and a chunk decoded) once;
        the fetches of every selection are in flight together, so on an object store a batch
        of windows costs the round trips of one.
        """
        if self.sharding is not None:
            self._read_shard_items(
                store, [(req, out, ()) for reqs, out in jobs for req in reqs], coalescing
            )
            return
        groups: dict[str, list[tuple[ChunkRequest, npt.NDArray[Any]]]] = {}
        for reqs, out in jobs:
            for req in reqs:
                groups.setdefault(req.key, []).append((req, out))

        def one(key: str) -> None:
            members = groups[key]
            if len(members) == 1:
                self._read_chunk(store, members[0][0], members[0][1], ())
                return
            got = store.get(key, scratch=self._scratch)
            if got is None:
                for req, out in members:
                    out[req.out_selection] = self.fill
                return
            chunk = self._decode(self.codec, key, got.data)
            for req, out in members:
                out[req.out_selection] = chunk[req.chunk_selection]

        parallel_map(one, list(groups), io_threads(store, self.settings))

    def _read_chunk(
        self,
        store: ChunkStore,
        req: ChunkRequest,
        out: npt.NDArray[Any],
        drop_axes: tuple[int, ...],
    ) -> bool:
        codec = self.codec
        dest = None
        if not drop_axes and is_full(req.chunk_selection, codec.shape):
            dest = _view(out, req.out_selection)
            if dest is not None and dest.shape != codec.shape:
                dest = None
        if dest is not None and codec.raw and dest.flags.c_contiguous and dest.dtype == codec.dtype:
            # Uncompressed chunk into a contiguous region: one read, no copy.
            size = store.read_into(req.key, dest.reshape(-1).view(np.uint8))
            if size is None:
                dest[...] = self.fill
                return False
            if size != codec.nbytes:
                raise CorruptChunkError(
                    f"Corrupt {_where(req.key, self.spec.path)}: stored {size} bytes, "
                    f"expected {codec.nbytes}"
                )
            return True
        got = store.get(req.key, scratch=self._scratch)
        if got is None:
            out[req.out_selection] = self.fill
            return False
        raw = got.data
        if dest is not None:
            self._decode_into(codec, req.key, raw, dest)
            return True
        chunk = self._decode(codec, req.key, raw)
        selected = chunk[req.chunk_selection]
        if drop_axes:
            selected = selected.squeeze(axis=drop_axes)
        out[req.out_selection] = selected
        return True

    def fetch_policy(self, store: ChunkStore, coalescing: Coalescing | None = None) -> _FetchPolicy:
        """How reads of this call fetch shards from ``store``.

        Merged reads are bounded by ``Settings.max_gap`` (local files, memory) or
        ``remote_max_gap`` (remote stores) and ``max_coalesced``. zarr's bounds
        (``coalescing``, zarr pipeline path) replace them on remote stores and cap them on
        local ones: zarr's gap is the most a merge *may* bridge, and a read from the page cache
        costs less than a 1 MiB detour through unneeded bytes.
        """
        remote = is_remote(store)
        s = self.settings
        gap = s.remote_max_gap if remote else s.max_gap
        size = s.max_coalesced
        if coalescing is not None:
            if remote:
                gap, size = coalescing.max_gap, coalescing.max_bytes
            else:
                gap, size = min(gap, coalescing.max_gap), min(size, coalescing.max_bytes)
        return _FetchPolicy(
            remote=remote, limits=Coalescing(gap, size), delegated=store.caps.coalesces
        )

    def _read_shard_items(
        self,
        store: ChunkStore,
        items: Sequence[tuple[ChunkRequest, npt.NDArray[Any], tuple[int, ...]]],
        coalescing: Coalescing | None = None,
    ) -> list[bool]:
        """Read ``(request, out, drop_axes)`` items of a sharded array; return presence per item.

        Items on the same shard (from different selections of a batch) share one fetch: the
        union of their inner chunks is fetched once, then each item is decoded and scattered
        into its own output.
        """
        sh = self.sharding
        assert sh is not None
        groups: dict[str, list[int]] = {}
        for i, (req, _out, _drop) in enumerate(items):
            groups.setdefault(req.key, []).append(i)
        keys = list(groups)
        shard_nbytes = max(1, self.codec.nbytes)
        per_wave = max(1, self.settings.max_bytes_in_flight // shard_nbytes)
        results: list[bool] = [False] * len(items)
        pool = BufferPool()
        policy = self.fetch_policy(store, coalescing)
        for w in range(0, len(keys), per_wave):
            wave = keys[w : w + per_wave]

            def fetch(key: str) -> list[tuple[int, _ShardRead]]:
                members = [(i, *items[i]) for i in groups[key]]
                return self._fetch_shard_group(store, sh, key, members, pool, policy)

            fetched = parallel_map(fetch, wave, io_threads(store, self.settings))
            reads = [pair for group in fetched for pair in group]
            inner = sh.inner
            if inner.zstd_frames and inner.nbytes <= _ZSTD_BATCH_MAX_CHUNK:
                # Small zstd inner chunks: GIL-free batches, as for small chunks.
                batches = [
                    (r, r.blocks[k : k + _ZSTD_BATCH])
                    for _i, r in reads
                    if r.present
                    for k in range(0, len(r.blocks), _ZSTD_BATCH)
                ]

                def decode_batch(task: tuple[_ShardRead, list[tuple[int, ...]]]) -> None:
                    self._decode_inner_batch(sh, *task)

                parallel_map(decode_batch, batches, self.settings.n_threads)
            else:
                tasks: list[tuple[_ShardRead, tuple[int, ...]]] = [
                    (r, b) for _i, r in reads if r.present for b in r.blocks
                ]

                def decode(task: tuple[_ShardRead, tuple[int, ...]]) -> None:
                    self._decode_inner(sh, *task)

                parallel_map(decode, tasks, self.settings.n_threads)

            def scatter(pair: tuple[int, _ShardRead]) -> None:
                results[pair[0]] = self._scatter_shard(pair[1])

            parallel_map(scatter, reads, self.settings.n_threads)
            pool.release()
        return results

    def _fetch_shard_group(
        self,
        store: ChunkStore,
        sh: ShardingCodec,
        key: str,
        members: list[tuple[int, ChunkRequest, npt.NDArray[Any], tuple[int, ...]]],
        pool: BufferPool | None,
        policy: _FetchPolicy,
    ) -> list[tuple[int, _ShardRead]]:
        """Phase one for the items of one shard: fetch the union of their inner chunks once."""
        shard_shape = self.codec.shape
        reads: list[tuple[int, _ShardRead, list[npt.NDArray[np.intp]]]] = []
        union: set[int] = set()
        cps = sh.chunks_per_shard
        for i, req, out, drop_axes in members:
            per_dim = needed_blocks(req.chunk_selection, sh.chunk_shape, shard_shape)
            blocks = list(iter_blocks(per_dim))
            r = _ShardRead(
                request=req, present=False, out=out, drop_axes=drop_axes, blocks=blocks
            )
            reads.append((i, r, per_dim))
            union.update(int(np.ravel_multi_index(b, cps)) for b in blocks)
        if not union:
            return [(i, r) for i, r, _ in reads]
        flat = sorted(union)
        try:
            if len(flat) == sh.n_inner:
                got = self._fetch_whole_shard(store, sh, key, flat, pool, policy.remote)
            elif store.caps.open_object:
                reader = store.open_object(key)
                if reader is None:
                    return [(i, r) for i, r, _ in reads]
                try:
                    got = self._read_shard_version(sh, key, reader, flat, policy)
                finally:
                    reader.close()
            else:
                got = self._fetch_partial_shard(store, sh, key, flat, pool, policy)
        except CorruptChunkError as exc:
            where = _where(key, self.spec.path).replace("chunk", "shard", 1)
            raise CorruptChunkError(f"Corrupt {where}: {exc}") from exc
        if got is None:
            return [(i, r) for i, r, _ in reads]
        table, sources = got
        for _i, r, per_dim in reads:
            if r.blocks:
                self._prepare_dest(sh, r, per_dim, table, sources)
        return [(i, r) for i, r, _ in reads]

    def _fetch_shard(
        self,
        store: ChunkStore,
        sh: ShardingCodec,
        req: ChunkRequest,
        out: npt.NDArray[Any],
        drop_axes: tuple[int, ...],
        pool: BufferPool | None = None,
    ) -> _ShardRead:
        """Phase one for a single request (the GPU backend plans its reads with it)."""
        policy = self.fetch_policy(store)
        members = [(0, req, out, drop_axes)]
        return self._fetch_shard_group(store, sh, req.key, members, pool, policy)[0][1]

    def _prepare_dest(
        self,
        sh: ShardingCodec,
        r: _ShardRead,
        per_dim: list[npt.NDArray[np.intp]],
        table: npt.NDArray[np.uint64],
        sources: dict[int, Buf],
    ) -> None:
        """Mark ``r`` present and give it a destination for its inner chunks.

        The output itself for a whole-shard box read, else a buffer over the bounding box of
        the needed inner chunks.
        """
        req = r.request
        shard_shape = self.codec.shape
        r.present = True
        r.table = table
        r.sources = sources
        if not r.drop_axes and is_full(req.chunk_selection, shard_shape):
            assert r.out is not None
            dest = _view(r.out, req.out_selection)
            if dest is not None and dest.shape == shard_shape:
                r.dest = dest
                r.in_place = True
                r.origin = (0,) * len(shard_shape)
                return
        lo = tuple(int(d[0]) * c for d, c in zip(per_dim, sh.chunk_shape, strict=True))
        hi = tuple((int(d[-1]) + 1) * c for d, c in zip(per_dim, sh.chunk_shape, strict=True))
        r.origin = lo
        r.dest = np.empty(
            tuple(hi_ - lo_ for lo_, hi_ in zip(lo, hi, strict=True)), self.codec.dtype
        )

    def _usable_index(
        self, store: ChunkStore, key: str
    ) -> tuple[npt.NDArray[np.uint64], int | None, object] | None:
        """A cached index of shard ``key`` that may be used with ``store``, or ``None``.

        An index cached with the shard's version (ETag) is always usable: ranges are then
        fetched only if the shard still has that version. One without a version is used only
        when this engine trusts its cache (the explicit API; see ``cache_shard_indexes``).
        """
        if self.index_cache is None:
            return None
        entry = self.index_cache.peek(key)
        if entry is None:
            return None
        if entry[2] is None and not (self._trust_indexes and is_remote(store)):
            return None
        return entry

    def _fetch_whole_shard(
        self,
        store: ChunkStore,
        sh: ShardingCodec,
        key: str,
        flat: list[int],
        pool: BufferPool | None,
        remote: bool,
    ) -> tuple[npt.NDArray[np.uint64], dict[int, Buf]] | None:
        """One request for the whole shard, index included; its index is cached if remote."""
        got = store.get(key, scratch=pool)
        if got is None:
            return None
        raw, version = got.data, got.version
        u8, table = sh.split(raw)
        sources = {
            i: u8[int(table[i, 0]) : int(table[i, 0]) + int(table[i, 1])]
            for i in flat
            if table[i, 0] != EMPTY
        }
        if remote and self.index_cache is not None:
            self.index_cache.put(key, table, u8.nbytes, version)
        return table, sources

    def _fetch_partial_shard(
        self,
        store: ChunkStore,
        sh: ShardingCodec,
        key: str,
        flat: list[int],
        pool: BufferPool | None,
        policy: _FetchPolicy,
    ) -> tuple[npt.NDArray[np.uint64], dict[int, Buf]] | None:
        """Some inner chunks of a shard on a store without ``open_object`` (remote stores).

        With a usable cached index: one batch of ranges. Without: the whole shard in one
        request if the unneeded bytes are few (``Settings.max_overfetch``; not on stores that
        plan their own reads), else the index (one request) and then the ranges. On stores
        with versions the ranges are conditional on the index's version, so an index and data
        of different versions are never combined. A cached index found stale (412) or
        inconsistent is re-read; a shard rewritten between a fresh index and its ranges is
        tried again, three attempts in all. A shard gone by the time its ranges are read reads
        as missing, as in zarr.
        """
        remote = policy.remote
        entry = self._usable_index(store, key) if remote else None
        overfetch = remote and not policy.delegated
        if entry is None and overfetch and self._fetch_whole(len(flat)):
            return self._fetch_whole_shard(store, sh, key, flat, pool, remote)
        for attempt in range(3):
            cached = entry is not None
            if entry is None:
                entry = self._fetch_shard_index(store, sh, key, policy)
                if entry is None:
                    return None
            table, size, version = entry
            fetch: Callable[[list[tuple[int, int]]], Sequence[Buf | None] | None]
            fetch = functools.partial(
                store.get_ranges,
                key,
                if_match=version if isinstance(version, str) else None,
                limits=policy.limits,
            )
            try:
                sources = self._fetch_inner_ranges(fetch, key, table, flat, size, policy)
            except StaleObjectError:
                # Rewritten since the index was read (cached, or just now by a racing writer).
                if self.index_cache is not None:
                    self.index_cache.discard(key)
                if attempt == 2:
                    raise
                entry = None
                continue
            except CorruptChunkError:
                if not cached or self.index_cache is None:
                    raise
                # A cached index without a version, found stale: read it again.
                self.index_cache.discard(key)
                entry = None
                continue
            if sources is None:
                return None
            if not cached and remote and self.index_cache is not None:
                self.index_cache.put(key, table, size, version)
            return table, sources
        raise AssertionError("unreachable")  # pragma: no cover

    def _read_shard_version(
        self,
        sh: ShardingCodec,
        key: str,
        reader: ObjectReader,
        flat: list[int],
        policy: _FetchPolicy,
    ) -> tuple[npt.NDArray[np.uint64], dict[int, Buf]]:
        """Index and needed inner chunks of one open shard.

        The raw index is always read (one small read from the open object); its decoded and
        validated table is reused when the bytes equal the last ones seen for this key. Equal
        index bytes mean an equal table whatever happened to the file, so unlike a version
        stamp (inode numbers and coarse mtimes repeat) this can never serve a stale index.
        """
        n = sh.index_nbytes
        if reader.size < n:
            raise CorruptChunkError(
                f"shard is {reader.size} bytes, shorter than its {n}-byte index"
            )
        start = 0 if sh.index_location == "start" else reader.size - n
        raw = bytes(reader.read([(start, n)])[0])
        # The shard size bounds the offsets, so it is part of what must match.
        token = (reader.size, raw)
        cached = self._version_cache.get(key, token)
        if cached is not None:
            table = cached[0]
        else:
            table = sh.decode_index(raw, shard_nbytes=reader.size)
            self._version_cache.put(key, table, reader.size, token)
        sources = self._fetch_inner_ranges(reader.read, key, table, flat, reader.size, policy)
        assert sources is not None  # an open object cannot go missing
        return table, sources

    def _fetch_shard_index(
        self, store: ChunkStore, sh: ShardingCodec, key: str, policy: _FetchPolicy
    ) -> tuple[npt.NDArray[np.uint64], int | None, str | None] | None:
        """The shard's decoded index, its size if known and its version (ETag) if known."""
        n = sh.index_nbytes
        if sh.index_location == "end":
            got = store.get(key, Suffix(n))
            if got is None:
                return None
            raw, size, version = got
            got_n = memoryview(raw).nbytes
            if (size if size is not None else got_n) < n:
                short = size if size is not None else got_n
                raise CorruptChunkError(f"shard is {short} bytes, shorter than its {n}-byte index")
            return sh.decode_index(raw, shard_nbytes=size), size, version
        got = store.get(key, Range(0, n))
        if got is None:
            return None
        return sh.decode_index(got.data, shard_nbytes=None), None, got.version

    def _fetch_whole(self, n_needed: int) -> bool:
        """Whether a remote partial read of ``n_needed`` inner chunks should fetch the shard.

        The unneeded bytes are estimated from the decoded shard size (compressed shards are
        smaller), so the estimate errs towards two requests.
        """
        sh = self.sharding
        assert sh is not None
        unneeded = self.codec.nbytes * (sh.n_inner - n_needed) // sh.n_inner
        return unneeded <= self.settings.max_overfetch

    def _fetch_inner_ranges(
        self,
        fetch: Callable[[list[tuple[int, int]]], Sequence[Buf | None] | None],
        key: str,
        table: npt.NDArray[np.uint64],
        flat: list[int],
        size: int | None,
        policy: _FetchPolicy,
    ) -> dict[int, Buf] | None:
        """The stored bytes of the present inner chunks among ``flat``; ``None``: shard gone.

        Ranges are merged here within ``policy.limits``, or handed over one per inner chunk
        to a store that merges them itself (an inner chunk it returns nothing for reads as
        the fill value, as in zarr).
        """
        ranges = [
            ByteRange(int(table[i, 0]), int(table[i, 1]), i) for i in flat if table[i, 0] != EMPTY
        ]
        if not ranges:
            return {}
        if policy.delegated:
            reads = [CoalescedRange(r.start, r.length, (r,)) for r in ranges]
        else:
            limits = policy.limits
            reads = coalesce(ranges, max_gap=limits.max_gap, max_size=limits.max_bytes)
        spans = [(r.start, r.length) for r in reads]
        data = fetch(spans)
        if data is None:
            # Deleted after its index was read: the shard reads as missing, as in zarr.
            return None
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

    def _decode_inner(self, sh: ShardingCodec, r: _ShardRead, block: tuple[int, ...]) -> None:
        assert r.dest is not None
        dest = r.dest[self._inner_region(sh, r, block)]
        i = int(np.ravel_multi_index(block, sh.chunks_per_shard))
        src = r.sources.get(i)
        if src is None:
            dest[...] = self.fill
            return
        self._decode_into(sh.inner, f"{r.request.key}[inner chunk {block}]", src, dest)

    def _decode_inner_batch(
        self, sh: ShardingCodec, r: _ShardRead, blocks: list[tuple[int, ...]]
    ) -> None:
        """Decode some inner chunks of one shard (single zstd frames) in one GIL-free call."""
        assert r.dest is not None
        present: list[tuple[int, ...]] = []
        frames: list[Buf] = []
        for block in blocks:
            src = r.sources.get(int(np.ravel_multi_index(block, sh.chunks_per_shard)))
            if src is None:
                r.dest[self._inner_region(sh, r, block)] = self.fill
            else:
                present.append(block)
                frames.append(src)
        if not frames:
            return
        inner = sh.inner
        try:
            decoded = zstd_decode_many(frames, inner.nbytes)
        except CorruptChunkError:
            for block in present:  # one by one: the error names the inner chunk
                self._decode_inner(sh, r, block)
            return
        for j, block in enumerate(present):
            chunk = np.frombuffer(decoded[j], inner.dtype).reshape(inner.shape)
            r.dest[self._inner_region(sh, r, block)] = chunk

    @staticmethod
    def _inner_region(
        sh: ShardingCodec, r: _ShardRead, block: tuple[int, ...]
    ) -> tuple[slice, ...]:
        """Where inner chunk ``block`` lies in ``r.dest``."""
        return tuple(
            slice(b * c - o, (b + 1) * c - o)
            for b, c, o in zip(block, sh.chunk_shape, r.origin, strict=True)
        )

    def _scatter_shard(self, r: _ShardRead) -> bool:
        req = r.request
        out = r.out
        assert out is not None
        if not r.present:
            out[req.out_selection] = self.fill
            return False
        assert r.dest is not None
        if r.in_place:
            return True
        sel = rebase(req.chunk_selection, r.origin, r.dest.shape)
        selected = r.dest[sel]
        if r.drop_axes:
            selected = selected.squeeze(axis=r.drop_axes)
        out[req.out_selection] = selected
        return True

    # ------------------------------------------------------------------ writes

    def write(
        self,
        store: ChunkStore,
        requests: Sequence[ChunkRequest],
        value: npt.NDArray[Any],
        drop_axes: tuple[int, ...] = (),
        *,
        write_empty_chunks: bool = False,
    ) -> None:
        """Merge ``value`` into the requested chunks and store them (or delete empty ones)."""
        store.check_writable()
        if self.sharding is not None:
            self._write_sharded(
                store, self.sharding, requests, value, drop_axes, write_empty_chunks
            )
            return

        def one(req: ChunkRequest) -> None:
            self._write_chunk(store, req, value, drop_axes, write_empty_chunks)

        parallel_map(one, requests, io_threads(store, self.settings))

    @staticmethod
    def _put_args(store: ChunkStore, old: GetResult | None) -> tuple[PutMode, str | None]:
        """How to put an object that a read-modify-write read as ``old`` (``None``: missing).

        Conditional on what was read where the store has conditional puts: a concurrent
        writer's update is then refused instead of silently lost.
        """
        if not store.caps.conditional_put:
            return PutMode.OVERWRITE, None
        if old is None:
            return PutMode.CREATE, None
        if old.version is None:
            return PutMode.OVERWRITE, None
        return PutMode.UPDATE, old.version

    def _merge(
        self,
        existing: npt.NDArray[Any] | None,
        shape: tuple[int, ...],
        selection: tuple[Any, ...],
        value: npt.NDArray[Any],
        out_selection: Any,
        drop_axes: tuple[int, ...],
    ) -> npt.NDArray[Any]:
        """zarr's merge rule: existing (or fill) with ``value`` written at ``selection``."""
        if existing is None:
            chunk = np.full(shape, self.fill, dtype=self.codec.dtype)
        else:
            chunk = np.array(existing, dtype=self.codec.dtype, copy=True)
        if selection == () or value.ndim == 0:
            chunk[selection] = value
        else:
            part = value[out_selection]
            if drop_axes:
                item = tuple(None if i in drop_axes else slice(None) for i in range(len(shape)))
                part = part[item]
            chunk[selection] = part
        return chunk

    def _is_empty(self, chunk: npt.NDArray[Any], write_empty_chunks: bool) -> bool:
        """zarr's empty-chunk rule, with a cheap exit when the first element differs."""
        if write_empty_chunks:
            return False
        if chunk.size:
            try:
                first = chunk[(0,) * chunk.ndim]
                # A first element that is not NaN/NaT and differs from the fill value by value
                # also differs bitwise: the chunk is not all fill under any of zarr's rules.
                if first == first and bool(first != self.fill):
                    return False
            except (TypeError, ValueError):
                pass
        return compat.all_equal(chunk, self.fill)

    def _encode(self, codec: Codec, key: str, chunk: npt.NDArray[Any]) -> Buf:
        return codec.encode(chunk)

    def _write_chunk(
        self,
        store: ChunkStore,
        req: ChunkRequest,
        value: npt.NDArray[Any],
        drop_axes: tuple[int, ...],
        write_empty_chunks: bool,
    ) -> None:
        codec = self.codec
        if req.complete and value.ndim != 0:
            chunk = value[req.out_selection]
            if chunk.shape == codec.shape:
                # Nothing to read: encode outside the lock, store under it.
                data = None if self._is_empty(chunk, write_empty_chunks) else codec.encode(chunk)
                with write_locks(store, (req.key,)):
                    if data is None:
                        store.delete(req.key)
                    else:
                        store.put(req.key, data)
                return
        # Read-modify-write under the chunk's lock: concurrent writers in this process
        # serialize instead of losing each other's updates.
        with write_locks(store, (req.key,)):
            existing = None
            old = None
            if not req.complete:
                old = store.get(req.key, scratch=self._scratch, fresh=True)
                if old is not None:
                    existing = self._decode(codec, req.key, old.data)
            merged = self._merge(
                existing, codec.shape, req.chunk_selection, value, req.out_selection, drop_axes
            )
            if self._is_empty(merged, write_empty_chunks):
                store.delete(req.key)
            else:
                mode, version = self._put_args(store, old) if not req.complete else (
                    PutMode.OVERWRITE,
                    None,
                )
                store.put(
                    req.key, self._encode(codec, req.key, merged), mode=mode, version=version
                )

    def _write_sharded(
        self,
        store: ChunkStore,
        sh: ShardingCodec,
        requests: Sequence[ChunkRequest],
        value: npt.NDArray[Any],
        drop_axes: tuple[int, ...],
        write_empty_chunks: bool,
    ) -> None:
        """Rewrite each touched shard once, in waves bounded by ``max_bytes_in_flight``.

        Phase one (parallel over shards) reads what must be kept and merges the value; phase
        two (parallel over every touched inner chunk of the wave) encodes; phase three
        (parallel over shards) assembles and stores each shard once.
        """
        self._write_shard_waves(store, sh, requests, value, drop_axes, write_empty_chunks)

    def _write_shard_waves(
        self,
        store: ChunkStore,
        sh: ShardingCodec,
        requests: Sequence[ChunkRequest],
        value: npt.NDArray[Any],
        drop_axes: tuple[int, ...],
        write_empty_chunks: bool,
    ) -> None:
        """The three phases of :meth:`_write_sharded`, wave by wave, under the shards' locks."""
        n = io_threads(store, self.settings)
        per_wave = max(1, self.settings.max_bytes_in_flight // max(1, self.codec.nbytes))
        for w0 in range(0, len(requests), per_wave):
            wave = requests[w0 : w0 + per_wave]
            try:
                with write_locks(store, [r.key for r in wave]):

                    def plan(req: ChunkRequest) -> _ShardWrite | None:
                        return self._plan_shard_write(store, sh, req, value, drop_axes)

                    plans = [p for p in parallel_map(plan, wave, n) if p is not None]
                    tasks = [(w, i, region) for w in plans for i, region in w.touched]

                    def encode(task: tuple[_ShardWrite, int, tuple[slice, ...]]) -> Buf | None:
                        return self._encode_inner(sh, task[0], task[2], write_empty_chunks)

                    for (w, i, _), enc in zip(tasks, parallel_map(encode, tasks, n), strict=True):
                        w.set_inner(i, enc)

                    def put(w: _ShardWrite) -> None:
                        self._put_shard(store, sh, w)

                    parallel_map(put, plans, n)
            finally:
                if self.index_cache is not None:
                    for req in wave:
                        self.index_cache.discard(req.key)

    def _encode_inner(
        self,
        sh: ShardingCodec,
        w: _ShardWrite,
        region: tuple[slice, ...],
        write_empty_chunks: bool,
    ) -> Buf | None:
        """The stored bytes of one touched inner chunk, or ``None`` when it is empty."""
        chunk = w.src[region]
        if self._is_empty(chunk, write_empty_chunks):
            return None
        return self._encode(sh.inner, w.key, chunk)

    def _put_shard(self, store: ChunkStore, sh: ShardingCodec, w: _ShardWrite) -> None:
        blob = sh.assemble(w.stored)
        if blob is None:
            store.delete(w.key)
        else:
            mode, version = self._put_args(store, w.old) if w.read else (PutMode.OVERWRITE, None)
            store.put(w.key, blob, mode=mode, version=version)

    def _plan_shard_write(
        self,
        store: ChunkStore,
        sh: ShardingCodec,
        req: ChunkRequest,
        value: npt.NDArray[Any],
        drop_axes: tuple[int, ...],
    ) -> _ShardWrite | None:
        """Read the inner chunks a write keeps and gather the new values of those it touches."""
        shard_shape = self.codec.shape
        inner_shape = sh.chunk_shape
        per_dim = needed_blocks(req.chunk_selection, inner_shape, shard_shape)
        blocks = list(iter_blocks(per_dim))
        if not blocks:
            return None
        cps = sh.chunks_per_shard
        flat = [int(np.ravel_multi_index(b, cps)) for b in blocks]
        # Only a write covering every cell of the shard replaces it without reading it. A
        # request zarr calls complete covers the shard's cells inside the array, but a shard at
        # the array's edge (or kept by a shrinking resize) may hold cells beyond the shape
        # that zarr keeps: those must survive, as in zarr's sharding codec.
        whole = len(blocks) == sh.n_inner and is_full(req.chunk_selection, shard_shape)
        if whole and value.ndim != 0 and not drop_axes:
            # The whole shard comes from the value: encode straight from its views.
            src = value[req.out_selection]
            if src.shape == shard_shape:
                touched = [
                    (
                        i,
                        tuple(
                            slice(x * c, (x + 1) * c) for x, c in zip(b, inner_shape, strict=True)
                        ),
                    )
                    for i, b in zip(flat, blocks, strict=True)
                ]
                return _ShardWrite(key=req.key, src=src, touched=touched, stored={})
        old: dict[int, Buf] = {}
        got: GetResult | None = None
        if not whole:
            got = store.get(req.key, fresh=True)
            if got is not None:
                try:
                    u8, table = sh.split(got.data)
                except CorruptChunkError as exc:
                    where = _where(req.key, self.spec.path).replace("chunk", "shard", 1)
                    raise CorruptChunkError(f"Corrupt {where}: {exc}") from exc
                old = {
                    i: u8[int(table[i, 0]) : int(table[i, 0]) + int(table[i, 1])]
                    for i in range(sh.n_inner)
                    if table[i, 0] != EMPTY
                }
        # Decode the touched inner chunks that the write does not fully cover into a buffer
        # over the bounding box of the touched inner chunks, then write the value into it.
        lo = tuple(int(d[0]) * c for d, c in zip(per_dim, inner_shape, strict=True))
        hi = tuple((int(d[-1]) + 1) * c for d, c in zip(per_dim, inner_shape, strict=True))
        box = selection_box(req.chunk_selection, shard_shape)
        buf = np.empty(tuple(hi_ - lo_ for lo_, hi_ in zip(lo, hi, strict=True)), self.codec.dtype)
        touched = []
        for i, b in zip(flat, blocks, strict=True):
            region = tuple(
                slice(x * c - o, (x + 1) * c - o)
                for x, c, o in zip(b, inner_shape, lo, strict=True)
            )
            touched.append((i, region))
            covered = box is not None and all(
                s <= x * c and (x + 1) * c <= e
                for (s, e), x, c in zip(box, b, inner_shape, strict=True)
            )
            if covered:
                continue
            kept = old.get(i)
            if kept is None:
                buf[region] = self.fill
            else:
                buf[region] = self._decode(sh.inner, f"{req.key}[inner chunk {b}]", kept)
        sel = rebase(req.chunk_selection, lo, buf.shape)
        if value.ndim == 0:
            buf[sel] = value
        else:
            part = value[req.out_selection]
            if drop_axes:
                item = tuple(
                    None if i in drop_axes else slice(None) for i in range(len(shard_shape))
                )
                part = part[item]
            buf[sel] = part
        return _ShardWrite(
            key=req.key, src=buf, touched=touched, stored=old, read=not whole, old=got
        )
