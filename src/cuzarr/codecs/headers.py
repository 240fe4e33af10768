"""Decoded sizes read from compressed-frame headers, without decompressing.

The engine knows every chunk's decoded size from metadata. Checking the size a frame declares
before decoding into a fixed buffer catches corrupt or hostile chunks early (no decompression
bomb, no silently short chunk) and lets the decoder write straight into the destination. The
same parsers build descriptors for batched GPU decoders.
"""

from __future__ import annotations

from cuzarr.codecs.base import Buf

__all__ = ["blosc_nbytes", "lz4_numcodecs_nbytes", "zstd_content_size", "zstd_max_decoded_size"]

_ZSTD_MAGIC = 0xFD2FB528
_FCS_FIELD_SIZE = (0, 2, 4, 8)


def zstd_content_size(data: Buf) -> int | None:
    """Return the content size declared by the first zstd frame, or ``None`` if absent.

    Parameters
    ----------
    data : buffer
        A zstd frame (RFC 8878, section 3.1.1).

    Returns
    -------
    int or None
        The declared decompressed size; ``None`` when the frame does not declare it, when it
        is a skippable frame, or when the header is too short to tell.
    """
    mv = memoryview(data).cast("B")
    if len(mv) < 6 or int.from_bytes(mv[0:4], "little") != _ZSTD_MAGIC:
        return None
    fhd = mv[4]
    fcs_flag = fhd >> 6
    single_segment = (fhd >> 5) & 1
    dict_id_flag = fhd & 3
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_id_flag]
    size = _FCS_FIELD_SIZE[fcs_flag]
    if size == 0:
        size = 1 if single_segment else 0
    if size == 0 or len(mv) < pos + size:
        return None
    value = int.from_bytes(mv[pos : pos + size], "little")
    if size == 2:
        value += 256
    return value


def blosc_nbytes(data: Buf) -> int | None:
    """Return the uncompressed size from a Blosc 1 header (bytes 4-7), or ``None``."""
    mv = memoryview(data).cast("B")
    if len(mv) < 16:
        return None
    return int.from_bytes(mv[4:8], "little")


def lz4_numcodecs_nbytes(data: Buf) -> int | None:
    """Return the size numcodecs' LZ4 codec writes as a 4-byte little-endian prefix."""
    mv = memoryview(data).cast("B")
    if len(mv) < 4:
        return None
    return int.from_bytes(mv[0:4], "little")


_ZSTD_SKIPPABLE_MASK = 0xFFFFFFF0
_ZSTD_SKIPPABLE = 0x184D2A50
_ZSTD_MAX_BLOCK = 128 * 1024


def zstd_max_decoded_size(data: Buf) -> int | None:
    """Return an upper bound of what a sequence of zstd frames decodes to, from block headers.

    Used for frames that do not declare their content size. Raw and RLE blocks declare their
    decoded size; a compressed block decodes to at most ``min(window size, 128 KiB)`` bytes
    (RFC 8878, section 3.1.1.2.3). Walking the block headers costs no decompression.

    Parameters
    ----------
    data : buffer
        One or more zstd (or skippable) frames.

    Returns
    -------
    int or None
        The bound, or ``None`` when the frames are malformed (the decoder then reports why).
    """
    mv = memoryview(data).cast("B")
    n = len(mv)
    pos = 0
    total = 0
    while pos < n:
        if pos + 4 > n:
            return None
        magic = int.from_bytes(mv[pos : pos + 4], "little")
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE:
            if pos + 8 > n:
                return None
            pos += 8 + int.from_bytes(mv[pos + 4 : pos + 8], "little")
            continue
        if magic != _ZSTD_MAGIC or pos + 5 > n:
            return None
        fhd = mv[pos + 4]
        single_segment = (fhd >> 5) & 1
        has_checksum = (fhd >> 2) & 1
        fcs_size = _FCS_FIELD_SIZE[fhd >> 6] or (1 if single_segment else 0)
        pos += 5
        block_max = _ZSTD_MAX_BLOCK
        if not single_segment:
            if pos >= n:
                return None
            wd = mv[pos]
            window_log = 10 + (wd >> 3)
            window = (1 << window_log) + ((1 << window_log) >> 3) * (wd & 7)
            block_max = min(block_max, window)
            pos += 1
        pos += (0, 1, 2, 4)[fhd & 3] + fcs_size
        while True:
            if pos + 3 > n:
                return None
            header = int.from_bytes(mv[pos : pos + 3], "little")
            last, kind, size = header & 1, (header >> 1) & 3, header >> 3
            pos += 3
            if kind == 0:  # raw
                total += size
                pos += size
            elif kind == 1:  # RLE: one byte repeated ``size`` times
                total += size
                pos += 1
            elif kind == 2:  # compressed
                total += block_max
                pos += size
            else:
                return None
            if last:
                break
        pos += 4 * has_checksum
    return total
