"""Codec chains compiled for one chunk shape and dtype (built by :mod:`cuzarr.codecs.build`).

A :class:`ChunkCodec` turns stored bytes into a decoded chunk and back. It is compiled once per
array (and once more for a sharded array's inner chunks and index), so the per-chunk hot path
does no metadata lookups. :meth:`ChunkCodec.decode_into` writes straight into a destination
buffer when the chain allows (no array-to-array codecs, native byte order, a final compressor
whose frames declare their size): one decompression, no intermediate copy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import ArrayToArray, ArrayToBytes, Buf, BytesToBytes, as_u8
from cuzarr.codecs.blosc_batch import BloscParams
from cuzarr.codecs.bytes_ import BytesCodec
from cuzarr.codecs.numcodecs_ import (
    NumcodecsArrayCodec,
    NumcodecsBytesCodec,
    zstd_frame_bound,
)
from cuzarr.codecs.sharding.format import ShardingCodec
from cuzarr.errors import CorruptChunkError

__all__ = ["LIGHT_CHUNK", "ZSTD_BATCH_ENCODE_MAX", "ChunkCodec", "V2ChunkCodec"]

#: zstd chunks up to this size encode in batches (:attr:`ChunkCodec.batch_encodes`): there a
#: call's fixed cost (numcodecs' fresh context, the GIL handed over) is a large share. Larger
#: ones encode one per task, which overlaps compression with the writes (measured on (a),
#: 512 KiB chunks: 16 per task 249 MB/s, one per task 274 MB/s; the encoder is as fast).
ZSTD_BATCH_ENCODE_MAX = 128 * 1024

#: Chunks up to this size through light codecs only (:attr:`ChunkCodec.light`) are a few
#: microseconds of codec work each.
LIGHT_CHUNK = 16 * 1024

def _batches(codec: BytesToBytes | None) -> bool:
    return isinstance(codec, NumcodecsBytesCodec) and codec.batch_encodes


@dataclass(frozen=True, slots=True)
class ChunkCodec:
    """A v3 codec chain compiled for one decoded chunk shape and dtype.

    Attributes
    ----------
    shape : tuple of int
        Decoded chunk shape.
    dtype : numpy.dtype
        Decoded (in-memory) dtype.
    array_codecs : tuple
        ``array -> array`` codecs, in encode order.
    array_bytes : ArrayToBytes
        The ``array -> bytes`` codec.
    bytes_codecs : tuple
        ``bytes -> bytes`` codecs, in encode order.
    """

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    array_codecs: tuple[ArrayToArray, ...]
    array_bytes: ArrayToBytes
    bytes_codecs: tuple[BytesToBytes, ...]
    _stages: tuple[tuple[tuple[int, ...], np.dtype[Any]], ...] = field(default=(), repr=False)
    #: ``(nbytes, direct, raw, zstd_frames)``, computed once: the per-chunk hot path asks.
    _flags: tuple[int, bool, bool, bool] = field(
        init=False, repr=False, compare=False, default=(0, False, False, False)
    )

    def __post_init__(self) -> None:
        ab = self.array_bytes
        direct = not self.array_codecs and isinstance(ab, BytesCodec) and ab.is_native(self.dtype)
        zstd = (
            direct
            and len(self.bytes_codecs) == 1
            and isinstance(self.bytes_codecs[0], NumcodecsBytesCodec)
            and self.bytes_codecs[0].stream_format == "zstd"
        )
        nbytes = math.prod(self.shape) * self.dtype.itemsize
        object.__setattr__(self, "_flags", (nbytes, direct, direct and not self.bytes_codecs, zstd))

    @classmethod
    def compile(
        cls,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        array_codecs: tuple[ArrayToArray, ...],
        array_bytes: ArrayToBytes,
        bytes_codecs: tuple[BytesToBytes, ...],
    ) -> ChunkCodec:
        """Build a chain, precomputing the shape and dtype after each array codec."""
        stages = [(shape, dtype)]
        for codec in array_codecs:
            stages.append(codec.resolve(*stages[-1]))
        return cls(shape, dtype, array_codecs, array_bytes, bytes_codecs, tuple(stages))

    @property
    def nbytes(self) -> int:
        """Decoded size of a chunk in bytes."""
        return self._flags[0]

    @property
    def direct(self) -> bool:
        """Whether stored bytes, once decompressed, are the chunk's C-order memory."""
        return self._flags[1]

    @property
    def raw(self) -> bool:
        """Whether stored bytes are exactly the chunk's C-order memory (no codec work)."""
        return self._flags[2]

    @property
    def zstd_frames(self) -> bool:
        """Whether stored bytes are one zstd frame of the chunk's C-order memory, nothing else."""
        return self._flags[3]

    @property
    def frame_bound(self) -> int | None:
        """For one-zstd-frame chains, the largest stored chunk that can be well formed."""
        return zstd_frame_bound(self.nbytes) if self.zstd_frames else None

    def _unwrap(self, raw: Buf) -> Buf:
        """Apply all but the first ``bytes -> bytes`` decoder (checksums, outer wrappers)."""
        data = raw
        for codec in reversed(self.bytes_codecs[1:]):
            data = codec.decode(data, None)
        return data

    def decode_bytes(self, raw: Buf) -> Buf:
        """Run the ``bytes -> bytes`` decoders, returning the array codec's input."""
        data = self._unwrap(raw)
        if self.bytes_codecs:
            hint = self._array_bytes_size()
            data = self.bytes_codecs[0].decode(data, hint)
        return data

    def _array_bytes_size(self) -> int | None:
        shape, dtype = self._stages[-1]
        return self.array_bytes.encoded_size(shape, dtype)

    def decode(self, raw: Buf) -> npt.NDArray[Any]:
        """Decode stored bytes to a chunk array of ``shape`` and ``dtype``."""
        data = self.decode_bytes(raw)
        shape, dtype = self._stages[-1]
        arr = self.array_bytes.decode(data, shape, dtype)
        for i in range(len(self.array_codecs) - 1, -1, -1):
            arr = self.array_codecs[i].decode(arr, *self._stages[i])
        return arr

    def decode_into(self, raw: Buf, out: npt.NDArray[Any]) -> None:
        """Decode stored bytes into ``out`` (shape ``shape``), avoiding copies when possible."""
        if self.direct and out.flags.c_contiguous and out.dtype == self.dtype:
            u8 = out.reshape(-1).view(np.uint8)
            data = self._unwrap(raw)
            if self.bytes_codecs:
                if self.bytes_codecs[0].decode_into(data, u8):
                    return
                data = self.bytes_codecs[0].decode(data, u8.nbytes)
            src = as_u8(data)
            if src.nbytes != u8.nbytes:
                raise CorruptChunkError(f"decoded {src.nbytes} bytes, expected {u8.nbytes}")
            u8[...] = src
            return
        out[...] = self.decode(raw)

    def encode(self, arr: npt.NDArray[Any]) -> Buf:
        """Encode a chunk array (shape ``shape``) to stored bytes."""
        for acodec in self.array_codecs:
            arr = acodec.encode(arr)
        data = self.array_bytes.encode(arr)
        for bcodec in self.bytes_codecs:
            data = bcodec.encode(data)
        return data

    @property
    def batch_encodes(self) -> bool:
        """Whether :meth:`encode_many` encodes in one GIL-free call (small zstd chunks).

        zstd chunks of at most :data:`ZSTD_BATCH_ENCODE_MAX` whose compressor batches
        (``NumcodecsBytesCodec.batch_encodes``).
        """
        return self.zstd_frames and self.nbytes <= ZSTD_BATCH_ENCODE_MAX and _batches(
            self.bytes_codecs[0] if self.bytes_codecs else None
        )

    @property
    def light(self) -> bool:
        """Whether a chunk is only a few microseconds of codec work (too little to share).

        Chunks of at most :data:`LIGHT_CHUNK` bytes in the stored byte order, without
        ``array -> array`` codecs, compressed (if at all) by a light codec only
        (:attr:`NumcodecsBytesCodec.light`: blosc lz4, lz4).
        """
        return (
            self.nbytes <= LIGHT_CHUNK
            and self.direct
            and all(isinstance(c, NumcodecsBytesCodec) and c.light for c in self.bytes_codecs)
        )

    @property
    def blosc_params(self) -> BloscParams | None:
        """The compressor's arguments when stored bytes are one Blosc frame of the chunk.

        That is: the chunk's memory in the stored byte order (:attr:`direct`), compressed by
        ``blosc`` with a known ``typesize`` and nothing else, so that
        :mod:`cuzarr.codecs.blosc_batch` may decode and encode it. ``None`` otherwise.
        """
        if not self.direct or len(self.bytes_codecs) != 1:
            return None
        codec = self.bytes_codecs[0]
        if not isinstance(codec, NumcodecsBytesCodec):
            return None
        return BloscParams.of(codec.codec, codec.typesize)

    def encode_many(self, arrs: Sequence[npt.NDArray[Any]]) -> list[Buf]:
        """Encode several chunk arrays: the same bytes as :meth:`encode` for each.

        zstd chunks (:attr:`batch_encodes`) are compressed in one batched call.
        """
        zstd = self.bytes_codecs[0] if self.bytes_codecs else None
        if len(arrs) > 1 and self.batch_encodes and isinstance(zstd, NumcodecsBytesCodec):
            return zstd.encode_many([as_u8(self.array_bytes.encode(a)) for a in arrs])
        return [self.encode(a) for a in arrs]

    def encoded_size(self) -> int | None:
        """Encoded size when every codec is fixed-size, else ``None``."""
        shape, dtype = self._stages[-1]
        size = self.array_bytes.encoded_size(shape, dtype)
        for codec in self.bytes_codecs:
            if size is None:
                return None
            size = codec.encoded_size(size)
        return size

    @property
    def nested_sharding(self) -> ShardingCodec | None:
        """The sharding codec when this chain's chunks are shards of the elements themselves.

        That is, no ``array -> array`` codec before it (``bytes -> bytes`` codecs may follow):
        the chain's chunks may then be encoded without their empty inner chunks
        (:meth:`encode_present`). ``None`` otherwise.
        """
        if isinstance(self.array_bytes, ShardingCodec) and not self.array_codecs:
            return self.array_bytes
        return None

    def encode_present(
        self,
        arr: Any,
        is_empty: Callable[[Any], bool],
        encode: Callable[[ChunkCodec, Sequence[Any]], Sequence[Buf]],
    ) -> Buf | None:
        """Encode a chunk that is a shard without its empty inner chunks (zarr's rule).

        For chains with :attr:`nested_sharding`: that codec's
        :meth:`~cuzarr.codecs.sharding.format.ShardingCodec.encode_present`, then the
        ``bytes -> bytes`` codecs. ``None`` when every inner chunk is empty.
        """
        sh = self.nested_sharding
        assert sh is not None
        data: Buf | None = sh.encode_present(arr, is_empty, encode)
        if data is None:
            return None
        for bcodec in self.bytes_codecs:
            data = bcodec.encode(data)
        return data

    @property
    def sharding(self) -> ShardingCodec | None:
        """The sharding codec when this chain is a plain sharded layout, else ``None``."""
        if (
            isinstance(self.array_bytes, ShardingCodec)
            and not self.array_codecs
            and not self.bytes_codecs
        ):
            return self.array_bytes
        return None


