"""Codec chains compiled for one chunk shape and dtype, and the builder from metadata.

A :class:`ChunkCodec` turns stored bytes into a decoded chunk and back. It is compiled once per
array (and once more for a sharded array's inner chunks and index), so the per-chunk hot path
does no metadata lookups. :meth:`ChunkCodec.decode_into` writes straight into a destination
buffer when the chain allows (no array-to-array codecs, native byte order, a final compressor
whose frames declare their size): one decompression, no intermediate copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr._json import JsonReader, describe
from cuzarr.codecs.base import ArrayToArray, ArrayToBytes, Buf, BytesToBytes, as_u8
from cuzarr.codecs.bytes_ import NATIVE, BytesCodec
from cuzarr.codecs.crc32c_ import Crc32cCodec
from cuzarr.codecs.numcodecs_ import NumcodecsArrayCodec, NumcodecsBytesCodec, make_numcodec
from cuzarr.codecs.sharding import ShardingCodec
from cuzarr.codecs.transpose import TransposeCodec
from cuzarr.errors import CorruptChunkError, MetadataError, UnsupportedError
from cuzarr.metadata.spec import ArraySpec, CodecSpec

__all__ = ["ChunkCodec", "V2ChunkCodec", "build_chunk_codec"]

#: dtype kinds the engine decodes itself; others (objects, structured, variable-length
#: strings) go to zarr-python's pipeline.
SUPPORTED_KINDS = frozenset("biufcMmSU")

#: v2 filters / v3 ``numcodecs.*`` codecs that cannot be trusted with untrusted data.
UNSAFE_CODECS = frozenset({"pickle"})
OBJECT_CODECS = frozenset({"vlen-utf8", "vlen-bytes", "vlen-array", "pickle", "json2", "msgpack2"})

_NUMCODECS_BYTES = frozenset(
    {
        "blosc",
        "lz4",
        "zstd",
        "zlib",
        "gzip",
        "bz2",
        "lzma",
        "shuffle",
        "crc32",
        "crc32c",
        "adler32",
        "fletcher32",
        "jenkins_lookup3",
    }
)
_NUMCODECS_ARRAY = frozenset({"delta", "bitround", "fixedscaleoffset", "quantize", "astype"})


def _check_dtype(dtype: np.dtype[Any], where: str) -> None:
    if dtype.kind not in SUPPORTED_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise UnsupportedError(f"{where}: data type {dtype} is not supported by cuzarr's engine")


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
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def direct(self) -> bool:
        """Whether stored bytes, once decompressed, are the chunk's C-order memory."""
        ab = self.array_bytes
        return not self.array_codecs and isinstance(ab, BytesCodec) and ab.is_native(self.dtype)

    @property
    def raw(self) -> bool:
        """Whether stored bytes are exactly the chunk's C-order memory (no codec work)."""
        return self.direct and not self.bytes_codecs

    @property
    def zstd_frames(self) -> bool:
        """Whether stored bytes are one zstd frame of the chunk's C-order memory, nothing else."""
        return (
            self.direct
            and len(self.bytes_codecs) == 1
            and isinstance(self.bytes_codecs[0], NumcodecsBytesCodec)
            and self.bytes_codecs[0].codec.codec_id == "zstd"
        )

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
            and self.compressor.codec.codec_id == "zstd"
        )

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

    def encoded_size(self) -> int | None:
        """Only uncompressed, unfiltered v2 chunks have a fixed size."""
        return self.nbytes if self.compressor is None and not self.filters else None


# --------------------------------------------------------------------------------------------
# building chains from metadata


def _document(spec: ArraySpec) -> str:
    return "zarr.json" if spec.zarr_format == 3 else ".zarray"


def _reader(spec: ArraySpec, codec: CodecSpec, where: str) -> JsonReader:
    return JsonReader(codec.configuration, _document(spec), spec.path, f"{where}.configuration")


