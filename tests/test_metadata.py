"""Metadata read from stores: arrays created by zarr-python, read back by ``read_array_spec``.

Every case creates an array with zarr-python, writes data, then checks that cuzarr's parsed
metadata agrees with zarr's own ``arr.metadata`` (fill values bit for bit), that the chunk keys
cuzarr computes are the keys zarr wrote, and that the codec chain cuzarr compiles from the spec
decodes the stored chunks to zarr's data.
"""

from __future__ import annotations

import json
import math
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
    TransposeCodec,
    ZstdCodec,
)
from zarr.storage import LocalStore, MemoryStore

from cuzarr import MetadataError, NodeNotFoundError, UnsupportedError
from cuzarr.codecs.build import build_chunk_codec
from cuzarr.metadata import (
    ArraySpec,
    GroupSpec,
    normalize_node_path,
    parse_v3,
    read_array_spec,
    read_node,
)
from cuzarr.stores import LocalChunkStore, MemoryChunkStore

STORE_KINDS = ["memory", "local"]


def _stores(kind: str, tmp_path: Any) -> tuple[Any, Any]:
    """A zarr store and the cuzarr ChunkStore over the same data."""
    if kind == "memory":
        zs = MemoryStore()
        return zs, MemoryChunkStore(zs)
    root = tmp_path / "data.zarr"
    return LocalStore(root), LocalChunkStore(root)


def _bits(value: Any, dtype: np.dtype[Any]) -> bytes:
    return np.asarray(value, dtype=dtype).tobytes()


def _sample(dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    n = math.prod(shape)
    kind = dtype.kind
    if kind == "b":
        flat = np.arange(n) % 3 == 0
    elif kind in "iu":
        flat = np.arange(n) % 100
    elif kind in "fc":
        flat = np.arange(n) * 1.5 - 7
    elif kind == "M" or kind == "m":
        flat = np.arange(n).astype(dtype)
    elif kind == "S":
        flat = np.array([f"b{i}".encode() for i in range(n)])
    elif kind == "U":
        flat = np.array([f"u{i}" for i in range(n)])
    else:  # pragma: no cover - cases only use the kinds above
        raise AssertionError(kind)
    return np.asarray(flat, dtype=dtype).reshape(shape)


# (id, zarr.create_array keyword arguments, the NumPy dtype the array holds in memory)
V3_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("bool", {"dtype": "bool", "fill_value": True}, "|b1"),
    ("int8", {"dtype": "int8", "fill_value": -7}, "|i1"),
    ("uint8", {"dtype": "uint8", "fill_value": 255}, "|u1"),
    ("int16", {"dtype": "int16", "fill_value": -300}, "<i2"),
    ("uint16", {"dtype": "uint16", "fill_value": 65535}, "<u2"),
    ("int32", {"dtype": "int32", "fill_value": 2**31 - 1}, "<i4"),
    ("uint32", {"dtype": "uint32", "fill_value": 7}, "<u4"),
    ("int64", {"dtype": "int64", "fill_value": -(2**63)}, "<i8"),
    ("uint64", {"dtype": "uint64", "fill_value": 2**64 - 1}, "<u8"),
    ("float16-nan", {"dtype": "float16", "fill_value": np.nan}, "<f2"),
    ("float32-inf", {"dtype": "float32", "fill_value": np.inf}, "<f4"),
    ("float64-neginf", {"dtype": "float64", "fill_value": -np.inf}, "<f8"),
    ("float64-negzero", {"dtype": "float64", "fill_value": -0.0}, "<f8"),
    ("complex64", {"dtype": "complex64", "fill_value": complex(np.nan, -0.0)}, "<c8"),
    ("complex128", {"dtype": "complex128", "fill_value": complex(1.5, np.inf)}, "<c16"),
    ("datetime64-nat", {"dtype": "M8[s]", "fill_value": np.datetime64("NaT", "s")}, "<M8[s]"),
    ("datetime64-int", {"dtype": "M8[ms]", "fill_value": np.datetime64(5, "ms")}, "<M8[ms]"),
    ("timedelta64", {"dtype": "timedelta64[us]", "fill_value": np.timedelta64(3, "us")}, "<m8[us]"),
    ("utf32", {"dtype": "U5", "fill_value": "xy"}, "<U5"),
    ("bytes", {"dtype": "S4", "fill_value": b"ab"}, "|S4"),
    (
        "big-endian-f8",
        {"dtype": "float64", "fill_value": np.nan, "serializer": BytesCodec(endian="big")},
        "<f8",
    ),
    (
        "big-endian-i4-gzip",
        {
            "dtype": "int32",
            "fill_value": -1,
            "serializer": BytesCodec(endian="big"),
            "compressors": GzipCodec(level=3),
        },
        "<i4",
    ),
    ("blosc", {"dtype": "float32", "compressors": BloscCodec(cname="lz4", clevel=3)}, "<f4"),
    ("zstd-crc32c", {"dtype": "uint16", "compressors": [ZstdCodec(level=2), Crc32cCodec()]}, "<u2"),
    ("uncompressed", {"dtype": "int16", "compressors": None}, "<i2"),
    ("transpose", {"dtype": "int32", "filters": [TransposeCodec(order=(1, 0))]}, "<i4"),
    (
        "dot-separator",
        {"dtype": "int32", "chunk_key_encoding": {"name": "default", "separator": "."}},
        "<i4",
    ),
    (
        "v2-keys-dot",
        {"dtype": "int32", "chunk_key_encoding": {"name": "v2", "separator": "."}},
        "<i4",
    ),
    (
        "v2-keys-slash",
        {"dtype": "int32", "chunk_key_encoding": {"name": "v2", "separator": "/"}},
        "<i4",
    ),
    (
        "dimension-names",
        {"dtype": "float32", "dimension_names": ["y", None], "attributes": {"units": "K"}},
        "<f4",
    ),
    ("sharded", {"dtype": "float64", "shards": (4, 6), "fill_value": -0.0}, "<f8"),
]

