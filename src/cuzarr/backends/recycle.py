"""Large host buffers recycled: the memory of outputs the caller freed, lent again for a while.

Every new large allocation costs the kernel a page fault and a zeroed page per 4 KiB the first
time it is written: ~0.2 ms per MiB on the machines measured, 15-30 % of reading a whole array
of fast-decoding chunks into a new array (bench/results/probe-512-session46.md). glibc returns
allocations over 32 MiB (and from threads, smaller ones) to the system when they are freed, so
a loop that reads an array, uses it and drops it pays this on every read. The pool here keeps
such memory once the last array over it is gone and lends it to the next large allocation of
about the same size, as allocators with retained memory do (jemalloc's dirty pages), bounded
in bytes and in time:

- only allocations of at least :data:`RECYCLE_MIN` bytes are lent from here;
- memory returns to the pool only when nothing refers to it any more: an array, its views and
  memoryviews of them all hold the lending object (:class:`Lent`), whose ``__del__`` hands the
  memory back;
- the pool holds at most :func:`limit` bytes (``CUZARR_RECYCLE_BYTES``; default the smaller of
  1 GiB and 1/16 of physical memory; ``0`` turns recycling off), oldest dropped first, and
  drops what it held for :data:`DECAY_S` seconds unused (a daemon thread, running while
  anything is held or lent);
- a held buffer is lent for a request of between 80 % and 100 % of its size; a request it
  cannot serve first drops held memory until it and the request fit the limit.

What comes back is uninitialised memory, as ``np.empty``'s: its old values, not zeros. Callers
write every element they return (the engine's outputs, zarr's buffers through
:class:`cuzarr.zarr_buffers.AlignedNDBuffer`).

``__del__`` only appends to a deque (atomic, no lock), since it may run inside any code,
this module's own locked sections included, when the last reference goes.
"""

from __future__ import annotations

import collections
import os
import threading
import time

import numpy as np
import numpy.typing as npt

from cuzarr import diagnostics

__all__ = ["DECAY_S", "RECYCLE_MIN", "Lent", "Pool", "empty", "limit", "pool"]

#: Allocations of at least this many bytes are lent from the pool (4 MiB: below that glibc's
#: heap already reuses freed memory in the main thread, and the fault cost is small).
RECYCLE_MIN = 4 * 1024 * 1024

#: Seconds a returned buffer stays held without being lent again.
DECAY_S = 10.0

#: The smallest request a held buffer serves, as a fraction of its size.
_FIT = 0.8


