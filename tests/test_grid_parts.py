"""How a box of inner chunks is cut into parts for the grid decode and encode.

What must hold: the parts cover every inner chunk once; each part's flat range ``lo .. hi`` is
exactly the inner chunks of its block, in C order (the stage buffer's order); the split keeps
parts near ``GRID_PART_BYTES`` and gives every thread one where the box allows, also for boxes
with a single slab along their first axes (a ``1 x n x ...`` shard); and arrays read and
written through parts cut on every axis equal zarr's.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.backends import grid_parts as gp
from cuzarr.codecs import blosc_batch

GRIDS = [
    (1,),
    (7,),
    (4, 2, 10),
    (1, 4, 8, 8),
    (1, 1, 3, 5),
    (2, 1, 1, 6),
    (8, 8, 8),
    (16, 16, 16),
    (3, 5, 7),
]


def _covered(grid: tuple[int, ...], part: gp.GridPart, shape: tuple[int, ...]) -> list[int]:
    """Flat indices (C order over ``grid``) of the inner chunks inside ``part.region``."""
    ranges = []
    for sl, c, counts in zip(part.region, shape, part.counts, strict=True):
        assert sl.start % c == 0 and sl.stop % c == 0
        assert (sl.stop - sl.start) // c == counts
        ranges.append(range(sl.start // c, sl.stop // c))
    return [int(np.ravel_multi_index(ix, grid)) for ix in itertools.product(*ranges)]


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("nbytes", [512, 16 << 10, 64 << 10, 3 << 20])
@pytest.mark.parametrize("threads", [1, 2, 8])
def test_parts_cover_the_box_once_in_c_order(
    grid: tuple[int, ...], nbytes: int, threads: int
) -> None:
    shape = tuple(2 + i for i in range(len(grid)))
    parts = gp.grid_parts(grid, shape, nbytes, threads)
    seen: list[int] = []
    for part in parts:
        flat = _covered(grid, part, shape)
        assert flat == list(range(part.lo, part.hi)), part
        seen += flat
    assert sorted(seen) == list(range(math.prod(grid)))
    # A part of several inner chunks stays within GRID_PART_BYTES.
    assert all(p.hi - p.lo == 1 or (p.hi - p.lo) * nbytes <= gp.GRID_PART_BYTES for p in parts)


def test_a_shard_with_one_slab_along_its_first_axis_is_cut() -> None:
    # (k) of the independent check: 1 x 4 x 8 x 8 inner chunks of 16 KiB per shard. Cutting
    # along the first axis only gave one part: one thread decoded every shard.
    parts = gp.grid_parts((1, 4, 8, 8), (1, 16, 32, 32), 16 << 10, 2)
    assert len(parts) >= 2 and {p.hi - p.lo for p in parts} == {128}
    assert len(gp.grid_parts((1, 4, 8, 8), (1, 16, 32, 32), 16 << 10, 8)) >= 8
    # Where the first axis has slabs enough, the cut is along it, as before.
    parts = gp.grid_parts((16, 16, 16), (16, 16, 16), 8 << 10, 2)
    assert [(p.lo, p.hi) for p in parts] == [(256 * i, 256 * (i + 1)) for i in range(16)]


def test_views_copy_between_the_box_and_the_stage() -> None:
    grid, shape = (2, 3, 4), (2, 3, 5)
    box = np.arange(math.prod(g * c for g, c in zip(grid, shape, strict=True))).reshape(
        tuple(g * c for g, c in zip(grid, shape, strict=True))
    )
    for part in gp.grid_parts(grid, shape, 8, 2):
        stage = np.empty((part.hi - part.lo, *shape), box.dtype)
        src = gp.interleaved(box[part.region], part.counts, shape, writeable=False)
        gp.interleaved_chunks(stage, part.counts, shape)[...] = src
        for j, flat in enumerate(range(part.lo, part.hi)):
            ix = np.unravel_index(flat, grid)
            region = tuple(slice(i * c, (i + 1) * c) for i, c in zip(ix, shape, strict=True))
            np.testing.assert_array_equal(stage[j], box[region])


@pytest.mark.skipif(not blosc_batch.available(), reason="batch helper not built")
@pytest.mark.parametrize("compressor", ["blosc", "zstd"])
@pytest.mark.parametrize("part_bytes", [gp.GRID_PART_BYTES, 200, 1])
def test_arrays_through_parts_on_every_axis_equal_zarr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compressor: str, part_bytes: int
) -> None:
    """4-D shards of ``1 x 4 x 4 x 6`` inner chunks, parts cut as small as one inner chunk."""
    monkeypatch.setattr(gp, "GRID_PART_BYTES", part_bytes)
    codec = (
        zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")
        if compressor == "blosc"
        else zarr.codecs.ZstdCodec(level=3)
    )
    shape, inner, shard = (3, 16, 20, 30), (1, 4, 5, 5), (1, 16, 20, 30)
    rng = np.random.default_rng(3)
    data = (np.cumsum(rng.integers(-2, 3, shape), axis=3) % 300).astype("<u2")
    data[:, :4, :5, :5] = 0  # an inner chunk of the fill value: left out of the shard
    arrays = {}
    for name in ("ours", "theirs"):
        arrays[name] = zarr.create_array(
            zarr.storage.LocalStore(tmp_path / name), shape=shape, chunks=inner,
            shards=shard, dtype="<u2", fill_value=0, compressors=codec,
        )
    a = cuzarr.open(tmp_path / "ours", mode="r+", settings=cuzarr.Settings(threads=2))
    a[...] = data
    arrays["theirs"][...] = data
    a[1:3, 2:15, 3:19, 1:29] = data[1:3, 2:15, 3:19, 1:29] + 7
    arrays["theirs"][1:3, 2:15, 3:19, 1:29] = data[1:3, 2:15, 3:19, 1:29] + 7
    want = arrays["theirs"][...]
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "ours")[...], want)
    for sel in (np.s_[...], np.s_[1], np.s_[:, 4:12, 5:20, 5:25], np.s_[::2, ::3, 1, ::-4]):
        np.testing.assert_array_equal(a[sel], want[sel])
