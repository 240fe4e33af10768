"""Inner chunks decoded and encoded a box at a time, through cuzarr's batch helper.

``cuzarr._native`` (C, built at install) loops over c-blosc's and libzstd's entry points in
numcodecs; ``CpuBackend.decode_grid`` (Blosc and zstd) / ``encode_grid`` (Blosc) use it for
boxes of inner chunks, and ``ShardingCodec.assemble_grid`` builds the shard. What must hold:
numcodecs' frames byte for byte, zarr's values and stored files, the same results with the
helper switched off, and a corrupt inner chunk named in the error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numcodecs
import numcodecs.blosc
import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr import _native
from cuzarr.backends import cpu as cpu_backend
from cuzarr.codecs import blosc_batch, zstd_batch
from cuzarr.errors import CorruptChunkError
from cuzarr.testing import use_pipeline

needs_helper = pytest.mark.skipif(
    not blosc_batch.available(), reason=f"batch helper: {_native.unavailable_reason()}"
)


def test_helper_is_built_where_required() -> None:
    """CI (``CUZARR_REQUIRE_NATIVE=1``) must not silently run without the helper."""
    if os.environ.get("CUZARR_REQUIRE_NATIVE") != "1":
        pytest.skip("CUZARR_REQUIRE_NATIVE is not set")
    assert _native.helper() is not None, _native.unavailable_reason()
    assert blosc_batch.available()


# ---------------------------------------------------------------------------- frames


def _rows(dtype: str, n: int = 24, size: int = 2048) -> np.ndarray:
    rng = np.random.default_rng(7)
    walk = np.cumsum(rng.integers(-3, 4, size=n * size)) % 200
    return walk.astype(dtype).reshape(n, size)


@needs_helper
@pytest.mark.parametrize("cname", ["lz4", "blosclz", "lz4hc", "zstd", "zlib"])
@pytest.mark.parametrize("shuffle", [0, 1, 2, -1])
@pytest.mark.parametrize("dtype", ["u1", "<u2", "<f4", "<i8"])
def test_encode_rows_are_numcodecs_frames(cname: str, shuffle: int, dtype: str) -> None:
    data = _rows(dtype)
    nbytes = data[0].nbytes
    typesize = data.dtype.itemsize
    params = blosc_batch.BloscParams.of(numcodecs.Blosc(cname, 5, shuffle), typesize)
    assert params is not None
    stride = nbytes + blosc_batch.BLOSC_OVERHEAD
    rows = np.empty((len(data), stride), np.uint8)
    sizes = blosc_batch.encode_rows(
        data.reshape(-1).view(np.uint8), np.arange(len(data)) * nbytes, nbytes, params,
        rows.reshape(-1), np.arange(len(data)) * stride,
    )
    for i, row in enumerate(data):
        want = numcodecs.blosc.compress(row, cname.encode(), 5, shuffle, 0, typesize)
        assert bytes(rows[i, : sizes[i]]) == want
    # And they decode back, in one call, anywhere in a destination.
    frames = np.concatenate([rows[i, : sizes[i]] for i in range(len(data))])
    starts = (np.cumsum(sizes) - sizes).astype(np.int64)
    out = np.zeros(data.nbytes + nbytes, np.uint8)
    where = (np.arange(len(data))[::-1] * nbytes + nbytes).astype(np.int64)
    ok = blosc_batch.decode_frames(frames, starts, sizes.astype(np.int64), out, where, nbytes)
    assert ok.all()
    for i, row in enumerate(data):
        assert np.array_equal(out[where[i] : where[i] + nbytes].view(data.dtype), row)


@needs_helper
def test_decode_frames_refuses_what_numcodecs_refuses() -> None:
    data = _rows("<u2", n=6)
    nbytes = data[0].nbytes
    codec = numcodecs.Blosc("lz4", 5, 1)
    frames = [np.frombuffer(codec.encode(r), np.uint8) for r in data]
    lengths = np.array([len(f) for f in frames], np.int64)
    buf = np.concatenate(frames)
    starts = (np.cumsum(lengths) - lengths).astype(np.int64)
    bad_len = lengths.copy()
    bad_len[1] -= 1  # the header's stored size no longer matches
    bad_len[2] = 10  # shorter than a header
    garbage = buf.copy()
    garbage[starts[3] + 16 : starts[3] + 40] = 0xFF  # compressed stream overwritten
    garbage[starts[4] + 4] ^= 0x01  # declares another decoded size
    out = np.empty(len(data) * nbytes, np.uint8)
    where = np.arange(len(data), dtype=np.int64) * nbytes
    ok = blosc_batch.decode_frames(garbage, starts, bad_len, out, where, nbytes)
    assert ok.tolist() == [True, False, False, ok[3], False, True]
    for i in (0, 5):
        assert np.array_equal(out[where[i] : where[i] + nbytes].view("<u2"), data[i])
    # The overwritten stream: refused exactly when numcodecs refuses it.
    frame3 = garbage[starts[3] : starts[3] + lengths[3]]
    try:
        numcodecs.blosc.decompress(frame3, np.empty(nbytes, np.uint8))
        numcodecs_ok = True
    except RuntimeError:
        numcodecs_ok = False
    assert bool(ok[3]) == numcodecs_ok
    with pytest.raises(ValueError, match="outside"):
        blosc_batch.decode_frames(buf, starts, lengths, out, where + nbytes, nbytes)


@needs_helper
def test_zstd_decode_frames_equal_numcodecs() -> None:
    data = _rows("<u2", n=8)
    nbytes = data[0].nbytes
    plain, summed = numcodecs.Zstd(level=3), numcodecs.Zstd(level=3, checksum=True)
    frames = [np.frombuffer(plain.encode(r), np.uint8) for r in data[:4]]
    frames += [np.frombuffer(summed.encode(r), np.uint8) for r in data[4:]]
    # Chunk 1: two frames (numcodecs decodes both): the halves of the chunk.
    half = nbytes // 2
    raw1 = data[1].view(np.uint8)
    frames[1] = np.concatenate(
        [np.frombuffer(plain.encode(raw1[:half]), np.uint8),
         np.frombuffer(plain.encode(raw1[half:]), np.uint8)]
    )
    lengths = np.array([len(f) for f in frames], np.int64)
    buf = np.concatenate(frames)
    starts = (np.cumsum(lengths) - lengths).astype(np.int64)
    out = np.empty(len(data) * nbytes, np.uint8)
    where = np.arange(len(data), dtype=np.int64) * nbytes
    ok = zstd_batch.decode_frames(buf, starts, lengths, out, where, nbytes)
    assert ok.all()
    np.testing.assert_array_equal(out.view("<u2").reshape(data.shape), data)
    bad = buf.copy()
    bad[starts[5] + lengths[5] - 1] ^= 0xFF  # the checksum no longer matches
    short = lengths.copy()
    short[2] -= 3  # truncated frame
    ok = zstd_batch.decode_frames(bad, starts, short, out, where, nbytes)
    assert ok.tolist() == [True, True, False, True, True, False, True, True]
    for i in (2, 5):
        with pytest.raises(RuntimeError):
            frame = (bad if i == 5 else buf)[starts[i] : starts[i] + short[i]]
            numcodecs.Zstd().decode(frame)
    # Decoding to more or less than nbytes is refused (the chunk's size is fixed).
    ok = zstd_batch.decode_frames(buf, starts, lengths, out, where // 2, nbytes // 2)
    assert not ok.any()
    with pytest.raises(ValueError, match="outside"):
        zstd_batch.decode_frames(buf, starts, lengths + 1000, out, where, nbytes)


@needs_helper
def test_gather_checks_bounds() -> None:
    src = np.arange(10, dtype=np.uint8)
    dest = np.zeros(10, np.uint8)
    _native.gather(src, np.array([0, 5]), np.array([2, 3]), dest, np.array([7, 0]))
    assert dest.tolist() == [5, 6, 7, 0, 0, 0, 0, 0, 1, 0]
    with pytest.raises(ValueError, match="outside"):
        _native.gather(src, np.array([8]), np.array([3]), dest, np.array([0]))
    with pytest.raises(ValueError, match="outside"):
        _native.gather(src, np.array([0]), np.array([3]), dest, np.array([-1]))


# ---------------------------------------------------------------------------- arrays

SHAPE = (70, 64, 40)
INNER = (8, 8, 4)  # 512 bytes of u2; 4 x 2 x 10 = 80 inner chunks per shard
SHARDS = (32, 16, 40)


COMPRESSORS: dict[str, Any] = {
    "blosc": zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
    "zstd": zarr.codecs.ZstdCodec(level=3),
    "zstd-checksum": zarr.codecs.ZstdCodec(level=1, checksum=True),
}


def _create(
    path: Path, dtype: str, location: str = "end", compressor: str = "blosc", **kw: Any
) -> zarr.Array:
    return zarr.create_array(
        zarr.storage.LocalStore(path),
        shape=SHAPE,
        chunks=INNER,
        shards={"shape": SHARDS, "index_location": location},
        dtype=dtype,
        fill_value=3,
        compressors=COMPRESSORS[compressor],
        **kw,
    )


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "zarr.json"
    }


def _grid_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many boxes ``decode_frames`` / ``encode_rows`` handled (to see the path is taken)."""
    calls = {"decode": 0, "encode": 0}
    dec, enc = blosc_batch.decode_frames, blosc_batch.encode_rows
    zdec = zstd_batch.decode_frames

    def count_dec(*a: Any, **k: Any) -> Any:
        calls["decode"] += 1
        return dec(*a, **k)

    def count_zdec(*a: Any, **k: Any) -> Any:
        calls["decode"] += 1
        return zdec(*a, **k)

    def count_enc(*a: Any, **k: Any) -> Any:
        calls["encode"] += 1
        return enc(*a, **k)

    monkeypatch.setattr(blosc_batch, "decode_frames", count_dec)
    monkeypatch.setattr(zstd_batch, "decode_frames", count_zdec)
    monkeypatch.setattr(blosc_batch, "encode_rows", count_enc)
    return calls


