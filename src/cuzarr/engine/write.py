"""The write loops: merge -> encode -> store, for any backend.

Chunks (unsharded arrays). A chunk the write covers whole is taken from the value as is and
encoded outside any lock; any other is read, decoded, merged (zarr's merge rule) and re-encoded
under the chunk's write locks (threads of the process; processes too, for local folders), and
put conditional on the version read where the store has conditional puts. A chunk equal to the
fill value is deleted instead of written unless ``write_empty_chunks`` (zarr's rule). Work is
grouped as the backend asks: one chunk per task on the CPU (small zstd chunks: a few per task,
encoded in one call), a wave per batch on the GPU.

Shards, in waves under the wave's shard locks (taken in sorted order): phase one (parallel
over shards) reads each partially written shard once, decodes only the touched inner chunks
the write does not fully cover and merges the value (a write covering every cell of a shard
reads nothing and encodes straight from the value); phase two encodes every touched inner
chunk of the wave; phase three assembles each shard once, keeping the stored bytes of
untouched inner chunks, and puts it once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr.backends.base import EACH, Codec, DecodeItem, EncodedGrid
from cuzarr.backends.pool import parallel_map
from cuzarr.codecs.base import Buf
from cuzarr.codecs.chain import ChunkCodec
from cuzarr.codecs.sharding.format import EMPTY, InnerSources
from cuzarr.engine.box_writes import box_batching, box_plan, put_padded, put_whole
from cuzarr.engine.context import ArrayContext, run_batches, waves
from cuzarr.engine.locks import write_locks
from cuzarr.engine.requests import ChunkRequest
from cuzarr.engine.selection import (
    flat_indexes,
    is_full,
    iter_blocks,
    needed_blocks,
    rebase,
    selection_box,
)
from cuzarr.engine.shard_splice import grid_blobs, old_index, splice_pieces
from cuzarr.errors import CorruptChunkError
from cuzarr.stores import io_threads
from cuzarr.stores.base import ChunkStore, GetResult, ObjectReader, PutMode

__all__ = ["put_args", "write_chunks", "write_shards"]


def put_args(store: ChunkStore, old: GetResult | None) -> tuple[PutMode, str | None]:
    """How to put an object that a read-modify-write read as ``old`` (``None``: missing).

    Conditional on what was read where the store has conditional puts: a concurrent writer's
    update is then refused instead of silently lost.
    """
    if not store.caps.conditional_put:
        return PutMode.OVERWRITE, None
    if old is None:
        return PutMode.CREATE, None
    if old.version is None:
        return PutMode.OVERWRITE, None
    return PutMode.UPDATE, old.version


def _expand(part: Any, ndim: int, drop_axes: tuple[int, ...]) -> Any:
    """A value part with the axes the selection dropped put back (length 1)."""
    if not drop_axes:
        return part
    return part[tuple(None if i in drop_axes else slice(None) for i in range(ndim))]


def merge(
    ctx: ArrayContext,
    existing: Any,
    req: ChunkRequest,
    value: Any,
    drop_axes: tuple[int, ...],
) -> Any:
    """zarr's merge rule: the existing chunk (or the fill value) with the value written in."""
    codec, backend = ctx.codec, ctx.backend
    if existing is None:
        chunk = backend.full(codec.shape, ctx.fill, codec.dtype)
    else:
        chunk = backend.copy(existing, codec.dtype)
    sel = req.chunk_selection
    if sel == () or value.ndim == 0:
        chunk[sel] = value
    else:
        chunk[sel] = _expand(value[req.out_selection], len(codec.shape), drop_axes)
    return chunk


# ---------------------------------------------------------------------------- chunks


