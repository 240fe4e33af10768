"""xarray's open_zarr / to_zarr with cuzarr configured: sharded round trips, region, append."""

from __future__ import annotations

import numpy as np
import pytest

xr = pytest.importorskip("xarray")
pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import zarr  # noqa: E402

import cuzarr  # noqa: E402
import cuzarr.dask as cdask  # noqa: E402

NT, NY, NX = 24, 20, 30


@pytest.fixture
def strict():
    cuzarr.reset_stats()
    with cuzarr.configure(strict=True):
        yield
    s = cuzarr.stats()
    assert s.get("fallback_reads", 0) == 0
    assert s.get("fallback_writes", 0) == 0


def dataset(nt=NT, t0=0):
    rng = np.random.default_rng(t0)
    t = np.arange(t0, t0 + nt)
    return xr.Dataset(
        {
            "temp": (("time", "y", "x"), rng.standard_normal((nt, NY, NX)).astype("f4")),
            "count": (("time", "x"), rng.integers(0, 1000, (nt, NX)).astype("i2")),
            "mask": (("y", "x"), (np.arange(NY * NX).reshape(NY, NX) % 3 == 0)),
        },
        coords={"time": t, "y": np.arange(NY) * 0.5, "x": np.arange(NX) * 2.0},
        attrs={"title": "cuzarr test"},
    )


ENCODING = {
    "temp": {"chunks": (4, 5, 5), "shards": (8, 10, 15)},
    "count": {"chunks": (4, 5), "shards": (8, 15)},
    "mask": {"chunks": (10, 15)},
}


def test_round_trip_sharded_with_shard_aligned_chunks(strict, tmp_path):
    ds = dataset().chunk({"time": 8, "y": 10, "x": 15})
    path = str(tmp_path / "ds.zarr")
    ds.to_zarr(path, encoding=ENCODING, zarr_format=3, consolidated=False)
    assert zarr.open_array(path + "/temp").shards == (8, 10, 15)

    chunks = cdask.xarray_chunks(path, block_nbytes=8 * 10 * 15 * 4)
    # one temp shard per block; every size a multiple of each variable's shard along the dim
    assert chunks == {"time": 8, "y": 10, "x": 15}
    back = xr.open_zarr(path, chunks=chunks, consolidated=False)
    assert back["temp"].chunks == ((8,) * 3, (10,) * 2, (15,) * 2)
    xr.testing.assert_identical(back.load(), dataset())
    assert cuzarr.stats().get("engine_reads", 0) > 0
    assert cuzarr.stats().get("engine_writes", 0) > 0


def test_xarray_chunks_merge_up_to_target(tmp_path):
    ds = dataset().chunk({"time": 8, "y": 10, "x": 15})
    path = str(tmp_path / "ds.zarr")
    ds.to_zarr(path, encoding=ENCODING, zarr_format=3, consolidated=False)
    # room for all of temp: whole dimensions
    assert cdask.xarray_chunks(path) == {"time": NT, "y": NY, "x": NX}
    # room for two shards of temp: the time axis doubles first
    assert cdask.xarray_chunks(path, block_nbytes=2 * 8 * 10 * 15 * 4) == {
        "time": 16, "y": 10, "x": 15,
    }


def test_open_zarr_on_a_cluster(strict, tmp_path):
    ds = dataset()
    path = str(tmp_path / "ds.zarr")
    ds.chunk({"time": 8}).to_zarr(path, encoding=ENCODING, zarr_format=3, consolidated=True)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        cdask.install(client, strict=True)
        back = xr.open_zarr(path, chunks=cdask.xarray_chunks(path, block_nbytes=1))
        xr.testing.assert_identical(back.compute(), ds)
        reads = sum(s.get("engine_reads", 0) for s in client.run(cuzarr.stats).values())
        fallbacks = sum(s.get("fallback_reads", 0) for s in client.run(cuzarr.stats).values())
        assert reads > 0
        assert fallbacks == 0
        # and a write from the cluster: shard-aligned Dask chunks, checked by xarray (safe_chunks)
        out = str(tmp_path / "out.zarr")
        back.to_zarr(out, encoding=ENCODING, zarr_format=3, consolidated=True)
    xr.testing.assert_identical(xr.open_zarr(out, consolidated=True).load(), ds)


