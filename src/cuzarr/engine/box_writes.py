"""Whole chunks encoded and stored straight from the written value, in one call into C.

A chunk a write covers whole is, on the general path, copied out of the value into a new
array, encoded by numcodecs into new bytes, and handed to the store. For the chains whose
encoding is a copy into C order (``raw``) or that plus one c-blosc frame (``blosc_params``) or
one zstd frame (``zstd_frames``), and stores that write files from C
(:attr:`~cuzarr.stores.base.StoreCaps.box_puts`), a batch of such chunks is instead one
:meth:`~cuzarr.stores.base.ChunkStore.put_boxes` call: per chunk a
copy into a scratch buffer the thread reuses (none where the box is contiguous), c-blosc or
libzstd into another, and the temporary file and move of the store's own ``put``, the GIL
released for the batch. The bytes stored are the general path's (the same copy, the same
c-blosc call with numcodecs' arguments, the same libzstd and parameters as the general path's
``Settings.zstd_encoder``); chunks equal to the fill value are deleted by zarr's rule first, and a
chunk the C call did not write is written the general way after it, which names what failed.

Chunks a write covers but that extend past the array's edge (partial edge chunks) are the
general path's merged chunks: the fill value with the value written in (:func:`put_padded`
builds them for a batch in one buffer), then encoded and stored by the same call into C.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cuzarr._native import MAX_HELPERS, Compressor
from cuzarr.backends.base import Batching
from cuzarr.backends.fill_check import first_differs
from cuzarr.codecs import blosc_batch, zstd_batch
from cuzarr.codecs.chain import ChunkCodec
from cuzarr.codecs.numcodecs_ import NumcodecsBytesCodec
from cuzarr.engine.context import ArrayContext
from cuzarr.engine.requests import ChunkRequest
from cuzarr.stores.base import BoxBatch, ChunkStore

__all__ = ["BOX_BATCH", "BoxPlan", "box_batching", "box_plan", "put_padded", "put_whole"]

#: Most chunks one task encodes and stores in one call. Measured in one process, 2 threads,
#: tmpfs: one call per chunk costs ~80 us of Python per 512 KiB chunk; writes of 512 chunks
#: were 3-6 % faster with 16 per call than with 8 ((c), (d), (h)), 8 % slower with 4.
BOX_BATCH = 16


@dataclass(frozen=True, slots=True)
class BoxPlan:
    """How this write's whole chunks are encoded in C.

    Attributes
    ----------
    compressor : Compressor or None
        c-blosc's or libzstd's encoder with the chain's arguments; ``None``: the C-order bytes
        are stored.
    """

    compressor: Compressor | None


def box_plan(ctx: ArrayContext, store: ChunkStore, value: Any) -> BoxPlan | None:
    """The plan for the whole chunks of a write of ``value``; ``None``: the general path.

    Taken on the CPU backend for a NumPy value of the chunk's dtype, a chain that stores the
    chunk's memory as it is or as one c-blosc or zstd frame of it (with the batch helper and
    the library's symbols), and a store that writes files from C and has no conditional puts.
    """
    caps = store.caps
    if not caps.box_puts or caps.conditional_put or caps.remote or ctx.backend.name != "cpu":
        return None
    codec = ctx.codec
    if not isinstance(value, np.ndarray) or value.ndim == 0 or value.dtype.hasobject:
        return None
    if value.dtype != codec.dtype or value.ndim != len(codec.shape):
        return None
    if codec.raw:
        return BoxPlan(None)
    found: Compressor | None = None
    if codec.zstd_frames:
        zstd = codec.bytes_codecs[0] if isinstance(codec, ChunkCodec) else codec.compressor
        assert isinstance(zstd, NumcodecsBytesCodec)  # what zstd_frames says
        found = zstd_batch.compressor(zstd.codec, ctx.settings.zstd_encoder)
    elif isinstance(codec, ChunkCodec) and (params := codec.blosc_params) is not None:
        found = blosc_batch.compressor(params)
    return None if found is None else BoxPlan(found)


def box_batching(n: int, threads: int) -> Batching:
    """Tasks for a write of ``n`` whole chunks through :func:`put_whole`: several per call.

    Up to :data:`BOX_BATCH` chunks are one task, on the calling thread, whose call into C
    takes the engine's other threads as the batch helper's own (``helpers`` of
    :func:`put_whole`: they wake without the GIL). Measured tree against tree, one process,
    2 threads, against one task per thread: 8 chunks of 512 KiB 1.18x (zstd), 1.08x (blosc
    lz4), 1.04x (raw), 1.04-1.06x (blosc zstd); 4 of 1 MiB 1.07x (and one task per thread
    was 1.12-1.35x faster than a task per chunk). More chunks: one task per thread, at most
    :data:`BOX_BATCH` chunks each.
    """
    if n <= BOX_BATCH:
        return Batching(size=max(n, 1), parallel=True)
    return Batching(size=max(1, min(BOX_BATCH, -(-n // max(1, threads)))), parallel=True)


def _start(req: ChunkRequest, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Where the chunk of ``req`` starts in the value: its ``out_selection`` as unit slices."""
    sel = req.out_selection
    if not isinstance(sel, tuple) or len(sel) != len(shape):
        return None
    out = []
    for s, n in zip(sel, shape, strict=True):
        if not isinstance(s, slice) or s.step not in (None, 1):
            return None
        first = s.start
        # What ``s.indices(n)[0]`` gives for a start already in range (the indexers' slices).
        out.append(first if type(first) is int and 0 <= first <= n else s.indices(n)[0])
    return tuple(out)


