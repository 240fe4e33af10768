"""zstd encoding: python-zstandard by default, numcodecs on request.

``Settings.zstd_encoder="zstandard"`` (the default) compresses with python-zstandard (a reused
context per thread; writes of at least ``2 * ZSTD_BATCH`` chunks of at most 128 KiB in
GIL-free batches): its frames must decode, through numcodecs and zarr-python's own pipeline,
to the values written (tests/test_interop.py: TensorStore and zarrs-python too), though their
bytes may differ from numcodecs' (another libzstd release). ``"numcodecs"`` compresses each
chunk with numcodecs: every stored chunk and shard must then equal what zarr-python writes.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.backends.base import Batching
from cuzarr.backends.cpu import ZSTD_BATCH, ZSTD_BATCHES, CpuBackend
from cuzarr.codecs import numcodecs_
from cuzarr.codecs.build import build_chunk_codec
from cuzarr.codecs.numcodecs_ import NumcodecsBytesCodec, zstd_encode_many
from cuzarr.metadata import read_array_spec
from cuzarr.stores.local import LocalChunkStore
from cuzarr.testing import assert_same_array, use_pipeline

LEVELS = [-5, -1, 0, 1, 3, 9, 19, 22]


@pytest.mark.parametrize("checksum", [False, True])
@pytest.mark.parametrize("level", LEVELS)
def test_frames_equal_numcodecs(level: int, checksum: bool) -> None:
    rng = np.random.default_rng(level + 10 + 100 * checksum)
    reference = numcodecs.Zstd(level=level, checksum=checksum)
    # Small, one block, several blocks. A random walk mod 500 of u2 is data where
    # python-zstandard's frames differ from numcodecs' (a 512-byte chunk one byte shorter).
    for n in [1, 7, 512, 8192, 128 * 1024, 128 * 1024 + 1, 600_000]:
        inputs = [
            (np.cumsum(rng.integers(-3, 4, n), dtype=np.int64) % 500).astype("<u2")
            .view(np.uint8)[:n]
            .copy()
            for _ in range(3)
        ]
        inputs[0][: n // 3] = 0
        frames = zstd_encode_many(inputs, level, checksum, "numcodecs")
        assert len(frames) == len(inputs)
        for x, frame in zip(inputs, frames, strict=True):
            assert bytes(frame) == bytes(reference.encode(x)), x.nbytes
            assert bytes(reference.decode(frame)) == x.tobytes()
        # python-zstandard's frames: other bytes maybe, the same content, the checksum flag.
        for x, frame in zip(inputs, zstd_encode_many(inputs, level, checksum), strict=True):
            assert bytes(reference.decode(frame)) == x.tobytes()
            assert bool(np.frombuffer(bytes(frame[4:5]), np.uint8)[0] & 4) == checksum


def test_mixed_sizes_and_layouts() -> None:
    inputs = [np.arange(n, dtype=np.uint8) for n in (0, 5, 3000)]
    reference = numcodecs.Zstd(level=3)
    want = [bytes(reference.encode(x)) for x in inputs]
    assert [bytes(f) for f in zstd_encode_many(inputs, 3, False, "numcodecs")] == want
    for x, frame in zip(inputs[1:], zstd_encode_many(inputs[1:], 3, False), strict=True):
        assert bytes(reference.decode(frame)) == x.tobytes()
    # An empty input is numcodecs' frame whichever the encoder.
    assert [bytes(f) for f in zstd_encode_many(inputs, 3, False)] == want
    # An F-order chunk (v2 order "F") is compressed in memory order, as numcodecs does.
    f_order = np.asfortranarray(np.arange(600, dtype="<u2").reshape(20, 30))
    codec = NumcodecsBytesCodec("zstd", numcodecs.Zstd(level=1))
    assert bytes(reference.decode(codec.encode(f_order))) == f_order.tobytes(order="F")
    assert zstd_encode_many([], 3, False) == []


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Inputs per batched encode call."""
    calls: list[int] = []
    real = numcodecs_.zstd_encode_many

    def spy(inputs: Any, level: int, checksum: bool, encoder: str = "zstandard") -> Any:
        calls.append(len(inputs))
        return real(inputs, level, checksum, encoder)

    monkeypatch.setattr(numcodecs_, "zstd_encode_many", spy)
    return calls


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in ("zarr.json", ".zarray", ".zattrs")
    }


