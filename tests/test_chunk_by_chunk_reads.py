"""Chunk-by-chunk reads: one chunk, or a box inside one inner chunk of a shard, per call.

These take short paths of their own (one call into C for a small zstd chunk of a local file,
one fetch and decode for an inner chunk), which must give what zarr-python gives for every
box, stored or empty inner chunk, missing shard or chunk, and name a corrupt one.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.backends import cpu as cpu_backend
from cuzarr.engine import read as read_loops
from cuzarr.errors import CorruptChunkError
from cuzarr.testing import assert_same_array, use_pipeline

SHAPE = (24, 20, 18)
INNER = (4, 5, 6)
SHARDS = (8, 10, 18)


def _data() -> np.ndarray:
    rng = np.random.default_rng(5)
    data = rng.integers(0, 1000, SHAPE).astype("<u2")
    data[:, 10:, :] = 9  # the fill value: empty inner chunks and missing chunks
    data[16:, :, :] = 9  # whole shards of fill: missing shards
    return data


def _create(path: Path, compressor: Any, shards: tuple[int, ...] | None) -> np.ndarray:
    data = _data()
    z = zarr.create_array(
        zarr.storage.LocalStore(path), shape=SHAPE, chunks=INNER, shards=shards, dtype="<u2",
        fill_value=9, compressors=compressor,
    )
    with use_pipeline("zarr"):
        z[...] = data
    return data


def _boxes() -> list[tuple[slice, ...]]:
    """Every inner chunk's region, and boxes inside inner chunks (corners, single elements)."""
    origins = itertools.product(*(range(0, n, c) for n, c in zip(SHAPE, INNER, strict=True)))
    boxes = [tuple(slice(o, o + c) for o, c in zip(at, INNER, strict=True)) for at in origins]
    boxes += [
        (slice(1, 3), slice(6, 9), slice(13, 17)),
        (slice(5, 6), slice(0, 1), slice(0, 6)),
        (slice(21, 24), slice(15, 20), slice(12, 18)),  # a missing shard
        (slice(9, 11), slice(2, 4), slice(7, 8)),
    ]
    return boxes


COMPRESSORS = {
    "zstd": zarr.codecs.ZstdCodec(level=3),
    "blosc-lz4": zarr.codecs.BloscCodec(cname="lz4", shuffle="shuffle"),
}


@pytest.mark.parametrize("sharded", [True, False], ids=["sharded", "chunked"])
@pytest.mark.parametrize("codec", list(COMPRESSORS))
def test_box_by_box_equals_zarr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sharded: bool, codec: str
) -> None:
    path = tmp_path / "a.zarr"
    data = _create(path, COMPRESSORS[codec], SHARDS if sharded else None)
    taken: list[bool | None] = []
    real = read_loops._one_inner_chunk

    def spy(*args: Any) -> Any:
        got = real(*args)
        taken.append(got)
        return got

    monkeypatch.setattr(read_loops, "_one_inner_chunk", spy)
    singles: list[list[int]] = []
    real_boxes = cpu_backend.zstd_batch.read_boxes

    def boxes_spy(paths: Any, *args: Any, **kwargs: Any) -> Any:
        status = real_boxes(paths, *args, **kwargs)
        if len(paths) == 1:
            singles.append(status.tolist())
        return status

    monkeypatch.setattr(cpu_backend.zstd_batch, "read_boxes", boxes_spy)
    a = cuzarr.open(path)
    assert isinstance(a, cuzarr.Array)
    reference = zarr.open_array(zarr.storage.LocalStore(path), mode="r")
    out = np.full(SHAPE, 12345, "<u2")  # a strided destination per box: out[box]
    for box in _boxes():
        assert_same_array(a[box], data[box], msg=repr(box))
        assert a.read(box, out=out[box]) is not None
        with use_pipeline("zarr"):
            assert_same_array(reference[box], data[box])
    assert_same_array(out, data)
    if sharded:
        # Every box lies in one inner chunk: the short path took each (missing shards too).
        assert taken and all(t is not None for t in taken)
        assert False in taken  # a missing shard reads as the fill value, reported missing
    else:
        assert taken == []
    if codec == "zstd" and not sharded and cpu_backend.zstd_batch.available():
        # One call into C per chunk: placed, or missing (the fill value). Without the batch
        # helper (no C compiler at install, CUZARR_NATIVE=0) nothing calls it.
        assert [1] in singles and [0] in singles
    else:
        assert singles == []


def test_boxes_across_inner_chunks_take_the_general_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.zarr"
    data = _create(path, COMPRESSORS["zstd"], SHARDS)
    a = cuzarr.open(path)
    seen: list[Any] = []
    real = read_loops._one_inner_chunk
    monkeypatch.setattr(
        read_loops, "_one_inner_chunk", lambda *args: seen.append(real(*args)) or seen[-1]
    )
    for box in [
        (slice(2, 7), slice(0, 5), slice(0, 6)),  # two inner chunks
        (slice(0, 4, 2), slice(0, 5), slice(0, 6)),  # a step
        (1, slice(0, 5), slice(0, 6)),  # a dropped axis
    ]:
        assert_same_array(a[box], data[box], msg=repr(box))
    assert seen and all(s is None for s in seen)


def test_a_corrupt_inner_chunk_is_named(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    _create(path, COMPRESSORS["zstd"], SHARDS)
    shard = path / "c" / "0" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    raw[10:40] = bytes(30)  # inside the first inner chunk's frame
    shard.write_bytes(bytes(raw))
    with pytest.raises(CorruptChunkError, match=r"c/0/0/0.*inner chunk \(0, 0, 0\)"):
        cuzarr.open(path)[0:4, 0:5, 0:6]


def test_a_corrupt_small_chunk_is_named(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    data = _create(path, COMPRESSORS["zstd"], None)
    chunk = path / "c" / "0" / "1" / "2"
    chunk.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(20))  # a zstd magic, then nonsense
    a = cuzarr.open(path)
    with pytest.raises(CorruptChunkError, match=r"c/0/1/2"):
        a[0:4, 5:10, 12:18]
    assert_same_array(a[0:4, 0:5, 0:6], data[0:4, 0:5, 0:6])