def limit() -> int:
    """Bytes the process-wide pool holds at most: ``CUZARR_RECYCLE_BYTES``, else the default.

    Raises
    ------
    ValueError
        ``CUZARR_RECYCLE_BYTES`` is not a non-negative integer (named, with its value).
    """
    raw = os.environ.get("CUZARR_RECYCLE_BYTES", "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if value < 0:
            raise ValueError(
                f"Environment variable CUZARR_RECYCLE_BYTES: expected a byte count >= 0, "
                f"got {raw!r}"
            )
        return value
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        physical = 16 << 30
    return int(min(1 << 30, physical // 16))


class Lent:
    """One buffer lent out: exports its memory; hands it back when the last user is gone.

    ``np.frombuffer(lent, ...)`` makes an array whose base (a memoryview) refers to this
    object, and every view of that array to that base, so ``__del__`` runs only once nothing
    can reach the memory.
    """

    __slots__ = ("_pool", "_raw")

    def __init__(self, raw: npt.NDArray[np.uint8], pool: Pool) -> None:
        self._raw = raw
        self._pool = pool

    def __buffer__(self, flags: int) -> memoryview:
        return memoryview(self._raw)

    def __release_buffer__(self, view: memoryview) -> None:
        view.release()

    def __del__(self) -> None:
        self._pool.returned.append(self._raw)


class Pool:
    """Held buffers and the rules above; one per process (:func:`pool`), more in tests.

    Parameters
    ----------
    max_bytes : int
        Bytes held at most (0: nothing is held; every request gets new memory).
    decay_s : float
        Seconds a buffer is held unused.
    poison : int, optional
        A byte written over every returned buffer (tests: a reader that relies on new memory
        reading as zeros, or on anything else it did not write, then reads this).
    """

    def __init__(self, max_bytes: int, decay_s: float = DECAY_S, poison: int | None = None):
        self.max_bytes = max_bytes
        self.decay_s = decay_s
        self.poison = poison
        #: Appended by :meth:`Lent.__del__` (no lock), moved to ``_held`` under the lock.
        self.returned: collections.deque[npt.NDArray[np.uint8]] = collections.deque()
        self._held: list[tuple[float, npt.NDArray[np.uint8]]] = []
        self._lock = threading.Lock()
        self._lent = 0  # lent and not yet seen back
        #: The thread that drops what decays; it ends once nothing is held or lent.
        self._sweeper: threading.Thread | None = None
        self.reused = 0
        self.new = 0

    def empty(self, nbytes: int) -> npt.NDArray[np.uint8]:
        """``nbytes`` uninitialised bytes: held memory where a buffer fits, else new memory.

        Requests the pool may hold later (up to ``max_bytes``) get memory lent through a
        :class:`Lent` (the array's base), which comes back here when the array and all its
        views are gone; larger ones plain ``np.empty``. Counted in ``cuzarr.stats()``:
        ``recycled_buffers`` and ``new_large_buffers``.
        """
        if not 0 < nbytes <= self.max_bytes:
            diagnostics.count("new_large_buffers")
            return np.empty(nbytes, np.uint8)
        sweeper = None
        with self._lock:
            self._take_returned()
            raw = self._fit(nbytes)
            self._lent += 1
            if raw is None:
                self.new += 1
            else:
                self.reused += 1
            if self._sweeper is None:
                sweeper = self._sweeper = threading.Thread(
                    target=self._sweep, name="cuzarr-recycle", daemon=True
                )
        diagnostics.count("new_large_buffers" if raw is None else "recycled_buffers")
        if sweeper is not None:
            try:
                sweeper.start()
            except RuntimeError:  # the interpreter is shutting down: nothing sweeps then
                with self._lock:
                    self._sweeper = None
        if raw is None:
            raw = np.empty(nbytes, np.uint8)
        return np.frombuffer(Lent(raw, self), np.uint8, count=nbytes)

    def held_bytes(self) -> int:
        """Bytes held now (returned buffers included)."""
        with self._lock:
            self._take_returned()
            return sum(raw.nbytes for _t, raw in self._held)

    def release(self) -> int:
        """Drop everything held now; the bytes dropped."""
        with self._lock:
            self._take_returned()
            dropped = sum(raw.nbytes for _t, raw in self._held)
            self._held.clear()
        return dropped

    def _fit(self, nbytes: int) -> npt.NDArray[np.uint8] | None:
        """Take the smallest held buffer serving ``nbytes``, else make room for new memory."""
        best = None
        for i, (_t, raw) in enumerate(self._held):
            fits = raw.nbytes * _FIT <= nbytes <= raw.nbytes
            if fits and (best is None or raw.nbytes < self._held[best][1].nbytes):
                best = i
        if best is not None:
            return self._held.pop(best)[1]
        self._drop_oldest(room=nbytes)
        return None

    def _drop_oldest(self, room: int = 0) -> None:
        """Drop held buffers, oldest first, until they and ``room`` bytes fit the limit."""
        held = sum(raw.nbytes for _t, raw in self._held)
        while self._held and held + room > self.max_bytes:
            held -= self._held.pop(0)[1].nbytes

    def _take_returned(self) -> None:
        """Move returned buffers into ``_held`` (under the lock), within the byte limit."""
        now = time.monotonic()
        while self.returned:
            raw = self.returned.popleft()
            self._lent -= 1
            if self.poison is not None:
                raw.fill(self.poison)
            self._held.append((now, raw))
        self._drop_oldest()

    def _sweep_once(self) -> bool:
        """Drop buffers held unused for ``decay_s``; whether the sweeper goes on."""
        with self._lock:
            self._take_returned()
            cutoff = time.monotonic() - self.decay_s
            self._held = [(t, raw) for t, raw in self._held if t > cutoff]
            if self._held or self._lent > 0:
                return True
            self._sweeper = None  # the next lend starts another
            return False

    def _sweep(self) -> None:
        time.sleep(self.decay_s / 2)
        while self._sweep_once():
            time.sleep(self.decay_s / 2)

    def _after_fork(self) -> None:
        """In a forked child: a new lock and no sweeper (the child's next lend starts one)."""
        self._lock = threading.Lock()
        self._sweeper = None


_POOL: Pool | None = None
_POOL_LOCK = threading.Lock()


def pool() -> Pool:
    """The process-wide pool, made on first use with :func:`limit` bytes."""
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                made = Pool(limit())
                os.register_at_fork(after_in_child=made._after_fork)
                _POOL = made
    return _POOL


def empty(nbytes: int) -> npt.NDArray[np.uint8]:
    """``nbytes`` uninitialised bytes, recycled where the process-wide pool has them.

    Below :data:`RECYCLE_MIN`, plain ``np.empty``.
    """
    if nbytes < RECYCLE_MIN:
        return np.empty(nbytes, np.uint8)
    return pool().empty(nbytes)
