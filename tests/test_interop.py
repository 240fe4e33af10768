"""Interop with independent implementations: TensorStore and zarrs-python.

Arrays cuzarr writes must read back exactly (NaN-aware, bit for bit otherwise) through
TensorStore and through zarrs-python's Rust pipeline; arrays those write must read back exactly
through cuzarr. cuzarr's side always runs with ``strict=True`` and its counters are checked, so
the engine (not the fallback to zarr's pipeline) is what served it. zarrs runs with
``codec_pipeline.strict`` so its Rust implementation (not its own Python fallback) serves its side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    ZstdCodec,
)
from zarr.core.buffer import default_buffer_prototype

import cuzarr

ts = pytest.importorskip("tensorstore")
zarrs = pytest.importorskip("zarrs")

ZARRS_PIPELINE = "zarrs.ZarrsCodecPipeline"
DEFAULT_PIPELINE = "zarr.core.codec_pipeline.BatchedCodecPipeline"


# ---------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One array layout: the kwargs of ``zarr.create_array`` plus the data written."""

    id: str
    shape: tuple[int, ...]
    dtype: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    fill_value: Any = 0
    #: leave the chunks of the last chunk row along axis 0 unwritten (read as fill value)
    missing: bool = False

    @property
    def zarr_format(self) -> int:
        return int(self.kwargs.get("zarr_format", 3))


def _v3(id: str, **kw: Any) -> Case:
    kw.setdefault("shape", (9, 7))
    kw.setdefault("dtype", "int32")
    kwargs = kw.pop("kwargs", {})
    kwargs.setdefault("chunks", (4, 3))
    return Case(id=id, kwargs=kwargs, **kw)


def _v2(id: str, **kw: Any) -> Case:
    kw.setdefault("shape", (9, 7))
    kw.setdefault("dtype", "int32")
    kwargs = kw.pop("kwargs", {})
    kwargs.setdefault("chunks", (4, 3))
    kwargs["zarr_format"] = 2
    return Case(id=id, kwargs=kwargs, **kw)


