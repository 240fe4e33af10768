"""The explicit API: open/create, groups, attributes, info, pickling, chunk access, errors."""

from __future__ import annotations

import json
import multiprocessing
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.testing import assert_same_array, chunk_keys, use_pipeline


def _model(shape: tuple[int, ...], dtype: str = "int32") -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


@pytest.fixture
def local_array(tmp_path: Path) -> tuple[cuzarr.Array, np.ndarray, Path]:
    path = tmp_path / "a.zarr"
    a = cuzarr.create(path, shape=(11, 7), chunks=(4, 3), dtype="int32", fill_value=-1)
    model = _model((11, 7))
    a[...] = model
    return a, model, path


# ---------------------------------------------------------------------- open / create


def test_create_matches_zarr_metadata(tmp_path: Path) -> None:
    kwargs: dict[str, Any] = {
        "shape": (10, 6), "chunks": (4, 3), "dtype": "f4", "fill_value": 2.5,
        "attributes": {"units": "K"}, "dimension_names": ["y", "x"],
    }
    a = cuzarr.create(tmp_path / "c.zarr", **kwargs)
    with use_pipeline("zarr"):
        zarr.create_array(zarr.storage.LocalStore(tmp_path / "z.zarr"), **kwargs)
    written = (tmp_path / "c.zarr/zarr.json").read_bytes()
    assert written == (tmp_path / "z.zarr/zarr.json").read_bytes()
    assert a.shape == (10, 6) and a.chunks == (4, 3) and a.shards is None
    assert a.dtype == np.dtype("f4") and a.ndim == 2 and a.size == 60 and a.nbytes == 240
    assert a.fill_value == np.float32(2.5)
    assert a.attrs["units"] == "K"
    assert a.metadata.dimension_names == ("y", "x")
    assert a.path == "" and a.zarr_format == 3
    assert_same_array(a[...], np.full((10, 6), 2.5, "f4"))


def test_open_local_path_url_and_store(local_array: Any) -> None:
    _a, model, path = local_array
    for target in (path, str(path), path.as_uri(), zarr.storage.LocalStore(path)):
        b = cuzarr.open(target)
        assert isinstance(b, cuzarr.Array)
        assert b.read_only
        assert_same_array(b[...], model, msg=repr(target))


def test_open_read_only_refuses_writes(local_array: Any) -> None:
    _a, model, path = local_array
    b = cuzarr.open(path)
    assert isinstance(b, cuzarr.Array)
    with pytest.raises(ValueError, match="read-only"):
        b[0, 0] = 5
    with pytest.raises(ValueError, match="read-only"):
        b.attrs["x"] = 1
    assert_same_array(b[...], model)
    c = cuzarr.open(path, mode="r+")
    assert isinstance(c, cuzarr.Array)
    c[0, 0] = 5
    assert b[0, 0] == 5


def test_open_missing_path_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.zarr"
    with pytest.raises(cuzarr.NodeNotFoundError, match=r"nope\.zarr"):
        cuzarr.open(missing)
    with pytest.raises(FileNotFoundError):
        cuzarr.open(missing)
    with pytest.raises(cuzarr.NodeNotFoundError, match="'missing/arr'"):
        cuzarr.open(zarr.storage.MemoryStore(), path="missing/arr")


@pytest.mark.parametrize("url", ["ftp://host/a.zarr", "sftp://host/a.zarr"])
def test_urls_without_a_store_are_unsupported(url: str) -> None:
    # Object-store URLs (s3://, gs://, https://) open through obstore: tests/test_s3.py.
    scheme = url.split("://")[0]
    with pytest.raises(cuzarr.UnsupportedError, match=f"no store for {scheme}://"):
        cuzarr.open(url)
    with pytest.raises(cuzarr.UnsupportedError, match=f"no store for {scheme}://"):
        cuzarr.create(url, shape=(2,), dtype="i4")


def test_open_rejects_bad_arguments(local_array: Any) -> None:
    _a, _model, path = local_array
    with pytest.raises(ValueError, match="mode"):
        cuzarr.open(path, mode="w")
    with pytest.raises(ValueError, match="storage_options"):
        cuzarr.open(path, storage_options={"anon": True})
    with pytest.raises(TypeError, match="int"):
        cuzarr.open(42)
    with pytest.raises(cuzarr.UnsupportedError, match="gpu"):
        cuzarr.open(path, device="gpu")


def test_create_overwrite(tmp_path: Path) -> None:
    a = cuzarr.create(tmp_path / "a.zarr", shape=(4,), chunks=(2,), dtype="i2")
    a[...] = 3
    with pytest.raises(Exception, match="exist"):  # zarr's ContainsArrayError
        cuzarr.create(tmp_path / "a.zarr", shape=(4,), chunks=(2,), dtype="i2")
    b = cuzarr.create(tmp_path / "a.zarr", shape=(6,), chunks=(3,), dtype="u1", overwrite=True)
    assert b.shape == (6,)
    assert_same_array(b[...], np.zeros(6, "u1"))