def _data(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(5)
    data = (np.cumsum(rng.integers(-2, 3, SHAPE), axis=2) % 500).astype(dtype)
    data[:, :, 36:] = 3  # the fill value: those inner chunks are left out
    data[0:8, 0:8, 0:4] = 3
    return data


WRITES: list[Any] = [
    np.s_[...],
    np.s_[0:32, 0:16, :],  # one whole shard
    np.s_[32:64, 16:64, 8:40],  # whole inner chunks, part of their shards
    np.s_[3:67, 5:61, 1:39],  # partial inner chunks
    np.s_[64:70, :, :],  # the edge shards
]
READS: list[Any] = [
    np.s_[...],
    np.s_[0:32, 0:16, :],
    np.s_[8:32, 8:16, 4:36],
    np.s_[1:69, 2:63, 5:31],
    np.s_[::-3, ::5, 3],
    np.s_[64:70],
]


@needs_helper
@pytest.mark.parametrize("dtype", ["<u2", "<f8"])
@pytest.mark.parametrize("location", ["end", "start"])
@pytest.mark.parametrize("write_empty", [False, True])
@pytest.mark.parametrize("compressor", list(COMPRESSORS))
def test_grid_writes_and_reads_equal_zarr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: str, location: str,
    write_empty: bool, compressor: str,
) -> None:
    data = _data(dtype)
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "theirs.zarr"
    config = {"write_empty_chunks": write_empty}
    _create(ours, dtype, location, compressor, config=config)
    z = _create(theirs, dtype, location, compressor, config=config)
    calls = _grid_calls(monkeypatch)
    # zstd: numcodecs as the encoder, so that shards can equal zarr's byte for byte.
    settings = cuzarr.Settings(threads=2, zstd_encoder="numcodecs")
    a = cuzarr.open(ours, mode="r+", settings=settings, write_empty_chunks=write_empty)
    for n, sel in enumerate(WRITES):
        value = (data[sel] + n).astype(dtype)
        a[sel] = value
        z[sel] = value
        assert _files(ours) == _files(theirs), sel
    assert (calls["encode"] > 0) == (compressor == "blosc")
    want = z[...]
    for sel in READS:
        np.testing.assert_array_equal(a[sel], want[sel])
        np.testing.assert_array_equal(cuzarr.open(theirs)[sel], want[sel])
    assert calls["decode"] > 0


