"""The read loops: plan -> fetch -> decode -> scatter, for any backend.

Chunks (unsharded arrays). Each request's chunk is fetched, decoded and scattered; work is
grouped as the backend asks (:meth:`~cuzarr.backends.base.Backend.batching`). On the CPU that
is one chunk per task, many tasks at once: a chunk that maps onto a whole region of the output
is decoded straight into it (an uncompressed one read straight into it), any other into a
scratch chunk and copied once. Many small zstd chunks go in batches (16 to 128 chunks, two
batches per thread at least: :func:`~cuzarr.backends.cpu.read_batch_size`): from local files,
read, decoded and copied into the output in one call into C (:meth:`Backend.read_batch`),
else fetched and decoded in one GIL-free call. Larger zstd chunks of local files go to that
call in groups (``Batching.placed``), what it leaves one chunk per task. Remote stores are
read in batches of whole chunks, each batch one :meth:`~cuzarr.stores.base.ChunkStore.get_many`
(its requests in flight together) and one decode (:func:`remote_batching`).
On the GPU a whole wave is fetched (from a remote store in one ``get_many``, from a local one
on the I/O threads) and decoded in one call.

Shards. Waves of shards bounded by ``max_bytes_in_flight``: phase one fetches, per shard, the
union of the inner chunks its items need (:class:`~cuzarr.codecs.sharding.reader.ShardReader`
picks how; into the backend's memory where :meth:`Backend.range_reads` gives a way), phase two
decodes every needed inner chunk of the wave (into the output itself for a whole-shard read,
else into a buffer over the needed inner chunks' bounding box), phase three scatters each
item's selection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr.backends.base import Batching, DecodeItem, InnerGrid, reraise_decode
from cuzarr.backends.pool import parallel_map
from cuzarr.codecs.base import Buf
from cuzarr.codecs.sharding.reader import BackendReads, ShardBytes
from cuzarr.engine.context import ArrayContext, run_batches, waves
from cuzarr.engine.requests import ChunkRequest
from cuzarr.engine.selection import (
    flat_indexes,
    is_full,
    iter_blocks,
    needed_blocks,
    part_in_block,
    rebase,
    selection_bounds,
)
from cuzarr.errors import CorruptChunkError
from cuzarr.stores import io_threads
from cuzarr.stores.base import BufferPool, ChunkStore, Coalescing
from cuzarr.stores.ranges import ReadPolicy, read_policy

__all__ = ["read_chunk_groups", "read_chunks", "read_shards", "remote_batching"]

#: ``(request, output, dropped axes)``: one item of a read.
Item = tuple[ChunkRequest, Any, tuple[int, ...]]


def whole_view(out: Any, req: ChunkRequest, shape: tuple[int, ...], drop_axes: Any) -> Any:
    """The region of ``out`` a whole chunk of ``shape`` lands in, as a view; else ``None``."""
    if drop_axes or not is_full(req.chunk_selection, shape):
        return None
    return region_view(out, req.out_selection, shape)


def region_view(out: Any, sel: Any, shape: tuple[int, ...]) -> Any:
    """``out[sel]`` as a view if ``sel`` is slices and the region has ``shape``, else ``None``."""
    if isinstance(sel, slice):
        sel = (sel,)
    if not (isinstance(sel, tuple) and all(isinstance(s, slice) for s in sel)):
        return None
    # The trailing Ellipsis keeps a 0-d result a view (``out[()]`` is a scalar copy).
    view = out[(*sel, Ellipsis)]
    return view if view.shape == shape else None


def scatter(out: Any, req: ChunkRequest, chunk: Any, drop_axes: tuple[int, ...]) -> None:
    """``out[out_selection] = chunk[chunk_selection]``, the dropped axes squeezed."""
    selected = chunk[req.chunk_selection]
    if drop_axes:
        selected = selected.squeeze(axis=drop_axes)
    out[req.out_selection] = selected


# ---------------------------------------------------------------------------- chunks


def read_chunks(
    ctx: ArrayContext,
    store: ChunkStore,
    requests: Sequence[ChunkRequest],
    out: Any,
    drop_axes: tuple[int, ...] = (),
    stream: bool = True,
) -> list[bool]:
    """Read requests of an unsharded array into ``out``; per request, whether it was present.

    ``stream``: large chunks may be written into ``out`` with streaming stores
    (``DecodeItem.stream``).
    """
    codec, backend = ctx.codec, ctx.backend
    raw, shape = codec.raw, codec.shape

    def one(req: ChunkRequest) -> bool:
        dest = whole_view(out, req, shape, drop_axes)
        if dest is not None and raw:
            size = backend.read_direct(store, req.key, codec, dest)
            if size is None:
                dest[...] = ctx.fill
                return False
            if size >= 0:
                if size != codec.nbytes:
                    raise CorruptChunkError(
                        f"Corrupt {ctx.where(req.key)}: stored {size} bytes, "
                        f"expected {codec.nbytes}"
                    )
                return True
        got = store.get(req.key, scratch=ctx.scratch)
        if got is None:
            out[req.out_selection] = ctx.fill
            return False
        item = DecodeItem(got.data, dest, req.key, None, stream)
        chunk = backend.decode(codec, [item], ctx.where)[0]
        if dest is None:
            scatter(out, req, chunk, drop_axes)
        return True

    def placed(batch: Sequence[int], helpers: int = 0) -> list[int]:
        """The backend's own read of ``batch`` (on the CPU: read, decode and copy from C).

        Per request 1 placed, 0 missing (filled here), -1 left to the caller.
        """
        got = backend.read_batch(
            store,
            codec,
            [requests[i].key for i in batch],
            [(requests[i].chunk_selection, requests[i].out_selection) for i in batch],
            out,
            stream=stream,
            helpers=helpers,
        )
        if got is None:
            return [-1] * len(batch)
        for i, status in zip(batch, got, strict=True):
            if status == 0:
                out[requests[i].out_selection] = ctx.fill
        return got

    if len(requests) == 1:  # chunk by chunk reads: no planning of batches
        if not raw and not drop_axes:
            # A batch of one where the backend places chunks itself (local zstd and Blosc
            # chunks on the CPU: one call into C), the call's other threads lent to it.
            status = placed((0,), ctx.settings.n_threads - 1)[0]
            if status >= 0:
                return [status == 1]
        return [one(requests[0])]
    batching = backend.batching(
        codec, len(requests), remote=store.caps.remote, op="read", threads=ctx.settings.n_threads
    )
    io = io_threads(store, ctx.settings)
    threads = ctx.settings.n_threads if batching.parallel else io
    remote_batches = False
    if batching.size == 1 and batching.parallel:
        if not store.caps.remote:
            if batching.placed and not drop_axes:
                # Groups placed by the backend, what it leaves read one at a time.
                def group(batch: Sequence[int]) -> list[bool]:
                    return [
                        one(requests[i]) if status < 0 else status == 1
                        for i, status in zip(batch, placed(batch), strict=True)
                    ]

                groups = parallel_map(group, list(waves(range(len(requests)), batching.placed)), io)
                return [present for g in groups for present in g]
            return parallel_map(one, requests, io)
        batching, threads = remote_batching(ctx, len(requests), io)
        remote_batches = True
    results = [False] * len(requests)
    hint = backend.size_hint(codec) if store.caps.small_reads else None

    item = DecodeItem._make

    def get_one(i: int) -> Buf | None:
        got = store.get(requests[i].key)
        return None if got is None else got.data

    def run(batch: Sequence[int]) -> None:
        if batching.parallel and not drop_axes:
            # The backend's own batched read first (on the CPU: read, decode and copy from C).
            rest: list[int] = []
            for i, status in zip(batch, placed(batch), strict=True):
                if status < 0:
                    rest.append(i)
                results[i] = status == 1
            if not rest:
                return
            batch = rest
        if batching.parallel:
            raws = store.get_many([requests[i].key for i in batch], hint)
        else:
            keys = [requests[i].key for i in batch]
            fetched = backend.fetch(store, keys, codec)
            if fetched is not None:
                raws = fetched
            elif store.caps.remote:  # a wave's requests out together, as a remote batch's
                raws = store.get_many(keys)
            else:
                raws = parallel_map(get_one, batch, io)
        items: list[DecodeItem] = []
        present: list[int] = []
        for i, raw in zip(batch, raws, strict=True):
            req = requests[i]
            if raw is None:
                out[req.out_selection] = ctx.fill
                continue
            present.append(i)
            # Small chunks of local batches: decoded into buffers of their own, then
            # scattered. A remote batch's chunks may be large: a whole chunk is decoded
            # straight into its region of the output, as one at a time would be.
            dest = whole_view(out, req, shape, drop_axes) if remote_batches else None
            items.append(item((raw, dest, req.key, None, stream and dest is not None)))
        decoded = backend.decode(codec, items, ctx.where)
        for i, it, chunk in zip(present, items, decoded, strict=True):
            req = requests[i]
            results[i] = True
            if it.dest is not None:
                continue
            selected = chunk[req.chunk_selection]
            if drop_axes:
                selected = selected.squeeze(axis=drop_axes)
            out[req.out_selection] = selected

    run_batches(run, range(len(requests)), batching, threads)
    return results


def remote_batching(ctx: ArrayContext, n: int, in_flight: int) -> tuple[Batching, int]:
    """Batches of whole chunks of a remote store: ``(batching, threads)``.

    Each batch is one :meth:`~cuzarr.stores.base.ChunkStore.get_many` (its requests in
    flight together, bounded by the store's concurrency ``in_flight``), then one decode of the
    batch and the copies into the output. Threads: the engine's, at least two, so one decodes
    while the other's requests are in flight; together they ask for twice the store's
    concurrency, so its slots stay full while a batch is decoded and a slow request holds up
    only its own batch. Bytes in flight stay within ``Settings.max_bytes_in_flight``.
    A read of few chunks is split into two batches a thread at least, so that every thread
    decodes. Measured (nginx on loopback, 2 threads, bench/results/remote-chunks-nginx.md):
    1,024 zstd chunks of 8 KiB 330-360 ms one request per engine I/O thread, 190-218 ms in
    batches of 32 (the 1,024 requests alone through obstore: 182 ms); chunks of 512 KiB-1 MiB
    level or faster.
    """
    settings = ctx.settings
    threads = max(2, settings.n_threads)
    by_count = -(-2 * in_flight // threads)
    by_bytes = max(1, settings.max_bytes_in_flight // (threads * max(1, ctx.codec.nbytes)))
    by_split = -(-n // (2 * threads))  # two batches a thread at least: all threads decode
    return Batching(size=max(1, min(by_count, by_bytes, by_split)), parallel=True), threads


def read_chunk_groups(
    ctx: ArrayContext,
    store: ChunkStore,
    jobs: Sequence[tuple[Sequence[ChunkRequest], Any]],
) -> None:
    """Requests of several selections, each into its own output; each chunk fetched once."""
    groups: dict[str, list[tuple[ChunkRequest, Any]]] = {}
    for reqs, out in jobs:
        for req in reqs:
            groups.setdefault(req.key, []).append((req, out))
    codec, backend = ctx.codec, ctx.backend

    def one(key: str) -> None:
        members = groups[key]
        if len(members) == 1:
            req, out = members[0]
            read_chunks(ctx, store, [req], out)
            return
        got = store.get(key, scratch=ctx.scratch)
        if got is None:
            for req, out in members:
                out[req.out_selection] = ctx.fill
            return
        chunk = backend.decode(codec, [DecodeItem(got.data, None, key)], ctx.where)[0]
        for req, out in members:
            out[req.out_selection] = chunk[req.chunk_selection]

    parallel_map(one, list(groups), io_threads(store, ctx.settings))


# ---------------------------------------------------------------------------- shards


@dataclass(frozen=True, slots=True)
class _ShardItem:
    """One item of a sharded read after phase one (built once, never mutated)."""

    request: ChunkRequest
    out: Any
    drop_axes: tuple[int, ...]
    #: Inner chunk coordinates the selection needs, and their C-order indexes.
    blocks: list[tuple[int, ...]]
    flat: list[int]
    #: The shard's index and stored inner chunks; ``None``: the shard is missing.
    found: ShardBytes | None = None
    #: Where the needed inner chunks decode to: the output itself (``in_place``, a whole-shard
    #: read), else a buffer over their bounding box, whose origin in the shard is ``origin``.
    dest: Any = None
    in_place: bool = False
    origin: tuple[int, ...] = ()


#: An inner chunk that is a shard, decoded in part: the item, the inner chunk's coordinates,
#: its stored bytes, and the part of it needed (slices within the inner chunk).
_Part = tuple[_ShardItem, tuple[int, ...], Any, tuple[slice, ...]]


def read_shards(
    ctx: ArrayContext,
    store: ChunkStore,
    items: Sequence[Item],
    coalescing: Coalescing | None = None,
) -> list[bool]:
    """Read ``(request, out, drop_axes)`` items of a sharded array; presence per item.

    Items on the same shard (from several selections of a batch) share one fetch: the union
    of their inner chunks is fetched once, then each item is decoded and scattered into its
    own output.
    """
    sh = ctx.sharding
    assert sh is not None and ctx.shards is not None
    if len(items) == 1:
        one = _one_inner_chunk(ctx, store, *items[0], coalescing)
        if one is not None:
            return [one]
    groups: dict[str, list[int]] = {}
    for i, (req, _out, _drop) in enumerate(items):
        groups.setdefault(req.key, []).append(i)
    results: list[bool] = [False] * len(items)
    pool = BufferPool()
    policy = read_policy(store, ctx.settings, coalescing)
    io = io_threads(store, ctx.settings)
    n = ctx.settings.n_threads
    backend = ctx.backend
    reads = backend.range_reads(store, sh.inner)
    # Inner chunks that are shards themselves are decoded in part where the selection needs
    # part of them (zarr reads nested shards in part too); on the CPU, where their bytes are
    # host memory.
    nested = sh.inner.nested_sharding if backend.name == "cpu" else None
    for wave in waves(list(groups), ctx.per_wave(ctx.codec.nbytes)):

        def fetch(key: str) -> list[tuple[int, _ShardItem]]:
            members = [(i, *items[i]) for i in groups[key]]
            return _fetch_group(ctx, store, key, members, pool, policy, reads)

        fetched = [pair for group in parallel_map(fetch, wave, io) for pair in group]
        tasks: list[tuple[_ShardItem, tuple[int, ...], Any]] = []
        parts: list[_Part] = []
        for _i, r in fetched:
            if r.found is None:
                continue
            grid = _inner_grid(ctx, r)
            if grid is not None and backend.decode_grid(
                sh.inner, grid, r.dest, ctx.fill, ctx.where, n
            ):
                continue
            bounds = None
            if nested is not None and not r.in_place:
                bounds = selection_bounds(r.request.chunk_selection, ctx.codec.shape)
            sources = r.found.sources
            for b, flat in zip(r.blocks, r.flat, strict=True):
                src = sources.get(flat)
                if src is None:
                    r.dest[_inner_region(sh.chunk_shape, r.origin, b)] = ctx.fill
                elif bounds is not None and (part := part_in_block(bounds, b, sh.chunk_shape)):
                    parts.append((r, b, src, part))
                else:
                    tasks.append((r, b, src))
        batching = backend.batching(
            sh.inner, len(tasks), remote=policy.remote, op="decode", threads=n
        )

        def decode(batch: Sequence[tuple[_ShardItem, tuple[int, ...], Any]]) -> None:
            decode_items = [
                DecodeItem(
                    src, r.dest[_inner_region(sh.chunk_shape, r.origin, b)], r.request.key, b
                )
                for r, b, src in batch
            ]
            backend.decode(sh.inner, decode_items, ctx.where)

        run_batches(decode, tasks, batching, n if batching.parallel else io)
        if parts:

            def decode_part(task: _Part) -> None:
                r, b, src, part = task
                region = _inner_region(sh.chunk_shape, r.origin, b)
                target = tuple(
                    slice(g.start + p.start, g.start + p.stop)
                    for g, p in zip(region, part, strict=True)
                )
                r.dest[target] = _inner_shard_part(ctx, r.request.key, b, src, part)

            parallel_map(decode_part, parts, n)

        def scatter_item(pair: tuple[int, _ShardItem]) -> None:
            results[pair[0]] = _scatter_shard(ctx, pair[1])

        parallel_map(scatter_item, fetched, n)
        pool.release()
    return results


def _one_inner_chunk(
    ctx: ArrayContext,
    store: ChunkStore,
    req: ChunkRequest,
    out: Any,
    drop_axes: tuple[int, ...],
    coalescing: Coalescing | None,
) -> bool | None:
    """A box inside one inner chunk of a shard (chunk by chunk reads); ``None``: not one.

    What the general path does for it, without its planning for many items and inner chunks
    (measured: ~40 % of a chunk-by-chunk read of 8 KiB inner chunks, 208 -> 128 us a call):
    the one inner chunk fetched, decoded (into the output itself where the box is the whole
    inner chunk), the box copied.
    """
    sh = ctx.sharding
    assert sh is not None and ctx.shards is not None
    selection = req.chunk_selection
    inner = sh.chunk_shape
    if drop_axes or type(selection) is not tuple or len(selection) != len(inner):
        return None
    block: list[int] = []
    local: list[slice] = []
    flat = 0
    for s, c, per in zip(selection, inner, sh.chunks_per_shard, strict=True):
        if type(s) is not slice or s.step not in (None, 1):
            return None
        start, stop = s.start, s.stop
        if type(start) is not int or type(stop) is not int or not 0 <= start < stop:
            return None
        b = start // c
        if (stop - 1) // c != b:
            return None
        block.append(b)
        local.append(slice(start - b * c, stop - b * c))
        flat = flat * per + b
    try:
        policy = read_policy(store, ctx.settings, coalescing)
        reads = ctx.backend.range_reads(store, sh.inner)
        found = ctx.shards.fetch(store, req.key, [flat], policy, backend_reads=reads)
    except CorruptChunkError as exc:
        raise CorruptChunkError(f"Corrupt {ctx.shard_where(req.key)}: {exc}") from exc
    src = None if found is None else found.sources.get(flat)
    if src is None:
        out[req.out_selection] = ctx.fill
        return found is not None
    sel = req.out_selection
    whole = all(p.start == 0 and p.stop == c for p, c in zip(local, inner, strict=True))
    nested = sh.inner.nested_sharding
    if not whole and nested is not None and ctx.backend.name == "cpu":
        # An inner chunk that is a shard: only its inner chunks the box touches (zarr reads
        # nested shards in part too); on the CPU, where its bytes are host memory.
        out[sel] = _inner_shard_part(ctx, req.key, tuple(block), src, tuple(local))
        return True
    dest = region_view(out, sel, inner) if whole else None
    item = DecodeItem(src, dest, req.key, tuple(block))
    chunk = ctx.backend.decode(sh.inner, [item], ctx.where)[0]
    if dest is None:
        out[sel] = chunk[tuple(local)]
    return True


def _fetch_group(
    ctx: ArrayContext,
    store: ChunkStore,
    key: str,
    members: list[tuple[int, ChunkRequest, Any, tuple[int, ...]]],
    pool: BufferPool,
    policy: ReadPolicy,
    backend_reads: BackendReads | None = None,
) -> list[tuple[int, _ShardItem]]:
    """Phase one for the items of one shard: fetch the union of their inner chunks once.

    ``backend_reads``: the backend's own reads of inner chunks (:meth:`Backend.range_reads`).
    """
    sh = ctx.sharding
    assert sh is not None and ctx.shards is not None
    shard_shape = ctx.codec.shape
    planned: list[tuple[int, ChunkRequest, Any, tuple[int, ...], list[Any], list[int], Any]] = []
    union: set[int] = set()
    cps = sh.chunks_per_shard
    for i, req, out, drop_axes in members:
        per_dim = needed_blocks(req.chunk_selection, sh.chunk_shape, shard_shape)
        blocks = list(iter_blocks(per_dim))
        flat = flat_indexes(per_dim, cps)
        planned.append((i, req, out, drop_axes, blocks, flat, per_dim))
        union.update(flat)
    found = None
    if union:
        try:
            found = ctx.shards.fetch(store, key, sorted(union), policy, pool, backend_reads)
        except CorruptChunkError as exc:
            raise CorruptChunkError(f"Corrupt {ctx.shard_where(key)}: {exc}") from exc
    reads: list[tuple[int, _ShardItem]] = []
    for i, req, out, drop_axes, blocks, flat, per_dim in planned:
        item = _ShardItem(req, out, drop_axes, blocks, flat)
        if found is None or not blocks:
            reads.append((i, item))
            continue
        reads.append((i, _with_dest(ctx, item, found, per_dim)))
    return reads


def _with_dest(
    ctx: ArrayContext, r: _ShardItem, found: ShardBytes, per_dim: list[npt.NDArray[np.intp]]
) -> _ShardItem:
    """``r`` with the fetched shard and a destination for its inner chunks.

    The output itself for a whole-shard box read, else a buffer over the bounding box of the
    needed inner chunks.
    """
    sh = ctx.sharding
    assert sh is not None
    shape = ctx.codec.shape
    view = whole_view(r.out, r.request, shape, r.drop_axes)
    if view is not None:
        return replace(r, found=found, dest=view, in_place=True, origin=(0,) * len(shape))
    lo = tuple(int(d[0]) * c for d, c in zip(per_dim, sh.chunk_shape, strict=True))
    hi = tuple((int(d[-1]) + 1) * c for d, c in zip(per_dim, sh.chunk_shape, strict=True))
    box = ctx.backend.empty(tuple(b - a for a, b in zip(lo, hi, strict=True)), ctx.codec.dtype)
    return replace(r, found=found, dest=box, origin=lo)


def _inner_grid(ctx: ArrayContext, r: _ShardItem) -> InnerGrid | None:
    """``r``'s inner chunks as one :class:`InnerGrid`, or ``None``.

    Only when they fill its destination box and the whole shard was read in one piece.
    """
    sh = ctx.sharding
    assert sh is not None and r.found is not None
    whole = r.found.whole
    if whole is None or not r.flat:
        return None
    box = tuple(s // c for s, c in zip(r.dest.shape, sh.chunk_shape, strict=True))
    if len(r.flat) != math.prod(box):
        return None
    rows = r.found.table[np.asarray(r.flat, np.intp)]
    starts = rows[:, 0].astype(np.int64)  # EMPTY (2**64 - 1) becomes -1
    lengths = rows[:, 1].astype(np.int64)
    origin = tuple(o // c for o, c in zip(r.origin, sh.chunk_shape, strict=True))
    return InnerGrid(whole, starts, lengths, box, origin, r.request.key)


def _inner_shard_part(
    ctx: ArrayContext, key: str, block: tuple[int, ...], src: Any, part: tuple[slice, ...]
) -> npt.NDArray[Any]:
    """The part ``part`` of inner chunk ``block`` of shard ``key``, itself a shard.

    Only its inner chunks the part touches are decoded (``decode_box``); errors are named by
    the shard and the inner chunk.
    """
    sh = ctx.sharding
    assert sh is not None
    nested = sh.inner.nested_sharding
    assert nested is not None
    try:
        return nested.decode_box(sh.inner.decode_bytes(src), part, sh.inner.dtype)
    except Exception as exc:
        reraise_decode(ctx.where(key, block), exc)
        raise  # reraise_decode always raises


def _inner_region(
    chunk_shape: tuple[int, ...], origin: tuple[int, ...], block: tuple[int, ...]
) -> tuple[slice, ...]:
    """Where inner chunk ``block`` lies in a destination whose origin is ``origin``."""
    return tuple(
        slice(b * c - o, (b + 1) * c - o)
        for b, c, o in zip(block, chunk_shape, origin, strict=True)
    )


def _scatter_shard(ctx: ArrayContext, r: _ShardItem) -> bool:
    req = r.request
    if r.found is None:
        r.out[req.out_selection] = ctx.fill
        return False
    if r.in_place:
        return True
    selected = r.dest[rebase(req.chunk_selection, r.origin, r.dest.shape)]
    if r.drop_axes:
        selected = selected.squeeze(axis=r.drop_axes)
    r.out[req.out_selection] = selected
    return True
