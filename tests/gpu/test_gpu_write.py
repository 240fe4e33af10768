"""GPU writes read back by CPU tools; GPU-only codecs; corrupt chunks. Skipped without a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.errors import CorruptChunkError

from .nvcomp_limits import expect_undetected

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

WRITE_CODECS = {
    "zstd": [zarr.codecs.ZstdCodec(level=3)],
    "gzip": [zarr.codecs.GzipCodec(level=5)],
    "zstd-crc": [zarr.codecs.ZstdCodec(), zarr.codecs.Crc32cCodec()],
    "none": None,
}


@pytest.mark.parametrize("codec", sorted(WRITE_CODECS))
@pytest.mark.parametrize("dtype", ["<u2", "<f4", "<f8"])
def test_gpu_written_arrays_read_by_zarr_and_tensorstore(tmp_path, codec, dtype):
    shape = (40, 30)
    a = cuzarr.create(
        tmp_path / "a",
        shape=shape,
        chunks=(16, 16),
        dtype=dtype,
        compressors=WRITE_CODECS[codec],
        device="gpu",
    )
    data = (np.arange(np.prod(shape)) % 500).astype(dtype).reshape(shape)
    a[...] = cp.asarray(data)
    a[3:7, 20:29] = cp.asarray(data[3:7, 20:29] + 1)  # partial chunk update on the GPU
    data[3:7, 20:29] += 1
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)
    ts = pytest.importorskip("tensorstore")
    t = ts.open(
        {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "a")}}
    ).result()
    np.testing.assert_array_equal(t.read().result(), data)


@pytest.mark.parametrize("v2_compressor", ["zlib", "lz4", "gzip", "zstd"])
def test_gpu_written_v2_read_by_zarr(tmp_path, v2_compressor):
    import numcodecs

    zarr.create_array(
        tmp_path / "a",
        shape=(50,),
        chunks=(16,),
        dtype="<i4",
        zarr_format=2,
        compressors=numcodecs.get_codec({"id": v2_compressor}),
    )
    a = cuzarr.open(tmp_path / "a", mode="r+", device="gpu")
    data = np.arange(50, dtype="<i4") * 3
    a[...] = cp.asarray(data)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)


@pytest.mark.parametrize(
    "name", ["cuzarr.ans", "cuzarr.bitcomp", "cuzarr.cascaded", "cuzarr.gdeflate"]
)
def test_gpu_only_codecs_round_trip(tmp_path, name):
    from cuzarr.codecs.gpu_only import GPU_ONLY_CODECS

    z = zarr.create_array(
        tmp_path / "a",
        shape=(1000,),
        chunks=(256,),
        dtype="<i4",
        compressors=[GPU_ONLY_CODECS[name]()],
    )
    data = np.arange(1000, dtype="<i4") // 7
    z[...] = data
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)


@pytest.mark.parametrize("codec", ["zstd", "gzip"])
def test_corrupt_chunk_errors(tmp_path, codec, request):
    if codec == "zstd":
        expect_undetected(request)  # on a real GPU; gzip's CRC-32 catches its case there
    z = zarr.create_array(
        tmp_path / "a", shape=(64,), chunks=(32,), dtype="<f4", compressors=WRITE_CODECS[codec]
    )
    z[...] = np.arange(64, dtype="<f4")
    path = tmp_path / "a" / "c" / "1"
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2 :] = b"\x00" * (len(blob) - len(blob) // 2)
    path.write_bytes(bytes(blob))
    # The error names the chunk that is corrupt, not just the wave it was decoded in.
    with pytest.raises(CorruptChunkError, match=r"'c/1'"):
        cuzarr.open(tmp_path / "a", device="gpu")[...]
    path.write_bytes(bytes(blob[:5]))
    with pytest.raises(CorruptChunkError, match=r"c/1"):
        cuzarr.open(tmp_path / "a", device="gpu")[...]
    # The intact chunk still reads.
    np.testing.assert_array_equal(
        cp.asnumpy(cuzarr.open(tmp_path / "a", device="gpu")[:32]), np.arange(32, dtype="<f4")
    )


def _stored_keys(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("dtype", "fill", "chunk_value"),
    [
        ("<f4", 0.0, -0.0),  # zarr: -0.0 is not the fill 0.0 (bit patterns): kept
        ("<f8", -0.0, 0.0),  # and 0.0 is not the fill -0.0
        ("<f4", 0.0, 0.0),  # the fill itself: not stored
        ("<f4", float("nan"), float("nan")),  # NaN equals a NaN fill: not stored
        ("<f8", float("nan"), float("nan")),
        ("<f4", float("nan"), 1.5),
        ("<u2", 7, 7),
        ("<i4", 0, 3),
        ("|b1", False, False),
    ],
)
def test_gpu_empty_chunk_rule_is_zarrs(tmp_path, dtype, fill, chunk_value):
    """Chunks equal to the fill value are dropped exactly as zarr's own pipeline drops them."""
    data = np.full((32, 16), chunk_value, dtype)
    data[16:, :] = np.ones((16, 16), dtype)  # the second chunk is never the fill
    roots = {}
    for name in ("gpu", "zarr"):
        root = tmp_path / name
        kw = dict(shape=data.shape, chunks=(16, 16), dtype=dtype, fill_value=fill)
        if name == "gpu":
            a = cuzarr.create(root, device="gpu", **kw)
            a[...] = cp.asarray(data)
        else:
            with zarr.config.set(
                {"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}
            ):
                zarr.create_array(root, **kw)[...] = data
        roots[name] = root
    assert _stored_keys(roots["gpu"]) == _stored_keys(roots["zarr"])
    got = zarr.open_array(roots["gpu"], mode="r")[...]
    np.testing.assert_array_equal(got, data)
    assert np.array_equal(np.signbit(got), np.signbit(data))
