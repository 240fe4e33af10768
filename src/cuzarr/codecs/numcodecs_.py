"""numcodecs codecs as cuzarr codecs: compressors, checksums and filters.

Used for the v3 ``zstd``, ``gzip`` and ``blosc`` codecs (configured from their v3 JSON), for
``numcodecs.*`` codecs in v3 metadata and for every v2 filter and compressor. numcodecs'
compressors release the GIL, so the engine's threads decode in parallel.

Decoding is bounded: with the expected size known, a frame must decode to exactly that many
bytes and decompression stops one byte past it (no decompression bomb), header-declared sizes
are checked before any allocation. Without it (a compressor stacked outside another, a
compressor after ``sharding_indexed``) the bound is ``Settings.max_chunk_nbytes`` plus 1/8.
"""

from __future__ import annotations

import bz2
import lzma
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numcodecs
import numcodecs.blosc
import numpy as np
import numpy.typing as npt
import zstandard
from numcodecs.abc import Codec as Numcodec

from cuzarr.codecs import zstd_batch
from cuzarr.codecs.base import Buf, as_u8
from cuzarr.codecs.headers import (
    blosc_nbytes,
    lz4_numcodecs_nbytes,
    zstd_content_size,
    zstd_max_decoded_size,
)
from cuzarr.errors import CorruptChunkError

__all__ = [
    "NumcodecsArrayCodec",
    "check_blosc_frame",
    "NumcodecsBytesCodec",
    "make_numcodec",
    "zstd_decode_many",
    "zstd_encode_many",
    "zstd_frame_bound",
]

#: numcodecs ids whose frames declare their decoded size, with the header parser.
_SIZE_PARSERS: dict[str, Callable[[Buf], int | None]] = {
    "zstd": zstd_content_size,
    "blosc": blosc_nbytes,
    "lz4": lz4_numcodecs_nbytes,
}

#: numcodecs ids that are fixed-size checksums: id -> bytes added.
_CHECKSUM_SIZES = {"crc32": 4, "crc32c": 4, "adler32": 4, "fletcher32": 4, "jenkins_lookup3": 4}


def check_blosc_frame(data: Buf, name: str) -> None:
    """Refuse a Blosc frame shorter than its 16-byte header or than the size that header gives.

    c-blosc (through numcodecs) reads the header, then the blocks where the header's offsets
    point, trusting its compressed size without knowing the buffer's: a shorter buffer is read
    past its end (a chunk file read into a reused buffer then decodes what an earlier, longer
    chunk left there). Bytes after the frame are ignored, as numcodecs ignores them.

    Raises
    ------
    CorruptChunkError
        If ``data`` is shorter than 16 bytes or than the header's compressed size.
    """
    mv = memoryview(data).cast("B")
    if len(mv) < 16:
        raise CorruptChunkError(
            f"{name} frame of {len(mv)} bytes is shorter than its 16-byte header"
        )
    cbytes = int.from_bytes(mv[12:16], "little")
    if cbytes > len(mv):
        raise CorruptChunkError(
            f"{name} frame header gives {cbytes} compressed bytes, the chunk holds {len(mv)}"
        )


class _Stream:
    """How to inflate one numcodecs stream format with a bounded output size."""

    def __init__(
        self, make: Callable[[Any], Any], *, multi: bool, lenient_tail: bool, pad: bool = False
    ) -> None:
        self.make = make  # codec instance -> fresh decompressor object
        self.multi = multi  # concatenated streams/members decode as one
        self.lenient_tail = lenient_tail  # garbage after the first stream is ignored
        self.pad = pad  # zero bytes between members are skipped (gzip)


_LZMA_MEMLIMIT = 256 * 1024 * 1024

#: Stream compressors decoded here with ``max_length`` (same results as numcodecs' decode,
#: which calls the unbounded one-shot functions of the standard library).
_STREAMS: dict[str, _Stream] = {
    "zlib": _Stream(lambda c: zlib.decompressobj(), multi=False, lenient_tail=True),
    "gzip": _Stream(lambda c: zlib.decompressobj(31), multi=True, lenient_tail=False, pad=True),
    "bz2": _Stream(lambda c: bz2.BZ2Decompressor(), multi=True, lenient_tail=False),
    "lzma": _Stream(
        lambda c: lzma.LZMADecompressor(
            format=c.format,
            filters=c.filters,
            # A stream declares its dictionary size; bound it (xz's largest preset uses 64 MiB).
            memlimit=None if c.format == lzma.FORMAT_RAW else _LZMA_MEMLIMIT,
        ),
        multi=True,
        lenient_tail=True,
    ),
}

