"""Partial shard writes spliced from the old shard (engine/shard_splice.py, ``put_spliced``).

What must hold: the spliced shard is byte for byte the one ``ShardingCodec.assemble_grid``
builds from the same old shard and new inner chunks (any write order, index at either end, old
shards laid out in another order, zero-length and empty inner chunks); local folders copy the
kept bytes in the kernel, or read and write them where the kernel refuses, with the same bytes;
a failed splice leaves the old shard and no temporary file; a partial write of a sharded array
reads only the old index and the inner chunks it keeps part of, closes what it opened, and
gives zarr's values.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.codecs import ShardingCodec as ZShardingCodec

import cuzarr
from cuzarr import _native
from cuzarr.codecs.sharding.format import ShardingCodec
from cuzarr.engine import write as write_mod
from cuzarr.engine.shard_splice import grid_blobs, old_index, splice_pieces
from cuzarr.errors import CorruptChunkError, StoreError
from cuzarr.stores import local as local_mod
from cuzarr.stores.base import Range
from cuzarr.stores.local import LocalChunkStore

SHAPE = (32, 32)
SHARD = (16, 16)
INNER = (4, 4)


def _create(path: Path, *, location: str = "end", compressors: Any = "auto") -> zarr.Array:
    inner: list[Any] = [BytesCodec()] + ([] if compressors is None else [ZstdCodec(level=3)])
    return zarr.create_array(
        str(path), shape=SHAPE, chunks=SHARD, dtype="<u2", fill_value=7, zarr_format=3,
        compressors=None,
        serializer=ZShardingCodec(chunk_shape=INNER, codecs=inner, index_location=location),
    )


def _sharding(tmp_path: Path) -> ShardingCodec:
    _create(tmp_path / "a.zarr")
    sh = cuzarr.open(tmp_path / "a.zarr")._engine._ctx.sharding
    assert sh is not None
    return sh


def _resolve(pieces: list[Range | Any], old: np.ndarray) -> bytes:
    return b"".join(
        bytes(old[p.start : p.start + p.length]) if isinstance(p, Range) else bytes(p)
        for p in pieces
    )


@pytest.mark.skipif(_native.helper() is None, reason="assemble_grid needs the batch helper")
@pytest.mark.parametrize("seed", range(40))
def test_splice_equals_assemble_grid(tmp_path: Path, seed: int) -> None:
    """Random old shards (laid out in any order) and edits: the bytes of assemble_grid."""
    rng = np.random.default_rng(seed)
    base = _sharding(tmp_path)
    orders = ("morton", "lexicographic", "colexicographic")
    sh = dataclasses.replace(
        base,
        write_order=orders[seed % 3],
        index_location="start" if seed % 2 else "end",
    )
    # The old shard: written by a codec of another layout (another tool) half of the time.
    writer = dataclasses.replace(sh, write_order=orders[(seed // 3) % 3])
    n = sh.n_inner
    blobs = {
        int(i): rng.integers(0, 255, int(rng.integers(0, 40)), dtype=np.uint8)
        for i in np.flatnonzero(rng.random(n) < 0.7)
    }
    if not blobs:
        blobs = {0: np.ones(3, np.uint8)}
    old_bytes = writer.assemble(blobs)
    assert old_bytes is not None
    old = sh.split(old_bytes)
    flat = np.sort(rng.choice(n, int(rng.integers(1, n)), replace=False)).astype(np.intp)
    stride = 48
    rows = rng.integers(0, 255, (len(flat), stride), dtype=np.uint8)
    sizes = rng.integers(1, stride, len(flat)).astype(np.int64)
    sizes[rng.random(len(flat)) < 0.2] = 0  # these inner chunks become empty
    want = sh.assemble_grid(old, flat, rows, sizes)
    pieces = splice_pieces(sh, old[1], grid_blobs(flat.tolist(), rows, sizes))
    if want is None:
        assert pieces is None
        return
    assert pieces is not None
    assert _resolve(pieces, old[0]) == bytes(want)
    # Kept inner chunks that lie one after another in the old shard are one range: in the
    # codec's own layout, the kept runs are the gaps between the new inner chunks.
    if sh.write_order == writer.write_order:
        assert sum(isinstance(p, Range) for p in pieces) <= len(flat) + 1


def test_kept_runs_are_one_range_each(tmp_path: Path) -> None:
    """An edit of one inner chunk of a shard in the codec's own layout: two ranges at most."""
    sh = _sharding(tmp_path)
    blobs = {i: np.full(10 + i, i, np.uint8) for i in range(sh.n_inner)}
    old = sh.split(sh.assemble(blobs))
    target = sh.layout_order()[5]
    pieces = splice_pieces(sh, old[1], {target: np.arange(3, dtype=np.uint8)})
    assert pieces is not None
    assert sum(isinstance(p, Range) for p in pieces) == 2
    emptied = splice_pieces(sh, old[1], {i: b"" for i in range(sh.n_inner)})
    assert emptied is None