@needs_helper
@pytest.mark.parametrize("compressor", ["blosc", "zstd"])
def test_same_results_without_the_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compressor: str
) -> None:
    data = _data("<u2")
    for name, on in (("with.zarr", True), ("without.zarr", False)):
        with monkeypatch.context() as m:
            if not on:
                m.setattr(blosc_batch, "available", lambda: False)
                m.setattr(zstd_batch, "available", lambda: False)
            calls = _grid_calls(m)
            _create(tmp_path / name, "<u2", compressor=compressor)
            a = cuzarr.open(tmp_path / name, mode="r+")
            for n, sel in enumerate(WRITES):
                a[sel] = (data[sel] + n).astype("<u2")
            got = [a[sel] for sel in READS]
            assert (calls["encode"] > 0) == (on and compressor == "blosc")
            assert (calls["decode"] > 0) == on
        if on:
            first = got
        else:
            for x, y in zip(first, got, strict=True):
                np.testing.assert_array_equal(x, y)
    assert _files(tmp_path / "with.zarr") == _files(tmp_path / "without.zarr")


@needs_helper
def test_zarr_pipeline_reads_through_the_grid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _data("<u2")
    z = _create(tmp_path / "a.zarr", "<u2")
    z[...] = data
    calls = _grid_calls(monkeypatch)
    with use_pipeline("cuzarr"):
        got = zarr.open_array(tmp_path / "a.zarr", mode="r")[...]
    np.testing.assert_array_equal(got, data)
    assert calls["decode"] > 0


