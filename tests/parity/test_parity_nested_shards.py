"""Shards inside shards (zarr's nested sharding) served by cuzarr's engine, not zarr's.

The layouts' parity (every selection, both pipelines reading both stores, byte-identical
shards) is in test_parity_layouts / test_parity_selections (``v3-nested-sharded*``). Here:
zarr's empty-chunk rule inside inner shards with ``write_empty_chunks`` off and on, three
levels, the explicit API, a corrupt inner shard named by its key, and what is still left to
zarr (a sharded shard index).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

import cuzarr
from cuzarr import CorruptChunkError, UnsupportedError
from cuzarr.codecs.build import build_chunk_codec
from cuzarr.metadata.v3 import parse_v3
from cuzarr.testing import Selection, Write, check_parity

from ._layouts import StoreFactory

pytestmark = pytest.mark.filterwarnings("ignore:Combining a `sharding_indexed`")


def _nested(levels: int, *, location: str = "end") -> ShardingCodec:
    """``levels`` sharding codecs one inside the other, (8, 8) shards down to (1, 2) chunks."""
    codec = ShardingCodec(chunk_shape=(1, 2), codecs=[BytesCodec(), ZstdCodec(level=1)])
    shapes = [(2, 2), (4, 4)][: levels - 1]
    for shape in shapes:
        codec = ShardingCodec(chunk_shape=shape, codecs=[codec], index_location=location)
    return codec


def _sparse_steps(shape: tuple[int, int]) -> list[Write]:
    """Data with runs of the fill value inside inner shards, then writes that empty some."""
    rng = np.random.default_rng(11)
    full = rng.integers(1, 9, shape).astype("i2")
    full[:3, :5] = 0  # whole inner chunks of the innermost level at the fill value
    return [
        Write(Ellipsis, full),
        Write((slice(4, 8), slice(0, 4)), np.int16(0)),  # one level-2 inner shard emptied
        Write((slice(9, 11), slice(6, 13)), np.int16(0)),  # partly across inner shards
        Write((slice(0, 16), slice(8, 16)), np.int16(0)),  # a whole outer shard: deleted
    ]


@pytest.mark.parametrize("write_empty", [False, True], ids=["drop-empty", "write-empty"])
@pytest.mark.parametrize("levels", [2, 3])
def test_nested_empty_chunk_rule_matches_zarr(
    levels: int, write_empty: bool, make_store: StoreFactory
) -> None:
    # zarr writes an inner shard through an inner pipeline that applies the array's
    # write_empty_chunks: empty inner chunks are left out of it (and an inner shard with none
    # left out of its shard). Byte-identical stores prove cuzarr does the same.
    shape = (16, 16)
    result = check_parity(
        make_store,
        {
            "shape": shape,
            "dtype": "i2",
            "chunks": (8, 8),
            "serializer": _nested(levels),
            "compressors": None,
            "fill_value": 0,
            "config": {"write_empty_chunks": write_empty},
        },
        _sparse_steps(shape),
        reads=[
            Selection("basic", (slice(1, 15, 3), slice(2, 9))),
            Selection("oindex", ([0, 5, 9, 15], slice(None, None, 2))),
        ],
    )
    chunk_keys = {k for k in result.keys if "/c/" in k}
    assert "arr/c/0/0" in chunk_keys
    # emptied by the last write: deleted, or stored with write_empty_chunks (as zarr does)
    assert ("arr/c/1/1" in chunk_keys) is write_empty


def test_write_empty_keeps_empty_inner_chunks(tmp_path: Path) -> None:
    # The same data with the rule on and off: the shard holding runs of the fill value is
    # larger when empty inner chunks are kept (their index entries point at real bytes).
    data = np.zeros((8, 8), "i2")
    data[7, 7] = 5
    sizes = {}
    for write_empty in (False, True):
        with cuzarr.configure(strict=True):
            z = zarr.create_array(
                str(tmp_path / f"we{write_empty}.zarr"), shape=(8, 8), dtype="i2",
                chunks=(8, 8), serializer=_nested(2), compressors=None, fill_value=0,
                config={"write_empty_chunks": write_empty},
            )
            z[...] = data
            np.testing.assert_array_equal(z[...], data)
        sizes[write_empty] = (tmp_path / f"we{write_empty}.zarr" / "c" / "0" / "0").stat().st_size
    assert sizes[True] > sizes[False]


def test_explicit_api_reads_and_writes_nested_shards(tmp_path: Path) -> None:
    path = str(tmp_path / "n.zarr")
    rng = np.random.default_rng(3)
    data = rng.integers(0, 1000, (20, 24)).astype("<i4")
    z = zarr.create_array(
        path, shape=data.shape, dtype="<i4", chunks=(8, 8), serializer=_nested(3, location="start"),
        compressors=None, fill_value=0,
    )
    z[...] = data
    a = cuzarr.open(path, mode="r+")
    np.testing.assert_array_equal(a[...], data)
    np.testing.assert_array_equal(a[3:19:4, 5:23:3], data[3:19:4, 5:23:3])
    a[2:13, 7:20] = 0
    data[2:13, 7:20] = 0
    a[15, :] = np.arange(24, dtype="<i4")
    data[15, :] = np.arange(24, dtype="<i4")
    np.testing.assert_array_equal(zarr.open_array(path, mode="r")[...], data)


def test_corrupt_inner_shard_names_its_shard(tmp_path: Path) -> None:
    path = tmp_path / "c.zarr"
    data = np.arange(64, dtype="<i2").reshape(8, 8)
    z = zarr.create_array(
        str(path), shape=(8, 8), dtype="<i2", chunks=(8, 8),
        serializer=ShardingCodec(
            chunk_shape=(4, 4),
            codecs=[ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec()])],
            index_codecs=[BytesCodec()],  # no checksum on the outer index: the inner one breaks
        ),
        compressors=None,
    )
    z[...] = data
    shard = path / "c" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    # The first inner shard's own index is its last 4 * 16 + 4 bytes (entries and crc32c):
    # overwrite its first offset so that it points outside the inner shard.
    first_inner_len = 4 * 2 * 2 * 2 + 4 * 16 + 4
    entry = first_inner_len - (4 * 16 + 4)
    raw[entry : entry + 8] = (2**40).to_bytes(8, "little")
    shard.write_bytes(bytes(raw))
    with pytest.raises(CorruptChunkError) as info, cuzarr.configure(strict=True):
        zarr.open_array(str(path), mode="r")[...]
    assert "c/0/0" in str(info.value)


def test_sharded_shard_index_is_left_to_zarr() -> None:
    doc: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [8],
        "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [4],
                    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                    "index_codecs": [
                        {
                            "name": "sharding_indexed",
                            "configuration": {"chunk_shape": [1, 2]},
                        }
                    ],
                },
            }
        ],
        "attributes": {},
    }
    spec = parse_v3(json.loads(json.dumps(doc)), path="grp/a")
    with pytest.raises(UnsupportedError) as info:
        build_chunk_codec(spec)
    message = str(info.value)
    assert "sharded shard index" in message
    assert "codecs[0].configuration.index_codecs[0]" in message
    assert "'grp/a'" in message


def _small_nested_array(path: Path, levels: int) -> Any:
    """A 16x16 array in (8, 8) shards nested ``levels`` deep (:func:`_nested`), with empty
    innermost chunks at [8:12, 0:4]; the data written."""
    data = np.arange(16 * 16, dtype="<i2").reshape(16, 16)
    data[8:12, 0:4] = 0  # empty innermost chunks: fill values
    z = zarr.create_array(
        str(path), shape=(16, 16), dtype="<i2", chunks=(8, 8), fill_value=0,
        serializer=_nested(levels), compressors=None,
    )  # fmt: skip
    z[...] = data
    return data


def _corrupt_first_innermost_chunk(path: Path) -> None:
    """Break the zstd frame of innermost chunk (0, 0) (elements [0, 0:2]) of shard c/0/0: the
    shard's first frame, its magic bytes zeroed."""
    shard = path / "c" / "0" / "0"
    raw = bytearray(shard.read_bytes())
    frame = bytes(raw).find(b"\x28\xb5\x2f\xfd")
    assert frame >= 0
    raw[frame : frame + 4] = b"\x00\x00\x00\x00"
    shard.write_bytes(bytes(raw))


