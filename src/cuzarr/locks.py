"""Process-wide locks per stored object, for read-modify-write of chunks and shards.

A partial write reads a chunk (or shard), merges and writes it back. Two threads doing that to
the same object at once would lose one update. Every engine in the process takes the lock of
``(store, key)`` around its read-modify-write, so concurrent writers through zarr's API, the
explicit API or Dask's threaded scheduler serialize per object instead. Writers in other
processes are not covered (see docs/reliability.md).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["object_locks"]


@dataclass(slots=True)
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Threads holding or waiting for the lock; the entry is dropped at zero.
    users: int = 0


_table_lock = threading.Lock()
_table: dict[tuple[str, str], _Entry] = {}


def _after_fork_in_child() -> None:
    global _table_lock, _table
    _table_lock = threading.Lock()
    _table = {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@contextmanager
def object_locks(store: str, keys: Iterable[str]) -> Iterator[None]:
    """Hold the locks of ``keys`` in ``store`` (taken in sorted order: no deadlock).

    Parameters
    ----------
    store : str
        Identifies the store (its ``name``: a URL or path).
    keys : iterable of str
        Keys of the objects about to be read, merged and rewritten.
    """
    names = sorted(set(keys))
    entries: list[_Entry] = []
    with _table_lock:
        for key in names:
            entry = _table.get((store, key))
            if entry is None:
                entry = _table[(store, key)] = _Entry()
            entry.users += 1
            entries.append(entry)
    taken: list[_Entry] = []
    try:
        for entry in entries:
            entry.lock.acquire()
            taken.append(entry)
        yield
    finally:
        for entry in reversed(taken):
            entry.lock.release()
        with _table_lock:
            for key, entry in zip(names, entries, strict=True):
                entry.users -= 1
                if entry.users == 0 and _table.get((store, key)) is entry:
                    del _table[(store, key)]
