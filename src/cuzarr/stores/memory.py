"""zarr-python's ``MemoryStore``, read and written through its dictionary directly."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf, as_u8
from cuzarr.stores.base import BufferPool, Scratch

__all__ = ["MemoryChunkStore"]


class _ValueReader:
    """One stored value: ranges are views of it."""

    __slots__ = ("_data", "size", "token")

    def __init__(self, value: Any, data: npt.NDArray[np.uint8]) -> None:
        # The token holds the stored object itself: it stays alive (no id reuse) and any set
        # stores a new object.
        self.token: object = value
        self._data = data
        self.size = len(data)

    def read(self, ranges: list[tuple[int, int]]) -> list[Buf]:
        return [self._data[start : start + length] for start, length in ranges]

    def close(self) -> None:
        pass


class MemoryChunkStore:
    """Chunks held in a ``MemoryStore``'s dict of zarr ``Buffer`` objects.

    Parameters
    ----------
    store : zarr.storage.MemoryStore
        The store.
    """

    def __init__(self, store: Any) -> None:
        from zarr.core.buffer import cpu

        self._store = store
        self._dict: MutableMapping[str, Any] = store._store_dict
        self._buffer_cls = cpu.Buffer
        self.name = f"memory://{id(self._dict):x}"

    def get(self, key: str, scratch: Scratch | BufferPool | None = None) -> Buf | None:
        """Return a view of the stored bytes (no copy)."""
        value = self._dict.get(key)
        if value is None:
            return None
        return np.asarray(value.as_numpy_array()).view(np.uint8).reshape(-1)

    def read_into(self, key: str, out: npt.NDArray[np.uint8]) -> int | None:
        """Copy a stored value into ``out`` when the sizes match."""
        data = self.get(key)
        if data is None:
            return None
        if len(data) == out.nbytes:
            out[...] = data
        return len(data)

    def open_object(self, key: str) -> _ValueReader | None:
        """The stored value of ``key`` for ranged reads (``None`` if missing)."""
        value = self._dict.get(key)
        if value is None:
            return None
        return _ValueReader(value, np.asarray(value.as_numpy_array()).view(np.uint8).reshape(-1))

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[Buf] | None:
        """Return views of byte ranges."""
        data = self.get(key)
        if data is None:
            return None
        return [data[start : start + length] for start, length in ranges]

    def get_suffix(self, key: str, length: int) -> tuple[Buf, int] | None:
        """Return the last ``length`` bytes and the total size."""
        data = self.get(key)
        if data is None:
            return None
        n = len(data)
        return data[max(0, n - length) :], n

    def check_writable(self) -> None:
        """Raise if the store is read-only."""
        self._store._check_writable()

    def set(self, key: str, data: Buf) -> None:
        """Store a copy of ``data`` (one dict assignment: atomic for readers)."""
        self._dict[key] = self._buffer_cls.from_array_like(as_u8(data).copy())

    def delete(self, key: str) -> None:
        """Remove a key if present."""
        self._dict.pop(key, None)
