"""Array layouts and selections shared by the layout and selection parity modules."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import (
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    ZstdCodec,
)

from cuzarr.testing import Selection

StoreFactory = Callable[[str], Any]


def store_factory(kind: str, tmp_path: Path) -> StoreFactory:
    """``make_store(name)`` for ``kind`` in memory / local / zip."""

    def make(name: str) -> Any:
        if kind == "memory":
            return zarr.storage.MemoryStore()
        if kind == "local":
            return zarr.storage.LocalStore(tmp_path / name)
        if kind == "zip":
            return zarr.storage.ZipStore(tmp_path / f"{name}.zip", mode="w")
        raise ValueError(kind)

    return make


#: layout id -> ``zarr.create_array`` keyword arguments (without dtype).
LAYOUTS: dict[str, dict[str, Any]] = {
    "v3-0d": {"shape": (), "chunks": (), "zarr_format": 3},
    "v3-1d": {"shape": (7,), "chunks": (3,), "zarr_format": 3},
    "v3-2d-ragged": {"shape": (13, 9), "chunks": (5, 4), "zarr_format": 3},
    "v3-3d": {"shape": (9, 8, 7), "chunks": (4, 3, 5), "zarr_format": 3},
    "v3-5d-tczyx": {"shape": (2, 3, 5, 6, 7), "chunks": (1, 2, 3, 4, 5), "zarr_format": 3},
    "v3-3d-transpose": {
        "shape": (9, 8, 7),
        "chunks": (4, 3, 5),
        "filters": [TransposeCodec(order=(2, 0, 1))],
        "zarr_format": 3,
    },
    "v3-sharded-index-end": {
        "shape": (13, 9),
        "shards": (10, 8),
        "chunks": (5, 4),
        "compressors": [ZstdCodec(level=1)],
        "zarr_format": 3,
    },
    "v3-sharded-index-start": {
        "shape": (13, 9),
        "chunks": (10, 8),
        "serializer": ShardingCodec(
            chunk_shape=(5, 4),
            codecs=[BytesCodec(), GzipCodec(level=1)],
            index_codecs=[BytesCodec(), Crc32cCodec()],
            index_location="start",
            subchunk_write_order="lexicographic",
        ),
        "compressors": None,
        "zarr_format": 3,
    },
    "v3-sharded-3d-index-nocrc": {
        "shape": (9, 8, 7),
        "chunks": (8, 6, 7),
        "serializer": ShardingCodec(
            chunk_shape=(4, 3, 7),
            codecs=[TransposeCodec(order=(1, 0, 2)), BytesCodec(endian="big"), ZstdCodec()],
            index_codecs=[BytesCodec()],
            index_location="end",
            subchunk_write_order="lexicographic",
        ),
        "compressors": None,
        "zarr_format": 3,
    },
    "v3-sharded-5d-tczyx": {
        "shape": (2, 3, 5, 6, 7),
        "shards": (2, 2, 4, 4, 7),
        "chunks": (1, 2, 2, 2, 7),
        "zarr_format": 3,
    },
    # Shards inside shards (zarr's nested sharding), byte-identical to zarr's: inner shards
    # leave out their empty inner chunks as zarr's inner pipeline does.
    "v3-nested-sharded": {
        "shape": (13, 9),
        "chunks": (10, 8),
        "serializer": ShardingCodec(
            chunk_shape=(5, 4),
            codecs=[
                ShardingCodec(
                    chunk_shape=(5, 2),
                    codecs=[BytesCodec(), ZstdCodec(level=1)],
                    index_location="start",
                    subchunk_write_order="lexicographic",
                )
            ],
        ),
        "compressors": None,
        "zarr_format": 3,
    },
    "v3-nested-sharded-3d-crc": {
        "shape": (9, 8, 7),
        "chunks": (8, 8, 7),
        "serializer": ShardingCodec(
            chunk_shape=(4, 4, 7),
            codecs=[
                ShardingCodec(
                    chunk_shape=(2, 2, 7),
                    codecs=[BytesCodec(endian="big")],
                    subchunk_write_order="lexicographic",
                ),
                Crc32cCodec(),
            ],
            index_location="start",
        ),
        "compressors": None,
        "zarr_format": 3,
    },
    "v3-cke-v2-dot": {
        "shape": (13, 9),
        "chunks": (5, 4),
        "chunk_key_encoding": {"name": "v2", "separator": "."},
        "zarr_format": 3,
    },
    "v3-cke-v2-slash": {
        "shape": (9, 8, 7),
        "chunks": (4, 3, 5),
        "chunk_key_encoding": {"name": "v2", "separator": "/"},
        "zarr_format": 3,
    },
    "v3-cke-default-dot": {
        "shape": (9, 8, 7),
        "chunks": (4, 3, 5),
        "chunk_key_encoding": {"name": "default", "separator": "."},
        "zarr_format": 3,
    },
    "v2-0d": {"shape": (), "chunks": (), "zarr_format": 2},
    "v2-1d": {"shape": (7,), "chunks": (3,), "zarr_format": 2},
    "v2-2d-dot": {"shape": (13, 9), "chunks": (5, 4), "zarr_format": 2},
    "v2-3d-F": {"shape": (9, 8, 7), "chunks": (4, 3, 5), "zarr_format": 2, "order": "F"},
    "v2-5d-slash": {
        "shape": (2, 3, 5, 6, 7),
        "chunks": (1, 2, 3, 4, 5),
        "zarr_format": 2,
        "chunk_key_encoding": {"name": "v2", "separator": "/"},
    },
    "v2-2d-F-slash": {
        "shape": (13, 9),
        "chunks": (5, 4),
        "zarr_format": 2,
        "order": "F",
        "chunk_key_encoding": {"name": "v2", "separator": "/"},
    },
}

#: layouts whose stored bytes are not compared (their contents are, through every cross-read):
#: gzip frames embed their compression time in seconds, so two writers' bytes differ whenever
#: their writes straddle a second. Shards themselves are byte-identical: cuzarr lays inner
#: chunks out in zarr's order (Morton by default, or the ``subchunk_write_order`` of zarr's
#: codec object), which every other sharded layout checks.
NO_BYTE_COMPARE = {"v3-sharded-index-start"}  # inner chunks are gzip-compressed


def layout_params(ids: list[str] | None = None) -> list[Any]:
    """``pytest.param`` per layout id."""
    return [pytest.param(name, id=name) for name in (ids or list(LAYOUTS))]


def grid(layout: dict[str, Any]) -> tuple[int, ...]:
    """The chunk grid's chunk shape as ``arr.blocks`` sees it (the shard shape when sharded)."""
    return tuple(layout.get("shards") or layout["chunks"])


