"""No abort at interpreter exit after object-store requests (cuzarr.stores.io_loop).

obstore completes requests on its own (Rust) threads, which take the GIL to call the event
loop's ``call_soon_threadsafe``. If the program finishes while such a thread is still inside
that call, the thread asks for the GIL during finalization, is ended with ``pthread_exit``,
and the process aborts. Left to chance that is a 0.5-1% event; here a probe widens the window
on purpose (obstore's threads pause, repeatedly releasing and re-taking the GIL, right after
waking the loop), which aborts the process every time unless the loop is drained at exit.
obstore's in-memory store is enough: it completes on the same runtime threads as S3 does.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("obstore")

PROBE = textwrap.dedent(
    """
    import atexit, sys, threading, time
    import numpy as np
    import obstore
    from obstore.store import MemoryStore

    mode = sys.argv[1]
    drained = sys.argv[2] == "drained"

    if mode == "cuzarr":
        from cuzarr.stores import io_loop
        from cuzarr.stores.obstore_ import ObstoreChunkStore
        loop = io_loop.get_loop()
    else:
        from zarr.core.sync import _get_loop, sync
        loop = _get_loop()
        if drained:
            from cuzarr.stores import track_zarr_loop
            track_zarr_loop()
    if not drained:
        from cuzarr.stores import io_loop
        atexit.unregister(io_loop.drain)

    python_threads = {t.ident for t in threading.enumerate()}
    wake = loop._write_to_self

    def slow_wake():
        wake()
        if threading.get_ident() not in python_threads:  # one of obstore's threads
            for _ in range(100):
                time.sleep(0.001)  # each wake-up takes the GIL again

    loop._write_to_self = slow_wake
    mem = MemoryStore()
    if mode == "cuzarr":
        store = ObstoreChunkStore(mem, name="memory")
        store.put("a", np.arange(64, dtype=np.uint8))
        for _ in range(3):
            assert store.get("a") is not None
    else:
        obstore.put(mem, "a", b"x" * 64)

        async def get():
            return await (await obstore.get_async(mem, "a")).bytes_async()

        for _ in range(3):
            assert sync(get()) == b"x" * 64
    print("done", flush=True)
    """
)


def _run(mode: str, drained: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE, mode, "drained" if drained else "undrained"],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("mode", ["cuzarr", "zarr"])
def test_the_race_aborts_without_the_drain(mode: str) -> None:
    """The probe really provokes the abort (else the next test would prove nothing)."""
    results = [_run(mode, drained=False) for _ in range(3)]
    assert all(r.stdout == "done\n" for r in results)
    codes = [r.returncode for r in results]
    if all(c == 0 for c in codes):
        pytest.skip(
            f"this Python ({sys.version.split()[0]}) does not end threads that want the GIL "
            "during finalization: nothing to provoke"
        )
    assert -6 in codes or 134 in codes, codes


@pytest.mark.parametrize("mode", ["cuzarr", "zarr"])
def test_the_drain_lets_every_run_exit_cleanly(mode: str) -> None:
    """cuzarr's loop, and zarr's once tracked, are drained: every run exits 0."""
    for _ in range(8):
        done = _run(mode, drained=True)
        assert (done.returncode, done.stdout) == (0, "done\n"), done.stderr[-2000:]


def test_drain_is_bounded_and_idempotent() -> None:
    """A request that never completes does not hold the exit for longer than the bound."""
    code = textwrap.dedent(
        """
        import asyncio, time
        from cuzarr.stores import io_loop
        loop = io_loop.get_loop()
        asyncio.run_coroutine_threadsafe(asyncio.sleep(3600), loop)
        t = time.monotonic()
        assert io_loop.drain(timeout=0.3) is False
        took = time.monotonic() - t
        assert took < 2.0, took
        assert io_loop.drain(timeout=0.3) is True  # nothing left: a second call is a no-op
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr[-2000:]


def test_forked_child_starts_without_the_parents_loop() -> None:
    code = textwrap.dedent(
        """
        import asyncio, os, warnings
        from cuzarr.stores import io_loop
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
        parent = io_loop.get_loop()
        pid = os.fork()
        if pid == 0:
            child = io_loop.get_loop()  # the parent's loop thread does not exist here
            ran = asyncio.run_coroutine_threadsafe(asyncio.sleep(0, "ran"), child).result(10)
            os._exit(0 if child is not parent and ran == "ran" and io_loop.drain(5) else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr[-2000:]
