"""cuzarr's private I/O event loop, and the drain that lets a process exit cleanly after it.

Object-store requests are coroutines of obstore's async API. obstore completes each one on a
thread of its Rust (tokio) runtime: that thread takes the GIL and calls the event loop's
``call_soon_threadsafe``, which queues the result and then writes a wake-up byte with the GIL
released. The thread waiting for the result can therefore get it, finish the program and
enter interpreter finalization while the tokio thread still has to take the GIL back. A
thread that asks for the GIL during finalization is ended with ``pthread_exit``; the forced
unwind meets Rust frames that must not unwind, and the C library aborts the process (SIGABRT,
exit status -6/134) after all of its output was printed.

So every loop that obstore calls back into is *tracked*: calls of ``call_soon_threadsafe`` in
progress are counted. At exit (``atexit``, which runs before finalization) :func:`drain` waits,
bounded by :data:`DRAIN_TIMEOUT`, until the tracked loops have no pending tasks and no such
call in progress, then stops and joins cuzarr's loop thread. zarr-python's own loop
(``zarr.core.sync``) has the same exposure when it performs an object-store request (metadata
of a zarr ``ObjectStore``), so cuzarr tracks it too once it uses obstore through zarr.
After ``fork`` the child starts with no loop and nothing tracked.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["DRAIN_TIMEOUT", "drain", "get_loop", "run_on_loop", "track_loop"]

#: Longest wait at exit for requests still in flight and callbacks in progress (seconds).
DRAIN_TIMEOUT = 5.0


class _Calls:
    """Counts calls in progress (of one loop's ``call_soon_threadsafe``)."""

    __slots__ = ("_idle", "_n")

    def __init__(self) -> None:
        self._n = 0
        self._idle = threading.Condition(threading.Lock())

    def enter(self) -> None:
        with self._idle:
            self._n += 1

    def leave(self) -> None:
        with self._idle:
            self._n -= 1
            if self._n == 0:
                self._idle.notify_all()

    @property
    def in_progress(self) -> int:
        """Calls that have entered and not yet left."""
        return self._n

    def wait_idle(self, deadline: float) -> bool:
        """Wait until no call is in progress or ``deadline`` (``time.monotonic``) passes."""
        with self._idle:
            while self._n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True


class _IOLoop(asyncio.SelectorEventLoop):
    """cuzarr's loop: counts ``call_soon_threadsafe`` calls while they run."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = _Calls()

    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.Handle:
        self.calls.enter()
        try:
            return super().call_soon_threadsafe(callback, *args, context=context)
        finally:
            self.calls.leave()


def _counted(loop: asyncio.AbstractEventLoop, calls: _Calls) -> Callable[..., asyncio.Handle]:
    """``loop.call_soon_threadsafe`` wrapped to count calls (for loops cuzarr did not make)."""
    inner = loop.call_soon_threadsafe

    def call_soon_threadsafe(
        callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.Handle:
        calls.enter()
        try:
            return inner(callback, *args, context=context)
        finally:
            calls.leave()

    return call_soon_threadsafe


class _State:
    """The loop thread and the tracked loops of this process (replaced after fork)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loop: _IOLoop | None = None
        self.thread: threading.Thread | None = None
        #: Tracked loops and their call counters, cuzarr's own included.
        self.tracked: list[tuple[asyncio.AbstractEventLoop, _Calls]] = []
        self.registered = False


_state = _State()


def _after_fork_in_child() -> None:
    global _state
    _state = _State()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _register_drain(state: _State) -> None:
    # Called with state.lock held.
    if not state.registered:
        atexit.register(drain)
        state.registered = True


def get_loop() -> asyncio.AbstractEventLoop:
    """cuzarr's private I/O loop, running in its own daemon thread (started on first use)."""
    state = _state
    loop = state.loop
    if loop is not None:
        return loop
    with state.lock:
        if state.loop is None:
            new = _IOLoop()
            thread = threading.Thread(target=new.run_forever, name="cuzarr-io", daemon=True)
            thread.start()
            state.tracked.append((new, new.calls))
            state.thread = thread
            state.loop = new
            _register_drain(state)
        return state.loop


def run_on_loop[T](coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on cuzarr's private I/O event loop and wait for its result."""
    return asyncio.run_coroutine_threadsafe(coro, get_loop()).result()


def track_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Count ``loop``'s ``call_soon_threadsafe`` calls and drain it at exit (idempotent).

    For a loop cuzarr does not own (zarr's), the instance's method is wrapped. Returns
    ``False`` when that is impossible (a loop type without instance attributes, uvloop).
    """
    state = _state
    with state.lock:
        if any(known is loop for known, _ in state.tracked):
            return True
        calls = _Calls()
        try:
            loop.call_soon_threadsafe = _counted(loop, calls)  # type: ignore[method-assign,assignment]
        except (AttributeError, TypeError):
            return False
        state.tracked.append((loop, calls))
        _register_drain(state)
    return True


async def _pending_tasks() -> int:
    return len(asyncio.all_tasks()) - 1  # this one excluded


def _wait_tasks(loop: asyncio.AbstractEventLoop, deadline: float) -> bool:
    """Wait until ``loop`` runs no other task; ``False`` if ``deadline`` passes first.

    A loop that is not running (or stops meanwhile) has nothing left to wait for.
    """
    while loop.is_running() and not loop.is_closed():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            future = asyncio.run_coroutine_threadsafe(_pending_tasks(), loop)
            if future.result(timeout=left) == 0:
                return True
        except Exception:  # a loop stopping meanwhile, or the deadline
            return not loop.is_running()
        time.sleep(0.005)
    return True


def drain(timeout: float = DRAIN_TIMEOUT) -> bool:
    """Let requests in flight finish and callbacks return, then stop cuzarr's loop thread.

    Registered with ``atexit`` once a loop is used or tracked; safe to call more than once.
    Returns whether everything was idle within ``timeout`` seconds.
    """
    state = _state
    deadline = time.monotonic() + timeout
    with state.lock:
        tracked = list(state.tracked)
        loop, thread = state.loop, state.thread
    idle = all([_wait_tasks(known, deadline) for known, _ in tracked])
    idle = all([calls.wait_idle(deadline) for _, calls in tracked]) and idle
    if loop is not None and thread is not None and thread.is_alive():
        with contextlib.suppress(RuntimeError):  # closed meanwhile
            loop.call_soon_threadsafe(loop.stop)
        thread.join(max(0.0, deadline - time.monotonic()))
        idle = idle and not thread.is_alive()
        # A callback arriving after this must find the loop stopped, not gone: it is left
        # open (closing would make obstore's threads raise), and its counter is waited on.
        idle = loop.calls.wait_idle(deadline) and idle
    with state.lock:
        if state.loop is loop:
            state.loop = None
            state.thread = None
            state.tracked = [(k, c) for k, c in state.tracked if k is not loop]
    return idle
