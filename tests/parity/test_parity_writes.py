"""Parity over write sequences and fill values: full, partial, scalar and back to the fill
value, with ``write_empty_chunks`` on and off (per array and through zarr's global config),
special fill values (NaN, -0.0, +inf, non-zero integers, complex), and a ZipStore."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import zarr

from cuzarr.testing import METADATA_KEYS, Selection, Write, check_parity, sample_values

from ._layouts import store_factory

SHAPE = (13, 9)
CHUNKS = (5, 4)
N_CHUNKS = 3 * 3

FILLS = [
    pytest.param("f8", np.nan, id="nan-f8"),
    pytest.param("f8", -0.0, id="negzero-f8"),
    pytest.param("f4", np.inf, id="inf-f4"),
    pytest.param("f2", -np.inf, id="neginf-f2"),
    pytest.param("i2", 42, id="int42-i2"),
    pytest.param("u8", 2**64 - 1, id="umax-u8"),
    pytest.param("c16", complex(np.nan, -0.0), id="complex-nan-negzero-c16"),
    pytest.param("c8", complex(1, 2), id="complex-c8"),
]


def _chunk_keys(keys: set[str]) -> set[str]:
    return {k for k in keys if k.rsplit("/", 1)[-1] not in METADATA_KEYS}


def _sequence(dtype: str, fill: Any) -> list[Write]:
    full = sample_values(dtype, SHAPE, seed=11)
    return [
        Write(Ellipsis, full),  # full
        Write((slice(2, 7), slice(3, 6)), sample_values(dtype, (5, 3), seed=12)),  # partial
        Write((12, 8), full[6, 6]),  # scalar into the ragged corner chunk (not the fill)
        Write((slice(0, 5), slice(0, 4)), fill),  # chunk (0, 0) back to the fill value
        Write((slice(5, 10), slice(4, 8)), np.full((5, 4), fill, dtype=dtype)),  # chunk (1, 1)
        Write((slice(10, 13), slice(8, 9)), fill),  # the ragged corner chunk (2, 2)
        Write((slice(10, 13), slice(8, 9)), full[6, 6]),  # ... and back again
    ]


@pytest.mark.parametrize("write_empty_chunks", [False, True])
@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize(("dtype", "fill"), FILLS)
def test_write_sequence_parity(
    dtype: str, fill: Any, fmt: int, write_empty_chunks: bool, make_store: Any
) -> None:
    create = {
        "shape": SHAPE,
        "chunks": CHUNKS,
        "dtype": dtype,
        "fill_value": fill,
        "zarr_format": fmt,
        "config": {"write_empty_chunks": write_empty_chunks},
    }
    reads = [Selection("basic", (slice(0, 6), slice(0, 5)))]
    result = check_parity(make_store, create, _sequence(dtype, fill), reads=reads)
    keys = _chunk_keys(result.keys)
    if write_empty_chunks:
        assert len(keys) == N_CHUNKS
    else:
        # chunks (0, 0) and (1, 1) hold only the fill value and are not stored
        assert len(keys) == N_CHUNKS - 2


@pytest.mark.parametrize("write_empty_chunks", [False, True])
def test_global_write_empty_chunks_config(write_empty_chunks: bool, make_store: Any) -> None:
    """``array.write_empty_chunks`` in zarr's config reaches cuzarr's engine."""
    create = {"shape": SHAPE, "chunks": CHUNKS, "dtype": "i4", "fill_value": 0}
    steps = [Write(Ellipsis, 0), Write((0, 0), 5)]
    with zarr.config.set({"array.write_empty_chunks": write_empty_chunks}):
        result = check_parity(make_store, create, steps)
    assert len(_chunk_keys(result.keys)) == (N_CHUNKS if write_empty_chunks else 1)


def test_negative_zero_is_not_the_fill_value(make_store: Any) -> None:
    """+0.0 over a -0.0 fill is data (zarr compares bit patterns), and the chunk is stored."""
    create = {"shape": SHAPE, "chunks": CHUNKS, "dtype": "f8", "fill_value": -0.0}
    result = check_parity(make_store, create, [Write((slice(0, 5), slice(0, 4)), 0.0)])
    assert _chunk_keys(result.keys) == {"arr/c/0/0"}
    assert np.signbit(result.model[0, 0]) == np.False_
    assert np.signbit(result.model[12, 8]) == np.True_


@pytest.mark.parametrize("fmt", [2, 3])
def test_zip_store_parity(fmt: int, tmp_path: Any) -> None:
    """A store without a fast path in cuzarr: through its own async API.

    ZipStore cannot delete or overwrite entries cleanly (zipfile warns about duplicate names),
    so every chunk is written exactly once.
    """
    create: dict[str, Any] = {
        "shape": SHAPE,
        "chunks": CHUNKS,
        "dtype": "<f8",
        "fill_value": np.nan,
        "zarr_format": fmt,
    }
    full = sample_values("f8", SHAPE, seed=13)
    reads = [Selection("oindex", ([0, 12], slice(None))), Selection("vindex", ([1, 2], [3, 4]))]
    result = check_parity(
        store_factory("zip", tmp_path), create, [Write(Ellipsis, full)], reads=reads
    )
    assert len(_chunk_keys(result.keys)) == N_CHUNKS
    for store in (result.zarr_store, result.cuzarr_store):
        store.close()


def test_zip_store_sharded_parity(tmp_path: Any) -> None:
    create: dict[str, Any] = {
        "shape": SHAPE,
        "shards": (10, 8),
        "chunks": (5, 4),
        "dtype": "i2",
        "fill_value": -1,
    }
    full = sample_values("i2", SHAPE, seed=14)
    result = check_parity(
        store_factory("zip", tmp_path),
        create,
        [Write(Ellipsis, full)],
        reads=[Selection("basic", (slice(3, 12), slice(1, 2)))],
        compare_bytes=True,
    )
    assert _chunk_keys(result.keys) == {"arr/c/0/0", "arr/c/0/1", "arr/c/1/0", "arr/c/1/1"}
