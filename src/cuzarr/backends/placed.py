"""Reads a backend places itself: the boxes they copy, and one Blosc chunk on several threads.

:func:`box_row` turns a request's pair of selections into the box the batch helper's reads
copy (``zstd_batch.read_boxes``, ``blosc_batch.read_split``). :func:`read_blosc_one` reads one
large Blosc chunk of a local file with the helper's threads lent to it: a read of one chunk
(chunk by chunk through an array) otherwise decodes and copies it on one thread while the
call's others are idle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr.codecs import blosc_batch
from cuzarr.codecs.chain import ChunkCodec
from cuzarr.codecs.numcodecs_ import NumcodecsBytesCodec
from cuzarr.stores.base import ChunkStore

__all__ = ["BLOSC_SPLIT_MIN", "box_row", "read_blosc_one"]

#: A Blosc chunk read alone is decoded and copied by several threads from this many decoded
#: bytes on (c-blosc's blocks, 128-256 KiB here, are the unit a thread decodes; a helper takes
#: ~25 us to wake), where its compressor is not a light one (lz4, blosclz: decoding a 64^3
#: uint16 chunk of blosc lz4 takes 87 us of the read's ~300, the copy into a large output
#: most of the rest, and that copy did not get faster on two threads: 300 -> 276 us a chunk
#: read alone, level through the API. Blosc zstd, 4 blocks: 683 -> 452-472 us a chunk,
#: bench/results/probe-512-session48.md).
BLOSC_SPLIT_MIN = 256 * 1024


def box_row(chunk_sel: Any, out_sel: Any, ndim: int) -> list[int] | None:
    """The box two selections of slices describe: chunk starts, out starts, extents, steps.

    ``None`` unless both are ``ndim`` slices with explicit bounds, of a positive step in the
    chunk and step 1 in the output, taking as many elements on each side (bounds against the
    chunk and the output are checked where the box is used). Runs once per chunk of a batched
    read (4,096 times a read of (e)), so written for CPython: four lists appended to, no
    indexing arithmetic (~1.0 us a 3-D box against ~1.6 us indexed, 1.3 ms of a 40 ms read).
    """
    if type(chunk_sel) is not tuple or type(out_sel) is not tuple:
        return None
    if len(chunk_sel) != ndim or len(out_sel) != ndim:
        return None
    starts: list[int] = []
    outs: list[int] = []
    extents: list[int] = []
    steps: list[int] = []
    for c, o in zip(chunk_sel, out_sel, strict=True):
        if type(c) is not slice or type(o) is not slice:
            return None
        c0, c1, step, o0, o1 = c.start, c.stop, c.step, o.start, o.stop
        if step is None:
            step = 1
        elif type(step) is not int or step < 1:
            return None
        if type(c0) is not int or type(c1) is not int or type(o0) is not int or type(o1) is not int:
            return None
        if o.step is not None and o.step != 1:
            return None
        taken = c1 - c0 if step == 1 else -(-(c1 - c0) // step)
        if (taken if taken > 0 else 0) != o1 - o0:
            return None
        starts.append(c0)
        outs.append(o0)
        extents.append(o1 - o0)
        steps.append(step)
    return starts + outs + extents + steps


def read_blosc_one(
    scratch: Callable[[int], npt.NDArray[np.uint8]],
    store: ChunkStore,
    codec: ChunkCodec,
    key: str,
    selection: tuple[Any, Any],
    out: Any,
    *,
    streaming: bool,
    helpers: int,
) -> int | None:
    """Read the Blosc chunk ``key`` of a local folder into ``out`` on ``1 + helpers`` threads.

    Taken for chains whose stored bytes are one Blosc frame of the chunk
    (``codec.blosc_params``) by a compressor that is not light (``NumcodecsBytesCodec.light``)
    of :data:`BLOSC_SPLIT_MIN` bytes or more, a NumPy output of the chain's data type and a
    selection that is a box (:func:`box_row`);
    ``blosc_batch.read_split`` does the rest. ``scratch(n)``: this thread's buffer of ``n``
    bytes. Returns 1 placed, 0 missing, -1 left to the general read (which names what is
    wrong), ``None`` where not taken.
    """
    if (
        codec.nbytes < BLOSC_SPLIT_MIN
        or not codec.shape
        or not store.caps.device_reads
        or type(out) is not np.ndarray
        or out.dtype != codec.dtype
        or not out.flags.writeable
        or codec.blosc_params is None
    ):
        return None
    compressor = codec.bytes_codecs[0]
    if not isinstance(compressor, NumcodecsBytesCodec) or compressor.light:
        return None
    row = box_row(selection[0], selection[1], len(codec.shape))
    if row is None:
        return None
    cap = codec.nbytes + blosc_batch.BLOSC_OVERHEAD + 1
    return blosc_batch.read_split(
        store.file_paths([key])[0], cap, codec.shape, codec.dtype.itemsize, row, out,
        scratch(cap + codec.nbytes), streaming=streaming, helpers=helpers,
    )
