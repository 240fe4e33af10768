"""Small reads and writes through zarr run on zarr's event loop; the others hop to a thread."""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore, MemoryStore

import cuzarr
from cuzarr import zarr_pipeline
from cuzarr.engine import ArrayEngine
from cuzarr.zarr_pipeline import (
    _TASK_SETS,
    INLINE_READ_MAX_BYTES,
    INLINE_WRITE_MAX_BYTES,
    _tasks_bound,
)


@pytest.fixture
def _hop_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[Any, list[int]]]:
    """Per engine method (``ArrayEngine.read``, ``.write``), the numbers of requests of its
    calls handed to a hop thread (``cuzarr.hop_threads.hop``), with cuzarr configured."""
    seen: dict[Any, list[int]] = {ArrayEngine.read: [], ArrayEngine.write: []}
    real = zarr_pipeline.hop

    async def counting(fn: Any) -> Any:
        if isinstance(fn, functools.partial):
            log = seen.get(getattr(fn.func, "__func__", None))
            if log is not None:
                log.append(len(fn.args[1]))
        return await real(fn)

    monkeypatch.setattr(zarr_pipeline, "hop", counting)
    with cuzarr.configure(strict=True):
        yield seen


@pytest.fixture
def hops(_hop_log: dict[Any, list[int]]) -> list[int]:
    """Counts the engine reads handed to a hop thread."""
    return _hop_log[ArrayEngine.read]


@pytest.fixture
def write_hops(_hop_log: dict[Any, list[int]]) -> list[int]:
    """Counts the engine writes handed to a hop thread (their numbers of chunks)."""
    return _hop_log[ArrayEngine.write]


def _array(
    store: Any,
    chunks: tuple[int, ...],
    shards: tuple[int, ...] | None = None,
    dtype: str = "u2",
    shape: tuple[int, int] = (256, 256),
) -> Any:
    arr = zarr.create_array(
        store, shape=shape, chunks=chunks, shards=shards, dtype=dtype,
        compressors=zarr.codecs.ZstdCodec(level=1),
    )  # fmt: skip
    arr[...] = _values(shape, dtype)
    return zarr.open_array(store, mode="r")


def _values(shape: tuple[int, int], dtype: str) -> Any:
    return np.arange(shape[0] * shape[1], dtype=dtype).reshape(shape)


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_one_small_chunk_is_read_on_the_loop(tmp_path: Path, hops: list[int], kind: str) -> None:
    store = LocalStore(tmp_path / "a.zarr") if kind == "local" else MemoryStore()
    arr = _array(store, (32, 32))
    want = _values((256, 256), "u2")
    hops.clear()
    np.testing.assert_array_equal(arr[32:64, 64:96], want[32:64, 64:96])  # one chunk
    np.testing.assert_array_equal(arr[40, 70], want[40, 70])
    assert hops == []
    np.testing.assert_array_equal(arr[0:64, 0:32], want[0:64, 0:32])  # two chunks
    assert hops == [2]


def test_large_chunks_hop_to_a_thread(tmp_path: Path, hops: list[int]) -> None:
    """A chunk of INLINE_READ_MAX_BYTES (4 MiB) is read on the loop; one of twice that hops."""
    assert INLINE_READ_MAX_BYTES == 1024 * 1024 * 4
    at = _array(LocalStore(tmp_path / "at.zarr"), (1024, 1024), dtype="u4", shape=(1024, 2048))
    big = _array(LocalStore(tmp_path / "big.zarr"), (1024, 2048), dtype="u4", shape=(1024, 2048))
    want = _values((1024, 2048), "u4")
    hops.clear()
    np.testing.assert_array_equal(at[10:20, 1030:1040], want[10:20, 1030:1040])
    assert hops == []
    np.testing.assert_array_equal(big[10:20, 10:20], want[10:20, 10:20])
    assert hops == [1]