def _boxes(shape: tuple[int, int], step: int, size: int) -> list[tuple[slice, slice]]:
    return [
        (slice(i, i + size), slice(j, j + size))
        for i in range(0, shape[0] - size + 1, step)
        for j in range(0, shape[1] - size + 1, step)
    ]


@pytest.mark.parametrize("levels", [2, 3])
def test_small_reads_decode_only_the_inner_chunks_they_touch(tmp_path: Path, levels: int) -> None:
    # A box inside one inner chunk that is a shard is decoded from the inner chunks it
    # touches (as zarr reads nested shards in part): boxes at every offset read right, and
    # a corrupt innermost chunk spoils only the reads that touch it, named by its shard.
    path = tmp_path / "p.zarr"
    data = _small_nested_array(path, levels)
    api = cuzarr.open(str(path))
    with cuzarr.configure(strict=True):
        zz = zarr.open_array(str(path), mode="r")
        for box in _boxes((16, 16), 1, 3) + _boxes((16, 16), 2, 1):
            np.testing.assert_array_equal(zz[box], data[box], err_msg=str(box))
            np.testing.assert_array_equal(api[box], data[box], err_msg=str(box))
    _corrupt_first_innermost_chunk(path)
    with cuzarr.configure(strict=True):
        zz = zarr.open_array(str(path), mode="r")
        np.testing.assert_array_equal(zz[1:2, 0:2], data[1:2, 0:2])  # same inner shard
        np.testing.assert_array_equal(api[1:2, 0:2], data[1:2, 0:2])
        for reader in (zz, api):
            with pytest.raises(CorruptChunkError) as info:
                reader[0:1, 0:3]
            assert "c/0/0" in str(info.value)


