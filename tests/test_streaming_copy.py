"""Large chunks copied into the output with streaming stores (``_native.copy_array``, and
for zstd chunks of local files the batch helper's ``zstd_batch.read_boxes``).

The copy must write exactly what NumPy's ``dest[...] = src`` writes, for every layout (rows
shorter and longer than a cache line, unaligned destinations, negative and element strides),
touch nothing outside the destination, and refuse what it cannot copy. The engine streams
only chunks of ``STREAM_PLACE_MIN`` bytes or more, only into rows of ``STREAM_ROW_MIN`` bytes
or more, only into regions spanning ``STREAM_SPAN_MIN`` bytes or more, and only into the
explicit API's outputs (the caller's or its own, which start on a cache line) and zarr's where
they are cuzarr's ``AlignedNDBuffer`` (``cuzarr.configure``), not zarr's ``np.empty`` ones.
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


@pytest.mark.parametrize("row", [64, 100, 127, 128, 129, 200])
@pytest.mark.parametrize("offset", [0, 1, 3, 8, 15, 16, 17, 33, 48, 63])
def test_unaligned_destinations(offset: int, row: int) -> None:
    # Rows starting anywhere in a cache line, of one line, less than two, and more: the
    # partial lines at either end are copied by memcpy, the whole ones streamed.
    src = _source((6, row), "u1")
    big = cpu_backend.empty_aligned((8 * 256,), "u1")  # both start on a line
    big[...] = 0xA5
    want = cpu_backend.empty_aligned((8 * 256,), "u1")
    want[...] = big
    region = (slice(offset + 64, offset + 64 + 6 * 256),)
    want[region].reshape(6, 256)[:, :row] = src
    dest = big[region].reshape(6, 256)[:, :row]
    assert dest.ctypes.data % 64 == offset
    assert _native.copy_array(dest, src, streaming=True)
    np.testing.assert_array_equal(big, want)  # the region, and nothing outside it


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


def _stored(path: Path, data: np.ndarray, chunks: tuple[int, ...], compressors: Any) -> None:
    """``data`` as a new zarr array at ``path`` (fill value 0), written by zarr's pipeline."""
    z = zarr.create_array(
        zarr.storage.LocalStore(path), shape=data.shape, chunks=chunks, dtype=data.dtype,
        compressors=compressors, fill_value=0,
    )
    with use_pipeline("zarr"):
        z[...] = data


def _array(path: Path, compressors: Any) -> np.ndarray:
    # float32 chunks of 256 x 256: 256 KiB, the smallest chunk streamed, in rows 18 KiB apart:
    # a chunk's region of the whole array spans 4.5 MiB, more than the bound.
    data = _source((512, 4608), "<f4", seed=3)
    data[np.isnan(data)] = 0
    _stored(path, data, (256, 256), compressors)
    assert cpu_backend.STREAM_PLACE_MIN == 256 * 256 * 4
    assert cpu_backend.STREAM_ROW_MIN <= 256 * 4  # rows of 1 KiB: streamed
    assert 255 * 4608 * 4 + 1024 >= cpu_backend.STREAM_SPAN_MIN > 256 * 512 * 4
    return data


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[int, ...], bool]]:
    """Record ``(shape, streamed)`` of every streamed copy the engine asks for.

    Chunks placed from Python go through ``copy_array`` (asked for only where the rule says
    stream); zstd chunks of local files are placed by ``zstd_batch.read_boxes``, whose helper
    streams a box's rows where it is asked to and they are ``STREAM_ROW_MIN`` bytes or longer.
    """
    calls: list[tuple[tuple[int, ...], bool]] = []
    real = _native.copy_array
    real_boxes = cpu_backend.zstd_batch.read_boxes

    def spy(dest: np.ndarray, src: np.ndarray, *, streaming: bool) -> bool:
        done = real(dest, src, streaming=streaming)
        calls.append((src.shape, streaming and done))
        return done

    def boxes_spy(
        paths: Any, cap: int, shape: Any, itemsize: int, boxes: np.ndarray, *args: Any,
        streaming: bool = False,
    ) -> Any:
        status = real_boxes(paths, cap, shape, itemsize, boxes, *args, streaming=streaming)
        for i in np.flatnonzero(status == 1):
            extent = tuple(int(x) for x in boxes[i, 2])
            if streaming and extent[-1] * itemsize >= cpu_backend.STREAM_ROW_MIN:
                calls.append((extent, True))
        return status

    monkeypatch.setattr(_native, "copy_array", spy)
    monkeypatch.setattr(cpu_backend.zstd_batch, "read_boxes", boxes_spy)
    return calls


