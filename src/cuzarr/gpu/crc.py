"""Host side of the GPU checksum kernel: CRC tables, segments, and the arithmetic it relies on.

The kernel ``cuzarr_crc`` (:mod:`cuzarr.gpu.kernels`) computes the CRC of many byte ranges at
once, one thread per ``SEGMENT`` bytes. CRCs are linear over GF(2), so a range's CRC is the
XOR of its segments' contributions: each thread runs the byte table over its segment (the
first segment from the range's initial register, the others from 0), then moves the result
past the bytes that follow the segment by multiplying it by ``x**(8 * n)`` modulo the
polynomial (``x**(2**k)`` for each set bit ``k`` of ``8 * n`` comes from :func:`tables`), and
XORs it into the range's result. The same kernel serves CRC-32C (Zarr's ``crc32c`` codec) and
CRC-32 (gzip's trailer), by their tables.

Everything here is pure NumPy (no GPU): the CPU tests check it against the ``crc32c`` package
and :func:`zlib.crc32`, and run the kernel's C source on the host (tests/test_gpu_prep.py).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = [
    "CRC32",
    "CRC32C",
    "SEGMENT",
    "X2N_ENTRIES",
    "gf2_multiply",
    "register_after",
    "segment_plan",
    "shift",
    "tables",
]

#: Reflected polynomial of CRC-32C (Castagnoli: iSCSI, Zarr's ``crc32c`` codec).
CRC32C = 0x82F63B78
#: Reflected polynomial of CRC-32 (IEEE 802.3: zlib, gzip).
CRC32 = 0xEDB88320
#: Bytes per kernel thread: an 8 MiB chunk is 8,192 threads.
SEGMENT = 1024
#: Entries of the ``x**(2**k)`` table: shifts of up to ``2**63`` bytes (``k`` up to 66).
X2N_ENTRIES = 68
_MASK = 0xFFFFFFFF
_ONE = 0x80000000  # the polynomial 1 (x**0) in reflected bit order


def gf2_multiply(a: int, b: int, poly: int) -> int:
    """``a * b`` modulo the polynomial, both in reflected bit order (bit 31 is ``x**0``).

    The kernel's ``cuzarr_gf2_mul`` does the same 32 steps.
    """
    p = 0
    for i in range(32):
        if a & (_ONE >> i):
            p ^= b
        b = (b >> 1) ^ poly if b & 1 else b >> 1
    return p


@functools.cache
def _tables(poly: int) -> tuple[bytes, bytes]:
    table = np.zeros(256, np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table[i] = c
    x2n = np.zeros(X2N_ENTRIES, np.uint32)
    x2n[0] = _ONE >> 1  # x**1
    for k in range(1, X2N_ENTRIES):
        x2n[k] = gf2_multiply(int(x2n[k - 1]), int(x2n[k - 1]), poly)
    return table.tobytes(), x2n.tobytes()


def tables(poly: int) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
    """The kernel's two tables for ``poly``: the byte table and ``x**(2**k)`` for each ``k``.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        256 and ``X2N_ENTRIES`` ``uint32`` values (fresh, writable arrays).
    """
    table, x2n = _tables(poly)
    return np.frombuffer(table, np.uint32).copy(), np.frombuffer(x2n, np.uint32).copy()


def shift(register: int, nbytes: int, poly: int) -> int:
    """The register after ``nbytes`` zero bytes: ``register * x**(8 * nbytes)`` mod ``poly``.

    The kernel's ``cuzarr_crc_shift``, in Python (tests and the host).
    """
    x2n = np.frombuffer(_tables(poly)[1], np.uint32)
    p, k, m = _ONE, 3, nbytes
    while m > 0:
        if m & 1:
            p = gf2_multiply(int(x2n[k]), p, poly)
        m >>= 1
        k += 1
    return gf2_multiply(p, register, poly)


def register_after(crc: int) -> int:
    """The initial register that continues a CRC whose finished value is ``crc``.

    A range's CRC continues the bytes before it (a wrapper's header) when the kernel starts
    from this register: ``crc(a + b)`` is the kernel's result for ``b`` started from
    ``register_after(crc(a))``; ``register_after(0)`` starts a CRC afresh.
    """
    return (crc ^ _MASK) & _MASK


def segment_plan(sizes: Sequence[int]) -> tuple[npt.NDArray[np.int64], int]:
    """Kernel threads for ranges of ``sizes`` bytes: the prefix sum of segments and the total.

    Every range has at least one segment, so an empty range still gets its (trivial) CRC.
    """
    n = np.maximum(1, (np.asarray(sizes, np.int64) + SEGMENT - 1) // SEGMENT)
    starts = np.zeros(len(n), np.int64)
    if len(n) > 1:
        np.cumsum(n[:-1], out=starts[1:])
    return starts, int(n.sum())
