"""Corrupt and short streams decoded on the GPU are errors that name the chunk.

Each kind of bad stream here "decoded" without any error through nvCOMP's Python API on the
first real GPU run (bench/gpu_check/probe_errors.py): the batched C API's per-stream statuses
and decoded sizes are what catch them (cuzarr.gpu.nvcomp_batched). The chunks beside the bad
one still read. A zeroed deflate tail faults nvCOMP itself on a real GPU (``FAULTING``): it runs
under the simulator only (tests/gpu/nvcomp_limits.py). bench/gpu_check/run.sh runs this file in
a process of its own, after the rest of the suite.
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
#: were caught there by the decoded-size check (H200, 2026-12-04), and a truncated zstd frame,
#: which faulted too, now stops at the frame walk before nvCOMP sees it.
FAULTING = {"zlib-zero-tail"}


def _data() -> np.ndarray:
    rng = np.random.default_rng(7)
    return (np.arange(3 * N, dtype="<i4") % 1000) * 3 + rng.integers(0, 4, 3 * N, dtype="<i4")


def _written(tmp_path, compressor) -> np.ndarray:
    """A zarr v2 array of three chunks at ``tmp_path / "a"``, written by zarr; its data."""
    data = _data()
    zarr.create_array(
        tmp_path / "a",
        shape=(3 * N,),
        chunks=(N,),
        dtype="<i4",
        zarr_format=2,
        compressors=compressor,
    )[...] = data
    return data


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_stream_is_named_and_its_neighbours_read(tmp_path, case):
    if case in FAULTING:
        skip_if_it_faults()
    compressor, spoil = CASES[case]
    data = _written(tmp_path, compressor)
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


def test_truncated_zstd_frames_never_reach_nvcomp(tmp_path, sim):
    # The frame walk (cuzarr_zstd_walk, one launch per wave) refuses it before the decode
    # call: nvCOMP faulted on a truncated frame on the H200. (A zeroed tail inside a block
    # keeps the block structure: the decoded size catches that one.)
    compressor, spoil = CASES["zstd-truncated"]
    _written(tmp_path, compressor)
    path = tmp_path / "a" / "1"
    path.write_bytes(spoil(path.read_bytes()))
    sim.reset()
    with pytest.raises(CorruptChunkError, match=r"'1'"):
        cuzarr.open(tmp_path / "a", device="gpu")[...]
    assert [e.info["scalars"][-1] for e in sim.events if e.name == "cuzarr_zstd_walk"] == [3]
    assert not [e for e in sim.events if e.kind == "decode"]


def test_chunks_of_several_zstd_frames_are_decoded_on_the_cpu(tmp_path, sim):
    data = _written(tmp_path, numcodecs.Zstd(level=1))
    # Chunk 1 as two frames (each half), which numcodecs and zarr read as one chunk.
    half = data[N : N + N // 2].tobytes(), data[N + N // 2 : 2 * N].tobytes()
    codec = numcodecs.Zstd(level=1)
    (tmp_path / "a" / "1").write_bytes(b"".join(bytes(codec.encode(h)) for h in half))
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)
    sim.reset()
    got = cuzarr.open(tmp_path / "a", device="gpu")[...]
    np.testing.assert_array_equal(cp.asnumpy(got), data)
    assert cuzarr.stats()["gpu_cpu_decodes"] == 3  # the wave, on the CPU
    assert not [e for e in sim.events if e.kind == "decode"]


def test_a_zstd_header_longer_than_its_chunk_is_named(tmp_path):
    _written(tmp_path, numcodecs.Zstd(level=1))
    # Magic number, then a descriptor promising a window byte and an 8-byte content size.
    (tmp_path / "a" / "1").write_bytes(b"\x28\xb5\x2f\xfd\xc0\x00\x00\x00")
    with pytest.raises(CorruptChunkError, match=r"'1'"):
        cuzarr.open(tmp_path / "a", device="gpu")[...]


def test_chunks_starting_with_a_skippable_frame_are_decoded_on_the_cpu(tmp_path):
    # Valid for numcodecs and zarr, which read past the skippable frame; nvCOMP's RAW zstd
    # starts at a frame, so the wave is decoded on the CPU (it was reported as a GPU failure).
    data = _written(tmp_path, numcodecs.Zstd(level=1))
    path = tmp_path / "a" / "1"
    path.write_bytes(b"\x50\x2a\x4d\x18\x04\x00\x00\x00meta" + path.read_bytes())
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)
    cuzarr.reset_stats()
    got = cuzarr.open(tmp_path / "a", device="gpu")[...]
    np.testing.assert_array_equal(cp.asnumpy(got), data)
    assert cuzarr.stats()["gpu_cpu_decodes"] == 3
