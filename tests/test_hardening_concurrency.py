"""Concurrent writers and readers: every value lands, no reader sees a torn chunk.

Threads and processes (``multiprocessing`` with the fork and the spawn start methods) write
disjoint chunks of one array through zarr with cuzarr as its engine. With fork, the parent has
used cuzarr's thread pool before forking, so the children check that the pool is recreated
after fork (no deadlock). Readers running while a writer rewrites every chunk must see each
chunk wholly old or wholly new.

Writers to the *same* chunk or shard in one process serialize on cuzarr's per-object locks
(every write is a read-modify-write of the whole chunk or shard), through zarr's API and the
explicit API alike; cuzarr's Dask writer never lets two tasks write one shard. Writers in
different processes that share a shard are not serialized: see docs/reliability.md.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec
from zarr.storage import LocalStore, MemoryStore

import cuzarr
from threaded import run_threads

SHAPE = (64, 64)
CHUNKS = (8, 8)


@pytest.fixture(autouse=True)
def _strict() -> Iterator[None]:
    cuzarr.reset_stats()
    with cuzarr.configure(strict=True):
        yield


def _expected() -> np.ndarray[Any, Any]:
    return np.arange(np.prod(SHAPE), dtype="int32").reshape(SHAPE) + 1


def _chunk_slices() -> list[tuple[slice, slice]]:
    return [
        (slice(i, i + CHUNKS[0]), slice(j, j + CHUNKS[1]))
        for i in range(0, SHAPE[0], CHUNKS[0])
        for j in range(0, SHAPE[1], CHUNKS[1])
    ]


LAYOUTS: dict[str, dict[str, Any]] = {
    "chunks": {"chunks": CHUNKS, "compressors": ZstdCodec(level=1)},
    "shards": {"chunks": CHUNKS, "shards": (16, 16), "compressors": ZstdCodec(level=1)},
}


# -------------------------------------------------------------------------------------------
# many threads, disjoint chunks (or disjoint shards)


@pytest.mark.parametrize("store_kind", ["memory", "local"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_threads_writing_disjoint_blocks(tmp_path: Path, store_kind: str, layout: str) -> None:
    store: Any = MemoryStore() if store_kind == "memory" else LocalStore(tmp_path / "t.zarr")
    arr = zarr.create_array(store, name="arr", shape=SHAPE, dtype="int32", **LAYOUTS[layout])
    expected = _expected()
    # Disjoint at the granularity that is written atomically: chunks, or whole shards.
    step = 16 if layout == "shards" else 8
    blocks = [
        (slice(i, i + step), slice(j, j + step))
        for i in range(0, SHAPE[0], step)
        for j in range(0, SHAPE[1], step)
    ]

    def writer(k: int) -> None:
        for sel in blocks[k::8]:
            arr[sel] = expected[sel]

    run_threads([functools.partial(writer, k) for k in range(8)])
    np.testing.assert_array_equal(zarr.open_array(store, path="arr", mode="r")[...], expected)
    assert cuzarr.stats().get("fallback_writes", 0) == 0


# -------------------------------------------------------------------------------------------
# several processes, fork and spawn


def _process_writer(args: tuple[str, int, int]) -> int:
    """Write rows ``[k::n]`` of chunk rows; runs in a child process."""
    root, k, n = args
    cuzarr.configure(strict=True, threads=2)
    arr = zarr.open_array(LocalStore(root), path="arr")
    expected = _expected()
    written = 0
    for sel in _chunk_slices()[k::n]:
        arr[sel] = expected[sel]
        written += 1
    return written


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_processes_writing_disjoint_chunks(tmp_path: Path, method: str) -> None:
    if method not in mp.get_all_start_methods():  # pragma: no cover - not on Linux
        pytest.skip(f"no {method} start method here")
    root = tmp_path / "p.zarr"
    arr = zarr.create_array(
        LocalStore(root), name="arr", shape=SHAPE, dtype="int32", **LAYOUTS["chunks"]
    )
    # Use the engine (and so its thread pool) in the parent before forking.
    with cuzarr.configure(threads=2):
        arr[...] = 0
        _ = arr[...]
    n = 3
    ctx = mp.get_context(method)
    with ctx.Pool(n) as pool:
        result = pool.map_async(_process_writer, [(str(root), k, n) for k in range(n)])
        written = result.get(timeout=120)  # a deadlocked child fails here, not hangs
    assert sum(written) == len(_chunk_slices())
    np.testing.assert_array_equal(zarr.open_array(LocalStore(root), path="arr")[...], _expected())


def _shard_piece_writer(args: tuple[str, str, int, int]) -> int:
    root, api, rank, rounds = args
    with cuzarr.configure(strict=True):
        if api == "zarr":
            target: Any = zarr.open_array(LocalStore(root), path="arr", mode="r+")
        else:
            target = cuzarr.open(root, path="arr", mode="r+")
        for rnd in range(rounds):
            # rank's own row of inner chunks: a read-modify-write of the one shard
            target[rank * 4 : rank * 4 + 4, :] = rank * 100 + rnd + 1
    return rounds


@pytest.mark.parametrize("api", ["zarr", "explicit"])
def test_processes_writing_one_shard_lose_no_update(tmp_path: Path, api: str) -> None:
    # 4 processes each rewrite their own inner chunks of ONE shard, 8 rounds each: every
    # round is a read-modify-write of the whole shard, serialized across processes by
    # cuzarr's file locks (cuzarr.engine.locks.file_locks).
    root = tmp_path / "s.zarr"
    zarr.create_array(
        LocalStore(root),
        name="arr",
        shape=(16, 16),
        dtype="int32",
        chunks=(4, 16),
        shards=(16, 16),
        fill_value=0,
        compressors=ZstdCodec(level=1),
    )
    n, rounds = 4, 8
    with mp.get_context("spawn").Pool(n) as pool:
        done = pool.map_async(_shard_piece_writer, [(str(root), api, k, rounds) for k in range(n)])
        assert sum(done.get(timeout=180)) == n * rounds
    expected = np.repeat(np.arange(n, dtype="int32") * 100 + rounds, 4)[:, None] * np.ones(
        (1, 16), "int32"
    )
    np.testing.assert_array_equal(zarr.open_array(LocalStore(root), path="arr")[...], expected)


# -------------------------------------------------------------------------------------------
# readers concurrent with a writer


@pytest.mark.parametrize("store_kind", ["memory", "local"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_readers_never_see_torn_chunks(tmp_path: Path, store_kind: str, layout: str) -> None:
    """The writer fills every chunk with one value per round; readers check each chunk is
    uniform (old or new), never a mix."""
    store: Any = MemoryStore() if store_kind == "memory" else LocalStore(tmp_path / "r.zarr")
    arr = zarr.create_array(store, name="arr", shape=SHAPE, dtype="int32", **LAYOUTS[layout])
    arr[...] = 1
    rounds = 12
    done = threading.Event()
    reads = {"n": 0}
    step = 16 if layout == "shards" else 8
    blocks = [
        (slice(i, i + step), slice(j, j + step))
        for i in range(0, SHAPE[0], step)
        for j in range(0, SHAPE[1], step)
    ]

    def writer() -> None:
        try:
            w = zarr.open_array(store, path="arr")
            for r in range(2, rounds + 2):
                w[...] = np.full(SHAPE, r, dtype="int32")
        finally:
            done.set()

    def reader() -> None:
        rd = zarr.open_array(store, path="arr", mode="r")
        while not done.is_set():
            got = rd[...]
            for sel in blocks:
                values = np.unique(got[sel])
                assert values.size == 1, f"torn block {sel}: {values}"
                assert 1 <= values[0] <= rounds + 1
            reads["n"] += 1

    run_threads([reader, reader, writer], barrier=False)
    assert reads["n"] >= 1
    np.testing.assert_array_equal(zarr.open_array(store, path="arr")[...], rounds + 1)


# -------------------------------------------------------------------------------------------
# writers to the same shard


@pytest.mark.parametrize("api", ["zarr", "explicit"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("kind", ["memory", "local"])
def test_threads_writing_one_shard_lose_no_update(
    kind: str, layout: str, api: str, tmp_path: Path
) -> None:
    # 16 threads each write a different 4x4 piece of the same 16x16 region: every write is a
    # read-modify-write of one chunk (or one shard); none may be lost.
    store: Any = MemoryStore() if kind == "memory" else LocalStore(tmp_path / "s")
    z = zarr.create_array(
        store, name="arr", shape=SHAPE, dtype="int32", fill_value=0, **LAYOUTS[layout]
    )
    target: Any = z if api == "zarr" else cuzarr.open(store, path="arr", mode="r+")
    pieces = [(slice(i, i + 4), slice(j, j + 4)) for i in range(0, 16, 4) for j in range(0, 16, 4)]
    expected = np.zeros(SHAPE, "int32")

    def writer(n: int) -> None:
        for rnd in range(5):
            target[pieces[n]] = n * 10 + rnd + 1

    run_threads([functools.partial(writer, n) for n in range(len(pieces))])
    for n, piece in enumerate(pieces):
        expected[piece] = n * 10 + 5
    np.testing.assert_array_equal(zarr.open_array(store, path="arr")[...], expected)


def test_dask_writer_same_shard_no_lost_update(tmp_path: Path) -> None:
    # Dask chunks that straddle shards: cuzarr.dask.to_zarr rechunks onto the shard grid, so no
    # two tasks write one shard (plain da.to_zarr loses data here: see tests/test_dask.py).
    da = pytest.importorskip("dask.array")
    import cuzarr.dask as cdask

    expected = np.arange(np.prod(SHAPE), dtype="int32").reshape(SHAPE)
    darr = da.from_array(expected, chunks=(5, 7))
    for run in range(3):
        target = tmp_path / f"run{run}.zarr"
        cdask.to_zarr(darr, str(target), chunks=CHUNKS, shards=(16, 16))
        np.testing.assert_array_equal(zarr.open_array(str(target))[...], expected)