def test_shards_hop_only_past_the_inner_chunks_bound(tmp_path: Path, hops: list[int]) -> None:
    """A read of one shard runs on the loop while the inner chunks it touches decode to at most
    INLINE_READ_MAX_BYTES (here 2 MiB each: up to two of them), else it hops."""
    shape = (1024, 2048)
    want = _values(shape, "u4")
    sharded = _array(
        LocalStore(tmp_path / "s.zarr"), (512, 1024), shards=shape, dtype="u4", shape=shape
    )
    assert INLINE_READ_MAX_BYTES == 512 * 1024 * 4 * 2
    hops.clear()
    inline = [
        (slice(0, 10), slice(0, 10)),  # one inner chunk
        (slice(500, 520), slice(0, 10)),  # two along the first axis
        (5, slice(1000, 1100)),  # an int and two inner chunks along the second axis
        (slice(0, 1024, 600), slice(0, 1)),  # a step from the first inner chunk to the second
        (slice(0, 1024, 2), slice(0, 1)),  # every other row of both
    ]
    for sel in inline:
        np.testing.assert_array_equal(sharded[sel], want[sel])
        assert hops == [], sel
    sel = (slice(500, 520), slice(1000, 1030))  # four inner chunks: 8 MiB
    np.testing.assert_array_equal(sharded[sel], want[sel])
    assert hops == [1]
    np.testing.assert_array_equal(sharded[[1, 600], 0:4], want[[1, 600], 0:4])  # not slices
    assert hops == [1, 1]


def test_inline_reads_report_missing_chunks_and_errors(tmp_path: Path, hops: list[int]) -> None:
    root = tmp_path / "m.zarr"
    arr = zarr.create_array(
        LocalStore(root), shape=(64, 64), chunks=(32, 32), dtype="f4", fill_value=7.5,
        compressors=zarr.codecs.ZstdCodec(level=1),
    )  # fmt: skip
    arr[0:32, 0:32] = 1.0
    np.testing.assert_array_equal(arr[32:64, 32:64], 7.5)  # missing: the fill value
    (root / "c" / "0" / "0").write_bytes(b"not a zstd frame")
    with pytest.raises(cuzarr.CorruptChunkError, match="c/0/0"):
        arr[0:32, 0:32]
    assert hops == []


def _zarr_default(store: Any) -> Any:
    """The array in ``store`` read through zarr's own pipeline (the independent check)."""
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}):
        return zarr.open_array(store, mode="r")[...]


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_small_writes_run_on_the_loop(tmp_path: Path, write_hops: list[int], kind: str) -> None:
    """Writes of unsharded arrays whose chunks total at most INLINE_WRITE_MAX_BYTES (128 KiB
    chunks here: 32 of them) run on the loop, whole and partial chunks alike; larger ones
    hop. What they write is what zarr's own pipeline reads back."""
    store = LocalStore(tmp_path / "w.zarr") if kind == "local" else MemoryStore()
    arr = zarr.create_array(
        store, shape=(2048, 2048), chunks=(256, 256), dtype="u2", fill_value=3,
        compressors=zarr.codecs.ZstdCodec(level=1),
    )  # fmt: skip
    assert INLINE_WRITE_MAX_BYTES == 32 * 256 * 256 * 2
    want = np.full((2048, 2048), 3, dtype="u2")
    rng = np.random.default_rng(5)
    for sel in [
        (slice(0, 512), slice(0, 512)),  # 4 whole chunks
        (slice(3, 5), slice(40, 47)),  # part of one chunk: read, merged, written
        (slice(0, 1024), slice(None)),  # 32 chunks: 4 MiB, the bound
        (7, slice(None)),  # a row through 8 chunks
    ]:
        value = rng.integers(0, 60000, size=want[sel].shape, dtype="u2")
        arr[sel] = value
        want[sel] = value
        assert write_hops == [], sel
    arr[...] = want[::-1]  # 64 chunks: hops
    want = want[::-1].copy()
    assert write_hops == [64]
    np.testing.assert_array_equal(_zarr_default(store), want)


def test_sharded_writes_hop(tmp_path: Path, write_hops: list[int]) -> None:
    store = LocalStore(tmp_path / "s.zarr")
    arr = zarr.create_array(
        store, shape=(64, 64), chunks=(8, 8), shards=(32, 32), dtype="u2",
        compressors=zarr.codecs.ZstdCodec(level=1),
    )  # fmt: skip
    arr[0:8, 0:8] = 9  # one inner chunk of one 2 KiB shard
    assert write_hops == [1]
    want = np.zeros((64, 64), "u2")
    want[0:8, 0:8] = 9
    np.testing.assert_array_equal(_zarr_default(store), want)


