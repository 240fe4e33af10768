"""GPU vs CPU parity: the same arrays read with device="gpu" (CuPy) and device="cpu" (NumPy).

Skipped without a GPU (see conftest.py). Every case writes with zarr's default pipeline, then
compares cuzarr's GPU read to cuzarr's CPU read and to zarr's own read.
"""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest
import zarr

import cuzarr

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

DTYPES = ["|u1", "<i2", "<u4", "<i8", "<f2", "<f4", "<f8", "<c8", "?"]
V3_CODECS = {
    "raw": dict(compressors=None),
    "zstd": dict(compressors=[zarr.codecs.ZstdCodec(level=3)]),
    "zstd-checksum": dict(compressors=[zarr.codecs.ZstdCodec(level=3, checksum=True)]),
    "gzip": dict(compressors=[zarr.codecs.GzipCodec(level=5)]),
    "blosc-zstd": dict(compressors=[zarr.codecs.BloscCodec(cname="zstd", shuffle="shuffle")]),
    "blosc-lz4-bit": dict(compressors=[zarr.codecs.BloscCodec(cname="lz4", shuffle="bitshuffle")]),
    "blosc-zlib": dict(compressors=[zarr.codecs.BloscCodec(cname="zlib", shuffle="noshuffle")]),
    "blosc-blosclz": dict(compressors=[zarr.codecs.BloscCodec(cname="blosclz")]),
    "crc32c": dict(compressors=[zarr.codecs.ZstdCodec(), zarr.codecs.Crc32cCodec()]),
    "big-endian": dict(
        serializer=zarr.codecs.BytesCodec(endian="big"), compressors=[zarr.codecs.ZstdCodec()]
    ),
    "transpose": dict(
        filters=[zarr.codecs.TransposeCodec(order=(1, 0, 2))], compressors=[zarr.codecs.ZstdCodec()]
    ),
}
V2_COMPRESSORS = [None, "zlib", "gzip", "lz4", "zstd", "blosc"]
SELECTIONS = [
    (...,),
    (slice(3, 17), slice(None), slice(5, 6)),
    (2, slice(None, None, 3), -1),
    (slice(None, None, -2), 0, slice(1, 20, 4)),
]
SHAPE, CHUNKS = (20, 18, 22), (6, 5, 8)


def _data(dtype):
    rng = np.random.default_rng(0)
    base = np.arange(np.prod(SHAPE)) % 1000 + rng.integers(0, 8, np.prod(SHAPE))
    return base.astype(np.dtype(dtype)).reshape(SHAPE)


def _check(path, data, selections=SELECTIONS):
    gpu = cuzarr.open(path, device="gpu")
    cpu = cuzarr.open(path, device="cpu")
    for sel in selections:
        got = gpu[sel]
        assert isinstance(got, cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(got), cpu[sel])
        np.testing.assert_array_equal(cp.asnumpy(got), data[sel])


@pytest.mark.parametrize("codec", sorted(V3_CODECS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_v3_parity(tmp_path, codec, dtype):
    z = zarr.create_array(
        tmp_path / "a", shape=SHAPE, chunks=CHUNKS, dtype=dtype, **V3_CODECS[codec]
    )
    data = _data(dtype)
    z[...] = data
    _check(tmp_path / "a", data)


@pytest.mark.parametrize("compressor", V2_COMPRESSORS)
@pytest.mark.parametrize("order", ["C", "F"])
def test_v2_parity(tmp_path, compressor, order):
    comp = None if compressor is None else numcodecs.get_codec({"id": compressor})
    z = zarr.create_array(
        tmp_path / "a",
        shape=SHAPE,
        chunks=CHUNKS,
        dtype="<f4",
        zarr_format=2,
        order=order,
        compressors=comp,
    )
    data = _data("<f4")
    z[...] = data
    _check(tmp_path / "a", data)


@pytest.mark.parametrize("index_location", ["start", "end"])
@pytest.mark.parametrize("codec", ["zstd", "blosc-zstd", "gzip"])
def test_sharded_parity(tmp_path, codec, index_location):
    z = zarr.create_array(
        tmp_path / "a",
        shape=SHAPE,
        chunks=(3, 5, 4),
        shards=(6, 10, 8),
        dtype="<u2",
        **V3_CODECS[codec],
    )
    data = _data("<u2")
    z[...] = data
    z[0:6, 0:10, 0:8] = 0  # one empty shard, missing inner chunks elsewhere
    data[0:6, 0:10, 0:8] = 0
    _check(tmp_path / "a", data)


def test_missing_chunks_and_fill(tmp_path):
    z = zarr.create_array(
        tmp_path / "a",
        shape=SHAPE,
        chunks=CHUNKS,
        dtype="<f8",
        fill_value=np.nan,
        compressors=[zarr.codecs.ZstdCodec()],
    )
    z[0:6, 0:5, 0:8] = 1.0
    data = np.full(SHAPE, np.nan)
    data[0:6, 0:5, 0:8] = 1.0
    _check(tmp_path / "a", data)


def test_read_into_out_and_oindex(tmp_path):
    z = zarr.create_array(
        tmp_path / "a",
        shape=SHAPE,
        chunks=CHUNKS,
        dtype="<i4",
        compressors=[zarr.codecs.ZstdCodec()],
    )
    data = _data("<i4")
    z[...] = data
    a = cuzarr.open(tmp_path / "a", device="gpu")
    out = cp.empty((4, 18, 22), "<i4")
    assert a.read((slice(2, 6),), out=out) is out
    np.testing.assert_array_equal(cp.asnumpy(out), data[2:6])
    idx = np.array([0, 5, 19])
    np.testing.assert_array_equal(cp.asnumpy(a.oindex[idx, :, idx]), data[idx][:, :, idx])
