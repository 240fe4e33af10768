"""Replacing large local files: swapped in atomically, the old file removed in the background."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

import cuzarr
from cuzarr import _native
from cuzarr.errors import StoreError
from cuzarr.stores import replace
from cuzarr.stores.local import EXCHANGE_MIN, TEMP_SUFFIX, LocalChunkStore
from threaded import run_threads

BIG = EXCHANGE_MIN + 1000


def _blob(value: int, n: int = BIG) -> bytes:
    return bytes([value]) * n


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture(autouse=True)
def _swaps_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about swaps: taken whatever file system the temporary folder is on
    (by default only where they are faster, ``SWAP_FILE_SYSTEMS``)."""
    monkeypatch.setattr(replace, "swaps_help", lambda path: True)


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, bool | None]]:
    calls: list[tuple[str, str, bool | None]] = []
    real = replace.exchange

    def spy(src: str, dst: str) -> bool | None:
        got = real(src, dst)
        calls.append((src, dst, got))
        return got

    monkeypatch.setattr(replace, "exchange", spy)
    return calls


def _needs_exchange(tmp_path: Path) -> None:
    a, b = tmp_path / "probe-a", tmp_path / "probe-b"
    a.write_bytes(b"a")
    b.write_bytes(b"b")
    if replace.exchange(str(a), str(b)) is None:
        pytest.skip("this file system cannot exchange files (renameat2)")
    assert a.read_bytes() == b"b" and b.read_bytes() == b"a"
    a.unlink()
    b.unlink()


def test_exchange_swaps_and_reports_a_missing_target(tmp_path: Path) -> None:
    _needs_exchange(tmp_path)
    a = tmp_path / "a"
    a.write_bytes(b"new")
    assert replace.exchange(str(a), str(tmp_path / "missing")) is False
    assert a.read_bytes() == b"new"


def test_a_large_replacement_is_swapped_in_and_the_old_file_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _needs_exchange(tmp_path)
    store = LocalChunkStore(tmp_path)
    calls = _spy(monkeypatch)
    store.put("c/0", _blob(1))
    assert calls == []  # a new key: renamed
    store.put("c/0", _blob(2))
    assert [got for _, _, got in calls] == [True]
    assert calls[0][1] == str(tmp_path / "c" / "0") and calls[0][0].endswith(TEMP_SUFFIX)
    store.settle()
    assert _files(tmp_path) == ["c/0"]
    assert (tmp_path / "c" / "0").read_bytes() == _blob(2)


