"""Decoded sizes read from compressed-frame headers, without decompressing.

The engine knows every chunk's decoded size from metadata. Checking the size a frame declares
before decoding into a fixed buffer catches corrupt or hostile chunks early (no decompression
bomb, no silently short chunk) and lets the decoder write straight into the destination. The
same parsers build descriptors for batched GPU decoders.
"""

from __future__ import annotations

from cuzarr.codecs.base import Buf

__all__ = ["blosc_nbytes", "lz4_numcodecs_nbytes", "zstd_content_size"]

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
