"""Reads of larger zstd chunks (over ``ZSTD_BATCH_MAX_CHUNK``) of local files, placed from C.

The CPU backend reads, decodes and places them in calls of about ``PLACED_BATCH_BYTES``
(``Batching.placed``): whole chunks over contiguous regions of the output decoded straight
into it, other boxes copied, with streaming stores into large outputs. The values must equal
zarr-python's for every selection and output; what the C calls leave (a bad chunk, a dropped
axis) is read the general way, which names what is wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.backends import cpu as cpu_backend
from cuzarr.errors import CorruptChunkError
from cuzarr.testing import assert_same_array, use_pipeline
from read_boxes_calls import record_read_boxes

C_BATCHES = cpu_backend.zstd_batch.available()

#: (shape, chunks): chunks of 256-384 KiB of ``u2`` (over ZSTD_BATCH_MAX_CHUNK, at least
#: STREAM_PLACE_MIN); whole outputs of 6 MiB (streamed: over STREAM_SPAN_MIN) and 2 MiB (not).
LAYOUTS = {
    "contiguous": ((24, 256, 512), (1, 256, 512)),  # each chunk a contiguous run of the output
    "boxes": ((24, 256, 512), (4, 128, 256)),  # each chunk 4 x 128 rows of 512 bytes
    "edges": ((7, 300, 500), (3, 128, 512)),  # partial chunks at every far edge
}


def _store(tmp_path: Path, layout: str) -> tuple[Path, np.ndarray]:
    shape, chunks = LAYOUTS[layout]
    assert 2 * np.prod(chunks) > cpu_backend.ZSTD_BATCH_MAX_CHUNK
    rng = np.random.default_rng(5)
    data = rng.integers(0, 1000, shape).astype("u2")
    data[-1] = 9  # the fill value: chunks that are all fill are not stored
    path = tmp_path / "big.zarr"
    z = zarr.create_array(
        zarr.storage.LocalStore(path), shape=shape, chunks=chunks, dtype="u2", fill_value=9,
        compressors=zarr.codecs.ZstdCodec(level=1),
    )
    with use_pipeline("zarr"):
        z[...] = data
    return path, data


SELECTIONS: list[Any] = [
    np.s_[...],
    np.s_[1:11, 5:250, 3:509],
    np.s_[::2, ::3, 1::4],
    np.s_[2:9, 100:200, :],
    np.s_[4, :, :],  # a dropped axis: the general path
    np.s_[:, 7, 11:300],
]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_large_chunks_equal_zarr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    path, data = _store(tmp_path, layout)
    a = cuzarr.open(path)
    assert isinstance(a, cuzarr.Array)
    seen = record_read_boxes(monkeypatch)
    for selection in SELECTIONS:
        want = data[selection]
        assert_same_array(a[selection], want, msg=repr(selection))
        for out in (np.full(want.shape, 12345, "u2"), np.full(want.shape, 12345, "u2", order="F")):
            assert a.read(selection, out=out) is out
            assert_same_array(out, want, msg=f"{selection!r} into {out.strides}")
    with use_pipeline("cuzarr"):
        z = zarr.open_array(zarr.storage.LocalStore(path), mode="r")
        for selection in SELECTIONS:
            assert_same_array(z[selection], data[selection], msg=repr(selection))
    if not C_BATCHES:
        assert seen.calls == []
        return
    assert sum(seen.placed) > 0
    # Whole reads ask in calls of placed_batch_size chunks (the last one may be short).
    seen.calls.clear()
    a[...]
    shape, chunks = LAYOUTS[layout]
    n = int(np.prod([-(-s // c) for s, c in zip(shape, chunks, strict=True)]))
    size = cpu_backend.placed_batch_size(n, 2 * int(np.prod(chunks)), a.settings.n_threads)
    assert max(seen.asked) == size


def test_streaming_only_into_large_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not C_BATCHES:
        pytest.skip("the batch helper is not built")
    path, data = _store(tmp_path, "boxes")
    a = cuzarr.open(path)
    assert isinstance(a, cuzarr.Array)
    seen = record_read_boxes(monkeypatch)
    assert_same_array(a[...], data)  # 6 MiB: streamed
    assert seen.calls and all(seen.streaming)
    seen.calls.clear()
    assert_same_array(a[0:4, 0:128, 0:512], data[0:4, 0:128, 0:512])  # 512 KiB: not
    assert seen.calls and not any(seen.streaming)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "too-long"])
def test_a_bad_large_chunk_is_named(tmp_path: Path, damage: str) -> None:
    path, data = _store(tmp_path, "boxes")
    victim = path / "c" / "1" / "1" / "0"
    raw = victim.read_bytes()
    bad = {
        "garbage": bytes(len(raw)),
        "truncated": raw[: len(raw) // 2],
        "empty": b"",
        "too-long": raw + bytes(2 * 4 * 128 * 256 + 1024),  # longer than any frame of the chunk
    }[damage]
    victim.write_bytes(bad)
    a = cuzarr.open(path)
    assert isinstance(a, cuzarr.Array)
    # Chunks the C calls place stay right; the bad one is read the general way and named.
    assert_same_array(a[0:3], data[0:3])
    with pytest.raises(CorruptChunkError, match=r"c/1/1/0"):
        a[...]


def test_missing_large_chunks_read_as_the_fill_value(tmp_path: Path) -> None:
    path, data = _store(tmp_path, "contiguous")
    for k in (0, 5):
        (path / "c" / str(k) / "0" / "0").unlink()
        data[k] = 9
    a = cuzarr.open(path)
    assert isinstance(a, cuzarr.Array)
    out = np.full(data.shape, 12345, "u2")
    assert_same_array(a.read(..., out=out), data)


@pytest.mark.parametrize("threads", [1, 2, 8])
def test_placed_batch_size_keeps_every_thread_busy(threads: int) -> None:
    for nbytes in (128 * 1024 + 2, 512 * 1024, 1 << 20, 3 << 20, 64 << 20):
        by_bytes = max(1, cpu_backend.PLACED_BATCH_BYTES // nbytes)
        for n in range(2, 3000, 7):
            size = cpu_backend.placed_batch_size(n, nbytes, threads)
            share = -(-n // (2 * threads))  # chunks a call with two calls per thread
            # Within the bytes' bound, no call holds more than that share (every thread
            # has work until the end), and calls are as large as those two bounds allow.
            assert 1 <= size <= by_bytes and size <= share
            assert size == min(by_bytes, share)