V2_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("f8-nan", {"dtype": "<f8", "fill_value": np.nan}, "<f8"),
    ("big-f8", {"dtype": ">f8", "fill_value": -0.0}, ">f8"),
    ("big-i2", {"dtype": ">i2", "fill_value": -5}, ">i2"),
    ("big-c8", {"dtype": ">c8", "fill_value": complex(np.inf, np.nan)}, ">c8"),
    ("u4-none", {"dtype": "<u4", "fill_value": None}, "<u4"),
    ("bool", {"dtype": "|b1", "fill_value": False}, "|b1"),
    ("bytes", {"dtype": "|S4", "fill_value": b"ab"}, "|S4"),
    ("utf32", {"dtype": "<U3", "fill_value": "z"}, "<U3"),
    ("datetime", {"dtype": "<M8[ns]", "fill_value": np.datetime64("NaT", "ns")}, "<M8[ns]"),
    ("order-F", {"dtype": "<i4", "order": "F", "fill_value": 3}, "<i4"),
    (
        "slash",
        {"dtype": "<f4", "chunk_key_encoding": {"name": "v2", "separator": "/"}},
        "<f4",
    ),
    ("zlib", {"dtype": "<i8", "compressors": {"id": "zlib", "level": 4}}, "<i8"),
    ("blosc", {"dtype": "<f8", "compressors": {"id": "blosc", "cname": "zstd", "clevel": 2,
                                              "shuffle": 2}}, "<f8"),
    ("no-compressor", {"dtype": "<i2", "compressors": None}, "<i2"),
    ("delta-filter", {"dtype": "<i4", "filters": [numcodecs.Delta(dtype="<i4")]}, "<i4"),
    ("attributes", {"dtype": "<f4", "attributes": {"a": [1, 2], "b": {"c": None}}}, "<f4"),
]

SHAPE = (10, 7)
CHUNKS = (2, 3)