#: dtype kinds whose arrays export the buffer protocol as they are (numcodecs views the
#: others, datetimes for instance, before compressing).
_BUFFER_KINDS = frozenset("biufc")

_STREAM_ERRORS = (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError)


#: ``Settings.max_chunk_nbytes``'s default: what one chunk may decode to.
DEFAULT_MAX_CHUNK_NBYTES = 2**31


def unsized_limit(max_chunk_nbytes: int) -> int:
    """Bound on decoded bytes when the chain cannot tell the expected size."""
    return max_chunk_nbytes + max_chunk_nbytes // 8 + 65536


def _inflate(stream: _Stream, codec: Numcodec, data: Buf, limit: int, name: str) -> bytearray:
    """Decompress a stream format, never producing more than ``limit`` bytes."""
    out = bytearray()
    rest = bytes(as_u8(data))
    first = True
    while first or (stream.multi and rest):
        decompressor = stream.make(codec)
        try:
            out += decompressor.decompress(rest, limit + 1 - len(out))
        except _STREAM_ERRORS:
            if not first and stream.lenient_tail:
                break
            raise
        if len(out) > limit:
            raise CorruptChunkError(
                f"{name} stream decodes to more than the {limit} bytes expected"
            )
        if not decompressor.eof:
            raise CorruptChunkError(f"{name} stream is truncated (no end-of-stream marker)")
        rest = decompressor.unused_data
        if stream.pad:
            rest = rest.lstrip(b"\0")
        first = False
    return out


_zstd_local = threading.local()

#: Zstd chunks of at least this many bytes are decoded by one call of numcodecs' libzstd
#: (``ZSTD_decompressDCtx``) rather than python-zstandard's ``stream_reader``. Measured (minimum
#: of 12-20 passes, one thread): (f)'s 1 MiB chunks 1,029 against 1,108 us, (a)'s 512 KiB
#: chunks 556 against 578 us; on (e)'s 8 KiB chunks the call's Python set-up (~3.7 us against
#: the stream's ~2) made it slower, 15.5 against 13.9 us, though the decoding itself is level.
ZSTD_ONE_CALL_MIN = 64 * 1024


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """The calling thread's decompression context (reused)."""
    dctx = getattr(_zstd_local, "dctx", None)
    if dctx is None:
        dctx = _zstd_local.dctx = zstandard.ZstdDecompressor()
    return dctx


def _zstd_decode_into(data: Buf, out: npt.NDArray[np.uint8], name: str) -> None:
    """Decode one zstd frame into ``out`` with this thread's reused decompression context.

    Chunks of :data:`ZSTD_ONE_CALL_MIN` bytes or more first in one call of numcodecs' libzstd
    (:func:`zstd_batch.decode_into`); where that is not available or does not fill ``out``
    exactly, and for smaller chunks, with python-zstandard's streaming decoder, which names
    what is wrong. Either keeps its context between calls (numcodecs creates one per call,
    which costs ~10 us: more than decoding an 8 KiB chunk) and releases the GIL while
    decoding. Frames are decoded exactly as numcodecs' ``Zstd.decode`` would (same format).
    """
    if out.nbytes >= ZSTD_ONE_CALL_MIN and zstd_batch.decode_into(as_u8(data), out):
        return
    dctx = _zstd_decompressor()
    view = memoryview(out).cast("B")
    n = len(view)
    got = 0
    try:
        with dctx.stream_reader(memoryview(as_u8(data)), read_across_frames=True) as reader:
            while got < n:
                k = reader.readinto(view[got:])
                if k == 0:
                    break
                got += k
            extra = reader.read(1) if got == n else b""
    except zstandard.ZstdError as exc:
        raise CorruptChunkError(f"{name} frame is corrupt: {exc}") from exc
    if got != n or extra:
        raise CorruptChunkError(
            f"{name} frame decodes to {'more than ' if extra else ''}{got} bytes, expected {n}"
        )


def zstd_frame_bound(size: int) -> int:
    """The largest well-formed zstd frame of ``size`` decoded bytes (``ZSTD_COMPRESSBOUND``).

    Plus room for a frame header and checksum: anything longer is not one frame of that size.
    """
    small = ((128 << 10) - size) >> 11 if size < (128 << 10) else 0
    return size + (size >> 8) + small + 64