def write_chunks(
    ctx: ArrayContext,
    store: ChunkStore,
    requests: Sequence[ChunkRequest],
    value: Any,
    drop_axes: tuple[int, ...],
    write_empty_chunks: bool,
) -> None:
    """Merge ``value`` into the requested chunks of an unsharded array and store them."""
    codec, backend = ctx.codec, ctx.backend
    batching = backend.batching(
        codec, len(requests), remote=store.caps.remote, op="encode", threads=ctx.settings.n_threads
    )
    io = io_threads(store, ctx.settings)

    def encode_kept(chunks: Sequence[Any]) -> dict[int, Buf]:
        """Encoded bytes of the chunks that are not empty, by position (empty: delete)."""
        keep = [
            i
            for i, c in enumerate(chunks)
            if write_empty_chunks or not backend.all_equal(c, ctx.fill)
        ]
        blobs = encode_chunks(ctx, codec, [chunks[i] for i in keep], write_empty_chunks)
        return {i: b for i, b in zip(keep, blobs, strict=True) if b is not None}

    # Stores without conditional puts overwrite whatever was read: local ones take the puts of
    # a batch in one call (``ChunkStore.put_many``).
    batch_puts = not store.caps.conditional_put and not store.caps.remote

    def put_all(reqs: Sequence[ChunkRequest], blobs: dict[int, Buf], olds: Sequence[Any]) -> None:
        if batch_puts:
            for i, r in enumerate(reqs):
                if i not in blobs:
                    store.delete(r.key)
            kept = sorted(blobs)
            # In this task (parallel batches), else spread over the I/O threads.
            parts = [kept] if batching.parallel else [kept[k::io] for k in range(io)]
            _each(
                lambda part: store.put_many([reqs[i].key for i in part], [blobs[i] for i in part]),
                [part for part in parts if part],
                batching.parallel,
                io,
            )
            return

        def put(i: int) -> None:
            blob = blobs.get(i)
            if blob is None:
                store.delete(reqs[i].key)
                return
            old = olds[i]
            mode, version = (PutMode.OVERWRITE, None) if old is _WHOLE else put_args(store, old)
            store.put(reqs[i].key, blob, mode=mode, version=version)

        _each(put, range(len(reqs)), batching.parallel, io)

    # The requests whose chunk the value covers whole (by identity: worked out once).
    covered = {id(r) for r in requests if _whole_chunk(ctx, r, value)}
    boxes = box_plan(ctx, store, value)
    # Chunks the write covers that reach past the array's edge: merged with the fill value and
    # stored from C too (box_writes.put_padded), where the value has the chunk's dimensions.
    padded = boxes is not None and not drop_axes and value.ndim == len(codec.shape)
    if (
        boxes is not None
        and batching == EACH
        and all(id(r) in covered or (padded and r.complete) for r in requests)
    ):
        batching = box_batching(len(requests), io)

    # A write in one batch runs on the calling thread: the C call may lend it the others.
    helpers = io - 1 if len(requests) <= batching.size else 0

    def run(batch: Sequence[ChunkRequest]) -> None:
        whole = [r for r in batch if id(r) in covered]
        rest = [r for r in batch if id(r) not in covered]
        if whole and boxes is not None:
            # Encoded and stored from the value in one call into C (what it leaves: below).
            with write_locks(store, [r.key for r in whole]):
                whole = put_whole(ctx, store, boxes, whole, value, write_empty_chunks, helpers)
        if whole:
            # Nothing to read: encode outside the lock, store under it.
            blobs = encode_kept([value[r.out_selection] for r in whole])
            with write_locks(store, [r.key for r in whole]):
                put_all(whole, blobs, [_WHOLE] * len(whole))
        edges = [r for r in rest if r.complete] if padded else []
        if edges and boxes is not None:
            with write_locks(store, [r.key for r in edges]):
                left = put_padded(ctx, store, boxes, edges, value, write_empty_chunks, helpers)
            rest = [r for r in rest if not r.complete] + left
        if not rest:
            return
        # Read-modify-write under the chunks' locks: concurrent writers in this process (and
        # on local folders, in other processes) serialize instead of losing updates.
        with write_locks(store, [r.key for r in rest]):

            # A scratch buffer is reused by the next read on its thread: only a batch of one
            # chunk (decoded before anything else is read) may read into it.
            scratch = ctx.scratch if len(rest) == 1 else None

            def read_old(r: ChunkRequest) -> Any:
                if r.complete:
                    return _WHOLE
                return store.get(r.key, scratch=scratch, fresh=True)

            olds: list[Any] = _each(read_old, rest, batching.parallel, io)
            present = [i for i, old in enumerate(olds) if old is not None and old is not _WHOLE]
            decoded = backend.decode(
                codec, [DecodeItem(olds[i].data, None, rest[i].key) for i in present], ctx.where
            )
            existing: dict[int, Any] = dict(zip(present, decoded, strict=True))
            chunks = [
                merge(ctx, existing.get(i), r, value, drop_axes) for i, r in enumerate(rest)
            ]
            put_all(rest, encode_kept(chunks), olds)

    run_batches(run, requests, batching, io)


