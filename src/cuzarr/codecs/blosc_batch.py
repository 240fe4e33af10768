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
