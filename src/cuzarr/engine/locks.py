"""Locks per stored object, for read-modify-write of chunks and shards.

A partial write reads a chunk (or shard), merges and writes it back. Two writers doing that to
the same object at once would lose one update. Every engine takes the locks of a batch of keys
around its writes (:func:`write_locks`): for the threads of one process (zarr's API, the
explicit API, Dask's threaded scheduler) a striped table of thread locks, and for local folders
also a cross-process lock (an ``fcntl`` byte per key of a lock file), so processes on one
machine serialize too. Object stores use conditional puts instead (see ``stores/obstore_.py``).

Every key has a slot (:func:`slot_of`): its byte in the folder's lock file, and with the
store's offset its stripe (one thread lock of :data:`STRIPES`). A thread takes its stripes in
ascending order, then its bytes in ascending order (a run of consecutive bytes per system
call); two keys on one stripe serialize needlessly, never incorrectly. Since one slot always
falls on one stripe, only one thread of a process holds a given byte at any time, so a byte is
locked and unlocked by the thread that needs it, with no count of users. A thread waiting for
a stripe holds no byte yet, so a thread blocked on another process's byte keeps no thread of
its own process from letting go of what that one holds (no deadlock across processes either:
every thread takes bytes in ascending order).
"""

from __future__ import annotations

import errno
import functools
import os
import threading
import time
import zlib
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    HAS_FCNTL = False
else:
    HAS_FCNTL = True

if TYPE_CHECKING:
    from cuzarr.stores.base import ChunkStore

__all__ = ["STRIPES", "WriteLocks", "file_locks", "slot_of", "write_locks"]

#: Thread locks in the table (created when first used): two keys of one store share one with
#: odds of about 1 in this, then serialize needlessly.
STRIPES = 1 << 14
_stripes: dict[int, threading.Lock] = {}

_LOCK_DIR_ENV = "CUZARR_LOCK_DIR"
_SLOTS = 1 << 30
_fd_lock = threading.Lock()
_fds: dict[str, int] = {}

#: How long a lock call refused as a deadlock is retried (see :func:`_lock_runs`).
DEADLOCK_RETRY_S = 60.0


def _after_fork_in_child() -> None:
    global _fd_lock, _stripes
    # Locks other threads of the parent held stay held in the child: start afresh. POSIX
    # record locks are not inherited (the descriptors are, and stay usable).
    _fd_lock = threading.Lock()
    _stripes = {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _lock_file(root: str) -> int:
    """The open lock file of a store root, one per process.

    It is never closed: closing any descriptor of a file drops the process's POSIX locks on it.
    """
    fd = _fds.get(root)
    if fd is not None:
        return fd
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


def _stripe(i: int) -> threading.Lock:
    lock = _stripes.get(i)
    if lock is None:
        lock = _stripes.setdefault(i, threading.Lock())
    return lock


def _runs(slots: Sequence[int]) -> list[tuple[int, int]]:
    """``(first slot, length)`` of each run of consecutive values of ascending ``slots``."""
    runs: list[tuple[int, int]] = []
    start = prev = -2
    for s in slots:
        if s != prev + 1:
            if prev >= 0:
                runs.append((start, prev - start + 1))
            start = s
        prev = s
    if prev >= 0:
        runs.append((start, prev - start + 1))
    return runs


def _lock_runs(fd: int, runs: Sequence[tuple[int, int]]) -> None:
    """Lock the byte runs ``runs`` (ascending) of ``fd``; on failure none stays locked.

    Linux's deadlock check of record locks sees processes, not threads: with several threads
    of two processes waiting on each other's bytes it may refuse a request (``EDEADLK``) that
    cannot deadlock, since every thread takes its bytes in ascending order. Such a refusal is
    retried after a short pause, for up to :data:`DEADLOCK_RETRY_S` seconds.
    """
    done = 0
    try:
        for start, length in runs:
            pause, waited = 0.0005, 0.0
            while True:
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX, length, start, os.SEEK_SET)
                    break
                except OSError as exc:
                    if exc.errno != errno.EDEADLK or waited >= DEADLOCK_RETRY_S:
                        raise
                time.sleep(pause)
                waited += pause
                pause = min(pause * 2, 0.05)
            done += 1
    except BaseException:
        for start, length in runs[:done]:
            fcntl.lockf(fd, fcntl.LOCK_UN, length, start, os.SEEK_SET)
        raise


class WriteLocks:
    """The locks of a batch of keys: a context manager (what :func:`write_locks` returns).

    Parameters
    ----------
    owner : str
        What the thread locks are keyed by: the lock root for local folders, else the store's
        name.
    keys : iterable of str
        Keys of the objects about to be written.
    fd : int or None
        The lock file of a local folder (:func:`_lock_file`); ``None``: threads only.
    """

    __slots__ = ("_fd", "_locks", "_runs")

    def __init__(self, owner: str, keys: Iterable[str], fd: int | None) -> None:
        slots = sorted({slot_of(k) for k in keys})
        base = hash(owner)
        self._locks = [_stripe(i) for i in sorted({(s + base) % STRIPES for s in slots})]
        self._fd = fd
        self._runs = _runs(slots) if fd is not None else []

    def __enter__(self) -> None:
        taken = 0
        try:
            for lock in self._locks:
                lock.acquire()
                taken += 1
            if self._fd is not None:
                _lock_runs(self._fd, self._runs)
        except BaseException:
            for lock in reversed(self._locks[:taken]):
                lock.release()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._fd is not None:
                for start, length in self._runs:
                    fcntl.lockf(self._fd, fcntl.LOCK_UN, length, start, os.SEEK_SET)
        finally:
            for lock in reversed(self._locks):
                lock.release()


def file_locks(root: str, keys: Iterable[str]) -> WriteLocks:
    """The locks of ``keys`` of the local folder at ``root``: threads and processes.

    Each key maps to one byte of a lock file kept outside the store (under the system's
    temporary folder, or ``$CUZARR_LOCK_DIR``; :func:`slot_of`), locked with ``fcntl.lockf``
    by the one thread of the process that holds the key's stripe. No cross-process part where
    ``fcntl`` is missing.
    """
    if not HAS_FCNTL:  # pragma: no cover - not POSIX
        return WriteLocks(root, keys, None)
    return WriteLocks(root, keys, _lock_file(root))


def write_locks(store: ChunkStore, keys: Iterable[str]) -> WriteLocks:
    """The locks of a write of ``keys`` in ``store`` (a context manager).

    Threads of this process always; processes as well for stores that declare a lock folder
    (:attr:`~cuzarr.stores.base.StoreCaps.lock_root`: local folders).
    """
    root = store.caps.lock_root
    if root is None:
        return WriteLocks(store.name, keys, None)
    return file_locks(root, keys)
