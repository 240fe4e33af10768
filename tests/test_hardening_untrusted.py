"""Untrusted stores: absurd metadata, decompression bombs, hostile shard indexes, escaping keys,
code-executing codecs. Every case is refused with a documented error before any large
allocation (checked with ``tracemalloc``, which sees NumPy and ``bytes`` buffers)."""

from __future__ import annotations

import bz2
import copy
import gzip
import json
import lzma
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, ZstdCodec
from zarr.storage import LocalStore

import cuzarr
from cuzarr import CorruptChunkError, MetadataError, StoreError, UnsupportedError
from cuzarr.codecs.build import build_chunk_codec
from cuzarr.codecs.headers import zstd_max_decoded_size
from cuzarr.metadata import parse_v2, parse_v3
from cuzarr.stores.base import Range, Suffix
from cuzarr.stores.local import TEMP_SUFFIX, LocalChunkStore, check_key

#: A bomb expands to this many bytes; tests assert peak allocation stays far below.
BOMB = 32 * 1024 * 1024
PEAK_LIMIT = 8 * 1024 * 1024


@pytest.fixture(autouse=True)
def _strict() -> Iterator[None]:
    cuzarr.reset_stats()
    with cuzarr.configure(strict=True):
        yield


def _peak(fn: Callable[[], object]) -> tuple[BaseException | None, int]:
    """Run ``fn``; return the exception it raised and the peak traced allocation."""
    tracemalloc.start()
    try:
        fn()
        err: BaseException | None = None
    except Exception as exc:
        err = exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return err, peak


def _v3_doc(codecs: list[dict[str, Any]], shape: list[int], chunks: list[int]) -> dict[str, Any]:
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": "float64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0,
        "codecs": codecs,
        "attributes": {},
    }


def _v2_doc(compressor: dict[str, Any] | None, filters: Any = None) -> dict[str, Any]:
    return {
        "zarr_format": 2,
        "shape": [8, 8],
        "chunks": [4, 4],
        "dtype": "<f8",
        "fill_value": 0.0,
        "order": "C",
        "filters": filters,
        "compressor": compressor,
        "dimension_separator": ".",
    }


def _write_array(root: Path, doc: dict[str, Any], chunks: dict[str, bytes]) -> None:
    arr = root / "arr"
    arr.mkdir(parents=True, exist_ok=True)
    name = "zarr.json" if doc["zarr_format"] == 3 else ".zarray"
    (arr / name).write_text(json.dumps(doc))
    for key, data in chunks.items():
        path = arr / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _open(root: Path) -> Any:
    return zarr.open_array(LocalStore(root), path="arr", mode="r")


# -------------------------------------------------------------------------------------------
# absurd metadata


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("shape", [-1, 4]),
        ("shape", [2**70, 4]),
        ("shape", "huge"),
        ("data_type", "float1024"),
        ("data_type", {"name": "x" * 10_000}),
        ("chunk_grid", {"name": "regular", "configuration": {"chunk_shape": [0, 4]}}),
        ("chunk_grid", {"name": "regular", "configuration": {"chunk_shape": [4]}}),
    ],
)
def test_absurd_metadata_is_a_metadata_error(field: str, value: Any) -> None:
    doc = _v3_doc([{"name": "bytes", "configuration": {"endian": "little"}}], [8, 8], [4, 4])
    doc[field] = value
    with pytest.raises((MetadataError, UnsupportedError)) as info:
        build_chunk_codec(parse_v3(copy.deepcopy(doc), path="bad"))
    assert isinstance(info.value, cuzarr.CuzarrError)


def test_huge_chunk_is_refused_before_allocation(tmp_path: Path) -> None:
    # 2**40 elements of float64 per chunk: 8 TiB if anything tried to allocate it.
    doc = _v3_doc(
        [{"name": "bytes", "configuration": {"endian": "little"}}], [2**20, 2**20], [2**20, 2**20]
    )
    _write_array(tmp_path, doc, {"c/0/0": b"\0" * 64})
    err, peak = _peak(lambda: _open(tmp_path)[0, 0])
    # Refused in every mode (not handed to zarr's pipeline, which has no limit).
    assert isinstance(err, MetadataError), err
    assert "max_chunk_nbytes" in str(err)
    assert peak < PEAK_LIMIT


