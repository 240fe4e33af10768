"""Zstd chunks decoded in batches: numcodecs' libzstd, called from C.

numcodecs' ``zstd`` extension module exports libzstd's API. cuzarr's batch helper
(:mod:`cuzarr._native`) decodes a batch of chunks with one decompression context and one
crossing into C (the GIL released throughout), each chunk into its place in a destination.
A chunk decodes only if all its frames decode (checksums verified where present) to exactly
the chunk's size; others are reported for the caller to decode one by one (which names what
is wrong with them).

:func:`available` is false without the helper or without those symbols; callers then take
their per-chunk path.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numcodecs.zstd
import numpy as np
import numpy.typing as npt

from cuzarr import _native
from cuzarr._native import address, as_offsets, check_buffers, check_runs, symbols

__all__ = ["available", "compressor", "decode_frames", "decode_into", "read_boxes"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class _Entry:
    helper: ctypes.CDLL
    create: int
    free: int
    decompress: int
    is_error: int


@functools.cache
def _entry() -> _Entry | None:
    names = ("ZSTD_createDCtx", "ZSTD_freeDCtx", "ZSTD_decompressDCtx", "ZSTD_isError")
    found = symbols(numcodecs.zstd.__file__, names)
    helper = _native.helper()
    if found is None or helper is None:
        return None
    return _Entry(helper, *found)


def available() -> bool:
    """Whether batches can be decoded here (the helper and libzstd's symbols)."""
    return _entry() is not None


@functools.cache
def _encoder(library: str) -> tuple[int, ...] | None:
    """libzstd's compression functions in the shared object ``library`` (``None``: missing)."""
    names = (
        "ZSTD_createCCtx", "ZSTD_freeCCtx", "ZSTD_CCtx_setParameter", "ZSTD_compress2",
        "ZSTD_isError",
    )
    return symbols(library, names)


@functools.cache
def _library(encoder: str) -> str | None:
    """The libzstd that ``Settings.zstd_encoder`` encodes with, as a shared object.

    ``"numcodecs"``: numcodecs' ``zstd`` module. ``"zstandard"``: python-zstandard's CFFI
    extension, which exports the libzstd its C backend is built from (the C backend does not
    export it); ``None`` where that extension is not installed. Looked up once per encoder
    (``box_plan`` asks on every write).
    """
    if encoder == "numcodecs":
        return str(numcodecs.zstd.__file__)
    spec = importlib.util.find_spec("zstandard._cffi")
    return None if spec is None or spec.origin is None else spec.origin


def compressor(codec: Any, encoder: str) -> _native.Compressor | None:
    """libzstd's encoder for numcodecs' ``Zstd`` codec, for ``_native.put_boxes``.

    ``encoder`` is ``Settings.zstd_encoder``: the frames are those of the library the general
    path encodes with, byte for byte (a context with the codec's ``level`` and ``checksum``,
    then ``ZSTD_compress2`` into room for ``ZSTD_compressBound`` bytes, as numcodecs calls it;
    python-zstandard's one-shot compression with numcodecs' frame options is the same). Measured
    on 8 KiB chunks: numcodecs' libzstd (1.5.6) ~100 us a chunk even with a reused context,
    python-zstandard's (1.5.7) ~60 us. ``None`` for another codec, or without the helper or
    the library.
    """
    library = _library(encoder)
    found = None if library is None else _encoder(library)
    if found is None or not isinstance(codec, numcodecs.zstd.Zstd):
        return None
    return _native.Compressor(_native.ZSTD, found, (int(codec.level), int(bool(codec.checksum))))


def decode_frames(
    data: npt.NDArray[np.uint8],
    starts: I64,
    lengths: I64,
    dest: npt.NDArray[np.uint8],
    dest_offsets: I64,
    nbytes: int,
) -> npt.NDArray[np.bool_]:
    """Decode chunks ``data[starts[i] : starts[i] + lengths[i]]`` into ``dest`` at ``dest_offsets``.

    Parameters
    ----------
    data : ndarray of uint8
        Contiguous bytes holding the chunks (each one or more zstd frames).
    starts, lengths : ndarray of int64
        Each chunk's offset in ``data`` and length.
    dest : ndarray of uint8
        Contiguous, writable; room for ``nbytes`` at each of ``dest_offsets``.
    dest_offsets : ndarray of int64
        Where each chunk decodes to in ``dest``.
    nbytes : int
        The decoded size of every chunk.

    Returns
    -------
    ndarray of bool
        Per chunk, whether it decoded to exactly ``nbytes`` bytes.
    """
    entry = _entry()
    assert entry is not None, "decode_frames needs available()"
    check_buffers("decode_frames", data, dest)
    n = len(starts)
    if len(lengths) != n or len(dest_offsets) != n:
        raise ValueError("decode_frames: starts, lengths and dest_offsets must pair up")
    if not n:
        return np.zeros(0, bool)
    if int(lengths.min()) < 0:
        raise ValueError("decode_frames: lengths must be >= 0")
    check_runs("decode_frames starts", starts, lengths, data.nbytes)
    check_runs("decode_frames dest_offsets", dest_offsets, nbytes, dest.nbytes)
    so, ln, do = as_offsets(starts, lengths, dest_offsets)
    status = np.empty(n, np.int64)
    failed = entry.helper.cz_zstd_decompress_many(
        entry.create, entry.free, entry.decompress, entry.is_error, n, address(data),
        address(so), address(ln), address(dest), address(do), nbytes, address(status),
    )
    if failed < 0:
        raise MemoryError("ZSTD_createDCtx failed")
    ok: npt.NDArray[np.bool_] = status == nbytes
    return ok


_DecompressFn = Callable[[int, int, int, int, int], int]


@functools.cache
def _decompress(address_: int) -> _DecompressFn:
    """``ZSTD_decompressDCtx`` at ``address_``, callable from Python (the GIL released)."""
    size_t, pointer = ctypes.c_size_t, ctypes.c_void_p
    fn = ctypes.CFUNCTYPE(size_t, pointer, pointer, size_t, pointer, size_t)(address_)
    return fn


def decode_into(data: npt.NDArray[np.uint8], out: npt.NDArray[Any]) -> bool:
    """Decode the zstd frames ``data`` into ``out``; whether they filled it exactly.

    One call of numcodecs' libzstd (``ZSTD_decompressDCtx``, the whole chunk in one pass,
    every frame, checksums verified where present) with the calling thread's reused context.
    Measured on (f)'s 1 MiB float32 chunks, minimum of 20 passes over 64 chunks:
    1,029 us a chunk against 1,108 us through python-zstandard's ``stream_reader``.
    ``False`` (``out``'s contents then undefined) for anything else: no helper or symbols,
    ``out`` not C-contiguous and writable, a corrupt frame, or frames that decode to more or
    fewer bytes; the caller then decodes the general way, which names what is wrong.

    Parameters
    ----------
    data : ndarray of uint8
        The stored chunk, contiguous.
    out : ndarray
        The destination, its bytes the chunk's decoded bytes.

    Returns
    -------
    bool
        Whether the frames decoded to exactly ``out.nbytes`` bytes.
    """
    entry = _entry()
    if entry is None or not out.flags.c_contiguous or not out.flags.writeable:
        return False
    if not data.flags.c_contiguous:
        return False
    n = out.nbytes
    # libzstd's errors are size_t values near 2**64: never a decoded size.
    got = _decompress(entry.decompress)(
        _thread_dctx(entry), address(out), n, address(data), data.nbytes
    )
    return bool(got == n)


def read_boxes(
    paths: Sequence[bytes],
    cap: int,
    chunk_shape: tuple[int, ...],
    itemsize: int,
    boxes: I64,
    out: npt.NDArray[np.generic],
    scratch: npt.NDArray[np.uint8],
    *,
    streaming: bool = False,
) -> npt.NDArray[np.int64]:
    """Read the zstd chunks in files ``paths``, decode them and copy a box of each into ``out``.

    One call into C for the batch (open, read, decode and copy of every file with the GIL
    released). Each file must hold one chunk of ``chunk_shape`` elements of ``itemsize`` bytes
    (C order) as zstd frames of fewer than ``cap`` bytes. A box that is the whole chunk, over a
    contiguous region of ``out``, is decoded straight into it (no copy).

    Parameters
    ----------
    paths : sequence of bytes
        The files (no NUL bytes), one per chunk.
    cap : int
        Room for a stored chunk: a file of ``cap`` bytes or more is left to the caller.
    chunk_shape : tuple of int
        The decoded chunk's shape (at least one dimension).
    itemsize : int
        Bytes per element; ``out``'s ``dtype`` has this size and the chunk's byte order.
    boxes : ndarray of int64, shape (len(paths), 4, ndim)
        Per chunk: where the box starts in the chunk, where in ``out``, its extent, and its
        step in the chunk (every ``step``-th element from the start, ``extent`` of them, into
        consecutive elements of ``out``; 1 for a plain box).
    out : ndarray
        Writable, ``ndim`` dimensions, any strides.
    scratch : ndarray of uint8
        C-contiguous and writable, at least ``cap`` plus the chunk's bytes: the stored chunk
        and the decoded one (the caller keeps it from batch to batch).
    streaming : bool
        Copy boxes into ``out`` with streaming stores (rows of whole cache lines written to
        memory without first reading them into the cache): for outputs larger than the cache.

    Returns
    -------
    ndarray of int64
        Per chunk: 1 placed, 0 the file does not exist (``out`` untouched there), -1 left to
        the caller (another error, too large, or not exactly one chunk of zstd frames; its
        region of ``out`` may have been written).

    Raises
    ------
    ValueError
        If a box does not lie inside the chunk and ``out`` (checked in C before anything is
        read), or the arguments disagree.
    """
    entry = _entry()
    assert entry is not None, "read_boxes needs available()"
    n, ndim = len(paths), len(chunk_shape)
    if ndim < 1 or out.ndim != ndim or out.dtype.itemsize != itemsize or not out.flags.writeable:
        raise ValueError("read_boxes: out must be writable with the chunk's dimensions")
    if boxes.dtype != np.int64 or boxes.shape != (n, 4, ndim):
        raise ValueError(f"read_boxes: boxes must be int64 of shape ({n}, 4, {ndim})")
    blob = b"\0".join(paths) + b"\0"
    if cap < 1 or blob.count(b"\0") != max(n, 1):
        raise ValueError("read_boxes: cap must be >= 1 and paths free of NUL bytes")
    nbytes = itemsize * math.prod(chunk_shape)
    if (
        scratch.dtype != np.uint8
        or not scratch.flags.c_contiguous
        or not scratch.flags.writeable
        or scratch.nbytes < cap + nbytes
    ):
        raise ValueError(f"read_boxes: scratch must be {cap + nbytes} writable contiguous bytes")
    if not n:
        return np.zeros(0, np.int64)
    # One block for the small arguments (chunk shape, out shape, out strides) and the statuses:
    # each address costs ~2.5 us of Python, as much as the C call spends on a chunk's I/O.
    block = np.empty(3 * ndim + n, np.int64)
    block[:ndim] = chunk_shape
    block[ndim : 2 * ndim] = out.shape
    block[2 * ndim : 3 * ndim] = out.strides
    base = address(block)
    boxes = np.ascontiguousarray(boxes)  # held here: the helper reads it during the call
    placed = entry.helper.cz_read_zstd_boxes(
        _thread_dctx(entry), entry.decompress, entry.is_error, n, blob, cap, nbytes, ndim,
        itemsize, base, address(boxes), int(out.ctypes.data), address(scratch),
        int(streaming), base + 8 * 3 * ndim,
    )
    if placed == -2:
        raise ValueError("read_boxes: a box lies outside its chunk or the output")
    if placed < 0:
        raise ValueError("read_boxes: the helper refused its arguments")
    return block[3 * ndim :]


class _DCtx:
    """One libzstd decompression context, freed with this object (at its thread's end)."""

    __slots__ = ("_free", "pointer")

    def __init__(self, entry: _Entry) -> None:
        pointer = ctypes.CFUNCTYPE(ctypes.c_void_p)(entry.create)()
        if not pointer:
            raise MemoryError("ZSTD_createDCtx failed")
        self.pointer: int = pointer
        self._free = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p)(entry.free)

    def __del__(self) -> None:
        self._free(self.pointer)


_local = threading.local()


def _thread_dctx(entry: _Entry) -> int:
    """The calling thread's decompression context (made on first use, then reused)."""
    try:
        ctx: _DCtx = _local.dctx
    except AttributeError:
        ctx = _local.dctx = _DCtx(entry)
    return ctx.pointer