CASES: list[Case] = [
    _v3("v3-bytes-only", kwargs={"compressors": None}),
    _v3("v3-zstd", kwargs={"compressors": ZstdCodec(level=3)}),
    _v3("v3-gzip", kwargs={"compressors": GzipCodec(level=5)}),
    _v3(
        "v3-blosc",
        dtype="float32",
        fill_value=float("nan"),
        kwargs={"compressors": BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4)},
    ),
    _v3("v3-zstd-crc32c", kwargs={"compressors": [ZstdCodec(level=1), Crc32cCodec()]}),
    _v3("v3-crc32c-only", kwargs={"compressors": Crc32cCodec()}),
    _v3(
        "v3-transpose",
        shape=(5, 6, 7),
        kwargs={"chunks": (2, 4, 3), "filters": TransposeCodec(order=(2, 0, 1))},
    ),
    _v3(
        "v3-sharded-index-end",
        shape=(10, 11),
        kwargs={"chunks": (2, 3), "shards": (4, 6), "compressors": ZstdCodec(level=1)},
        missing=True,
    ),
    _v3(
        "v3-sharded-index-start",
        shape=(10, 11),
        kwargs={
            "chunks": (4, 6),
            "serializer": ShardingCodec(
                chunk_shape=(2, 3),
                codecs=[BytesCodec(), GzipCodec(level=1)],
                index_location="start",
            ),
            "compressors": None,
        },
        missing=True,
    ),
    _v3("v3-uint8", dtype="uint8", fill_value=7),
    _v3("v3-int16", dtype="int16", fill_value=-3),
    _v3("v3-uint16", dtype="uint16"),
    _v3("v3-float64-nan", dtype="float64", fill_value=float("nan"), missing=True),
    _v3("v3-float32-negzero", dtype="float32", fill_value=-0.0, missing=True),
    _v3("v3-complex64", dtype="complex64", fill_value=complex(1.5, -2.0)),
    _v3("v3-bool", dtype="bool", fill_value=True, missing=True),
    _v3(
        "v3-big-endian",
        dtype="float64",
        kwargs={"serializer": BytesCodec(endian="big"), "compressors": ZstdCodec(level=1)},
    ),
    _v3("v3-big-endian-int16", dtype="int16", kwargs={"serializer": BytesCodec(endian="big")}),
    _v3("v3-ragged", shape=(11, 5, 3), kwargs={"chunks": (4, 2, 2)}),
    _v3("v3-missing-chunks", fill_value=42, missing=True),
    _v3(
        "v3-separator-dot",
        kwargs={"chunk_key_encoding": {"name": "default", "separator": "."}},
        missing=True,
    ),
    _v3("v3-1d", shape=(13,), dtype="uint16", kwargs={"chunks": (5,)}),
    _v3("v3-0d", shape=(), dtype="float64", kwargs={"chunks": ()}),
    _v2("v2-zlib-C", kwargs={"compressors": numcodecs.Zlib(level=1), "order": "C"}),
    _v2("v2-zlib-F", kwargs={"compressors": numcodecs.Zlib(level=1), "order": "F"}),
    _v2("v2-zstd-C", dtype="float64", kwargs={"compressors": numcodecs.Zstd(level=1)}),
    _v2(
        "v2-zstd-F",
        dtype="int16",
        shape=(7, 6, 5),
        kwargs={"chunks": (3, 4, 2), "compressors": numcodecs.Zstd(level=1), "order": "F"},
    ),
    _v2(
        "v2-blosc-C",
        dtype="float32",
        fill_value=float("nan"),
        kwargs={"compressors": numcodecs.Blosc(cname="zstd", clevel=3, shuffle=1)},
        missing=True,
    ),
    _v2(
        "v2-blosc-F",
        dtype="uint16",
        kwargs={"compressors": numcodecs.Blosc(cname="lz4", clevel=1, shuffle=2), "order": "F"},
    ),
    _v2("v2-no-compressor", dtype="uint8", kwargs={"compressors": None}, missing=True),
    _v2("v2-no-compressor-F", dtype="int16", kwargs={"compressors": None, "order": "F"}),
    _v2(
        "v2-separator-slash",
        kwargs={
            "compressors": numcodecs.Zlib(level=1),
            "chunk_key_encoding": {"name": "v2", "separator": "/"},
        },
        missing=True,
    ),
    _v2(
        "v2-separator-dot",
        kwargs={
            "compressors": numcodecs.Zlib(level=1),
            "chunk_key_encoding": {"name": "v2", "separator": "."},
        },
    ),
    _v2("v2-bool", dtype="bool", kwargs={"compressors": numcodecs.Zlib(level=1)}),
    _v2("v2-complex64", dtype="complex64", kwargs={"compressors": numcodecs.Zstd(level=1)}),
    _v2("v2-big-endian", dtype=">i4", kwargs={"compressors": numcodecs.Zlib(level=1)}),
]


def _case_params() -> list[Any]:
    return [pytest.param(c, id=c.id) for c in CASES]


# ---------------------------------------------------------------------------- data model


