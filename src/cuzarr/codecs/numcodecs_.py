"""numcodecs codecs as cuzarr codecs: compressors, checksums and filters.

Used for the v3 ``zstd``, ``gzip`` and ``blosc`` codecs (configured from their v3 JSON), for
``numcodecs.*`` codecs in v3 metadata and for every v2 filter and compressor. numcodecs'
compressors release the GIL, so the engine's threads decode in parallel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numcodecs
import numpy as np
import numpy.typing as npt
from numcodecs.abc import Codec as Numcodec

from cuzarr.codecs.base import Buf, as_u8
from cuzarr.codecs.headers import blosc_nbytes, lz4_numcodecs_nbytes, zstd_content_size
from cuzarr.errors import CorruptChunkError

__all__ = ["NumcodecsArrayCodec", "NumcodecsBytesCodec", "make_numcodec"]

#: numcodecs ids whose frames declare their decoded size, with the header parser.
_SIZE_PARSERS: dict[str, Callable[[Buf], int | None]] = {
    "zstd": zstd_content_size,
    "blosc": blosc_nbytes,
    "lz4": lz4_numcodecs_nbytes,
}

#: numcodecs ids that are fixed-size checksums: id -> bytes added.
_CHECKSUM_SIZES = {"crc32": 4, "crc32c": 4, "adler32": 4, "fletcher32": 4, "jenkins_lookup3": 4}


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
    """

    name: str
    codec: Numcodec

    def decode(self, data: Buf, size_hint: int | None) -> Buf:
        """Decode a frame; the result is checked against ``size_hint`` by the chain."""
        return self.codec.decode(data)

    def decode_into(self, data: Buf, out: npt.NDArray[np.uint8]) -> bool:
        """Decode straight into ``out`` when the frame declares exactly ``out``'s size."""
        parser = _SIZE_PARSERS.get(self.codec.codec_id)
        if parser is None:
            return False
        declared = parser(data)
        if declared is None:
            return False
        if declared != out.nbytes:
            raise CorruptChunkError(
                f"{self.name} frame declares {declared} decoded bytes, expected {out.nbytes}"
            )
        self.codec.decode(data, out=out)
        return True

    def encode(self, data: Buf) -> Buf:
        """Encode a contiguous buffer."""
        encoded = self.codec.encode(data)
        return encoded

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
