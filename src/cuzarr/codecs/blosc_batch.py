"""Blosc 1 frames decoded and encoded in batches: numcodecs' c-blosc, called from C.

numcodecs ships c-blosc inside its ``blosc`` extension module and exports its thread-safe
entry points (``blosc_decompress_ctx``, ``blosc_compress_ctx``). cuzarr's batch helper
(:mod:`cuzarr._native`) calls them once per chunk in a C loop, so a batch of inner chunks costs
one crossing into C (the GIL released throughout) instead of a Python call of ~5 us each. The
frames are the ones numcodecs' own ``compress`` writes, byte for byte (the same library, the
same arguments); decoded frames are checked as numcodecs checks them (the header's stored size
equals the frame's length) and against the chunk's size before decoding.

:func:`available` is false without the helper or without those symbols (another numcodecs
build); callers then take their per-chunk path.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any

import numcodecs
import numcodecs.blosc
import numpy as np
import numpy.typing as npt

from cuzarr import _native
from cuzarr._native import address, as_offsets, check_buffers, check_runs, symbols

__all__ = [
    "BLOSC_OVERHEAD",
    "BloscParams",
    "available",
    "compressor",
    "decode_frames",
    "encode_rows",
    "read_split",
    "split_reads",
]

#: Bytes c-blosc may add to an input (its header): the room each compressed row gets.
BLOSC_OVERHEAD = 16
_HEADER = 16
_AUTOSHUFFLE, _SHUFFLE, _BITSHUFFLE = -1, 1, 2

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class _Entry:
    helper: ctypes.CDLL
    decompress: int
    compress: int


@functools.cache
def _entry() -> _Entry | None:
    found = symbols(numcodecs.blosc.__file__, ("blosc_decompress_ctx", "blosc_compress_ctx"))
    helper = _native.helper()
    if found is None or helper is None:
        return None
    return _Entry(helper, *found)


def available() -> bool:
    """Whether batches can be decoded and encoded here (the helper and c-blosc's symbols)."""
    return _entry() is not None


@functools.cache
def _getitem() -> int | None:
    """c-blosc's ``blosc_getitem`` (thread-safe in c-blosc 1.21), or ``None``."""
    found = symbols(numcodecs.blosc.__file__, ("blosc_getitem",))
    return None if found is None or _entry() is None else found[0]


#: Leading integers of ``cz_read_blosc_split``'s block (``CZ_BS_HEAD``).
_SPLIT_HEAD = 9


def read_split(
    path: bytes,
    cap: int,
    chunk_shape: tuple[int, ...],
    itemsize: int,
    box: list[int],
    out: npt.NDArray[Any],
    scratch: npt.NDArray[np.uint8],
    *,
    streaming: bool,
    helpers: int,
) -> int | None:
    """Read one Blosc chunk from the file ``path`` and copy a box of it into ``out``.

    Its decoding and copying are shared with up to ``helpers`` of the helper's threads.

    The box is cut into one part per thread along its first axis longer than one element, at
    blosc block boundaries where it can be; each thread decodes only the blocks its part reads
    (``blosc_getitem``, the same frames' bytes as ``blosc_decompress_ctx``) and copies that
    part. The frame is checked first as :func:`decode_frames` checks one (the header's
    compressed size is the file's, its decoded size the chunk's).

    Parameters
    ----------
    path : bytes
        The chunk's file (no NUL bytes).
    cap : int
        Room for the stored chunk: a file of ``cap`` bytes or more is left to the caller.
    chunk_shape, itemsize :
        The decoded chunk (C order).
    box : list of int
        Chunk start, out start, extent and chunk step, ``ndim`` values each.
    out : ndarray
        Writable, ``ndim`` dimensions, any strides, the chunk's item size.
    scratch : ndarray of uint8
        C-contiguous, at least ``cap`` plus the chunk's bytes.
    streaming, helpers :
        Streaming stores for the copy (as ``zstd_batch.read_boxes``); helper threads to lend.

    Returns
    -------
    int or None
        1 placed, 0 the file does not exist, -1 left to the caller (its region of ``out`` may
        have been written); ``None`` where this build has no ``blosc_getitem``.

    Raises
    ------
    ValueError
        If the box lies outside the chunk or ``out``, or the arguments disagree.
    """
    getitem = _getitem()
    if getitem is None:
        return None
    entry = _entry()
    assert entry is not None
    ndim = len(chunk_shape)
    nbytes = itemsize * int(np.prod(chunk_shape))
    if out.ndim != ndim or out.dtype.itemsize != itemsize or not out.flags.writeable:
        raise ValueError("read_split: out must be writable with the chunk's dimensions")
    if scratch.dtype != np.uint8 or not scratch.flags.c_contiguous or scratch.nbytes < cap + nbytes:
        raise ValueError(f"read_split: scratch must be {cap + nbytes} contiguous bytes")
    if len(box) != 4 * ndim or b"\0" in path:
        raise ValueError("read_split: box must hold 4 x ndim integers, path no NUL byte")
    block = np.empty(_SPLIT_HEAD + 7 * ndim, np.int64)
    block[:_SPLIT_HEAD] = (
        getitem, cap, nbytes, ndim, itemsize, address(scratch), int(out.ctypes.data),
        int(streaming), helpers,
    )
    block[_SPLIT_HEAD : _SPLIT_HEAD + ndim] = chunk_shape
    block[_SPLIT_HEAD + ndim : _SPLIT_HEAD + 2 * ndim] = out.shape
    block[_SPLIT_HEAD + 2 * ndim : _SPLIT_HEAD + 3 * ndim] = out.strides
    block[_SPLIT_HEAD + 3 * ndim :] = box
    got = int(entry.helper.cz_read_blosc_split(address(block), path))
    if got == -2:
        raise ValueError("read_split: the box lies outside the chunk or the output")
    return got


def split_reads() -> int:
    """How many chunks :func:`read_split` has read on more than one thread in this process."""
    entry = _entry()
    return 0 if entry is None else int(entry.helper.cz_split_reads())


@dataclass(frozen=True, slots=True)
class BloscParams:
    """The arguments of ``blosc_compress_ctx`` for one numcodecs ``Blosc`` codec.

    Attributes
    ----------
    cname : bytes
        Compressor name (``b"lz4"``, ...).
    clevel : int
        Compression level.
    shuffle : int
        ``0`` none, ``1`` byte shuffle, ``2`` bit shuffle (numcodecs' automatic choice
        resolved for ``typesize``, as its ``compress`` does).
    typesize : int
        Element size shuffles work on.
    blocksize : int
        Block size (``0``: automatic).
    """

    cname: bytes
    clevel: int
    shuffle: int
    typesize: int
    blocksize: int

    @classmethod
    def of(cls, codec: Any, typesize: int | None) -> BloscParams | None:
        """The parameters of a numcodecs ``Blosc`` codec encoding with ``typesize``.

        ``None`` for another codec or an unknown ``typesize``.
        """
        if not isinstance(codec, numcodecs.Blosc) or typesize is None or typesize < 1:
            return None
        shuffle = int(codec.shuffle)
        if shuffle == _AUTOSHUFFLE:
            shuffle = _BITSHUFFLE if typesize == 1 else _SHUFFLE
        if shuffle not in (0, _SHUFFLE, _BITSHUFFLE):
            return None
        return cls(
            str(codec.cname).encode("ascii"),
            int(codec.clevel),
            shuffle,
            int(typesize),
            int(codec.blocksize),
        )


def compressor(params: BloscParams) -> _native.Compressor | None:
    """c-blosc's encoder with ``params``, for :func:`cuzarr._native.put_boxes` (``None``: not here).

    It writes numcodecs' frames byte for byte, as :func:`encode_rows` does.
    """
    entry = _entry()
    if entry is None:
        return None
    return _native.Compressor(
        _native.BLOSC, (entry.compress,),
        (params.clevel, params.shuffle, params.typesize, params.blocksize), params.cname,
    )


def decode_frames(
    data: npt.NDArray[np.uint8],
    starts: I64,
    lengths: I64,
    dest: npt.NDArray[np.uint8],
    dest_offsets: I64,
    nbytes: int,
) -> npt.NDArray[np.bool_]:
    """Decode frames ``data[starts[i] : starts[i] + lengths[i]]`` into ``dest`` at ``dest_offsets``.

    Each frame must decode to exactly ``nbytes`` bytes. Frames whose header does not declare
    that size, or a stored size equal to the frame's length, are not decoded; frames the
    decoder refuses are reported too.

    Parameters
    ----------
    data : ndarray of uint8
        Contiguous bytes holding the frames.
    starts, lengths : ndarray of int64
        Each frame's offset in ``data`` and length.
    dest : ndarray of uint8
        Contiguous, writable; room for ``nbytes`` at each of ``dest_offsets``.
    dest_offsets : ndarray of int64
        Where each frame decodes to in ``dest``.
    nbytes : int
        The decoded size of every frame.

    Returns
    -------
    ndarray of bool
        Per frame, whether it was decoded (the others are for the caller to decode one by
        one, which names what is wrong with them).
    """
    entry = _entry()
    assert entry is not None, "decode_frames needs available()"
    check_buffers("decode_frames", data, dest)
    n = len(starts)
    ok = (lengths >= _HEADER) & (starts >= 0) & (starts + lengths <= data.nbytes)
    if n and ok.any():
        at = np.where(ok, starts, 0)
        header = data[at[:, None] + np.arange(_HEADER)].view("<u4")
        # Bytes 4..7: the decoded size; 12..15: the frame's size (numcodecs' own check).
        ok &= (header[:, 1] == nbytes) & (header[:, 3] == lengths)
    todo = np.flatnonzero(ok)
    if not len(todo):
        return ok
    src_offsets, out_offsets = as_offsets(starts[todo], dest_offsets[todo])
    check_runs("decode_frames dest_offsets", out_offsets, nbytes, dest.nbytes)
    status = np.empty(len(todo), np.int32)
    failed = entry.helper.cz_decompress_many(
        entry.decompress, len(todo), address(data), address(src_offsets), address(dest),
        address(out_offsets), nbytes, address(status),
    )
    if failed:
        ok[todo[status != nbytes]] = False
    return ok


def encode_rows(
    src: npt.NDArray[np.uint8],
    src_offsets: I64,
    nbytes: int,
    params: BloscParams,
    dest: npt.NDArray[np.uint8],
    dest_offsets: I64,
) -> npt.NDArray[np.int32]:
    """Compress inputs of ``nbytes`` at ``src_offsets`` of ``src``, as numcodecs' ``compress``.

    Frame ``i`` is written at ``dest_offsets[i]`` of ``dest``, which has room for
    ``nbytes + BLOSC_OVERHEAD`` bytes there (the most a frame takes).

    Returns
    -------
    ndarray of int32
        Each frame's size (``<= 0``: c-blosc failed on that input; the caller encodes it one
        by one to report why).
    """
    entry = _entry()
    assert entry is not None, "encode_rows needs available()"
    check_buffers("encode_rows", src, dest)
    n = len(src_offsets)
    room = nbytes + BLOSC_OVERHEAD
    check_runs("encode_rows src_offsets", src_offsets, nbytes, src.nbytes)
    check_runs("encode_rows dest_offsets", dest_offsets, room, dest.nbytes)
    sizes = np.empty(n, np.int32)
    so, do = as_offsets(src_offsets, dest_offsets)
    if n:
        entry.helper.cz_compress_many(
            entry.compress, n, params.clevel, params.shuffle, params.typesize, nbytes,
            address(src), address(so), address(dest), address(do), room, params.cname,
            params.blocksize, address(sizes),
        )
    return sizes
