"""One ``cuzarr.Array`` shared by many threads: concurrent reads and disjoint writes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.testing import assert_same_array, use_pipeline
from threaded import run_threads

N_THREADS = 16
SHAPE = (64, 48)

LAYOUTS: dict[str, dict[str, Any]] = {
    "zstd": {"chunks": (8, 8)},
    "raw": {"chunks": (8, 8), "compressors": None},
    "sharded": {"chunks": (4, 4), "shards": (8, 16)},
}


def _run_threads(target: Callable[[int], None]) -> None:
    run_threads([functools.partial(target, i) for i in range(N_THREADS)], timeout=60)


def _store(kind: str, tmp_path: Path) -> Any:
    return zarr.storage.MemoryStore() if kind == "memory" else tmp_path / "a.zarr"


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("kind", ["memory", "local"])
def test_concurrent_reads(kind: str, layout: str, tmp_path: Path) -> None:
    a = cuzarr.create(
        _store(kind, tmp_path), shape=SHAPE, dtype="f8", fill_value=-1.0, **LAYOUTS[layout],
        settings=cuzarr.Settings(threads=2),
    )
    model = np.random.default_rng(0).standard_normal(SHAPE)
    model[:16, :16] = -1.0  # missing chunks read as the fill value
    a[...] = model

    def reader(i: int) -> None:
        rng = np.random.default_rng(i)
        for _ in range(25):
            lo = rng.integers(0, SHAPE, 2)
            hi = [int(rng.integers(int(x) + 1, n + 1)) for x, n in zip(lo, SHAPE, strict=True)]
            step = int(rng.integers(1, 4))
            sel = (slice(int(lo[0]), hi[0], step), slice(int(lo[1]), hi[1]))
            assert_same_array(a[sel], model[sel], msg=f"thread {i} {sel}")
            out = np.empty(model[sel].shape)
            a.read(sel, out=out)
            assert_same_array(out, model[sel])
            rows = rng.integers(0, SHAPE[0], 5)
            assert_same_array(a.oindex[rows, 3], model[rows, 3])
            assert_same_array(a.read_chunk((1, 2)), model[8:16, 16:24] if layout != "sharded"
                              else model[4:8, 8:12])

    _run_threads(reader)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("kind", ["memory", "local"])
def test_concurrent_disjoint_writes(kind: str, layout: str, tmp_path: Path) -> None:
    store = _store(kind, tmp_path)
    a = cuzarr.create(store, shape=SHAPE, dtype="i4", fill_value=0, **LAYOUTS[layout])
    unit = a.shards or a.chunks
    n0, n1 = -(-SHAPE[0] // unit[0]), -(-SHAPE[1] // unit[1])
    grid = [(i, j) for i in range(n0) for j in range(n1)]
    # Each stored object (chunk or shard) belongs to one thread: writes into one object from
    # two threads would race (read-modify-write), in zarr-python as in cuzarr.
    owned = {t: grid[t::N_THREADS] for t in range(N_THREADS)}
    assert sum(map(len, owned.values())) == len(grid) >= N_THREADS

    def region(i: int, j: int) -> tuple[slice, slice]:
        return slice(i * unit[0], (i + 1) * unit[0]), slice(j * unit[1], (j + 1) * unit[1])

    def writer(t: int) -> None:
        for i, j in owned[t]:
            sel = region(i, j)
            # Partial writes (read-modify-write) then a scalar, then one element.
            a[sel[0], sel[1].start : sel[1].start + 2] = t + 1
            a[sel] = np.full((unit[0], unit[1]), t + 1, "i4")
            a[sel[0].start, sel[1].start] = 1000 + t

    _run_threads(writer)
    model = np.zeros(SHAPE, "i4")
    for t, objects in owned.items():
        for i, j in objects:
            model[region(i, j)] = t + 1
            model[i * unit[0], j * unit[1]] = 1000 + t
    assert_same_array(a[...], model)
    with use_pipeline("zarr"):
        assert_same_array(zarr.open_array(store, mode="r")[...], model)