def test_max_chunk_nbytes_is_configurable(tmp_path: Path) -> None:
    doc = _v3_doc([{"name": "bytes", "configuration": {"endian": "little"}}], [8, 8], [8, 8])
    data = np.arange(64, dtype="<f8")
    _write_array(tmp_path, doc, {"c/0/0": data.tobytes()})
    with cuzarr.configure(max_chunk_nbytes=256), pytest.raises(MetadataError, match="512"):
        _open(tmp_path)[...]
    with cuzarr.configure(max_chunk_nbytes=512):
        np.testing.assert_array_equal(_open(tmp_path)[...], data.reshape(8, 8))
    assert cuzarr.stats()["engine_reads"] == 1


# -------------------------------------------------------------------------------------------
# decompression bombs and size mismatches


def _zstd_rle_bomb(nbytes: int) -> bytes:
    """A zstd frame without a content size: RLE blocks of 128 KiB, 4 bytes each."""
    block = 128 * 1024
    out = bytearray(b"\x28\xb5\x2f\xfd")  # magic
    out += bytes([0x00, (17 - 10) << 3])  # no content size, not single segment; window 128 KiB
    n = nbytes // block
    for i in range(n):
        last = 1 if i == n - 1 else 0
        out += (last | (1 << 1) | (block << 3)).to_bytes(3, "little") + b"\0"
    return bytes(out)


def _gzip_bomb(n: int) -> bytes:
    return gzip.compress(b"\0" * n, compresslevel=9)


BOMBS: dict[str, tuple[dict[str, Any], Callable[[int], bytes]]] = {
    "v3-gzip": (_v3_doc([{"name": "bytes", "configuration": {"endian": "little"}},
                         {"name": "gzip", "configuration": {"level": 5}}], [8, 8], [4, 4]),
                _gzip_bomb),
    "v3-gzip-transpose": (_v3_doc([{"name": "transpose", "configuration": {"order": [1, 0]}},
                                   {"name": "bytes", "configuration": {"endian": "little"}},
                                   {"name": "gzip", "configuration": {"level": 5}}],
                                  [8, 8], [4, 4]), _gzip_bomb),
    "v3-zstd-no-size": (_v3_doc([{"name": "bytes", "configuration": {"endian": "little"}},
                                 {"name": "zstd", "configuration": {"level": 1}}], [8, 8], [4, 4]),
                        _zstd_rle_bomb),
    "v3-zstd-no-size-big-endian": (_v3_doc([{"name": "bytes", "configuration": {"endian": "big"}},
                                            {"name": "zstd", "configuration": {"level": 1}}],
                                           [8, 8], [4, 4]), _zstd_rle_bomb),
    "v2-zlib": (_v2_doc({"id": "zlib", "level": 1}), lambda n: zlib.compress(b"\0" * n, 9)),
    "v2-bz2": (_v2_doc({"id": "bz2", "level": 9}), lambda n: bz2.compress(b"\0" * n, 9)),
    "v2-lzma": (_v2_doc({"id": "lzma", "format": 1, "check": -1, "preset": None,
                         "filters": None}), lambda n: lzma.compress(b"\0" * n, preset=1)),
    "v2-zstd-no-size-with-filter": (
        _v2_doc({"id": "zstd", "level": 1}, filters=[{"id": "delta", "dtype": "<f8"}]),
        _zstd_rle_bomb,
    ),
    "v2-zlib-with-filter": (
        _v2_doc({"id": "zlib", "level": 1}, filters=[{"id": "delta", "dtype": "<f8"}]),
        lambda n: zlib.compress(b"\0" * n, 9),
    ),
}


@pytest.fixture(scope="module")
def bomb_frames() -> dict[str, bytes]:
    return {name: make(BOMB) for name, (_, make) in BOMBS.items()}


@pytest.mark.parametrize("case", list(BOMBS))
def test_decompression_bomb(tmp_path: Path, case: str, bomb_frames: dict[str, bytes]) -> None:
    doc, _ = BOMBS[case]
    frame = bomb_frames[case]
    assert len(frame) < BOMB // 500  # really a bomb
    key = "c/0/0" if doc["zarr_format"] == 3 else "0.0"
    _write_array(tmp_path, doc, {key: frame})
    # Filters hide the expected size from the compressor: the bound is max_chunk_nbytes.
    with cuzarr.configure(max_chunk_nbytes=1 << 20):
        err, peak = _peak(lambda: _open(tmp_path)[0:4, 0:4])
    assert isinstance(err, CorruptChunkError), err
    assert f"arr/{key}" in str(err)
    assert peak < PEAK_LIMIT
    assert cuzarr.stats().get("fallback_reads", 0) == 0


