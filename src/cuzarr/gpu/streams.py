"""Headers and trailers around the raw streams nvCOMP decodes and encodes.

nvCOMP's ``RAW`` bitstreams are the bare algorithm streams. The chunks numcodecs and zarr write
wrap them:

- **zlib** (RFC 1950): 2-byte header, raw deflate, 4-byte big-endian Adler-32 of the data;
- **gzip** (RFC 1952): 10-byte header plus optional extra field, name, comment and header
  CRC-16, raw deflate, then CRC-32 and size modulo 2**32 (both little-endian);
- **numcodecs LZ4**: 4-byte little-endian decoded size, then one raw LZ4 block;
- **zstd**: a whole zstd frame is already what nvCOMP's RAW zstd reads (content size in the
  frame header; an optional 4-byte XXH64-based checksum at the end).

:func:`locate` checks the wrapper on the host and returns where the raw stream is and what the
trailer promises; :func:`verify` checks the promise against decoded bytes (the CPU helper; the
GPU path checks sizes, see :mod:`cuzarr.gpu.device`). :func:`wrap` builds the wrapper around a
raw stream the GPU compressed, so CPU libraries read GPU-written chunks.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from cuzarr.codecs.base import Buf
from cuzarr.codecs.headers import zstd_content_size
from cuzarr.errors import CorruptChunkError, UnsupportedError

__all__ = [
    "TRAILER_BYTES",
    "RawStream",
    "locate",
    "locate_parts",
    "prefix_length",
    "verify",
    "wrap",
]

_FTEXT, _FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 1, 2, 4, 8, 16
_ZSTD_MAGIC = 0xFD2FB528
#: Skippable frames' magic numbers are 0x184D2A50 to 0x184D2A5F.
_SKIPPABLE_MAGIC = 0x184D2A50


@dataclass(frozen=True, slots=True, kw_only=True)
class RawStream:
    """Where the raw algorithm stream of one chunk lies, and what its wrapper promises.

    Attributes
    ----------
    algorithm : str
        nvCOMP algorithm of the raw stream: ``Deflate``, ``LZ4`` or ``Zstd``.
    offset, length : int
        The raw stream is ``chunk[offset : offset + length]``.
    decoded_size : int or None
        Decoded size the wrapper declares (gzip: modulo 2**32); ``None`` when it declares none.
    adler32, crc32 : int or None
        Checksum of the decoded bytes the trailer carries.
    zstd_checksum : bool
        The zstd frame ends with a content checksum.
    """

    algorithm: str
    offset: int
    length: int
    decoded_size: int | None = None
    adler32: int | None = None
    crc32: int | None = None
    zstd_checksum: bool = False


def _corrupt(kind: str, msg: str) -> CorruptChunkError:
    return CorruptChunkError(f"{kind} stream: {msg}")


def _u8(data: Buf) -> memoryview:
    return memoryview(data).cast("B")


def locate_zlib(data: Buf) -> RawStream:
    """Check a zlib wrapper (RFC 1950) and locate its raw deflate stream."""
    return _zlib(_u8(data), _u8(data), memoryview(data).nbytes)


def _zlib(head: memoryview, tail: memoryview, n: int) -> RawStream:
    if n < 6:
        raise _corrupt("zlib", f"{n} bytes, shorter than header and trailer")
    cmf, flg = head[0], head[1]
    if cmf & 0x0F != 8 or cmf >> 4 > 7:
        raise _corrupt("zlib", f"compression method byte {cmf:#04x} is not deflate")
    if (cmf << 8 | flg) % 31:
        raise _corrupt("zlib", f"header check bits fail (CMF {cmf:#04x}, FLG {flg:#04x})")
    if flg & 0x20:
        raise UnsupportedError("zlib stream uses a preset dictionary")
    (adler,) = struct.unpack(">I", tail[len(tail) - 4 :])
    return RawStream(algorithm="Deflate", offset=2, length=n - 6, adler32=adler)


def locate_gzip(data: Buf) -> RawStream:
    """Check a single-member gzip header (RFC 1952) and locate its raw deflate stream."""
    return _gzip(_u8(data), _u8(data), memoryview(data).nbytes)


def _gzip_header_end(mv: memoryview, n: int) -> int:
    """Where the raw deflate stream of an ``n``-byte gzip member starts.

    ``mv`` holds the member's first bytes (all of it, or a head read on the host).

    Raises
    ------
    CorruptChunkError
        For a malformed header.
    UnsupportedError
        When the header runs past the bytes in ``mv`` (a head too short to tell).
    """
    if n < 18:
        raise _corrupt("gzip", f"{n} bytes, shorter than header and trailer")
    if len(mv) < 10:
        raise UnsupportedError(f"gzip header: only {len(mv)} bytes at hand")
    if mv[0] != 0x1F or mv[1] != 0x8B:
        raise _corrupt("gzip", "bad magic bytes")
    if mv[2] != 8:
        raise _corrupt("gzip", f"compression method {mv[2]} is not deflate")
    flg = mv[3]
    if flg & 0xE0:
        raise _corrupt("gzip", f"reserved flag bits set ({flg:#04x})")
    seen = min(len(mv), n - 8)  # header bytes at hand (the trailer is never header)
    short = UnsupportedError(f"gzip header longer than the {len(mv)} bytes at hand")
    pos = 10
    if flg & _FEXTRA:
        if pos + 2 > n:
            raise _corrupt("gzip", "truncated extra field")
        if pos + 2 > seen:
            raise short
        xlen = mv[pos] | mv[pos + 1] << 8
        pos += 2 + xlen
    for flag, what in ((_FNAME, "file name"), (_FCOMMENT, "comment")):
        if flg & flag:
            end = bytes(mv[pos:seen]).find(b"\0") if pos < seen else -1
            if end < 0:
                if seen < n - 8:
                    raise short
                raise _corrupt("gzip", f"unterminated {what}")
            pos += end + 1
    if flg & _FHCRC:
        if pos + 2 > n - 8:
            raise _corrupt("gzip", "truncated header CRC")
        if pos + 2 > seen:
            raise short
        want = mv[pos] | mv[pos + 1] << 8
        got = zlib.crc32(mv[:pos]) & 0xFFFF
        if want != got:
            raise _corrupt("gzip", f"header CRC {want:#06x} != computed {got:#06x}")
        pos += 2
    if pos > n - 8:
        raise _corrupt("gzip", "header runs into the trailer")
    return pos


def _gzip(head: memoryview, tail: memoryview, n: int) -> RawStream:
    pos = _gzip_header_end(head, n)
    crc, isize = struct.unpack("<II", tail[len(tail) - 8 :])
    return RawStream(
        algorithm="Deflate", offset=pos, length=n - 8 - pos, decoded_size=isize, crc32=crc
    )


def locate_lz4(data: Buf) -> RawStream:
    """Locate the raw LZ4 block after numcodecs' 4-byte little-endian size prefix."""
    return _lz4(_u8(data), _u8(data), memoryview(data).nbytes)


