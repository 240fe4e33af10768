"""GPU read/write planning that needs no GPU.

Chain classification, waves, packed batches, scatter descriptors, and NumPy references of the
GPU kernels.

The GPU backend consumes the same :class:`~cuzarr.engine.requests.ChunkRequest` lists the CPU engine
does (one planner); this module turns them into what a batched device decode needs. Every
kernel in :mod:`cuzarr.gpu.kernels` computes, per thread, exactly the index formula of its
reference here (``*_indices`` functions), so the CPU tests that check these references against
numcodecs also check the kernels' arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf
from cuzarr.codecs.bytes_ import BytesCodec
from cuzarr.codecs.chain import ChunkCodec, V2ChunkCodec
from cuzarr.codecs.crc32c_ import Crc32cCodec
from cuzarr.codecs.numcodecs_ import NumcodecsBytesCodec
from cuzarr.codecs.transpose import TransposeCodec
from cuzarr.engine.requests import ChunkRequest

__all__ = [
    "MAX_SCATTER_DIMS",
    "GpuChain",
    "bit_shuffle",
    "bit_unshuffle",
    "bit_unshuffle_indices",
    "byte_shuffle",
    "byte_unshuffle",
    "byte_unshuffle_indices",
    "byteswap",
    "byteswap_indices",
    "classify_chain",
    "make_waves",
    "layout",
    "pack_window",
    "scatter_descriptor",
    "scatter_reference",
]

#: Compressors nvCOMP decodes in CPU-compatible bitstreams (after :mod:`cuzarr.gpu.streams`).
GPU_DECODE = frozenset({"zstd", "gzip", "zlib", "lz4", "blosc"})
#: Compressors the GPU writes in bitstreams numcodecs reads (blosc is decode-only).
GPU_ENCODE = frozenset({"zstd", "gzip", "zlib", "lz4"})


# ---------------------------------------------------------------------- chain classification


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuChain:
    """What the GPU does to decode one chunk of a (non-sharded or inner) codec chain.

    Decode order: check ``crc32c`` on the stored bytes (host), strip and decode ``compressor``
    (nvCOMP), swap bytes of ``swap_itemsize``-byte elements, then view the bytes as
    ``stored_shape`` and transpose by ``axes`` to the chunk's shape.

    Attributes
    ----------
    crc32c : int
        Number of outer crc32c checksums to verify and strip.
    compressor : str or None
        ``zstd``, ``gzip``, ``zlib``, ``lz4`` or ``blosc``; ``None`` for uncompressed chunks.
    compressor_config : dict
        The numcodecs configuration of the compressor (level, blosc settings...).
    swap_itemsize : int
        Element size whose bytes are reversed after decompression; 0 for none.
    stored_shape : tuple of int
        Shape of the decompressed elements in C order.
    axes : tuple of int or None
        ``decoded = stored.transpose(axes)``; ``None`` when stored order is the chunk's order.
    cpu_reason : str or None
        Why this chain decodes on the CPU (then uploads); ``None`` when the GPU handles it.
    """

    crc32c: int = 0
    compressor: str | None = None
    compressor_config: dict[str, Any] | None = None
    swap_itemsize: int = 0
    stored_shape: tuple[int, ...] = ()
    axes: tuple[int, ...] | None = None
    cpu_reason: str | None = None

    @property
    def gpu_decode(self) -> bool:
        """Whether the GPU decodes this chain."""
        return self.cpu_reason is None

    @property
    def gpu_encode(self) -> bool:
        """Whether the GPU encodes this chain in a CPU-readable bitstream."""
        return self.cpu_reason is None and (
            self.compressor is None or self.compressor in GPU_ENCODE
        )


def _compose(first: tuple[int, ...] | None, then: tuple[int, ...]) -> tuple[int, ...]:
    """``x.transpose(first).transpose(then)`` as one ``x.transpose(result)``."""
    if first is None:
        return then
    return tuple(first[o] for o in then)


def classify_chain(codec: ChunkCodec | V2ChunkCodec) -> GpuChain:
    """Classify a compiled codec chain (the chunk chain, or a shard's inner chain).

    Parameters
    ----------
    codec : ChunkCodec or V2ChunkCodec
        As built by :func:`cuzarr.codecs.build.build_chunk_codec`.

    Returns
    -------
    GpuChain
        With ``cpu_reason`` set when some codec has no GPU path.
    """
    dtype = codec.dtype
    if dtype.kind in "SU" or dtype.kind not in "biufcmM":
        return GpuChain(cpu_reason=f"data type {dtype} is decoded on the CPU")
    if dtype.byteorder == ">":
        return GpuChain(cpu_reason=f"CuPy has no big-endian arrays (data type {dtype})")
    if isinstance(codec, V2ChunkCodec):
        if codec.filters:
            names = ", ".join(f.name for f in codec.filters)
            return GpuChain(cpu_reason=f"v2 filters ({names}) have no GPU path")
        comp = None if codec.compressor is None else codec.compressor.stream_format
        if comp is not None and comp not in GPU_DECODE:
            return GpuChain(cpu_reason=f"compressor '{comp}' has no GPU path")
        shape = codec.shape
        axes: tuple[int, ...] | None = None
        if codec.order == "F" and len(shape) > 1:
            shape = shape[::-1]
            axes = tuple(range(len(shape) - 1, -1, -1))
        cfg = None if codec.compressor is None else _config(codec.compressor)
        # v2 dtypes are returned in their stored byte order: no swap on decode.
        return GpuChain(compressor=comp, compressor_config=cfg, stored_shape=shape, axes=axes)
    if codec.sharding is not None:
        # The engine classifies a sharded array by its inner chain; a chain that shards is
        # one whose chunks are shards themselves (nested sharding), split on the CPU.
        return GpuChain(cpu_reason="chunks that are shards (nested sharding) are split on the CPU")
    encode_axes: tuple[int, ...] | None = None
    for a2a in codec.array_codecs:
        if not isinstance(a2a, TransposeCodec):
            return GpuChain(cpu_reason=f"codec '{a2a.name}' has no GPU path")
        encode_axes = _compose(encode_axes, a2a.order)
    shape = codec.shape
    axes = None
    if encode_axes is not None:
        shape = tuple(codec.shape[i] for i in encode_axes)
        axes = tuple(int(i) for i in np.argsort(encode_axes))
        if axes == tuple(range(len(axes))):
            axes = None
    ab = codec.array_bytes
    if not isinstance(ab, BytesCodec):
        return GpuChain(cpu_reason=f"codec '{ab.name}' has no GPU path")
    swap = 0
    if dtype.itemsize > 1 and not ab.is_native(dtype):
        # A complex number is two floats, each swapped on its own.
        swap = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    crc = 0
    comp = None
    cfg = None
    for i, bb in enumerate(codec.bytes_codecs):
        if isinstance(bb, Crc32cCodec):
            crc += 1
            continue
        if crc:
            return GpuChain(cpu_reason="a crc32c codec inside a compressor has no GPU path")
        if comp is not None or not isinstance(bb, NumcodecsBytesCodec):
            return GpuChain(cpu_reason=f"codec '{bb.name}' (bytes_codecs[{i}]) has no GPU path")
        comp = bb.stream_format
        if comp not in GPU_DECODE:
            return GpuChain(cpu_reason=f"compressor '{comp}' has no GPU path")
        cfg = _config(bb)
    return GpuChain(
        crc32c=crc,
        compressor=comp,
        compressor_config=cfg,
        swap_itemsize=swap,
        stored_shape=shape,
        axes=axes,
    )


def _config(codec: NumcodecsBytesCodec) -> dict[str, Any]:
    try:
        return dict(codec.codec.get_config())
    except Exception:  # pragma: no cover - numcodecs codecs all have get_config
        return {}


# ---------------------------------------------------------------------- waves and batches


def make_waves(sizes: Sequence[int], *, max_bytes: int, max_count: int) -> list[range]:
    """Split items into consecutive waves of at most ``max_bytes`` and ``max_count`` items.

    An item larger than ``max_bytes`` gets a wave of its own; no wave is empty.

    Parameters
    ----------
    sizes : sequence of int
        Bytes of each item (decoded size, or fetched plus decoded: the caller's budget).
    max_bytes : int
        Budget of one wave.
    max_count : int
        Most items in one wave (nvCOMP batch size).

    Returns
    -------
    list of range
        Item indices of each wave, in order; together they cover every item once.
    """
    if max_bytes < 1 or max_count < 1:
        raise ValueError(f"max_bytes and max_count must be >= 1, got {max_bytes}, {max_count}")
    waves: list[range] = []
    start = 0
    total = 0
    for i, size in enumerate(sizes):
        if size < 0:
            raise ValueError(f"sizes[{i}] is negative: {size}")
        n = i - start
        if n and (n >= max_count or total + size > max_bytes):
            waves.append(range(start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        waves.append(range(start, len(sizes)))
    return waves


def wave_requests(
    requests: Sequence[ChunkRequest], chunk_nbytes: int, *, max_bytes: int, max_count: int
) -> list[Sequence[ChunkRequest]]:
    """The engine's chunk requests grouped into waves (each request decodes one chunk)."""
    waves = make_waves([chunk_nbytes] * len(requests), max_bytes=max_bytes, max_count=max_count)
    return [requests[w.start : w.stop] for w in waves]


def layout(
    sizes: Sequence[int] | npt.NDArray[np.int64],
    *,
    align: int = 8,
    leads: Sequence[int] | None = None,
) -> tuple[npt.NDArray[np.int64], int]:
    """Where packed parts of ``sizes`` bytes go in one buffer: each part's offset, and the total.

    Each part gets a slot of a multiple of ``align`` bytes; it starts at its slot's start, or
    with ``leads``, far enough in that its byte ``leads[i]`` is aligned.
    """
    n = len(sizes)
    sizes_ = np.asarray(sizes, dtype=np.int64).reshape(n)
    pads = np.zeros(n, np.int64)
    if leads is not None:
        pads = (-np.asarray(leads, np.int64)) % align
    padded = (pads + sizes_ + (align - 1)) // align * align
    offsets = np.zeros(n, np.int64)
    if n > 1:
        np.cumsum(padded[:-1], out=offsets[1:])
    offsets += pads
    return offsets, int(padded.sum()) if n else 0


def pack_window(
    parts: Sequence[Buf],
    offsets: Sequence[int],
    start: int,
    out: npt.NDArray[np.uint8],
) -> None:
    """Copy into ``out`` the bytes of the packed layout from ``start`` to ``start + out.size``.

    ``offsets``: each part's offset in the layout (:func:`layout`), in increasing order. A
    part may lie partly in the window; the pads between parts are left as they are. Windows
    that cover the layout give every part at its offset.
    """
    stop = start + out.size
    for p, off in zip(parts, offsets, strict=True):
        view = np.frombuffer(p, np.uint8)
        end = off + view.size
        if end <= start:
            continue
        if off >= stop:
            break
        lo, hi = max(off, start), min(end, stop)
        out[lo - start : hi - start] = view[lo - off : hi - off]


# ---------------------------------------------------------------------- scatter


#: The scatter kernel copies boxes of at most this many dimensions.
MAX_SCATTER_DIMS = 8

SCATTER_DTYPE = np.dtype(
    [
        ("src_base", "<i8"),  # first element of the box in the source (elements)
        ("dst_base", "<i8"),  # first element of the box in the destination (elements)
        ("n", "<i8"),  # elements in the box
        ("shape", "<i8", (MAX_SCATTER_DIMS,)),  # box shape, padded with 1 at the front
        ("src_strides", "<i8", (MAX_SCATTER_DIMS,)),  # element strides (may be negative)
        ("dst_strides", "<i8", (MAX_SCATTER_DIMS,)),
    ]
)


def _slice_box(sel: Any, shape: tuple[int, ...]) -> list[tuple[int, int, int]] | None:
    """``(start, step, count)`` per axis for a tuple of slices, or ``None``."""
    if isinstance(sel, slice):
        sel = (sel,)
    if not isinstance(sel, tuple) or len(sel) != len(shape):
        return None
    out = []
    for s, n in zip(sel, shape, strict=True):
        if not isinstance(s, slice):
            return None
        start, stop, step = s.indices(n)
        out.append((start, step, len(range(start, stop, step))))
    return out


def scatter_descriptor(
    req: ChunkRequest,
    chunk_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    out_strides: tuple[int, ...],
    src_base: int = 0,
) -> npt.NDArray[np.void] | None:
    """One row of the scatter kernel's table: copy ``chunk[chunk_sel]`` to ``out[out_sel]``.

    Parameters
    ----------
    req : ChunkRequest
        The engine's request (slice selections only; others return ``None``).
    chunk_shape : tuple of int
        Shape of the decoded chunk, C-contiguous at element ``src_base`` of the source.
    out_shape, out_strides : tuple of int
        Shape and element strides of the destination array.
    src_base : int
        Element offset of the decoded chunk in the (batched) source buffer.

    Returns
    -------
    numpy.ndarray of SCATTER_DTYPE (one row) or None
        ``None`` when the selections are not boxes of equal shape, or have too many axes.
    """
    nd = len(chunk_shape)
    if nd > MAX_SCATTER_DIMS or len(out_shape) != nd:
        return None
    src = _slice_box(req.chunk_selection, chunk_shape)
    dst = _slice_box(req.out_selection, out_shape)
    if src is None or dst is None:
        return None
    if [c for _, _, c in src] != [c for _, _, c in dst]:
        return None
    c_strides = [math.prod(chunk_shape[i + 1 :]) for i in range(nd)]
    row = np.zeros(1, SCATTER_DTYPE)
    pad = MAX_SCATTER_DIMS - nd
    row["shape"][0, :] = 1
    row["src_base"] = src_base + sum(s * st for (s, _, _), st in zip(src, c_strides, strict=True))
    row["dst_base"] = sum(s * st for (s, _, _), st in zip(dst, out_strides, strict=True))
    row["n"] = math.prod(c for _, _, c in src)
    row["shape"][0, pad:] = [c for _, _, c in src]
    row["src_strides"][0, pad:] = [
        step * st for (_, step, _), st in zip(src, c_strides, strict=True)
    ]
    row["dst_strides"][0, pad:] = [
        step * st for (_, step, _), st in zip(dst, out_strides, strict=True)
    ]
    return row


def scatter_indices(
    row: npt.NDArray[np.void],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Source and destination element index of every element of one scatter row.

    The same arithmetic as the kernel: element ``i`` of the box is unravelled over ``shape``
    (last axis fastest), then dotted with each side's strides.
    """
    n = int(row["n"])
    i = np.arange(n, dtype=np.int64)
    shape = row["shape"].reshape(-1)
    src = np.full(n, int(row["src_base"]), np.int64)
    dst = np.full(n, int(row["dst_base"]), np.int64)
    rem = i
    for d in range(MAX_SCATTER_DIMS - 1, -1, -1):
        coord = rem % shape[d]
        rem = rem // shape[d]
        src += coord * int(row["src_strides"].reshape(-1)[d])
        dst += coord * int(row["dst_strides"].reshape(-1)[d])
    return src, dst


def scatter_reference(
    src_flat: npt.NDArray[Any], dst_flat: npt.NDArray[Any], table: npt.NDArray[np.void]
) -> None:
    """Apply a scatter table on the CPU (what the scatter kernel does on the GPU)."""
    for row in table:
        s, d = scatter_indices(row)
        dst_flat[d] = src_flat[s]


# ---------------------------------------------------------------------- shuffle references


def byte_unshuffle_indices(nbytes: int, typesize: int) -> npt.NDArray[np.int64]:
    """Source byte of each output byte when undoing Blosc's byte shuffle of one block.

    Output byte ``o < n*typesize`` (``n = nbytes // typesize`` whole elements) comes from
    ``(o % typesize) * n + o // typesize``; trailing bytes are copied in place.
    """
    o = np.arange(nbytes, dtype=np.int64)
    n = nbytes // typesize
    main = o < n * typesize
    return np.where(main, (o % typesize) * n + o // typesize, o)


def byte_unshuffle(block: npt.NDArray[np.uint8], typesize: int) -> npt.NDArray[np.uint8]:
    """Undo Blosc's byte shuffle of one block."""
    if typesize <= 1:
        return block.copy()
    return block[byte_unshuffle_indices(block.size, typesize)]


def byte_shuffle(block: npt.NDArray[np.uint8], typesize: int) -> npt.NDArray[np.uint8]:
    """Blosc's byte shuffle of one block (the inverse of :func:`byte_unshuffle`)."""
    out = np.empty_like(block)
    out[byte_unshuffle_indices(block.size, typesize)] = block
    return out


def _bit_n8(nbytes: int, typesize: int) -> int:
    """Elements bit-shuffled in a block: all, when their count is a multiple of 8, else none.

    c-blosc 1.x (frame format version 2) shuffles a block only when it holds a multiple of 8
    elements and stores other blocks as they are; Blosc 2 formats shuffle the largest
    multiple of 8 and copy the rest, but those are not Blosc 1 frames.
    """
    n = nbytes // typesize
    return n if n % 8 == 0 else 0


def bit_unshuffle_indices(nbytes: int, typesize: int) -> tuple[npt.NDArray[np.int64], int]:
    """Per output byte, the 8 source bytes holding its bits, and the bit position in them.

    Bit shuffle transposes the ``n8 x 8*typesize`` bit matrix of the block's ``n8`` elements
    (``n8`` = all whole elements when their count is a multiple of 8, else 0): row ``r``
    (bit ``r % 8`` of byte ``r // 8`` of every element) is stored as ``n8 / 8`` bytes,
    element ``e`` in bit ``e % 8`` of byte ``e // 8``. Output byte ``o = e*typesize + b``
    gathers bit ``k`` from source byte ``(8*b + k) * (n8/8) + e // 8``. Bytes past
    ``n8*typesize`` are copied in place.

    Returns
    -------
    (numpy.ndarray of shape (nbytes, 8), int)
        Source byte indices (``-1`` for copied bytes) and ``n8``.
    """
    n8 = _bit_n8(nbytes, typesize)
    o = np.arange(n8 * typesize, dtype=np.int64)
    e = o // typesize
    b = o % typesize
    k = np.arange(8, dtype=np.int64)
    idx = (8 * b[:, None] + k[None, :]) * (n8 // 8) + (e // 8)[:, None]
    full = np.full((nbytes, 8), -1, np.int64)
    full[: n8 * typesize] = idx
    return full, n8


def bit_unshuffle(block: npt.NDArray[np.uint8], typesize: int) -> npt.NDArray[np.uint8]:
    """Undo Blosc's bit shuffle of one block (c-blosc 1.x semantics, see ``_bit_n8``)."""
    nbytes = block.size
    idx, n8 = bit_unshuffle_indices(nbytes, typesize)
    m = n8 * typesize
    out = block.copy()
    if m == 0:
        return out
    e = np.arange(m, dtype=np.int64) // typesize
    bits = (block[idx[:m]] >> (e % 8)[:, None].astype(np.uint8)) & 1
    out[:m] = (bits << np.arange(8, dtype=np.uint8)[None, :]).sum(axis=1).astype(np.uint8)
    return out


def bit_shuffle(block: npt.NDArray[np.uint8], typesize: int) -> npt.NDArray[np.uint8]:
    """Blosc's bit shuffle of one block (the inverse of :func:`bit_unshuffle`)."""
    nbytes = block.size
    n8 = _bit_n8(nbytes, typesize)
    m = n8 * typesize
    out = block.copy()
    if m == 0:
        return out
    bits = np.unpackbits(block[:m].reshape(n8, typesize), axis=1, bitorder="little")
    out[:m] = np.packbits(bits.T, axis=1, bitorder="little").reshape(-1)
    return out


def byteswap_indices(nbytes: int, itemsize: int) -> npt.NDArray[np.int64]:
    """Source byte of each output byte when reversing the bytes of each element."""
    o = np.arange(nbytes, dtype=np.int64)
    return (o // itemsize) * itemsize + (itemsize - 1 - o % itemsize)


def byteswap(data: npt.NDArray[np.uint8], itemsize: int) -> npt.NDArray[np.uint8]:
    """Reverse the bytes of each ``itemsize``-byte element (the byteswap kernel's reference)."""
    return data[byteswap_indices(data.size, itemsize)]
