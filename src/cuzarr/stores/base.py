"""The store interface of the engine: synchronous, called from worker threads.

Stores hand back buffers (``bytes``, ``memoryview`` or ``uint8`` arrays). A missing key is
``None``, never an error: it reads as the fill value.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf
from cuzarr.errors import StoreError

__all__ = [
    "BufferPool",
    "ChunkStore",
    "Coalescing",
    "CoalescingStore",
    "ObjectReader",
    "Scratch",
    "StaleObjectError",
]


class StaleObjectError(StoreError):
    """An object changed since the version a read was conditional on (HTTP 412 on If-Match).

    Raised by stores with versioned reads (``get_ranges_if``); the engine re-reads the shard
    index once and retries.
    """


class Scratch:
    """A per-thread growable byte buffer for compressed chunks (no allocation per chunk).

    A view returned by :meth:`get` is valid until the same thread asks again.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self, nbytes: int) -> npt.NDArray[np.uint8]:
        """Return a writable ``uint8`` view of at least ``nbytes`` for this thread."""
        buf: npt.NDArray[np.uint8] | None = getattr(self._local, "buf", None)
        if buf is None or buf.nbytes < nbytes:
            buf = np.empty(max(nbytes, 1 << 16, 0 if buf is None else buf.nbytes * 2), np.uint8)
            self._local.buf = buf
        return buf[:nbytes]


class BufferPool:
    """Byte buffers handed out for one wave of reads and taken back together afterwards.

    Whole shards read in one wave stay alive until their inner chunks are decoded; reusing the
    same buffers wave after wave avoids allocating (and page-faulting) fresh memory per shard.
    It has :class:`Scratch`'s ``get`` so stores accept either.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[npt.NDArray[np.uint8]] = []
        self._used: list[npt.NDArray[np.uint8]] = []

    def get(self, nbytes: int) -> npt.NDArray[np.uint8]:
        """Return a buffer of at least ``nbytes`` not handed out since the last release."""
        with self._lock:
            for i, buf in enumerate(self._free):
                if buf.nbytes >= nbytes:
                    del self._free[i]
                    break
            else:
                buf = np.empty(nbytes, np.uint8)
            self._used.append(buf)
        return buf[:nbytes]

    def release(self) -> None:
        """Take every buffer back (their contents must no longer be used)."""
        with self._lock:
            self._free.extend(self._used)
            self._used.clear()
            self._free.sort(key=lambda b: b.nbytes)


class ObjectReader(Protocol):
    """One open version of one object: ranged reads that all see the same bytes.

    Stores that can offer this cheaply (local files through one file descriptor, memory)
    implement ``ChunkStore.open_object(key) -> ObjectReader | None``; the engine then reads a
    shard's index and inner chunks from the same version, and caches decoded indexes keyed by
    :attr:`token`, which changes whenever the object is replaced.
    """

    #: Identifies this version of the object (equal tokens: same bytes).
    token: object
    #: Size of the object in bytes.
    size: int

    def read(self, ranges: list[tuple[int, int]]) -> list[Buf]:
        """Return ``[start, start+length)`` byte ranges (short at the end of the object)."""
        ...

    def close(self) -> None:
        """Release the object."""
        ...


@runtime_checkable
class ChunkStore(Protocol):
    """What the engine needs from a store."""

    #: A short description for messages, e.g. ``file:///data/a.zarr``.
    name: str

    def get(self, key: str, scratch: Scratch | BufferPool | None = None) -> Buf | None:
        """Return the whole object, or ``None`` if missing.

        With ``scratch``, the store may return a view into a buffer taken from it.
        """
        ...

    def read_into(self, key: str, out: npt.NDArray[np.uint8]) -> int | None:
        """Read a whole object into ``out``; return its size (``None`` if missing).

        Only ``min(size, len(out))`` bytes are written; the caller checks the size.
        """
        ...

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[Buf] | None:
        """Return ``[start, start+length)`` byte ranges of one object, or ``None`` if missing."""
        ...

    def get_suffix(self, key: str, length: int) -> tuple[Buf, int | None] | None:
        """Return the last ``length`` bytes and the object's total size, or ``None``.

        The size may be ``None`` when the store cannot tell it without another request (an
        object shorter than ``length`` comes back whole, its size then known).
        """
        ...

    def set(self, key: str, data: Buf) -> None:
        """Write a whole object atomically: readers see the old or the new value."""
        ...

    def delete(self, key: str) -> None:
        """Remove an object; a missing key is not an error."""
        ...

    def check_writable(self) -> None:
        """Raise before any write if the store cannot be written."""
        ...


@dataclass(frozen=True, slots=True)
class Coalescing:
    """Bounds on merging byte ranges of one object into fewer reads.

    zarr-python's ``array.sharding_coalesce_max_gap_bytes`` and
    ``array.sharding_coalesce_max_bytes`` (global or per array) in the zarr pipeline path.

    Attributes
    ----------
    max_gap : int
        Ranges at most this many bytes apart may be read as one.
    max_bytes : int
        No merged read is larger than this.
    """

    max_gap: int
    max_bytes: int


@runtime_checkable
class CoalescingStore(Protocol):
    """A store that plans its own ranged reads (a zarr ``Store`` used through its API).

    The engine hands it each needed range as it is, with the bounds to merge them by, and
    reads a shard with the requests zarr's sharding codec makes: the whole shard when every
    inner chunk is needed, else the index (one ranged read) and then one ``get_ranges`` call.
    """

    def get_range(self, key: str, start: int, length: int) -> Buf | None:
        """Return ``[start, start+length)`` of one object in one request, ``None`` if missing."""
        ...

    def get_ranges_coalesced(
        self, key: str, ranges: list[tuple[int, int]], limits: Coalescing
    ) -> list[Buf | None] | None:
        """Return each ``(start, length)`` range, merged as the store sees fit within ``limits``.

        ``None`` when the object is missing (also when it disappears between reads); a
        ``None`` entry for a range the store returned nothing for.
        """
        ...
