"""Parity of the explicit API (``cuzarr.open`` / ``cuzarr.create``) with zarr-python.

zarr's default pipeline is the reference. Reads: zarr writes an array, then every selection
(basic with negative indices, steps and ellipsis, orthogonal, coordinate, mask, block) read
through ``cuzarr.Array`` must equal zarr's result, dtype and bits. Writes: the same write
sequence through ``cuzarr.Array`` and through zarr must leave the same keys and bytes in the
two stores. Negative steps (which zarr refuses) are checked against NumPy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, GzipCodec

import cuzarr
from cuzarr.testing import assert_same_array, sample_values, stored_items, use_pipeline

SHAPE = (13, 9)
CHUNKS = (5, 4)

LAYOUTS: dict[str, dict[str, Any]] = {
    "v3-zstd": {"chunks": CHUNKS},
    "v3-raw": {"chunks": CHUNKS, "compressors": None},
    "v3-big-gzip": {
        "chunks": CHUNKS,
        "serializer": BytesCodec(endian="big"),
        "compressors": GzipCodec(level=1),
    },
    "v3-sharded": {"chunks": (2, 2), "shards": (6, 4)},
    "v3-sharded-raw": {"chunks": (3, 2), "shards": (6, 4), "compressors": None},
    "v3-dot-keys": {
        "chunks": CHUNKS,
        "chunk_key_encoding": {"name": "default", "separator": "."},
    },
    "v2-C": {"chunks": CHUNKS, "zarr_format": 2},
    "v2-F-blosc": {
        "chunks": CHUNKS,
        "zarr_format": 2,
        "order": "F",
        "compressors": numcodecs.Blosc(cname="lz4", clevel=3, shuffle=numcodecs.Blosc.SHUFFLE),
    },
    "v2-raw-slash": {
        "chunks": CHUNKS,
        "zarr_format": 2,
        "compressors": None,
        "chunk_key_encoding": {"name": "v2", "separator": "/"},
    },
}

DTYPES = ["bool", "int8", "uint16", "int64", "float32", "float64", "complex64", "datetime64[ns]"]

_B = np.zeros(SHAPE[0], bool)
_B[[0, 4, 5, 12]] = True
_MASK = np.zeros(SHAPE, bool)
_MASK[[0, 3, 7, 12, 12], [0, 8, 4, 1, 8]] = True

SELECTIONS: list[tuple[str, Any]] = [
    ("basic", ()),
    ("basic", Ellipsis),
    ("basic", 0),
    ("basic", -1),
    ("basic", (3, 4)),
    ("basic", (-2, -9)),
    ("basic", slice(2, 11)),
    ("basic", (slice(None), slice(4, 8))),
    ("basic", (slice(None, None, 3), slice(1, None, 2))),
    ("basic", (slice(1, 12, 4), -1)),
    ("basic", (Ellipsis, 2)),
    ("basic", (1, Ellipsis)),
    ("basic", (Ellipsis, slice(2, 5))),
    ("basic", (slice(-4, None), slice(-7, -1))),
    ("basic", slice(100, 200)),
    ("basic", (slice(5, 5), slice(None))),
    ("basic", (slice(0, 5), slice(0, 4))),
    ("basic", (slice(10, 13), slice(8, 9))),
    ("basic", ([1, 5, 12], slice(None))),  # dispatched to orthogonal, as zarr
    ("basic", (np.array([0, 12, 3]), np.array([8, 0, 4]))),  # dispatched to vectorized
    ("basic", _MASK),
    ("oindex", ([0, 3, 12], slice(None))),
    ("oindex", (_B, [1, 3, 8])),
    ("oindex", (2, [0, 8])),
    ("oindex", ([4, 1, 1], [8, 0])),
    ("oindex", (slice(1, None, 5), np.array([7, 2]))),
    ("vindex", ([0, 3, 12], [1, 8, 0])),
    ("vindex", (np.array([[1, 2], [3, 12]]), np.array([[0, 1], [8, 3]]))),
    ("vindex", _MASK),
    ("blocks", 0),
    ("blocks", (1, slice(0, 2))),
    ("blocks", (-1, -1)),
    ("blocks", (slice(None), 1)),
]


def _read(arr: Any, kind: str, sel: Any) -> Any:
    return arr[sel] if kind == "basic" else getattr(arr, kind)[sel]


def _write(arr: Any, kind: str, sel: Any, value: Any) -> None:
    if kind == "basic":
        arr[sel] = value
    else:
        getattr(arr, kind)[sel] = value


def _fill(arr: zarr.Array) -> Any:
    fill = arr.metadata.fill_value
    return np.zeros((), arr.dtype)[()] if fill is None else fill


@pytest.fixture(params=["memory", "local"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    def make(name: str) -> Any:
        if request.param == "memory":
            return zarr.storage.MemoryStore()
        return zarr.storage.LocalStore(tmp_path / name)

    return make


def _zarr_array(store: Any, layout: str, dtype: str, **extra: Any) -> zarr.Array:
    with use_pipeline("zarr"):
        return zarr.create_array(store, name="arr", shape=SHAPE, dtype=dtype, **LAYOUTS[layout],
                                 **extra)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_read_parity(layout: str, dtype: str, new_store: Any) -> None:
    store = new_store("a")
    z = _zarr_array(store, layout, dtype)
    with use_pipeline("zarr"):
        z[:] = sample_values(dtype, SHAPE, seed=3)
        z[0:5, 0:4] = _fill(z)  # one chunk left missing: reads the fill value
    a = cuzarr.open(store, path="arr")
    assert isinstance(a, cuzarr.Array)
    assert (a.shape, a.chunks, a.shards) == (z.shape, z.chunks, z.shards)
    with use_pipeline("zarr"):
        for kind, sel in SELECTIONS:
            expected = _read(z, kind, sel)
            got = _read(a, kind, sel)
            assert type(got) is type(expected), f"{kind}[{sel!r}]"
            assert_same_array(got, expected, msg=f"{layout} {dtype} {kind}[{sel!r}]")


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_read_into_out_parity(layout: str, new_store: Any) -> None:
    store = new_store("a")
    z = _zarr_array(store, layout, "float32")
    with use_pipeline("zarr"):
        z[:] = sample_values("float32", SHAPE, seed=4)
    a = cuzarr.open(store, path="arr")
    assert isinstance(a, cuzarr.Array)
    with use_pipeline("zarr"):
        for kind, sel in SELECTIONS:
            if kind != "basic":
                continue
            expected = np.asarray(z[sel])
            out = np.full(expected.shape, 7, a.dtype)
            assert a.read(sel, out=out) is out
            assert_same_array(out, expected, msg=f"{layout} read({sel!r}, out=)")


NEGATIVE_STEPS = [
    slice(None, None, -1),
    (slice(None, None, -2), slice(None)),
    (slice(11, 2, -3), slice(7, None, -4)),
    (slice(None), slice(None, None, -1)),
    (-1, slice(None, 0, -1)),
    (slice(3, 8, -1), slice(None)),  # empty
    (slice(None, None, -5), None, 2),
]


@pytest.mark.parametrize("layout", ["v3-zstd", "v3-sharded", "v2-F-blosc", "v3-raw"])
def test_negative_steps_follow_numpy(layout: str, new_store: Any) -> None:
    store = new_store("a")
    z = _zarr_array(store, layout, "int32")
    model = np.arange(np.prod(SHAPE), dtype="int32").reshape(SHAPE)
    with use_pipeline("zarr"):
        z[:] = model
    a = cuzarr.open(store, path="arr", mode="r+")
    assert isinstance(a, cuzarr.Array)
    for sel in NEGATIVE_STEPS:
        assert_same_array(a[sel], model[sel], msg=f"read {sel!r}")
        out = np.empty(model[sel].shape, a.dtype)
        a.read(sel, out=out)
        assert_same_array(out, model[sel], msg=f"read {sel!r} into out")
    for i, sel in enumerate(NEGATIVE_STEPS):
        value = np.arange(model[sel].size, dtype="int32").reshape(model[sel].shape) * 10 + i
        model[sel] = value
        a[sel] = value
        assert_same_array(a[...], model, msg=f"after writing {sel!r}")
    with use_pipeline("zarr"):
        assert_same_array(z[...], model, msg="zarr reading cuzarr's negative-step writes")


def _steps(
    shape: tuple[int, ...], dtype: str, fill: Any, unit: tuple[int, ...]
) -> list[tuple[str, Any, Any]]:
    """A write sequence covering every kind of selection, scalar and array values.

    ``unit`` is the block of ``Array.blocks`` (the shard of a sharded array, as zarr).
    """
    v = lambda n, seed: sample_values(dtype, n, seed=seed)  # noqa: E731
    block = tuple(min(2 * u, n) - u for u, n in zip(unit, shape, strict=True))
    return [
        ("basic", Ellipsis, v(shape, 10)),
        ("basic", (slice(2, 7), slice(1, 6)), v((5, 5), 11)),
        ("basic", (slice(0, 5), slice(0, 4)), fill),  # a whole chunk of fill: deleted
        ("basic", (slice(10, 13), slice(8, 9)), v((3, 1), 12)),  # an edge chunk, completely
        ("basic", (slice(None, None, 3), slice(1, None, 2)), v((5, 4), 13)),
        ("basic", (-1, -1), v((), 14)[()]),
        ("basic", (Ellipsis, 3), v((13,), 15)),
        ("basic", (slice(1, 4), slice(None)), v((3, 9), 16)),
        ("oindex", ([1, 9], [0, 8]), v((2, 2), 17)),
        ("oindex", (4, [2, 3, 7]), v((3,), 18)),
        ("vindex", ([3, 12, 6], [2, 7, 0]), v((3,), 19)),
        ("vindex", _MASK, v((int(_MASK.sum()),), 20)),
        ("blocks", (1, 1), v(block, 21)),
        ("basic", (slice(5, 10), slice(4, 8)), fill),
    ]


WRITE_CASES = [
    pytest.param(layout, dtype, wec, id=f"{layout}-{dtype}{'-write_empty' if wec else ''}")
    for layout in sorted(LAYOUTS)
    for dtype, wec in [("int16", False), ("bool", False), ("float64", False), ("float64", True)]
]


@pytest.mark.parametrize(("layout", "dtype", "write_empty_chunks"), WRITE_CASES)
def test_write_parity(layout: str, dtype: str, write_empty_chunks: bool, new_store: Any) -> None:
    store_z, store_c = new_store("zarr"), new_store("cuzarr")
    with use_pipeline("zarr"):
        z = zarr.create_array(
            store_z, name="arr", shape=SHAPE, dtype=dtype, **LAYOUTS[layout],
            config={"write_empty_chunks": write_empty_chunks},
        )
    a = cuzarr.create(
        store_c, path="arr", shape=SHAPE, dtype=dtype, write_empty_chunks=write_empty_chunks,
        **LAYOUTS[layout],
    )
    assert stored_items(store_z) == stored_items(store_c), "metadata documents differ"
    compare_bytes = "gzip" not in layout  # gzip headers hold a timestamp
    for kind, sel, value in _steps(SHAPE, dtype, _fill(z), z.shards or z.chunks):
        with use_pipeline("zarr"):
            _write(z, kind, sel, value)
        _write(a, kind, sel, value)
        items_z, items_c = stored_items(store_z), stored_items(store_c)
        assert sorted(items_z) == sorted(items_c), f"keys differ after {kind}[{sel!r}]"
        if compare_bytes:
            differ = sorted(k for k in items_z if items_z[k] != items_c[k])
            assert not differ, f"bytes of {differ} differ after {kind}[{sel!r}]"
        else:
            with use_pipeline("zarr"):
                expected = z[...]
            assert_same_array(a[...], expected, msg=f"after {kind}[{sel!r}]")
    with use_pipeline("zarr"):
        assert_same_array(zarr.open_array(store_c, path="arr")[...], z[...])


def test_sharded_write_bytes() -> None:
    value = sample_values("int16", SHAPE, seed=10)
    store_z, store_c = zarr.storage.MemoryStore(), zarr.storage.MemoryStore()
    with use_pipeline("zarr"):
        z = zarr.create_array(store_z, shape=SHAPE, dtype="int16", **LAYOUTS["v3-sharded"])
        z[...] = value
    a = cuzarr.create(store_c, shape=SHAPE, dtype="int16", **LAYOUTS["v3-sharded"])
    a[...] = value
    assert stored_items(store_z) == stored_items(store_c)


@pytest.mark.parametrize("fmt", [2, 3])
def test_zero_dimensional(fmt: int, new_store: Any) -> None:
    store_z, store_c = new_store("zarr"), new_store("cuzarr")
    with use_pipeline("zarr"):
        z = zarr.create_array(store_z, shape=(), dtype="f8", zarr_format=fmt, fill_value=1.5)
        expected_empty = z[...]
    a = cuzarr.create(store_c, shape=(), dtype="f8", zarr_format=fmt, fill_value=1.5)
    got = a[...]
    assert type(got) is type(expected_empty)
    assert_same_array(got, expected_empty)
    with use_pipeline("zarr"):
        z[...] = 4.25
    a[...] = 4.25
    assert stored_items(store_z) == stored_items(store_c)
    for sel in [(), Ellipsis]:
        with use_pipeline("zarr"):
            expected = z[sel]
        assert_same_array(a[sel], expected)
    assert_same_array(a.read_chunk(()), np.array(4.25))
    assert [c for c, _ in a.iter_chunks()] == [()]
    assert a.info.n_present == 1


def test_one_dimensional_against_numpy(new_store: Any) -> None:
    store = new_store("a")
    a = cuzarr.create(store, shape=(50,), chunks=(7,), dtype="u2", fill_value=9)
    model = np.full(50, 9, "u2")
    rng = np.random.default_rng(0)
    for _ in range(40):
        start, stop = sorted(int(x) for x in rng.integers(-60, 60, 2))
        step = int(rng.choice([1, 2, 3, 7, -1, -3]))
        sel = slice(start, stop, step)
        value = rng.integers(0, 1000, model[sel].shape).astype("u2")
        model[sel] = value
        a[sel] = value
        i = int(rng.integers(-50, 50))
        assert a[i] == model[i]
        assert_same_array(a[sel], model[sel], msg=repr(sel))
    assert_same_array(a[...], model)
    with use_pipeline("zarr"):
        assert_same_array(zarr.open_array(store, mode="r")[...], model)
