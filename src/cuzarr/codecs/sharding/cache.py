"""A small LRU cache of decoded shard indexes, shared by the reads of one array's engine.

On an object store a partial read of a shard costs two round trips: the index, then the inner
chunks. Caching the index turns every later partial read of the same shard into one. Entries
carry a token: the shard's ETag (object stores: reads are then conditional on it), the index
bytes themselves (local files, memory: equal bytes, equal table), or nothing (stores without
versions: used only where the reader trusts its cache, see
:class:`~cuzarr.codecs.sharding.reader.ShardReader`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import numpy.typing as npt

__all__ = ["ShardIndexCache"]


class ShardIndexCache:
    """Shard key -> (index table, shard size), bounded by the bytes of the tables held.

    Parameters
    ----------
    max_bytes : int, default 32 MiB
        Bound on the cached tables' size; least recently used entries go first.
    """

    def __init__(self, max_bytes: int = 32 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, tuple[npt.NDArray[np.uint64], int | None, object]] = (
            OrderedDict()
        )
        self._nbytes = 0
        self._lock = threading.Lock()
        #: Lookups answered from the cache, and the ones that were not.
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(
        self, key: str, token: object = None
    ) -> tuple[npt.NDArray[np.uint64], int | None] | None:
        """The cached ``(table, size)`` of shard ``key`` and version ``token``, or ``None``."""
        entry = self._lookup(key, token, any_token=False)
        return None if entry is None else (entry[0], entry[1])

    def peek(self, key: str) -> tuple[npt.NDArray[np.uint64], int | None, object] | None:
        """The cached ``(table, size, token)`` of shard ``key`` whatever its token, or ``None``."""
        return self._lookup(key, None, any_token=True)

    def _lookup(
        self, key: str, token: object, *, any_token: bool
    ) -> tuple[npt.NDArray[np.uint64], int | None, object] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or not (any_token or entry[2] == token):
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry

    def put(
        self, key: str, table: npt.NDArray[np.uint64], size: int | None, token: object = None
    ) -> None:
        """Remember the index of shard ``key`` at version ``token`` (too large: not kept)."""
        if table.nbytes > self.max_bytes:
            return
        table.flags.writeable = False
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._nbytes -= old[0].nbytes
            self._entries[key] = (table, size, token)
            self._nbytes += table.nbytes
            while self._nbytes > self.max_bytes:
                _, (dropped, _size, _token) = self._entries.popitem(last=False)
                self._nbytes -= dropped.nbytes

    def discard(self, key: str) -> None:
        """Forget shard ``key`` (after it was rewritten or found stale)."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._nbytes -= old[0].nbytes

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._entries.clear()
            self._nbytes = 0
