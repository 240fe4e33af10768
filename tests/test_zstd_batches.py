"""The batched read path for many small zstd chunks on local stores (the CPU backend's batches).

Reads of at least ``2 * ZSTD_BATCH`` small zstd chunks decode them in GIL-free batches
(``read_batch_size`` chunks each). The results must equal zarr-python's for every selection;
a bad chunk anywhere in a batch must still be named in the error, and unusual but valid
chunks (several frames) must still read.
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

#: Whether small zstd chunks are placed from C here (the batch helper is built): the tests
#: below check values either way, and that the C batches are taken only where they exist.
C_BATCHES = cpu_backend.zstd_batch.available()

SHAPE = (40, 36, 20)
CHUNKS = (4, 4, 4)  # 10 x 9 x 5 = 450 chunks, several batches


def _store(tmp_path: Path, zarr_format: int = 3, dtype: str = "u2") -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(11)
    data = rng.integers(0, 500, SHAPE).astype(dtype)
    data[20:, :, :] = 7  # the fill value: those chunks are not stored (missing)
    path = tmp_path / "z.zarr"
    kwargs: dict[str, Any] = {"compressors": zarr.codecs.ZstdCodec(level=1)}
    if zarr_format == 2:
        from numcodecs import Zstd

        kwargs = {"compressors": Zstd(level=1), "zarr_format": 2}
    z = zarr.create_array(
        zarr.storage.LocalStore(path), shape=SHAPE, chunks=CHUNKS, dtype=dtype, fill_value=7,
        **kwargs,
    )
    with use_pipeline("zarr"):
        z[...] = data
    assert len(list((path / ("c" if zarr_format == 3 else ".")).rglob("*"))) > 0
    return path, data


def _uses_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Frames per GIL-free batch decode (``zstd_decode_many`` as the CPU backend calls it)."""
    calls: list[int] = []
    real = cpu_backend.zstd_decode_many

    def spy(frames: Any, size: int, name: str = "zstd") -> Any:
        calls.append(len(frames))
        return real(frames, size, name)

    monkeypatch.setattr(cpu_backend, "zstd_decode_many", spy)
    return calls


SELECTIONS: list[Any] = [
    np.s_[...],
    np.s_[1:39, 3:35, 2:19],
    np.s_[::-1, ::3, 5],
    np.s_[10:30, :, None, 1:20:2],
    np.s_[:, 17, :],
]


@pytest.mark.parametrize("zarr_format", [3, 2])
@pytest.mark.parametrize("dtype", ["u2", "<f8", ">i4"])
def test_batched_reads_equal_zarr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zarr_format: int, dtype: str
) -> None:
    if zarr_format == 3 and dtype.startswith(">"):
        dtype = dtype[1:]  # v3 stores byte order in the bytes codec: covered by the chain
    path, data = _store(tmp_path, zarr_format, dtype)
    a = cuzarr.open(path)
    assert isinstance(a, cuzarr.Array)
    calls = _uses_batches(monkeypatch)
    seen = record_read_boxes(monkeypatch)
    threads = a.settings.n_threads
    for selection in SELECTIONS:
        calls.clear()
        assert_same_array(a[selection], data[selection], msg=repr(selection))
        if selection == np.s_[10:30, :, None, 1:20:2] and C_BATCHES:
            # Steps in the chunk: placed from C as boxes with a step, no general decode.
            assert calls == [], calls
        if selection == np.s_[:, 17, :]:
            # A dropped axis: batch decodes, in batches sized for the read's 50 chunks (25
            # stored, the others of the fill value).
            assert sum(calls) == 25 and max(calls) == cpu_backend.read_batch_size(50, threads)
    # Box selections go to the C batches, sized for the 450 chunks of ``...`` (the first
    # batches all stored).
    if C_BATCHES:
        assert seen.placed and max(seen.placed) == cpu_backend.read_batch_size(450, threads)
    else:
        assert seen.placed == []
    # The zarr pipeline path (integer axes dropped by zarr's indexer) agrees too.
    with use_pipeline("cuzarr"):
        z = zarr.open_array(zarr.storage.LocalStore(path), mode="r")
        for selection in [SELECTIONS[0], SELECTIONS[1], np.s_[5, :, :], np.s_[:, :, 3]]:
            assert_same_array(z[selection], data[selection], msg=repr(selection))


