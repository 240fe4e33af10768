"""Parity over codec chains: every chain with a couple of data types, zarr v2 and v3.

Each case writes a full array (ragged edge chunks), a partial block, a scalar and a chunk
back to the fill value through both pipelines; stored keys and bytes must match and every
cross-read must equal the NumPy model.
"""

from __future__ import annotations

from typing import Any

import numcodecs
import numpy as np
import pytest
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    TransposeCodec,
    ZstdCodec,
)
from zarr.codecs import numcodecs as zn

from cuzarr.testing import METADATA_KEYS, Selection, Write, check_parity, sample_values

SHAPE = (13, 9)
CHUNKS = (5, 4)

_BLOSC = [
    ("lz4", "noshuffle", 0),
    ("zstd", "shuffle", 256),
    ("zlib", "bitshuffle", 0),
    ("blosclz", "shuffle", 128),
    ("lz4hc", "bitshuffle", 64),
]

#: v3 chains: id -> (create_array keyword arguments, data types).
V3: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "bytes-little": (
        {"serializer": BytesCodec(endian="little"), "compressors": None},
        ("i2", "f8"),
    ),
    "bytes-big": ({"serializer": BytesCodec(endian="big"), "compressors": None}, ("u4", "c8")),
    "transpose": (
        {"filters": [TransposeCodec(order=(1, 0))], "compressors": None},
        ("i4", "f4"),
    ),
    "transpose-big-zstd": (
        {
            "filters": [TransposeCodec(order=(1, 0))],
            "serializer": BytesCodec(endian="big"),
            "compressors": [ZstdCodec(level=3)],
        },
        ("u2", "f8"),
    ),
    "zstd-l5-checksum": ({"compressors": [ZstdCodec(level=5, checksum=True)]}, ("i8", "f4")),
    "zstd-l-1-nochecksum": ({"compressors": [ZstdCodec(level=-1, checksum=False)]}, ("u1", "f2")),
    "gzip": ({"compressors": [GzipCodec(level=6)]}, ("i2", "c16")),
    "crc32c": ({"compressors": [Crc32cCodec()]}, ("u8", "f8")),
    "zstd-crc32c": ({"compressors": [ZstdCodec(level=1), Crc32cCodec()]}, ("i1", "f4")),
    **{
        f"blosc-{cname}-{shuffle}-bs{bs}": (
            {
                "compressors": [
                    BloscCodec(cname=cname, clevel=5, shuffle=shuffle, typesize=4, blocksize=bs)
                ]
            },
            ("i4", "f8"),
        )
        for cname, shuffle, bs in _BLOSC
    },
    "blosc-typesize-default": ({"compressors": [BloscCodec(cname="zstd")]}, ("u2", "f4")),
    "numcodecs.delta": ({"filters": [zn.Delta(dtype="<i4")], "compressors": None}, ("i4",)),
    "numcodecs.fixedscaleoffset": (
        {
            "filters": [zn.FixedScaleOffset(offset=0, scale=10, dtype="<f8", astype="<i4")],
            "compressors": [zn.Zlib(level=1)],
        },
        ("f8",),
    ),
    "numcodecs.zlib": ({"compressors": [zn.Zlib(level=3)]}, ("i2", "f8")),
    "numcodecs.lz4": ({"compressors": [zn.LZ4(acceleration=1)]}, ("u4", "f4")),
    "numcodecs.bz2": ({"compressors": [zn.BZ2(level=1)]}, ("i8", "c8")),
    "numcodecs.lzma": ({"compressors": [zn.LZMA(preset=1)]}, ("u1",)),
    "numcodecs.shuffle+zstd": (
        {"compressors": [zn.Shuffle(elementsize=8), zn.Zstd(level=1)]},
        ("f8",),
    ),
    "numcodecs.crc32": ({"compressors": [zn.CRC32()]}, ("i2",)),
    "numcodecs.adler32": ({"compressors": [zn.Adler32()]}, ("u2",)),
}

