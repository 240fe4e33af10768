"""How local files are replaced atomically: temporary names, swaps and their removal.

A write goes to a temporary file beside the key (:class:`TempNames`: unique names without a
system call per name) and is moved over the key by a rename, or, on the file systems where it
is faster (:data:`SWAP_FILE_SYSTEMS`, :func:`swaps_help`), swapped with the file it replaces
(:func:`exchange`); the old file, left under the temporary name, is removed by one background
thread per process (:class:`Remover`). Used by :class:`~cuzarr.stores.local.LocalChunkStore`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import secrets
import stat
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = [
    "EXCHANGE_MIN",
    "Remover",
    "SWAP_FILE_SYSTEMS",
    "TEMP_SUFFIX",
    "TempNames",
    "exchange",
    "file_system_type",
    "is_regular_file",
    "remove_quietly",
    "remover",
    "swaps_help",
    "temp_names",
]

#: Suffix of in-progress writes; never a valid chunk key, ignored by ``cuzarr verify``.
TEMP_SUFFIX = ".partial"


class TempNames:
    """Names of temporary files, unique across the processes and threads that write a store.

    A random token of the process (drawn again in a forked child) and a counter: no system
    call per name (``uuid4`` reads the kernel's random source every time, which costs more
    than writing an 8 KiB chunk when two threads write at once). ``O_EXCL`` refuses a name
    that exists anyway, and the caller draws again.
    """

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._tag = f".{os.getpid():x}-{secrets.token_hex(6)}-"
        self._next = 0
        self._lock = threading.Lock()

    def reserve(self, n: int) -> tuple[str, int]:
        """``(tag, first)``: ``n`` temporary names reserved for the caller.

        They are ``path + tag + hex(first + i) + TEMP_SUFFIX`` for ``i < n`` (what
        :func:`cuzarr._native.put_files` writes).
        """
        with self._lock:
            first = self._next
            self._next += n
        return self._tag, first

    def next(self, path: str) -> str:
        """A fresh temporary name beside ``path``."""
        tag, first = self.reserve(1)
        return f"{path}{tag}{first:x}{TEMP_SUFFIX}"


temp_names = TempNames()

#: Replaced objects of at least this many bytes are swapped in (:func:`exchange`) rather than
#: renamed over the old file, on the file systems of :data:`SWAP_FILE_SYSTEMS`. On ext4, a
#: rename over an existing file first allocates and starts writing back the new file's blocks
#: (the ``auto_da_alloc`` heuristic), on the writing thread: replacing 512 files of 400 kB went
#: from 812 to 1,120 MB/s; replacing the 512 chunks of 512 KiB of an uncompressed 512^3
#: ``uint16`` array took 220 ms swapped, 400 ms renamed (2 threads). For files of a few KiB
#: the swap's extra ``unlink`` costs more than it saves (tmpfs: 271 to 245 MB/s for 6 kB files).
EXCHANGE_MIN = 64 * 1024
#: ``statfs`` types of the file systems where replacing files by swaps is faster: ext2/3/4
#: (one magic number). Elsewhere files are renamed over: on tmpfs the same 512 chunks took
#: 142 ms renamed, 173 ms swapped (the old file's removal on the remover thread is work, and
#: a GIL handoff, a rename over does not need there).
SWAP_FILE_SYSTEMS = frozenset({0xEF53})
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
#: What ``renameat2`` answers where a system or file system cannot exchange.
_NO_EXCHANGE = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})


class Remover:
    """Removes the old files that swaps leave under temporary names, on a background thread.

    Removing a replaced file of a few hundred kB waits on the file system (ext4: ~230 us of
    wall time, ~70 us of CPU, measured for 300 kB files), time the writing thread can spend on
    the next chunk. :meth:`drain` waits until every file handed over is gone; the engine calls
    it (:meth:`LocalChunkStore.settle`) before a write returns, so a finished write leaves no
    temporary file behind. One thread per process, started on demand, gone after
    :data:`LINGER` seconds without work; it is not a daemon, so the interpreter's exit
    finishes the removals. With :data:`MAX_PENDING` files waiting, the writer removes its own.
    """

    LINGER = 0.05
    MAX_PENDING = 64

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        # A forked child starts with nothing pending: the parent removes its own files.
        self._cond = threading.Condition()
        self._pending: deque[str] = deque()
        self._busy = 0  # handed over and not yet removed
        self._running = False

    def remove(self, path: str) -> None:
        """Remove ``path`` soon (now, on this thread, when too many are waiting)."""
        with self._cond:
            if self._busy < self.MAX_PENDING:
                self._pending.append(path)
                self._busy += 1
                if self._running:
                    self._cond.notify()
                else:
                    self._running = True
                    threading.Thread(target=self._run, name="cuzarr-remover").start()
                return
        remove_quietly(path)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._pending:
                    self._cond.wait(self.LINGER)
                if not self._pending:
                    self._running = False
                    return
                path = self._pending.popleft()
            # Whatever the removal raises, the file stays a .partial leftover (as after a kill),
            # it counts as done and the thread lives on: drain() never waits forever.
            with contextlib.suppress(Exception):
                remove_quietly(path)
            with self._cond:
                self._busy -= 1
                if not self._busy:
                    self._cond.notify_all()

    def drain(self) -> None:
        """Wait until every file handed to :meth:`remove` is removed."""
        with self._cond:
            while self._busy:
                self._cond.wait()


def remove_quietly(path: str) -> None:
    """Remove ``path``; a failure is left for ``cuzarr verify`` to report (a stale file)."""
    with contextlib.suppress(OSError):
        os.unlink(path)


remover = Remover()


def is_regular_file(path: str) -> bool:
    """Whether ``path`` is a regular file (not missing, a folder or a link): what is swapped."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _libc(name: str, argtypes: list[Any]) -> Callable[..., int] | None:
    """The C library's function ``name`` returning ``int`` (Linux), or ``None`` where missing."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """The C library's ``renameat2`` (Linux, glibc 2.28 or later), or ``None``."""
    c = ctypes
    return _libc("renameat2", [c.c_int, c.c_char_p, c.c_int, c.c_char_p, c.c_uint])


@functools.cache
def _statfs() -> Callable[..., int] | None:
    """The C library's ``statfs`` (Linux), or ``None``."""
    return _libc("statfs", [ctypes.c_char_p, ctypes.c_void_p])


def file_system_type(path: str) -> int | None:
    """The ``statfs`` type (``f_type``) of the file system holding ``path``, or ``None``."""
    fn = _statfs()
    if fn is None:
        return None
    buf = ctypes.create_string_buffer(512)  # struct statfs: 120 bytes on 64-bit Linux
    if fn(os.fsencode(path), buf) != 0:
        return None
    # f_type is the first field, a C long, on every Linux platform glibc supports.
    return ctypes.c_long.from_buffer(buf).value


def swaps_help(path: str) -> bool:
    """Whether replaced files below ``path`` are better swapped in (:data:`SWAP_FILE_SYSTEMS`)."""
    return file_system_type(path) in SWAP_FILE_SYSTEMS


def exchange(src: str, dst: str) -> bool | None:
    """Swap the files ``src`` and ``dst`` atomically (``renameat2`` with ``RENAME_EXCHANGE``).

    Returns ``True`` when they were swapped, ``False`` when ``dst`` does not exist, ``None``
    when this system or file system cannot swap. Raises the ``OSError`` of any other failure.
    """
    fn = _renameat2()
    if fn is None:
        return None
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.ENOENT:
        return False
    if err in _NO_EXCHANGE:
        return None
    raise OSError(err, os.strerror(err), dst)