def test_work_hops_while_another_task_is_on_the_loop(
    tmp_path: Path, hops: list[int], write_hops: list[int]
) -> None:
    """With another task on zarr's loop (a call from another thread), small reads and writes
    hop instead of holding the loop up; once it is gone they run on the loop again."""
    from zarr.core.sync import _get_loop

    store = LocalStore(tmp_path / "t.zarr")
    _array(store, (32, 32))
    arr = zarr.open_array(store, mode="r+")
    release = threading.Event()

    async def other() -> None:
        while not release.is_set():
            await asyncio.sleep(0.001)

    running = asyncio.run_coroutine_threadsafe(other(), _get_loop())
    try:
        hops.clear()
        want = _values((256, 256), "u2")
        np.testing.assert_array_equal(arr[0:4, 0:4], want[0:4, 0:4])
        arr[0:4, 0:4] = 1
        assert hops == [1]
        assert write_hops == [1]
    finally:
        release.set()
        running.result(timeout=10)
    np.testing.assert_array_equal(arr[0:4, 0:4], 1)
    arr[0:4, 0:4] = 2
    assert hops == [1]
    assert write_hops == [1]
    np.testing.assert_array_equal(_zarr_default(store)[0:4, 0:4], 2)


def test_concurrent_small_writes_from_threads(tmp_path: Path, write_hops: list[int]) -> None:
    """Threads writing small regions through zarr at once (some on the loop, some hopping)
    lose nothing: every thread's rows, and every thread's column of chunks all of them
    rewrite (read, merged, written under the chunk's lock), are there."""
    store = LocalStore(tmp_path / "c.zarr")
    arr = zarr.create_array(
        store, shape=(80, 256), chunks=(16, 16), dtype="u2",
        compressors=zarr.codecs.ZstdCodec(level=1),
    )  # fmt: skip

    def writer(t: int) -> None:
        for i in range(16):
            arr[16 + t * 16 + i, :] = t * 100 + i  # a row of 16 chunks in this thread's band
            arr[i, 200 + t] = t + 1  # one element of chunks shared by all threads

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    got = _zarr_default(store)
    for t in range(4):
        for i in range(16):
            assert (got[16 + t * 16 + i, :] == t * 100 + i).all(), (t, i)
        np.testing.assert_array_equal(got[0:16, 200 + t], t + 1)
    np.testing.assert_array_equal(got[0:16, :200], 0)


def test_zarr_async_api_on_the_callers_loop_hops(
    tmp_path: Path, hops: list[int], write_hops: list[int]
) -> None:
    """On a loop of the caller's own (zarr's asynchronous API), which may run many tasks at
    once, small reads and writes hop: only zarr's own loop runs engine work."""
    store = LocalStore(tmp_path / "x.zarr")
    _array(store, (32, 32))
    want = _values((256, 256), "u2")
    hops.clear()

    async def main() -> Any:
        a = await zarr.api.asynchronous.open_array(store=store, mode="r+")
        got = await a.getitem((slice(0, 4), slice(0, 4)))
        await a.setitem((slice(0, 4), slice(0, 4)), np.ones((4, 4), "u2"))
        return got

    got = asyncio.run(main())
    np.testing.assert_array_equal(np.asarray(got), want[0:4, 0:4])
    assert hops == [1]
    assert write_hops == [1]
    want[0:4, 0:4] = 1
    np.testing.assert_array_equal(_zarr_default(store), want)


def test_the_task_count_bounds_the_tasks_of_the_loop() -> None:
    """The cheap count the inline check starts with is never below ``asyncio.all_tasks``'s
    count for the running loop (where it is one or less, work runs on the loop)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert _tasks_bound() >= len(asyncio.all_tasks(loop)) == 1
        others = [asyncio.ensure_future(asyncio.sleep(10)) for _ in range(3)]
        await asyncio.sleep(0)
        assert _tasks_bound() >= len(asyncio.all_tasks(loop)) == 4
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    asyncio.run(main())
    if sys.version_info[:2] in ((3, 12), (3, 13)):  # the Pythons whose registries it counts
        assert len(_TASK_SETS) == 2