def zstd_decode_many(frames: list[Buf], size: int, name: str = "zstd") -> Any:
    """Decode many single zstd frames of ``size`` decoded bytes each in one call.

    python-zstandard decodes the whole list in C without the GIL (``multi_decompress_to_buffer``
    with this thread's context), so engine threads overlap their Python work with each other's
    decoding instead of handing the GIL back and forth once per chunk. Output buffers have
    exactly ``size`` bytes: a frame that declares or decodes to another size fails the call.

    Returns
    -------
    zstandard.BufferWithSegmentsCollection
        Item ``i`` is the decoded bytes of ``frames[i]`` (it owns the memory: keep it alive
        while the items are used).

    Raises
    ------
    CorruptChunkError
        If any frame is not one well-formed frame of exactly ``size`` decoded bytes (the
        caller retries chunk by chunk to name the culprit; multi-frame chunks also land there).
    """
    if not frames:
        # python-zstandard 0.25 dies of SIGFPE on an empty list instead of returning nothing.
        return []
    views: list[bytes | bytearray | memoryview] = [
        f if isinstance(f, bytes) else memoryview(as_u8(f)) for f in frames
    ]
    if not all(len(v) for v in views):
        # No zstd frame is empty; python-zstandard raises a bare ValueError ("must pass at
        # least 1 argument") for a batch of empty ones.
        raise CorruptChunkError(f"{name} batch: an empty chunk")
    dctx = _zstd_decompressor()
    sizes = np.full(len(frames), size, np.uint64).tobytes()
    try:
        return dctx.multi_decompress_to_buffer(
            views,
            decompressed_sizes=sizes,
            threads=1,
        )
    except zstandard.ZstdError as exc:
        raise CorruptChunkError(f"{name} batch: {exc}") from exc


def _zstd_compressor(level: int, checksum: bool) -> zstandard.ZstdCompressor:
    """The calling thread's python-zstandard context for ``level`` and the checksum flag."""
    cache: dict[tuple[int, bool], zstandard.ZstdCompressor] | None = getattr(
        _zstd_local, "cctx", None
    )
    if cache is None:
        cache = _zstd_local.cctx = {}
    cctx = cache.get((level, checksum))
    if cctx is None:
        # numcodecs' frame options: content size written, no dictionary id, checksum as set.
        cctx = cache[(level, checksum)] = zstandard.ZstdCompressor(
            level=level, write_checksum=checksum, write_content_size=True, write_dict_id=False
        )
    return cctx


def zstd_encode(data: Buf, level: int, checksum: bool) -> bytes:
    """One zstd frame of ``data`` with python-zstandard (``Settings.zstd_encoder="zstandard"``)."""
    return _zstd_compressor(level, checksum).compress(memoryview(as_u8(data)))


def zstd_encode_many(
    inputs: list[npt.NDArray[np.uint8]], level: int, checksum: bool, encoder: str = "zstandard"
) -> list[Buf]:
    """Compress flat ``uint8`` inputs to one zstd frame each.

    ``encoder`` is ``Settings.zstd_encoder``. ``"zstandard"``: python-zstandard's
    ``multi_compress_to_buffer``, one GIL-free call for the list with this thread's reused
    context (numcodecs creates a context per call: ~40 us of an 8 KiB chunk's ~80 us); valid
    frames, not numcodecs' bytes. ``"numcodecs"``: numcodecs encodes each (its bytes).
    """
    if not inputs:
        return []
    # Empty inputs (none in a valid array: chunks have at least one element) stay with
    # numcodecs, whose frame for them is what zarr-python writes.
    if encoder == "zstandard" and all(x.nbytes for x in inputs):
        cctx = _zstd_compressor(level, checksum)
        # BufferSegments expose the buffer protocol (their stubs do not say so).
        frames: Any = cctx.multi_compress_to_buffer(
            [memoryview(as_u8(x)) for x in inputs], threads=1
        )
        return [np.frombuffer(frames[i], np.uint8) for i in range(len(inputs))]
    codec = numcodecs.Zstd(level=level, checksum=checksum)
    return [codec.encode(x) for x in inputs]


def make_numcodec(config: dict[str, Any]) -> Numcodec:
    """Instantiate a numcodecs codec from its configuration (``{"id": ..., ...}``)."""
    return numcodecs.get_codec(dict(config))