def test_old_index_names_a_short_shard(tmp_path: Path) -> None:
    sh = _sharding(tmp_path)
    (tmp_path / "s").write_bytes(b"\0" * 10)
    reader = LocalChunkStore(tmp_path).open_object("s")
    assert reader is not None
    try:
        with pytest.raises(CorruptChunkError, match="10 bytes, shorter than its"):
            old_index(sh, reader)
    finally:
        reader.close()


def _pieces_file(tmp_path: Path) -> tuple[LocalChunkStore, Any, list[Range | Any], bytes]:
    src = np.random.default_rng(3).integers(0, 255, 300_000, dtype=np.uint8)
    (tmp_path / "old").write_bytes(src.tobytes())
    store = LocalChunkStore(tmp_path)
    reader = store.open_object("old")
    assert reader is not None
    pieces: list[Range | Any] = [
        b"head", Range(10, 100_000), np.arange(5, dtype=np.uint8), Range(200_000, 99_000),
        Range(0, 0),
    ]
    want = b"head" + src[10:100_010].tobytes() + bytes(range(5)) + src[200_000:299_000].tobytes()
    return store, reader, pieces, want


@pytest.mark.parametrize("kernel", ["copy_file_range", "refused", "absent"])
def test_local_put_spliced_writes_the_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    """In the kernel, or read and written where it refuses (the same bytes)."""
    store, reader, pieces, want = _pieces_file(tmp_path)
    if kernel == "refused":
        def refuse(*args: Any) -> int:
            raise OSError(errno.EXDEV, "cross-device")

        monkeypatch.setattr(os, "copy_file_range", refuse)
    elif kernel == "absent":
        monkeypatch.delattr(os, "copy_file_range")
    try:
        store.put_spliced("new", reader, pieces)
        store.put_spliced("old", reader, pieces)  # over the source itself, still open
    finally:
        reader.close()
    store.settle()
    assert (tmp_path / "new").read_bytes() == want
    assert (tmp_path / "old").read_bytes() == want
    assert sorted(os.listdir(tmp_path)) == ["new", "old"]


def test_local_put_spliced_failures_keep_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, reader, pieces, _want = _pieces_file(tmp_path)
    before = (tmp_path / "old").read_bytes()
    try:
        with pytest.raises(ValueError, match=r"outside the source object of 300000 bytes"):
            store.put_spliced("old", reader, [Range(299_990, 20)])

        def broken(*args: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "copy_file_range", broken)
        with pytest.raises(StoreError, match=r"'old'.*No space left"):
            store.put_spliced("old", reader, pieces)
        with pytest.raises(TypeError, match="is not a file of"):
            store.put_spliced("old", object(), pieces)  # type: ignore[arg-type]
    finally:
        reader.close()
    assert (tmp_path / "old").read_bytes() == before
    assert os.listdir(tmp_path) == ["old"]


def test_copy_range_refuses_a_source_that_ends_early(tmp_path: Path) -> None:
    (tmp_path / "s").write_bytes(b"x" * 100)
    src = os.open(tmp_path / "s", os.O_RDONLY)
    dst = os.open(tmp_path / "d", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="ended 50 bytes early"):
            local_mod._copy_range(src, dst, 50, 100)
    finally:
        os.close(src)
        os.close(dst)


def _edit(path: Path, value: np.ndarray, region: tuple[slice, ...]) -> None:
    arr = cuzarr.open(path, mode="r+")
    arr[region] = value


