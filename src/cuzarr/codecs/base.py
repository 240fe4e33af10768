"""Interfaces of the three kinds of codec, and the buffer helpers they share.

A Zarr codec chain is ``array -> array`` codecs (e.g. ``transpose``), then exactly one
``array -> bytes`` codec (``bytes``, ``sharding_indexed``), then ``bytes -> bytes`` codecs
(compressors, checksums). cuzarr's codecs are small objects with synchronous methods that run in
the engine's worker threads; every heavy call goes to a C library that releases the GIL.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["ArrayToArray", "ArrayToBytes", "Buf", "BytesToBytes", "as_u8"]

#: Anything exposing the buffer protocol: ``bytes``, ``memoryview``, ``bytearray``, ndarray.
Buf = Any


def as_u8(data: Buf) -> npt.NDArray[np.uint8]:
    """Return a 1-d ``uint8`` view of a buffer, without copying."""
    if isinstance(data, np.ndarray):
        if data.dtype == np.uint8 and data.ndim == 1:
            return data
        return data.reshape(-1, order="A").view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


@runtime_checkable
class BytesToBytes(Protocol):
    """A ``bytes -> bytes`` codec (compressor or checksum)."""

    @property
    def name(self) -> str:
        """The codec name, for messages."""
        ...

    def decode(self, data: Buf, size_hint: int | None) -> Buf:
        """Decode ``data``; ``size_hint`` is the expected decoded size when known."""
        ...

    def decode_into(self, data: Buf, out: npt.NDArray[np.uint8]) -> bool:
        """Decode into ``out`` (exactly the decoded size); return False if not supported."""
        ...

    def encode(self, data: Buf) -> Buf:
        """Encode ``data`` (a contiguous buffer)."""
        ...

    def encoded_size(self, nbytes: int) -> int | None:
        """Return the encoded size for fixed-size codecs, else ``None``."""
        ...


@runtime_checkable
class ArrayToArray(Protocol):
    """An ``array -> array`` codec (``transpose``, numcodecs filters)."""

    @property
    def name(self) -> str:
        """The codec name, for messages."""
        ...

    def resolve(
        self, shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """Return the shape and dtype of the encoded array for a decoded one."""
        ...

    def decode(
        self, arr: npt.NDArray[Any], shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> npt.NDArray[Any]:
        """Decode to the given decoded shape and dtype."""
        ...

    def encode(self, arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Encode an array."""
        ...


@runtime_checkable
class ArrayToBytes(Protocol):
    """An ``array -> bytes`` codec (``bytes``, numcodecs array-to-bytes codecs)."""

    @property
    def name(self) -> str:
        """The codec name, for messages."""
        ...

    def decode(self, data: Buf, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        """Decode bytes to an array of ``shape`` and ``dtype`` (native byte order)."""
        ...

    def encode(self, arr: npt.NDArray[Any]) -> Buf:
        """Encode an array to bytes."""
        ...

    def encoded_size(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> int | None:
        """Return the encoded size for fixed-size codecs, else ``None``."""
        ...
