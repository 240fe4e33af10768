"""Recycled large buffers (cuzarr.backends.recycle): lent again only once nothing uses them."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.backends import recycle
from cuzarr.backends.cpu import empty_aligned

MiB = 1024 * 1024


def _address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def test_memory_comes_back_once_the_array_is_gone() -> None:
    pool = recycle.Pool(64 * MiB)
    a = pool.empty(8 * MiB)
    at = _address(a)
    a[:] = 7
    del a
    b = pool.empty(8 * MiB)
    assert _address(b) == at and (pool.reused, pool.new) == (1, 1)
    assert b.nbytes == 8 * MiB and b.flags.writeable
    assert (b == 7).all()  # recycled memory keeps its old values (np.empty's contract)


@pytest.mark.parametrize("keep", ["view", "memoryview", "reshaped view of a view"])
def test_memory_stays_lent_while_a_view_of_it_lives(keep: str) -> None:
    pool = recycle.Pool(64 * MiB)
    a = pool.empty(8 * MiB)
    a[:] = 1
    held: object
    if keep == "view":
        held = a[100:200]
    elif keep == "memoryview":
        held = memoryview(a)
    else:
        held = a[64:].view(np.uint16)[10:].reshape(-1, 2)
    del a
    b = pool.empty(8 * MiB)
    b[:] = 2  # new memory: the view still reads its own values
    assert pool.reused == 0 and pool.new == 2
    assert (np.asarray(held) != 2).all()
    del held, b
    assert pool.held_bytes() == 16 * MiB


def test_held_memory_serves_requests_of_80_to_100_percent_of_it() -> None:
    pool = recycle.Pool(256 * MiB)
    big, small = pool.empty(10 * MiB), pool.empty(5 * MiB)
    at_big, at_small = _address(big), _address(small)
    del big, small
    assert _address(pool.empty(11 * MiB)) not in (at_big, at_small)  # larger than both
    assert pool.new == 3
    c = pool.empty(4 * MiB + MiB // 2)  # 90 % of the small one, 45 % of the big one
    assert _address(c) == at_small
    d = pool.empty(7 * MiB)  # 70 % of the big one: not lent
    assert _address(d) != at_big
    e = pool.empty(8 * MiB)  # 80 %
    assert _address(e) == at_big
    assert pool.reused == 2


def test_the_pool_holds_at_most_its_limit_oldest_dropped_first() -> None:
    pool = recycle.Pool(20 * MiB)
    a, b, c = (pool.empty(8 * MiB) for _ in range(3))
    at = [_address(x) for x in (a, b, c)]
    del a
    pool.held_bytes()  # a is held from here on: the oldest
    del b, c
    assert pool.held_bytes() == 16 * MiB  # two of 8 MiB fit in 20: a was dropped
    d, e = pool.empty(8 * MiB), pool.empty(8 * MiB)
    assert {_address(d), _address(e)} == {at[1], at[2]}
    assert pool.release() == 0


def test_a_request_that_misses_first_drops_held_memory_to_fit_the_limit() -> None:
    pool = recycle.Pool(20 * MiB)
    a, b = pool.empty(6 * MiB), pool.empty(6 * MiB)
    del a, b
    assert pool.held_bytes() == 12 * MiB
    c = pool.empty(16 * MiB)  # no fit: held + new must stay within 20 MiB
    assert pool.held_bytes() == 0
    del c
    assert pool.held_bytes() == 16 * MiB


def test_held_memory_is_dropped_after_the_decay_time() -> None:
    # The sweeper drops what was held unused for the decay time, then ends (nothing held or
    # lent); the next lend starts another.
    pool = recycle.Pool(64 * MiB, decay_s=0.2)
    for _round in range(2):
        a = pool.empty(8 * MiB)
        sweeper = pool._sweeper
        assert sweeper is not None and sweeper.is_alive()
        del a
        assert pool.held_bytes() == 8 * MiB
        deadline = time.monotonic() + 5
        while (pool.held_bytes() or sweeper.is_alive()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.held_bytes() == 0
        assert not sweeper.is_alive() and pool._sweeper is None


def test_memory_lent_for_long_stays_swept() -> None:
    # While a buffer is lent the sweeper keeps running, so memory handed back after the
    # decay time is dropped in its turn.
    pool = recycle.Pool(64 * MiB, decay_s=0.2)
    a = pool.empty(8 * MiB)
    time.sleep(0.5)
    assert pool._sweeper is not None and pool._sweeper.is_alive()
    del a
    deadline = time.monotonic() + 5
    while pool.held_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.held_bytes() == 0


def test_a_limit_of_zero_lends_nothing() -> None:
    pool = recycle.Pool(0)
    cuzarr.reset_stats()
    a = pool.empty(8 * MiB)
    assert cuzarr.stats().get("new_large_buffers") == 1
    assert a.flags.owndata and a.nbytes == 8 * MiB
    del a
    assert pool.held_bytes() == 0 and pool.reused == 0


def test_returning_memory_takes_no_lock() -> None:
    # The last reference may go while the pool's own lock is held (a collection inside
    # Pool.empty): handing memory back must not wait for it.
    pool = recycle.Pool(64 * MiB)
    a = pool.empty(8 * MiB)
    done = threading.Event()

    def drop() -> None:
        nonlocal a
        del a
        done.set()

    with pool._lock:
        t = threading.Thread(target=drop)
        t.start()
        assert done.wait(5), "returning memory waited for the pool's lock"
    t.join()
    assert pool.held_bytes() == 8 * MiB


def test_the_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUZARR_RECYCLE_BYTES", "12345")
    assert recycle.limit() == 12345
    monkeypatch.setenv("CUZARR_RECYCLE_BYTES", "0")
    assert recycle.limit() == 0
    monkeypatch.setenv("CUZARR_RECYCLE_BYTES", "lots")
    with pytest.raises(ValueError, match=r"CUZARR_RECYCLE_BYTES.*'lots'"):
        recycle.limit()
    monkeypatch.delenv("CUZARR_RECYCLE_BYTES")
    assert 0 < recycle.limit() <= 1 << 30


def test_only_large_allocations_are_recycled(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = recycle.Pool(64 * MiB)
    monkeypatch.setattr(recycle, "_POOL", pool)
    small = empty_aligned((recycle.RECYCLE_MIN // 2 - 64,), np.uint16)
    assert pool.new == 0 and small.base is not None
    large = empty_aligned((1024, 1024, 2), np.float32)
    assert pool.new == 1 and _address(large) % 64 == 0
    del large
    again = empty_aligned((2, 1024, 1024), np.float32)
    assert pool.reused == 1 and _address(again) % 64 == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_recycles_with_its_own_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = recycle.Pool(64 * MiB)
    monkeypatch.setattr(recycle, "_POOL", pool)
    os.register_at_fork(after_in_child=pool._after_fork)
    a = pool.empty(8 * MiB)
    # Another thread holds the pool's lock at the fork: the child must not inherit it held.
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with pool._lock:
            holding.set()
            done.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            b = pool.empty(8 * MiB)
            del b
            c = pool.empty(8 * MiB)
            code = 0 if pool.reused == 1 else 2
            del c
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    while (got := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if got[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        done.set()
        holder.join()
        pytest.fail("the forked child hung on the pool's lock")
    done.set()
    holder.join()
    assert os.waitstatus_to_exitcode(got[1]) == 0
    del a


def test_whole_reads_in_a_loop_reuse_their_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reading a whole array again after dropping the last result gets the same memory, with
    # the values right, through the explicit API and through zarr; a result still held is
    # never handed out again.
    pool = recycle.Pool(256 * MiB, poison=0x5A)
    monkeypatch.setattr(recycle, "_POOL", pool)
    data = np.arange(1024 * 1024 * 3, dtype="<u4").reshape(3, 1024, 1024)
    path = tmp_path / "a.zarr"
    z = zarr.create_array(str(path), shape=data.shape, dtype=data.dtype, chunks=(1, 256, 512))
    z[...] = data
    z[1, 256:512] = 0  # a chunk at the fill value: not stored, read as fill
    data[1, 256:512] = 0
    api = cuzarr.open(str(path))
    cuzarr.reset_stats()
    first = api[...]
    kept = api[...]
    np.testing.assert_array_equal(first, data)
    at = _address(first)
    del first
    gc.collect()
    again = api[...]
    assert _address(again) == at and pool.reused >= 1
    counted = cuzarr.stats()
    assert counted.get("recycled_buffers", 0) == pool.reused
    assert counted.get("new_large_buffers", 0) == pool.new == 2  # first and kept
    np.testing.assert_array_equal(again, data)
    np.testing.assert_array_equal(kept, data)
    assert _address(kept) != at
    del again
    with cuzarr.configure(strict=True):
        zz = zarr.open_array(str(path), mode="r")
        for _ in range(3):
            got = zz[...]
            np.testing.assert_array_equal(got, data)
            del got
    assert sys.getrefcount(kept) >= 2 and pool.reused >= 3