def _chunk_file(path: Path, coords: tuple[int, int, int]) -> Path:
    return path / "c" / "/".join(map(str, coords))


@pytest.mark.parametrize(
    "damage",
    ["garbage", "truncated", "too-long", "wrong-size-frame", "empty"],
)
@pytest.mark.parametrize("c_batches", [True, False])
def test_a_bad_chunk_in_a_batch_is_named(
    tmp_path: Path, damage: str, c_batches: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not c_batches:
        monkeypatch.setattr(cpu_backend.zstd_batch, "available", lambda: False)
    path, _data = _store(tmp_path)
    victim = _chunk_file(path, (3, 5, 2))
    good = victim.read_bytes()
    if damage == "empty":
        victim.write_bytes(b"")
    elif damage == "garbage":
        victim.write_bytes(b"not a zstd frame at all" * 3)
    elif damage == "truncated":
        victim.write_bytes(good[: len(good) // 2])
    elif damage == "too-long":
        victim.write_bytes(good + bytes(200_000))
    else:
        import zstandard

        victim.write_bytes(zstandard.ZstdCompressor().compress(bytes(64)))  # 64 bytes, not 128
    a = cuzarr.open(path)
    with pytest.raises(CorruptChunkError, match=r"c/3/5/2"):
        a[...]


def test_multi_frame_chunks_still_read(tmp_path: Path) -> None:
    """Two concatenated frames are a valid chunk (numcodecs decodes them): the batch falls back."""
    import zstandard

    path, data = _store(tmp_path)
    victim = _chunk_file(path, (1, 1, 1))
    raw = data[4:8, 4:8, 4:8].tobytes()
    c = zstandard.ZstdCompressor()
    victim.write_bytes(c.compress(raw[:64]) + c.compress(raw[64:]))
    a = cuzarr.open(path)
    assert_same_array(a[...], data)


def test_sharded_inner_chunks_decode_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(12)
    data = rng.integers(0, 500, SHAPE).astype("u2")
    data[:, :, 16:] = 3  # fill: empty inner chunks
    path = tmp_path / "s.zarr"
    z = zarr.create_array(
        zarr.storage.LocalStore(path), shape=SHAPE, chunks=CHUNKS, shards=(20, 36, 20),
        dtype="u2", fill_value=3, compressors=zarr.codecs.ZstdCodec(level=1),
    )
    with use_pipeline("zarr"):
        z[...] = data
    calls = _uses_batches(monkeypatch)
    a = cuzarr.open(path)
    for selection in SELECTIONS:
        assert_same_array(a[selection], data[selection], msg=repr(selection))
    assert calls and max(calls) == cpu_backend.ZSTD_BATCH
    # A corrupt inner chunk in a batch: the error names the shard and the inner chunk.
    shard = path / "c" / "1" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    raw[10:40] = bytes(30)  # inside the first inner chunk's frame
    shard.write_bytes(bytes(raw))
    with pytest.raises(CorruptChunkError, match=r"c/1/0/0.*inner chunk"):
        cuzarr.open(path)[20:40, :, :]


def test_local_get_many_reads_small_files_whole_and_missing_as_none(tmp_path: Path) -> None:
    from cuzarr.stores.local import LocalChunkStore

    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "big").write_bytes(b"y" * 100)
    store = LocalChunkStore(tmp_path)
    got = store.get_many(["a", "nope", "big"], size_hint=10)
    assert [None if g is None else bytes(g) for g in got] == [b"x" * 10, None, b"y" * 100]
    whole = store.get_many(["big"])[0]
    assert whole is not None and bytes(whole) == b"y" * 100


def test_empty_batches_decode_to_nothing() -> None:
    """Zero frames are an empty result (python-zstandard itself dies of SIGFPE on them)."""
    from cuzarr.backends.cpu import CpuBackend
    from cuzarr.codecs.build import build_chunk_codec
    from cuzarr.codecs.numcodecs_ import zstd_decode_many
    from cuzarr.metadata import parse_v3

    assert list(zstd_decode_many([], 160)) == []
    # An empty chunk is never a frame: a named CorruptChunkError, not python-zstandard's bare
    # ValueError for a batch of empty inputs.
    for frames in ([b""], [np.empty(0, np.uint8)]):
        with pytest.raises(CorruptChunkError, match="empty"):
            zstd_decode_many(frames, 160)
    doc = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [20],
        "data_type": "int64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [20]}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": 0,
        "codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 5, "checksum": True}},
        ],
    }
    codec = build_chunk_codec(parse_v3(doc, path="a"))
    assert CpuBackend().decode(codec, [], lambda key, inner: key) == []