def _random(shape: tuple[int, ...], dtype: np.dtype[Any], seed: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    if dtype.kind == "f":
        a = rng.standard_normal(shape).astype(dtype) * 100
        flat = a.reshape(-1)
        if flat.size > 3:
            flat[::5] = np.nan
            flat[1::7] = -0.0
            flat[2::11] = np.inf
        return a
    if dtype.kind == "c":
        a = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
        flat = a.reshape(-1)
        if flat.size > 3:
            flat[::6] = complex(np.nan, 1.0)
            flat[1::9] = complex(-0.0, np.nan)
        return a
    raise AssertionError(f"no generator for {dtype}")


def _native(dtype: str) -> np.dtype[Any]:
    return np.dtype(dtype).newbyteorder("=")


def _writes(case: Case) -> list[tuple[Any, ...]]:
    """The selections written, in order: a bulk write, then an overlapping partial one."""
    if case.shape == ():
        return [()]
    n0 = case.shape[0]
    c0 = case.kwargs["chunks"][0]
    if "shards" in case.kwargs:
        c0 = case.kwargs["shards"][0]
    stop = (n0 - 1) // c0 * c0 if case.missing else n0
    first = (slice(0, stop),)
    second = tuple(slice(1, max(1, min(n, stop if i == 0 else n) - 1)) for i, n in
                   enumerate(case.shape))
    return [first, second]


def _model(case: Case, seed: int = 0) -> tuple[np.ndarray[Any, Any], list[tuple[Any, Any]]]:
    """The expected array, and the ``(selection, values)`` writes that produce it."""
    dt = _native(case.dtype)
    model = np.full(case.shape, case.fill_value, dtype=dt)
    writes = []
    for i, sel in enumerate(_writes(case)):
        values = _random(model[sel].shape, dt, seed + i)
        model[sel] = values
        writes.append((sel, values))
    return model, writes


def assert_same(actual: Any, expected: np.ndarray[Any, Any]) -> None:
    """Exact equality: NaN where NaN, otherwise bit-identical (so -0.0 is not 0.0)."""
    actual = np.asarray(actual)
    assert actual.shape == expected.shape
    assert actual.dtype.newbyteorder("=") == expected.dtype.newbyteorder("=")
    a = np.ascontiguousarray(actual, dtype=expected.dtype.newbyteorder("="))
    e = np.ascontiguousarray(expected)
    if e.dtype.kind in "fc":
        ar = a.view(a.real.dtype) if a.ndim else a.reshape(1).view(a.real.dtype)
        er = e.view(e.real.dtype) if e.ndim else e.reshape(1).view(e.real.dtype)
        nan_a, nan_e = np.isnan(ar), np.isnan(er)
        np.testing.assert_array_equal(nan_a, nan_e)
        bits = np.dtype(f"u{ar.dtype.itemsize}")
        np.testing.assert_array_equal(ar[~nan_a].view(bits), er[~nan_e].view(bits))
    else:
        np.testing.assert_array_equal(a, e)


# ---------------------------------------------------------------------------- helpers


def _create(case: Case, root: Path, name: str = "a") -> zarr.Array[Any]:
    return zarr.create_array(
        zarr.storage.LocalStore(root),
        name=name,
        shape=case.shape,
        dtype=case.dtype,
        fill_value=case.fill_value,
        **case.kwargs,
    )


def _open(root: Path, name: str = "a") -> zarr.Array[Any]:
    return zarr.open_array(zarr.storage.LocalStore(root), path=name, mode="r+")


def _cuzarr_write(
    case: Case, root: Path, writes: list[tuple[Any, Any]], name: str = "a"
) -> None:
    with cuzarr.configure(strict=True):
        cuzarr.reset_stats()
        arr = _create(case, root, name)
        assert arr._async_array.codec_pipeline.engine is not None  # type: ignore[attr-defined]
        for sel, values in writes:
            arr[sel] = values
        s = cuzarr.stats()
    assert s.get("engine_writes", 0) >= len(writes), s
    assert not any(s.get(k, 0) for k in ("fallback_arrays", "fallback_writes")), s


def _cuzarr_read(root: Path, sel: Any = ...) -> np.ndarray[Any, Any]:
    with cuzarr.configure(strict=True):
        cuzarr.reset_stats()
        arr = _open(root)
        assert isinstance(arr._async_array.codec_pipeline, cuzarr.Pipeline)
        got = arr[sel]
        s = cuzarr.stats()
    if arr.size:
        assert s.get("engine_reads", 0) >= 1, s
    assert not any(s.get(k, 0) for k in ("fallback_arrays", "fallback_reads")), s
    return np.asarray(got)


def _stored_keys(root: Path, name: str = "a") -> set[str]:
    """Keys of the chunks (or shards) stored under ``root/name``, metadata excluded."""
    base = root / name
    return {
        p.relative_to(base).as_posix()
        for p in base.rglob("*")
        if p.is_file() and p.name not in ("zarr.json", ".zarray", ".zattrs", ".zgroup")
    }


# ---------------------------------------------------------------------------- TensorStore


def _ts_spec(case: Case, root: Path) -> dict[str, Any]:
    return {
        "driver": "zarr3" if case.zarr_format == 3 else "zarr",
        "kvstore": {"driver": "file", "path": str(root / "a") + "/"},
    }


def _metadata_doc(case: Case, tmp_path: Path) -> dict[str, Any]:
    """The metadata zarr writes for ``case`` (from a scratch array made by zarr's pipeline)."""
    scratch = tmp_path / "scratch"
    with zarr.config.set({"codec_pipeline.path": DEFAULT_PIPELINE}):
        _create(case, scratch, name="m")
    name = "zarr.json" if case.zarr_format == 3 else ".zarray"
    doc: dict[str, Any] = json.loads((scratch / "m" / name).read_text())
    return doc


def _ts_metadata(case: Case, doc: dict[str, Any]) -> dict[str, Any]:
    """zarr's metadata document, as TensorStore's ``metadata`` spec member takes it."""
    doc = dict(doc)
    if case.zarr_format == 3:
        for key in ("zarr_format", "node_type", "storage_transformers", "attributes"):
            doc.pop(key, None)
    return doc


@pytest.mark.parametrize("case", _case_params())
def test_cuzarr_writes_tensorstore_reads(case: Case, tmp_path: Path) -> None:
    model, writes = _model(case)
    _cuzarr_write(case, tmp_path, writes)
    got = ts.open(_ts_spec(case, tmp_path), open=True, read=True).result().read().result()
    assert_same(got, model)
    assert_same(_cuzarr_read(tmp_path), model)


@pytest.mark.parametrize("case", _case_params())
def test_tensorstore_writes_cuzarr_reads(case: Case, tmp_path: Path) -> None:
    model, writes = _model(case, seed=100)
    meta = _ts_metadata(case, _metadata_doc(case, tmp_path))
    spec = {**_ts_spec(case, tmp_path), "metadata": meta}
    arr = ts.open(spec, create=True, delete_existing=True).result()
    for sel, values in writes:
        arr[sel].write(values).result()
    assert_same(_cuzarr_read(tmp_path), model)
    _cuzarr_write(case, tmp_path, writes, name="twin")
    assert _stored_keys(tmp_path) == _stored_keys(tmp_path, "twin")
    if case.shape:
        sel = tuple(slice(1, None, 2) for _ in case.shape)
        assert_same(_cuzarr_read(tmp_path, sel), model[sel])


# ---------------------------------------------------------------------------- zarrs-python


def _zarrs_config() -> Any:
    return zarr.config.set({"codec_pipeline.path": ZARRS_PIPELINE, "codec_pipeline.strict": True})


@pytest.mark.parametrize("case", _case_params())
def test_cuzarr_writes_zarrs_reads(case: Case, tmp_path: Path) -> None:
    model, writes = _model(case, seed=200)
    _cuzarr_write(case, tmp_path, writes)
    with _zarrs_config():
        arr = _open(tmp_path)
        assert type(arr._async_array.codec_pipeline).__name__ == "ZarrsCodecPipeline"
        # zarrs-python 0.2 raises "input array must be a C contiguous array" on the F-ordered
        # output buffer zarr allocates for a v2 order="F" array, and "Non-native byte order not
        # supported" on the one it allocates for a v2 ">i4" array; hand it a native C-ordered one.
        out = default_buffer_prototype().nd_buffer.from_numpy_array(
            np.empty(case.shape, dtype=_native(case.dtype))
        )
        arr.get_basic_selection(Ellipsis, out=out)
    assert_same(out.as_numpy_array(), model)


@pytest.mark.parametrize("case", _case_params())
def test_zarrs_writes_cuzarr_reads(case: Case, tmp_path: Path) -> None:
    model, writes = _model(case, seed=300)
    with _zarrs_config():
        arr = _create(case, tmp_path)
        assert type(arr._async_array.codec_pipeline).__name__ == "ZarrsCodecPipeline"
        for sel, values in writes:
            arr[sel] = values
    assert_same(_cuzarr_read(tmp_path), model)
    _cuzarr_write(case, tmp_path, writes, name="twin")
    assert _stored_keys(tmp_path) == _stored_keys(tmp_path, "twin")