def test_a_folder_at_the_key_is_not_swapped_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with a rename, writing over a folder fails naming the key; the folder stays."""
    store = LocalChunkStore(tmp_path)
    (tmp_path / "c" / "0").mkdir(parents=True)
    (tmp_path / "c" / "0" / "inside").write_bytes(b"keep")
    calls = _spy(monkeypatch)
    with pytest.raises(StoreError, match="Failed to write chunk 'c/0'"):
        store.put("c/0", _blob(1))
    store.settle()
    assert calls == []
    assert _files(tmp_path) == ["c/0/inside"]


def test_small_objects_are_renamed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalChunkStore(tmp_path)
    calls = _spy(monkeypatch)
    for v in (1, 2):
        store.put("c/0", _blob(v, EXCHANGE_MIN - 1))
    assert calls == []
    assert _files(tmp_path) == ["c/0"]
    assert (tmp_path / "c" / "0").read_bytes() == _blob(2, EXCHANGE_MIN - 1)


def test_a_file_system_without_exchange_falls_back_to_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def refuse(src: str, dst: str) -> None:
        asked.append(dst)
        return None

    monkeypatch.setattr(replace, "exchange", refuse)
    store = LocalChunkStore(tmp_path)
    for v in (1, 2, 3):
        store.put("c/0", _blob(v))
    assert len(asked) == 1  # asked once, then no more for this store
    assert _files(tmp_path) == ["c/0"]
    assert (tmp_path / "c" / "0").read_bytes() == _blob(3)


def test_a_failed_exchange_names_the_key_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalChunkStore(tmp_path)
    store.put("c/0", _blob(1))

    def failing(src: str, dst: str) -> bool:
        raise OSError(errno.EIO, "Input/output error", dst)

    monkeypatch.setattr(replace, "exchange", failing)
    with pytest.raises(StoreError, match=r"Failed to write chunk 'c/0'.*Input/output error"):
        store.put("c/0", _blob(2))
    store.settle()
    assert _files(tmp_path) == ["c/0"]
    assert (tmp_path / "c" / "0").read_bytes() == _blob(1)


def _slow_unlink(monkeypatch: pytest.MonkeyPatch, seconds: float) -> list[str]:
    removed: list[str] = []
    real = replace.remove_quietly

    def slow(path: str) -> None:
        time.sleep(seconds)
        real(path)
        removed.append(path)

    monkeypatch.setattr(replace, "remove_quietly", slow)
    return removed


@pytest.mark.parametrize("api", ["zarr", "explicit"])
def test_a_write_returns_only_when_replaced_files_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    """Removals are slowed down: without the engine's ``settle`` the old files would still
    lie in the folder when the write returns."""
    _needs_exchange(tmp_path)
    root = tmp_path / "a.zarr"
    shape, chunks = (512, 256), (128, 256)  # 128 KiB chunks of float32, uncompressed
    zarr.create_array(LocalStore(root), shape=shape, chunks=chunks, dtype="f4", compressors=None)
    before: list[str] | None = None
    removed = _slow_unlink(monkeypatch, 0.02)
    with cuzarr.configure(strict=True):
        for value in (1.0, 2.0, 3.0):
            full = np.full(shape, value, "f4")
            if api == "zarr":
                zarr.open_array(LocalStore(root), mode="r+")[...] = full
            else:
                cuzarr.open(str(root), "r+")[...] = full
            files = _files(root)
            assert not [f for f in files if f.endswith(TEMP_SUFFIX)], files
            before = files if before is None else before
            assert files == before
    assert len(removed) == 2 * 4  # the second and third writes replaced 4 chunks each
    np.testing.assert_array_equal(zarr.open_array(LocalStore(root), mode="r")[...], 3.0)


def test_the_remover_waits_and_pushes_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With 3 files waiting, the writer removes the next itself; drain waits for the rest."""
    where: dict[str, int] = {}
    real = replace.remove_quietly

    def slow(path: str) -> None:
        time.sleep(0.01)
        where[path] = threading.get_ident()
        real(path)

    monkeypatch.setattr(replace, "remove_quietly", slow)
    remover = replace.Remover()
    monkeypatch.setattr(remover, "MAX_PENDING", 3)
    paths = [tmp_path / f"f{i}" for i in range(8)]
    for p in paths:
        p.write_bytes(b"x")
    for p in paths:
        remover.remove(str(p))
    remover.drain()
    assert not [p for p in paths if p.exists()]
    caller = threading.get_ident()
    assert where[str(paths[3])] == caller  # the fourth found three waiting
    assert where[str(paths[0])] != caller  # the first went to the background


def test_readers_see_old_or_new_large_chunks(tmp_path: Path) -> None:
    """Chunks of 256 KiB, replaced by swaps while two threads read: every chunk of every read
    is one round's value."""
    root = tmp_path / "r.zarr"
    shape, chunks = (512, 512), (256, 256)
    zarr.create_array(LocalStore(root), shape=shape, chunks=chunks, dtype="i4", compressors=None)
    rounds = 8
    done = threading.Event()
    reads = {"n": 0}
    with cuzarr.configure(strict=True):
        arr = cuzarr.open(str(root), "r+")
        arr[...] = np.full(shape, 1, "i4")

        def writer() -> None:
            try:
                for r in range(2, rounds + 2):
                    arr[...] = np.full(shape, r, "i4")
            finally:
                done.set()

        def reader() -> None:
            rd = cuzarr.open(str(root), "r")
            while not done.is_set():
                got = rd[...]
                for i in (0, 256):
                    for j in (0, 256):
                        values = np.unique(got[i : i + 256, j : j + 256])
                        assert values.size == 1, f"torn chunk ({i}, {j}): {values}"
                reads["n"] += 1

        run_threads([reader, reader, writer], barrier=False)
    assert reads["n"] >= 1
    assert _files(root) == sorted(["zarr.json", "c/0/0", "c/0/1", "c/1/0", "c/1/1"])


