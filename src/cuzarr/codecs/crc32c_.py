"""The v3 ``crc32c`` codec: a 4-byte little-endian CRC-32C appended to the data."""

from __future__ import annotations

from dataclasses import dataclass

import crc32c
import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf, as_u8
from cuzarr.errors import CorruptChunkError

__all__ = ["Crc32cCodec", "checksum"]


def checksum(data: Buf) -> int:
    """Return the CRC-32C of a buffer (the crc32c library releases the GIL for large inputs)."""
    return int(crc32c.crc32c(data))


@dataclass(frozen=True, slots=True)
class Crc32cCodec:
    """Append a CRC-32C on encode; verify and strip it on decode."""

    name: str = "crc32c"

    def decode(self, data: Buf, size_hint: int | None) -> Buf:
        """Verify the trailing checksum and return a view of the payload."""
        u8 = as_u8(data)
        if u8.nbytes < 4:
            raise CorruptChunkError(f"crc32c: {u8.nbytes} bytes is too short to hold a checksum")
        payload = u8[:-4]
        stored = int.from_bytes(u8[-4:].tobytes(), "little")
        actual = checksum(payload)
        if stored != actual:
            raise CorruptChunkError(
                f"crc32c checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"
            )
        return payload

    def decode_into(self, data: Buf, out: npt.NDArray[np.uint8]) -> bool:
        """Not a decoder of bulk data: the chain strips the checksum first."""
        return False

    def encode(self, data: Buf) -> Buf:
        """Return ``data`` followed by its checksum."""
        u8 = as_u8(data)
        out = np.empty(u8.nbytes + 4, dtype=np.uint8)
        out[:-4] = u8
        out[-4:] = np.frombuffer(checksum(u8).to_bytes(4, "little"), dtype=np.uint8)
        return out

    def encoded_size(self, nbytes: int) -> int | None:
        """Four bytes more than the input."""
        return nbytes + 4
