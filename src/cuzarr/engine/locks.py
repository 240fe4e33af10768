"""Locks per stored object, for read-modify-write of chunks and shards.

A partial write reads a chunk (or shard), merges and writes it back. Two writers doing that to
the same object at once would lose one update. Every engine takes the lock of ``(store, key)``
around its read-modify-write (:func:`write_locks`): a process-wide lock for the threads of one
process (zarr's API, the explicit API, Dask's threaded scheduler), and for local folders also
a cross-process lock (:func:`file_locks`), so processes on one machine serialize too. Object
stores use conditional puts instead (see ``stores/obstore_.py``).
"""

from __future__ import annotations

import functools
import os
import threading
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cuzarr.stores.base import ChunkStore

__all__ = ["file_locks", "object_locks", "slot_of", "write_locks"]


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


# ---------------------------------------------------------------------------------------------
# across processes (local folders)

_LOCK_DIR_ENV = "CUZARR_LOCK_DIR"
_SLOTS = 1 << 30
_fd_lock = threading.Lock()
_fds: dict[str, int] = {}


def _after_fork_fds() -> None:
    global _fd_lock, _slots
    _fd_lock = threading.Lock()
    # POSIX record locks are not inherited (the descriptors are, and stay usable).
    _slots = {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_fds)


def _lock_file(root: str) -> int:
    """The open lock file of a store root, one per process.

    It is never closed: closing any descriptor of a file drops the process's POSIX locks on it.
    """
    with _fd_lock:
        fd = _fds.get(root)
        if fd is None:
            import hashlib
            import tempfile

            folder = os.environ.get(_LOCK_DIR_ENV) or os.path.join(
                tempfile.gettempdir(), "cuzarr-locks"
            )
            os.makedirs(folder, exist_ok=True)
            name = hashlib.sha256(root.encode()).hexdigest()[:32]
            fd = os.open(os.path.join(folder, name), os.O_RDWR | os.O_CREAT, 0o666)
            _fds[root] = fd
        return fd


@dataclass(slots=True)
class _Slot:
    slot: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Threads of this process holding the byte.
    users: int = 0


_slots: dict[tuple[str, int], _Slot] = {}


@functools.lru_cache(maxsize=1 << 16)
def slot_of(key: str) -> int:
    """The byte of the lock file that guards ``key``.

    Keys that end in a chunk index (``c/0/1/7``, ``0.1.7``) get the slot of the rest of the
    key plus that index, so the chunks of one row of the grid lie on consecutive bytes and a
    batch of them is locked with one system call; other keys a hash of the whole key.
    """
    cut = max(key.rfind("/"), key.rfind("."))
    tail = key[cut + 1 :]
    if tail.isascii() and tail.isdigit():
        return (zlib.crc32(key[: cut + 1].encode()) + int(tail)) % _SLOTS
    return zlib.crc32(key.encode()) % _SLOTS


def _slot_entries(root: str, keys: Iterable[str]) -> list[_Slot]:
    """The slots of ``keys`` in ascending order, each once (one table lookup under one lock)."""
    slots = sorted({slot_of(k) for k in keys})
    with _fd_lock:
        out = []
        for slot in slots:
            entry = _slots.get((root, slot))
            if entry is None:
                entry = _slots[(root, slot)] = _Slot(slot)
            out.append(entry)
        return out


def _runs(entries: list[_Slot]) -> Iterator[tuple[int, int]]:
    """``(first slot, length)`` of each run of consecutive slots of sorted ``entries``."""
    i = 0
    while i < len(entries):
        j = i + 1
        while j < len(entries) and entries[j].slot == entries[j - 1].slot + 1:
            j += 1
        yield entries[i].slot, j - i
        i = j


def _take(fd: int, entries: list[_Slot], taken: list[_Slot]) -> None:
    """Count this thread as a user of every slot of ``entries`` (ascending).

    The bytes of the slots no thread of this process holds are locked, one run of consecutive
    bytes per call. A slot's thread lock is held while its byte is being locked, and only
    then: a thread blocked on another process's byte holds no lock that a thread of this
    process needs to release what it holds (no deadlock). Each slot counted goes to ``taken``.
    """
    import fcntl

    i, n = 0, len(entries)
    while i < n:
        entry = entries[i]
        entry.lock.acquire()
        if entry.users:
            entry.users += 1
            entry.lock.release()
            taken.append(entry)
            i += 1
            continue
        # A run of bytes nobody here holds, extended while the next slot is the next byte.
        run = [entry]
        while i + len(run) < n and entries[i + len(run)].slot == run[-1].slot + 1:
            following = entries[i + len(run)]
            following.lock.acquire()
            if following.users:
                following.lock.release()
                break
            run.append(following)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX, len(run), run[0].slot, os.SEEK_SET)
            for held in run:
                held.users += 1
            taken.extend(run)
        finally:
            for held in run:
                held.lock.release()
        i += len(run)


def _give(fd: int, entries: list[_Slot]) -> None:
    """Undo :func:`_take`: the bytes whose last user this was are unlocked (one call per run)."""
    import fcntl

    for entry in entries:
        entry.lock.acquire()
    try:
        for entry in entries:
            entry.users -= 1
        for start, length in _runs([e for e in entries if e.users == 0]):
            fcntl.lockf(fd, fcntl.LOCK_UN, length, start, os.SEEK_SET)
    finally:
        for entry in entries:
            entry.lock.release()


@contextmanager
def file_locks(root: str, keys: Iterable[str]) -> Iterator[None]:
    """Hold cross-process locks on ``keys`` of the local store at ``root``.

    Each key maps to one byte of a lock file kept outside the store (under the system's
    temporary folder, or ``$CUZARR_LOCK_DIR``; :func:`slot_of`), locked with ``fcntl.lockf``:
    processes on this machine that rewrite the same chunk or shard serialize. Two keys may
    share a byte (then they serialize needlessly, never incorrectly). Record locks belong to
    the process, so a byte is taken when the first thread of the process needs it and released
    after the last; threads exclude each other through :func:`object_locks`. Bytes are taken
    in ascending order, a run of consecutive bytes per system call. No-op where ``fcntl`` is
    missing.
    """
    try:
        import fcntl  # noqa: F401
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = _lock_file(root)
    taken: list[_Slot] = []
    try:
        _take(fd, _slot_entries(root, keys), taken)
        yield
    finally:
        if taken:
            _give(fd, taken)


@contextmanager
def write_locks(store: ChunkStore, keys: Iterable[str]) -> Iterator[None]:
    """Hold the locks of a read-modify-write of ``keys`` in ``store``.

    Per thread in this process always; per process as well for stores that declare a lock
    folder (:attr:`~cuzarr.stores.base.StoreCaps.lock_root`: local folders).
    """
    names = list(keys)
    with object_locks(store.name, names):
        root = store.caps.lock_root
        if root is None:
            yield
        else:
            with file_locks(root, names):
                yield
