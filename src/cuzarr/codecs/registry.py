"""The codec registry: v3 codec name -> its kind and the factory that builds it from metadata.

Each factory reads its codec's configuration once (through a :class:`~cuzarr._json.JsonReader`,
so a bad field is named) and returns a codec object; nothing else in cuzarr looks at codec
names. To add a v3 codec: write its class (``codecs/<name>.py``, the ``ArrayToArray``,
``ArrayToBytes`` or ``BytesToBytes`` protocol of :mod:`cuzarr.codecs.base`), then register a
factory here with its kind. ``numcodecs.<id>`` names are resolved by numcodecs id
(:data:`NUMCODECS_BYTES`, :data:`NUMCODECS_ARRAY`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from cuzarr._json import JsonReader
from cuzarr.codecs.bytes_ import NATIVE, BytesCodec
from cuzarr.codecs.configs import V3_TO_NUMCODECS
from cuzarr.codecs.crc32c_ import Crc32cCodec
from cuzarr.codecs.numcodecs_ import NumcodecsArrayCodec, NumcodecsBytesCodec
from cuzarr.codecs.sharding.format import ShardingCodec
from cuzarr.codecs.sharding.format import from_v3 as sharding_from_v3
from cuzarr.codecs.transpose import TransposeCodec
from cuzarr.errors import UnsupportedError
from cuzarr.metadata.spec import CodecSpec

__all__ = [
    "NUMCODECS_ARRAY",
    "NUMCODECS_BYTES",
    "Builder",
    "Entry",
    "Kind",
    "lookup",
    "register",
]

Kind = Literal["array_to_array", "array_to_bytes", "bytes_to_bytes"]


class Builder(Protocol):
    """What factories may ask of the chain builder (:mod:`cuzarr.codecs.build`)."""

    @property
    def path(self) -> str:
        """The array's path, for messages."""
        ...

    @property
    def fill_value(self) -> Any:
        """The array's fill value."""
        ...

    @property
    def array_dtype(self) -> np.dtype[Any]:
        """The array's data type."""
        ...

    @property
    def max_chunk_nbytes(self) -> int:
        """The array's ``Settings.max_chunk_nbytes`` (bounds unsized decompression)."""
        ...

    @property
    def zstd_encoder(self) -> str:
        """The array's ``Settings.zstd_encoder`` (the library zstd chunks are compressed with)."""
        ...

    def reader(self, codec: CodecSpec, where: str) -> JsonReader:
        """A reader of ``codec``'s configuration that names ``where`` in its errors."""
        ...

    def numcodec(self, codec_id: str, config: dict[str, Any], where: str, r: JsonReader) -> Any:
        """A numcodecs instance (its configuration checked first)."""
        ...

    def chain(
        self,
        codecs: tuple[CodecSpec, ...],
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        where: str,
        *,
        allow_sharding: bool = False,
    ) -> Any:
        """A compiled chain, for codecs holding chains (a shard's inner chunks and index).

        ``allow_sharding``: whether the chain may itself shard (nested shards).
        """
        ...


#: ``(builder, codec, where, shape, dtype) -> codec object``: ``shape`` and ``dtype`` are
#: what the codec receives (after the array -> array codecs before it).
Factory = Callable[[Builder, CodecSpec, str, tuple[int, ...], np.dtype[Any]], Any]


@dataclass(frozen=True, slots=True)
class Entry:
    """A registered codec."""

    kind: Kind
    factory: Factory


_REGISTRY: dict[str, Entry] = {}

