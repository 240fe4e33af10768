"""Kernel launches: the compiled kernels of :mod:`cuzarr.gpu.kernels` and their grids.

Imported only by the GPU backend's device modules (:mod:`cuzarr.gpu.device`,
:mod:`cuzarr.gpu.checksums`): it imports CuPy.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import cupy
import numpy as np
import numpy.typing as npt

from cuzarr.gpu.kernels import SOURCE
from cuzarr.gpu.plan import MAX_SCATTER_DIMS

__all__ = ["byteswap", "copy_ranges", "kernel", "launch", "table_launch"]

#: Threads per block of every launch.
THREADS = 256


@functools.cache
def kernel(name: str) -> Any:
    """Kernel ``name`` of :data:`~cuzarr.gpu.kernels.SOURCE`, compiled once (NVRTC)."""
    return cupy.RawModule(code=SOURCE, options=("--std=c++14",)).get_function(name)


def launch(name: str, total: int, *args: Any) -> None:
    """Launch kernel ``name`` over ``total`` threads (grid-stride loops cover the rest)."""
    if total <= 0:
        return
    blocks = min(65535 * 8, (total + THREADS - 1) // THREADS)
    kernel(name)((blocks,), (THREADS,), args)


def table_launch(
    name: str,
    src: Any,
    dst: Any,
    table: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    *extra: Any,
) -> None:
    """Launch a table-driven kernel: one row per block of ``sizes[i]`` threads."""
    starts = np.zeros(len(sizes), np.int64)
    if len(sizes) > 1:
        np.cumsum(sizes[:-1], out=starts[1:])
    total = int(sizes.sum())
    launch(
        name,
        total,
        src,
        dst,
        cupy.asarray(table),
        cupy.asarray(starts),
        np.int64(len(sizes)),
        np.int64(total),
        *extra,
    )


def byteswap(data: Any, itemsize: int) -> Any:
    """Reverse the bytes of each element of a flat uint8 device array."""
    out = cupy.empty_like(data)
    launch("cuzarr_byteswap", data.size, data, out, np.int64(data.size), np.int64(itemsize))
    return out


def copy_ranges(src: Any, dst: Any, ranges: Sequence[tuple[int, int, int]]) -> None:
    """Copy byte ranges ``(src_offset, dst_offset, nbytes)`` between flat uint8 device arrays.

    One launch of the scatter kernel (each range a one-dimensional box).
    """
    ranges = [r for r in ranges if r[2] > 0]
    if not ranges:
        return
    width = 3 + 3 * MAX_SCATTER_DIMS
    table = np.zeros((len(ranges), width), np.int64)
    table[:, 3 : 3 + MAX_SCATTER_DIMS] = 1
    for i, (s, d, n) in enumerate(ranges):
        table[i, 0], table[i, 1], table[i, 2] = s, d, n
        table[i, 3 + MAX_SCATTER_DIMS - 1] = n
        table[i, 3 + 2 * MAX_SCATTER_DIMS - 1] = 1
        table[i, 3 + 3 * MAX_SCATTER_DIMS - 1] = 1
    table_launch("cuzarr_scatter", src, dst, table, table[:, 2].copy(), np.int64(1))
