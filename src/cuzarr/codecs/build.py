"""Compiling an array's codec chain from its parsed metadata, once per array.

v3: each codec of ``codecs`` is looked up in the registry (:mod:`cuzarr.codecs.registry`),
which builds it from its configuration; the builder checks the order (array -> array codecs,
exactly one array -> bytes codec, then bytes -> bytes codecs) and compiles the chain. v2: the
filters and compressor are numcodecs codecs whose configurations are checked first
(:data:`cuzarr.codecs.configs.NUMCODEC_CHECKS`). What the engine leaves to zarr-python raises
:class:`~cuzarr.errors.UnsupportedError`; malformed configurations raise
:class:`~cuzarr.errors.MetadataError` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cuzarr._json import JsonReader, describe
from cuzarr.codecs.base import ArrayToArray, ArrayToBytes, BytesToBytes
from cuzarr.codecs.chain import ChunkCodec, V2ChunkCodec
from cuzarr.codecs.configs import NUMCODEC_CHECKS
from cuzarr.codecs.numcodecs_ import (
    DEFAULT_MAX_CHUNK_NBYTES,
    NumcodecsArrayCodec,
    NumcodecsBytesCodec,
    make_numcodec,
)
from cuzarr.codecs.registry import lookup
from cuzarr.errors import MetadataError, UnsupportedError
from cuzarr.metadata.spec import ArraySpec, CodecSpec

__all__ = ["OBJECT_CODECS", "SUPPORTED_KINDS", "UNSAFE_CODECS", "build_chunk_codec"]

#: dtype kinds the engine decodes itself; others (objects, structured, variable-length
#: strings) go to zarr-python's pipeline.
SUPPORTED_KINDS = frozenset("biufcMmSU")

#: v2 filters / v3 ``numcodecs.*`` codecs that cannot be trusted with untrusted data.
UNSAFE_CODECS = frozenset({"pickle"})
OBJECT_CODECS = frozenset({"vlen-utf8", "vlen-bytes", "vlen-array", "pickle", "json2", "msgpack2"})


def _check_dtype(dtype: np.dtype[Any], where: str) -> None:
    if dtype.kind not in SUPPORTED_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise UnsupportedError(f"{where}: data type {dtype} is not supported by cuzarr's engine")


@dataclass(frozen=True, slots=True)
class _Builder:
    """Builds the codecs of one array (the registry's :class:`~cuzarr.codecs.registry.Builder`)."""

    spec: ArraySpec
    max_chunk_nbytes: int
    zstd_encoder: str = "zstandard"

    @property
    def path(self) -> str:
        return self.spec.path

    @property
    def fill_value(self) -> Any:
        return self.spec.fill_value

    @property
    def array_dtype(self) -> np.dtype[Any]:
        return self.spec.dtype

    @property
    def document(self) -> str:
        return "zarr.json" if self.spec.zarr_format == 3 else ".zarray"

    def reader(self, codec: CodecSpec, where: str) -> JsonReader:
        prefix = f"{where}.configuration"
        return JsonReader(codec.configuration, self.document, self.spec.path, prefix)

    def numcodec(self, codec_id: str, config: dict[str, Any], where: str, r: JsonReader) -> Any:
        """Instantiate a numcodecs codec; ``r`` reads ``config`` and names its fields."""
        spec = self.spec
        if codec_id in UNSAFE_CODECS or codec_id in OBJECT_CODECS:
            raise UnsupportedError(
                f"Array '{spec.path}': codec '{codec_id}' ({where}) is not handled by cuzarr's "
                "engine"
            )
        check = NUMCODEC_CHECKS.get(codec_id)
        if check is not None:
            check(r)
        try:
            return make_numcodec({"id": codec_id, **config})
        except (ValueError, TypeError) as exc:
            if isinstance(exc, ValueError) and "codec not available" in str(exc):
                raise UnsupportedError(
                    f"Array '{spec.path}': unknown codec '{codec_id}' ({where} in "
                    f"{self.document})"
                ) from exc
            raise MetadataError(
                f"Failed to parse '{where}' in {self.document} of '{spec.path}': invalid "
                f"configuration of codec '{codec_id}', got {describe(config)} ({exc})"
            ) from exc

    def chain(
        self,
        codecs: tuple[CodecSpec, ...],
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        where: str,
        *,
        allow_sharding: bool = False,
    ) -> ChunkCodec:
        """A chain inside a codec: a shard's inner chunks (which may be shards) or its index."""
        return self.v3_chain(codecs, shape, dtype, where, allow_sharding=allow_sharding)

    def v3_chain(
        self,
        codecs: tuple[CodecSpec, ...],
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        where: str,
        *,
        allow_sharding: bool,
    ) -> ChunkCodec:
        path = self.spec.path
        names = describe([c.name for c in codecs])
        aa: list[ArrayToArray] = []
        ab: ArrayToBytes | None = None
        bb: list[BytesToBytes] = []
        cur_shape, cur_dtype = shape, dtype
        for i, codec in enumerate(codecs):
            cw = f"{where}[{i}]"
            entry = lookup(codec.name)
            if entry is None:
                raise UnsupportedError(
                    f"Array '{path}': codec '{codec.name}' ({cw}) is not supported by "
                    "cuzarr's engine"
                )
            if entry.kind == "array_to_bytes" and ab is not None:
                raise MetadataError(
                    f"Failed to parse '{cw}' in zarr.json of '{path}': codec '{codec.name}' "
                    f"cannot follow the array-to-bytes codec, got {names}"
                )
            if entry.kind == "array_to_array" and ab is not None:
                raise MetadataError(
                    f"Failed to parse '{cw}' in zarr.json of '{path}': codec '{codec.name}' "
                    f"cannot follow the array-to-bytes codec, got {names}"
                )
            if entry.kind == "bytes_to_bytes" and ab is None:
                raise MetadataError(
                    f"Failed to parse '{cw}' in zarr.json of '{path}': bytes-to-bytes codec "
                    f"'{codec.name}' comes before any array-to-bytes codec (e.g. 'bytes'), got "
                    f"{names}"
                )
            if codec.name == "sharding_indexed" and not allow_sharding:
                raise UnsupportedError(
                    f"Array '{path}': a sharded shard index ({cw}) is left to zarr-python's "
                    "pipeline"
                )
            built = entry.factory(self, codec, cw, cur_shape, cur_dtype)
            if entry.kind == "array_to_array":
                aa.append(built)
                cur_shape, cur_dtype = built.resolve(cur_shape, cur_dtype)
            elif entry.kind == "array_to_bytes":
                ab = built
            else:
                bb.append(built)
        if ab is None:
            raise MetadataError(
                f"Failed to parse '{where}' in zarr.json of '{path}': "
                f"expected exactly one array-to-bytes codec (e.g. 'bytes'), found none in {names}"
            )
        return ChunkCodec.compile(shape, dtype, tuple(aa), ab, tuple(bb))


def build_chunk_codec(
    spec: ArraySpec,
    *,
    max_chunk_nbytes: int = DEFAULT_MAX_CHUNK_NBYTES,
    zstd_encoder: str = "zstandard",
) -> ChunkCodec | V2ChunkCodec:
    """Compile the codec chain of an array's chunks.

    Parameters
    ----------
    spec : ArraySpec
        The parsed array metadata.
    max_chunk_nbytes : int
        ``Settings.max_chunk_nbytes``: bounds decompression where the chain cannot tell the
        decoded size.
    zstd_encoder : str
        ``Settings.zstd_encoder``: the library zstd chunks are compressed with.

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
    b = _Builder(spec, max_chunk_nbytes, zstd_encoder)
    if spec.zarr_format == 3:
        return b.v3_chain(spec.codecs, spec.chunk_shape, spec.dtype, "codecs", allow_sharding=True)
    filters = []
    for i, f in enumerate(spec.filters):
        where = f"filters[{i}]"
        reader = JsonReader(f.configuration, b.document, spec.path, where)
        filters.append(
            NumcodecsArrayCodec(f.name, b.numcodec(f.name, dict(f.configuration), where, reader))
        )
    compressor = None
    if spec.compressor is not None:
        c = spec.compressor
        reader = JsonReader(c.configuration, b.document, spec.path, "compressor")
        config = dict(c.configuration)
        compressor = NumcodecsBytesCodec(
            c.name,
            b.numcodec(c.name, config, "compressor", reader),
            max_chunk_nbytes,
            typesize=config.get("typesize"),
            zstd_encoder=zstd_encoder,
        )
    return V2ChunkCodec(spec.chunk_shape, spec.dtype, spec.order, tuple(filters), compressor)
