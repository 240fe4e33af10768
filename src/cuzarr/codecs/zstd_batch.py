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
from dataclasses import dataclass

import numcodecs.zstd
import numpy as np
import numpy.typing as npt

from cuzarr import _native
from cuzarr._native import address, as_offsets, check_buffers, check_runs, symbols

__all__ = ["available", "decode_frames"]

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
