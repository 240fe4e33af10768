"""Large chunks copied into a caller's output with streaming stores (``_native.copy_array``).

The copy must write exactly what NumPy's ``dest[...] = src`` writes, for every layout (rows
shorter and longer than a cache line, unaligned destinations, negative and element strides),
touch nothing outside the destination, and refuse what it cannot copy. The engine streams
only into memory the caller handed in (``out=``), only chunks of ``STREAM_PLACE_MIN`` bytes
or more, and only into rows of ``STREAM_ROW_MIN`` bytes or more.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr import _native
from cuzarr.backends import cpu as cpu_backend
from cuzarr.testing import use_pipeline

pytestmark = pytest.mark.skipif(
    _native.helper() is None, reason=f"batch helper not built: {_native.unavailable_reason()}"
)


def _source(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def _check(dest_of: Any, src: np.ndarray, streaming: bool, size: int = 0) -> None:
    """Copy ``src`` into ``dest_of(big)`` of a sentinel-filled buffer; compare with NumPy's."""
    big = np.full(max(size, 4 * src.nbytes) + 256, 0xA5, np.uint8)
    want = big.copy()
    dest_of(want)[...] = src
    assert _native.copy_array(dest_of(big), src, streaming=streaming)
    np.testing.assert_array_equal(big, want)  # the region, and nothing outside it


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("dtype", "row"),
    [("u1", 13), ("u1", 64), ("<u2", 64), ("<u2", 65), (">f4", 40), ("<f8", 7), ("c16", 9)],
)
def test_copy_into_a_region_of_a_larger_array(dtype: str, row: int, streaming: bool) -> None:
    # Row bytes from 9 to 144: shorter than a streamed run, exactly one line, odd tails.
    src = _source((3, 5, row), dtype)
    item = np.dtype(dtype).itemsize
    size = 4 * 10 * 2 * row * item

    def region(buf: np.ndarray) -> np.ndarray:
        arr = buf[:size].view(dtype).reshape(4, 10, 2 * row)
        return arr[1:, 2:7, row // 2 : row // 2 + row]

    _check(region, src, streaming, size)
    assert region(np.zeros(size, np.uint8)).strides[-1] == item


@pytest.mark.parametrize("offset", [1, 3, 8, 15, 16, 17])
def test_unaligned_destinations(offset: int) -> None:
    src = _source((6, 200), "u1")

    def region(buf: np.ndarray) -> np.ndarray:
        return buf[offset : offset + 6 * 256].reshape(6, 256)[:, 5:205]

    _check(region, src, True)


def test_negative_and_element_strides() -> None:
    src = _source((8, 12, 40), "<u2")

    def reversed_rows(buf: np.ndarray) -> np.ndarray:
        return buf[: src.nbytes].view("<u2").reshape(src.shape)[::-1, :, ::-1]

    def transposed(buf: np.ndarray) -> np.ndarray:
        return buf[: src.nbytes].view("<u2").reshape(40, 12, 8).T  # last axis not contiguous

    _check(reversed_rows, src, True)
    _check(transposed, src, True)
    # A strided source (every other element) too.
    wide = _source((8, 12, 80), "<u2")[:, :, ::2]
    _check(lambda buf: buf[: wide.nbytes].view("<u2").reshape(wide.shape), wide, True)


def test_empty_arrays_copy_nothing() -> None:
    src = np.zeros((0, 4), "<f4")
    dest = np.ones((0, 4), "<f4")
    assert _native.copy_array(dest, src, streaming=True)


def test_refused_copies_leave_the_destination_alone() -> None:
    src = _source((4, 32), "<u2")
    dest = np.zeros((4, 32), "<u2")
    assert not _native.copy_array(dest, src.astype(">u2"), streaming=True)  # byte order
    assert not _native.copy_array(dest, src.astype("<i2"), streaming=True)  # data type
    assert not _native.copy_array(dest[:, :16], src, streaming=True)  # shape
    assert not _native.copy_array(src[:, 1:], src[:, :-1], streaming=True)  # overlap
    frozen = np.zeros((4, 32), "<u2")
    frozen.flags.writeable = False
    assert not _native.copy_array(frozen, src, streaming=True)
    objects = np.empty((2,), object)
    assert not _native.copy_array(objects, np.array([1, "a"], object), streaming=True)

    class Sub(np.ndarray):  # a subclass may override assignment: left to NumPy
        pass

    sub = np.zeros((4, 32), "<u2").view(Sub)
    assert not _native.copy_array(sub, src, streaming=True)
    assert not dest.any() and not frozen.any() and not sub.any()


def test_copy_into_a_memmap(tmp_path: Path) -> None:
    src = _source((64, 300), "<u4", seed=7)
    mm = np.memmap(tmp_path / "out.bin", dtype="<u4", mode="w+", shape=(128, 600))
    assert _native.copy_array(mm[32:96, 100:400], src, streaming=True)
    mm.flush()
    want = np.zeros((128, 600), "<u4")
    want[32:96, 100:400] = src
    np.testing.assert_array_equal(np.fromfile(tmp_path / "out.bin", "<u4").reshape(128, 600), want)


# ------------------------------------------------------------------------ engine


def _array(path: Path, compressors: Any) -> np.ndarray:
    # float32 chunks of 256 x 256: 256 KiB, the smallest chunk streamed.
    data = _source((512, 768), "<f4", seed=3)
    data[np.isnan(data)] = 0
    z = zarr.create_array(
        zarr.storage.LocalStore(path), shape=data.shape, chunks=(256, 256), dtype="<f4",
        compressors=compressors, fill_value=0,
    )
    with use_pipeline("zarr"):
        z[...] = data
    assert cpu_backend.STREAM_PLACE_MIN == 256 * 256 * 4
    assert cpu_backend.STREAM_ROW_MIN <= 256 * 4  # rows of 1 KiB: streamed
    return data


@pytest.mark.parametrize("compressors", [zarr.codecs.ZstdCodec(level=1), None])
def test_only_a_callers_output_is_streamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compressors: Any
) -> None:
    data = _array(tmp_path / "a.zarr", compressors)
    calls: list[tuple[tuple[int, ...], bool]] = []  # (shape, streamed): asked for and done
    real = _native.copy_array

    def spy(dest: np.ndarray, src: np.ndarray, *, streaming: bool) -> bool:
        done = real(dest, src, streaming=streaming)
        calls.append((src.shape, streaming and done))
        return done

    monkeypatch.setattr(_native, "copy_array", spy)
    a = cuzarr.open(str(tmp_path / "a.zarr"), "r")
    out = np.full(data.shape, -1, "<f4")
    for i in range(0, 512, 256):  # chunk by chunk into a caller's array
        for j in range(0, 768, 256):
            a.read((slice(i, i + 256), slice(j, j + 256)), out=out[i : i + 256, j : j + 256])
    np.testing.assert_array_equal(out, data)
    assert calls == [((256, 256), True)] * 6

    calls.clear()
    np.testing.assert_array_equal(a[...], data)  # into memory the read allocated
    assert calls == []

    calls.clear()
    out[...] = -1
    a.read(..., out=out)  # the whole array into a caller's array
    np.testing.assert_array_equal(out, data)
    assert calls == [((256, 256), True)] * 6

    calls.clear()
    mapped = np.memmap(tmp_path / "out.f4", dtype="<f4", mode="w+", shape=data.shape)
    for i in range(0, 512, 256):  # chunk by chunk into a caller's file-backed array
        for j in range(0, 768, 256):
            a.read((slice(i, i + 256), slice(j, j + 256)), out=mapped[i : i + 256, j : j + 256])
    mapped.flush()
    np.testing.assert_array_equal(np.fromfile(tmp_path / "out.f4", "<f4").reshape(data.shape), data)
    assert calls == [((256, 256), True)] * 6
    del mapped

    calls.clear()
    small = np.full((100, 300), -1, "<f4")  # parts of chunks: smaller than the bound
    a.read((slice(200, 300), slice(100, 400)), out=small)
    np.testing.assert_array_equal(small, data[200:300, 100:400])
    assert calls == []


