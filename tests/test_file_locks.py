"""Write locks of local folders (``cuzarr.engine.locks.file_locks``): threads and processes.

Keys map to bytes of a lock file; a row of chunks maps to consecutive bytes, locked with one
system call; a second thread of the process wanting a held key waits, and takes the bytes
when the first lets go; a failure while locking leaves nothing locked; a refusal as a deadlock
(which Linux reports for threads of two processes that cannot deadlock) is retried. Whether a
byte is locked is asked from another process (record locks do not exclude the process that
holds them).
"""

from __future__ import annotations

import errno
import fcntl
import multiprocessing
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cuzarr.engine import locks
from cuzarr.engine.locks import file_locks, slot_of

pytestmark = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)


@pytest.fixture()
def lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "locks"
    monkeypatch.setenv("CUZARR_LOCK_DIR", str(folder))
    yield folder


def _probe(root: str, slots: list[int], answer: Any) -> None:
    fd = locks._lock_file(root)
    held = []
    for slot in slots:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot, os.SEEK_SET)
        except OSError:
            held.append(True)
        else:
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, slot, os.SEEK_SET)
            held.append(False)
    answer.put(held)


def _locked_elsewhere(root: str, keys: list[str]) -> list[bool]:
    """Whether another process finds each key's byte locked."""
    ctx = multiprocessing.get_context("fork")
    answer = ctx.Queue()
    child = ctx.Process(target=_probe, args=(root, [slot_of(k) for k in keys], answer))
    child.start()
    got: list[bool] = answer.get(timeout=30)
    child.join(30)
    return got


def test_a_row_of_chunks_lies_on_consecutive_bytes() -> None:
    assert [slot_of(f"a/c/0/1/{i}") - slot_of("a/c/0/1/0") for i in range(4)] == [0, 1, 2, 3]
    assert slot_of("0.1.8") - slot_of("0.1.7") == 1  # zarr v2 keys
    assert slot_of("c.3.9") - slot_of("c.3.8") == 1  # v3 with the "." separator
    assert slot_of("a/c/0/2/0") != slot_of("a/c/0/1/0")  # another row: elsewhere
    # keys that do not end in an index (or end in a non-ASCII digit) are hashed whole
    assert 0 <= slot_of("zarr.json") < locks._SLOTS
    assert 0 <= slot_of("c/0/\u00b2") < locks._SLOTS


def test_a_row_is_locked_and_unlocked_with_one_call_each(
    lock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int, int]] = []
    real = fcntl.lockf

    def spy(fd: int, cmd: int, length: int = 0, start: int = 0, whence: int = 0) -> Any:
        calls.append((cmd, length, start))
        return real(fd, cmd, length, start, whence)

    monkeypatch.setattr(fcntl, "lockf", spy)
    keys = [f"c/0/{i}" for i in range(16)]
    with file_locks("/data/a.zarr", keys):
        assert calls == [(fcntl.LOCK_EX, 16, slot_of("c/0/0"))]
    assert calls[1:] == [(fcntl.LOCK_UN, 16, slot_of("c/0/0"))]


def test_a_second_thread_waits_and_then_holds_its_bytes(lock_dir: Path) -> None:
    root = "/data/b.zarr"
    first = [f"c/0/{i}" for i in range(0, 4)]
    second = [f"c/0/{i}" for i in range(2, 6)]
    everything = [f"c/0/{i}" for i in range(0, 7)]
    assert _locked_elsewhere(root, everything) == [False] * 7
    release_second = threading.Event()
    second_holds = threading.Event()

    def hold_second() -> None:
        with file_locks(root, second):
            second_holds.set()
            release_second.wait(30)

    with file_locks(root, first):
        worker = threading.Thread(target=hold_second)
        worker.start()
        # keys 2 and 3 are the first thread's: the second waits, holding no byte
        assert not second_holds.wait(0.3)
        assert _locked_elsewhere(root, everything) == [True] * 4 + [False] * 3
    assert second_holds.wait(30)
    assert _locked_elsewhere(root, everything) == [False, False] + [True] * 4 + [False]
    release_second.set()
    worker.join(30)
    assert _locked_elsewhere(root, everything) == [False] * 7


def test_threads_on_other_keys_do_not_wait(lock_dir: Path) -> None:
    root = "/data/d.zarr"
    done = threading.Event()

    def other() -> None:
        with file_locks(root, ["c/1/0", "c/1/1"]):
            done.set()

    with file_locks(root, ["c/0/0", "c/0/1"]):
        worker = threading.Thread(target=other)
        worker.start()
        assert done.wait(30)
        worker.join(30)
        assert _locked_elsewhere(root, ["c/0/0", "c/0/1", "c/1/0"]) == [True, True, False]


def test_a_failure_while_locking_leaves_nothing_locked(
    lock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = "/data/c.zarr"
    keys = ["c/0/0", "c/0/1", "c/9/0"]  # two runs: the second call fails
    real = fcntl.lockf
    n = {"calls": 0}

    def failing(fd: int, cmd: int, length: int = 0, start: int = 0, whence: int = 0) -> Any:
        n["calls"] += 1
        if cmd == fcntl.LOCK_EX and n["calls"] == 2:
            raise OSError(errno.ENOLCK, "No locks available")
        return real(fd, cmd, length, start, whence)

    monkeypatch.setattr(fcntl, "lockf", failing)
    with pytest.raises(OSError, match="No locks"), file_locks(root, keys):
        pytest.fail("the body must not run")
    monkeypatch.setattr(fcntl, "lockf", real)
    assert _locked_elsewhere(root, keys) == [False, False, False]
    with file_locks(root, keys):  # and they can be taken again, by this thread or another
        assert _locked_elsewhere(root, keys) == [True, True, True]
    took: list[bool] = []

    def take() -> None:
        with file_locks(root, keys):
            took.append(True)

    worker = threading.Thread(target=take)
    worker.start()
    worker.join(30)
    assert took == [True]


def test_a_refusal_as_deadlock_is_retried(
    lock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = "/data/e.zarr"
    keys = ["c/0/0", "c/0/1"]
    real = fcntl.lockf
    refused = {"left": 3}

    def refusing(fd: int, cmd: int, length: int = 0, start: int = 0, whence: int = 0) -> Any:
        if cmd == fcntl.LOCK_EX and refused["left"]:
            refused["left"] -= 1
            raise OSError(errno.EDEADLK, "Resource deadlock avoided")
        return real(fd, cmd, length, start, whence)

    monkeypatch.setattr(fcntl, "lockf", refusing)
    with file_locks(root, keys):
        assert refused["left"] == 0
        assert _locked_elsewhere(root, keys) == [True, True]
    # past the retry budget the refusal is raised, nothing held
    monkeypatch.setattr(locks, "DEADLOCK_RETRY_S", 0.0)
    refused["left"] = 1
    with pytest.raises(OSError, match="deadlock"), file_locks(root, keys):
        pytest.fail("the body must not run")
    assert _locked_elsewhere(root, keys) == [False, False]