#: v2 chains: id -> (create_array keyword arguments, data types).
V2: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "none": ({"compressors": None}, ("i2", ">f8")),
    "zlib": ({"compressors": numcodecs.Zlib(level=1)}, ("i4", "f4")),
    "gzip": ({"compressors": numcodecs.GZip(level=1)}, ("u2", "f8")),
    "bz2": ({"compressors": numcodecs.BZ2(level=1)}, ("i8",)),
    "lzma": ({"compressors": numcodecs.LZMA(preset=1)}, ("u1", "c8")),
    "zstd": ({"compressors": numcodecs.Zstd(level=3)}, ("i2", "f2")),
    "zstd-checksum": ({"compressors": numcodecs.Zstd(level=1, checksum=True)}, ("u4",)),
    "lz4": ({"compressors": numcodecs.LZ4(acceleration=1)}, ("i4", "c16")),
    **{
        f"blosc-{cname}-{shuffle}-bs{bs}": (
            {
                "compressors": numcodecs.Blosc(
                    cname=cname,
                    clevel=5,
                    shuffle={"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[shuffle],
                    blocksize=bs,
                )
            },
            ("i2", ">f8"),
        )
        for cname, shuffle, bs in _BLOSC
    },
    "delta-zlib": (
        {"filters": [numcodecs.Delta(dtype="<i4")], "compressors": numcodecs.Zlib(level=1)},
        ("i4",),
    ),
    "fixedscaleoffset": (
        {
            "filters": [numcodecs.FixedScaleOffset(offset=0, scale=10, dtype="<f8", astype="<i4")],
            "compressors": None,
        },
        ("f8",),
    ),
    "quantize-zstd": (
        {"filters": [numcodecs.Quantize(digits=2, dtype="<f8")], "compressors": numcodecs.Zstd()},
        ("f8",),
    ),
    "shuffle-zlib": (
        {"filters": [numcodecs.Shuffle(elementsize=4)], "compressors": numcodecs.Zlib()},
        ("u4",),
    ),
    "astype": (
        {
            "filters": [numcodecs.AsType(encode_dtype="<i2", decode_dtype="<i8")],
            "compressors": None,
        },
        ("i8",),
    ),
    "order-F-blosc": (
        {"order": "F", "compressors": numcodecs.Blosc(cname="zstd", shuffle=1)},
        ("i4", "f8"),
    ),
    "order-F-delta-crc32": (
        {
            "order": "F",
            "filters": [numcodecs.Delta(dtype="<i2")],
            "compressors": numcodecs.CRC32(),
        },
        ("i2",),
    ),
}

#: Chains that lose precision: written values must be exactly representable after a round trip.
LOSSY = {"numcodecs.fixedscaleoffset", "fixedscaleoffset", "quantize-zstd", "astype"}


def _values(chain: str, dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    if chain in ("numcodecs.fixedscaleoffset", "fixedscaleoffset"):
        rng = np.random.default_rng(seed)
        return rng.integers(-3000, 3000, shape) / 10  # decoded as k / 10 exactly
    if chain == "quantize-zstd":
        # Quantize(digits=2) keeps values that are already multiples of 2**-7 exactly
        rng = np.random.default_rng(seed)
        return rng.integers(-3000, 3000, shape) / 128
    if chain == "astype":
        return np.random.default_rng(seed).integers(-(2**15), 2**15, shape).astype("i8")
    return sample_values(dtype, shape, seed=seed)


def _cases(fmt: int, chains: dict[str, tuple[dict[str, Any], tuple[str, ...]]]) -> list[Any]:
    return [
        pytest.param(fmt, name, dtype, id=f"v{fmt}-{name}-{dtype}")
        for name, (_, dtypes) in chains.items()
        for dtype in dtypes
    ]


CASES = _cases(3, V3) + _cases(2, V2)


@pytest.mark.parametrize(("fmt", "chain", "dtype"), CASES)
def test_codec_chain_parity(fmt: int, chain: str, dtype: str, make_store: Any) -> None:
    kwargs = (V3 if fmt == 3 else V2)[chain][0]
    full = _values(chain, dtype, SHAPE, 1)
    part = _values(chain, dtype, (4, 6), 2)
    fill = np.zeros((), dtype=dtype)[()]
    steps = [
        Write(Ellipsis, full),
        Write((slice(3, 7), slice(2, 8)), part),
        Write((12, 8), part[1, 1]),
        Write((slice(0, 5), slice(4, 8)), fill),
    ]
    reads = [
        Selection("basic", (slice(1, None, 3), slice(2, 9))),
        Selection("oindex", ([0, 6, 12], [8, 0])),
        Selection("vindex", ([0, 12, 5], [8, 0, 4])),
    ]
    create = {"shape": SHAPE, "chunks": CHUNKS, "dtype": dtype, "zarr_format": fmt, **kwargs}
    # gzip frames carry their compression time (seconds): equal bytes only by luck
    result = check_parity(make_store, create, steps, reads=reads, compare_bytes="gzip" not in chain)
    key = "arr/0.1" if fmt == 2 else "arr/c/0/1"
    assert key not in result.keys  # written back to the fill value: deleted
    chunk_keys = {k for k in result.keys if k.rsplit("/", 1)[-1] not in METADATA_KEYS}
    assert len(chunk_keys) == 3 * 3 - 1
