"""GPU-only nvCOMP formats as Zarr v3 extension codecs.

The codecs are ``cuzarr.ans``, ``cuzarr.bitcomp``, ``cuzarr.cascaded`` and ``cuzarr.gdeflate``.

Each is a ``bytes -> bytes`` codec whose stored bytes are nvCOMP's own container
(``BitstreamKind.NVCOMP_NATIVE``: a header with the sizes, the data compressed in independent
pieces), so a chunk is self-describing and any size works. No CPU library reads these formats:
without a usable GPU, decoding raises :class:`~cuzarr.errors.UnsupportedError` naming what is
missing, never returns garbage.

This module imports no GPU package: registering the codecs (``import cuzarr``, or zarr's
``zarr.codecs`` entry points) is free. The nvCOMP calls live in :mod:`cuzarr.gpu.device`.

Metadata::

    {"name": "cuzarr.cascaded", "configuration": {"data_type": "<i4"}}
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from zarr.abc.codec import BytesBytesCodec

from cuzarr.errors import MetadataError, UnsupportedError

if TYPE_CHECKING:
    from typing import Self

__all__ = ["ANSCodec", "BitcompCodec", "CascadedCodec", "GDeflateCodec", "GPU_ONLY_CODECS"]

#: Integer element types nvCOMP's type-aware formats take (its data-type table).
_DATA_TYPES = ("|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2")


def _check_options(name: str, config: dict[str, Any], allowed: dict[str, tuple[Any, ...]]) -> None:
    for key, value in config.items():
        if key not in allowed:
            raise MetadataError(
                f"Failed to parse 'configuration' of codec '{name}': unknown field '{key}' "
                f"(expected one of {sorted(allowed)})"
            )
        choices = allowed[key]
        if value not in choices:
            raise MetadataError(
                f"Failed to parse '{key}' of codec '{name}': expected one of "
                f"{list(choices)}, got {value!r}"
            )


@dataclass(frozen=True)
class _GpuOnlyCodec(BytesBytesCodec):
    """Base of the GPU-only codecs: configuration handling and the GPU hand-off."""

    #: zarr.json name (``cuzarr.<format>``).
    codec_name: ClassVar[str] = ""
    #: nvCOMP algorithm name.
    algorithm: ClassVar[str] = ""
    #: Configuration fields and their permitted values (passed to ``nvcomp.Codec``).
    options: ClassVar[dict[str, tuple[Any, ...]]] = {}

    is_fixed_size = False
    config: dict[str, Any] = field(default_factory=dict)

    def __init__(self, **config: Any) -> None:
        _check_options(self.codec_name, config, self.options)
        object.__setattr__(self, "config", dict(config))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """Build from ``{"name": ..., "configuration": {...}}``."""
        name = data.get("name")
        if name != cls.codec_name:
            raise MetadataError(f"expected codec '{cls.codec_name}', got {name!r}")
        config = data.get("configuration") or {}
        if not isinstance(config, dict):
            raise MetadataError(
                f"Failed to parse 'configuration' of codec '{name}': expected an object, "
                f"got {config!r}"
            )
        return cls(**config)

    def to_dict(self) -> dict[str, Any]:
        """The codec's metadata."""
        return {"name": self.codec_name, "configuration": dict(self.config)}

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: Any) -> int:
        """Not fixed-size."""
        raise NotImplementedError(f"codec '{self.codec_name}' has no fixed encoded size")

    def _run(self, data: bytes, decoded_nbytes: int | None, *, encode: bool) -> bytes:
        from cuzarr.backends.probe import gpu_status

        status = gpu_status()
        if status is not None:
            verb = "write" if encode else "read"
            raise UnsupportedError(
                f"codec '{self.codec_name}' is an nvCOMP format that only a GPU can {verb}; "
                f"{status}"
            )
        from cuzarr.gpu.device import gpu_only_decode, gpu_only_encode

        if encode:
            return gpu_only_encode(self.algorithm, self.config, data)
        return gpu_only_decode(self.algorithm, self.config, data, decoded_nbytes)

    async def _decode_single(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        nbytes = int(np.prod(chunk_spec.shape)) * int(chunk_spec.dtype.to_native_dtype().itemsize)
        raw = chunk_bytes.to_bytes()
        out = await asyncio.to_thread(self._run, raw, nbytes, encode=False)
        return chunk_spec.prototype.buffer.from_bytes(out)

    async def _encode_single(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        raw = chunk_bytes.to_bytes()
        out = await asyncio.to_thread(self._run, raw, None, encode=True)
        return chunk_spec.prototype.buffer.from_bytes(out)


@dataclass(frozen=True, init=False)
class ANSCodec(_GpuOnlyCodec):
    """nvCOMP ANS (asymmetric numeral systems entropy coding)."""

    codec_name: ClassVar[str] = "cuzarr.ans"
    algorithm: ClassVar[str] = "ANS"
    options: ClassVar[dict[str, tuple[Any, ...]]] = {"data_type": ("|u1", "<f2")}


@dataclass(frozen=True, init=False)
class BitcompCodec(_GpuOnlyCodec):
    """nvCOMP Bitcomp (for integers and floats with few significant bits)."""

    codec_name: ClassVar[str] = "cuzarr.bitcomp"
    algorithm: ClassVar[str] = "Bitcomp"
    options: ClassVar[dict[str, tuple[Any, ...]]] = {
        "data_type": _DATA_TYPES,
        "algorithm_type": (0, 1),
    }


@dataclass(frozen=True, init=False)
class CascadedCodec(_GpuOnlyCodec):
    """nvCOMP Cascaded (run-length, delta and bit-packing for integers)."""

    codec_name: ClassVar[str] = "cuzarr.cascaded"
    algorithm: ClassVar[str] = "Cascaded"
    options: ClassVar[dict[str, tuple[Any, ...]]] = {"data_type": _DATA_TYPES}


@dataclass(frozen=True, init=False)
class GDeflateCodec(_GpuOnlyCodec):
    """nvCOMP GDeflate (deflate re-blocked for GPU decoding)."""

    codec_name: ClassVar[str] = "cuzarr.gdeflate"
    algorithm: ClassVar[str] = "GDeflate"
    options: ClassVar[dict[str, tuple[Any, ...]]] = {"algorithm_type": (0, 1, 2)}


GPU_ONLY_CODECS: dict[str, type[_GpuOnlyCodec]] = {
    c.codec_name: c for c in (ANSCodec, BitcompCodec, CascadedCodec, GDeflateCodec)
}


def register() -> None:
    """Register the GPU-only codecs in zarr's codec registry (no GPU package is imported)."""
    from zarr.registry import register_codec

    for name, cls in GPU_ONLY_CODECS.items():
        register_codec(name, cls)