def test_bomb_after_sharding_is_bounded_by_max_chunk_nbytes(tmp_path: Path) -> None:
    # A compressor after sharding_indexed: the shard's encoded size is not known.
    doc = _v3_doc(
        [
            {"name": "sharding_indexed", "configuration": {
                "chunk_shape": [2, 2],
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            }},
            {"name": "gzip", "configuration": {"level": 5}},
        ],
        [8, 8], [4, 4],
    )
    _write_array(tmp_path, doc, {"c/0/0": _gzip_bomb(BOMB)})
    with cuzarr.configure(max_chunk_nbytes=1 << 20):
        err, peak = _peak(lambda: _open(tmp_path)[...])
    assert isinstance(err, CorruptChunkError), err
    assert "arr/c/0/0" in str(err)
    assert peak < PEAK_LIMIT


def test_blosc_header_claiming_huge_size_is_refused_before_allocation(tmp_path: Path) -> None:
    # A transpose makes the chain non-direct, so decode() (not decode_into) runs.
    doc = _v3_doc([{"name": "transpose", "configuration": {"order": [1, 0]}},
                   {"name": "bytes", "configuration": {"endian": "little"}},
                   {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5,
                                                       "shuffle": "shuffle", "typesize": 8,
                                                       "blocksize": 0}}], [8, 8], [4, 4])
    frame = bytearray(numcodecs.Blosc(cname="lz4").encode(np.zeros(16, "<f8")))
    frame[4:8] = (2**31 - 1).to_bytes(4, "little")
    _write_array(tmp_path, doc, {"c/0/0": bytes(frame)})
    err, peak = _peak(lambda: _open(tmp_path)[...])
    assert isinstance(err, CorruptChunkError), err
    assert "2147483647" in str(err)
    assert peak < PEAK_LIMIT


@pytest.mark.parametrize("damage", ["empty", "short", "cut", "cbytes"])
@pytest.mark.parametrize("chain", ["direct", "transpose"])
def test_blosc_frame_shorter_than_its_header_says_is_refused(
    tmp_path: Path, damage: str, chain: str
) -> None:
    # c-blosc reads as far as the header's compressed size, whatever the buffer's length: a
    # chunk file read into a thread's reused buffer after a longer one decoded that one's bytes.
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}},
              {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3,
                                                  "shuffle": "shuffle", "typesize": 8,
                                                  "blocksize": 0}}]
    if chain == "transpose":
        codecs.insert(0, {"name": "transpose", "configuration": {"order": [1, 0]}})
    doc = _v3_doc(codecs, [128, 64], [64, 64])
    good = np.arange(64 * 64, dtype="<f8").reshape(64, 64)
    stored = good.T.copy() if chain == "transpose" else good
    frame = bytes(numcodecs.Blosc(cname="zstd", clevel=3).encode(stored))
    bad = {"empty": b"", "short": frame[:12], "cut": frame[: len(frame) // 2],
           "cbytes": frame[:12] + (len(frame) + 64).to_bytes(4, "little") + frame[16:]}[damage]
    _write_array(tmp_path, doc, {"c/0/0": frame, "c/1/0": bad})
    a = cuzarr.open(tmp_path / "arr")
    assert isinstance(a, cuzarr.Array)
    np.testing.assert_array_equal(a[0:64], good)  # its bytes stay in the read buffer
    with pytest.raises(CorruptChunkError, match=r"c/1/0"):
        a[64:128]
    with pytest.raises(CorruptChunkError, match=r"arr/c/1/0"):
        _open(tmp_path)[64:128]


COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "zlib": lambda b: zlib.compress(b),
    "bz2": lambda b: bz2.compress(b),
    "lzma": lambda b: lzma.compress(b),
    "zstd": lambda b: numcodecs.Zstd().encode(b),
}