SHAPE = (40, 36, 20)
CHUNKS = (4, 4, 4)  # 450 chunks of 128 bytes (u2) to 512 bytes (f8)


def _create(path: Path, zarr_format: int, dtype: str, **kwargs: Any) -> zarr.Array:
    compressor: Any = (
        numcodecs.Zstd(level=2, checksum=True)
        if zarr_format == 2
        else zarr.codecs.ZstdCodec(level=2, checksum=True)
    )
    return zarr.create_array(
        zarr.storage.LocalStore(path),
        shape=SHAPE,
        dtype=dtype,
        fill_value=7,
        compressors=compressor,
        zarr_format=zarr_format,  # type: ignore[arg-type]
        **kwargs,
    )


def _data(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(5)
    data = rng.integers(0, 300, SHAPE).astype(dtype)
    data[30:] = 7  # chunks of the fill value: deleted, not written
    return data


WRITES: list[Any] = [np.s_[...], np.s_[2:37, 1:33, 3:18], np.s_[::2, 5, :], np.s_[0:4, 0:36, 0:4]]


@pytest.mark.parametrize("engine", ["api", "pipeline"])
@pytest.mark.parametrize(("zarr_format", "dtype"), [(3, "u2"), (3, "<f8"), (2, ">i4"), (2, "u1")])
def test_written_chunks_equal_zarr(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    engine: str,
    zarr_format: int,
    dtype: str,
) -> None:
    data = _data(dtype)
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "theirs.zarr"
    _create(ours, zarr_format, dtype, chunks=CHUNKS)
    z_theirs = _create(theirs, zarr_format, dtype, chunks=CHUNKS)
    calls = _spy(monkeypatch)
    settings = cuzarr.Settings(threads=2, zstd_encoder="numcodecs")
    target: Any = cuzarr.open(ours, mode="r+", settings=settings)
    if engine == "pipeline":
        with use_pipeline("cuzarr", threads=2, zstd_encoder="numcodecs"):
            target = zarr.open_array(zarr.storage.LocalStore(ours), mode="r+")
    for n, selection in enumerate(WRITES):
        value = (data[selection] + n).astype(dtype)
        with use_pipeline("zarr"):
            z_theirs[selection] = value
        with use_pipeline("cuzarr", threads=2, zstd_encoder="numcodecs"):
            target[selection] = value
        assert _files(ours) == _files(theirs), repr(selection)
    assert not calls  # numcodecs as the encoder: one numcodecs call per chunk, no batch
    with use_pipeline("zarr"):
        assert_same_array(zarr.open_array(zarr.storage.LocalStore(ours))[...], z_theirs[...])


def test_sharded_small_inner_chunks_equal_zarr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _data("u2")
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "theirs.zarr"
    _create(ours, 3, "u2", chunks=(2, 4, 4), shards=(20, 12, 20))
    z_theirs = _create(theirs, 3, "u2", chunks=(2, 4, 4), shards=(20, 12, 20))
    calls = _spy(monkeypatch)
    settings = cuzarr.Settings(threads=2, zstd_encoder="numcodecs")
    a = cuzarr.open(ours, mode="r+", settings=settings)
    for n, selection in enumerate(WRITES):
        value = (data[selection] + n).astype("u2")
        with use_pipeline("zarr"):
            z_theirs[selection] = value
        a[selection] = value
        assert _files(ours) == _files(theirs), repr(selection)
    assert not calls  # numcodecs as the encoder: one numcodecs call per chunk, no batch


@pytest.mark.parametrize("engine", ["api", "pipeline"])
@pytest.mark.parametrize("chunks", [CHUNKS, (40, 36, 20)])
def test_default_encoder_writes_what_zarr_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str, chunks: tuple[int, ...]
) -> None:
    """python-zstandard's frames (the default): zarr's own pipeline reads the values back."""
    data = _data("u2")
    path = tmp_path / "ours.zarr"
    _create(path, 3, "u2", chunks=chunks)
    calls = _spy(monkeypatch)
    target: Any = cuzarr.open(path, mode="r+", settings=cuzarr.Settings(threads=2))
    if engine == "pipeline":
        with use_pipeline("cuzarr", threads=2):
            target = zarr.open_array(zarr.storage.LocalStore(path), mode="r+")
    want = np.full(SHAPE, 7, "u2")
    for n, selection in enumerate(WRITES):
        value = (data[selection] + n).astype("u2")
        want[selection] = value
        with use_pipeline("cuzarr", threads=2):
            target[selection] = value
        with use_pipeline("zarr"):
            assert_same_array(zarr.open_array(zarr.storage.LocalStore(path))[...], want)
    # Many small chunks: in batches of ZSTD_BATCH.
    assert (max(calls, default=0) == ZSTD_BATCH) == (chunks == CHUNKS)