def _selections() -> list[tuple[str, Any]]:
    """Reads across several inner shards, each needed in part: boxes, steps, lists, masks,
    points (zarr's orthogonal and coordinate indexers), and boxes that drop an axis."""
    mask = np.zeros(16, bool)
    mask[[1, 2, 9]] = True
    return [
        *(("box", box) for box in _boxes((16, 16), 3, 5)),
        ("box", (slice(1, 15), slice(3, 4))),
        ("box", (5, slice(1, 11))),
        ("box", (slice(3, 13), 6)),
        ("steps", (slice(1, 16, 3), slice(0, 16, 5))),
        ("orthogonal", ([1, 2, 13], slice(3, 10))),
        ("orthogonal", (mask, [0, 5, 6, 15])),
        ("points", ([1, 5, 6, 14], [2, 9, 3, 14])),
    ]


def _read(reader: Any, kind: str, sel: Any) -> Any:
    if kind == "orthogonal":
        return reader.get_orthogonal_selection(sel)
    if kind == "points":
        return reader.get_coordinate_selection(sel)
    return reader[sel]


def _want(data: Any, kind: str, sel: Any) -> Any:
    if kind == "orthogonal":
        return data[np.ix_(*(np.flatnonzero(s) if isinstance(s, np.ndarray) else
                             np.arange(16)[s] for s in sel))]  # fmt: skip
    return data[sel]  # boxes, steps and points (NumPy's vectorized indexing) alike


@pytest.mark.parametrize("levels", [2, 3])
def test_reads_across_inner_shards_decode_only_what_they_need(
    tmp_path: Path, levels: int
) -> None:
    # Reads that need part of several inner chunks that are shards (the general sharded read)
    # decode only the innermost chunks inside the selection's bounds of each: every kind of
    # selection reads right, and a corrupt innermost chunk spoils only the reads whose bounds
    # reach it (a box across four inner shards that stays off it reads right, which fails
    # when inner shards are decoded whole).
    path = tmp_path / "q.zarr"
    data = _small_nested_array(path, levels)
    api = cuzarr.open(str(path))
    with cuzarr.configure(strict=True):
        zz = zarr.open_array(str(path), mode="r")
        for kind, sel in _selections():
            want = _want(data, kind, sel)
            np.testing.assert_array_equal(_read(zz, kind, sel), want, err_msg=f"{kind} {sel}")
            if kind == "points":
                np.testing.assert_array_equal(api.vindex[sel], want, err_msg=str(sel))
            elif kind == "orthogonal":
                np.testing.assert_array_equal(api.oindex[sel], want, err_msg=str(sel))
            else:
                np.testing.assert_array_equal(api[sel], want, err_msg=f"{kind} {sel}")
    _corrupt_first_innermost_chunk(path)
    beside = (slice(1, 3), slice(1, 3))  # part of four inner shards, not chunk (0, 0)
    with cuzarr.configure(strict=True):
        zz = zarr.open_array(str(path), mode="r")
        for reader in (zz, api):
            np.testing.assert_array_equal(reader[beside], data[beside])
            np.testing.assert_array_equal(reader[1:6, 0:7], data[1:6, 0:7])
            with pytest.raises(CorruptChunkError) as info:
                reader[0:3, 1:3]
            assert "c/0/0" in str(info.value)