@pytest.mark.parametrize("name", list(COMPRESSORS))
@pytest.mark.parametrize("nbytes", [64, 127, 129, 1024])
def test_wrong_decoded_size_is_an_error(tmp_path: Path, name: str, nbytes: int) -> None:
    cfg: dict[str, Any] = {"id": name}
    if name == "lzma":
        cfg.update(format=1, check=-1, preset=None, filters=None)
    _write_array(tmp_path, _v2_doc(cfg), {"0.0": COMPRESSORS[name](b"\1" * nbytes)})
    with pytest.raises(CorruptChunkError, match=r"arr/0\.0") as info:
        _open(tmp_path)[0:4, 0:4]
    assert "128" in str(info.value)


@pytest.mark.parametrize("dtype", ["<f8", ">f8"])
@pytest.mark.parametrize("size", [None, 127, 129, 0])
def test_uncompressed_chunks_of_a_whole_read(tmp_path: Path, dtype: str, size: int | None) -> None:
    """Whole uncompressed chunks copied straight from their stored bytes into strided regions of
    the output (no scratch chunk): right values, and a stored size other than 128 bytes named."""
    doc = _v2_doc(None)
    doc["dtype"] = dtype
    data = np.arange(64, dtype=dtype).reshape(8, 8)
    chunks = {
        f"{i}.{j}": data[4 * i : 4 * i + 4, 4 * j : 4 * j + 4].tobytes()
        for i in range(2)
        for j in range(2)
    }
    if size is not None:
        chunks["0.1"] = (chunks["0.1"] * 2)[:size]
    _write_array(tmp_path, doc, chunks)
    if size is None:
        np.testing.assert_array_equal(_open(tmp_path)[...], data)
        np.testing.assert_array_equal(cuzarr.open(tmp_path / "arr")[...], data)
        return
    with pytest.raises(CorruptChunkError, match=r"arr/0\.1") as info:
        _open(tmp_path)[...]
    assert "128" in str(info.value)


@pytest.mark.parametrize("name", ["zlib", "bz2", "lzma"])
def test_truncated_stream_is_an_error(tmp_path: Path, name: str) -> None:
    cfg: dict[str, Any] = {"id": name}
    if name == "lzma":
        cfg.update(format=1, check=-1, preset=None, filters=None)
    frame = COMPRESSORS[name](np.arange(16, dtype="<f8").tobytes())
    _write_array(tmp_path, _v2_doc(cfg), {"0.0": frame[: len(frame) - 3]})
    with pytest.raises(CorruptChunkError, match=r"arr/0\.0"):
        _open(tmp_path)[0:4, 0:4]


@pytest.mark.parametrize("case", ["gzip-two-members", "gzip-zero-padding", "bz2-two-streams",
                                  "lzma-two-streams", "zlib-trailing-bytes"])
def test_bounded_decoders_agree_with_numcodecs(tmp_path: Path, case: str) -> None:
    """The bounded stream decoders accept what numcodecs' own decoders accept."""
    data = np.arange(16, dtype="<f8").tobytes()
    half = len(data) // 2
    name = case.split("-")[0]
    cfg: dict[str, Any] = {"id": name}
    if name == "lzma":
        cfg.update(format=1, check=-1, preset=None, filters=None)
    if case == "gzip-two-members":
        frame = gzip.compress(data[:half]) + gzip.compress(data[half:])
    elif case == "gzip-zero-padding":
        frame = gzip.compress(data) + b"\0" * 7
    elif case == "bz2-two-streams":
        frame = bz2.compress(data[:half]) + bz2.compress(data[half:])
    elif case == "lzma-two-streams":
        frame = lzma.compress(data[:half]) + lzma.compress(data[half:])
    else:
        frame = zlib.compress(data) + b"tail"
    expected = np.frombuffer(numcodecs.get_codec(cfg).decode(frame), "<f8").reshape(4, 4)
    _write_array(tmp_path, _v2_doc(cfg), {"0.0": frame})
    np.testing.assert_array_equal(_open(tmp_path)[0:4, 0:4], expected)
    assert cuzarr.stats()["engine_reads"] == 1