def _lz4(head: memoryview, tail: memoryview, n: int) -> RawStream:
    if n < 4:
        raise _corrupt("lz4", f"{n} bytes, shorter than the 4-byte size header")
    size = int.from_bytes(head[:4], "little", signed=True)
    if size < 0:
        raise _corrupt("lz4", f"negative decoded size {size}")
    return RawStream(algorithm="LZ4", offset=4, length=n - 4, decoded_size=size)


def locate_zstd(data: Buf) -> RawStream:
    """Check a zstd frame header; the whole frame is the raw stream."""
    return _zstd(_u8(data), _u8(data), memoryview(data).nbytes)


def _zstd(head: memoryview, tail: memoryview, n: int) -> RawStream:
    magic = int.from_bytes(head[:4], "little") if len(head) >= 4 else None
    if magic is not None and magic & 0xFFFFFFF0 == _SKIPPABLE_MAGIC and n >= 8:
        # numcodecs and zarr read past a skippable frame; nvCOMP's RAW zstd starts at a frame.
        raise UnsupportedError("zstd chunk starts with a skippable frame: decoded on the CPU")
    if n < 6 or len(head) < 6 or magic != _ZSTD_MAGIC:
        raise _corrupt("zstd", "bad magic number")
    fhd = head[4]
    if fhd & 0x08:
        raise _corrupt("zstd", f"reserved frame header bit set ({fhd:#04x})")
    return RawStream(
        algorithm="Zstd",
        offset=0,
        length=n,
        decoded_size=zstd_content_size(head),
        zstd_checksum=bool(fhd & 0x04),
    )


_LOCATORS = {"zlib": _zlib, "gzip": _gzip, "lz4": _lz4, "zstd": _zstd}
#: Bytes of trailer each wrapper ends with (zlib: Adler-32; gzip: CRC-32 and size).
TRAILER_BYTES = {"zlib": 4, "gzip": 8, "lz4": 0, "zstd": 0}


def prefix_length(compressor: str, head: Buf, size: int) -> int:
    """Bytes of wrapper before the raw stream of an ``size``-byte chunk, from its first bytes.

    Raises
    ------
    CorruptChunkError
        For a malformed gzip header.
    UnsupportedError
        For other compressors, or a gzip header longer than ``head``.
    """
    if compressor == "gzip":
        return _gzip_header_end(_u8(head), size)
    fixed = {"zlib": 2, "lz4": 4, "zstd": 0}.get(compressor)
    if fixed is None:
        raise UnsupportedError(f"compressor '{compressor}' has no raw-stream GPU path")
    return fixed


