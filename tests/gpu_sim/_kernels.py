"""Kernel launches on the simulated device: C signatures checked, NumPy references run.

:func:`parse` reads every ``extern "C" __global__ void name(...)`` of a source and the C type
of each parameter (through the source's ``typedef``\\ s). :func:`launch` checks a launch as
the driver and CuPy would: a grid and a block of 1 to 3 positive ints within CUDA's limits,
one argument per parameter, a device array of the pointee's dtype for each pointer (a
non-``const`` one writable), a NumPy scalar of the exact type for each scalar (CuPy passes a
Python ``int`` as a 64-bit integer whatever the parameter says, so those are refused). Then it
runs the kernel's reference: the C loop body vectorised over every index the grid-stride loop
visits, with every memory access bounds-checked (the simulator's stand-in for
``compute-sanitizer``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from cuzarr.gpu import zstd_frames

from ._events import record

__all__ = ["Param", "launch", "parse"]

_C_TYPES = {
    "unsigned char": np.uint8,
    "char": np.int8,
    "signed char": np.int8,
    "short": np.int16,
    "unsigned short": np.uint16,
    "int": np.int32,
    "unsigned int": np.uint32,
    "long long": np.int64,
    "unsigned long long": np.uint64,
    "float": np.float32,
    "double": np.float64,
}


@dataclass(frozen=True)
class Param:
    """One kernel parameter."""

    name: str
    dtype: np.dtype[Any]
    pointer: bool
    const: bool


def parse(code: str) -> dict[str, list[Param]]:
    """The ``extern "C"`` kernels of a CUDA source and their parameters."""
    typedefs = dict(
        (alias, base.strip())
        for base, alias in re.findall(r"typedef\s+([\w\s]+?)\s+(\w+)\s*;", code)
    )
    kernels: dict[str, list[Param]] = {}
    for name, params in re.findall(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)', code):
        out = []
        for raw in params.split(","):
            text = " ".join(raw.split())
            m = re.fullmatch(r"(const\s+)?([\w\s]+?)\s*(\*?)\s*(\w+)", text)
            if m is None:
                raise SyntaxError(f"kernel {name}: cannot parse parameter {text!r}")
            const, ctype, star, pname = m.groups()
            ctype = typedefs.get(ctype, ctype)
            if ctype not in _C_TYPES:
                raise SyntaxError(f"kernel {name}: unknown C type {ctype!r} of {pname}")
            out.append(Param(pname, np.dtype(_C_TYPES[ctype]), bool(star), bool(const)))
        kernels[name] = out
    return kernels


def _dims(what: str, value: Any, limits: tuple[int, int, int]) -> tuple[int, int, int]:
    if not isinstance(value, tuple) or not 1 <= len(value) <= 3:
        raise ValueError(f"{what} must be a tuple of 1 to 3 ints, got {value!r}")
    dims = list(value) + [1] * (3 - len(value))
    for d, lim in zip(dims, limits, strict=True):
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or not 1 <= d <= lim:
            raise ValueError(f"{what} {value!r}: each dimension must be an int in [1, {lim}]")
    return (int(dims[0]), int(dims[1]), int(dims[2]))


def launch(
    name: str,
    params: list[Param],
    grid: Any,
    block: Any,
    args: Any,
    shared_mem: int,
    *,
    device_type: type,
) -> None:
    """Check one launch against the kernel's signature and run its reference."""
    g = _dims("grid", grid, (2**31 - 1, 65535, 65535))
    b = _dims("block", block, (1024, 1024, 64))
    if b[0] * b[1] * b[2] > 1024:
        raise ValueError(f"block {block!r}: more than 1024 threads")
    if not isinstance(args, tuple):
        raise TypeError(f"{name}: args must be a tuple, got {type(args).__name__}")
    if len(args) != len(params):
        raise TypeError(f"{name} takes {len(params)} arguments, got {len(args)}")
    values: list[Any] = []
    for i, (p, a) in enumerate(zip(params, args, strict=True)):
        where = f"{name} argument {i} ({p.name})"
        if p.pointer:
            if not isinstance(a, device_type):
                raise TypeError(f"{where}: expected a device array, got {type(a).__name__}")
            mem = a._a  # type: ignore[attr-defined]
            if mem.dtype != p.dtype:
                raise TypeError(f"{where}: dtype {mem.dtype}, the kernel reads {p.dtype}")
            if not mem.flags.c_contiguous:
                raise ValueError(f"{where}: a strided array, the kernel indexes it flat")
            if not p.const and not mem.flags.writeable:
                raise ValueError(f"{where}: read-only memory for a non-const pointer")
            values.append(mem.reshape(-1))
        else:
            if not isinstance(a, np.generic) or a.dtype != p.dtype:
                raise TypeError(
                    f"{where}: expected a numpy.{p.dtype} scalar, got {type(a).__name__}"
                    + (f" of {a.dtype}" if isinstance(a, np.generic) else "")
                )
            values.append(a.item())
    scalars = tuple(v for p, v in zip(params, values, strict=True) if not p.pointer)
    record("launch", name, grid=g, block=b, shared_mem=shared_mem, scalars=scalars)
    _REFERENCES[name](*values)