def _check_numcodec_config(r: JsonReader, codec_id: str) -> None:
    """Check the fields of well-known numcodecs configurations (numcodecs checks them late).

    numcodecs stores most constructor arguments as given and fails only when a chunk is
    encoded or decoded, which would surface as a corrupt chunk. Checking here names the field.
    """
    if codec_id == "zstd":
        r.only(("level", "checksum"), "codec 'zstd'")
        r.int_("level", 0, minimum=-131072, maximum=22)
        r.bool_("checksum", False)
    elif codec_id in ("zlib", "gzip"):
        r.only(("level",), f"codec '{codec_id}'")
        r.int_("level", 1, minimum=-1, maximum=9)
    elif codec_id == "bz2":
        r.only(("level",), "codec 'bz2'")
        r.int_("level", 1, minimum=1, maximum=9)
    elif codec_id == "lz4":
        r.only(("acceleration",), "codec 'lz4'")
        r.int_("acceleration", 1)
    elif codec_id == "blosc":
        from numcodecs import blosc

        r.only(("cname", "clevel", "shuffle", "blocksize", "typesize"), "codec 'blosc'")
        r.choice("cname", tuple(blosc.list_compressors()), "lz4")
        r.int_("clevel", 5, minimum=0, maximum=9)
        r.int_("shuffle", 1, minimum=-1, maximum=2)
        r.int_("blocksize", 0, minimum=0)
        if r.raw("typesize", None) is not None:
            r.int_("typesize", minimum=1)
    elif codec_id == "shuffle":
        r.only(("elementsize",), "codec 'shuffle'")
        r.int_("elementsize", 4, minimum=1)
    elif codec_id in ("crc32", "crc32c", "adler32"):
        r.only(("location",), f"codec '{codec_id}'")
        if r.raw("location", None) is not None:
            r.choice("location", ("start", "end"))
    elif codec_id == "bitround":
        r.int_("keepbits", minimum=0)


def _numcodecs_instance(
    spec: ArraySpec, codec_id: str, config: dict[str, Any], where: str, reader: JsonReader
) -> Any:
    """Instantiate a numcodecs codec; ``reader`` reads ``config`` and names its fields."""
    if codec_id in UNSAFE_CODECS or codec_id in OBJECT_CODECS:
        raise UnsupportedError(
            f"Array '{spec.path}': codec '{codec_id}' ({where}) is not handled by cuzarr's engine"
        )
    _check_numcodec_config(reader, codec_id)
    try:
        return make_numcodec({"id": codec_id, **config})
    except (ValueError, TypeError) as exc:
        if isinstance(exc, ValueError) and "codec not available" in str(exc):
            raise UnsupportedError(
                f"Array '{spec.path}': unknown codec '{codec_id}' ({where} in {_document(spec)})"
            ) from exc
        raise MetadataError(
            f"Failed to parse '{where}' in {_document(spec)} of '{spec.path}': invalid "
            f"configuration of codec '{codec_id}', got {describe(config)} ({exc})"
        ) from exc


#: Names of the v3 ``bytes -> bytes`` codecs cuzarr knows (for chain-order messages).
_V3_BYTES_CODECS = frozenset({"crc32c", "zstd", "gzip", "blosc"})


def _bytes_to_bytes(spec: ArraySpec, codec: CodecSpec, where: str) -> BytesToBytes | None:
    r = _reader(spec, codec, where)
    name = codec.name
    if name == "crc32c":
        r.only((), "codec 'crc32c'")
        return Crc32cCodec()
    if name == "zstd":
        r.only(("level", "checksum"), "codec 'zstd'")
        level = r.int_("level", 0, minimum=-131072, maximum=22)
        checksum = r.bool_("checksum", False)
        cfg: dict[str, Any] = {"level": level, "checksum": checksum}
        return NumcodecsBytesCodec("zstd", _numcodecs_instance(spec, "zstd", cfg, where, r))
    if name == "gzip":
        r.only(("level",), "codec 'gzip'")
        level = r.int_("level", 5, minimum=0, maximum=9)
        return NumcodecsBytesCodec(
            "gzip", _numcodecs_instance(spec, "gzip", {"level": level}, where, r)
        )
    if name == "blosc":
        shuffle_names = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
        r.only(("cname", "clevel", "shuffle", "typesize", "blocksize"), "codec 'blosc'")
        cname = r.choice("cname", ("lz4", "lz4hc", "blosclz", "snappy", "zlib", "zstd"), "zstd")
        if cname == "snappy":
            raise UnsupportedError(
                f"Array '{spec.path}': blosc compressor 'snappy' ({where}) is not available"
            )
        clevel = r.int_("clevel", 5, minimum=0, maximum=9)
        shuffle = r.choice("shuffle", tuple(shuffle_names), "bitshuffle")
        typesize = r.int_("typesize", 1, minimum=1)
        blocksize = r.int_("blocksize", 0, minimum=0)
        cfg = {
            "cname": cname,
            "clevel": clevel,
            "shuffle": shuffle_names[shuffle],
            "blocksize": blocksize,
            "typesize": typesize,
        }
        plain = JsonReader(cfg, r.document, r.path, r.prefix)
        return NumcodecsBytesCodec("blosc", _numcodecs_instance(spec, "blosc", cfg, where, plain))
    if name.startswith("numcodecs."):
        codec_id = name.removeprefix("numcodecs.")
        if codec_id in _NUMCODECS_BYTES:
            return NumcodecsBytesCodec(
                name, _numcodecs_instance(spec, codec_id, dict(codec.configuration), where, r)
            )
    return None


