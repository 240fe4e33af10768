"""Corrupt and short streams decoded on the GPU are errors that name the chunk.

Each kind of bad stream here "decoded" without any error through nvCOMP's Python API on the
first real GPU run (bench/gpu_check/probe_errors.py): the batched C API's per-stream statuses
and decoded sizes are what catch them (cuzarr.gpu.nvcomp_batched). The chunks beside the bad
one still read. Two kinds fault nvCOMP itself on a real GPU (``FAULTING``); they run under the
simulator only (tests/gpu/nvcomp_limits.py).
"""

from __future__ import annotations

import zlib

import numcodecs
import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.errors import CorruptChunkError

from .nvcomp_limits import skip_if_it_faults

cp = pytest.importorskip("cupy")

N = 4096  # elements of one chunk (int32: 16 KiB)


def _zero_tail(blob: bytes) -> bytes:
    return blob[: len(blob) // 2] + b"\x00" * (len(blob) - len(blob) // 2)


def _truncate(blob: bytes) -> bytes:
    return blob[: len(blob) * 2 // 3]


def _lz4_short(blob: bytes) -> bytes:
    # numcodecs' prefix still says N * 4 bytes; the block decodes to 12.
    return blob[:4] + bytes(numcodecs.LZ4().encode(b"\x01" * 12))[4:]


def _zlib_short(blob: bytes) -> bytes:
    return zlib.compress(b"\x01" * 12)


CASES = {
    "zstd-zero-tail": (numcodecs.Zstd(level=1), _zero_tail),
    "zstd-truncated": (numcodecs.Zstd(level=1), _truncate),
    "lz4-truncated": (numcodecs.LZ4(), _truncate),
    "lz4-short": (numcodecs.LZ4(), _lz4_short),
    "zlib-short": (numcodecs.Zlib(level=1), _zlib_short),
    "zlib-zero-tail": (numcodecs.Zlib(level=1), _zero_tail),
}


#: Streams that fault nvCOMP 6.0.0 on a real GPU (tests/gpu/nvcomp_limits.py); the others
#: were caught there by the decoded-size check (H200, 2026-12-04).
FAULTING = {"zlib-zero-tail", "zstd-truncated"}


def _data() -> np.ndarray:
    rng = np.random.default_rng(7)
    return (np.arange(3 * N, dtype="<i4") % 1000) * 3 + rng.integers(0, 4, 3 * N, dtype="<i4")


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_stream_is_named_and_its_neighbours_read(tmp_path, case):
    if case in FAULTING:
        skip_if_it_faults()
    compressor, spoil = CASES[case]
    z = zarr.create_array(
        tmp_path / "a",
        shape=(3 * N,),
        chunks=(N,),
        dtype="<i4",
        zarr_format=2,
        compressors=compressor,
    )
    data = _data()
    z[...] = data
    path = tmp_path / "a" / "1"
    blob = path.read_bytes()
    bad = spoil(blob)
    assert bad != blob
    path.write_bytes(bad)
    # zarr's own CPU pipeline refuses it too: the fixture is a real error, not a GPU quirk.
    with pytest.raises(Exception):  # noqa: B017 - each library has its own error
        zarr.open_array(tmp_path / "a", mode="r")[N : 2 * N]
    a = cuzarr.open(tmp_path / "a", device="gpu")
    with pytest.raises(CorruptChunkError, match=r"'1'"):
        a[...]
    # The same wave without the bad chunk reads, on the device.
    got = a.read((slice(0, N),))
    assert isinstance(got, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(got), data[:N])
    np.testing.assert_array_equal(cp.asnumpy(a[2 * N :]), data[2 * N :])