def test_zstd_encoder_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="zstd_encoder"):
        cuzarr.Settings(zstd_encoder="lz4")
    monkeypatch.setenv("CUZARR_ZSTD_ENCODER", "numcodecs")
    assert cuzarr.Settings.from_env().zstd_encoder == "numcodecs"
    monkeypatch.setenv("CUZARR_ZSTD_ENCODER", "fast")
    with pytest.raises(ValueError, match="CUZARR_ZSTD_ENCODER"):
        cuzarr.Settings.from_env()


def _chain(tmp_path: Path, name: str, chunks: tuple[int, ...], compressor: Any) -> Any:
    """The compiled codec chain of a new 2-d ``f8`` array."""
    path = tmp_path / name
    zarr.create_array(
        zarr.storage.LocalStore(path),
        shape=(512, 512),
        chunks=chunks,
        dtype="f8",
        compressors=compressor,
    )
    return build_chunk_codec(read_array_spec(LocalChunkStore(path), ""))


def test_batching_takes_zstd_chains(tmp_path: Path) -> None:
    backend = CpuBackend()
    batching = functools.partial(backend.batching, threads=2)
    small = _chain(tmp_path, "s", (16, 16), zarr.codecs.ZstdCodec(level=4))
    big = _chain(tmp_path, "b", (256, 256), zarr.codecs.ZstdCodec(level=4))
    blosc = _chain(tmp_path, "c", (16, 16), zarr.codecs.BloscCodec(cname="zstd"))
    light = _chain(tmp_path, "l", (16, 16), zarr.codecs.BloscCodec(cname="lz4"))
    light_big = _chain(tmp_path, "m", (64, 64), zarr.codecs.BloscCodec(cname="lz4"))
    n = 2 * ZSTD_BATCH
    assert small.batch_encodes
    assert batching(small, n, remote=True, op="encode") == ZSTD_BATCHES
    # A small write (fewer than two batches' worth) is one batch on one task; its reads and
    # single chunks stay one per task.
    assert batching(small, n - 1, remote=False, op="encode") == Batching(n - 1, True)
    assert batching(light, n - 1, remote=False, op="encode") == Batching(n - 1, True)
    assert batching(small, 1, remote=False, op="encode").size == 1
    assert batching(small, n - 1, remote=False, op="decode").size == 1
    assert batching(blosc, n - 1, remote=False, op="encode").size == 1
    # 512 KiB chunks encode one per task (overlapping compression with writes).
    assert not big.batch_encodes
    assert batching(big, n, remote=False, op="encode").size == 1
    assert not blosc.batch_encodes and not blosc.light
    assert batching(blosc, n, remote=False, op="encode").size == 1
    # Light chunks (2 KiB of blosc lz4) decode and encode on one thread, in one batch; their
    # reads (with I/O) stay one per task; 32 KiB ones are not light.
    assert light.light and not light_big.light and not small.light
    for op in ("encode", "decode"):
        assert batching(light, n, remote=False, op=op) == Batching(n, parallel=False)
        assert batching(light_big, n, remote=False, op=op).size == 1
    assert batching(light, n, remote=False, op="read").size == 1
    chunks = [np.full((256, 256), i, "f8") for i in range(2)]
    ref = numcodecs.Zstd(level=4)
    assert [bytes(b) for b in big.encode_many(chunks)] == [bytes(ref.encode(c)) for c in chunks]


def test_cpu_backend_encode_uses_the_batch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    codec = _chain(tmp_path, "s", (16, 16), zarr.codecs.ZstdCodec(level=4))
    calls = _spy(monkeypatch)
    chunks = [np.full((16, 16), i / 3, "f8") for i in range(5)]
    blobs = CpuBackend().encode(codec, chunks)
    assert calls == [5]
    assert [bytes(b) for b in blobs] == [bytes(codec.encode(c)) for c in chunks]
    assert [codec.decode(b).tolist() for b in blobs] == [c.tolist() for c in chunks]
