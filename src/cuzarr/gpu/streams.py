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

__all__ = ["RawStream", "locate", "verify", "wrap"]

_FTEXT, _FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 1, 2, 4, 8, 16
_ZSTD_MAGIC = 0xFD2FB528


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


def locate_zlib(data: Buf) -> RawStream:
    """Check a zlib wrapper (RFC 1950) and locate its raw deflate stream."""
    mv = memoryview(data).cast("B")
    if len(mv) < 6:
        raise _corrupt("zlib", f"{len(mv)} bytes, shorter than header and trailer")
    cmf, flg = mv[0], mv[1]
    if cmf & 0x0F != 8 or cmf >> 4 > 7:
        raise _corrupt("zlib", f"compression method byte {cmf:#04x} is not deflate")
    if (cmf << 8 | flg) % 31:
        raise _corrupt("zlib", f"header check bits fail (CMF {cmf:#04x}, FLG {flg:#04x})")
    if flg & 0x20:
        raise UnsupportedError("zlib stream uses a preset dictionary")
    (adler,) = struct.unpack(">I", mv[len(mv) - 4 :])
    return RawStream(algorithm="Deflate", offset=2, length=len(mv) - 6, adler32=adler)


def locate_gzip(data: Buf) -> RawStream:
    """Check a single-member gzip header (RFC 1952) and locate its raw deflate stream."""
    mv = memoryview(data).cast("B")
    n = len(mv)
    if n < 18:
        raise _corrupt("gzip", f"{n} bytes, shorter than header and trailer")
    if mv[0] != 0x1F or mv[1] != 0x8B:
        raise _corrupt("gzip", "bad magic bytes")
    if mv[2] != 8:
        raise _corrupt("gzip", f"compression method {mv[2]} is not deflate")
    flg = mv[3]
    if flg & 0xE0:
        raise _corrupt("gzip", f"reserved flag bits set ({flg:#04x})")
    pos = 10
    if flg & _FEXTRA:
        if pos + 2 > n:
            raise _corrupt("gzip", "truncated extra field")
        xlen = mv[pos] | mv[pos + 1] << 8
        pos += 2 + xlen
    for flag, what in ((_FNAME, "file name"), (_FCOMMENT, "comment")):
        if flg & flag:
            end = bytes(mv[pos : n - 8]).find(b"\0")
            if end < 0:
                raise _corrupt("gzip", f"unterminated {what}")
            pos += end + 1
    if flg & _FHCRC:
        if pos + 2 > n - 8:
            raise _corrupt("gzip", "truncated header CRC")
        want = mv[pos] | mv[pos + 1] << 8
        got = zlib.crc32(mv[:pos]) & 0xFFFF
        if want != got:
            raise _corrupt("gzip", f"header CRC {want:#06x} != computed {got:#06x}")
        pos += 2
    if pos > n - 8:
        raise _corrupt("gzip", "header runs into the trailer")
    crc, isize = struct.unpack("<II", mv[n - 8 :])
    return RawStream(
        algorithm="Deflate", offset=pos, length=n - 8 - pos, decoded_size=isize, crc32=crc
    )


def locate_lz4(data: Buf) -> RawStream:
    """Locate the raw LZ4 block after numcodecs' 4-byte little-endian size prefix."""
    mv = memoryview(data).cast("B")
    if len(mv) < 4:
        raise _corrupt("lz4", f"{len(mv)} bytes, shorter than the 4-byte size header")
    size = int.from_bytes(mv[:4], "little", signed=True)
    if size < 0:
        raise _corrupt("lz4", f"negative decoded size {size}")
    return RawStream(algorithm="LZ4", offset=4, length=len(mv) - 4, decoded_size=size)


def locate_zstd(data: Buf) -> RawStream:
    """Check a zstd frame header; the whole frame is the raw stream."""
    mv = memoryview(data).cast("B")
    if len(mv) < 6 or int.from_bytes(mv[:4], "little") != _ZSTD_MAGIC:
        raise _corrupt("zstd", "bad magic number")
    fhd = mv[4]
    if fhd & 0x08:
        raise _corrupt("zstd", f"reserved frame header bit set ({fhd:#04x})")
    return RawStream(
        algorithm="Zstd",
        offset=0,
        length=len(mv),
        decoded_size=zstd_content_size(mv),
        zstd_checksum=bool(fhd & 0x04),
    )


_LOCATORS = {"zlib": locate_zlib, "gzip": locate_gzip, "lz4": locate_lz4, "zstd": locate_zstd}


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
    fn = _LOCATORS.get(compressor)
    if fn is None:
        raise UnsupportedError(f"compressor '{compressor}' has no raw-stream GPU path")
    raw = fn(data)
    if expected_size is not None and raw.decoded_size is not None:
        declared = raw.decoded_size
        want = expected_size & 0xFFFFFFFF if compressor == "gzip" else expected_size
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


def wrap(compressor: str, raw: Buf, decoded: Buf | None, decoded_size: int) -> bytes:
    """Wrap a raw stream as numcodecs writes it (for GPU-encoded chunks).

    Parameters
    ----------
    compressor : {"zlib", "gzip", "lz4", "zstd"}
        numcodecs codec id.
    raw : buffer
        The raw stream (a whole zstd frame for zstd).
    decoded : buffer or None
        The uncompressed bytes, for the zlib and gzip checksums (on the host). ``None`` is
        only allowed for lz4 and zstd.
    decoded_size : int
        Uncompressed size.

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
    if decoded is None:
        raise ValueError(f"{compressor}: the uncompressed bytes are needed for the checksum")
    if compressor == "zlib":
        # CMF 0x78: deflate, 32 KiB window; FLG 0x9C: default level, check bits.
        return b"\x78\x9c" + body + struct.pack(">I", zlib.adler32(memoryview(decoded)))
    if compressor == "gzip":
        header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
        trailer = struct.pack("<II", zlib.crc32(memoryview(decoded)), decoded_size & 0xFFFFFFFF)
        return header + body + trailer
    raise UnsupportedError(f"compressor '{compressor}' has no GPU encoder")