@dataclass(frozen=True, slots=True)
class NumcodecsBytesCodec:
    """A numcodecs compressor or checksum used as a ``bytes -> bytes`` codec.

    Parameters
    ----------
    name : str
        The codec name as metadata spells it (for messages).
    codec : numcodecs.abc.Codec
        The numcodecs codec instance (thread-safe for decode and encode).
    max_chunk_nbytes : int
        Where the chain cannot tell the decoded size, output is bounded by this plus 1/8
        (``Settings.max_chunk_nbytes`` of the array, fixed when the chain is built).
    typesize : int or None
        The ``typesize`` of the configuration ``codec`` was made from (blosc: the element
        size it shuffles by; ``None``: the input's item size). numcodecs does not report it.
    zstd_encoder : str
        ``Settings.zstd_encoder`` (zstd only): ``"zstandard"`` or ``"numcodecs"``.
    """

    name: str
    codec: Numcodec
    max_chunk_nbytes: int = DEFAULT_MAX_CHUNK_NBYTES
    typesize: int | None = None
    zstd_encoder: str = "zstandard"

    @property
    def stream_format(self) -> str:
        """The format of the streams it reads and writes: the numcodecs id (``zstd``, ...)."""
        return str(self.codec.codec_id)

    def decode(self, data: Buf, size_hint: int | None) -> Buf:
        """Decode a frame to exactly ``size_hint`` bytes (when known), bounded in any case.

        Raises
        ------
        CorruptChunkError
            If the frame declares or decodes to another size, or to more than the bound, or
            is a Blosc frame shorter than its header says (:func:`check_blosc_frame`).
        """
        codec_id = self.codec.codec_id
        if codec_id == "blosc":
            check_blosc_frame(data, self.name)
        limit = size_hint if size_hint is not None else unsized_limit(self.max_chunk_nbytes)
        decoded: Buf
        stream = _STREAMS.get(codec_id)
        parser = _SIZE_PARSERS.get(codec_id)
        if stream is not None:
            decoded = _inflate(stream, self.codec, data, limit, self.name)
        elif parser is not None:
            declared = parser(data)
            # A zstd chunk may hold several frames (numcodecs decodes them all): its first
            # frame may declare less than the chunk, never more.
            short_ok = codec_id == "zstd"
            if declared is not None and (
                declared > limit
                or (
                    size_hint is not None
                    and declared != size_hint
                    and not (short_ok and declared < size_hint)
                )
            ):
                raise CorruptChunkError(
                    f"{self.name} frame declares {declared} decoded bytes, expected "
                    + (f"{size_hint}" if size_hint is not None else f"at most {limit}")
                )
            if size_hint is not None:
                # Decoders never write past ``out`` (numcodecs' blosc and lz4 refuse to).
                out = np.empty(size_hint, np.uint8)
                if codec_id == "zstd":
                    _zstd_decode_into(data, out, self.name)
                else:
                    self._decode_out(data, out)
                return out
            if declared is None and codec_id == "zstd":
                bound = zstd_max_decoded_size(data)
                if bound is not None and bound > limit:
                    raise CorruptChunkError(
                        f"zstd frame without a content size may decode to {bound} bytes, over "
                        f"the bound of {limit} (max_chunk_nbytes)"
                    )
            decoded = self.codec.decode(data)
        else:
            decoded = self.codec.decode(data)
        if size_hint is not None and memoryview(decoded).nbytes != size_hint:
            raise CorruptChunkError(
                f"{self.name} decoded {memoryview(decoded).nbytes} bytes, expected {size_hint}"
            )
        return decoded

    def decode_into(self, data: Buf, out: npt.NDArray[np.uint8]) -> bool:
        """Decode straight into ``out`` when the frame declares exactly ``out``'s size."""
        if self.codec.codec_id == "blosc":
            check_blosc_frame(data, self.name)
        parser = _SIZE_PARSERS.get(self.codec.codec_id)
        if parser is None:
            return False
        declared = parser(data)
        if declared is None:
            return False
        if self.codec.codec_id == "zstd" and declared < out.nbytes:
            # Several frames (numcodecs decodes them all): decoded across frames, bounded by
            # ``out`` and checked to fill it exactly.
            _zstd_decode_into(data, out, self.name)
            return True
        if declared != out.nbytes:
            raise CorruptChunkError(
                f"{self.name} frame declares {declared} decoded bytes, expected {out.nbytes}"
            )
        if self.codec.codec_id == "zstd":
            _zstd_decode_into(data, out, self.name)
        else:
            self._decode_out(data, out)
        return True

    def _decode_out(self, data: Buf, out: npt.NDArray[np.uint8]) -> None:
        """Decode a frame whose declared size is ``out``'s into ``out`` (checked by the caller).

        Blosc frames go straight to ``numcodecs.blosc.decompress``: ``Blosc.decode`` adds
        ~5 us of argument normalisation per call (more than decoding an 8 KiB chunk), and the
        caller has already checked the size the header declares.
        """
        if isinstance(self.codec, numcodecs.Blosc):
            try:
                numcodecs.blosc.decompress(data, out)
            except RuntimeError as exc:
                raise CorruptChunkError(f"{self.name} frame is corrupt: {exc}") from exc
            return
        self.codec.decode(data, out=out)

    def encode(self, data: Buf) -> Buf:
        """Encode a contiguous buffer (numcodecs: chunks byte-identical to zarr-python's).

        Blosc encodes contiguous arrays with ``numcodecs.blosc.compress`` and the codec's own
        arguments, as ``Blosc.encode`` does after ~5 us of argument normalisation per call.
        """
        codec = self.codec
        if isinstance(codec, numcodecs.Zstd) and self.zstd_encoder == "zstandard":
            # Any contiguous layout and dtype, in memory order (as numcodecs takes them).
            u8 = as_u8(data)
            if u8.nbytes:
                return zstd_encode(u8, int(codec.level), bool(codec.checksum))
        if (
            isinstance(codec, numcodecs.Blosc)
            and isinstance(data, np.ndarray)
            and data.dtype.kind in _BUFFER_KINDS
            and data.flags.c_contiguous
            and data.nbytes <= numcodecs.blosc.MAX_BUFFERSIZE
        ):
            return numcodecs.blosc.compress(
                data,
                codec.cname.encode("ascii"),
                codec.clevel,
                codec.shuffle,
                codec.blocksize,
                self.typesize,
            )
        return codec.encode(data)

    @property
    def light(self) -> bool:
        """Whether it runs at gigabytes per second (blosc with lz4 or blosclz, lz4).

        A small chunk is then a few microseconds of GIL-free work, less than handing the GIL
        to another thread costs (see :attr:`cuzarr.codecs.chain.ChunkCodec.light`).
        """
        codec = self.codec
        if isinstance(codec, numcodecs.Blosc):
            return codec.cname in ("lz4", "blosclz")
        return str(codec.codec_id) == "lz4"

    @property
    def batch_encodes(self) -> bool:
        """Whether :meth:`encode_many` compresses in one batched call (zstd, python-zstandard)."""
        return isinstance(self.codec, numcodecs.Zstd) and self.zstd_encoder == "zstandard"

    def encode_many(self, inputs: list[npt.NDArray[np.uint8]]) -> list[Buf]:
        """Encode many flat ``uint8`` buffers: :meth:`encode`'s frames, byte for byte.

        zstd inputs go to :func:`zstd_encode_many` (one GIL-free call with the batch helper);
        other codecs are encoded one by one with numcodecs.
        """
        codec = self.codec
        if isinstance(codec, numcodecs.Zstd):
            return zstd_encode_many(
                inputs, int(codec.level), bool(codec.checksum), self.zstd_encoder
            )
        return [self.codec.encode(x) for x in inputs]

    def encoded_size(self, nbytes: int) -> int | None:
        """Checksums add a fixed number of bytes; compressors are variable."""
        extra = _CHECKSUM_SIZES.get(self.codec.codec_id)
        return None if extra is None else nbytes + extra


