"""Light chunks: small inner chunks of blosc lz4, decoded and encoded on one thread.

Their batches run on the calling thread (``ChunkCodec.light``) and decode through
``numcodecs.blosc.decompress`` after cuzarr's own header check. Results, stored bytes and
errors must be those of the general path: zarr's values and bytes, and a corrupt inner chunk
named in the error.
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

SHAPE = (48, 40, 36)
INNER = (4, 4, 6)  # 192 bytes of u2, 96 inner chunks per shard
SHARDS = (24, 16, 36)


def _create(path: Path, dtype: str = "u2") -> zarr.Array:
    return zarr.create_array(
        zarr.storage.LocalStore(path),
        shape=SHAPE,
        chunks=INNER,
        shards=SHARDS,
        dtype=dtype,
        fill_value=3,
        compressors=zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
    )


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "zarr.json"
    }


def _serial_batches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """(op, items) of every light batch the CPU backend plans."""
    seen: list[tuple[str, int]] = []
    real = cpu_backend.CpuBackend.batching

    def spy(self: Any, codec: Any, n: int, *, remote: bool, op: Any, threads: int) -> Any:
        got = real(self, codec, n, remote=remote, op=op, threads=threads)
        if not got.parallel:
            seen.append((op, got.size))
        return got

    monkeypatch.setattr(cpu_backend.CpuBackend, "batching", spy)
    return seen


WRITES: list[Any] = [np.s_[...], np.s_[3:45, 5:33, 1:30], np.s_[::3, 7, :], np.s_[0:24, 0:16, :]]
READS: list[Any] = [np.s_[...], np.s_[1:47, 2:39, 5:31], np.s_[::-2, ::5, 3], np.s_[20:28, :, 10]]


@pytest.mark.parametrize("dtype", ["u2", "<f8"])
def test_light_writes_and_reads_equal_zarr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: str
) -> None:
    rng = np.random.default_rng(3)
    data = rng.integers(0, 200, SHAPE).astype(dtype)
    data[:, :, 30:] = 3  # fill value: those inner chunks are left out of their shards
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "theirs.zarr"
    _create(ours, dtype)
    z_theirs = _create(theirs, dtype)
    seen = _serial_batches(monkeypatch)
    a = cuzarr.open(ours, mode="r+", settings=cuzarr.Settings(threads=2))
    for n, selection in enumerate(WRITES):
        value = (data[selection] + n).astype(dtype)
        with use_pipeline("zarr"):
            z_theirs[selection] = value
        a[selection] = value
        assert _files(ours) == _files(theirs), repr(selection)
    with use_pipeline("zarr"):
        expected = z_theirs[...]
    for selection in READS:
        assert_same_array(a[selection], expected[selection], msg=repr(selection))
    assert {op for op, _n in seen} >= {"encode", "decode"}


def test_corrupt_light_inner_chunk_is_named(tmp_path: Path) -> None:
    path = tmp_path / "z.zarr"
    z = _create(path)
    with use_pipeline("zarr"):
        z[...] = np.arange(np.prod(SHAPE), dtype="u2").reshape(SHAPE) % 500
    shard = path / "c" / "0" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    # The first inner chunk starts the shard (index at the end): break its blosc payload
    # while keeping the header's sizes.
    for i in range(16, 40):
        raw[i] ^= 0xFF
    shard.write_bytes(bytes(raw))
    a = cuzarr.open(path, settings=cuzarr.Settings(threads=2))
    with pytest.raises(CorruptChunkError) as info:
        a[...]
    assert "c/0/0/0" in str(info.value) and "blosc" in str(info.value)


@pytest.mark.parametrize("typesize", [None, 1, 2, 8])
@pytest.mark.parametrize("shuffle", [-1, 0, 1, 2])
def test_blosc_encode_equals_numcodecs(shuffle: int, typesize: int | None) -> None:
    import numcodecs
    import numcodecs.blosc

    from cuzarr.codecs.numcodecs_ import NumcodecsBytesCodec

    for cname in numcodecs.blosc.list_compressors():
        config: dict[str, Any] = {"id": "blosc", "cname": cname, "clevel": 5, "shuffle": shuffle}
        if typesize is not None:
            config["typesize"] = typesize
        codec = numcodecs.get_codec(config)
        ours = NumcodecsBytesCodec("blosc", codec, typesize=typesize)
        for dtype in ("u1", "<u2", "<f8", "?", "<M8[s]", "<m8[ns]", "S3", "<U2", "V4"):
            x = (np.arange(3000) % 97).astype("<u4").view("u1")[: 12000].view(dtype)
            for data in (x, x.view(np.uint8), x.tobytes()):
                assert bytes(ours.encode(data)) == bytes(codec.encode(data)), (cname, dtype)
