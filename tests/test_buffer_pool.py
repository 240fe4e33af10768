"""The shard reader's buffer pool: reuse across waves without growing past one wave's needs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.stores import base
from cuzarr.stores.base import POOL_GRAIN, BufferPool


def _held(pool: BufferPool) -> list[int]:
    return sorted(b.nbytes for b in (*pool._free, *pool._used))


def test_pool_reuses_the_smallest_buffer_that_fits() -> None:
    pool = BufferPool()
    a, b = pool.get(3 * POOL_GRAIN), pool.get(POOL_GRAIN + 1)
    assert (a.nbytes, b.nbytes) == (3 * POOL_GRAIN, POOL_GRAIN + 1)
    assert _held(pool) == [2 * POOL_GRAIN, 3 * POOL_GRAIN]  # rounded up to the grain
    pool.release()
    small = pool.get(10)
    assert small.nbytes == 10 and small.base is not None
    assert small.base.nbytes == 2 * POOL_GRAIN  # the smaller one, not the 3-grain one
    assert _held(pool) == [2 * POOL_GRAIN, 3 * POOL_GRAIN]


def test_pool_drops_a_too_small_buffer_instead_of_keeping_it() -> None:
    pool = BufferPool()
    sizes = [5 * POOL_GRAIN, 4 * POOL_GRAIN]
    for wave in range(6):
        # Every wave asks for two buffers, each larger than anything the pool holds.
        got = [pool.get(n + wave * 2 * POOL_GRAIN) for n in sizes]
        assert [g.nbytes for g in got] == [n + wave * 2 * POOL_GRAIN for n in sizes]
        assert len(_held(pool)) == 2, f"wave {wave}: {_held(pool)}"
        pool.release()


def test_pool_buffers_of_one_wave_are_distinct() -> None:
    pool = BufferPool()
    pool.get(POOL_GRAIN)
    pool.release()
    a, b = pool.get(100), pool.get(100)
    a[:] = 1
    b[:] = 2
    assert int(a.sum()) == 100 and int(b.sum()) == 200


def test_whole_read_of_shards_of_uneven_sizes_holds_one_wave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole-array read keeps at most one wave's shards (2 here) in the pool, whatever the
    order of the shards' stored sizes (random data compresses to slightly different sizes)."""
    rng = np.random.default_rng(7)
    data = np.empty((64, 256, 256), np.uint16)
    # Shards of growing entropy (2 more bits an element each): every wave's shards are
    # larger than anything the last wave held, by more than the pool's rounding.
    for i in range(8):
        data[i * 8 : (i + 1) * 8] = rng.integers(0, 2 ** min(16, 2 + 2 * i), size=(8, 256, 256))
    path = tmp_path / "a.zarr"
    z = zarr.create_array(
        path, shape=data.shape, chunks=(8, 64, 64), shards=(8, 256, 256), dtype="uint16",
        compressors=zarr.codecs.ZstdCodec(level=1),
    )
    z[...] = data
    peak: list[int] = []
    original = BufferPool.release

    def release(self: BufferPool) -> None:
        peak.append(len(self._free) + len(self._used))
        original(self)

    monkeypatch.setattr(base.BufferPool, "release", release)
    shard_bytes = 8 * 256 * 256 * 2
    settings = cuzarr.Settings(threads=2, max_bytes_in_flight=2 * shard_bytes)
    a = cuzarr.open(path, settings=settings)
    np.testing.assert_array_equal(a[...], data)
    assert len(peak) == 4  # 8 shards, 2 a wave
    assert max(peak) <= 2, peak