#: Marks a chunk the write covered whole (written without reading it first).
_WHOLE: Any = object()


def _whole_chunk(ctx: ArrayContext, req: ChunkRequest, value: Any) -> bool:
    return (
        req.complete
        and value.ndim != 0
        and value[req.out_selection].shape == ctx.codec.shape
    )


def _each[T, R](fn: Any, items: Sequence[T], parallel: bool, threads: int) -> list[R]:
    """``fn`` over ``items``: in the calling task (parallel batches), else on the I/O threads."""
    if parallel:
        return [fn(x) for x in items]
    return parallel_map(fn, items, threads)


# ---------------------------------------------------------------------------- shards


@dataclass(frozen=True, slots=True)
class _ShardWrite:
    """One shard being rewritten: where the new values of its touched inner chunks are."""

    key: str
    #: Array holding the new values of the touched inner chunks (the caller's value, or a
    #: merge buffer over their bounding box).
    src: Any
    #: (C-order inner chunk index, region of ``src``) of every touched inner chunk.
    touched: list[tuple[int, tuple[slice, ...]]]
    #: Encoded inner chunks of the new shard, for the per-chunk path: the old shard's (copied
    #: from ``old_shard`` when that path is taken), then phase two replaces the touched ones.
    stored: dict[int, Buf] = field(default_factory=dict)
    #: Whether the shard was read (a read-modify-write), and what was read (``None``: missing).
    read: bool = False
    old: GetResult | None = None
    #: Stored inner chunks the write keeps part of, to decode into ``src`` before ``fill``.
    kept: list[DecodeItem] = field(default_factory=list)
    #: Writes the new values into ``src`` (after ``kept`` is decoded); ``None``: nothing to do.
    fill: Callable[[], None] | None = None
    #: The shard as read (its bytes and decoded index), for :meth:`ShardingCodec.assemble_grid`.
    old_shard: tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]] | None = None
    #: The touched inner chunks encoded at once (``Backend.encode_grid``), set in phase two:
    #: then ``stored`` is not used.
    grid: list[EncodedGrid] = field(default_factory=list)
    #: The open old shard and its decoded index, where the store splices (:func:`_splices`):
    #: the new shard keeps the stored bytes of untouched inner chunks as ranges of it
    #: (``ChunkStore.put_spliced``); then ``old_shard`` is ``None``. Closed by write_shards.
    source: ObjectReader | None = None
    table: npt.NDArray[np.uint64] | None = None


def _merge_shards(
    ctx: ArrayContext, plans: Sequence[_ShardWrite], n: int, *, remote: bool
) -> None:
    """Decode what the writes keep of their shards' inner chunks, then write the new values.

    Backends that batch (the GPU) decode the kept inner chunks of every shard of the wave in
    one call; the CPU decodes each shard's on its own task, the shards in parallel.
    """
    sh = ctx.sharding
    assert sh is not None
    backend = ctx.backend
    kept = [item for w in plans for item in w.kept]
    batching = backend.batching(
        sh.inner, len(kept), remote=remote, op="decode", threads=ctx.settings.n_threads
    )
    if kept and not batching.parallel:
        backend.decode(sh.inner, kept, ctx.where)
        for w in plans:
            if w.fill is not None:
                w.fill()
        return

    def one(w: _ShardWrite) -> None:
        if w.kept:
            backend.decode(sh.inner, w.kept, ctx.where)
        if w.fill is not None:
            w.fill()

    parallel_map(one, plans, n)