def test_interpreter_exit_finishes_the_removals(tmp_path: Path) -> None:
    """A process that replaces large files and exits at once leaves no old file behind."""
    _needs_exchange(tmp_path)
    code = textwrap.dedent(
        """
        import sys, time
        from cuzarr.stores import local, replace
        real = replace.remove_quietly
        def slow(path):
            time.sleep(0.02)
            real(path)
        replace.remove_quietly = slow
        replace.swaps_help = lambda path: True  # swapped on any file system
        store = local.LocalChunkStore(sys.argv[1])
        for v in range(6):
            store.put("c/0", bytes([v]) * (local.EXCHANGE_MIN + 1))
        """
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=60)
    assert _files(tmp_path) == ["c/0"]
    assert (tmp_path / "c" / "0").read_bytes() == bytes([5]) * (EXCHANGE_MIN + 1)


def test_a_forked_child_has_its_own_remover(tmp_path: Path) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    _needs_exchange(tmp_path)
    store = LocalChunkStore(tmp_path)
    store.put("c/0", _blob(1))
    store.put("c/0", _blob(2))  # the parent's remover may be busy with the old file now
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            store.put("c/1", _blob(3))
            store.put("c/1", _blob(4))
            store.settle()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    store.settle()
    assert _files(tmp_path) == ["c/0", "c/1"]
    assert (tmp_path / "c" / "1").read_bytes() == _blob(4)



def test_a_removal_that_raises_does_not_hang_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(path: str) -> None:
        raise RuntimeError("not an OSError")

    monkeypatch.setattr(replace, "remove_quietly", broken)
    remover = replace.Remover()
    remover.remove(str(tmp_path / "gone"))
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (remover.drain(), done.set()), daemon=True)
    waiter.start()
    assert done.wait(10), "drain() hung after a removal raised"
    # The remover still works afterwards.
    monkeypatch.setattr(replace, "remove_quietly", lambda path: os.unlink(path))
    kept = tmp_path / "next"
    kept.write_bytes(b"x")
    remover.remove(str(kept))
    remover.drain()
    assert not kept.exists()


@pytest.mark.parametrize(
    ("fs_type", "swapped"), [(0xEF53, True), (0x01021994, False), (None, False)]
)
def test_swaps_are_taken_only_where_they_are_faster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fs_type: int | None, swapped: bool
) -> None:
    """ext4 (swaps measured faster) swaps, tmpfs and an unknown file system rename over; the
    file system is asked once per store, by its first replacement of a large file."""
    monkeypatch.undo()  # the real swaps_help
    asked: list[str] = []

    def fake_type(path: str) -> int | None:
        asked.append(path)
        return fs_type

    monkeypatch.setattr(replace, "file_system_type", fake_type)
    calls = _spy(monkeypatch)
    store = LocalChunkStore(tmp_path)
    store.put("c/0", _blob(1))  # new: nothing to replace, nothing asked
    assert asked == []
    for v in (2, 3):
        store.put("c/0", _blob(v))
    store.put_many(["c/0", "c/1"], [_blob(4), _blob(5)])
    store.put_many(["c/0", "c/1"], [_blob(6), _blob(7)])
    store.settle()
    assert len(asked) == 1
    # The single puts; put_many swaps in C where the batch helper is built, else here too (its
    # three replacements: c/0, then c/0 and c/1).
    many = 0 if _native.helper() is not None else 3
    assert len(calls) == (2 + many if swapped else 0)
    assert _files(tmp_path) == ["c/0", "c/1"]
    assert (tmp_path / "c" / "0").read_bytes() == _blob(6)
    assert (tmp_path / "c" / "1").read_bytes() == _blob(7)


def test_the_file_system_type_is_read(tmp_path: Path) -> None:
    got = replace.file_system_type(str(tmp_path))
    if got is None:
        pytest.skip("no statfs here")
    assert got > 0
    assert replace.file_system_type(str(tmp_path / "missing")) is None