def test_settings_are_held_not_global(tmp_path: Path) -> None:
    a = cuzarr.create(tmp_path / "a.zarr", shape=(4,), chunks=(2,), dtype="i4")
    mine = cuzarr.Settings(threads=1, max_gap=7)
    b = cuzarr.open(tmp_path / "a.zarr", settings=mine)
    assert isinstance(b, cuzarr.Array)
    assert b.settings is mine
    with cuzarr.configure(threads=2):
        assert b.settings.threads == 1
        c = cuzarr.open(tmp_path / "a.zarr")
    assert c.settings.threads == 2  # taken at open time
    assert a.settings == cuzarr.get_settings()


def test_unsupported_dtype_raises(tmp_path: Path) -> None:
    with pytest.raises(cuzarr.UnsupportedError):
        cuzarr.create(tmp_path / "s.zarr", shape=(3,), dtype=str)


# ---------------------------------------------------------------------- reads and writes


def test_out_buffer(local_array: Any) -> None:
    a, model, _ = local_array
    out = np.empty((3, 7), "int32")
    assert a.read(np.s_[2:5], out=out) is out
    assert_same_array(out, model[2:5])
    strided = np.empty((6, 14), "int32")[::2, ::2]
    a.read(np.s_[5:8, :], out=strided[:3, :7])
    assert_same_array(strided[:3, :7], model[5:8])
    with pytest.raises(ValueError, match=r"expected shape \(3, 7\), got \(3, 6\)"):
        a.read(np.s_[2:5], out=np.empty((3, 6), "int32"))
    with pytest.raises(ValueError, match="expected dtype int32, got int64"):
        a.read(np.s_[2:5], out=np.empty((3, 7), "int64"))
    ro = np.empty((3, 7), "int32")
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        a.read(np.s_[2:5], out=ro)
    coords = np.empty(2, "int32")
    a.read(([1, 10], [6, 0]), out=coords)  # dispatched to vindex
    assert_same_array(coords, model[[1, 10], [6, 0]])