def write_shards(
    ctx: ArrayContext,
    store: ChunkStore,
    requests: Sequence[ChunkRequest],
    value: Any,
    drop_axes: tuple[int, ...],
    write_empty_chunks: bool,
) -> None:
    """Rewrite each touched shard once, in waves bounded by ``max_bytes_in_flight``."""
    sh = ctx.sharding
    assert sh is not None
    backend = ctx.backend
    n = io_threads(store, ctx.settings)
    for wave in waves(requests, ctx.per_wave(ctx.codec.nbytes)):
        # Old shards opened for splicing, closed when the wave is done (or fails).
        sources: list[ObjectReader] = []

        def plan(
            r: ChunkRequest, keep: Callable[[ObjectReader], None] = sources.append
        ) -> _ShardWrite | None:
            return _plan_shard(ctx, store, r, value, drop_axes, keep)

        try:
            with write_locks(store, [r.key for r in wave]):
                plans = [p for p in parallel_map(plan, wave, n) if p is not None]
                _merge_shards(ctx, plans, n, remote=store.caps.remote)
                for w in plans:
                    _encode_grid(ctx, w, write_empty_chunks, n)
                for w in plans:
                    if not w.grid and w.old_shard is not None:
                        w.stored.update(InnerSources(*w.old_shard))
                tasks = [
                    (w, i, region) for w in plans if not w.grid for i, region in w.touched
                ]
                batching = backend.batching(
                    sh.inner,
                    len(tasks),
                    remote=store.caps.remote,
                    op="encode",
                    threads=ctx.settings.n_threads,
                )

                def encode(batch: Sequence[tuple[_ShardWrite, int, tuple[slice, ...]]]) -> None:
                    chunks = [w.src[region] for w, _i, region in batch]
                    keep = [
                        j
                        for j, c in enumerate(chunks)
                        if write_empty_chunks or not backend.all_equal(c, ctx.fill)
                    ]
                    blobs = encode_chunks(
                        ctx, sh.inner, [chunks[j] for j in keep], write_empty_chunks
                    )
                    encoded = {j: b for j, b in zip(keep, blobs, strict=True) if b is not None}
                    for j, (w, i, _region) in enumerate(batch):
                        blob = encoded.get(j)
                        if blob is None:
                            w.stored.pop(i, None)
                        else:
                            w.stored[i] = blob

                run_batches(encode, tasks, batching, n)

                def put(w: _ShardWrite) -> None:
                    if w.source is not None:
                        assert w.table is not None
                        if w.grid:
                            indexes = [i for i, _r in w.touched]
                            new = grid_blobs(indexes, w.grid[0][0], w.grid[0][1])
                        else:
                            new = {i: w.stored.get(i, _NO_BYTES) for i, _r in w.touched}
                        pieces = splice_pieces(sh, w.table, new)
                        if pieces is None:
                            store.delete(w.key)
                        else:
                            store.put_spliced(w.key, w.source, pieces)
                        return
                    if w.grid:
                        flat = np.fromiter((i for i, _r in w.touched), np.intp, len(w.touched))
                        rows, sizes = w.grid[0]
                        blob = sh.assemble_grid(w.old_shard, flat, rows, sizes)
                    else:
                        blob = sh.assemble(w.stored)
                    if blob is None:
                        store.delete(w.key)
                        return
                    mode, version = put_args(store, w.old) if w.read else (
                        PutMode.OVERWRITE, None,
                    )
                    store.put(w.key, blob, mode=mode, version=version)

                parallel_map(put, plans, n)
        finally:
            for source in sources:
                source.close()
            if ctx.shards is not None:
                for req in wave:
                    ctx.shards.forget(req.key)