@pytest.mark.parametrize("compressors", [zarr.codecs.ZstdCodec(level=1), None])
def test_large_outputs_are_streamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compressors: Any
) -> None:
    data = _array(tmp_path / "a.zarr", compressors)
    calls = _spy(monkeypatch)
    a = cuzarr.open(str(tmp_path / "a.zarr"), "r")
    chunks = [(slice(i, i + 256), slice(j, j + 256)) for i in (0, 256) for j in range(0, 4608, 256)]
    streamed = [((256, 256), True)] * len(chunks)
    out = np.full(data.shape, -1, "<f4")
    for region in chunks:  # chunk by chunk into a caller's array
        a.read(region, out=out[region])
    np.testing.assert_array_equal(out, data)
    assert calls == streamed

    calls.clear()
    got = a[...]  # into memory the read allocated: cache-line aligned, streamed too
    np.testing.assert_array_equal(got, data)
    assert got.ctypes.data % cpu_backend.ALIGNMENT == 0
    assert calls == streamed

    calls.clear()
    out[...] = -1
    a.read(..., out=out)  # the whole array into a caller's array
    np.testing.assert_array_equal(out, data)
    assert calls == streamed

    calls.clear()
    mapped = np.memmap(tmp_path / "out.f4", dtype="<f4", mode="w+", shape=data.shape)
    for region in chunks:  # chunk by chunk into a caller's file-backed array
        a.read(region, out=mapped[region])
    mapped.flush()
    np.testing.assert_array_equal(np.fromfile(tmp_path / "out.f4", "<f4").reshape(data.shape), data)
    assert calls == streamed
    del mapped

    calls.clear()
    with use_pipeline("cuzarr"):  # cuzarr.configure: zarr's output is cuzarr's aligned buffer
        z = zarr.open_array(zarr.storage.LocalStore(tmp_path / "a.zarr"), mode="r")
        got = z[...]
    np.testing.assert_array_equal(got, data)
    assert got.ctypes.data % cpu_backend.ALIGNMENT == 0
    assert calls == streamed

    calls.clear()  # only the pipeline set: zarr's own np.empty output, not streamed
    with zarr.config.set({"codec_pipeline.path": "cuzarr.Pipeline"}):
        assert zarr.config.get("ndbuffer") == "zarr.buffer.cpu.NDBuffer"
        z = zarr.open_array(zarr.storage.LocalStore(tmp_path / "a.zarr"), mode="r")
        np.testing.assert_array_equal(z[...], data)
    assert calls == []


@pytest.mark.parametrize("compressors", [zarr.codecs.ZstdCodec(level=1), None])
def test_small_outputs_are_copied_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compressors: Any
) -> None:
    data = _array(tmp_path / "a.zarr", compressors)
    calls = _spy(monkeypatch)
    a = cuzarr.open(str(tmp_path / "a.zarr"), "r")
    two = (slice(0, 256), slice(512, 1024))  # two whole chunks: 512 KiB, spans less
    np.testing.assert_array_equal(a[two], data[two])
    out = np.full((256, 512), -1, "<f4")
    a.read(two, out=out)
    np.testing.assert_array_equal(out, data[two])
    small = np.full((100, 300), -1, "<f4")  # parts of chunks
    a.read((slice(200, 300), slice(100, 400)), out=small)
    np.testing.assert_array_equal(small, data[200:300, 100:400])
    assert calls == []


def test_rows_shorter_than_the_bound_are_not_streamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # uint8 chunks of 512 x 16 x 32 (256 KiB) in rows of 32 bytes: large, but no row holds a
    # whole cache line. (A smaller span bound keeps the array small.)
    monkeypatch.setattr(cpu_backend, "STREAM_SPAN_MIN", 64 * 1024)
    data = _source((512, 32, 128), "u1", seed=5)
    _stored(tmp_path / "s.zarr", data, (512, 16, 32), zarr.codecs.ZstdCodec(level=1))
    calls = _spy(monkeypatch)
    a = cuzarr.open(str(tmp_path / "s.zarr"), "r")
    out = np.full(data.shape, 7, "u1")
    a.read(..., out=out)
    np.testing.assert_array_equal(out, data)
    assert calls == []
    # The same chunks in rows of 64 bytes are streamed.
    wide = _source((512, 16, 256), "u1", seed=6)
    _stored(tmp_path / "w.zarr", wide, (512, 8, 64), zarr.codecs.ZstdCodec(level=1))
    out = np.full(wide.shape, 7, "u1")
    cuzarr.open(str(tmp_path / "w.zarr"), "r").read(..., out=out)
    np.testing.assert_array_equal(out, wide)
    assert calls == [((512, 8, 64), True)] * 8