def _array_to_array(
    spec: ArraySpec, codec: CodecSpec, where: str, ndim: int
) -> ArrayToArray | None:
    r = _reader(spec, codec, where)
    if codec.name == "transpose":
        r.only(("order",), "codec 'transpose'")
        order = r.int_tuple("order")
        if sorted(order) != list(range(ndim)):
            raise r.fail("order", f"a permutation of range({ndim})", list(order))
        return TransposeCodec(order)
    if codec.name.startswith("numcodecs."):
        codec_id = codec.name.removeprefix("numcodecs.")
        if codec_id in _NUMCODECS_ARRAY:
            config = dict(codec.configuration)
            astype = config.get("astype") or config.get("encode_dtype")
            if codec_id in ("fixedscaleoffset", "quantize") and config.get("dtype") is None:
                config["dtype"] = str(spec.dtype)
            if codec_id == "astype" and config.get("decode_dtype") is None:
                config["decode_dtype"] = str(spec.dtype)
            try:
                encoded = np.dtype(astype) if astype else None
            except TypeError as exc:
                field_name = "astype" if config.get("astype") else "encode_dtype"
                raise r.fail(field_name, "a NumPy data type", astype) from exc
            inst = _numcodecs_instance(
                spec, codec_id, config, where, JsonReader(config, r.document, r.path, r.prefix)
            )
            return NumcodecsArrayCodec(codec.name, inst, encoded)
    return None


def _build_v3_chain(
    spec: ArraySpec,
    codecs: tuple[CodecSpec, ...],
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    where: str,
    *,
    allow_sharding: bool,
) -> ChunkCodec:
    aa: list[ArrayToArray] = []
    ab: ArrayToBytes | None = None
    bb: list[BytesToBytes] = []
    cur_shape, cur_dtype = shape, dtype
    for i, codec in enumerate(codecs):
        cw = f"{where}[{i}]"
        if ab is None:
            a2a = _array_to_array(spec, codec, cw, len(shape))
            if a2a is not None:
                aa.append(a2a)
                cur_shape, cur_dtype = a2a.resolve(cur_shape, cur_dtype)
                continue
            if codec.name == "bytes":
                r = _reader(spec, codec, cw)
                r.only(("endian",), "codec 'bytes'")
                endian = (
                    r.choice("endian", ("little", "big"))
                    if "endian" in codec.configuration
                    else None
                )
                if endian is None and cur_dtype.itemsize > 1 and cur_dtype.kind not in "SU":
                    raise r.fail("endian", "'little' or 'big' for multi-byte data types", None)
                if cur_dtype.kind == "U" and endian is None:
                    endian = NATIVE
                ab = BytesCodec(endian)  # type: ignore[arg-type]
                continue
            if codec.name == "sharding_indexed":
                if not allow_sharding:
                    raise UnsupportedError(
                        f"Array '{spec.path}': nested sharding is left to zarr-python's pipeline"
                    )
                ab = _build_sharding(spec, codec, cw, cur_shape, cur_dtype)
                continue
            if codec.name in _V3_BYTES_CODECS or (
                codec.name.startswith("numcodecs.")
                and codec.name.removeprefix("numcodecs.") in _NUMCODECS_BYTES
            ):
                raise MetadataError(
                    f"Failed to parse '{cw}' in zarr.json of '{spec.path}': bytes-to-bytes codec "
                    f"'{codec.name}' comes before any array-to-bytes codec (e.g. 'bytes'), got "
                    f"{describe([c.name for c in codecs])}"
                )
            raise UnsupportedError(
                f"Array '{spec.path}': codec '{codec.name}' ({cw}) is not supported by "
                "cuzarr's engine"
            )
        b2b = _bytes_to_bytes(spec, codec, cw)
        if b2b is None:
            if codec.name in ("bytes", "sharding_indexed", "transpose"):
                raise MetadataError(
                    f"Failed to parse '{cw}' in zarr.json of '{spec.path}': codec "
                    f"'{codec.name}' cannot follow the array-to-bytes codec, got "
                    f"{describe([c.name for c in codecs])}"
                )
            raise UnsupportedError(
                f"Array '{spec.path}': codec '{codec.name}' ({cw}) is not supported by "
                "cuzarr's engine"
            )
        bb.append(b2b)
    if ab is None:
        raise MetadataError(
            f"Failed to parse '{where}' in zarr.json of '{spec.path}': "
            "expected exactly one array-to-bytes codec (e.g. 'bytes'), found none in "
            f"{describe([c.name for c in codecs])}"
        )
    return ChunkCodec.compile(shape, dtype, tuple(aa), ab, tuple(bb))