def inner_chunks(layout: dict[str, Any]) -> tuple[int, ...]:
    """The (inner) chunk shape."""
    serializer = layout.get("serializer")
    if isinstance(serializer, ShardingCodec):
        return tuple(serializer.chunk_shape)
    return tuple(layout["chunks"])


def selections(shape: tuple[int, ...], block: tuple[int, ...]) -> dict[str, Selection]:
    """One selection of each kind for an array of ``shape``; ``block``: shape of a block."""
    if not shape:
        return {
            "ellipsis": Selection("basic", Ellipsis),
            "empty-tuple": Selection("basic", ()),
        }
    nd = len(shape)
    rng = np.random.default_rng(sum(shape))
    nblocks = [math.ceil(n / c) for n, c in zip(shape, block, strict=True)]
    mask = rng.random(shape) < 0.3
    return {
        "slices-step": Selection("basic", tuple(slice(1, None, 2) for _ in shape)),
        "slices-step3-stop": Selection("basic", tuple(slice(0, n - 1, 3) for n in shape)),
        "negative": Selection("basic", (-1, *(slice(-3, None) for _ in shape[1:]))),
        "negative-slice": Selection("basic", tuple(slice(-(n // 2) - 1, -1) for n in shape)),
        "integers": Selection("basic", tuple(n // 2 for n in shape)),
        "ellipsis-last": Selection("basic", (Ellipsis, -2)),
        "int-ellipsis": Selection("basic", (1 % shape[0], Ellipsis)),
        "oindex-ints": Selection(
            "oindex", tuple(np.array(sorted({n - 1, 0, n // 2})[::-1]) for n in shape)
        ),
        "oindex-mixed": Selection(
            "oindex",
            (np.arange(shape[0]) % 2 == 0, *[slice(None, None, 2)] * (nd - 2), [shape[-1] - 1, 0])
            if nd > 1
            else (np.arange(shape[0]) % 2 == 0,),
        ),
        "vindex-coords": Selection(
            "vindex", tuple(np.array([0, n - 1, n // 2, 1 % n]) for n in shape)
        ),
        "vindex-mask": Selection("vindex", mask),
        "blocks-int": Selection("blocks", (nblocks[0] - 1,)),
        "blocks-slices": Selection("blocks", tuple(slice(0, min(2, b)) for b in nblocks)),
    }
