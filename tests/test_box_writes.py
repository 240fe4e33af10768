"""Whole chunks encoded and stored from the value in one call into C (``engine/box_writes``).

Every file the C path writes must be the general path's byte for byte (raw chunks and c-blosc
frames of every shuffle and element size, from values of any strides), chunks equal to the fill
value deleted by zarr's rule, and a chunk the C call could not write written the general way,
which names what failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec
from zarr.storage import LocalStore

import cuzarr
from cuzarr import _native
from cuzarr.codecs import zstd_batch
from cuzarr.engine import box_writes, write
from cuzarr.errors import StoreError
from cuzarr.stores import local
from cuzarr.stores.base import BoxBatch
from cuzarr.stores.cached import CachedChunkStore, ObjectCache
from cuzarr.stores.local import TEMP_SUFFIX, LocalChunkStore
from cuzarr.stores.memory import MemoryChunkStore
from put_boxes_calls import PutBoxesCalls, record_put_boxes

pytestmark = pytest.mark.skipif(
    _native.helper() is None, reason=f"batch helper: {_native.unavailable_reason()}"
)

BLOSC = "zarr.core.codec_pipeline.BatchedCodecPipeline"


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _write_both(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    value: Any,
    chunks: tuple[int, ...],
    *,
    region: Any = Ellipsis,
    shape: tuple[int, ...] | None = None,
    zarr_format: int = 3,
    **codecs: Any,
) -> tuple[dict[str, bytes], dict[str, bytes], list[int]]:
    """Write ``value`` at ``region`` with the C path and with the general one: both stores."""
    out = []
    seen = PutBoxesCalls()
    for name in ("box", "general"):
        root = tmp_path / name
        zarr.create_array(
            LocalStore(root), shape=shape or np.shape(value), chunks=chunks,
            dtype=np.asarray(value).dtype, fill_value=0, zarr_format=zarr_format, **codecs,
        )
        with monkeypatch.context() as m:
            if name == "box":
                seen = record_put_boxes(m)
            else:
                m.setattr(write, "box_plan", lambda *a: None)
            arr = cuzarr.open(root, mode="r+", settings=cuzarr.Settings(threads=2))
            arr[region] = value
        out.append(_files(root))
    return out[0], out[1], seen.sizes


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32", "complex128"])
@pytest.mark.parametrize(
    "shuffle", ["noshuffle", "shuffle", "bitshuffle"]
)
@pytest.mark.parametrize("cname", ["lz4", "zstd"])
def test_blosc_chunks_are_numcodecs_frames_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: str, shuffle: Any, cname: str
) -> None:
    rng = np.random.default_rng(5)
    value = (rng.integers(0, 40, (40, 24, 16)) * 3).astype(dtype)
    box, general, sizes = _write_both(
        tmp_path, monkeypatch, value, (8, 8, 16),
        compressors=BloscCodec(cname=cname, clevel=5, shuffle=shuffle),
    )
    assert sizes and sum(sizes) == 5 * 3
    assert box == general
    with zarr.config.set({"codec_pipeline.path": BLOSC}):
        np.testing.assert_array_equal(zarr.open_array(LocalStore(tmp_path / "box"))[...], value)


@pytest.mark.parametrize("encoder", ["zstandard", "numcodecs"])
@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize(("level", "checksum"), [(3, False), (1, True), (-5, False), (9, False)])
def test_zstd_chunks_are_the_general_paths_frames_byte_for_byte(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    encoder: str,
    zarr_format: int,
    level: int,
    checksum: bool,
) -> None:
    """The C path compresses with the libzstd of ``Settings.zstd_encoder``, as the general
    path does: numcodecs' or python-zstandard's (its CFFI module's exports)."""
    taken = zstd_batch.compressor(numcodecs.Zstd(), encoder) is not None
    if encoder == "numcodecs":
        assert taken  # numcodecs always exports its libzstd
    rng = np.random.default_rng(7)
    # Incompressible parts too (zstd stores raw blocks there); 8 chunks of 1,280 bytes, or
    # (the slow levels left out) of 256 KiB: frames of several zstd blocks.
    large = level in (1, 3)
    shape, chunks = ((1024, 512), (256, 256)) if large else ((64, 40), (16, 20))
    value = rng.integers(0, 1 << 30, shape, dtype="<u4") >> rng.integers(0, 31, shape)
    for name in ("box", "general"):
        root = tmp_path / name
        if zarr_format == 3:
            codecs: dict[str, Any] = {"compressors": ZstdCodec(level=level, checksum=checksum)}
        else:
            codecs = {"compressors": numcodecs.Zstd(level=level, checksum=checksum)}
        zarr.create_array(
            LocalStore(root), shape=value.shape, chunks=chunks, dtype=value.dtype,
            zarr_format=zarr_format, fill_value=0, **codecs,
        )
        with monkeypatch.context() as m:
            seen = record_put_boxes(m)
            if name == "general":
                m.setattr(write, "box_plan", lambda *a: None)
            settings = cuzarr.Settings(threads=2, zstd_encoder=encoder)
            cuzarr.open(root, mode="r+", settings=settings)[...] = value
            assert (sum(seen.sizes) == 8) == (name == "box" and taken)
    assert _files(tmp_path / "box") == _files(tmp_path / "general")
    with zarr.config.set({"codec_pipeline.path": BLOSC}):
        np.testing.assert_array_equal(zarr.open_array(LocalStore(tmp_path / "box"))[...], value)


def test_one_thread_switching_zstd_libraries_uses_each_librarys_own_context(
    tmp_path: Path,
) -> None:
    """A thread's zstd context belongs to the libzstd that made it (a context of numcodecs'
    1.5.6 handed to python-zstandard's 1.5.7 crashed the process)."""
    root = tmp_path / "a"
    zarr.create_array(
        LocalStore(root), shape=(32, 32), chunks=(8, 8), dtype="uint16", compressors=ZstdCodec()
    )
    for k, encoder in enumerate(["numcodecs", "zstandard", "numcodecs", "zstandard"]):
        value = np.arange(32 * 32, dtype="uint16").reshape(32, 32) * (k + 1)
        settings = cuzarr.Settings(threads=1, zstd_encoder=encoder)
        cuzarr.open(root, mode="r+", settings=settings)[...] = value
        np.testing.assert_array_equal(cuzarr.open(root)[...], value)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_raw_chunks_from_views_of_any_strides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zarr_format: int
) -> None:
    base = np.arange(2 * 36 * 40 * 3, dtype="<i4").reshape(72, 40, 3)
    views = {
        "strided": base[::2, :, 1],
        "reversed": base[::-2, ::-1, 0],
        "fortran": np.asfortranarray(base[:36, :, 2]),
        "broadcast": np.broadcast_to(np.arange(40, dtype="<i4") + 1, (36, 40)),
    }
    for name, value in views.items():
        box, general, sizes = _write_both(
            tmp_path / name, monkeypatch, value, (12, 8), zarr_format=zarr_format,
            compressors=None,
        )
        assert sizes, name
        assert box == general, name
        arr = cuzarr.open(tmp_path / name / "box")
        np.testing.assert_array_equal(arr[...], value)


