"""The threads zarr's event loop hands cuzarr's engine calls to: the last one idle takes the next.

cuzarr's zarr pipeline runs a call that is too large (or too remote) for zarr's event loop on a
thread, awaiting it there (:func:`hop`). ``asyncio.to_thread`` would hand it to the loop's
default executor, whose idle workers all wait on one queue and are woken in turn: consecutive
calls from one caller land on a different thread each time (six on a 2-core machine), and
whatever each thread keeps warm for the next call (the engine's per-thread scratch buffers and
zstd contexts, the batch helper's buffers, the CPU caches that hold them) is cold on every call.
Measured on the 2-core development VM, a partial write of one 8 MiB zstd shard through zarr
(bench's (k)), back to back: 6.6-7.1 ms a call on the default executor, 5.0-5.2 ms with the
call on the same thread every time (bench/results/probe-512-session49.md).

Here the idle threads form a stack: a call goes to the thread that became idle last, a new
thread is started only when none is idle (up to :data:`MAX_THREADS`, the default executor's
bound), and calls beyond that wait in order for the next thread to finish. Calls from several
callers at once still run at once. Threads are daemons, told to stop and joined at exit, and
forgotten in a forked child (which has none of them).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import functools
import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_THREADS", "HopThreads", "hop"]

#: Threads at most (asyncio's default executor's bound: ``min(32, CPUs + 4)``).
MAX_THREADS = min(32, (os.cpu_count() or 1) + 4)

_Job = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


def _deliver(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """Settle ``future`` on its loop (nothing where its awaiting task was cancelled)."""
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class _Worker:
    """One thread and the one-slot queue it takes its jobs from (``None``: stop)."""

    def __init__(self, pool: HopThreads, index: int) -> None:
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.thread = threading.Thread(
            target=pool._serve, args=(self,), name=f"cuzarr_hop_{index}", daemon=True
        )


class HopThreads:
    """A stack of idle threads that run the calls :meth:`run` is awaited for.

    Parameters
    ----------
    max_threads : int
        Threads at most; calls beyond them wait in order.
    """

    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads: expected an integer >= 1, got {max_threads!r}")
        self.max_threads = max_threads
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []  # the last one became idle last
        self._waiting: deque[_Job] = deque()
        self._workers: list[_Worker] = []
        self._closed = False

    @property
    def threads(self) -> int:
        """How many threads were started."""
        return len(self._workers)

    async def run(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` on one of the threads (in the caller's context); return what it returns.

        Its exception is raised here. Cancelling the awaiting task does not stop ``fn``: it runs
        to its end, as with ``asyncio.to_thread``, and its result is dropped.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        context = contextvars.copy_context()
        job: _Job = (functools.partial(context.run, fn), loop, future)
        with self._lock:
            if self._closed:
                raise RuntimeError("cuzarr's hop threads are shut down (interpreter exit)")
            if self._idle:
                self._idle.pop().jobs.put(job)
            elif len(self._workers) < self.max_threads:
                worker = _Worker(self, len(self._workers))
                self._workers.append(worker)
                worker.jobs.put(job)
                worker.thread.start()
            else:
                self._waiting.append(job)
        return await future

    def _serve(self, worker: _Worker) -> None:
        job = worker.jobs.get()
        while job is not None:
            fn, loop, future = job
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn()
            except BaseException as exc:  # handed to the awaiting task
                error = exc
            # Idle (or given the next waiting call) before the result is handed back: the
            # caller's next call, made as soon as it has the result, then finds this thread.
            with self._lock:
                following = self._waiting.popleft() if self._waiting else None
                stop = following is None and self._closed
                if following is None and not stop:
                    self._idle.append(worker)
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits the result
                loop.call_soon_threadsafe(_deliver, future, result, error)
            del fn, loop, future, result, error, job
            if stop:
                return
            job = following if following is not None else worker.jobs.get()

    def shutdown(self) -> None:
        """Stop the idle threads and wait for the busy ones to finish their calls."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            workers = list(self._workers)
        for worker in idle:
            worker.jobs.put(None)
        for worker in workers:
            if worker.thread is not threading.current_thread():
                worker.thread.join()


_threads = HopThreads()


def _after_fork_in_child() -> None:
    global _threads
    _threads = HopThreads()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _shutdown_at_exit() -> None:
    _threads.shutdown()


async def hop(fn: Callable[[], Any]) -> Any:
    """Run ``fn()`` on the process's hop threads (:class:`HopThreads`) and return its result."""
    return await _threads.run(fn)