@needs_helper
@pytest.mark.parametrize("compressor", ["blosc", "zstd-checksum"])
def test_corrupt_inner_chunk_in_a_grid_is_named(tmp_path: Path, compressor: str) -> None:
    z = _create(tmp_path / "a.zarr", "<u2", compressor=compressor)
    z[...] = _data("<u2")
    path = tmp_path / "a.zarr" / "c" / "0" / "1" / "0"
    shard = bytearray(path.read_bytes())
    index = np.frombuffer(bytes(shard[-(80 * 16 + 4) : -4]), "<u8").reshape(4, 2, 10, 2)
    start, length = (int(x) for x in index[1, 0, 3])  # inner chunk (1, 0, 3)
    shard[start + 20 : start + length] = b"\xff" * (length - 20)
    path.write_bytes(bytes(shard))
    a = cuzarr.open(tmp_path / "a.zarr")
    with pytest.raises(CorruptChunkError) as info:
        a[0:32, 16:32, :]
    assert "c/0/1/0[inner chunk (1, 0, 3)]" in str(info.value)


@needs_helper
def test_grid_is_not_taken_for_other_chains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gzip, and zstd after a crc32c checksum: the per-chunk path, and zarr's values."""
    data = _data("<u2")
    backend = cpu_backend.CpuBackend()
    for name, compressors in (
        ("gzip", zarr.codecs.GzipCodec(level=1)),
        ("crc", (zarr.codecs.ZstdCodec(level=1), zarr.codecs.Crc32cCodec())),
    ):
        z = zarr.create_array(
            zarr.storage.LocalStore(tmp_path / name), shape=SHAPE, chunks=INNER,
            shards=SHARDS, dtype="<u2", fill_value=3, compressors=compressors,
        )
        z[...] = data
        a = cuzarr.open(tmp_path / name)
        codec = a._engine._ctx.sharding.inner
        assert codec.blosc_params is None
        assert backend.encode_grid(codec, np.zeros(SHARDS, "<u2"), 3, False, 2) is None
        calls = _grid_calls(monkeypatch)
        np.testing.assert_array_equal(a[...], data)
        assert calls == {"decode": 0, "encode": 0}


@needs_helper
def test_assemble_grid_equals_assemble_with_a_zero_length_inner_chunk(tmp_path: Path) -> None:
    """An old inner chunk of 0 bytes (another writer's) is kept by both builders alike."""
    _create(tmp_path / "a.zarr", "<u2")
    sh = cuzarr.open(tmp_path / "a.zarr")._engine._ctx.sharding
    rng = np.random.default_rng(1)
    blobs = {i: rng.integers(0, 255, 20 + i, dtype=np.uint8) for i in range(0, sh.n_inner, 3)}
    blobs[3] = np.zeros(0, np.uint8)  # present, empty
    old = sh.split(sh.assemble(blobs))
    flat = np.array([1, 6, 7], np.intp)
    rows = np.zeros((3, 40), np.uint8)
    rows[:, :5] = np.arange(15, dtype=np.uint8).reshape(3, 5)
    sizes = np.array([5, 0, 5], np.int64)  # inner chunk 6 becomes empty
    want = dict(blobs)
    want.pop(6)
    want[1], want[7] = rows[0, :5], rows[2, :5]
    got = sh.assemble_grid(old, flat, rows, sizes)
    assert got is not None
    assert bytes(got) == bytes(sh.assemble(want))