@dataclass(frozen=True, slots=True)
class V2ChunkCodec:
    """A Zarr v2 chunk encoding: filters and a compressor over elements in C or F order."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    order: str
    filters: tuple[NumcodecsArrayCodec, ...]
    compressor: NumcodecsBytesCodec | None

    @property
    def nbytes(self) -> int:
        """Decoded size of a chunk in bytes."""
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def direct(self) -> bool:
        """Whether decompressed bytes are the chunk's C-order memory."""
        return not self.filters and (self.order == "C" or len(self.shape) <= 1)

    @property
    def raw(self) -> bool:
        """Whether stored bytes are exactly the chunk's C-order memory (no codec work)."""
        return self.direct and self.compressor is None

    @property
    def zstd_frames(self) -> bool:
        """Whether stored bytes are one zstd frame of the chunk's C-order memory, nothing else."""
        return (
            self.direct
            and self.compressor is not None
            and self.compressor.stream_format == "zstd"
        )

    @property
    def frame_bound(self) -> int | None:
        """For one-zstd-frame chunks, the largest stored chunk that can be well formed."""
        return zstd_frame_bound(self.nbytes) if self.zstd_frames else None

    @property
    def sharding(self) -> None:
        """v2 has no sharding."""
        return None

    def decode(self, raw: Buf) -> npt.NDArray[Any]:
        """Decode stored bytes to a chunk array (as zarr-python's ``V2Codec`` does)."""
        # Filters may change the size (astype, packbits): the expected size is known only
        # without them; the compressor then bounds its output by max_chunk_nbytes.
        hint = None if self.filters else self.nbytes
        data: Any = raw if self.compressor is None else self.compressor.decode(raw, hint)
        for f in reversed(self.filters):
            data = f.codec.decode(data)
        arr = np.asarray(data) if isinstance(data, np.ndarray) else as_u8(data)
        if arr.dtype != self.dtype:
            if arr.nbytes % self.dtype.itemsize:
                # Not whole elements (a truncated chunk): named here, not by NumPy's view.
                raise CorruptChunkError(f"decoded {arr.nbytes} bytes, expected {self.nbytes}")
            arr = arr.reshape(-1, order="A").view(self.dtype)
        if arr.size != math.prod(self.shape):
            raise CorruptChunkError(f"decoded {arr.nbytes} bytes, expected {self.nbytes}")
        return arr.reshape(-1, order="A").reshape(self.shape, order=self.order)  # type: ignore[call-overload,no-any-return]

    def decode_into(self, raw: Buf, out: npt.NDArray[Any]) -> None:
        """Decode into ``out``, straight into its memory when the layout allows."""
        if self.direct and out.flags.c_contiguous and out.dtype == self.dtype:
            u8 = out.reshape(-1).view(np.uint8)
            if self.compressor is None:
                src = as_u8(raw)
            elif self.compressor.decode_into(raw, u8):
                return
            else:
                src = as_u8(self.compressor.decode(raw, u8.nbytes))
            if src.nbytes != u8.nbytes:
                raise CorruptChunkError(f"decoded {src.nbytes} bytes, expected {u8.nbytes}")
            u8[...] = src
            return
        out[...] = self.decode(raw)

    def encode(self, arr: npt.NDArray[Any]) -> Buf:
        """Encode a chunk array to stored bytes."""
        chunk: Any = arr.astype(self.dtype, order=self.order, copy=False)  # type: ignore[call-overload]
        chunk = np.asfortranarray(chunk) if self.order == "F" else np.ascontiguousarray(chunk)
        for f in self.filters:
            chunk = f.codec.encode(chunk)
        if self.compressor is not None:
            return self.compressor.encode(chunk)
        if isinstance(chunk, np.ndarray) and not (
            chunk.flags.c_contiguous or chunk.flags.f_contiguous
        ):
            chunk = np.ascontiguousarray(chunk)
        # as_u8 flattens in memory order, so an F-order chunk keeps its F-order bytes
        return as_u8(chunk).copy()

    @property
    def batch_encodes(self) -> bool:
        """Whether :meth:`encode_many` encodes in one GIL-free call (small zstd chunks).

        zstd chunks of at most :data:`ZSTD_BATCH_ENCODE_MAX` whose compressor batches
        (``NumcodecsBytesCodec.batch_encodes``).
        """
        return self.zstd_frames and self.nbytes <= ZSTD_BATCH_ENCODE_MAX and _batches(
            self.compressor
        )

    @property
    def light(self) -> bool:
        """Whether a chunk is only a few microseconds of codec work (see ``ChunkCodec``)."""
        return (
            self.nbytes <= LIGHT_CHUNK
            and self.direct
            and (self.compressor is None or self.compressor.light)
        )

    def encode_many(self, arrs: Sequence[npt.NDArray[Any]]) -> list[Buf]:
        """Encode several chunk arrays: the same bytes as :meth:`encode` for each.

        zstd chunks (:attr:`batch_encodes`) are compressed in one batched call.
        """
        compressor = self.compressor
        if len(arrs) > 1 and self.batch_encodes and compressor is not None:
            return compressor.encode_many(
                [as_u8(np.ascontiguousarray(a, dtype=self.dtype)) for a in arrs]
            )
        return [self.encode(a) for a in arrs]

    def encoded_size(self) -> int | None:
        """Only uncompressed, unfiltered v2 chunks have a fixed size."""
        return self.nbytes if self.compressor is None and not self.filters else None