def test_the_streaming_rule() -> None:
    big = np.zeros(cpu_backend.STREAM_SPAN_MIN // 8 + 64, "<u8")
    rows = big[: cpu_backend.STREAM_SPAN_MIN // 8].reshape(-1, 8)  # rows of 64 bytes
    assert rows.nbytes == cpu_backend.STREAM_SPAN_MIN
    assert cpu_backend.streams(rows)
    assert cpu_backend.streams(rows[::-1])  # the span, whichever way the rows run
    assert not cpu_backend.streams(rows[1:])  # spans 64 bytes less
    assert not cpu_backend.streams(rows[:, 1:])  # rows of 56 bytes
    assert not cpu_backend.streams(rows[:, ::2])  # rows not contiguous
    assert not cpu_backend.streams(big.reshape(-1, 8)[:8])  # a short region
    assert cpu_backend.streams(big.reshape(-1, 8)[::2][:, :8])  # rows apart, span counts
    assert not cpu_backend.streams(np.zeros((16, 2 * cpu_backend.STREAM_SPAN_MIN)).T)
    assert not cpu_backend.streams(np.zeros(()))


def test_configure_switches_zarrs_cpu_buffers_and_restores_them(tmp_path: Path) -> None:
    import zarr.registry

    from cuzarr.zarr_buffers import ALIGNED_MIN_BYTES, ALIGNED_NDBUFFER, AlignedNDBuffer

    default = "zarr.buffer.cpu.NDBuffer"
    assert zarr.config.get("ndbuffer") == default
    data = _source((3, 700, 1100), "<u2", seed=9)  # 4.6 MB: aligned whole, not in part
    assert data.nbytes >= ALIGNED_MIN_BYTES > data[0].nbytes
    z = zarr.create_array(
        zarr.storage.LocalStore(tmp_path / "b.zarr"), shape=data.shape, chunks=(2, 320, 320),
        dtype="<u2", fill_value=0,
    )
    z[...] = data
    with cuzarr.configure(strict=True):
        assert zarr.config.get("ndbuffer") == ALIGNED_NDBUFFER
        assert zarr.registry.get_ndbuffer_class() is AlignedNDBuffer
        with cuzarr.configure(threads=1):  # nested: unchanged, and back to it after
            assert zarr.config.get("ndbuffer") == ALIGNED_NDBUFFER
        assert zarr.config.get("ndbuffer") == ALIGNED_NDBUFFER
        a = zarr.open_array(zarr.storage.LocalStore(tmp_path / "b.zarr"), mode="r")
        whole = a[...]
        np.testing.assert_array_equal(whole, data)
        assert whole.ctypes.data % cpu_backend.ALIGNMENT == 0
        assert not whole.flags.owndata  # a view into a larger allocation
        for sel in [(1, slice(3, 600), slice(None, None, 7)), (slice(None), 5)]:
            got = a[sel]  # small outputs: zarr's own arrays
            np.testing.assert_array_equal(got, data[sel])
            assert got.flags.owndata
        np.testing.assert_array_equal(a.oindex[[0, 2], :, [1, 49]], data[[0, 2]][:, :, [1, 49]])
    assert zarr.config.get("ndbuffer") == default  # restored on exit
    # A user's own buffer class is left alone.
    with zarr.config.set({"ndbuffer": "some.other.NDBuffer"}), cuzarr.configure():
        assert zarr.config.get("ndbuffer") == "some.other.NDBuffer"


@pytest.mark.parametrize("dtype", ["<u2", ">f8", "M8[s]", "<m8[2ms]", "S3", "U2", "O", "T"])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("rows", [5, 6000])
def test_aligned_buffers_match_zarrs(dtype: str, order: str, rows: int) -> None:
    from zarr.buffer.cpu import NDBuffer

    from cuzarr.zarr_buffers import ALIGNED_MIN_BYTES, AlignedNDBuffer

    dt = np.dtypes.StringDType() if dtype == "T" else np.dtype(dtype)
    ours = AlignedNDBuffer.empty((rows, 200), dt, order).as_numpy_array()
    theirs = NDBuffer.empty((rows, 200), dt, order).as_numpy_array()
    assert (ours.shape, ours.dtype, ours.strides) == (theirs.shape, theirs.dtype, theirs.strides)
    assert ours.flags.writeable and ours.flags.c_contiguous == (order == "C")
    large = ours.nbytes >= ALIGNED_MIN_BYTES
    assert large == (rows == 6000 and dt.itemsize >= 4)
    if large and order == "C" and dt.kind in "uifSU":
        assert ours.ctypes.data % cpu_backend.ALIGNMENT == 0
    else:
        assert ours.flags.owndata == theirs.flags.owndata  # zarr's own array


def test_zarrs_environment_selects_the_aligned_buffer(tmp_path: Path) -> None:
    # The entry point (group zarr.ndbuffer) lets ZARR_NDBUFFER name the class in a fresh
    # process, as worker processes configured by environment get it.
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "ZARR_NDBUFFER": "cuzarr.zarr_buffers.AlignedNDBuffer",
        "ZARR_CODEC_PIPELINE__PATH": "cuzarr.Pipeline",
    }
    path = str(tmp_path / "e.zarr")
    code = (
        "import numpy as np, zarr\n"
        f"z = zarr.create_array({path!r}, shape=(1024, 1024), chunks=(256, 256), dtype='<u4')\n"
        "z[...] = np.arange(1024 * 1024, dtype='<u4').reshape(1024, 1024)\n"
        f"got = zarr.open_array({path!r}, mode='r')[...]\n"
        "assert (got == np.arange(1024 * 1024).reshape(1024, 1024)).all()\n"
        "print(zarr.registry.get_ndbuffer_class().__name__, got.ctypes.data % 64)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["AlignedNDBuffer", "0"]


def test_nested_shards_under_the_aligned_buffer(tmp_path: Path) -> None:
    # Nested shards are the engine's: zarr's sharding (which compares prototypes within
    # shards) does not run, and large reads land aligned.
    from zarr.codecs import BytesCodec, ShardingCodec

    data = _source((1024, 2048), "<u2", seed=4)
    inner = ShardingCodec(chunk_shape=(64, 64), codecs=[BytesCodec()])
    with cuzarr.configure(strict=True):
        z = zarr.create_array(
            str(tmp_path / "n.zarr"), shape=data.shape, chunks=(512, 1024), dtype="<u2",
            serializer=ShardingCodec(chunk_shape=(128, 256), codecs=[inner]), compressors=None,
        )
        z[...] = data
        got = z[...]
        np.testing.assert_array_equal(got, data)
        assert got.ctypes.data % cpu_backend.ALIGNMENT == 0
        np.testing.assert_array_equal(z.oindex[[1, 900], 3:2000:5], data[[1, 900]][:, 3:2000:5])


def test_nested_shards_left_to_zarr_under_the_aligned_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An array cuzarr leaves to zarr (strings) in nested shards: zarr's sharding asks its
    # in-shard byte getters for a nested shard's index with its fixed CPU prototype, which
    # they refuse once zarr's ndbuffer is another class; cuzarr's fallback hands them the
    # configured one (_zarr_compat.in_shard_batch), so reads and writes work as with zarr's
    # own buffers.
    from zarr.codecs import ShardingCodec, VLenUTF8Codec

    from cuzarr import _zarr_compat

    data = np.array([f"s{i}" * (i % 4) for i in range(64)], dtype=object).reshape(8, 8)
    nested = ShardingCodec(
        chunk_shape=(4, 4), codecs=[ShardingCodec(chunk_shape=(2, 2), codecs=[VLenUTF8Codec()])]
    )

    def run(name: str) -> None:
        z = zarr.create_array(
            str(tmp_path / name), shape=(8, 8), dtype=str, chunks=(8, 8), serializer=nested,
            compressors=None,
        )
        z[...] = data
        z[1:3, 2:7] = "x"
        want = data.copy()
        want[1:3, 2:7] = "x"
        np.testing.assert_array_equal(z[1:6, 3:5], want[1:6, 3:5])  # partial: the index read
        np.testing.assert_array_equal(z[...], want)

    with cuzarr.configure():
        assert zarr.config.get("ndbuffer") == "cuzarr.zarr_buffers.AlignedNDBuffer"
        run("s.zarr")
        # Without the wrapper zarr's own check refuses: what the wrapper is for.
        monkeypatch.setattr(_zarr_compat, "in_shard_batch", lambda batch: batch)
        with pytest.raises(ValueError, match="Non-default buffer prototypes"):
            run("t.zarr")
