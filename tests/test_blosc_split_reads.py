"""One large Blosc chunk read alone, its decoding and copying shared by the helper's threads.

A read of one chunk (chunk by chunk through an array, or any selection inside one chunk) of a
local Blosc array whose compressor is not light is cut into one part per thread along the
box's first axis longer than one element (``cuzarr.backends.placed.read_blosc_one``,
``blosc_batch.read_split``); each thread decodes the blocks its part reads and copies it. The
values must equal zarr-python's for every selection, output layout, shuffle and data type;
what the split does not take (a bad chunk, a dropped axis, a light compressor) is read the
general way, which names what is wrong.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr import _native
from cuzarr.backends import placed
from cuzarr.codecs import blosc_batch
from cuzarr.errors import CorruptChunkError
from cuzarr.testing import assert_same_array, use_pipeline

SPLITS = blosc_batch.available() and blosc_batch._getitem() is not None

#: One chunk of 8 x 96 x 512 ``u2`` (768 KiB, over BLOSC_SPLIT_MIN) per 8 x 96 x 512 block.
SHAPE, CHUNKS = (20, 200, 512), (8, 96, 512)


@pytest.fixture(autouse=True)
def _lend_always() -> Iterator[None]:
    """These tests are about the helpers: they lend them whatever else runs on the machine.

    (The default, ``"idle"`` lending, lends none while other threads keep the CPUs busy:
    tests/test_lending.py.)
    """
    if _native.helper() is None:
        yield
        return
    with _native.lending("always"):
        yield


def _store(
    tmp_path: Path,
    dtype: str = "u2",
    *,
    cname: str = "zstd",
    shuffle: str = "shuffle",
    blocksize: int = 0,
) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(7)
    data = (rng.integers(0, 300, SHAPE) + np.arange(SHAPE[-1]) // 7).astype(dtype)
    path = tmp_path / f"{cname}-{shuffle}-{dtype}-{blocksize}.zarr"
    z = zarr.create_array(
        zarr.storage.LocalStore(path), shape=SHAPE, chunks=CHUNKS, dtype=dtype, fill_value=0,
        compressors=zarr.codecs.BloscCodec(
            cname=cname, clevel=3, shuffle=shuffle, blocksize=blocksize
        ),
    )
    with use_pipeline("zarr"):
        z[...] = data
    assert 8 * 96 * 512 * np.dtype(dtype).itemsize >= placed.BLOSC_SPLIT_MIN
    return path, data


#: Selections inside one chunk (the split) and across several (batched reads, not split).
ONE_CHUNK: list[Any] = [
    np.s_[0:8, 0:96, :],  # the whole first chunk
    np.s_[8:16, 96:192, :],  # a whole inner chunk
    np.s_[1:7, 5:90, 3:509],  # a box inside one
    np.s_[0:8:3, 1:96:5, ::4],  # steps
    np.s_[3:4, 10:11, 7:300],  # one element along the first two axes: cut along the last
    np.s_[16:20, 192:200, :],  # a partial edge chunk
    np.s_[2:3, 0:96, 0:512],  # the split axis is the second
]
SEVERAL: list[Any] = [np.s_[...], np.s_[4:12, 50:150, 100:200]]


def _split_count() -> int:
    return blosc_batch.split_reads()


def _read_unsplit(path: Path, threads: int, selection: Any, want: np.ndarray) -> None:
    """Read ``selection`` of the array at ``path``: ``want``, and no chunk read split."""
    a = cuzarr.open(path, settings=cuzarr.Settings(threads=threads))
    assert isinstance(a, cuzarr.Array)
    before = _split_count()
    assert_same_array(a[selection], want)
    assert _split_count() == before


@pytest.mark.parametrize(
    ("dtype", "shuffle", "blocksize"),
    [("u2", "shuffle", 0), ("f4", "bitshuffle", 0), ("f8", "noshuffle", 0), ("u2", "shuffle", 4096),
     ("i4", "shuffle", 96 * 1024 + 512)],
)
def test_one_chunk_reads_equal_zarr(
    tmp_path: Path, dtype: str, shuffle: str, blocksize: int
) -> None:
    path, data = _store(tmp_path, dtype, shuffle=shuffle, blocksize=blocksize)
    a = cuzarr.open(path, settings=cuzarr.Settings(threads=2))
    assert isinstance(a, cuzarr.Array)
    before = _split_count()
    for selection in ONE_CHUNK + SEVERAL:
        want = data[selection]
        assert_same_array(a[selection], want, msg=repr(selection))
        for out in (np.full(want.shape, 77, dtype), np.full(want.shape, 77, dtype, order="F")):
            assert a.read(selection, out=out) is out
            assert_same_array(out, want, msg=f"{selection!r} into {out.strides}")
        # Into a region of a larger array (strided rows, as chunk by chunk loops write).
        big = np.full((30, 210, 530), 77, dtype)
        region = big[tuple(slice(1, 1 + n) for n in want.shape)] if want.ndim == 3 else None
        if region is not None:
            a.read(selection, out=region)
            assert_same_array(region, want, msg=f"{selection!r} into a region")
    if SPLITS:
        # Each single-chunk selection was read split, once per output tried.
        assert _split_count() - before >= 4 * len(ONE_CHUNK)


def test_chunk_by_chunk_through_zarr_and_one_thread(tmp_path: Path) -> None:
    path, data = _store(tmp_path)
    out = np.zeros(SHAPE, "u2")
    before = _split_count()
    with use_pipeline("cuzarr"):
        z = zarr.open_array(zarr.storage.LocalStore(path), mode="r")
        for i in range(0, SHAPE[0], CHUNKS[0]):
            for j in range(0, SHAPE[1], CHUNKS[1]):
                region = np.s_[i : i + CHUNKS[0], j : j + CHUNKS[1], :]
                out[region] = z[region]
    assert_same_array(out, data)
    if SPLITS:
        assert _split_count() - before == 9
    # One thread: nothing to lend, the general path.
    _read_unsplit(path, 1, np.s_[0:8, 0:96, :], data[0:8, 0:96, :])


def test_light_compressors_are_not_split(tmp_path: Path) -> None:
    path, data = _store(tmp_path, cname="lz4")
    _read_unsplit(path, 2, np.s_[0:8, 0:96, :], data[0:8, 0:96, :])


def test_concurrent_single_chunk_reads(tmp_path: Path) -> None:
    """Calls from several threads at once: one is helped at a time, the others run alone."""
    path, data = _store(tmp_path)
    a = cuzarr.open(path, settings=cuzarr.Settings(threads=2))
    assert isinstance(a, cuzarr.Array)
    errors: list[BaseException] = []

    def reader(k: int) -> None:
        try:
            for r in range(12):
                i = (k + r) % 3 * CHUNKS[0] if (k + r) % 3 < 2 else 16
                sel = np.s_[i : min(i + CHUNKS[0], SHAPE[0]), 96:192, :]
                assert_same_array(a[sel], data[sel])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "short", "cbytes", "nbytes"])
def test_a_bad_chunk_is_named(tmp_path: Path, damage: str) -> None:
    path, data = _store(tmp_path)
    victim = path / "c" / "1" / "1" / "0"
    raw = bytearray(victim.read_bytes())
    if damage == "garbage":
        bad = bytes(len(raw))
    elif damage == "truncated":
        bad = bytes(raw[: len(raw) // 2])
    elif damage == "empty":
        bad = b""
    elif damage == "short":  # shorter than the header
        bad = bytes(raw[:10])
    elif damage == "cbytes":  # the header's compressed size is over the file's
        raw[12:16] = (len(raw) + 8).to_bytes(4, "little")
        bad = bytes(raw)
    else:  # the header's decoded size is not the chunk's
        raw[4:8] = (8 * 96 * 512 * 2 - 2).to_bytes(4, "little")
        bad = bytes(raw)
    victim.write_bytes(bad)
    a = cuzarr.open(path, settings=cuzarr.Settings(threads=2))
    assert isinstance(a, cuzarr.Array)
    # A chunk read first leaves its bytes in the thread's buffer: a short file read after it
    # must not decode them (c-blosc reads as far as the header says).
    assert_same_array(a[0:8, 0:96, :], data[0:8, 0:96, :])
    with pytest.raises(CorruptChunkError, match=r"c/1/1/0"):
        a[8:16, 96:192, :]
    out = np.full((8, 96, 512), 77, "u2")
    with pytest.raises(CorruptChunkError, match=r"c/1/1/0"):
        a.read(np.s_[8:16, 96:192, :], out=out)


def test_a_header_the_split_refuses_is_read_as_zarr_reads_it(tmp_path: Path) -> None:
    """Bytes after the frame (its header's compressed size below the file's): the general read
    ignores them, as numcodecs does; the split takes only frames the size of their file."""
    path, data = _store(tmp_path)
    victim = path / "c" / "1" / "1" / "0"
    victim.write_bytes(victim.read_bytes() + bytes(8))
    with use_pipeline("zarr"):
        want = zarr.open_array(zarr.storage.LocalStore(path), mode="r")[8:16, 96:192, :]
    assert_same_array(want, data[8:16, 96:192, :])
    _read_unsplit(path, 2, np.s_[8:16, 96:192, :], want)


def test_missing_chunk_reads_as_the_fill_value(tmp_path: Path) -> None:
    path, _ = _store(tmp_path)
    (path / "c" / "0" / "1" / "0").unlink()
    a = cuzarr.open(path, settings=cuzarr.Settings(threads=2))
    assert isinstance(a, cuzarr.Array)
    out = np.full((8, 96, 512), 77, "u2")
    assert_same_array(a.read(np.s_[0:8, 96:192, :], out=out), np.zeros((8, 96, 512), "u2"))


@pytest.mark.skipif(not SPLITS, reason="the batch helper or blosc_getitem is missing")
def test_read_split_checks_its_arguments(tmp_path: Path) -> None:
    path, data = _store(tmp_path)
    nbytes = 8 * 96 * 512 * 2
    cap = nbytes + blosc_batch.BLOSC_OVERHEAD + 1
    scratch = np.empty(cap + nbytes, np.uint8)
    out = np.zeros((8, 96, 512), "u2")
    chunk = str(path / "c" / "0" / "0" / "0").encode()
    whole = [0, 0, 0, 0, 0, 0, 8, 96, 512, 1, 1, 1]
    for helpers in (0, 1, 3):
        out[...] = 0
        got = blosc_batch.read_split(
            chunk, cap, CHUNKS, 2, whole, out, scratch, streaming=False, helpers=helpers
        )
        assert got == 1
        assert_same_array(out, data[0:8, 0:96, :])
    outside = [0, 0, 0, 0, 0, 0, 9, 96, 512, 1, 1, 1]
    with pytest.raises(ValueError, match="outside"):
        blosc_batch.read_split(chunk, cap, CHUNKS, 2, outside, out, scratch, streaming=False,
                               helpers=1)
    with pytest.raises(ValueError, match="scratch"):
        blosc_batch.read_split(chunk, cap, CHUNKS, 2, whole, out, scratch[:cap], streaming=False,
                               helpers=1)
    missing = str(path / "c" / "9" / "0" / "0").encode()
    assert blosc_batch.read_split(missing, cap, CHUNKS, 2, whole, out, scratch, streaming=False,
                                  helpers=1) == 0
    # A file of cap bytes or more is left to the caller.
    assert blosc_batch.read_split(chunk, 64, CHUNKS, 2, whole, out, scratch, streaming=False,
                                  helpers=1) == -1


@pytest.mark.skipif(not SPLITS, reason="the batch helper or blosc_getitem is missing")
def test_parts_decode_what_numcodecs_decodes(tmp_path: Path) -> None:
    """Frames of many block sizes and shapes, every box cut in parts: numcodecs' values."""
    rng = np.random.default_rng(3)
    for trial in range(40):
        shape = tuple(int(n) for n in rng.integers(1, 40, 3))
        dtype = np.dtype(rng.choice(["u1", "u2", "f4", "f8"]))
        data = rng.integers(0, 50, shape).astype(dtype)
        blocksize = int(rng.choice([0, 256, 1000 // dtype.itemsize * dtype.itemsize, 4096]))
        codec = numcodecs.Blosc("zstd", 1, int(rng.integers(0, 3)), blocksize)
        frame = codec.encode(data)
        cap = data.nbytes + blosc_batch.BLOSC_OVERHEAD + 1
        scratch = np.empty(cap + data.nbytes, np.uint8)
        start = [int(rng.integers(0, n)) for n in shape]
        step = [int(rng.integers(1, 3)) for _ in shape]
        extent = [
            int(rng.integers(0, -(-(n - s) // k) + 1))
            for n, s, k in zip(shape, start, step, strict=True)
        ]
        box = [*start, 0, 0, 0, *extent, *step]
        out = np.full(extent, 99, dtype)
        sel = tuple(
            slice(s, s + (e - 1) * k + 1 if e else s, k)
            for s, e, k in zip(start, extent, step, strict=True)
        )
        path = tmp_path / f"frame-{trial}"
        path.write_bytes(bytes(frame))
        got = blosc_batch.read_split(
            str(path).encode(), cap, shape, dtype.itemsize, box, out, scratch,
            streaming=bool(trial % 2), helpers=int(trial % 3),
        )
        if got == -1:  # parts that do not start on blosc items: left to the caller
            continue
        assert got == 1
        assert_same_array(out, data[sel], msg=f"trial {trial}: {shape} {dtype} {box}")