def test_contiguous_boxes_are_written_straight_from_the_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = np.arange(16 * 50, dtype="<u2").reshape(16, 50)
    box, general, sizes = _write_both(tmp_path, monkeypatch, value, (4, 50), compressors=None)
    assert sizes and box == general
    assert box["c/2/0"] == value[8:12].tobytes()


def test_partial_writes_take_only_the_chunks_they_cover_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = np.arange(20 * 30, dtype="float64").reshape(20, 30) + 0.5
    box, general, sizes = _write_both(
        tmp_path, monkeypatch, value, (8, 10), region=(slice(3, 23), slice(0, 30)),
        shape=(32, 30), compressors=BloscCodec(cname="lz4", shuffle="shuffle"),
    )
    # Rows 8..15 and 16..23 lie inside 3..23 whole: two rows of 3 chunks each.
    assert sum(sizes) == 3
    assert box == general


EDGE_CHAINS: dict[str, dict[str, Any]] = {
    "raw": {"compressors": None},
    "blosc": {"compressors": BloscCodec(cname="lz4", shuffle="shuffle")},
    "zstd": {"compressors": ZstdCodec(level=3)},
}


@pytest.mark.parametrize("chain", sorted(EDGE_CHAINS))
@pytest.mark.parametrize(
    ("region", "boxed"),
    [
        (Ellipsis, 5 * 3 * 3),  # every chunk: 4 x 2 x 2 whole, the rest past an edge
        ((slice(16, 37), slice(None), slice(8, 9)), 3 * 3),  # edge chunks only, to the end
        ((slice(16, 36), slice(None), slice(None)), 2 * 3 * 3),  # the last row not covered
    ],
)
def test_chunks_past_the_edge_are_the_general_paths_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chain: str, region: Any, boxed: int
) -> None:
    """Chunks a write covers that reach past the array's edge (the fill value where the array
    ends) are stored from C too, as the general path's merged chunks byte for byte."""
    rng = np.random.default_rng(3)
    shape = (37, 23, 9)
    value = (rng.integers(0, 50, shape) * 7).astype("<u2")[region]
    box, general, sizes = _write_both(
        tmp_path, monkeypatch, value, (8, 8, 4), region=region, shape=shape,
        **EDGE_CHAINS[chain],
    )
    assert sum(sizes) == boxed
    assert box == general
    want = np.zeros(shape, "<u2")
    want[region] = value
    with zarr.config.set({"codec_pipeline.path": BLOSC}):
        np.testing.assert_array_equal(zarr.open_array(LocalStore(tmp_path / "box"))[...], want)