# ---------------------------------------------------------------------------- C batches


@pytest.mark.parametrize(
    "make_out",
    [
        lambda shape, dtype: np.empty(shape, dtype),
        lambda shape, dtype: np.empty(shape, dtype)[::-1],  # negative strides
        lambda shape, dtype: np.empty((*shape[:-1], 2 * shape[-1]), dtype)[..., ::2],  # gaps
        lambda shape, dtype: np.asfortranarray(np.empty(shape, dtype)),
    ],
    ids=["c-order", "reversed", "strided-last-axis", "fortran"],
)
@pytest.mark.parametrize(
    "selection", [np.s_[...], np.s_[1:39, 3:35, 2:19], np.s_[17:18, 5:31, 0:20]]
)
def test_c_batches_place_boxes_into_any_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_out: Any, selection: Any
) -> None:
    path, data = _store(tmp_path)
    a = cuzarr.open(path)
    assert isinstance(a, cuzarr.Array)
    expected = data[selection]
    out = make_out(expected.shape, data.dtype)
    out[...] = 12345  # anything left unwritten shows
    seen = record_read_boxes(monkeypatch)
    got = a.read(selection, out=out)
    assert got is out
    assert_same_array(out, expected)
    if expected.size >= 2 * cpu_backend.ZSTD_BATCH * 64:
        assert (seen.placed and sum(seen.placed) > 0) if C_BATCHES else seen.placed == []


def test_c_batches_equal_zarr_through_the_pipeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, data = _store(tmp_path)
    seen = record_read_boxes(monkeypatch)
    with use_pipeline("cuzarr"):
        z = zarr.open_array(zarr.storage.LocalStore(path), mode="r")
        assert_same_array(z[...], data)
        assert_same_array(z[2:37, 1:30, 3:17], data[2:37, 1:30, 3:17])
    with use_pipeline("zarr"):
        reference = zarr.open_array(zarr.storage.LocalStore(path), mode="r")[...]
    assert_same_array(reference, data)
    assert (seen.placed and sum(seen.placed) > 0) if C_BATCHES else seen.placed == []


def test_without_c_batches_the_same_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, data = _store(tmp_path)
    seen = record_read_boxes(monkeypatch)
    monkeypatch.setattr(cpu_backend.zstd_batch, "available", lambda: False)
    calls = _uses_batches(monkeypatch)
    assert_same_array(cuzarr.open(path)[...], data)
    threads = cuzarr.Settings().n_threads
    assert seen.placed == [] and calls and max(calls) == cpu_backend.read_batch_size(450, threads)


def test_c_batches_leave_odd_chunks_to_the_general_path(tmp_path: Path) -> None:
    """A chunk the C loop cannot place (too long, not one chunk of frames, unreadable) is read
    the general way, which reads valid ones and names bad ones; a multi-frame chunk decodes."""
    import zstandard

    path, data = _store(tmp_path)
    c = zstandard.ZstdCompressor()
    raw = data[4:8, 4:8, 4:8].tobytes()
    _chunk_file(path, (1, 1, 1)).write_bytes(c.compress(raw[:64]) + c.compress(raw[64:]))
    # A valid chunk longer than any single frame of it: one frame with a long skippable frame.
    padded = data[8:12, 0:4, 0:4].tobytes()
    skippable = (0x184D2A50).to_bytes(4, "little") + (4000).to_bytes(4, "little") + bytes(4000)
    _chunk_file(path, (2, 0, 0)).write_bytes(c.compress(padded) + skippable)
    assert_same_array(cuzarr.open(path)[...], data)
    victim = _chunk_file(path, (0, 2, 1))
    victim.unlink()
    victim.mkdir()  # a folder where a chunk file should be
    with pytest.raises(OSError):
        cuzarr.open(path)[...]