def _at(buf: np.ndarray, idx: np.ndarray, what: str) -> np.ndarray:
    """Bounds-checked gather index (a kernel reading or writing outside its buffer fails)."""
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= buf.size):
        raise IndexError(
            f"{what}: index {int(idx.min())}..{int(idx.max())} outside a {buf.size}-element buffer"
        )
    return idx


def _find_block(starts: np.ndarray, nblocks: int, i: np.ndarray) -> np.ndarray:
    # The binary search of cuzarr_find_block: the last block whose start is <= i.
    s = starts[:nblocks]
    return np.maximum(np.searchsorted(s, i, side="right") - 1, 0)


class _Rows:
    """``rows[:, j]``: column ``j`` of each index's table row (gathered column by column)."""

    def __init__(self, table2d: np.ndarray, b: np.ndarray) -> None:
        self._t, self._b = table2d, b

    def __getitem__(self, key: tuple[slice, int]) -> np.ndarray:
        return self._t[:, key[1]][self._b]


def _table_rows(table: np.ndarray, starts: np.ndarray, nblocks: int, total: int, width: int):
    i = np.arange(total, dtype=np.int64)
    _at(starts, np.arange(nblocks, dtype=np.int64), "starts")
    b = _find_block(starts, nblocks, i)
    if nblocks:
        _at(table, np.array([int(b.max()) * width + width - 1]) if b.size else b, "table")
    table2d = table.reshape(-1)[: (table.size // width) * width].reshape(-1, width)
    return i - starts[b], _Rows(table2d, b)


def _byte_unshuffle(src, dst, table, starts, nblocks, total) -> None:
    o, rows = _table_rows(table, starts, nblocks, total, 4)
    nbytes, ts = rows[:, 2], rows[:, 3]
    n = nbytes // ts
    s = np.where(o < n * ts, (o % ts) * n + o // ts, o)
    dst[_at(dst, rows[:, 1] + o, "dst")] = src[_at(src, rows[:, 0] + s, "src")]


def _bit_unshuffle(src, dst, table, starts, nblocks, total) -> None:
    o, rows = _table_rows(table, starts, nblocks, total, 4)
    nbytes, ts = rows[:, 2], rows[:, 3]
    n = nbytes // ts
    n8 = np.where(n % 8 == 0, n, 0)
    shuffled = o < n8 * ts
    e, byte, row_bytes = o // ts, o % ts, n8 // 8
    v = np.zeros(o.size, np.uint32)
    for k in range(8):
        idx = np.where(shuffled, rows[:, 0] + (8 * byte + k) * row_bytes + e // 8, rows[:, 0] + o)
        bits = (src[_at(src, idx, "src")].astype(np.uint32) >> (e % 8).astype(np.uint32)) & 1
        v |= bits << k
    plain = src[_at(src, rows[:, 0] + o, "src")]
    dst[_at(dst, rows[:, 1] + o, "dst")] = np.where(shuffled, v.astype(np.uint8), plain)


def _byteswap(src, dst, nbytes, itemsize) -> None:
    o = np.arange(nbytes, dtype=np.int64)
    dst[_at(dst, o, "dst")] = src[
        _at(src, (o // itemsize) * itemsize + (itemsize - 1 - o % itemsize), "src")
    ]


def _scatter(src, dst, table, starts, nrows, total, itemsize) -> None:
    rem, rows = _table_rows(table, starts, nrows, total, 27)
    s = rows[:, 0].copy()
    d = rows[:, 1].copy()
    for ax in range(7, -1, -1):
        extent = rows[:, 3 + ax]
        if not (extent != 1).any():
            continue  # every coordinate on this axis is 0 (saves the simulator's time only)
        c = rem % extent
        rem = rem // extent
        s += c * rows[:, 11 + ax]
        d += c * rows[:, 19 + ax]
    for k in range(itemsize):
        dst[_at(dst, d * itemsize + k, "dst")] = src[_at(src, s * itemsize + k, "src")]


def _gf2_mul(a: np.ndarray, b: np.ndarray, poly: int) -> np.ndarray:
    # cuzarr_gf2_mul, vectorised over threads (uint32 throughout).
    a = np.broadcast_to(np.asarray(a, np.uint32), b.shape)
    p = np.zeros(b.shape, np.uint32)
    b = b.astype(np.uint32)
    for i in range(32):
        p ^= np.where(a & np.uint32(0x80000000 >> i), b, np.uint32(0))
        b = np.where(b & np.uint32(1), (b >> np.uint32(1)) ^ np.uint32(poly), b >> np.uint32(1))
    return p


def _crc(src, out, table, starts, bytes_table, x2n, nrows, total, seg, poly) -> None:
    t = np.arange(total, dtype=np.int64)
    _at(starts, np.arange(nrows, dtype=np.int64), "starts")
    r = _find_block(starts, nrows, t)
    if t.size:
        _at(table, np.array([int(r.max()) * 3 + 2]), "table")
    rows = table[: (table.size // 3) * 3].reshape(-1, 3)[r]
    k = t - starts[r]
    off = k * seg
    n = np.clip(rows[:, 1] - off, 0, seg)
    c = np.where(k == 0, rows[:, 2] & 0xFFFFFFFF, 0).astype(np.uint32)
    base = rows[:, 0] + off
    for j in range(int(n.max()) if n.size else 0):
        act = j < n
        byte = src[_at(src, base[act] + j, "src")].astype(np.uint32)
        idx = (c[act] ^ byte) & np.uint32(0xFF)
        c[act] = bytes_table[_at(bytes_table, idx.astype(np.int64), "bytes_table")] ^ (
            c[act] >> np.uint32(8)
        )
    # cuzarr_crc_shift: p = x^(8m) by the set bits of m, then c * p.
    m = rows[:, 1] - off - n
    p = np.full(t.size, 0x80000000, np.uint32)
    bit = 3
    while (m > 0).any():
        odd = (m & 1) == 1
        if odd.any():
            factor = x2n[_at(x2n, np.array([bit]), "x2n")][0]
            p[odd] = _gf2_mul(factor, p[odd], poly)
        m = m >> 1
        bit += 1
    c = _gf2_mul(p, c, poly)
    c[k == 0] ^= np.uint32(0xFFFFFFFF)
    np.bitwise_xor.at(out, _at(out, r, "out"), c)


def _zstd_walk(src, table, out, nrows) -> None:
    rows = table.reshape(-1, 3)
    for r in range(nrows):
        start, end, checksum = (int(x) for x in rows[r])
        if start < 0 or end > src.size:
            raise IndexError(f"cuzarr_zstd_walk: row {r} [{start}, {end}) outside the buffer")
        out[r] = zstd_frames.walk(src, start, end, bool(checksum))


_REFERENCES = {
    "cuzarr_byte_unshuffle": _byte_unshuffle,
    "cuzarr_bit_unshuffle": _bit_unshuffle,
    "cuzarr_byteswap": _byteswap,
    "cuzarr_scatter": _scatter,
    "cuzarr_crc": _crc,
    "cuzarr_zstd_walk": _zstd_walk,
}
