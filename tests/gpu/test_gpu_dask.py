"""Dask and xarray on the GPU: CuPy blocks with CuPy meta, written back by CuPy blocks."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import cuzarr

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
dask = pytest.importorskip("dask")
cuzarr_dask = pytest.importorskip("cuzarr.dask")


@pytest.fixture
def sharded(tmp_path):
    z = zarr.create_array(
        tmp_path / "a",
        shape=(64, 60),
        chunks=(16, 15),
        shards=(32, 30),
        dtype="<f4",
        compressors=[zarr.codecs.ZstdCodec()],
    )
    data = np.arange(64 * 60, dtype="<f4").reshape(64, 60)
    z[...] = data
    return tmp_path / "a", data


def test_from_zarr_on_the_gpu_has_cupy_blocks_and_meta(sharded):
    path, data = sharded
    x = cuzarr_dask.from_zarr(path, device="gpu", block_nbytes=8000)
    assert isinstance(x._meta, cp.ndarray)
    assert len(x.chunks[1]) == 2  # blocks follow shards
    with dask.config.set(scheduler="threads"):
        y = (x * 2 + 1).compute()
        total = x.sum().compute()
    assert isinstance(y, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(y), data * 2 + 1)
    assert float(total) == pytest.approx(float(data.sum()))


def test_to_zarr_from_cupy_blocks_is_read_by_cpu_tools(sharded, tmp_path):
    path, data = sharded
    x = cuzarr_dask.from_zarr(path, device="gpu")
    with dask.config.set(scheduler="threads"):
        cuzarr_dask.to_zarr(x[:, ::-1] + 0, tmp_path / "b", chunks=(16, 15), shards=(32, 30))
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "b", mode="r")[...], data[:, ::-1])


def test_xarray_wraps_gpu_dask_arrays(sharded):
    xr = pytest.importorskip("xarray")
    path, data = sharded
    da = xr.DataArray(cuzarr_dask.from_zarr(path, device="gpu"), dims=("y", "x"))
    with dask.config.set(scheduler="threads"):
        mean = da.mean("x").compute()
    assert isinstance(mean.data, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(mean.data), data.mean(axis=1), rtol=1e-6)


def test_xarray_open_zarr_on_the_gpu(tmp_path):
    xr = pytest.importorskip("xarray")
    data = np.arange(200, dtype="f4").reshape(10, 20)
    xr.Dataset({"v": (("y", "x"), data)}).to_zarr(tmp_path / "d", zarr_format=3, consolidated=False)
    with cuzarr.configure(device="gpu", strict=True):
        ds = xr.open_zarr(tmp_path / "d", consolidated=False, chunks=None).load()
    assert isinstance(ds["v"].data, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(ds["v"].data), data)
    with pytest.raises(TypeError):
        ds["v"].values  # noqa: B018 - numpy.asarray of a CuPy array, refused as by CuPy