def test_read_boxes_statuses_and_bounds(tmp_path: Path) -> None:
    import zstandard

    from cuzarr.codecs import zstd_batch

    if not zstd_batch.available():
        pytest.skip("the batch helper is not built")
    chunk = np.arange(24, dtype="<u2").reshape(2, 3, 4)
    frame = zstandard.ZstdCompressor().compress(chunk.tobytes())
    (tmp_path / "ok").write_bytes(frame)
    (tmp_path / "big").write_bytes(frame + bytes(100))
    (tmp_path / "bad").write_bytes(b"\x00" * len(frame))
    (tmp_path / "dir").mkdir()
    paths = [str(tmp_path / n).encode() for n in ("ok", "none", "big", "bad", "dir", "ok")]
    cap = len(frame) + 1
    scratch = np.empty(cap + chunk.nbytes, np.uint8)

    def read(paths: list[bytes], boxes: np.ndarray, out: np.ndarray, **kw: Any) -> list[int]:
        got = zstd_batch.read_boxes(paths, cap, (2, 3, 4), 2, boxes, out, scratch, **kw)
        return [int(x) for x in got]

    out = np.zeros((4, 3, 4), "<u2")
    # Rows: chunk start, out start, extent, step in the chunk.
    whole = [0, 0, 0, 0, 0, 0, 2, 3, 4, 1, 1, 1]
    corner = [1, 1, 2, 2, 0, 0, 1, 2, 2, 1, 1, 1]
    boxes = np.array([whole] * 5 + [corner], np.int64).reshape(6, 4, 3)
    assert read(paths, boxes, out) == [1, 0, -1, -1, -1, 1]
    expected = np.zeros_like(out)
    expected[0:2] = chunk
    expected[2:3, 0:2, 0:2] = chunk[1:2, 1:3, 2:4]
    assert_same_array(out, expected)
    # The same with streaming stores.
    out_streamed = np.zeros_like(out)
    assert read(paths, boxes, out_streamed, streaming=True) == [1, 0, -1, -1, -1, 1]
    assert_same_array(out_streamed, expected)
    # Boxes that are not contiguous (a strided view) are taken as their values.
    spread = np.zeros((12, 4, 3), np.int64)
    spread[::2] = boxes
    out2 = np.zeros_like(out)
    assert read(paths, spread[::2], out2) == [1, 0, -1, -1, -1, 1]
    assert_same_array(out2, expected)
    # Steps in the chunk: every step-th element from the start, into consecutive elements.
    stepped = np.array([[0, 0, 1], [0, 0, 0], [2, 2, 2], [1, 2, 2]], np.int64).reshape(1, 4, 3)
    out3 = np.zeros((2, 2, 2), "<u2")
    assert read(paths[:1], stepped, out3) == [1]
    assert_same_array(out3, chunk[0:2, 0:3:2, 1:4:2])

    # A whole chunk over a contiguous region of the output is decoded straight into it (the
    # scratch's chunk part is not written); over a strided region it goes through the scratch.
    def through_scratch(out: np.ndarray, at: int = 0) -> bool:
        scratch[cap:] = 0xA5
        box = np.array([0, 0, 0, at, 0, 0, 2, 3, 4, 1, 1, 1], np.int64).reshape(1, 4, 3)
        assert read(paths[:1], box, out) == [1]
        return bool((scratch[cap:] != 0xA5).any())

    stacked = np.zeros((6, 3, 4), "<u2")
    assert not through_scratch(stacked, at=2)
    assert_same_array(stacked[2:4], chunk)
    assert not through_scratch(np.zeros((2, 3, 4), ">u2").view("<u2"))  # any byte order view
    strided = np.zeros((2, 3, 8), "<u2")[:, :, ::2]
    assert through_scratch(strided)
    assert_same_array(strided, chunk)
    wider = np.zeros((2, 3, 5), "<u2")[:, :, :4]  # rows contiguous, the region is not
    assert through_scratch(wider)
    assert_same_array(wider, chunk)
    flat = np.zeros((2, 1, 3, 4), "<u2")[:, 0]  # a length-1 axis of any stride
    assert not through_scratch(flat)
    assert_same_array(flat, chunk)

    def refused(row: list[list[int]]) -> None:
        box = np.array(row, np.int64).reshape(1, 4, 3)
        with pytest.raises(ValueError, match="outside"):
            read(paths[:1], box, out)

    refused([[0, 0, 0], [3, 0, 0], [2, 3, 4], [1, 1, 1]])  # past the output
    refused([[0, 0, -1], [0, 0, 0], [1, 1, 1], [1, 1, 1]])  # a negative start
    refused([[0, 0, 1], [0, 0, 0], [1, 1, 3], [1, 1, 2]])  # 1 + 2 * 2 >= 4: the last outside
    inside = np.array([[0, 0, 1], [0, 0, 0], [1, 1, 2], [1, 1, 2]], np.int64).reshape(1, 4, 3)
    assert read(paths[:1], inside, out) == [1]
    refused([[0, 0, 0], [0, 0, 0], [1, 1, 1], [1, 1, 0]])  # a step of 0
    refused([[0, 0, 4], [0, 0, 0], [1, 1, 1], [1, 1, 1]])  # a start at the chunk's end
    with pytest.raises(ValueError, match="out must"):
        zstd_batch.read_boxes(paths[:1], cap, (2, 3, 4), 4, boxes[:1], out, scratch)
    with pytest.raises(ValueError, match="shape"):
        read(paths[:1], boxes[:1, :3], out)
    for bad in (scratch[:-1], scratch[::2], scratch.view("<u2"), np.zeros(0, np.uint8)):
        with pytest.raises(ValueError, match=f"scratch must be {cap + chunk.nbytes} writable"):
            zstd_batch.read_boxes(paths[:1], cap, (2, 3, 4), 2, boxes[:1], out, bad)