def encode_chunks(
    ctx: ArrayContext, codec: Codec, chunks: Sequence[Any], write_empty_chunks: bool
) -> list[Buf | None]:
    """Encode non-empty chunks with the backend (shards without their empty inner chunks).

    Chains whose chunks are shards (a sharded array's inner chunks that are shards
    themselves: :attr:`~cuzarr.codecs.chain.ChunkCodec.nested_sharding`) apply zarr's
    empty-chunk rule inside them too, unless ``write_empty_chunks``; ``None`` for a shard
    whose inner chunks are all empty.
    """
    backend = ctx.backend
    if write_empty_chunks or not isinstance(codec, ChunkCodec) or codec.nested_sharding is None:
        return list(backend.encode(codec, chunks))

    def is_empty(part: Any) -> bool:
        return backend.all_equal(part, ctx.fill)

    return [codec.encode_present(c, is_empty, backend.encode) for c in chunks]


def _encode_grid(ctx: ArrayContext, w: _ShardWrite, write_empty: bool, threads: int) -> None:
    """Encode ``w``'s touched inner chunks at once, if the backend can.

    Only when they fill ``w.src`` (``Backend.encode_grid``); else they are left to the
    per-chunk tasks.
    """
    sh = ctx.sharding
    assert sh is not None
    box = tuple(s // c for s, c in zip(w.src.shape, sh.chunk_shape, strict=True))
    if len(w.touched) != math.prod(box):
        return
    got = ctx.backend.encode_grid(sh.inner, w.src, ctx.fill, write_empty, threads)
    if got is not None:
        w.grid.append(got)


def _plan_shard(
    ctx: ArrayContext,
    store: ChunkStore,
    req: ChunkRequest,
    value: Any,
    drop_axes: tuple[int, ...],
    opened: Callable[[ObjectReader], None],
) -> _ShardWrite | None:
    """Read the shard a write keeps part of; plan the merge of its touched inner chunks.

    The kept inner chunks are decoded and the new values written by :func:`_merge_shards`.
    Where the store splices (:func:`_splices`), only the old index and the inner chunks the
    write keeps part of are read, from one open version of the shard (handed to ``opened``).
    """
    sh = ctx.sharding
    assert sh is not None
    shard_shape = ctx.codec.shape
    inner_shape = sh.chunk_shape
    per_dim = needed_blocks(req.chunk_selection, inner_shape, shard_shape)
    blocks = list(iter_blocks(per_dim))
    if not blocks:
        return None
    flat = flat_indexes(per_dim, sh.chunks_per_shard)
    # Only a write covering every cell of the shard replaces it without reading it. A request
    # zarr calls complete covers the shard's cells inside the array, but a shard at the array's
    # edge (or kept by a shrinking resize) may hold cells beyond the shape that zarr keeps:
    # those must survive, as in zarr's sharding codec.
    whole = len(blocks) == sh.n_inner and is_full(req.chunk_selection, shard_shape)
    if whole and value.ndim != 0 and not drop_axes:
        # The whole shard comes from the value: encode straight from its views.
        src = value[req.out_selection]
        if src.shape == shard_shape:
            touched = [
                (i, tuple(slice(x * c, (x + 1) * c) for x, c in zip(b, inner_shape, strict=True)))
                for i, b in zip(flat, blocks, strict=True)
            ]
            return _ShardWrite(key=req.key, src=src, touched=touched)
    old: Mapping[int, Buf] = {}
    old_shard = None
    got: GetResult | None = None
    source: ObjectReader | None = None
    table: npt.NDArray[np.uint64] | None = None
    if not whole and _splices(store):
        source = store.open_object(req.key)
        if source is not None:
            opened(source)
            try:
                table = old_index(sh, source)
            except CorruptChunkError as exc:
                raise CorruptChunkError(f"Corrupt {ctx.shard_where(req.key)}: {exc}") from exc
    elif not whole:
        got = store.get(req.key, fresh=True)
        if got is not None:
            try:
                u8, table = sh.split(got.data)
            except CorruptChunkError as exc:
                raise CorruptChunkError(f"Corrupt {ctx.shard_where(req.key)}: {exc}") from exc
            old = InnerSources(u8, table)
            old_shard = (u8, table)
    # Decode the touched inner chunks that the write does not fully cover into a buffer over
    # the bounding box of the touched inner chunks, then write the value into it.
    lo = tuple(int(d[0]) * c for d, c in zip(per_dim, inner_shape, strict=True))
    hi = tuple((int(d[-1]) + 1) * c for d, c in zip(per_dim, inner_shape, strict=True))
    box = selection_box(req.chunk_selection, shard_shape)
    extent = tuple(b - a for a, b in zip(lo, hi, strict=True))
    # Per axis, each touched block's slice of ``buf`` and whether the write covers it there:
    # a block is covered where it is covered along every axis (products in C order, as
    # ``blocks`` and ``flat``).
    slices = [
        [slice(int(x) * c - o, (int(x) + 1) * c - o) for x in d]
        for d, c, o in zip(per_dim, inner_shape, lo, strict=True)
    ]
    touched = list(zip(flat, itertools.product(*slices), strict=True))
    cover = [
        [box is not None and box[k][0] <= int(x) * c and (int(x) + 1) * c <= box[k][1] for x in d]
        for k, (d, c) in enumerate(zip(per_dim, inner_shape, strict=True))
    ]
    partial = (
        []
        if all(all(axis) for axis in cover)
        else [
            (i, b, region)
            for (i, region), b, covered in zip(
                touched, blocks, itertools.product(*cover), strict=True
            )
            if not all(covered)
        ]
    )

    def planned(
        src: Any, kept: list[DecodeItem], fill: Callable[[], None] | None
    ) -> _ShardWrite:
        return _ShardWrite(
            key=req.key, src=src, touched=touched, read=not whole, old=got, kept=kept,
            fill=fill, old_shard=old_shard, source=source, table=table,
        )

    if not partial and value.ndim != 0 and not drop_axes:
        # Every touched inner chunk is covered whole: encode straight from the value's view
        # (the box of the touched inner chunks is the write's, so the shapes match).
        view = value[req.out_selection]
        if view.shape == extent:
            return planned(view, [], None)
    if source is not None and table is not None and partial:
        old = _stored_bytes(source, table, [i for i, _b, _r in partial])
    buf = ctx.backend.empty(extent, ctx.codec.dtype)
    kept: list[DecodeItem] = []
    for i, b, region in partial:
        stored = old.get(i)
        if stored is None:
            buf[region] = ctx.fill
        else:
            kept.append(DecodeItem(stored, buf[region], req.key, b))
    sel = rebase(req.chunk_selection, lo, buf.shape)

    def fill() -> None:
        # After the kept inner chunks are decoded into ``buf`` (``_merge_shards``).
        if value.ndim == 0:
            buf[sel] = value
        else:
            buf[sel] = _expand(value[req.out_selection], len(shard_shape), drop_axes)

    return planned(buf, kept, fill)


#: The bytes of an inner chunk made empty by a write (``splice_pieces``).
_NO_BYTES = b""


def _splices(store: ChunkStore) -> bool:
    """Whether partial shard writes to ``store`` splice (``ChunkStore.put_spliced``).

    Stores that open one version of an object and have no conditional puts (local folders,
    memory): the write locks keep the old shard from changing until the new one is in place.
    """
    caps = store.caps
    return caps.open_object and not caps.conditional_put and not caps.remote


def _stored_bytes(
    source: ObjectReader, table: npt.NDArray[np.uint64], flat: Sequence[int]
) -> dict[int, Buf]:
    """The stored bytes of the present inner chunks among ``flat`` (one read call)."""
    offsets: list[int] = table[:, 0].tolist()
    lengths: list[int] = table[:, 1].tolist()
    empty = int(EMPTY)
    present = [i for i in flat if offsets[i] != empty]
    got = source.read([(offsets[i], lengths[i]) for i in present])
    return dict(zip(present, got, strict=True))
