"""zarr's own GPU switch through cuzarr: CuPy buffers decoded and encoded on the GPU backend.

kvikio's documented use (``zarr.config.enable_gpu()``, then plain zarr) and czarr's
(``configure_gpu()``, then plain zarr) both reach cuzarr's GPU backend through
``cuzarr.Pipeline``: strict mode proves that nothing falls back to zarr's pipeline.
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import cuzarr

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

CODECS = {
    "zstd": {"compressors": [zarr.codecs.ZstdCodec(level=3)]},
    "gzip": {"compressors": [zarr.codecs.GzipCodec()]},
    "blosc": {"compressors": [zarr.codecs.BloscCodec(cname="lz4", shuffle="bitshuffle")]},
    "sharded-zstd": {
        "compressors": [zarr.codecs.ZstdCodec()],
        "shards": (20, 16),
    },
}


def _cpu_written(path, codec):
    kw = dict(CODECS[codec])
    z = zarr.create_array(path, shape=(40, 33), chunks=(10, 8), dtype="<i4", **kw)
    data = (np.arange(40 * 33, dtype="<i4") * 7919 % 10007).reshape(40, 33)
    z[...] = data
    return data


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_enable_gpu_reads_decode_on_the_gpu(tmp_path, codec):
    data = _cpu_written(tmp_path / "a", codec)
    cuzarr.reset_stats()
    with zarr.config.enable_gpu(), cuzarr.configure(strict=True):
        z = zarr.open_array(tmp_path / "a", mode="r")
        for sel in [(...,), (slice(3, 29), slice(5, 31)), (7, slice(None, None, 3))]:
            got = z[sel]
            assert isinstance(got, cp.ndarray)
            np.testing.assert_array_equal(cp.asnumpy(got), data[sel])
    stats = cuzarr.stats()
    assert stats.get("engine_reads", 0) > 0
    assert stats.get("fallback_reads", 0) == 0
    assert stats.get("gpu_cpu_decodes", 0) == 0


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_configure_gpu_makes_plain_zarr_return_cupy(tmp_path, codec):
    data = _cpu_written(tmp_path / "a", codec)
    before = zarr.config.get("ndbuffer")
    with cuzarr.configure(device="gpu", strict=True):
        got = zarr.open_array(tmp_path / "a", mode="r")[...]
        assert isinstance(got, cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(got), data)
    assert zarr.config.get("ndbuffer") == before  # restored on exit


@pytest.mark.parametrize("codec", ["zstd", "gzip", "sharded-zstd"])
def test_cupy_writes_through_zarr_are_read_by_cpu_tools(tmp_path, codec):
    data = _cpu_written(tmp_path / "a", codec)
    cuzarr.reset_stats()
    with cuzarr.configure(device="gpu", strict=True):
        z = zarr.open_array(tmp_path / "a", mode="r+")
        z[5:25, 3:20] = cp.asarray(data[5:25, 3:20] + 1)  # partial chunks and shards
        z[30:40, :] = cp.asarray(np.zeros((10, 33), "<i4"))  # empty chunks are not stored
    data[5:25, 3:20] += 1
    data[30:40, :] = 0
    assert cuzarr.stats().get("fallback_writes", 0) == 0
    assert cuzarr.stats().get("gpu_cpu_encodes", 0) == 0
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)
    ts = pytest.importorskip("tensorstore")
    t = ts.open(
        {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "a")}}
    ).result()
    np.testing.assert_array_equal(t.read().result(), data)


def test_numpy_buffers_stay_on_the_cpu_engine(tmp_path):
    data = _cpu_written(tmp_path / "a", "zstd")
    with cuzarr.configure(strict=True):
        got = zarr.open_array(tmp_path / "a", mode="r")[...]
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, data)


def test_cuzarr_device_gpu_from_the_environment_makes_plain_zarr_return_cupy(tmp_path, monkeypatch):
    from cuzarr import config

    data = _cpu_written(tmp_path / "a", "zstd")
    monkeypatch.setenv("CUZARR_DEVICE", "gpu")
    monkeypatch.setenv("CUZARR_STRICT", "1")
    saved = {k: zarr.config.get(k) for k in ("buffer", "ndbuffer", "codec_pipeline.path")}
    config._set_settings(None)  # the settings come from the environment again
    try:
        with zarr.config.set({"codec_pipeline.path": "cuzarr.Pipeline"}):
            got = zarr.open_array(tmp_path / "a", mode="r")[...]
        assert isinstance(got, cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(got), data)
    finally:
        zarr.config.set(saved)
        config._set_settings(None)
        monkeypatch.delenv("CUZARR_DEVICE")
        monkeypatch.delenv("CUZARR_STRICT")
        config._set_settings(None)