def test_large_chunks_in_short_rows_are_not_streamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # uint16 chunks of 64^3 (512 KiB) in rows of 128 bytes: large, but rows short.
    data = _source((128, 64, 128), "<u2", seed=5)
    z = zarr.create_array(
        zarr.storage.LocalStore(tmp_path / "s.zarr"), shape=data.shape, chunks=(64, 64, 64),
        dtype="<u2", compressors=zarr.codecs.ZstdCodec(level=1), fill_value=0,
    )
    with use_pipeline("zarr"):
        z[...] = data
    streamed: list[tuple[int, ...]] = []
    real = _native.copy_array

    def spy(dest: np.ndarray, src: np.ndarray, *, streaming: bool) -> bool:
        done = real(dest, src, streaming=streaming)
        if streaming and done:
            streamed.append(src.shape)
        return done

    monkeypatch.setattr(_native, "copy_array", spy)
    a = cuzarr.open(str(tmp_path / "s.zarr"), "r")
    out = np.full(data.shape, 7, "<u2")
    for i in range(0, 128, 64):
        for k in range(0, 128, 64):
            region = (slice(i, i + 64), slice(None), slice(k, k + 64))
            a.read(region, out=out[region])
    np.testing.assert_array_equal(out, data)
    assert streamed == []
    # The rule itself: rows of STREAM_ROW_MIN bytes and more, contiguous, are long.
    long_rows = np.zeros((4, cpu_backend.STREAM_ROW_MIN), np.uint8)
    assert cpu_backend._long_rows(long_rows)
    assert not cpu_backend._long_rows(long_rows[:, 1:])
    assert not cpu_backend._long_rows(long_rows[:, ::2])
    assert not cpu_backend._long_rows(np.zeros((4, 2 * cpu_backend.STREAM_ROW_MIN), np.uint8).T)