def put_whole(
    ctx: ArrayContext,
    store: ChunkStore,
    plan: BoxPlan,
    whole: Sequence[ChunkRequest],
    value: Any,
    write_empty_chunks: bool,
    helpers: int = 0,
) -> list[ChunkRequest]:
    """Store the chunks ``whole`` (each covered whole by ``value``) under the caller's locks.

    Chunks equal to the fill value are deleted (zarr's rule, unless ``write_empty_chunks``);
    the others are encoded and written by one :meth:`ChunkStore.put_boxes` call, which may
    use ``helpers`` threads besides the caller's (:attr:`BoxBatch.helpers`). Returns the
    requests not handled here, for the caller to write the general way.
    """
    backend, fill = ctx.backend, ctx.fill
    boxes: list[ChunkRequest] = []
    starts: list[tuple[int, ...]] = []
    left: list[ChunkRequest] = []
    shape = value.shape
    for r in whole:
        start = _start(r, shape)
        if start is None:
            left.append(r)
        elif (
            # The backend's cheap exit, from the value's element at the chunk's start (no view).
            not write_empty_chunks
            and not first_differs(value[start], fill)
            and backend.all_equal(value[r.out_selection], fill)
        ):
            store.delete(r.key)
        else:
            boxes.append(r)
            starts.append(start)
    return left + _put_boxes(store, plan, value, boxes, starts, ctx.codec.shape, helpers)


def put_padded(
    ctx: ArrayContext,
    store: ChunkStore,
    plan: BoxPlan,
    reqs: Sequence[ChunkRequest],
    value: Any,
    write_empty_chunks: bool,
    helpers: int = 0,
) -> list[ChunkRequest]:
    """Store chunks the write covers whose part inside the array is smaller than the chunk.

    Each is the general path's merge of a chunk not read first (``write.merge``): the fill
    value with the value's part written in, here built in one buffer for the batch (chunk
    ``k`` along its first axis at ``k`` times the chunk's extent), then deleted where it
    equals the fill value (zarr's rule, unless ``write_empty_chunks``) or encoded and written
    by one :meth:`ChunkStore.put_boxes` call, as :func:`put_whole` writes whole chunks. Each
    request must be ``complete`` with no dropped axes (``value`` has the chunk's dimensions).
    Returns the requests not handled here, for the caller to write the general way.
    """
    if not reqs:
        return []
    codec, backend, fill = ctx.codec, ctx.backend, ctx.fill
    shape = codec.shape
    first = shape[0]
    stack = backend.full((len(reqs) * first, *shape[1:]), fill, codec.dtype)
    boxes: list[ChunkRequest] = []
    starts: list[tuple[int, ...]] = []
    rest = (0,) * (len(shape) - 1)
    for k, r in enumerate(reqs):
        chunk = stack[k * first : (k + 1) * first]
        chunk[r.chunk_selection] = value[r.out_selection]
        if not write_empty_chunks and backend.all_equal(chunk, fill):
            store.delete(r.key)
        else:
            boxes.append(r)
            starts.append((k * first, *rest))
    return _put_boxes(store, plan, stack, boxes, starts, shape, helpers)


def _put_boxes(
    store: ChunkStore,
    plan: BoxPlan,
    array: Any,
    boxes: Sequence[ChunkRequest],
    starts: Sequence[tuple[int, ...]],
    shape: tuple[int, ...],
    helpers: int,
) -> list[ChunkRequest]:
    """Encode and write each of ``boxes`` (its chunk at ``starts`` of ``array``) in one call.

    Returns the requests the store did not write.
    """
    if not boxes:
        return []
    batch = BoxBatch(array, starts, shape, plan.compressor, min(helpers, MAX_HELPERS))
    return [boxes[i] for i in store.put_boxes([r.key for r in boxes], batch)]
