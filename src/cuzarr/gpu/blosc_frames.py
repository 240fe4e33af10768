"""Blosc 1 frames parsed on the host into stream and block descriptors.

A Blosc 1 frame (c-blosc 1.x, as numcodecs' ``Blosc`` writes it) is a 16-byte header, then
(unless the frame is a plain copy) a table of ``nblocks`` 32-bit block starts, then the blocks.
Each block holds one stream, or ``typesize`` streams when it was split by byte position; each
stream is a 32-bit little-endian compressed size followed by that many bytes, stored verbatim
when the size equals the stream's decoded size. Decoding a block means decoding its streams
one after another into a block-sized buffer, then undoing the byte or bit shuffle of the whole
block (the last, shorter block included).

Header (all integers little-endian)::

    0  version (2)          4  nbytes (decoded size)
    1  compressor version   8  blocksize
    2  flags                12 cbytes (frame size)
    3  typesize

Flags: bit 0 byte shuffle, bit 1 plain copy (``memcpyed``), bit 2 bit shuffle, bit 3 reserved,
bit 4 "don't split", bits 5-7 compressor (0 blosclz, 1 lz4/lz4hc, 2 snappy, 3 zlib, 4 zstd).

The GPU backend decodes the zstd/lz4/snappy/zlib streams of many frames in one nvCOMP batch,
copies stored streams, and unshuffles blocks with a kernel; :func:`reassemble` does the same
on the CPU from the same descriptors (the tests use it to check the descriptors against
numcodecs' own decoder).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf
from cuzarr.errors import CorruptChunkError, UnsupportedError

__all__ = [
    "COMPRESSORS",
    "BloscFrame",
    "BloscHeader",
    "parse_frame",
    "reassemble",
]

HEADER_NBYTES = 16
#: Splitting by byte position needs at most this many bytes per element...
MAX_SPLITS = 16
#: ...and at least this many elements per block (c-blosc's ``MIN_BUFFERSIZE``).
MIN_BUFFERSIZE = 128
#: c-blosc 1.x refuses larger elements and stores them with typesize 1.
MAX_TYPESIZE = 255

_DOSHUFFLE = 0x01
_MEMCPYED = 0x02
_DOBITSHUFFLE = 0x04
_RESERVED = 0x08
_DONT_SPLIT = 0x10

#: Compressor codes of bits 5-7 of the flags (lz4 and lz4hc write the same stream format).
COMPRESSORS = {0: "blosclz", 1: "lz4", 2: "snappy", 3: "zlib", 4: "zstd"}

#: dtype of the stream table: one row per stream of a frame.
STREAM_DTYPE = np.dtype(
    [
        ("src_offset", "<i8"),  # first compressed byte, from the start of the frame
        ("src_size", "<i8"),  # compressed bytes
        ("dst_offset", "<i8"),  # first decoded byte, from the start of the decoded frame
        ("dst_size", "<i8"),  # decoded bytes
        ("stored", "?"),  # stored verbatim: copy, do not decompress
    ]
)


@dataclass(frozen=True, slots=True, kw_only=True)
class BloscHeader:
    """The 16-byte header of a Blosc 1 frame.

    Attributes
    ----------
    version, versionlz, flags, typesize : int
        Bytes 0-3.
    nbytes, blocksize, cbytes : int
        Decoded size, block size, frame size.
    """

    version: int
    versionlz: int
    flags: int
    typesize: int
    nbytes: int
    blocksize: int
    cbytes: int

    @property
    def shuffle(self) -> bool:
        """Byte shuffle is to be undone (only meaningful with ``typesize > 1``)."""
        return bool(self.flags & _DOSHUFFLE) and self.typesize > 1

    @property
    def bitshuffle(self) -> bool:
        """Bit shuffle is to be undone (c-blosc: when the block holds at least one element)."""
        return bool(self.flags & _DOBITSHUFFLE) and not self.shuffle

    @property
    def memcpyed(self) -> bool:
        """The frame is the header followed by the decoded bytes."""
        return bool(self.flags & _MEMCPYED)

    @property
    def dont_split(self) -> bool:
        """Blocks were not split by byte position."""
        return bool(self.flags & _DONT_SPLIT)

    @property
    def compressor(self) -> str:
        """Name of the stream format: blosclz, lz4, snappy, zlib or zstd."""
        code = self.flags >> 5
        name = COMPRESSORS.get(code)
        if name is None:
            raise UnsupportedError(f"blosc frame uses unknown compressor code {code}")
        return name


@dataclass(frozen=True, slots=True, kw_only=True)
class BloscFrame:
    """A parsed frame: its header, block layout and stream table.

    Attributes
    ----------
    header : BloscHeader
        The header.
    nblocks : int
        Number of blocks (0 for an empty or plain-copy frame).
    block_sizes : numpy.ndarray of int64
        Decoded size of each block (all ``blocksize`` but the last).
    streams : numpy.ndarray of STREAM_DTYPE
        Every stream, in frame order; decoding stream ``i`` writes decoded bytes
        ``[dst_offset, dst_offset + dst_size)`` of the *shuffled* frame.
    """

    header: BloscHeader
    nblocks: int
    block_sizes: npt.NDArray[np.int64]
    streams: npt.NDArray[np.void]

    @property
    def nbytes(self) -> int:
        """Decoded size."""
        return self.header.nbytes

    @property
    def needs_unshuffle(self) -> bool:
        """Whether blocks must be byte- or bit-unshuffled after their streams are decoded."""
        return not self.header.memcpyed and (self.header.shuffle or self.header.bitshuffle)


def _corrupt(msg: str) -> CorruptChunkError:
    return CorruptChunkError(f"blosc frame: {msg}")


def parse_header(data: Buf) -> BloscHeader:
    """Parse and check the 16-byte header of a Blosc 1 frame.

    Raises
    ------
    CorruptChunkError
        If the frame is shorter than its header or the header is inconsistent.
    UnsupportedError
        For frames of a format version cuzarr does not know (Blosc 2 chunks).
    """
    mv = memoryview(data).cast("B")
    if len(mv) < HEADER_NBYTES:
        raise _corrupt(f"{len(mv)} bytes, shorter than the {HEADER_NBYTES}-byte header")
    h = BloscHeader(
        version=mv[0],
        versionlz=mv[1],
        flags=mv[2],
        typesize=mv[3],
        nbytes=int.from_bytes(mv[4:8], "little", signed=True),
        blocksize=int.from_bytes(mv[8:12], "little", signed=True),
        cbytes=int.from_bytes(mv[12:16], "little", signed=True),
    )
    if h.version == 0:
        raise _corrupt("format version 0")
    if h.version > 2:
        raise UnsupportedError(f"blosc frame of format version {h.version} (not Blosc 1)")
    if h.flags & _RESERVED:
        raise UnsupportedError(f"blosc frame sets reserved flag bits (flags {h.flags:#04x})")
    if h.nbytes < 0 or h.blocksize < 0 or h.cbytes < HEADER_NBYTES:
        raise _corrupt(f"bad sizes (nbytes {h.nbytes}, blocksize {h.blocksize}, cbytes {h.cbytes})")
    if h.cbytes > len(mv):
        raise _corrupt(f"header says {h.cbytes} bytes, got {len(mv)}")
    if h.nbytes and (h.blocksize == 0 or h.typesize == 0):
        raise _corrupt(f"blocksize {h.blocksize} or typesize {h.typesize} is zero")
    return h


def parse_frame(data: Buf, expected_nbytes: int | None = None) -> BloscFrame:
    """Parse a Blosc 1 frame into block and stream descriptors, checking every offset.

    Parameters
    ----------
    data : buffer
        The frame (trailing bytes beyond the header's ``cbytes`` are ignored).
    expected_nbytes : int, optional
        The decoded size metadata promises.

    Returns
    -------
    BloscFrame

    Raises
    ------
    CorruptChunkError
        If any size or offset is inconsistent or points outside the frame, or the decoded
        size differs from ``expected_nbytes``.
    UnsupportedError
        For Blosc 2 frames and unknown compressors.
    """
    h = parse_header(data)
    if expected_nbytes is not None and h.nbytes != expected_nbytes:
        raise _corrupt(f"decodes to {h.nbytes} bytes, expected {expected_nbytes}")
    empty_streams = np.zeros(0, STREAM_DTYPE)
    if h.nbytes == 0:
        return BloscFrame(
            header=h, nblocks=0, block_sizes=np.zeros(0, np.int64), streams=empty_streams
        )
    if h.memcpyed:
        if h.cbytes != h.nbytes + HEADER_NBYTES:
            raise _corrupt(f"plain copy of {h.nbytes} bytes in a frame of {h.cbytes}")
        stream = np.zeros(1, STREAM_DTYPE)
        stream[0] = (HEADER_NBYTES, h.nbytes, 0, h.nbytes, True)
        return BloscFrame(header=h, nblocks=0, block_sizes=np.zeros(0, np.int64), streams=stream)
    h.compressor  # noqa: B018 - raises UnsupportedError for unknown codes
    bs = h.blocksize
    nblocks, leftover = divmod(h.nbytes, bs)
    nblocks += leftover > 0
    table_end = HEADER_NBYTES + 4 * nblocks
    if table_end > h.cbytes:
        raise _corrupt(f"{nblocks} block starts do not fit in {h.cbytes} bytes")
    u8 = np.frombuffer(data, np.uint8, count=h.cbytes)
    bstarts = u8[HEADER_NBYTES:table_end].view("<i4").astype(np.int64)
    block_sizes = np.full(nblocks, bs, np.int64)
    if leftover:
        block_sizes[-1] = leftover
    ts = h.typesize
    can_split = not h.dont_split and ts <= MAX_SPLITS and bs // ts >= MIN_BUFFERSIZE
    rows: list[tuple[int, int, int, int, bool]] = []
    raw = bytes(u8)
    end = h.cbytes
    for b in range(nblocks):
        pos = int(bstarts[b])
        if pos < table_end or pos > end:
            raise _corrupt(f"block {b} starts at {pos}, outside {table_end}..{end}")
        bsize = int(block_sizes[b])
        nsplits = ts if can_split and not (leftover and b == nblocks - 1) else 1
        neblock = bsize // nsplits
        dst = b * bs
        for _ in range(nsplits):
            if pos + 4 > end:
                raise _corrupt(f"block {b}: stream size at {pos} runs past the end ({end})")
            csize = int.from_bytes(raw[pos : pos + 4], "little", signed=True)
            pos += 4
            if csize <= 0 or csize > end - pos:
                raise _corrupt(f"block {b}: stream of {csize} bytes at {pos} (frame ends at {end})")
            stored = csize == neblock
            rows.append((pos, csize, dst, neblock, stored))
            pos += csize
            dst += neblock
    streams = np.array(rows, dtype=STREAM_DTYPE)
    return BloscFrame(header=h, nblocks=nblocks, block_sizes=block_sizes, streams=streams)


StreamDecoder = Callable[[str, bytes, int], bytes]


def reassemble(frame: BloscFrame, data: Buf, decode_stream: StreamDecoder) -> npt.NDArray[np.uint8]:
    """Decode a parsed frame on the CPU from its descriptors (the GPU path's reference).

    Parameters
    ----------
    frame : BloscFrame
        From :func:`parse_frame`.
    data : buffer
        The frame's bytes.
    decode_stream : callable
        ``decode_stream(compressor, stream_bytes, decoded_size) -> bytes`` for one compressed
        stream.

    Returns
    -------
    numpy.ndarray of uint8
        The decoded bytes.

    Raises
    ------
    CorruptChunkError
        If a stream decodes to the wrong size.
    """
    from cuzarr.gpu.plan import bit_unshuffle, byte_unshuffle

    h = frame.header
    u8 = np.frombuffer(data, np.uint8, count=h.cbytes)
    shuffled = np.empty(h.nbytes, np.uint8)
    name = "copy" if h.memcpyed else h.compressor
    for s in frame.streams:
        src = u8[int(s["src_offset"]) : int(s["src_offset"]) + int(s["src_size"])]
        dst = slice(int(s["dst_offset"]), int(s["dst_offset"]) + int(s["dst_size"]))
        if s["stored"]:
            shuffled[dst] = src
            continue
        out = decode_stream(name, src.tobytes(), int(s["dst_size"]))
        if len(out) != int(s["dst_size"]):
            raise _corrupt(f"a {name} stream decoded to {len(out)} bytes, expected {s['dst_size']}")
        shuffled[dst] = np.frombuffer(out, np.uint8)
    if not frame.needs_unshuffle:
        return shuffled
    out_arr = np.empty_like(shuffled)
    for b, bsize in enumerate(frame.block_sizes.tolist()):
        blk = slice(b * h.blocksize, b * h.blocksize + bsize)
        if h.shuffle:
            out_arr[blk] = byte_unshuffle(shuffled[blk], h.typesize)
        else:
            out_arr[blk] = bit_unshuffle(shuffled[blk], h.typesize)
    return out_arr