def _check_against_zarr(spec: ArraySpec, arr: Any, path: str, cstore: Any) -> None:
    meta = arr.metadata
    assert spec.path == path
    assert spec.shape == tuple(meta.shape)
    assert spec.zarr_format == meta.zarr_format
    if meta.zarr_format == 3:
        zdtype = meta.data_type
        assert spec.chunk_shape == tuple(meta.chunk_grid.chunk_shape)
        assert spec.dimension_names == (
            None if meta.dimension_names is None else tuple(meta.dimension_names)
        )
        zarr_codecs = json.loads(json.dumps([c.to_dict() for c in meta.codecs]))
        assert [c.to_json() for c in spec.codecs] == [
            c if c.get("configuration") else {"name": c["name"]} for c in zarr_codecs
        ]
        key_encoding = meta.chunk_key_encoding
        assert spec.chunk_key_encoding.kind == key_encoding.name
        assert spec.chunk_key_encoding.separator == key_encoding.separator
    else:
        zdtype = meta.dtype
        assert spec.chunk_shape == tuple(meta.chunks)
        assert spec.order == meta.order
        assert spec.chunk_key_encoding.kind == "v2"
        assert spec.chunk_key_encoding.separator == meta.dimension_separator
        zarr_compressor = None if meta.compressor is None else meta.compressor.get_config()
        ours = None if spec.compressor is None else numcodecs.get_codec(
            {"id": spec.compressor.name, **spec.compressor.configuration}
        ).get_config()
        assert ours == zarr_compressor
        zarr_filters = [f.get_config() for f in meta.filters or ()]
        our_filters = [
            numcodecs.get_codec({"id": f.name, **f.configuration}).get_config()
            for f in spec.filters
        ]
        assert our_filters == zarr_filters
    assert spec.dtype == zdtype.to_native_dtype()
    assert spec.attributes == dict(arr.attrs)
    # Fill values bit for bit (NaN payloads, -0.0, NaT).
    if meta.fill_value is None:
        assert spec.fill_value is None
    else:
        assert _bits(spec.fill_value, spec.dtype) == _bits(meta.fill_value, spec.dtype)


def _check_keys_and_chunks(spec: ArraySpec, arr: Any, data: Any, cstore: Any) -> None:
    """Every chunk zarr wrote sits at ``spec.chunk_key``; the compiled codec decodes it."""
    codec = build_chunk_codec(spec)
    grid = spec.grid_shape
    assert grid == tuple(math.ceil(s / c) for s, c in zip(SHAPE, spec.chunk_shape, strict=True))
    for coords in np.ndindex(*grid):
        key = spec.chunk_key(coords)
        got = cstore.get(key)
        raw = None if got is None else got.data
        box = tuple(
            slice(i * c, min((i + 1) * c, s))
            for i, c, s in zip(coords, spec.chunk_shape, SHAPE, strict=True)
        )
        if raw is None:
            # zarr skips chunks equal to the fill value; nothing else may be missing
            fill = arr.metadata.fill_value
            assert fill is not None, f"no chunk at {key!r}"
            assert (data[box] == fill).all(), f"no chunk at {key!r}"
            continue
        decoded = codec.decode(raw)
        assert decoded.shape == spec.chunk_shape
        edge = tuple(slice(0, b.stop - b.start) for b in box)
        np.testing.assert_array_equal(decoded[edge], data[box])


def _create(zstore: Any, path: str, zarr_format: int, kwargs: dict[str, Any]) -> Any:
    kw = dict(kwargs)
    return zarr.create_array(
        zstore, name=path, shape=SHAPE, chunks=CHUNKS, zarr_format=zarr_format, **kw
    )


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize(
    ("case_id", "kwargs", "numpy_dtype"), V3_CASES, ids=[c[0] for c in V3_CASES]
)
def test_v3_round_trip(
    kind: str, case_id: str, kwargs: dict[str, Any], numpy_dtype: str, tmp_path: Any
) -> None:
    zstore, cstore = _stores(kind, tmp_path)
    path = "group/sub/arr"
    arr = _create(zstore, path, 3, kwargs)
    data = _sample(np.dtype(numpy_dtype), SHAPE)
    arr[...] = data
    spec = read_array_spec(cstore, path)
    assert spec.dtype == np.dtype(numpy_dtype)
    _check_against_zarr(spec, arr, path, cstore)
    _check_keys_and_chunks(spec, arr, data, cstore)
    if "fill_value" in kwargs:
        requested = kwargs["fill_value"]
        assert _bits(spec.fill_value, spec.dtype) == _bits(requested, spec.dtype)
    if case_id.startswith("big-endian"):
        assert spec.codecs[0].configuration == {"endian": "big"}


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize(
    ("case_id", "kwargs", "numpy_dtype"), V2_CASES, ids=[c[0] for c in V2_CASES]
)
def test_v2_round_trip(
    kind: str, case_id: str, kwargs: dict[str, Any], numpy_dtype: str, tmp_path: Any
) -> None:
    zstore, cstore = _stores(kind, tmp_path)
    path = "g/arr"
    arr = _create(zstore, path, 2, kwargs)
    data = _sample(np.dtype(numpy_dtype), SHAPE)
    arr[...] = data
    spec = read_array_spec(cstore, path)
    # v2 keeps the stored byte order in the dtype.
    assert spec.dtype == np.dtype(numpy_dtype)
    _check_against_zarr(spec, arr, path, cstore)
    _check_keys_and_chunks(spec, arr, data, cstore)
    if kwargs.get("fill_value") is not None:
        assert _bits(spec.fill_value, spec.dtype) == _bits(kwargs["fill_value"], spec.dtype)
    if "order" in kwargs:
        assert spec.order == kwargs["order"]


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_root_array_and_path_forms(kind: str, zarr_format: int, tmp_path: Any) -> None:
    zstore, cstore = _stores(kind, tmp_path)
    zarr.create_array(zstore, shape=(4,), chunks=(2,), dtype="i2", zarr_format=zarr_format)
    assert read_array_spec(cstore).path == ""
    assert read_array_spec(cstore, "/").shape == (4,)
    zstore2, cstore2 = _stores(kind, tmp_path / "other")
    zarr.create_array(zstore2, name="a/b", shape=(3,), chunks=(2,), dtype="u1",
                      zarr_format=zarr_format)
    for form in ("a/b", "/a/b/", "a//b", "a\\b"):
        spec = read_array_spec(cstore2, form)
        assert spec.path == "a/b"
        assert spec.chunk_key((1,)).startswith("a/b/")