#: numcodecs ids usable as v3 ``numcodecs.<id>`` bytes -> bytes codecs.
NUMCODECS_BYTES = frozenset(
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
#: numcodecs ids usable as v3 ``numcodecs.<id>`` array -> array codecs.
NUMCODECS_ARRAY = frozenset({"delta", "bitround", "fixedscaleoffset", "quantize", "astype"})


def register(name: str, kind: Kind) -> Callable[[Factory], Factory]:
    """Register ``factory`` for the v3 codec ``name`` (a decorator)."""

    def add(factory: Factory) -> Factory:
        _REGISTRY[name] = Entry(kind, factory)
        return factory

    return add


def lookup(name: str) -> Entry | None:
    """The registered codec of a v3 name (``numcodecs.<id>`` included), or ``None``."""
    entry = _REGISTRY.get(name)
    if entry is not None:
        return entry
    if name.startswith("numcodecs."):
        codec_id = name.removeprefix("numcodecs.")
        if codec_id in NUMCODECS_BYTES:
            return Entry("bytes_to_bytes", _numcodecs_bytes)
        if codec_id in NUMCODECS_ARRAY:
            return Entry("array_to_array", _numcodecs_array)
    return None


# ---------------------------------------------------------------------------- the codecs


@register("transpose", "array_to_array")
def _transpose(
    b: Builder, codec: CodecSpec, where: str, shape: tuple[int, ...], dtype: np.dtype[Any]
) -> TransposeCodec:
    r = b.reader(codec, where)
    r.only(("order",), "codec 'transpose'")
    order = r.int_tuple("order")
    if sorted(order) != list(range(len(shape))):
        raise r.fail("order", f"a permutation of range({len(shape)})", list(order))
    return TransposeCodec(order)


@register("bytes", "array_to_bytes")
def _bytes(
    b: Builder, codec: CodecSpec, where: str, shape: tuple[int, ...], dtype: np.dtype[Any]
) -> BytesCodec:
    r = b.reader(codec, where)
    r.only(("endian",), "codec 'bytes'")
    endian = r.choice("endian", ("little", "big")) if "endian" in codec.configuration else None
    if endian is None and dtype.itemsize > 1 and dtype.kind not in "SU":
        raise r.fail("endian", "'little' or 'big' for multi-byte data types", None)
    if dtype.kind == "U" and endian is None:
        endian = NATIVE
    return BytesCodec(endian)  # type: ignore[arg-type]


@register("crc32c", "bytes_to_bytes")
def _crc32c(
    b: Builder, codec: CodecSpec, where: str, shape: tuple[int, ...], dtype: np.dtype[Any]
) -> Crc32cCodec:
    b.reader(codec, where).only((), "codec 'crc32c'")
    return Crc32cCodec()


def _v3_numcodec(
    b: Builder, codec: CodecSpec, where: str, shape: tuple[int, ...], dtype: np.dtype[Any]
) -> NumcodecsBytesCodec:
    """The v3 ``zstd``, ``gzip`` and ``blosc`` codecs, implemented by numcodecs."""
    codec_id, translate = V3_TO_NUMCODECS[codec.name]
    r = b.reader(codec, where)
    config = translate(r)
    if config.get("cname") == "snappy":
        raise UnsupportedError(
            f"Array '{b.path}': blosc compressor 'snappy' ({where}) is not available"
        )
    plain = JsonReader(config, r.document, r.path, r.prefix)
    return NumcodecsBytesCodec(
        codec.name,
        b.numcodec(codec_id, config, where, plain),
        b.max_chunk_nbytes,
        typesize=config.get("typesize"),
        zstd_encoder=b.zstd_encoder,
    )


for _name in V3_TO_NUMCODECS:
    register(_name, "bytes_to_bytes")(_v3_numcodec)


def _numcodecs_bytes(
    b: Builder, codec: CodecSpec, where: str, shape: tuple[int, ...], dtype: np.dtype[Any]
) -> NumcodecsBytesCodec:
    codec_id = codec.name.removeprefix("numcodecs.")
    r = b.reader(codec, where)
    config = dict(codec.configuration)
    return NumcodecsBytesCodec(
        codec.name,
        b.numcodec(codec_id, config, where, r),
        b.max_chunk_nbytes,
        typesize=config.get("typesize"),
        zstd_encoder=b.zstd_encoder,
    )


def _numcodecs_array(
    b: Builder, codec: CodecSpec, where: str, shape: tuple[int, ...], dtype: np.dtype[Any]
) -> NumcodecsArrayCodec:
    codec_id = codec.name.removeprefix("numcodecs.")
    r = b.reader(codec, where)
    config = dict(codec.configuration)
    astype = config.get("astype") or config.get("encode_dtype")
    if codec_id in ("fixedscaleoffset", "quantize") and config.get("dtype") is None:
        config["dtype"] = str(b.array_dtype)
    if codec_id == "astype" and config.get("decode_dtype") is None:
        config["decode_dtype"] = str(b.array_dtype)
    try:
        encoded = np.dtype(astype) if astype else None
    except TypeError as exc:
        field_name = "astype" if config.get("astype") else "encode_dtype"
        raise r.fail(field_name, "a NumPy data type", astype) from exc
    inst = b.numcodec(codec_id, config, where, JsonReader(config, r.document, r.path, r.prefix))
    return NumcodecsArrayCodec(codec.name, inst, encoded)


@register("sharding_indexed", "array_to_bytes")
def _sharding(
    b: Builder, codec: CodecSpec, where: str, shape: tuple[int, ...], dtype: np.dtype[Any]
) -> ShardingCodec:
    return sharding_from_v3(b, codec, where, shape, dtype)