def _build_sharding(
    spec: ArraySpec,
    codec: CodecSpec,
    where: str,
    shard_shape: tuple[int, ...],
    dtype: np.dtype[Any],
) -> ShardingCodec:
    from cuzarr.metadata.v3 import parse_codec_list

    r = _reader(spec, codec, where)
    r.only(("chunk_shape", "codecs", "index_codecs", "index_location"), "codec 'sharding_indexed'")
    inner_shape = r.int_tuple("chunk_shape", minimum=1)
    if len(inner_shape) != len(shard_shape):
        raise r.fail("chunk_shape", f"{len(shard_shape)} dimensions", list(inner_shape))
    if any(s % c for s, c in zip(shard_shape, inner_shape, strict=True)):
        raise r.fail(
            "chunk_shape",
            f"a shape that divides the shard shape {list(shard_shape)}",
            list(inner_shape),
        )
    cps = tuple(s // c for s, c in zip(shard_shape, inner_shape, strict=True))
    inner_specs: tuple[CodecSpec, ...] = (
        CodecSpec(name="bytes", configuration={"endian": "little"}),
    )
    if "codecs" in codec.configuration:
        inner_specs = parse_codec_list(r, "codecs")
    index_specs: tuple[CodecSpec, ...] = (
        CodecSpec(name="bytes", configuration={"endian": "little"}),
        CodecSpec(name="crc32c"),
    )
    if "index_codecs" in codec.configuration:
        index_specs = parse_codec_list(r, "index_codecs")
    location = r.choice("index_location", ("start", "end"), "end")
    inner = _build_v3_chain(
        spec, inner_specs, inner_shape, dtype, f"{where}.configuration.codecs", allow_sharding=False
    )
    index = _build_v3_chain(
        spec,
        index_specs,
        (*cps, 2),
        np.dtype(np.uint64),
        f"{where}.configuration.index_codecs",
        allow_sharding=False,
    )
    if index.encoded_size() is None:
        raise MetadataError(
            f"Failed to parse '{where}.configuration.index_codecs' in zarr.json of '{spec.path}': "
            "index codecs must produce a fixed-size encoding, got "
            f"{describe([c.name for c in index_specs])}"
        )
    return ShardingCodec(
        chunk_shape=inner_shape,
        inner=inner,
        index=index,
        index_location=location,  # type: ignore[arg-type]
        chunks_per_shard=cps,
        fill_value=spec.fill_value,
    )


def build_chunk_codec(spec: ArraySpec) -> ChunkCodec | V2ChunkCodec:
    """Compile the codec chain of an array's chunks.

    Parameters
    ----------
    spec : ArraySpec
        The parsed array metadata.

    Returns
    -------
    ChunkCodec or V2ChunkCodec

    Raises
    ------
    UnsupportedError
        For data types or codecs the engine leaves to zarr-python.
    MetadataError
        For invalid codec configurations.
    """
    _check_dtype(spec.dtype, f"Array '{spec.path}'")
    if spec.zarr_format == 3:
        return _build_v3_chain(
            spec, spec.codecs, spec.chunk_shape, spec.dtype, "codecs", allow_sharding=True
        )
    doc = _document(spec)
    filters = []
    for i, f in enumerate(spec.filters):
        where = f"filters[{i}]"
        reader = JsonReader(f.configuration, doc, spec.path, where)
        inst = _numcodecs_instance(spec, f.name, dict(f.configuration), where, reader)
        filters.append(NumcodecsArrayCodec(f.name, inst))
    compressor = None
    if spec.compressor is not None:
        c = spec.compressor
        reader = JsonReader(c.configuration, doc, spec.path, "compressor")
        compressor = NumcodecsBytesCodec(
            c.name, _numcodecs_instance(spec, c.name, dict(c.configuration), "compressor", reader)
        )
    return V2ChunkCodec(spec.chunk_shape, spec.dtype, spec.order, tuple(filters), compressor)
