"""The block structure of zstd frames, walked before nvCOMP sees them (host side).

nvCOMP 6.0.0's zstd decoder faults the CUDA context on a frame truncated at the end of its
buffer (measured on an H200, bench/results/gpu-check-2026-12-04): the context is lost for the
rest of the process. A frame's blocks (RFC 8878, 3.1.1.2) are a chain of 3-byte headers, each
giving its block's type and size, the last one flagged; walking that chain tells whether the
blocks end exactly where the chunk does, at a cost of a few bytes read per 128 KiB block. The
GPU walks the frames of a wave in one launch (``cuzarr_zstd_walk`` in
:mod:`cuzarr.gpu.kernels`); :func:`walk` is its reference, used by the tests and the simulator.
The walk checks structure, not content: a frame whose blocks hold damaged bytes of the right
sizes still goes to nvCOMP.
"""

from __future__ import annotations

from cuzarr.errors import CorruptChunkError

__all__ = ["BROKEN", "MORE", "OK", "header_length", "walk", "walk_frame"]

#: Verdicts of :func:`walk` (and of the kernel): the blocks end exactly at the frame's end
#: (before its checksum); they do not (truncated, overlong, a reserved block type or a block
#: over 128 KiB); bytes follow the last block (another frame: the CPU decodes such chunks).
OK, BROKEN, MORE = 0, 1, 2
#: Largest block a frame may hold (Block_Maximum_Size is at most 128 KiB).
MAX_BLOCK = 128 * 1024


def header_length(head: bytes | memoryview) -> int:
    """Bytes of the frame header (magic number included) of the zstd frame ``head`` starts.

    Raises
    ------
    CorruptChunkError
        When ``head`` is shorter than the header it declares.
    """
    if len(head) < 5:
        raise CorruptChunkError("zstd frame header: fewer than 5 bytes")
    fhd = head[4]
    single_segment = (fhd >> 5) & 1
    n = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3]
    n += ((1 if single_segment else 0), 2, 4, 8)[fhd >> 6]
    if len(head) < n:
        raise CorruptChunkError(f"zstd frame header: {n} bytes declared, {len(head)} present")
    return n


def walk(data: bytes | memoryview, start: int, end: int, checksum: bool) -> int:
    """Follow the block headers of a frame from ``start`` (its first block) to ``end``.

    Returns :data:`OK`, :data:`BROKEN` or :data:`MORE` (exactly as ``cuzarr_zstd_walk``).
    """
    pos, tail = start, 4 if checksum else 0
    while pos + 3 <= end:
        h = int(data[pos]) | (int(data[pos + 1]) << 8) | (int(data[pos + 2]) << 16)
        kind, size = (h >> 1) & 3, h >> 3
        if kind == 3 or size > MAX_BLOCK:
            return BROKEN
        pos += 3 + (1 if kind == 1 else size)
        if h & 1:
            if pos + tail == end:
                return OK
            return MORE if pos + tail < end else BROKEN
    return BROKEN


def walk_frame(frame: bytes | memoryview) -> int:
    """:func:`walk` of a whole frame in hand: its header and checksum flag read from it.

    Raises
    ------
    CorruptChunkError
        When the frame is shorter than the header it declares.
    """
    return walk(frame, header_length(frame), len(frame), bool(frame[4] & 0x04))