@pytest.mark.parametrize(
    "selection",
    [
        np.s_[::2],
        np.s_[1::3, :, 2:19:5],
        np.s_[3:38:4, 1:33:7, ::3],
        np.s_[::-2, 5:9],  # a negative step: the indexer's own plan
        np.s_[::4, 3, 1:19:2],  # a dropped axis: the general path
    ],
)
def test_c_batches_place_strided_selections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, selection: Any
) -> None:
    path, data = _store(tmp_path)
    seen = record_read_boxes(monkeypatch)
    a = cuzarr.open(path)
    assert isinstance(a, cuzarr.Array)
    assert_same_array(a[selection], data[selection])
    out = np.full(data[selection].shape, 12345, data.dtype)
    assert_same_array(a.read(selection, out=out[...]), data[selection])
    axes = selection if isinstance(selection, tuple) else (selection,)
    if all(s.step is None or s.step > 0 for s in axes if isinstance(s, slice)):
        with use_pipeline("cuzarr"):  # zarr's indexer refuses negative steps
            z = zarr.open_array(zarr.storage.LocalStore(path), mode="r")
            assert_same_array(z[selection], data[selection])
    if selection == np.s_[::2]:
        # Steps in the chunk are placed from C.
        assert (seen.placed and sum(seen.placed) > 0) if C_BATCHES else seen.placed == []


def test_file_paths_check_keys_and_other_stores_refuse(tmp_path: Path) -> None:
    from cuzarr.errors import StoreError, UnsupportedError
    from cuzarr.stores.local import LocalChunkStore
    from cuzarr.stores.memory import MemoryChunkStore

    store = LocalChunkStore(tmp_path)
    assert store.file_paths(["c/0/1"]) == [str(tmp_path / "c" / "0" / "1").encode()]
    with pytest.raises(StoreError, match=r"\.\./x"):
        store.file_paths(["c/0", "../x"])
    memory = MemoryChunkStore(zarr.storage.MemoryStore())
    with pytest.raises(UnsupportedError, match="no local files"):
        memory.file_paths(["c/0"])


@pytest.mark.parametrize("threads", [1, 2, 8])
def test_read_batch_size_keeps_every_thread_busy(threads: int) -> None:
    for n in range(2 * cpu_backend.ZSTD_BATCH, 20_000, 37):
        size = cpu_backend.read_batch_size(n, threads)
        assert cpu_backend.ZSTD_BATCH <= size <= cpu_backend.ZSTD_READ_BATCH_MAX
        # Two batches per thread at least, unless batches are as small as they go.
        batches = -(-n // size)
        assert batches >= 2 * threads or size == cpu_backend.ZSTD_BATCH
        # And no more than that below the largest batches (each call into C costs).
        assert batches <= 2 * threads or size == cpu_backend.ZSTD_READ_BATCH_MAX