@pytest.mark.parametrize("bad", ["../x", "a/../b", "a/./b", "..", "."])
def test_paths_cannot_leave_the_store(bad: str) -> None:
    cstore = MemoryChunkStore(MemoryStore())
    with pytest.raises(MetadataError) as info:
        read_node(cstore, bad)
    assert repr(bad) in str(info.value)
    with pytest.raises(MetadataError):
        normalize_node_path(bad)


def test_normalize_node_path() -> None:
    assert normalize_node_path("") == ""
    assert normalize_node_path("/") == ""
    assert normalize_node_path("//a///b//") == "a/b"
    assert normalize_node_path("a\\b\\c") == "a/b/c"
    assert normalize_node_path("..a/b..") == "..a/b.."


@pytest.mark.parametrize("kind", STORE_KINDS)
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_groups(kind: str, zarr_format: int, tmp_path: Any) -> None:
    zstore, cstore = _stores(kind, tmp_path)
    root = zarr.open_group(zstore, mode="w", zarr_format=zarr_format)
    sub = root.create_group("sub")
    sub.attrs["title"] = "t"
    sub.create_array("arr", shape=(2,), dtype="f4")
    node = read_node(cstore, "sub")
    assert isinstance(node, GroupSpec)
    assert node == GroupSpec(path="sub", zarr_format=zarr_format, attributes={"title": "t"})
    assert isinstance(read_node(cstore, ""), GroupSpec)
    assert isinstance(read_node(cstore, "sub/arr"), ArraySpec)
    document = "zarr.json" if zarr_format == 3 else ".zgroup"
    with pytest.raises(MetadataError) as info:
        read_array_spec(cstore, "sub")
    message = str(info.value)
    assert "'sub'" in message
    assert "group" in message
    assert document in message
    assert cstore.name in message


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_missing_node(kind: str, tmp_path: Any) -> None:
    zstore, cstore = _stores(kind, tmp_path)
    zarr.create_array(zstore, name="present", shape=(2,), dtype="f4")
    with pytest.raises(NodeNotFoundError) as info:
        read_array_spec(cstore, "absent/arr")
    message = str(info.value)
    assert "'absent/arr'" in message
    assert cstore.name in message
    assert isinstance(info.value, FileNotFoundError)


def test_zarr_format_selects_the_document() -> None:
    zstore = MemoryStore()
    cstore = MemoryChunkStore(zstore)
    zarr.create_array(zstore, name="v2", shape=(2,), dtype="f4", zarr_format=2)
    zarr.create_array(zstore, name="v3", shape=(2,), dtype="f4", zarr_format=3)
    assert read_array_spec(cstore, "v2", zarr_format=2).zarr_format == 2
    assert read_array_spec(cstore, "v3", zarr_format=3).zarr_format == 3
    with pytest.raises(NodeNotFoundError):
        read_array_spec(cstore, "v2", zarr_format=3)
    with pytest.raises(NodeNotFoundError):
        read_array_spec(cstore, "v3", zarr_format=2)