def locate(compressor: str, data: Buf, expected_size: int | None = None) -> RawStream:
    """Check the wrapper of one compressed chunk and locate its raw stream.

    Parameters
    ----------
    compressor : {"zlib", "gzip", "lz4", "zstd"}
        numcodecs codec id.
    data : buffer
        The compressed chunk.
    expected_size : int, optional
        Decoded size metadata promises; checked against what the wrapper declares.

    Raises
    ------
    CorruptChunkError
        If the wrapper is malformed or declares another decoded size.
    UnsupportedError
        For other compressors and wrapper features cuzarr does not decode on the GPU.
    """
    return locate_parts(compressor, data, data, memoryview(data).nbytes, expected_size)


def locate_parts(
    compressor: str, head: Buf, tail: Buf, size: int, expected_size: int | None = None
) -> RawStream:
    """:func:`locate` for a chunk of which the host holds only the first and last bytes.

    Parameters
    ----------
    compressor : {"zlib", "gzip", "lz4", "zstd"}
        numcodecs codec id.
    head, tail : buffer
        The chunk's first bytes (at least its header) and last bytes (at least its trailer,
        ``TRAILER_BYTES``); both may be the whole chunk.
    size : int
        The chunk's size in bytes.
    expected_size : int, optional
        As for :func:`locate`.
    """
    fn = _LOCATORS.get(compressor)
    if fn is None:
        raise UnsupportedError(f"compressor '{compressor}' has no raw-stream GPU path")
    tail_u8 = _u8(tail)
    if len(tail_u8) < min(size, TRAILER_BYTES[compressor]):
        raise UnsupportedError(f"{compressor} trailer: only {len(tail_u8)} bytes at hand")
    raw = fn(_u8(head), tail_u8, size)
    if expected_size is not None and raw.decoded_size is not None:
        declared = raw.decoded_size
        want = expected_size & 0xFFFFFFFF if compressor == "gzip" else expected_size
        if compressor == "zstd" and declared < want:
            # Its first frame may be one of several (numcodecs and zarr read those): the
            # CPU decodes it, and says if it is corrupt.
            raise UnsupportedError(
                f"zstd frame declares {declared} of {expected_size} decoded bytes"
                " (several frames?): decoded on the CPU"
            )
        if declared != want:
            raise _corrupt(
                compressor, f"declares {declared} decoded bytes, expected {expected_size}"
            )
    return raw


def verify(raw: RawStream, decoded: Buf) -> None:
    """Check decoded bytes against the trailer's size and checksum (CPU helper).

    Raises
    ------
    CorruptChunkError
        On a size or checksum mismatch.
    """
    mv = memoryview(decoded).cast("B")
    name = raw.algorithm.lower()
    if raw.decoded_size is not None:
        n = len(mv) & 0xFFFFFFFF if raw.crc32 is not None else len(mv)
        if n != raw.decoded_size:
            raise _corrupt(name, f"decoded {len(mv)} bytes, trailer says {raw.decoded_size}")
    if raw.adler32 is not None and zlib.adler32(mv) != raw.adler32:
        raise _corrupt("zlib", "Adler-32 mismatch")
    if raw.crc32 is not None and zlib.crc32(mv) != raw.crc32:
        raise _corrupt("gzip", "CRC-32 mismatch")


def wrap(
    compressor: str, raw: Buf, decoded: Buf | None, decoded_size: int, *, crc32: int | None = None
) -> bytes:
    """Wrap a raw stream as numcodecs writes it (for GPU-encoded chunks).

    Parameters
    ----------
    compressor : {"zlib", "gzip", "lz4", "zstd"}
        numcodecs codec id.
    raw : buffer
        The raw stream (a whole zstd frame for zstd).
    decoded : buffer or None
        The uncompressed bytes, for the zlib and gzip checksums (on the host). ``None`` is
        only allowed for lz4, zstd, and gzip given ``crc32``.
    decoded_size : int
        Uncompressed size.
    crc32 : int, optional
        gzip: the CRC-32 of the uncompressed bytes, computed elsewhere (on the device).

    Returns
    -------
    bytes
        The chunk bytes numcodecs' codec of that id decodes.
    """
    body = bytes(memoryview(raw).cast("B"))
    if compressor == "zstd":
        return body
    if compressor == "lz4":
        return struct.pack("<i", decoded_size) + body
    if compressor == "gzip" and crc32 is not None:
        header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
        return header + body + struct.pack("<II", crc32, decoded_size & 0xFFFFFFFF)
    if decoded is None:
        raise ValueError(f"{compressor}: the uncompressed bytes are needed for the checksum")
    if compressor == "zlib":
        # CMF 0x78: deflate, 32 KiB window; FLG 0x9C: default level, check bits.
        return b"\x78\x9c" + body + struct.pack(">I", zlib.adler32(memoryview(decoded)))
    if compressor == "gzip":
        return wrap(compressor, raw, None, decoded_size, crc32=zlib.crc32(memoryview(decoded)))
    raise UnsupportedError(f"compressor '{compressor}' has no GPU encoder")