def test_region_writes(strict, tmp_path):
    ds = dataset()
    path = str(tmp_path / "ds.zarr")
    # the template: metadata and coordinates only
    ds.chunk({"time": 8}).to_zarr(path, encoding=ENCODING, zarr_format=3, compute=False,
                                  consolidated=False)
    for start in range(0, NT, 8):  # whole shards along time
        part = ds.isel(time=slice(start, start + 8)).chunk({"time": 8})
        part.drop_vars(["mask", "y", "x"]).to_zarr(
            path, region={"time": slice(start, start + 8)}, consolidated=False
        )
    back = xr.open_zarr(path, consolidated=False).load()
    np.testing.assert_array_equal(back["temp"].values, ds["temp"].values)
    np.testing.assert_array_equal(back["count"].values, ds["count"].values)
    # region="auto" finds the slot from the coordinate
    patch = ds.isel(time=slice(8, 16)).copy(deep=True)
    patch["temp"][:] = -1.0
    patch["count"][:] = -1
    patch.drop_vars(["mask", "y", "x"]).chunk({"time": 8}).to_zarr(
        path, region="auto", consolidated=False
    )
    back = xr.open_zarr(path, consolidated=False).load()
    assert (back["temp"].isel(time=slice(8, 16)) == -1.0).all()
    np.testing.assert_array_equal(back["temp"].values[:8], ds["temp"].values[:8])
    np.testing.assert_array_equal(back["temp"].values[16:], ds["temp"].values[16:])


def test_append_dim(strict, tmp_path):
    full = dataset(nt=2 * NT)
    path = str(tmp_path / "ds.zarr")
    full.isel(time=slice(0, NT)).chunk({"time": 8}).to_zarr(
        path, encoding=ENCODING, zarr_format=3, consolidated=True
    )
    full.isel(time=slice(NT, 2 * NT)).drop_vars("mask").chunk({"time": 8}).to_zarr(
        path, append_dim="time", consolidated=True
    )
    back = xr.open_zarr(path, consolidated=True).load()
    assert back.sizes["time"] == 2 * NT
    xr.testing.assert_identical(back, full)


def test_consolidated_metadata_round_trip(strict, tmp_path):
    ds = dataset()
    path = str(tmp_path / "ds.zarr")
    ds.chunk({"time": 8}).to_zarr(path, encoding=ENCODING, zarr_format=3, consolidated=True)
    assert zarr.open_group(path, mode="r").metadata.consolidated_metadata is not None
    back = xr.open_zarr(path, consolidated=True, chunks=cdask.xarray_chunks(path))
    xr.testing.assert_identical(back.load(), ds)


def test_unsharded_v2_round_trip(strict, tmp_path):
    ds = dataset()
    path = str(tmp_path / "v2.zarr")
    ds.chunk({"time": 6}).to_zarr(
        path, zarr_format=2, encoding={"temp": {"chunks": (6, 10, 10)}}, consolidated=True
    )
    chunks = cdask.xarray_chunks(path, block_nbytes=6 * 10 * 10 * 4)
    # count and mask keep zarr's default chunks (whole here): the lcm makes those dims whole
    count_chunks = zarr.open_array(path + "/count").chunks
    assert chunks["time"] % 6 == 0
    assert chunks["time"] % count_chunks[0] == 0
    assert chunks["y"] % 10 == 0
    assert chunks["x"] % 10 == 0
    back = xr.open_zarr(path, chunks=chunks, consolidated=True)
    xr.testing.assert_identical(back.load(), ds)
