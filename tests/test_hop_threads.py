"""The threads cuzarr's zarr pipeline hops onto (``cuzarr.hop_threads``).

A call goes to the thread that became idle last, so one caller's calls run on one thread (its
per-thread buffers and contexts stay warm; asyncio's default executor woke its idle threads in
turn); calls made at once still run at once, up to the bound, and the rest wait in order.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import cuzarr.engine
from cuzarr import hop_threads
from cuzarr.hop_threads import HopThreads
from cuzarr.testing import use_pipeline


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_results_and_errors_come_back() -> None:
    pool = HopThreads(2)

    async def main() -> None:
        assert await pool.run(lambda: 41 + 1) == 42

        def fails() -> None:
            raise KeyError("from the thread")

        with pytest.raises(KeyError, match="from the thread"):
            await pool.run(fails)

    try:
        _run(main())
    finally:
        pool.shutdown()
    with pytest.raises(ValueError, match="max_threads: expected an integer >= 1"):
        HopThreads(0)


def test_one_callers_calls_run_on_one_thread() -> None:
    pool = HopThreads(4)

    async def main() -> list[int]:
        return [await pool.run(threading.get_ident) for _ in range(20)]

    try:
        seen = _run(main())
    finally:
        pool.shutdown()
    assert len(set(seen)) == 1
    assert seen[0] != threading.get_ident()
    assert pool.threads == 1


def test_calls_made_at_once_run_at_once() -> None:
    pool = HopThreads(4)
    barrier = threading.Barrier(3, timeout=20)

    async def main() -> list[int]:
        def meet() -> int:
            barrier.wait()  # passes only with all three running together
            return threading.get_ident()

        return list(await asyncio.gather(*(pool.run(meet) for _ in range(3))))

    try:
        idents = _run(main())
    finally:
        pool.shutdown()
    assert len(set(idents)) == 3


@pytest.mark.parametrize("bound", [1, 2])
def test_calls_beyond_the_bound_wait_in_order(bound: int) -> None:
    pool = HopThreads(bound)
    lock = threading.Lock()
    running = 0
    most = 0
    started: list[int] = []

    def job(k: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            started.append(k)
        time.sleep(0.02)
        with lock:
            running -= 1
        return k

    async def main() -> list[int]:
        return list(await asyncio.gather(*(pool.run(lambda k=k: job(k)) for k in range(6))))

    try:
        assert _run(main()) == list(range(6))
    finally:
        pool.shutdown()
    assert most <= bound and pool.threads == bound
    if bound == 1:
        assert started == list(range(6))  # one thread: in the order they came
    else:
        assert sorted(started) == list(range(6))


def test_a_cancelled_caller_leaves_the_thread_usable() -> None:
    pool = HopThreads(1)
    release = threading.Event()
    finished = threading.Event()

    def slow() -> str:
        release.wait(20)
        finished.set()
        return "dropped"

    async def main() -> str:
        task = asyncio.ensure_future(pool.run(slow))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        return str(await pool.run(lambda: "next"))  # waits for slow() to end, same thread

    try:
        assert _run(main()) == "next"
    finally:
        pool.shutdown()
    assert finished.is_set()


def test_the_callers_context_variables_are_seen() -> None:
    pool = HopThreads(1)
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    async def main() -> str:
        var.set("the caller's")
        return str(await pool.run(var.get))

    try:
        assert _run(main()) == "the caller's"
    finally:
        pool.shutdown()


def test_shutdown_stops_the_threads_and_refuses_more() -> None:
    pool = HopThreads(3)

    async def main() -> None:
        await asyncio.gather(*(pool.run(lambda: time.sleep(0.02)) for _ in range(3)))

    _run(main())
    workers = list(pool._workers)
    assert len(workers) == 3
    pool.shutdown()
    assert not any(w.thread.is_alive() for w in workers)
    with pytest.raises(RuntimeError, match="shut down"):
        _run(pool.run(lambda: None))


FORKED = textwrap.dedent(
    """
    import asyncio, os, threading
    from cuzarr.hop_threads import hop

    parent = asyncio.run(hop(threading.get_ident))
    pid = os.fork()
    if pid == 0:
        child = asyncio.run(hop(threading.get_ident))  # a new thread: the parent's is not here
        os._exit(0 if child != threading.get_ident() else 3)
    _, code = os.waitpid(pid, 0)
    again = asyncio.run(hop(threading.get_ident))
    print(os.waitstatus_to_exitcode(code), again == parent)
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_its_own_threads() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORKED], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "True"]


def test_zarr_calls_that_hop_run_on_one_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sharded writes through zarr hop: each on the same thread, not zarr's loop thread."""
    seen: list[int] = []
    real = cuzarr.engine.ArrayEngine.write

    def spy(self: Any, *args: Any, **kwargs: Any) -> None:
        seen.append(threading.get_ident())
        real(self, *args, **kwargs)

    monkeypatch.setattr(cuzarr.engine.ArrayEngine, "write", spy)
    with use_pipeline("cuzarr"):
        z = zarr.create_array(
            zarr.storage.LocalStore(tmp_path / "s.zarr"), shape=(64, 64), chunks=(8, 8),
            shards=(32, 32), dtype="u2", fill_value=0,
        )
        data = np.arange(64 * 64, dtype="u2").reshape(64, 64)
        for _ in range(4):
            z[:40, :40] = data[:40, :40]
        got = np.asarray(z[...])
    want = np.zeros_like(data)
    want[:40, :40] = data[:40, :40]
    np.testing.assert_array_equal(got, want)
    assert len(seen) == 4 and len(set(seen)) == 1
    assert seen[0] != threading.get_ident()
    assert hop_threads.MAX_THREADS >= 1


EXITING = textwrap.dedent(
    """
    import asyncio, sys, time
    from cuzarr.hop_threads import hop

    def slow():
        time.sleep(0.3)
        print("finished", flush=True)
        return 1

    async def main():
        task = asyncio.ensure_future(hop(slow))
        await asyncio.sleep(0.05)
        task.cancel()  # the call goes on; the program ends while it runs

    asyncio.run(main())
    print("exiting", flush=True)
    """
)


def test_exit_waits_for_a_call_still_running() -> None:
    """A call whose caller gave up runs to its end before the interpreter finalizes."""
    done = subprocess.run(
        [sys.executable, "-c", EXITING], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["exiting", "finished"]