def test_v3_document_wins_over_v2() -> None:
    """zarr-python looks for zarr.json first; so does cuzarr."""
    zstore = MemoryStore()
    cstore = MemoryChunkStore(zstore)
    zarr.create_array(zstore, name="a", shape=(2,), dtype="f4", zarr_format=2)
    zarr.create_array(zstore, name="a", shape=(5,), dtype="i2", zarr_format=3, overwrite=True)
    spec = read_array_spec(cstore, "a")
    assert (spec.zarr_format, spec.shape) == (3, (5,))


# -------------------------------------------------------------------------------------------
# fill value encodings through cuzarr's parser (independent expectations: the spec's bytes)


def _v3_doc(data_type: Any, fill_value: Any) -> dict[str, Any]:
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [4],
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": fill_value,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    }


@pytest.mark.parametrize(
    ("data_type", "fill_json", "expected_big_endian_hex"),
    [
        ("float64", "NaN", "7ff8000000000000"),
        ("float64", "Infinity", "7ff0000000000000"),
        ("float64", "-Infinity", "fff0000000000000"),
        ("float64", -0.0, "8000000000000000"),
        ("float32", "NaN", "7fc00000"),
        ("float32", "0x7fc00001", "7fc00001"),
        # a signalling NaN keeps its bits (zarr 3.4 quiets it through a Python float)
        ("float32", "0x7f800001", "7f800001"),
        ("float64", "0x7ff0000000000001", "7ff0000000000001"),
        ("float64", "0xfff8000000000000", "fff8000000000000"),
        # a float16 NaN payload survives (zarr 3.4 loses it)
        ("float16", "0x7e01", "7e01"),
        ("float16", "-Infinity", "fc00"),
        ("int16", -2, "fffe"),
        ("uint64", 2**64 - 1, "ffffffffffffffff"),
        ("bool", True, "01"),
    ],
)
def test_fill_value_encodings(data_type: str, fill_json: Any, expected_big_endian_hex: str) -> None:
    spec = parse_v3(_v3_doc(data_type, fill_json), path="a")
    got = np.asarray(spec.fill_value, dtype=spec.dtype).astype(spec.dtype.newbyteorder(">"))
    assert got.tobytes().hex() == expected_big_endian_hex


def test_fill_value_complex_and_datetime() -> None:
    spec = parse_v3(_v3_doc("complex64", ["NaN", "0x7f800002"]), path="a")
    parts = np.asarray(spec.fill_value, dtype=spec.dtype).reshape(1).view("<f4")
    assert parts.astype(">f4").tobytes().hex() == "7fc00000" + "7f800002"
    spec = parse_v3(_v3_doc("complex128", [1.5, -0.0]), path="a")
    assert spec.fill_value == complex(1.5, 0)
    assert np.signbit(np.asarray(spec.fill_value).imag)
    dt = {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 1}}
    assert np.isnat(parse_v3(_v3_doc(dt, "NaT"), path="a").fill_value)
    assert np.isnat(parse_v3(_v3_doc(dt, -(2**63)), path="a").fill_value)
    assert parse_v3(_v3_doc(dt, 86400), path="a").fill_value == np.datetime64("1970-01-02", "s")
    td = {"name": "numpy.timedelta64", "configuration": {"unit": "ms", "scale_factor": 1}}
    assert parse_v3(_v3_doc(td, 7), path="a").fill_value == np.timedelta64(7, "ms")


def test_fill_value_base64_bytes() -> None:
    dt = {"name": "null_terminated_bytes", "configuration": {"length_bytes": 4}}
    spec = parse_v3(_v3_doc(dt, "YWJj"), path="a")
    assert spec.fill_value == b"abc"
    assert spec.dtype == np.dtype("S4")


def test_unknown_chunk_grid_is_unsupported() -> None:
    doc = _v3_doc("int8", 0)
    doc["chunk_grid"] = {"name": "rectilinear", "configuration": {"chunk_shapes": [[2, 2]]}}
    with pytest.raises(UnsupportedError, match="rectilinear"):
        parse_v3(doc, path="a")


def test_extension_fields() -> None:
    doc = _v3_doc("int8", 0)
    doc["my_extension"] = {"must_understand": False, "anything": [1]}
    assert parse_v3(doc, path="a").shape == (4,)
    doc["required_extension"] = {"must_understand": True}
    with pytest.raises(UnsupportedError) as info:
        parse_v3(doc, path="a")
    assert "required_extension" in str(info.value)
    doc = _v3_doc("int8", 0)
    doc["no_flag"] = {"name": "x"}
    with pytest.raises(UnsupportedError, match="no_flag"):
        parse_v3(doc, path="a")
