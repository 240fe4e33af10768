"""zarr-python's ``MemoryStore``, read and written through its dictionary directly."""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf, as_u8
from cuzarr.errors import ReadOnlyError
from cuzarr.stores.base import (
    BaseChunkStore,
    BufferPool,
    Coalescing,
    GetResult,
    PutMode,
    Range,
    Scratch,
    StoreCaps,
    Suffix,
)

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


class MemoryChunkStore(BaseChunkStore):
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
        self.caps = StoreCaps(read_into=True, open_object=True)

    def _bytes(self, key: str) -> npt.NDArray[np.uint8] | None:
        value = self._dict.get(key)
        if value is None:
            return None
        return np.asarray(value.as_numpy_array()).view(np.uint8).reshape(-1)

    def get(
        self,
        key: str,
        byte_range: Range | Suffix | None = None,
        *,
        if_match: str | None = None,
        scratch: Scratch | BufferPool | None = None,
        size_hint: int | None = None,
        fresh: bool = False,
    ) -> GetResult | None:
        """Return a view of the stored bytes, or of a range of them (no copy)."""
        data = self._bytes(key)
        if data is None:
            return None
        n = len(data)
        if byte_range is None:
            return GetResult(data, n)
        if isinstance(byte_range, Suffix):
            return GetResult(data[max(0, n - byte_range.length) :], n)
        return GetResult(data[byte_range.start : byte_range.start + byte_range.length], n)

    def read_into(self, key: str, out: npt.NDArray[np.uint8]) -> int | None:
        """Copy a stored value into ``out`` when the sizes match."""
        data = self._bytes(key)
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

    def get_ranges(
        self,
        key: str,
        ranges: Sequence[tuple[int, int]],
        *,
        if_match: str | None = None,
        limits: Coalescing | None = None,
    ) -> list[Buf | None] | None:
        """Return views of byte ranges."""
        data = self._bytes(key)
        if data is None:
            return None
        return [data[start : start + length] for start, length in ranges]

    def check_writable(self) -> None:
        """Raise if the store is read-only."""
        if self._store.read_only:
            raise ReadOnlyError(
                f"store was opened in read-only mode and does not support writing ({self.name})"
            )

    def put(
        self, key: str, data: Buf, *, mode: PutMode = PutMode.OVERWRITE, version: str | None = None
    ) -> None:
        """Store a copy of ``data`` (one dict assignment: atomic for readers).

        No conditional puts: read-modify-writes in this process are serialized by the engine's
        write locks, so every mode overwrites.
        """
        self._dict[key] = self._buffer_cls.from_array_like(as_u8(data).copy())

    def delete(self, key: str) -> None:
        """Remove a key if present."""
        self._dict.pop(key, None)

    def list_dir(self, prefix: str) -> list[str]:
        """Names directly below ``prefix``, sorted."""
        base = prefix.strip("/")
        head = f"{base}/" if base else ""
        names = {k[len(head) :].split("/", 1)[0] for k in list(self._dict) if k.startswith(head)}
        return sorted(n for n in names if n)

    def list_sizes(self, prefix: str) -> list[tuple[str, int]]:
        """Every key below ``prefix`` with its size."""
        base = prefix.strip("/")
        head = f"{base}/" if base else ""
        return sorted(
            (k, len(v.as_numpy_array().view(np.uint8).reshape(-1)))
            for k, v in list(self._dict.items())
            if k.startswith(head)
        )