def test_chunks_past_the_edge_of_the_fill_value_are_deleted(tmp_path: Path) -> None:
    root = tmp_path / "a"
    zarr.create_array(
        LocalStore(root), shape=(5, 7), chunks=(2, 3), dtype="int8", fill_value=7,
        compressors=ZstdCodec(),
    )
    arr = cuzarr.open(root, mode="r+")
    arr[...] = np.arange(35, dtype="int8").reshape(5, 7)
    assert len(_files(root)) == 3 * 3 + 1
    value = np.full((5, 7), 7, "int8")
    value[4, 6] = 1  # in the corner chunk, past both edges
    arr[...] = value
    assert sorted(_files(root)) == ["c/2/2", "zarr.json"]
    np.testing.assert_array_equal(arr[...], value)
    kept = cuzarr.open(root, mode="r+", write_empty_chunks=True)
    kept[...] = np.full((5, 7), 7, "int8")
    assert len(_files(root)) == 3 * 3 + 1
    with zarr.config.set({"codec_pipeline.path": BLOSC}):
        np.testing.assert_array_equal(zarr.open_array(LocalStore(root))[...], np.full((5, 7), 7))


def test_dropped_axes_past_the_edge_take_the_general_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(4)
    value = rng.integers(0, 99, (23, 9)).astype("<u2")
    region = (36, slice(None), slice(None))  # one row of the last (edge) row of chunks
    box, general, sizes = _write_both(
        tmp_path, monkeypatch, value, (8, 8, 4), region=region, shape=(37, 23, 9),
        compressors=ZstdCodec(),
    )
    assert sizes == [] and box == general


def test_chunks_of_the_fill_value_are_deleted(tmp_path: Path) -> None:
    root = tmp_path / "a"
    zarr.create_array(
        LocalStore(root), shape=(4, 6), chunks=(2, 3), dtype="int8", fill_value=7,
        compressors=None,
    )
    arr = cuzarr.open(root, mode="r+")
    arr[...] = np.arange(24, dtype="int8").reshape(4, 6)
    assert sorted(_files(root)) == ["c/0/0", "c/0/1", "c/1/0", "c/1/1", "zarr.json"]
    value = np.full((4, 6), 7, "int8")
    value[0, 0] = 1
    arr[...] = value
    assert sorted(_files(root)) == ["c/0/0", "zarr.json"]  # the rest equal the fill value
    kept = cuzarr.open(root, mode="r+", write_empty_chunks=True)
    kept[...] = np.full((4, 6), 7, "int8")
    assert len(_files(root)) == 5


def test_the_fill_check_looks_past_a_first_element_equal_to_the_fill(tmp_path: Path) -> None:
    """A chunk whose first element is the fill value is checked whole (NaN fill values too)."""
    root = tmp_path / "i"
    zarr.create_array(
        LocalStore(root), shape=(4, 6), chunks=(2, 3), dtype="int8", fill_value=7,
        compressors=None,
    )
    value = np.full((4, 6), 7, "int8")
    value[1, 2] = 0  # c/0/0: first element the fill, its last not
    value[3, 5] = 0  # c/1/1 likewise
    cuzarr.open(root, mode="r+")[...] = value
    assert sorted(_files(root)) == ["c/0/0", "c/1/1", "zarr.json"]
    np.testing.assert_array_equal(zarr.open_array(root, mode="r")[...], value)

    root = tmp_path / "f"
    zarr.create_array(
        LocalStore(root), shape=(4, 6), chunks=(2, 3), dtype="float32", fill_value=np.nan,
        compressors=None,
    )
    value = np.full((4, 6), np.nan, "float32")
    value[1, 1] = 2.5  # c/0/0: NaN first, a number after
    value[2, 3] = 0.0  # c/1/1: a number first
    cuzarr.open(root, mode="r+")[...] = value
    assert sorted(_files(root)) == ["c/0/0", "c/1/1", "zarr.json"]
    np.testing.assert_array_equal(zarr.open_array(root, mode="r")[...], value)