@pytest.mark.parametrize("location", ["end", "start"])
@pytest.mark.parametrize("compressors", ["auto", None])
def test_partial_shard_writes_splice_and_equal_zarr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, location: str, compressors: Any
) -> None:
    """Whole and partly covered inner chunks, an inner chunk made empty: zarr's values.

    The write reads the old index and the partly covered inner chunks only (never the whole
    shard), puts each shard through ``put_spliced``, and closes every shard it opened.
    """
    rng = np.random.default_rng(5)
    data = rng.integers(0, 1000, SHAPE).astype("<u2")
    z = _create(tmp_path / "a.zarr", location=location, compressors=compressors)
    z[...] = data
    want = zarr.open_array(str(tmp_path / "a.zarr"))
    # The reference: zarr's own pipeline on a copy.
    ref = _create(tmp_path / "ref.zarr", location=location, compressors=compressors)
    ref[...] = data

    spliced: list[str] = []
    whole_reads: list[str] = []
    closed: list[int] = []
    orig_splice = LocalChunkStore.put_spliced
    orig_get = LocalChunkStore.get
    orig_close = local_mod._FileReader.close

    def spy_splice(self: LocalChunkStore, key: str, source: Any, pieces: Any) -> None:
        spliced.append(key)
        orig_splice(self, key, source, pieces)

    def spy_get(self: LocalChunkStore, key: str, *args: Any, **kwargs: Any) -> Any:
        if "/c/" in f"/{key}" and not args and kwargs.get("fresh"):
            whole_reads.append(key)
        return orig_get(self, key, *args, **kwargs)

    def spy_close(self: Any) -> None:
        closed.append(self.fd)
        orig_close(self)

    monkeypatch.setattr(LocalChunkStore, "put_spliced", spy_splice)
    monkeypatch.setattr(LocalChunkStore, "get", spy_get)
    monkeypatch.setattr(local_mod._FileReader, "close", spy_close)
    edits: list[tuple[Any, Any]] = [
        (np.s_[0:8, 0:8], data[0:8, 0:8] + 1),  # whole inner chunks: encoded from the value
        (np.s_[8:16, 4:12], np.broadcast_to(np.arange(8, dtype="<u2"), (8, 8))),  # 0 strides
        (np.s_[3:9, 14:19], data[3:9, 14:19] + 2),  # partly covered inner chunks, two shards
        (np.s_[20:24, 20:24], np.full((4, 4), 7, "<u2")),  # an inner chunk becomes empty
        (np.s_[17:19, 1:3], 3),  # a scalar into part of one inner chunk
    ]
    for region, value in edits:
        _edit(tmp_path / "a.zarr", value, region)
        ref[region] = value
    assert sorted(set(spliced)) == ["c/0/0", "c/0/1", "c/1/0", "c/1/1"]
    assert whole_reads == []
    assert len(closed) == len(spliced)
    np.testing.assert_array_equal(want[...], ref[...])
    # Readers other than cuzarr see the same values.
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a.zarr"))[...], ref[...])


def test_a_corrupt_old_index_is_named_and_the_shard_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    z = _create(tmp_path / "a.zarr")
    z[...] = np.arange(np.prod(SHAPE), dtype="<u2").reshape(SHAPE)
    shard = tmp_path / "a.zarr" / "c" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 0xFF  # the index checksum
    shard.write_bytes(bytes(raw))
    closed: list[int] = []
    orig_close = local_mod._FileReader.close

    def spy_close(self: Any) -> None:
        closed.append(self.fd)
        orig_close(self)

    monkeypatch.setattr(local_mod._FileReader, "close", spy_close)
    arr = cuzarr.open(tmp_path / "a.zarr", mode="r+")
    with pytest.raises(CorruptChunkError, match="c/0/0"):
        arr[0:2, 0:2] = 1
    assert len(closed) == 1
    assert shard.read_bytes() == bytes(raw)


def test_memory_stores_splice_through_the_default(tmp_path: Path) -> None:
    """Stores without a kernel copy join the pieces in memory: the same values as zarr's."""
    data = np.arange(np.prod(SHAPE), dtype="<u2").reshape(SHAPE)
    zs = zarr.storage.MemoryStore()
    z = zarr.create_array(
        zs, shape=SHAPE, chunks=INNER, shards=SHARD, dtype="<u2", fill_value=7, zarr_format=3
    )
    z[...] = data
    arr = cuzarr.open(zs, mode="r+")
    assert write_mod._splices(arr._chunk_store())
    arr[5:11, 2:7] = 9
    data[5:11, 2:7] = 9
    np.testing.assert_array_equal(z[...], data)
