"""Bad input, each with a test: malformed metadata, corrupt chunks and shards, unwritable stores.

Metadata errors must name the document, the field and the bad value. Corrupt chunks must raise
:class:`cuzarr.CorruptChunkError` naming the chunk or shard key, never return data. Writes to a
store that cannot take them must fail clearly and leave what was stored before untouched.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import crc32c
import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec
from zarr.storage import LocalStore, MemoryStore

import cuzarr
from cuzarr import CorruptChunkError, MetadataError, StoreError, UnsupportedError
from cuzarr.codecs.build import build_chunk_codec
from cuzarr.metadata import read_array_spec
from cuzarr.stores import MemoryChunkStore, from_zarr_store
from cuzarr.stores.local import TEMP_SUFFIX

STORE_KINDS = ["memory", "local"]

# -------------------------------------------------------------------------------------------
# malformed metadata

V3_DOC: dict[str, Any] = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [10, 7],
    "data_type": "float64",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0.0,
    "codecs": [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 0, "checksum": False}},
    ],
    "attributes": {},
}

V2_DOC: dict[str, Any] = {
    "zarr_format": 2,
    "shape": [10, 7],
    "chunks": [4, 3],
    "dtype": "<f8",
    "fill_value": "NaN",
    "order": "C",
    "filters": None,
    "dimension_separator": ".",
    "compressor": {"id": "zstd", "level": 1},
}

PATH = "grp/temp"


def _load(document: str, raw: bytes) -> Any:
    """Store a raw document under ``grp/temp``, read it and compile its codecs."""
    cstore = MemoryChunkStore(MemoryStore())
    cstore.put(f"{PATH}/{document}", raw)
    spec = read_array_spec(cstore, PATH)
    build_chunk_codec(spec)
    return spec


def _edit(base: dict[str, Any], edit: Callable[[dict[str, Any]], Any]) -> bytes:
    doc = copy.deepcopy(base)
    edit(doc)
    return json.dumps(doc).encode()


def _shard(inner: list[int], **extra: Any) -> Callable[[dict[str, Any]], None]:
    def edit(d: dict[str, Any]) -> None:
        d["codecs"] = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": inner,
                    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                    **extra,
                },
            }
        ]

    return edit


def _set_codec(i: int, codec: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["codecs"].__setitem__(i, codec)


# (id, edit of the v3 document, field named in the message, bad value as shown in the message)
V3_BAD: list[tuple[str, Callable[[dict[str, Any]], Any], str, str]] = [
    ("missing-shape", lambda d: d.pop("shape"), "'shape'", "missing"),
    ("shape-string", lambda d: d.update(shape="10"), "'shape'", "'10'"),
    ("negative-dim", lambda d: d.update(shape=[10, -7]), "'shape'", "[10, -7]"),
    ("float-dim", lambda d: d.update(shape=[10, 7.5]), "'shape'", "[10, 7.5]"),
    (
        "grid-rank",
        lambda d: d["chunk_grid"]["configuration"].update(chunk_shape=[4]),
        "'chunk_grid.configuration.chunk_shape'",
        "[4]",
    ),
    (
        "zero-chunk",
        lambda d: d["chunk_grid"]["configuration"].update(chunk_shape=[0, 3]),
        "'chunk_grid.configuration.chunk_shape'",
        "[0, 3]",
    ),
    ("grid-not-object", lambda d: d.update(chunk_grid="regular"), "'chunk_grid'", "'regular'"),
    (
        "separator",
        lambda d: d["chunk_key_encoding"]["configuration"].update(separator="-"),
        "'chunk_key_encoding.configuration.separator'",
        "'-'",
    ),
    (
        "key-encoding-name",
        lambda d: d["chunk_key_encoding"].update(name="v9"),
        "'chunk_key_encoding.name'",
        "'v9'",
    ),
    ("data-type", lambda d: d.update(data_type="float65"), "'data_type'", "'float65'"),
    ("fill-value", lambda d: d.update(fill_value="warm"), "'fill_value'", "'warm'"),
    ("fill-value-null", lambda d: d.update(fill_value=None), "'fill_value'", "None"),
    (
        "fill-value-base64",
        lambda d: d.update(
            data_type={"name": "null_terminated_bytes", "configuration": {"length_bytes": 4}},
            fill_value="!!not base64!!",
            codecs=[{"name": "bytes"}],
        ),
        "'fill_value'",
        "'!!not base64!!'",
    ),
    (
        "fill-value-too-long",
        lambda d: d.update(
            data_type={"name": "null_terminated_bytes", "configuration": {"length_bytes": 2}},
            fill_value="YWJjZA==",
            codecs=[{"name": "bytes"}],
        ),
        "'fill_value'",
        "'YWJjZA=='",
    ),
    (
        "zstd-level-type",
        lambda d: d["codecs"][1]["configuration"].update(level="5"),
        "'codecs[1].configuration.level'",
        "'5'",
    ),
    (
        "zstd-unknown-field",
        lambda d: d["codecs"][1]["configuration"].update(speed=3),
        "'codecs[1].configuration.speed'",
        "3",
    ),
    (
        "gzip-level-range",
        _set_codec(1, {"name": "gzip", "configuration": {"level": 12}}),
        "'codecs[1].configuration.level'",
        "12",
    ),
    (
        "blosc-cname",
        _set_codec(1, {"name": "blosc", "configuration": {"cname": "brotli"}}),
        "'codecs[1].configuration.cname'",
        "'brotli'",
    ),
    (
        "blosc-clevel",
        _set_codec(1, {"name": "blosc", "configuration": {"clevel": 99}}),
        "'codecs[1].configuration.clevel'",
        "99",
    ),
    (
        "codec-config-not-object",
        lambda d: d["codecs"][1].update(configuration=[0]),
        "'codecs[1].configuration'",
        "[0]",
    ),
    ("codecs-empty", lambda d: d.update(codecs=[]), "'codecs'", "[]"),
    (
        "sharding-not-dividing",
        _shard([3, 3]),
        "'codecs[0].configuration.chunk_shape'",
        "[3, 3]",
    ),
    (
        "sharding-index-location",
        _shard([2, 3], index_location="middle"),
        "'codecs[0].configuration.index_location'",
        "'middle'",
    ),
    (
        "transpose-not-permutation",
        lambda d: d["codecs"].insert(0, {"name": "transpose", "configuration": {"order": [0, 0]}}),
        "'codecs[0].configuration.order'",
        "[0, 0]",
    ),
    (
        "no-array-to-bytes",
        lambda d: d.update(codecs=[{"name": "zstd", "configuration": {"level": 1}}]),
        "'codecs[0]'",
        "['zstd']",
    ),
    (
        "two-array-to-bytes",
        lambda d: d["codecs"].append({"name": "bytes", "configuration": {"endian": "little"}}),
        "'codecs[2]'",
        "['bytes', 'zstd', 'bytes']",
    ),
    (
        "bytes-without-endian",
        lambda d: d["codecs"][0].pop("configuration"),
        "'codecs[0].configuration.endian'",
        "None",
    ),
    (
        "bytes-bad-endian",
        lambda d: d["codecs"][0]["configuration"].update(endian="middle"),
        "'codecs[0].configuration.endian'",
        "'middle'",
    ),
    (
        "dimension-names",
        lambda d: d.update(dimension_names=["y"]),
        "'dimension_names'",
        "['y']",
    ),
    ("attributes", lambda d: d.update(attributes=[1]), "'attributes'", "[1]"),
    ("node-type", lambda d: d.update(node_type="table"), "'node_type'", "'table'"),
]


@pytest.mark.parametrize(("case", "edit", "field", "bad"), V3_BAD, ids=[c[0] for c in V3_BAD])
def test_bad_v3_metadata(
    case: str, edit: Callable[[dict[str, Any]], Any], field: str, bad: str
) -> None:
    with pytest.raises(MetadataError) as info:
        _load("zarr.json", _edit(V3_DOC, edit))
    message = str(info.value)
    assert "zarr.json" in message
    assert f"'{PATH}'" in message
    assert field in message
    assert bad in message


V2_BAD: list[tuple[str, Callable[[dict[str, Any]], Any], str, str]] = [
    ("missing-chunks", lambda d: d.pop("chunks"), "'chunks'", "missing"),
    ("shape-string", lambda d: d.update(shape="10"), "'shape'", "'10'"),
    ("chunks-rank", lambda d: d.update(chunks=[4]), "'chunks'", "[4]"),
    ("chunks-zero", lambda d: d.update(chunks=[4, 0]), "'chunks'", "[4, 0]"),
    ("dtype", lambda d: d.update(dtype="<q9"), "'dtype'", "'<q9'"),
    ("order", lambda d: d.update(order="K"), "'order'", "'K'"),
    ("separator", lambda d: d.update(dimension_separator=":"), "'dimension_separator'", "':'"),
    ("fill-value", lambda d: d.update(fill_value="warm"), "'fill_value'", "'warm'"),
    (
        "fill-value-base64",
        lambda d: d.update(dtype="|S4", fill_value="@@@@"),
        "'fill_value'",
        "'@@@@'",
    ),
    ("zarr-format", lambda d: d.update(zarr_format=3), "'zarr_format'", "3"),
    (
        "compressor-level-type",
        lambda d: d["compressor"].update(level="5"),
        "'compressor.level'",
        "'5'",
    ),
    (
        "compressor-unknown-field",
        lambda d: d["compressor"].update(speed=1),
        "'compressor.speed'",
        "1",
    ),
    ("compressor-not-object", lambda d: d.update(compressor="zstd"), "'compressor'", "'zstd'"),
    ("compressor-no-id", lambda d: d["compressor"].pop("id"), "'compressor.id'", "missing"),
    (
        "blosc-cname",
        lambda d: d.update(compressor={"id": "blosc", "cname": "brotli", "clevel": 5}),
        "'compressor.cname'",
        "'brotli'",
    ),
    (
        "zlib-level-range",
        lambda d: d.update(compressor={"id": "zlib", "level": 42}),
        "'compressor.level'",
        "42",
    ),
    (
        "filters-not-list",
        lambda d: d.update(filters={"id": "delta"}),
        "'filters'",
        "{'id': 'delta'}",
    ),
    (
        "filter-config",
        lambda d: d.update(filters=[{"id": "delta", "dtype": "not-a-dtype"}]),
        "'filters[0]'",
        "'not-a-dtype'",
    ),
]


@pytest.mark.parametrize(("case", "edit", "field", "bad"), V2_BAD, ids=[c[0] for c in V2_BAD])
def test_bad_v2_metadata(
    case: str, edit: Callable[[dict[str, Any]], Any], field: str, bad: str
) -> None:
    with pytest.raises(MetadataError) as info:
        _load(".zarray", _edit(V2_DOC, edit))
    message = str(info.value)
    assert ".zarray" in message
    assert f"'{PATH}'" in message
    assert field in message
    assert bad in message


@pytest.mark.parametrize(
    ("document", "raw", "expected"),
    [
        ("zarr.json", b'{"zarr_format": 3, "shape": [1,', "invalid JSON"),
        ("zarr.json", b"\xff\xfe not utf-8", "invalid JSON"),
        ("zarr.json", b"[1, 2, 3]", "[1, 2, 3]"),
        (".zarray", b"{'single': 'quotes'}", "invalid JSON"),
        (".zarray", b'"a string"', "'a string'"),
    ],
)
def test_bad_json(document: str, raw: bytes, expected: str) -> None:
    with pytest.raises(MetadataError) as info:
        _load(document, raw)
    message = str(info.value)
    assert document in message
    assert f"'{PATH}'" in message
    assert expected in message


def test_bad_zattrs() -> None:
    cstore = MemoryChunkStore(MemoryStore())
    cstore.put(f"{PATH}/.zarray", json.dumps(V2_DOC).encode())
    cstore.put(f"{PATH}/.zattrs", b"[]")
    with pytest.raises(MetadataError) as info:
        read_array_spec(cstore, PATH)
    assert ".zattrs" in str(info.value)
    assert f"'{PATH}'" in str(info.value)


@pytest.mark.parametrize(
    ("edit", "name"),
    [
        (_set_codec(1, {"name": "brotli", "configuration": {}}), "brotli"),
        (_set_codec(1, {"name": "numcodecs.nonexistent"}), "numcodecs.nonexistent"),
        (lambda d: d.update(my_required={"must_understand": True}), "my_required"),
        (lambda d: d.update(storage_transformers=[{"name": "chunk-manifest"}]), "storage"),
        (
            lambda d: d.update(chunk_grid={"name": "rectilinear", "configuration": {}}),
            "rectilinear",
        ),
    ],
    ids=["codec", "numcodecs-codec", "extension", "storage-transformer", "chunk-grid"],
)
def test_unknown_required_things_are_unsupported(
    edit: Callable[[dict[str, Any]], Any], name: str
) -> None:
    with pytest.raises(UnsupportedError) as info:
        _load("zarr.json", _edit(V3_DOC, edit))
    assert name in str(info.value)
    assert PATH in str(info.value)


def test_unknown_v2_compressor_is_unsupported() -> None:
    with pytest.raises(UnsupportedError) as info:
        _load(".zarray", _edit(V2_DOC, lambda d: d.update(compressor={"id": "brotli-x"})))
    assert "brotli-x" in str(info.value)
    assert ".zarray" in str(info.value)


# -------------------------------------------------------------------------------------------
# corrupt chunks and shards, read through zarr with cuzarr's engine (strict: no fallback)


@pytest.fixture(params=STORE_KINDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Any]:
    """A factory of zarr stores over the same data (a new object per call, like reopening)."""
    if request.param == "memory":
        shared = MemoryStore()
        return lambda: MemoryStore(store_dict=shared._store_dict)
    root = tmp_path / "data.zarr"
    return lambda: LocalStore(root)


def _raw_store(zstore: Any) -> Any:
    return from_zarr_store(zstore)


@pytest.fixture(autouse=True)
def _strict_engine() -> Iterator[None]:
    cuzarr.reset_stats()
    with cuzarr.configure(strict=True):
        yield


def _make(store_factory: Callable[[], Any], **kwargs: Any) -> tuple[Any, np.ndarray[Any, Any]]:
    shape = kwargs.pop("shape", (8, 8))
    dtype = kwargs.pop("dtype", "float64")
    arr = zarr.create_array(store_factory(), name="arr", shape=shape, dtype=dtype, **kwargs)
    data = (np.arange(np.prod(shape)).reshape(shape) * 1.25 + 1).astype(dtype)
    arr[...] = data
    reopened = zarr.open_array(store_factory(), path="arr", mode="r")
    np.testing.assert_array_equal(reopened[...], data)  # sanity: intact data reads back
    return arr, data


def _read_fails(store_factory: Callable[[], Any], key: str, selection: Any = Ellipsis) -> str:
    arr = zarr.open_array(store_factory(), path="arr", mode="r")
    with pytest.raises(CorruptChunkError) as info:
        arr[selection]
    message = str(info.value)
    assert key in message
    assert cuzarr.stats().get("fallback_reads", 0) == 0
    return message


def _garbage(n: int) -> bytes:
    return bytes((i * 151 + 7) % 256 for i in range(n))


CHUNKED = {
    "zstd": {"chunks": (4, 4), "compressors": ZstdCodec(level=1)},
    "gzip": {"chunks": (4, 4), "compressors": GzipCodec(level=1)},
    "blosc": {"chunks": (4, 4), "compressors": BloscCodec(cname="zstd")},
    "zstd-transpose": {
        "chunks": (4, 4),
        "filters": [TransposeCodec(order=(1, 0))],
        "compressors": ZstdCodec(),
    },
    "v2-zlib": {"chunks": (4, 4), "zarr_format": 2, "compressors": numcodecs.Zlib(level=1)},
    "v2-zlib-F": {
        "chunks": (4, 4),
        "zarr_format": 2,
        "order": "F",
        "compressors": numcodecs.Zlib(level=1),
    },
}
FRAME = {
    "zstd": numcodecs.Zstd(level=1),
    "gzip": numcodecs.GZip(level=1),
    "blosc": numcodecs.Blosc(cname="zstd"),
    "zstd-transpose": numcodecs.Zstd(level=1),
    "v2-zlib": numcodecs.Zlib(level=1),
    "v2-zlib-F": numcodecs.Zlib(level=1),
}


def _first_key(case: str) -> str:
    return "arr/0.0" if case.startswith("v2") else "arr/c/0/0"


@pytest.mark.parametrize("case", list(CHUNKED))
@pytest.mark.parametrize("size", [1, 9, 200])
def test_garbage_chunk(store_factory: Callable[[], Any], case: str, size: int) -> None:
    _make(store_factory, **CHUNKED[case])
    key = _first_key(case)
    _raw_store(store_factory()).put(key, _garbage(size))
    _read_fails(store_factory, key)
    # a read of other chunks only still works
    arr = zarr.open_array(store_factory(), path="arr", mode="r")
    assert arr[4:, 4:].shape == (4, 4)


@pytest.mark.parametrize("case", list(CHUNKED))
@pytest.mark.parametrize("nbytes", [8, 64, 1024])
def test_valid_frame_of_wrong_size(
    store_factory: Callable[[], Any], case: str, nbytes: int
) -> None:
    """A well-formed compressed frame whose content is not one chunk (128 bytes here)."""
    _make(store_factory, **CHUNKED[case])
    key = _first_key(case)
    _raw_store(store_factory()).put(key, FRAME[case].encode(bytes(range(256)) * (nbytes // 256)
                                                           + bytes(nbytes % 256)))
    message = _read_fails(store_factory, key)
    assert "128" in message or "expected" in message


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("position", [0, -1, -5])
def test_crc32c_mismatch(store_factory: Callable[[], Any], compressed: bool, position: int) -> None:
    codecs = [ZstdCodec(level=1), Crc32cCodec()] if compressed else [Crc32cCodec()]
    _make(store_factory, chunks=(4, 4), compressors=codecs)
    raw = bytearray(np.asarray(_raw_store(store_factory()).get("arr/c/1/0").data).tobytes())
    raw[position] ^= 0x01
    _raw_store(store_factory()).put("arr/c/1/0", bytes(raw))
    message = _read_fails(store_factory, "arr/c/1/0")
    assert "crc32c" in message
    # a partial read touching the same chunk fails the same way
    _read_fails(store_factory, "arr/c/1/0", (slice(5, 6), slice(0, 1)))


def test_uncompressed_chunk_of_wrong_size(store_factory: Callable[[], Any]) -> None:
    _make(store_factory, chunks=(4, 4), compressors=None, serializer=BytesCodec(endian="big"))
    _raw_store(store_factory()).put("arr/c/0/1", bytes(100))
    message = _read_fails(store_factory, "arr/c/0/1")
    assert "100" in message


# --- shards: 8x8 array, 4x4 shards of 2x2 inner chunks, zstd inner chunks, index with crc32c

N_INNER = 4
INDEX_NBYTES = N_INNER * 16 + 4
SHARD_KEY = "arr/c/0/0"
LAST_INNER = (slice(2, 4), slice(2, 4))  # inner chunk (1, 1) of shard (0, 0): stored last
ONE_INNER = (slice(0, 2), slice(0, 2))  # inner chunk (0, 0)


def _make_sharded(store_factory: Callable[[], Any], location: str) -> None:
    from zarr.codecs import ShardingCodec

    sharding = ShardingCodec(
        chunk_shape=(2, 2), codecs=[BytesCodec(), ZstdCodec(level=1)], index_location=location
    )
    _make(store_factory, chunks=(4, 4), serializer=sharding, compressors=None)


def _shard_bytes(store_factory: Callable[[], Any]) -> bytes:
    return bytes(np.asarray(_raw_store(store_factory()).get(SHARD_KEY).data).tobytes())


def _split_index(blob: bytes, location: str) -> tuple[np.ndarray[Any, Any], bytes]:
    """The index table and the rest of the shard."""
    if location == "end":
        index, body = blob[-INDEX_NBYTES:], blob[:-INDEX_NBYTES]
    else:
        index, body = blob[:INDEX_NBYTES], blob[INDEX_NBYTES:]
    assert crc32c.crc32c(index[:-4]) == int.from_bytes(index[-4:], "little")
    return np.frombuffer(index[:-4], dtype="<u8").reshape(N_INNER, 2).copy(), body


def _join_index(table: np.ndarray[Any, Any], body: bytes, location: str) -> bytes:
    payload = table.astype("<u8").tobytes()
    index = payload + crc32c.crc32c(payload).to_bytes(4, "little")
    return body + index if location == "end" else index + body


SHARD_SELECTIONS = {"whole": Ellipsis, "partial-last": LAST_INNER, "partial-first": ONE_INNER}


@pytest.fixture(params=["end", "start"])
def location(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("selection", ["whole", "partial-last"])
def test_truncated_shard(store_factory: Callable[[], Any], location: str, selection: str) -> None:
    _make_sharded(store_factory, location)
    blob = _shard_bytes(store_factory)
    _raw_store(store_factory()).put(SHARD_KEY, blob[:-10])
    _read_fails(store_factory, SHARD_KEY, SHARD_SELECTIONS[selection])


@pytest.mark.parametrize("selection", list(SHARD_SELECTIONS))
@pytest.mark.parametrize("length", [0, 5, INDEX_NBYTES - 1])
def test_shard_shorter_than_index(
    store_factory: Callable[[], Any], location: str, selection: str, length: int
) -> None:
    _make_sharded(store_factory, location)
    blob = _shard_bytes(store_factory)
    _raw_store(store_factory()).put(SHARD_KEY, blob[:length])
    _read_fails(store_factory, SHARD_KEY, SHARD_SELECTIONS[selection])


@pytest.mark.parametrize("selection", list(SHARD_SELECTIONS))
@pytest.mark.parametrize("target", ["table", "checksum"])
def test_shard_index_crc_mismatch(
    store_factory: Callable[[], Any], location: str, selection: str, target: str
) -> None:
    _make_sharded(store_factory, location)
    blob = bytearray(_shard_bytes(store_factory))
    start = len(blob) - INDEX_NBYTES if location == "end" else 0
    pos = start + (INDEX_NBYTES - 2 if target == "checksum" else 3)
    blob[pos] ^= 0x10
    _raw_store(store_factory()).put(SHARD_KEY, bytes(blob))
    message = _read_fails(store_factory, SHARD_KEY, SHARD_SELECTIONS[selection])
    assert "crc32c" in message


@pytest.mark.parametrize("selection", ["whole", "partial-last"])
@pytest.mark.parametrize("field", ["offset", "length", "overlaps-index"])
def test_shard_index_points_past_the_end(
    store_factory: Callable[[], Any], location: str, selection: str, field: str
) -> None:
    """A well-formed index (correct crc32c) whose entry for inner chunk (1, 1) is out of range."""
    _make_sharded(store_factory, location)
    blob = _shard_bytes(store_factory)
    table, body = _split_index(blob, location)
    last = 3  # C-order index of inner chunk (1, 1)
    if field == "offset":
        table[last, 0] = len(blob) + 100
    elif field == "length":
        table[last, 1] = len(blob)
    elif location == "end":
        # the chunk runs into the index
        table[last, 1] += 8
    else:
        # the chunk starts inside the index
        table[last, 0] = 4
    _raw_store(store_factory()).put(SHARD_KEY, _join_index(table, body, location))
    _read_fails(store_factory, SHARD_KEY, SHARD_SELECTIONS[selection])


@pytest.mark.parametrize("selection", ["whole", "partial-last"])
def test_corrupt_inner_chunk(
    store_factory: Callable[[], Any], location: str, selection: str
) -> None:
    _make_sharded(store_factory, location)
    blob = _shard_bytes(store_factory)
    table, _ = _split_index(blob, location)
    offset, length = (int(v) for v in table[3])
    corrupt = bytearray(blob)
    corrupt[offset : offset + length] = _garbage(length)
    _raw_store(store_factory()).put(SHARD_KEY, bytes(corrupt))
    message = _read_fails(store_factory, SHARD_KEY, SHARD_SELECTIONS[selection])
    assert "(1, 1)" in message
    # the intact inner chunk (0, 0) still reads
    arr = zarr.open_array(store_factory(), path="arr", mode="r")
    assert arr[ONE_INNER].shape == (2, 2)


def test_sharded_write_over_corrupt_shard_fails(store_factory: Callable[[], Any]) -> None:
    """A partial write must decode the old shard; a corrupt one is reported, not overwritten."""
    _make_sharded(store_factory, "end")
    blob = _shard_bytes(store_factory)
    _raw_store(store_factory()).put(SHARD_KEY, blob[:-3])
    arr = zarr.open_array(store_factory(), path="arr", mode="r+")
    with pytest.raises(CorruptChunkError) as info:
        arr[0, 0] = -1.0
    assert SHARD_KEY in str(info.value)
    assert _shard_bytes(store_factory) == blob[:-3]


# -------------------------------------------------------------------------------------------
# unwritable stores


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_read_only_local_store(tmp_path: Path) -> None:
    root = tmp_path / "ro.zarr"
    arr = zarr.create_array(LocalStore(root), shape=(6, 6), chunks=(3, 3), dtype="i4")
    arr[...] = 1
    before = _snapshot(root)
    ro = zarr.open_array(LocalStore(root, read_only=True), mode="r")
    with pytest.raises(ValueError, match="read-only") as info:
        ro[...] = 2
    assert not isinstance(info.value, CorruptChunkError)
    with pytest.raises(ValueError, match="read-only"):
        ro[0, 0] = 2
    assert _snapshot(root) == before
    np.testing.assert_array_equal(zarr.open_array(LocalStore(root), mode="r")[...], 1)


def test_read_only_memory_store() -> None:
    shared = MemoryStore()
    arr = zarr.create_array(shared, shape=(6,), chunks=(3,), dtype="u2")
    arr[...] = 4
    before = {k: v.to_bytes() for k, v in shared._store_dict.items()}
    ro = zarr.open_array(MemoryStore(store_dict=shared._store_dict, read_only=True), mode="r")
    with pytest.raises(ValueError, match="read-only"):
        ro[...] = 5
    assert {k: v.to_bytes() for k, v in shared._store_dict.items()} == before


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_file_where_a_folder_should_be(tmp_path: Path, zarr_format: int) -> None:
    root = tmp_path / "blocked.zarr"
    key_encoding = {"name": "v2", "separator": "/"} if zarr_format == 2 else None
    arr = zarr.create_array(
        LocalStore(root), shape=(4, 4), chunks=(2, 2), dtype="f4", zarr_format=zarr_format,
        chunk_key_encoding=key_encoding,
    )
    arr[...] = 3.0
    row1 = root / ("1" if zarr_format == 2 else "c/1")
    for child in row1.iterdir():
        child.unlink()
    row1.rmdir()
    row1.write_bytes(b"not a folder")
    before = _snapshot(root)
    with pytest.raises(StoreError) as info:
        arr[2:4, :] = 7.0
    message = str(info.value)
    assert str(root.as_uri()) in message
    rel = "1/" if zarr_format == 2 else "c/1/"
    assert f"'{rel}" in message
    assert isinstance(info.value, OSError)
    assert _snapshot(root) == before  # earlier chunks intact, the file untouched
    assert not [p for p in root.rglob("*") if p.name.endswith(TEMP_SUFFIX)]
    np.testing.assert_array_equal(arr[0:2, :], 3.0)


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="root ignores folder permissions, so chmod 0o555 does not stop writes",
)
def test_folder_without_write_permission(tmp_path: Path) -> None:  # pragma: no cover - non-root
    root = tmp_path / "locked.zarr"
    arr = zarr.create_array(LocalStore(root), shape=(4,), chunks=(2,), dtype="i8")
    arr[...] = 1
    before = _snapshot(root)
    folder = root / "c"
    folder.chmod(0o555)
    try:
        with pytest.raises(StoreError) as info:
            arr[...] = 2
        assert "c/" in str(info.value)
        assert _snapshot(root) == before
        assert not [p for p in root.rglob("*") if p.name.endswith(TEMP_SUFFIX)]
    finally:
        folder.chmod(0o755)