@dataclass(frozen=True, slots=True)
class NumcodecsArrayCodec:
    """A numcodecs filter used as an ``array -> array`` codec (v3 ``numcodecs.delta`` etc.).

    Parameters
    ----------
    name : str
        The codec name as metadata spells it.
    codec : numcodecs.abc.Codec
        The numcodecs codec instance.
    encoded_dtype : numpy.dtype or None
        The dtype of encoded arrays when the codec changes it (``astype``), else ``None``.
    """

    name: str
    codec: Numcodec
    encoded_dtype: np.dtype[Any] | None = None

    def resolve(
        self, shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """Filters keep the shape; ``astype`` filters change the dtype."""
        return shape, (self.encoded_dtype or dtype)

    def decode(
        self, arr: npt.NDArray[Any], shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> npt.NDArray[Any]:
        """Decode, then restore the chunk's shape."""
        out = np.asarray(self.codec.decode(arr))
        return out.reshape(shape)

    def encode(self, arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Encode a C-contiguous copy (numcodecs flattens in memory order)."""
        return np.asarray(self.codec.encode(np.ascontiguousarray(arr))).reshape(arr.shape)


def as_bytes_view(data: Buf) -> npt.NDArray[np.uint8]:
    """Return ``data`` as a flat ``uint8`` array (re-exported for codec modules)."""
    return as_u8(data)
