"""Parity over data types: every dtype through a couple of codec chains, zarr v2 and v3.

Each case writes a full array, a partial block and a scalar through zarr's default pipeline
and through cuzarr (strict), then checks identical stored keys and bytes and every cross-read
against the NumPy model (see :func:`cuzarr.testing.check_parity`).
"""

from __future__ import annotations

from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec

import cuzarr
from cuzarr.testing import Selection, Write, check_parity, sample_values, use_pipeline

SHAPE = (13, 9)
CHUNKS = (5, 4)

DTYPES = [
    "bool",
    "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
    "complex64", "complex128",
    "datetime64[ns]", "datetime64[s]", "timedelta64[ms]",
    ">i2", ">u4", ">i8", ">f4", ">f8", ">c8", ">c16", ">M8[ms]",
    "S6", "<U4",
]  # fmt: skip


def _chains(fmt: int) -> dict[str, dict[str, Any]]:
    if fmt == 3:
        return {
            "default": {},
            "big-gzip-crc32c": {
                "serializer": BytesCodec(endian="big"),
                "compressors": [GzipCodec(level=1), Crc32cCodec()],
            },
        }
    return {
        "default": {},
        "blosc-F": {
            "compressors": numcodecs.Blosc(cname="lz4", clevel=3, shuffle=numcodecs.Blosc.SHUFFLE),
            "order": "F",
        },
    }


CASES = [
    pytest.param(fmt, chain, dtype, id=f"v{fmt}-{chain}-{dtype}")
    for fmt in (2, 3)
    for chain in _chains(fmt)
    for dtype in DTYPES
]


def _fill(dtype: str) -> Any:
    """A non-default fill value per dtype kind (the default is exercised by the codec suite)."""
    dt = np.dtype(dtype)
    if dt.kind in "mM":
        return np.array(5, dtype=dt.newbyteorder("="))[()]
    return {
        "b": True,
        "i": -3,
        "u": 7,
        "f": np.nan,
        "c": complex(1.5, -0.0),
        "S": b"zz",
        "U": "ab",
    }[dt.kind]


@pytest.mark.parametrize(("fmt", "chain", "dtype"), CASES)
def test_dtype_parity(fmt: int, chain: str, dtype: str, make_store: Any) -> None:
    dt = np.dtype(dtype)
    full = sample_values(dt, SHAPE, seed=1)
    part = sample_values(dt, (4, 6), seed=2)
    create = {
        "shape": SHAPE,
        "chunks": CHUNKS,
        "dtype": dt,
        "zarr_format": fmt,
        "fill_value": _fill(dtype),
        **_chains(fmt)[chain],
    }
    steps = [
        Write(Ellipsis, full),
        Write((slice(3, 7), slice(2, 8)), part),
        Write((12, 8), part[0, 0]),
        # back to the fill value: the whole first chunk
        Write((slice(0, 5), slice(0, 4)), _fill(dtype)),
    ]
    reads = [Selection("basic", (slice(None, None, 2), -1)), Selection("oindex", ([0, 12], [1, 8]))]
    # gzip frames carry their compression time (seconds): equal bytes only by luck
    result = check_parity(make_store, create, steps, reads=reads, compare_bytes="gzip" not in chain)
    # the fill-valued first chunk is not stored (write_empty_chunks defaults to False)
    first = "arr/0.0" if fmt == 2 else "arr/c/0/0"
    assert first not in result.keys
    assert len(result.keys) > 1


UNSUPPORTED = [
    pytest.param(3, str, id="v3-variable-length-string"),
    pytest.param(2, str, id="v2-variable-length-string"),
    pytest.param(3, np.dtype([("a", "<i4"), ("b", "<f8")]), id="v3-structured"),
    pytest.param(2, np.dtype([("a", "<i4"), ("b", "<f8")]), id="v2-structured"),
]


def _unsupported_values(dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype is str:
        return np.array([f"s{i}" * (i % 4) for i in range(n)], dtype=object).reshape(shape)
    out = np.zeros(n, dtype=dtype)
    out["a"] = np.arange(n)
    out["b"] = np.arange(n) / 4
    return out.reshape(shape)


@pytest.mark.parametrize(("fmt", "dtype"), UNSUPPORTED)
def test_unsupported_dtype_falls_back(fmt: int, dtype: Any, make_store: Any) -> None:
    values = _unsupported_values(dtype, (6, 5))
    create = {"shape": (6, 5), "chunks": (4, 3), "dtype": dtype, "zarr_format": fmt}
    result = check_parity(
        make_store, create, [Write(Ellipsis, values), Write((1, 2), values[0, 0])], engine=False
    )
    assert result.stats.get("fallback_arrays", 0) >= 3  # one write, two reads
    assert not result.stats.get("engine_reads") and not result.stats.get("engine_writes")
    # zarr swallows NotImplementedError (so UnsupportedError) from a pipeline's constructor and
    # rebuilds the pipeline from codecs alone; strict cuzarr then raises on the first write or
    # read, and the message must still say why.
    match = "not supported by cuzarr's engine"
    with use_pipeline("cuzarr", strict=True):
        arr = zarr.create_array(zarr.storage.MemoryStore(), **create)
        with pytest.raises(cuzarr.UnsupportedError, match=match):
            arr[...] = values
        arr = zarr.open_array(result.zarr_store, path="arr", mode="r")
        with pytest.raises(cuzarr.UnsupportedError, match=match):
            arr[...]
