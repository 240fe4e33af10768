"""Bounded fuzzing (hypothesis) of what reads untrusted bytes: the metadata parsers, the shard
index reader, the frame-header parsers, the engine's decode path over mutated frames, and the
selection planner. Only cuzarr's documented errors may come out; no crash, no hang, no large
allocation. Failures found are pinned with ``@example`` (the corpus)."""

from __future__ import annotations

import copy
import gzip
import itertools
import json
import os
import zlib
from typing import Any

import crc32c
import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from zarr.storage import MemoryStore

import cuzarr
from cuzarr import CorruptChunkError, CuzarrError
from cuzarr.codecs.build import build_chunk_codec
from cuzarr.codecs.headers import (
    blosc_nbytes,
    lz4_numcodecs_nbytes,
    zstd_content_size,
    zstd_max_decoded_size,
)
from cuzarr.metadata import parse_v2, parse_v3

#: Examples per target: small in CI (the file runs in seconds); raise it for a longer hunt,
#: e.g. ``CUZARR_FUZZ_EXAMPLES=5000 pytest tests/test_fuzz.py``.
EXAMPLES = int(os.environ.get("CUZARR_FUZZ_EXAMPLES", "120"))
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

V3 = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [10, 7],
    "data_type": "float64",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0.0,
    "codecs": [
        {"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2, 3],
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                       {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 1,
                                                           "shuffle": "shuffle",
                                                           "typesize": 8, "blocksize": 0}}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                             {"name": "crc32c"}],
            "index_location": "end",
        }},
    ],
    "attributes": {},
}
V2 = {
    "zarr_format": 2,
    "shape": [10, 7],
    "chunks": [4, 3],
    "dtype": "<f8",
    "fill_value": "NaN",
    "order": "C",
    "filters": [{"id": "delta", "dtype": "<f8"}],
    "compressor": {"id": "zstd", "level": 1},
    "dimension_separator": ".",
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats()
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(base)
    paths = _paths(doc)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        parent = doc
        try:
            for p in path[:-1]:
                parent = parent[p]
            action = draw(st.sampled_from(["replace", "delete", "add"]))
            if action == "replace":
                parent[path[-1]] = draw(json_values)
            elif action == "delete" and isinstance(parent, dict):
                parent.pop(path[-1], None)
            elif isinstance(parent, dict):
                parent[draw(st.text(max_size=6))] = draw(json_values)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation removed or retyped the parent
    return doc


def _parse_and_build(doc: dict[str, Any]) -> None:
    parse = parse_v3 if doc.get("zarr_format") == 3 else parse_v2
    try:
        spec = parse(doc, path="fuzz")
        build_chunk_codec(spec)
    except CuzarrError:
        pass


@FUZZ
@given(mutated(V3))
@example({**V3, "shape": [2**70, 7]})  # corpus: shapes beyond int64 were accepted
def test_fuzz_parse_v3(doc: dict[str, Any]) -> None:
    _parse_and_build(doc)


@FUZZ
@given(mutated(V2))
def test_fuzz_parse_v2(doc: dict[str, Any]) -> None:
    _parse_and_build(doc)


@FUZZ
@given(st.binary(max_size=600))
def test_fuzz_parse_raw_json(raw: bytes) -> None:
    """Arbitrary bytes as a zarr.json document."""
    from cuzarr._json import load_json_document

    try:
        doc = load_json_document(raw, document="zarr.json", path="fuzz")
        if isinstance(doc, dict):
            _parse_and_build(doc)
    except CuzarrError:
        pass


# -------------------------------------------------------------------------------------------
# shard index

SHARD = build_chunk_codec(parse_v3(copy.deepcopy(V3), path="fuzz")).sharding
assert SHARD is not None


@FUZZ
@given(
    st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
             min_size=SHARD.n_inner, max_size=SHARD.n_inner)
    | st.lists(st.tuples(st.integers(0, 400), st.integers(0, 200)),
               min_size=SHARD.n_inner, max_size=SHARD.n_inner),
    st.one_of(st.none(), st.integers(0, 2000)),
    st.booleans(),
)
@example([(0, 10), (5, 10)], 100, True)  # corpus: overlapping entries were accepted
@example([(0, 0), (0, 0)], 0, True)  # corpus: a shard shorter than its index -> OverflowError
def test_fuzz_shard_index(entries: list[tuple[int, int]], size: int | None, good_crc: bool) -> None:
    entries = (entries * SHARD.n_inner)[: SHARD.n_inner]
    body = np.array(entries, dtype="<u8").tobytes()
    checksum = crc32c.crc32c(body) if good_crc else crc32c.crc32c(body) ^ 1
    raw = body + checksum.to_bytes(4, "little")
    try:
        table = SHARD.decode_index(raw, shard_nbytes=size)
    except CorruptChunkError:
        return
    assert good_crc
    present = [(int(o), int(n)) for o, n in table if not (o == n == 2**64 - 1)]
    limit = 2**63 if size is None else size - SHARD.index_nbytes
    spans = sorted((o, o + n) for o, n in present if n)
    for o, n in present:
        assert o + n <= limit
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start


# -------------------------------------------------------------------------------------------
# frame headers


