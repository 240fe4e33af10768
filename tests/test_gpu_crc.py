"""The GPU checksum kernel, checked on the CPU: its host arithmetic and its C source run here.

``cuzarr_crc`` (src/cuzarr/gpu/kernels.py) is compiled with the host C++ compiler (the CUDA
qualifiers and built-ins defined for one host thread) and run thread by thread over every
(block, thread) of a launch, exactly as the GPU backend configures it; its results must equal
the ``crc32c`` package's and :func:`zlib.crc32`'s for ranges of every size around the segment
boundaries, empty ranges, ranges that continue a CRC, and launches whose grid is smaller than
the thread count (the grid-stride loop).
"""

from __future__ import annotations

import ctypes
import zlib

import crc32c
import numpy as np
import pytest

from cuzarr.gpu import crc
from kernel_host import host_kernel


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    return host_kernel(
        tmp_path_factory.mktemp("crc-kernel"),
        "cuzarr_crc",
        "const u8* src, u32* out, const i64* table, const i64* starts, const u32* bytes_table,"
        " const u32* x2n, i64 nrows, i64 total, i64 seg, u32 poly",
        [ctypes.c_void_p] * 6 + [ctypes.c_int64] * 3 + [ctypes.c_uint32],
    )


def run(kernel, data: bytes, ranges, poly: int, *, grid=None, block=256):
    """Launch the host-compiled kernel as the backend does; the CRC of each (offset, n, init)."""
    src = np.frombuffer(data, np.uint8).copy() if data else np.zeros(1, np.uint8)
    table = np.array([list(r) for r in ranges], np.int64).reshape(-1, 3)
    starts, total = crc.segment_plan(table[:, 1])
    bytes_table, x2n = crc.tables(poly)
    out = np.zeros(len(table), np.uint32)
    if grid is None:
        grid = max(1, (total + block - 1) // block)
    kernel(
        src.ctypes.data,
        out.ctypes.data,
        table.ctypes.data,
        starts.ctypes.data,
        bytes_table.ctypes.data,
        x2n.ctypes.data,
        len(table),
        total,
        crc.SEGMENT,
        poly,
        grid,
        block,
    )
    return out.tolist()


SIZES = [0, 1, 7, crc.SEGMENT - 1, crc.SEGMENT, crc.SEGMENT + 1, 3 * crc.SEGMENT + 5, 20000]


@pytest.mark.parametrize("grid", [None, 1, 3])
def test_kernel_crc32c_of_ranges_equals_the_crc32c_package(kernel, grid):
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 80000, dtype=np.uint8).tobytes()
    ranges, want, pos = [], [], 0
    for n in SIZES:
        ranges.append((pos, n, crc.register_after(0)))
        want.append(crc32c.crc32c(data[pos : pos + n]))
        pos += n + 3  # unaligned starts, gaps between ranges
    assert run(kernel, data, ranges, crc.CRC32C, grid=grid) == want


def test_kernel_crc32_of_ranges_equals_zlib(kernel):
    rng = np.random.default_rng(8)
    data = rng.integers(0, 256, 60000, dtype=np.uint8).tobytes()
    ranges = [(11 * i, n, crc.register_after(0)) for i, n in enumerate(SIZES)]
    want = [zlib.crc32(data[o : o + n]) for o, n, _ in ranges]
    assert run(kernel, data, ranges, crc.CRC32) == want


def test_kernel_continues_a_crc_from_its_register(kernel):
    """A range started from ``register_after(crc(prefix))`` gives ``crc(prefix + range)``."""
    rng = np.random.default_rng(9)
    data = rng.integers(0, 256, 9000, dtype=np.uint8).tobytes()
    prefix = b"\x1f\x8b\x08\x00prefix"
    got = run(kernel, data, [(5, 8000, crc.register_after(crc32c.crc32c(prefix)))], crc.CRC32C)
    assert got == [crc32c.crc32c(prefix + data[5:8005])]


def test_kernel_detects_a_flipped_bit(kernel):
    data = bytearray(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    before = run(kernel, bytes(data), [(0, 5000, crc.register_after(0))], crc.CRC32C)
    data[4321] ^= 0x10
    after = run(kernel, bytes(data), [(0, 5000, crc.register_after(0))], crc.CRC32C)
    assert before != after and after == [crc32c.crc32c(bytes(data))]


def test_tables_and_shift_match_the_definitions():
    table, x2n = crc.tables(crc.CRC32C)
    assert table[1] == 0xF26B8303 and crc.tables(crc.CRC32)[0][1] == 0x77073096
    assert x2n.size == crc.X2N_ENTRIES
    # Shifting a register over n zero bytes is what the byte table does to n zero bytes.
    for poly in (crc.CRC32C, crc.CRC32):
        table = crc.tables(poly)[0]
        for reg, n in ((0x12345678, 1), (0xDEADBEEF, 13), (0x80000001, 1030)):
            c = reg
            for _ in range(n):
                c = int(table[c & 0xFF]) ^ (c >> 8)
            assert crc.shift(reg, n, poly) == c
    assert crc.gf2_multiply(0x80000000, 0x1234, crc.CRC32C) == 0x1234  # 1 * b


def test_segment_plan_gives_every_range_a_thread():
    starts, total = crc.segment_plan([0, 1, crc.SEGMENT, crc.SEGMENT + 1])
    assert starts.tolist() == [0, 1, 2, 3] and total == 5
    assert crc.segment_plan([])[1] == 0
