"""The v3 ``bytes`` codec: an array's elements as raw bytes in a given byte order."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf
from cuzarr.errors import CorruptChunkError

__all__ = ["BytesCodec"]

Endian = Literal["little", "big"]
NATIVE: Endian = "little" if sys.byteorder == "little" else "big"


@dataclass(frozen=True, slots=True)
class BytesCodec:
    """Raw element bytes, C order, in ``endian`` byte order.

    Parameters
    ----------
    endian : {"little", "big"} or None
        Stored byte order; ``None`` only for single-byte types.
    """

    endian: Endian | None
    name: str = "bytes"

    def stored_dtype(self, dtype: np.dtype[Any]) -> np.dtype[Any]:
        """Return ``dtype`` in the stored byte order."""
        if self.endian is None or dtype.itemsize == 1:
            return dtype
        return dtype.newbyteorder("<" if self.endian == "little" else ">")

    def is_native(self, dtype: np.dtype[Any]) -> bool:
        """Whether stored bytes can be used as the in-memory array without a byte swap."""
        return self.stored_dtype(dtype) == dtype

    def decode(self, data: Buf, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        """View ``data`` as an array; byte-swap to ``dtype``'s order if needed."""
        stored = self.stored_dtype(dtype)
        expected = math.prod(shape) * dtype.itemsize
        nbytes = memoryview(data).nbytes
        if nbytes != expected:
            raise CorruptChunkError(f"decoded {nbytes} bytes, expected {expected}")
        arr = np.frombuffer(data, dtype=stored).reshape(shape)
        if stored != dtype:
            arr = arr.astype(dtype)
        return arr

    def encode(self, arr: npt.NDArray[Any]) -> Buf:
        """Return the C-order bytes of ``arr`` in the stored byte order."""
        stored = self.stored_dtype(arr.dtype)
        out = np.ascontiguousarray(arr, dtype=stored)
        return out.reshape(-1).view(np.uint8)

    def encoded_size(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> int | None:
        """The encoded size is fixed: elements times item size."""
        return math.prod(shape) * dtype.itemsize