@FUZZ
@given(st.binary(max_size=300))
@example(b"\x28\xb5\x2f\xfd\x00")
@example(b"\x50\x2a\x4d\x18\xff\xff\xff\xff")  # skippable frame with a huge size
def test_fuzz_header_parsers(data: bytes) -> None:
    for parser in (zstd_content_size, blosc_nbytes, lz4_numcodecs_nbytes, zstd_max_decoded_size):
        got = parser(data)
        assert got is None or got >= 0


# -------------------------------------------------------------------------------------------
# the engine's decode path over mutated frames

FRAME_CASES: dict[str, tuple[dict[str, Any], bytes]] = {}


def _setup_frames() -> None:
    data = np.linspace(0, 1, 12, dtype="<f8")
    blosc = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1, typesize=8)
    v3 = {**V3, "shape": [4, 3], "codecs": [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                            "typesize": 8, "blocksize": 0}}]}
    FRAME_CASES["v3-blosc"] = (v3, blosc.encode(data))
    v3t = {**v3, "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
                            *v3["codecs"]]}
    FRAME_CASES["v3-blosc-transpose"] = (v3t, blosc.encode(data.reshape(4, 3).T.copy()))
    v3z = {**v3, "codecs": [v3["codecs"][0], {"name": "zstd", "configuration": {"level": 1}}]}
    FRAME_CASES["v3-zstd"] = (v3z, numcodecs.Zstd(level=1).encode(data))
    v3g = {**v3, "codecs": [v3["codecs"][0], {"name": "gzip", "configuration": {"level": 1}}]}
    FRAME_CASES["v3-gzip"] = (v3g, gzip.compress(data.tobytes()))
    v2 = {**V2, "shape": [4, 3], "filters": None, "compressor": {"id": "zlib", "level": 1}}
    FRAME_CASES["v2-zlib"] = (v2, zlib.compress(data.tobytes()))
    v2l = {**v2, "compressor": {"id": "lz4", "acceleration": 1}}
    FRAME_CASES["v2-lz4"] = (v2l, numcodecs.LZ4().encode(data))


_setup_frames()


def _read_chunk(doc: dict[str, Any], frame: bytes) -> Any:
    store = MemoryStore()
    from zarr.core.buffer import cpu

    name = "zarr.json" if doc["zarr_format"] == 3 else ".zarray"
    key = "c/0/0" if doc["zarr_format"] == 3 else "0.0"
    store._store_dict[name] = cpu.Buffer.from_bytes(json.dumps(doc).encode())
    store._store_dict[key] = cpu.Buffer.from_bytes(frame)
    with cuzarr.configure(strict=True):
        return zarr.open_array(store, mode="r")[...]


@st.composite
def mutated_frame(draw: st.DrawFn) -> tuple[str, bytes]:
    case = draw(st.sampled_from(sorted(FRAME_CASES)))
    frame = bytearray(FRAME_CASES[case][1])
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "truncate", "extend", "int32"]))
        pos = draw(st.integers(0, max(0, len(frame) - 1)))
        if op == "flip" and frame:
            frame[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and frame:
            frame[pos] = draw(st.integers(0, 255))
        elif op == "truncate":
            del frame[pos:]
        elif op == "extend":
            frame += draw(st.binary(max_size=20))
        elif op == "int32" and len(frame) >= pos + 4:
            value = draw(st.sampled_from([0, 1, 2**31 - 1, 2**32 - 1, 96, 97, 16]))
            frame[pos : pos + 4] = value.to_bytes(4, "little")
    return case, bytes(frame)


@FUZZ
@given(mutated_frame())
def test_fuzz_mutated_frames_through_the_engine(case_frame: tuple[str, bytes]) -> None:
    case, frame = case_frame
    doc, _ = FRAME_CASES[case]
    try:
        got = _read_chunk(doc, frame)
    except CorruptChunkError as exc:
        assert "c/0/0" in str(exc) or "0.0" in str(exc)
        return
    assert got.shape == (4, 3)


# -------------------------------------------------------------------------------------------
# the selection planner (through zarr's API with cuzarr as engine, against NumPy)

ARR_SHAPE = (9, 7)
_DATA = np.arange(63, dtype="int16").reshape(ARR_SHAPE)


@pytest.fixture(scope="module")
def fuzz_array() -> Any:
    with cuzarr.configure(strict=True):
        arr = zarr.create_array(MemoryStore(), shape=ARR_SHAPE, chunks=(4, 3), shards=(8, 6),
                                dtype="int16")
        arr[...] = _DATA
    return arr


index_entries = (
    st.integers(-12, 12)
    | st.builds(slice, st.none() | st.integers(-12, 12), st.none() | st.integers(-12, 12),
                st.none() | st.integers(1, 4))
)


@FUZZ
@given(st.tuples(index_entries, index_entries) | st.tuples(index_entries))
def test_fuzz_selection_planner(fuzz_array: Any, sel: tuple[Any, ...]) -> None:
    try:
        expected = _DATA[sel]
    except IndexError:
        with cuzarr.configure(strict=True), pytest.raises(IndexError):
            fuzz_array[sel]
        return
    with cuzarr.configure(strict=True):
        got = fuzz_array[sel]
    np.testing.assert_array_equal(got, expected)
