"""One thread pool per process, and :func:`parallel_map`, through which all engine work runs.

All engine work (fetch, decode, scatter, encode, write) runs through :func:`parallel_map`: the
calling thread and ``threads - 1`` pool workers pull items from one shared counter, so a batch
costs a few task submissions, not one future per chunk. The codecs release the GIL, so two
threads give two decoders. The pool is created on first use and dropped in a forked child
(whose copy has no threads), so ``multiprocessing`` with the fork start method and Dask process
workers do not deadlock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait

__all__ = ["cpu_pool", "parallel_map"]

_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_lock = threading.Lock()
_local = threading.local()


def _after_fork_in_child() -> None:
    global _pool, _pool_size, _lock
    _pool = None
    _pool_size = 0
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _mark_worker() -> None:
    _local.in_engine = True


def cpu_pool(n_workers: int) -> ThreadPoolExecutor:
    """Return the process-wide pool with at least ``n_workers`` workers."""
    global _pool, _pool_size
    pool = _pool
    if pool is not None and _pool_size >= n_workers:
        return pool
    with _lock:
        if _pool is None or _pool_size < n_workers:
            # The old pool is not shut down: another thread may be about to submit to it. It
            # finishes its in-flight work and is collected when unreferenced.
            _pool = ThreadPoolExecutor(
                max_workers=n_workers, thread_name_prefix="cuzarr", initializer=_mark_worker
            )
            _pool_size = n_workers
        return _pool


def parallel_map[T, R](fn: Callable[[T], R], items: Sequence[T], n_threads: int) -> list[R]:
    """Apply ``fn`` to every item on ``n_threads`` threads (the caller included), in order.

    Runs inline for one item, one thread, or a call from inside the engine (nested use must
    not wait on the pool it runs in). On the first exception the remaining items are skipped,
    every thread is joined, and the exception is re-raised: no work outlives the call.
    """
    n = len(items)
    if n <= 1 or n_threads <= 1 or getattr(_local, "in_engine", False):
        return [fn(x) for x in items]
    results: list[R | None] = [None] * n
    counter = iter(range(n))
    take = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        while not errors:
            with take:
                i = next(counter, None)
            if i is None:
                return
            try:
                results[i] = fn(items[i])
            except BaseException as exc:
                errors.append(exc)
                return

    def pool_work() -> None:
        _local.in_engine = True
        work()

    helpers = min(n_threads, n) - 1
    futures = [cpu_pool(n_threads - 1).submit(pool_work) for _ in range(helpers)]
    _local.in_engine = True
    try:
        work()
    finally:
        _local.in_engine = False
        wait(futures)
    if errors:
        raise errors[0]
    return results  # type: ignore[return-value]