def _plan(root: Path, value: Any) -> box_writes.BoxPlan | None:
    arr = cuzarr.open(root, mode="r+")
    return box_writes.box_plan(arr._engine._ctx, arr._chunk_store(), value)


def test_only_chains_of_one_blosc_or_zstd_frame_or_none_take_the_c_path(tmp_path: Path) -> None:
    value = np.arange(64, dtype="uint16").reshape(8, 8)
    chains: dict[str, Any] = {
        "raw": None,
        "blosc": BloscCodec(cname="lz4"),
        "crc": [BloscCodec(cname="lz4"), Crc32cCodec()],
        "zstd": ZstdCodec(),
    }
    for name, compressors in chains.items():
        zarr.create_array(
            LocalStore(tmp_path / name), shape=(8, 8), chunks=(4, 4), dtype="uint16",
            compressors=compressors,
        )
    raw = _plan(tmp_path / "raw", value)
    assert raw is not None and raw.compressor is None
    blosc = _plan(tmp_path / "blosc", value)
    assert blosc is not None and blosc.compressor is not None
    assert blosc.compressor.cname == b"lz4" and blosc.compressor.args[2] == 2  # typesize
    assert blosc.compressor.kind == _native.BLOSC
    zstd = _plan(tmp_path / "zstd", value)
    assert zstd is not None and zstd.compressor is not None
    assert zstd.compressor.kind == _native.ZSTD and zstd.compressor.args == (0, 0)
    assert _plan(tmp_path / "crc", value) is None
    # A value of another dtype is converted on the general path; scalars are broadcast there.
    assert _plan(tmp_path / "raw", value.astype("int32")) is None
    assert _plan(tmp_path / "raw", np.uint16(3)) is None
    big = tmp_path / "big"
    zarr.create_array(
        LocalStore(big), shape=(8, 8), chunks=(4, 4), dtype=">u2", compressors=None,
        zarr_format=2,
    )
    assert _plan(big, value) is None  # stored byte order differs from the value's
    assert _plan(big, value.astype(">u2")) is not None


def test_a_box_the_c_call_did_not_write_is_written_the_general_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = local._put_boxes
    assert real is not None

    def refuse_first(paths: list[bytes], *args: Any, **kw: Any) -> list[int]:
        status = real(paths, *args, **kw)
        return [_native.NOT_ENCODED, *status[1:]]

    monkeypatch.setattr(local, "_put_boxes", refuse_first)
    root = tmp_path / "a"
    zarr.create_array(
        LocalStore(root), shape=(8, 8), chunks=(4, 4), dtype="uint16", compressors=None
    )
    value = np.arange(64, dtype="uint16").reshape(8, 8) + 1
    cuzarr.open(root, mode="r+", settings=cuzarr.Settings(threads=1))[...] = value
    np.testing.assert_array_equal(cuzarr.open(root)[...], value)
    assert not [p for p in root.rglob("*") if p.name.endswith(TEMP_SUFFIX)]


def test_a_folder_at_a_chunk_key_is_named_and_the_other_chunks_land(tmp_path: Path) -> None:
    root = tmp_path / "a"
    zarr.create_array(
        LocalStore(root), shape=(8, 8), chunks=(4, 4), dtype="uint16", compressors=None
    )
    (root / "c" / "1" / "1" / "inside").mkdir(parents=True)
    value = np.arange(64, dtype="uint16").reshape(8, 8) + 1
    arr = cuzarr.open(root, mode="r+", settings=cuzarr.Settings(threads=1))
    with pytest.raises(StoreError, match=r"chunk 'c/1/1'"):
        arr[...] = value
    files = _files(root)
    assert files["c/0/0"] == value[:4, :4].tobytes()
    assert files["c/1/0"] == value[4:, :4].tobytes()
    assert "c/1/1" not in files


CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    import numpy as np
    import cuzarr
    from cuzarr.errors import StoreError

    arr = cuzarr.open(sys.argv[1], mode="r+", settings=cuzarr.Settings(threads=1))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))
    try:
        arr[...] = np.full((4, 4096), 9, "uint8")  # 4 chunks of 4096 bytes: each refused
    except StoreError as exc:
        print("error:", exc)
    """
)


def test_a_disk_that_refuses_mid_chunk_leaves_the_old_chunks_whole(tmp_path: Path) -> None:
    root = tmp_path / "a"
    zarr.create_array(
        LocalStore(root), shape=(4, 4096), chunks=(1, 4096), dtype="uint8", compressors=None
    )
    old = np.arange(4 * 4096, dtype="uint8").reshape(4, 4096)
    cuzarr.open(root, mode="r+")[...] = old
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(root)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "error: Failed to write chunk 'c/" in done.stdout
    assert "File too large" in done.stdout
    np.testing.assert_array_equal(cuzarr.open(root)[...], old)
    assert not [p for p in root.rglob("*") if p.name.endswith(TEMP_SUFFIX)]


def test_large_replaced_chunks_are_swapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local.replace, "swaps_help", lambda path: True)
    root = tmp_path / "a"
    zarr.create_array(
        LocalStore(root), shape=(256, 1024), chunks=(128, 1024), dtype="uint8",
        compressors=None,
    )
    arr = cuzarr.open(root, mode="r+")
    for k in (1, 2):
        value = np.full((256, 1024), k, "uint8")
        arr[...] = value
        arr._store.settle()
        np.testing.assert_array_equal(cuzarr.open(root)[...], value)
    assert sorted(_files(root)) == ["c/0/0", "c/1/0", "zarr.json"]


def test_zarr_writes_through_cuzarr_take_the_c_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = record_put_boxes(monkeypatch)
    value = np.arange(32**3, dtype="uint16").reshape(32, 32, 32)
    with cuzarr.configure(threads=2, strict=True):
        arr = zarr.create_array(
            LocalStore(tmp_path), shape=value.shape, chunks=(8, 8, 8), dtype="uint16",
            compressors=BloscCodec(cname="lz4", shuffle="shuffle"),
        )
        arr[...] = value
    assert sum(seen.sizes) == 64 and max(seen.sizes) > 1
    with zarr.config.set({"codec_pipeline.path": BLOSC}):
        np.testing.assert_array_equal(zarr.open_array(LocalStore(tmp_path))[...], value)


def test_put_boxes_refuses_what_it_cannot_write(tmp_path: Path) -> None:
    kw: dict[str, Any] = dict(
        tag=b".t-", first=0, suffix=b".p", exchange=False, exchange_min=0
    )
    a = np.zeros((4, 4), np.uint8)
    path = [os.fsencode(tmp_path / "x")]
    with pytest.raises(ValueError, match="outside"):
        _native.put_boxes(path, a, [(2, 0)], (4, 4), None, **kw)
    with pytest.raises(ValueError, match="outside"):
        _native.put_boxes(path, a, [(-1, 0)], (2, 2), None, **kw)
    with pytest.raises(ValueError, match="object dtype"):
        _native.put_boxes(path, np.zeros(4, object), [(0,)], (2,), None, **kw)
    with pytest.raises(ValueError, match="outside"):
        _native.put_boxes(path, a, [(2, 2)], (-1, 2), None, **kw)  # a negative extent
    with pytest.raises(ValueError, match="one start per path"):
        _native.put_boxes(path * 2, a, [(0, 0)], (2, 2), None, **kw)
    with pytest.raises(ValueError, match="one start per path"):
        _native.put_boxes(path, a, [(0,)], (2, 2), None, **kw)  # a start of too few axes
    with pytest.raises(ValueError, match="NUL"):
        _native.put_boxes([b"a\0b"], a, [(0, 0)], (2, 2), None, **kw)
    assert _native.put_boxes([], a, [], (2, 2), None, **kw) == []
    assert not list(tmp_path.iterdir())


def test_stores_without_box_puts_leave_every_box_to_the_caller(tmp_path: Path) -> None:
    batch = BoxBatch(np.zeros((4, 4), np.uint8), [(0, 0), (2, 2)], (2, 2), None)
    memory = MemoryChunkStore(zarr.storage.MemoryStore())
    assert not memory.caps.box_puts
    assert memory.put_boxes(["a", "b"], batch) == [0, 1]
    assert not memory._dict  # nothing written
    cached = CachedChunkStore(LocalChunkStore(tmp_path), ObjectCache(1 << 20))
    assert LocalChunkStore(tmp_path).caps.box_puts and not cached.caps.box_puts