def test_zstd_block_walk_bounds_real_frames() -> None:
    import os

    for n in (0, 1, 1000, 300_000):
        payload = os.urandom(n // 2) + b"\0" * (n - n // 2)
        frame = numcodecs.Zstd(level=3).encode(payload)
        bound = zstd_max_decoded_size(frame)
        assert bound is not None and bound >= n
    assert zstd_max_decoded_size(_zstd_rle_bomb(BOMB)) == BOMB
    assert zstd_max_decoded_size(b"\x28\xb5\x2f\xfd\x00") is None


# -------------------------------------------------------------------------------------------
# hostile shard indexes


def _sharded(tmp_path: Path, location: str) -> tuple[Path, Any]:
    arr = zarr.create_array(
        LocalStore(tmp_path), name="arr", shape=(8, 8), chunks=(2, 2), shards=(4, 4),
        dtype="float64", compressors=None, serializer=BytesCodec(),
        **({} if location == "end" else {"config": None}),
    )
    if location == "start":
        doc = json.loads((tmp_path / "arr" / "zarr.json").read_text())
        doc["codecs"][0]["configuration"]["index_location"] = "start"
        (tmp_path / "arr" / "zarr.json").write_text(json.dumps(doc))
        arr = zarr.open_array(LocalStore(tmp_path), path="arr")
    arr[...] = np.arange(64, dtype="float64").reshape(8, 8)
    return tmp_path / "arr" / "c" / "0" / "0", arr


def _rewrite_index(path: Path, location: str, edit: Callable[[np.ndarray], None]) -> None:
    import crc32c

    raw = bytearray(path.read_bytes())
    n_index = 4 * 2 * 8 + 4
    start = 0 if location == "start" else len(raw) - n_index
    table = np.frombuffer(bytes(raw[start : start + n_index - 4]), "<u8").reshape(4, 2).copy()
    edit(table)
    body = table.tobytes()
    raw[start : start + n_index] = body + crc32c.crc32c(body).to_bytes(4, "little")
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("selection", ["all", "one"])
def test_overlapping_shard_entries(tmp_path: Path, location: str, selection: str) -> None:
    path, _ = _sharded(tmp_path, location)

    def overlap(t: np.ndarray) -> None:
        t[1, 0] = t[0, 0] + 8  # inner chunk 1 starts inside inner chunk 0

    _rewrite_index(path, location, overlap)
    sel = (slice(None), slice(None)) if selection == "all" else (slice(0, 4), slice(0, 4))
    with pytest.raises(CorruptChunkError, match="overlap") as info:
        _open(tmp_path)[sel]
    assert "arr/c/0/0" in str(info.value)


@pytest.mark.parametrize("location", ["start", "end"])
def test_absurd_shard_entry_length_allocates_nothing(tmp_path: Path, location: str) -> None:
    path, _ = _sharded(tmp_path, location)

    def absurd(t: np.ndarray) -> None:
        t[0, 1] = 2**62

    _rewrite_index(path, location, absurd)
    err, peak = _peak(lambda: _open(tmp_path)[0:2, 0:2])
    assert isinstance(err, CorruptChunkError), err
    assert "arr/c/0/0" in str(err)
    assert peak < PEAK_LIMIT


def test_local_get_ranges_never_allocates_past_the_file(tmp_path: Path) -> None:
    (tmp_path / "k").write_bytes(b"abcdef")
    store = LocalChunkStore(tmp_path)
    err, peak = _peak(lambda: store.get_ranges("k", [(2, 2**62), (100, 5)]))
    assert err is None
    parts = store.get_ranges("k", [(2, 2**62), (100, 5)])
    assert parts is not None
    assert [bytes(p) for p in parts] == [b"cdef", b""]
    assert peak < PEAK_LIMIT
    err, peak = _peak(lambda: store.get("k", Range(2, 2**62)))
    assert err is None and peak < PEAK_LIMIT
    got = store.get("k", Range(2, 2**62))
    assert got is not None and bytes(got.data) == b"cdef" and got.size == 6


# -------------------------------------------------------------------------------------------
# keys and paths that leave the store root


BAD_KEYS = ["../outside", "a/../../outside", "/etc/passwd", "a//b", "./a", "a/.", "a\\..\\b",
            "a\0b", "", "c/0/0" + TEMP_SUFFIX]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_local_store_refuses_escaping_keys(tmp_path: Path, key: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside").write_bytes(b"secret")
    store = LocalChunkStore(root)
    for op in (
        lambda: store.get(key),
        lambda: store.get_ranges(key, [(0, 1)]),
        lambda: store.get(key, Suffix(1)),
        lambda: store.get(key, Range(0, 1)),
        lambda: store.open_object(key),
        lambda: store.read_into(key, np.empty(6, np.uint8)),
        lambda: store.put(key, b"x"),
        lambda: store.delete(key),
    ):
        with pytest.raises(StoreError, match="Refusing key"):
            op()
    assert (tmp_path / "outside").read_bytes() == b"secret"
    assert list(root.iterdir()) == []


@pytest.mark.parametrize("key", ["c/0/0", "0.0", "a/b/c/1.2.3", "zarr.json", "x..y", "..a"])
def test_ordinary_keys_are_accepted(key: str) -> None:
    assert check_key(key) == key


def _key_is_safe(key: str) -> bool:
    """check_key's rule, stated plainly (the function has a fast path for plain keys)."""
    segments = key.split("/")
    return bool(
        key
        and not key.startswith("/")
        and "\\" not in key
        and "\0" not in key
        and all(seg not in ("", ".", "..") for seg in segments)
        and not key.endswith(TEMP_SUFFIX)
    )


@settings(max_examples=1500, deadline=None)
@given(
    st.one_of(
        st.text(alphabet="ab1_-./\\\0\u00e9", max_size=14),
        st.from_regex(r"[a-c0-9._-]{0,4}(/[a-c0-9._-]{0,4}){0,3}(\.partial)?", fullmatch=True),
    )
)
def test_check_key_accepts_exactly_the_safe_keys(key: str) -> None:
    if _key_is_safe(key):
        assert check_key(key) == key
    else:
        with pytest.raises(StoreError, match="Refusing key"):
            check_key(key)


def test_zarr_refuses_escaping_array_paths(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\.\."):
        zarr.open_array(LocalStore(tmp_path / "root"), path="../escape", mode="w",
                        shape=(2,), dtype="i4")
    assert not (tmp_path / "escape").exists()


# -------------------------------------------------------------------------------------------
# codecs that execute code


@pytest.mark.parametrize("allow", [False, True])
@pytest.mark.parametrize(
    "doc",
    [
        _v2_doc({"id": "pickle"}),
        _v2_doc(None, filters=[{"id": "pickle"}]),
        _v2_doc(None, filters=[{"id": "msgpack2"}]),
        _v3_doc([{"name": "bytes", "configuration": {"endian": "little"}},
                 {"name": "numcodecs.pickle", "configuration": {}}], [8, 8], [4, 4]),
    ],
    ids=["v2-compressor", "v2-filter", "v2-msgpack", "v3"],
)
def test_engine_never_decodes_object_codecs(doc: dict[str, Any], allow: bool) -> None:
    """The engine refuses pickle-like codecs whatever the setting; zarr's pipeline (the
    fallback) keeps its own ``array.allow_unsafe_pickle_decode`` guard."""
    with zarr.config.set({"array.allow_unsafe_pickle_decode": allow}):
        parse = parse_v3 if doc["zarr_format"] == 3 else parse_v2
        # An object codec as the first v2 filter makes zarr's registry read the dtype as an
        # object type, which the metadata refuses; anywhere else the codec builder refuses it.
        with pytest.raises((UnsupportedError, MetadataError)) as info:
            build_chunk_codec(parse(copy.deepcopy(doc), path="p"))
        if isinstance(info.value, UnsupportedError):
            assert "pickle" in str(info.value)


def test_zarr_fallback_keeps_its_pickle_guard() -> None:
    from zarr.codecs._v2 import _check_pickle_allowed

    with pytest.raises(Exception, match="allow_unsafe_pickle_decode"):
        _check_pickle_allowed((numcodecs.Pickle(),))
    with zarr.config.set({"array.allow_unsafe_pickle_decode": True}):
        _check_pickle_allowed((numcodecs.Pickle(),))


def test_valid_arrays_still_read(tmp_path: Path) -> None:
    """The hardening keeps ordinary data readable (sanity for each bounded codec path)."""
    data = np.arange(64, dtype="float64").reshape(8, 8)
    for i, comp in enumerate([GzipCodec(), ZstdCodec(), BloscCodec()]):
        arr = zarr.create_array(LocalStore(tmp_path), name=f"a{i}", shape=(8, 8), chunks=(4, 4),
                                dtype="float64", compressors=comp)
        arr[...] = data
        np.testing.assert_array_equal(arr[...], data)