def test_index_errors(local_array: Any) -> None:
    a, _model, _ = local_array
    with pytest.raises(IndexError):
        a[11]
    with pytest.raises(IndexError):
        a[0, -8]
    with pytest.raises(IndexError, match="too many indices"):
        a[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        a[..., ...]
    with pytest.raises(ValueError, match="step"):
        a[::0]
    with pytest.raises(IndexError):
        a["x"]


def test_newaxis_and_scalars(local_array: Any) -> None:
    a, model, _ = local_array
    assert_same_array(a[None, 2:4, ..., None], model[None, 2:4, ..., None])
    assert_same_array(a[:, None, 3], model[:, None, 3])
    assert isinstance(a[..., 2, 3], np.integer)
    assert a[2, 3] == model[2, 3]
    a[None, 0, :] = 100
    model[0, :] = 100
    assert_same_array(a[...], model)


def test_writes_broadcast_and_convert(local_array: Any) -> None:
    a, model, _ = local_array
    a[1:4, :] = np.arange(7)  # broadcast along axis 0 (zarr cannot)
    model[1:4, :] = np.arange(7)
    a[:, 2] = 9.7  # scalar, converted as zarr does
    model[:, 2] = 9
    a.write((slice(5, 9), slice(None, None, -2)), np.arange(4)[:, None] * 10)
    model[5:9, ::-2] = np.arange(4)[:, None] * 10
    assert_same_array(a[...], model)
    with pytest.raises(ValueError, match="broadcast"):
        a[0:2, 0:2] = np.arange(3)


def test_the_engine_gets_a_read_only_view_of_a_value_of_the_selections_shape(
    local_array: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, model, _ = local_array
    seen: list[np.ndarray] = []
    real = type(a._engine).write

    def spy(self: Any, store: Any, requests: Any, value: Any, *args: Any, **kw: Any) -> None:
        seen.append(value)
        real(self, store, requests, value, *args, **kw)

    monkeypatch.setattr(type(a._engine), "write", spy)
    value = np.arange(3 * 7, dtype=model.dtype).reshape(3, 7) + 1
    a[1:4, :] = value  # the shape already: no broadcast
    a[4:6, :] = value[0]  # broadcast
    assert [v.shape for v in seen] == [(3, 7), (2, 7)]
    assert all(not v.flags.writeable for v in seen)
    assert np.shares_memory(seen[0], value) and value.flags.writeable  # no copy; caller's stays
    model[1:4, :] = value
    model[4:6, :] = value[0]
    assert_same_array(a[...], model)


def test_write_empty_chunks_option(tmp_path: Path) -> None:
    a = cuzarr.create(tmp_path / "a.zarr", shape=(8,), chunks=(4,), dtype="i4", fill_value=0)
    a[...] = 0
    assert chunk_keys(a.store) == set()
    a[...] = 1
    a[0:4] = 0
    assert chunk_keys(a.store) == {"c/1"}
    b = cuzarr.open(tmp_path / "a.zarr", mode="r+", write_empty_chunks=True)
    assert isinstance(b, cuzarr.Array)
    b[0:4] = 0
    assert chunk_keys(b.store) == {"c/0", "c/1"}


def test_read_chunk_and_iter_chunks(local_array: Any) -> None:
    a, model, _ = local_array
    assert_same_array(a.read_chunk((0, 0)), model[0:4, 0:3])
    assert_same_array(a.read_chunk((2, 2)), model[8:11, 6:7])  # clipped edge chunk
    with pytest.raises(IndexError, match="outside the chunk grid"):
        a.read_chunk((3, 0))
    with pytest.raises(IndexError):
        a.read_chunk((0,))
    seen = dict(a.iter_chunks())
    assert sorted(seen) == [(i, j) for i in range(3) for j in range(3)]
    for (i, j), chunk in seen.items():
        assert_same_array(chunk, model[i * 4 : (i + 1) * 4, j * 3 : (j + 1) * 3])


def test_sharded_chunks_and_iter(tmp_path: Path) -> None:
    a = cuzarr.create(tmp_path / "s.zarr", shape=(10, 9), chunks=(2, 3), shards=(4, 6), dtype="u2")
    model = _model((10, 9), "u2")
    a[...] = model
    assert (a.chunks, a.shards, a.cdata_shape, a.nchunks) == ((2, 3), (4, 6), (5, 3), 15)
    assert_same_array(a.read_chunk((4, 2)), model[8:10, 6:9])
    got = list(a.iter_chunks())
    assert sorted(c for c, _ in got) == [(i, j) for i in range(5) for j in range(3)]
    for (i, j), chunk in got:
        assert_same_array(chunk, model[i * 2 : (i + 1) * 2, j * 3 : (j + 1) * 3])
    info = a.info
    assert (info.unit, info.n_objects, info.n_present, info.n_missing) == ("shard", 6, 6, 0)
    assert info.codecs[0].startswith("sharding_indexed[")


def test_info_and_nbytes_stored(local_array: Any) -> None:
    a, _model, path = local_array
    a[0:4, 0:3] = -1  # one chunk back to fill: deleted
    info = a.info
    assert isinstance(info, cuzarr.array.ArrayInfo)
    assert (info.n_objects, info.n_present, info.n_missing) == (9, 8, 1)
    on_disk = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    assert a.nbytes_stored() == info.nbytes_stored == on_disk
    with use_pipeline("zarr"):
        assert a.nbytes_stored() == zarr.open_array(path).nbytes_stored()
    chunk_bytes = sum(p.stat().st_size for p in (path / "c").rglob("*") if p.is_file())
    assert info.compression_ratio == pytest.approx(8 * 4 * 3 * 4 / chunk_bytes)
    text = str(info)
    assert "8 present, 1 missing of 9" in text and "zstd" in text
    with pytest.raises(AttributeError):
        info.n_present = 3  # type: ignore[misc]


def test_to_zarr_uses_cuzarr_engine(local_array: Any) -> None:
    a, model, path = local_array
    with use_pipeline("zarr"):  # whatever zarr's configured pipeline is
        z = a.to_zarr()
        cuzarr.reset_stats()
        assert_same_array(z[2:9, 1:6], model[2:9, 1:6])
        z[0, 0] = 77
        counts = cuzarr.stats()
    assert counts.get("engine_reads", 0) >= 1 and counts.get("engine_writes", 0) >= 1
    assert not any(v for k, v in counts.items() if k.startswith("fallback"))
    assert a[0, 0] == 77
    assert isinstance(z, zarr.Array) and z.shape == a.shape
    ro = cuzarr.open(path)
    assert isinstance(ro, cuzarr.Array)
    assert ro.to_zarr().read_only


# ---------------------------------------------------------------------- attributes


@pytest.mark.parametrize("fmt", [2, 3])
def test_attrs_persist(tmp_path: Path, fmt: int) -> None:
    path = tmp_path / "a.zarr"
    a = cuzarr.create(path, shape=(3,), dtype="i4", zarr_format=fmt, attributes={"a": 1})
    a.attrs["b"] = [1, 2]
    a.attrs.update({"c": "x", "d": None})
    del a.attrs["a"]
    expected = {"b": [1, 2], "c": "x", "d": None}
    assert a.attrs.asdict() == expected and a.metadata.attributes == expected
    with use_pipeline("zarr"):
        assert zarr.open_array(path).attrs.asdict() == expected
    reopened = cuzarr.open(path)
    assert reopened.attrs.asdict() == expected
    doc = json.loads((path / ("zarr.json" if fmt == 3 else ".zattrs")).read_text())
    assert (doc["attributes"] if fmt == 3 else doc) == expected
    assert not list(path.glob("*.partial"))  # written by temp file and rename
    a.attrs.put({"only": 1})
    assert dict(cuzarr.open(path).attrs) == {"only": 1}
    with pytest.raises(KeyError):
        del a.attrs["missing"]


# ---------------------------------------------------------------------- groups


@pytest.mark.parametrize("fmt", [2, 3])
def test_groups(tmp_path: Path, fmt: int) -> None:
    with use_pipeline("zarr"):
        root = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=fmt)
        root.attrs["title"] = "t"
        temp = root.create_group("temp")
        t2m = temp.create_array("t2m", shape=(4, 5), chunks=(2, 5), dtype="f8")
        t2m[...] = np.arange(20.0).reshape(4, 5)
        root.create_array("mask", shape=(3,), dtype="bool")
        root.create_group("empty")
    g = cuzarr.open(tmp_path / "g.zarr", mode="r+")
    assert isinstance(g, cuzarr.Group)
    assert g.zarr_format == fmt and g.path == "" and g.attrs["title"] == "t"
    assert g.keys() == ["empty", "mask", "temp"] == list(g)
    assert len(g) == 3
    assert [n for n, _ in g.arrays()] == ["mask"]
    assert [n for n, _ in g.groups()] == ["empty", "temp"]
    assert "temp/t2m" in g and "temp" in g and "nope" not in g and "temp/nope" not in g
    arr = g["temp/t2m"]
    assert isinstance(arr, cuzarr.Array) and arr.path == "temp/t2m"
    assert_same_array(arr[1:3], np.arange(20.0).reshape(4, 5)[1:3])
    sub = g["temp"]
    assert isinstance(sub, cuzarr.Group) and sub.keys() == ["t2m"]
    assert isinstance(sub["t2m"], cuzarr.Array)
    with pytest.raises(KeyError, match="nope"):
        g["nope"]
    assert g.get("nope") is None
    g.attrs["more"] = 2
    with use_pipeline("zarr"):
        assert zarr.open_group(tmp_path / "g.zarr").attrs.asdict() == {"title": "t", "more": 2}
    new = g.create_array("new", shape=(2,), dtype="i4", fill_value=3)
    assert new.zarr_format == fmt and g.keys() == ["empty", "mask", "new", "temp"]
    assert_same_array(g["new"][...], np.array([3, 3], "i4"))


def test_group_in_memory_store() -> None:
    store = zarr.storage.MemoryStore()
    with use_pipeline("zarr"):
        root = zarr.open_group(store, mode="w")
        root.create_array("a/b/c", shape=(2,), dtype="i4")
    g = cuzarr.open(store)
    assert isinstance(g, cuzarr.Group)
    assert g.keys() == ["a"]
    assert isinstance(g["a/b"], cuzarr.Group)
    assert isinstance(g["a"]["b/c"], cuzarr.Array)


# ---------------------------------------------------------------------- pickling


def test_pickle_memory_store_by_value() -> None:
    store = zarr.storage.MemoryStore()
    a = cuzarr.create(store, shape=(6,), chunks=(4,), dtype="i4")
    a[...] = np.arange(6)
    a.attrs["k"] = "v"
    b = pickle.loads(pickle.dumps(a))
    assert_same_array(b[...], np.arange(6, dtype="i4"))
    assert b.attrs["k"] == "v" and b.settings == a.settings
    b[0] = 100  # zarr pickles a MemoryStore by value: the copy is independent
    assert a[0] == 0 and b[0] == 100


def _read_in_child(blob: bytes) -> list[int]:
    arr = pickle.loads(blob)
    arr[0] = -5
    return [int(x) for x in arr[...]]


def test_pickle_local_across_processes(tmp_path: Path) -> None:
    a = cuzarr.create(tmp_path / "a.zarr", shape=(5,), chunks=(2,), dtype="i4", fill_value=1)
    a[2:] = 7
    blob = pickle.dumps(a)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        got = pool.apply(_read_in_child, (blob,))
    assert got == [-5, 1, 7, 7, 7]
    assert a[0] == -5  # the child wrote to the same folder


def test_pickle_group(tmp_path: Path) -> None:
    with use_pipeline("zarr"):
        zarr.open_group(tmp_path / "g.zarr", mode="w").create_array("x", shape=(2,), dtype="i1")
    g = cuzarr.open(tmp_path / "g.zarr")
    h = pickle.loads(pickle.dumps(g))
    assert isinstance(h, cuzarr.Group) and h.keys() == ["x"]
    assert_same_array(h["x"][...], np.zeros(2, "i1"))
