"""A box of inner chunks cut into parts for the CPU backend's grid decode and encode.

:meth:`~cuzarr.backends.cpu.CpuBackend.decode_grid` and ``encode_grid`` work on a box of inner
chunks (a shard, or the inner chunks a selection needs) part by part, on several threads: each
part's inner chunks are a contiguous range in C order of the box's grid, staged in one
contiguous buffer and copied between it and the box by one NumPy assignment through the views
here.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["GRID_PART_BYTES", "GridPart", "grid_parts", "interleaved", "interleaved_chunks"]

#: About this many decoded bytes per part.
GRID_PART_BYTES = 2 << 20


@dataclass(frozen=True, slots=True)
class GridPart:
    """Inner chunks ``lo .. hi - 1`` (C order over the box's grid): a block of the box.

    Attributes
    ----------
    lo, hi : int
        The part's first and one-past-last inner chunk, flat over the grid.
    region : tuple of slice
        The part's block of the box (element indices).
    counts : tuple of int
        Inner chunks along each axis of the block.
    """

    lo: int
    hi: int
    region: tuple[slice, ...]
    counts: tuple[int, ...]


def grid_parts(
    grid: tuple[int, ...], shape: tuple[int, ...], nbytes: int, threads: int
) -> list[GridPart]:
    """Cut a box of ``grid`` inner chunks of ``shape`` (``nbytes`` each) into parts.

    A part is a range along one axis, ``split``, of whole slabs (every inner chunk along the
    axes after it) at one position on the axes before it. ``split`` is the first axis where
    a slab holds at most :data:`GRID_PART_BYTES` and there are at least ``threads`` slabs
    (the last axis if none); a part takes as many slabs as fit in :data:`GRID_PART_BYTES`
    and leave a part for every thread, one at least. So a box with a single slab along its
    first axis (a shard of ``1 x n x ...`` inner chunks) is still cut into parts for every
    thread.
    """
    nd = len(grid)
    split = 0
    while split < nd - 1 and (
        math.prod(grid[split + 1 :]) * nbytes > GRID_PART_BYTES
        or math.prod(grid[: split + 1]) < threads
    ):
        split += 1
    slab = math.prod(grid[split + 1 :])
    slabs = math.prod(grid[: split + 1])
    step = max(1, min(GRID_PART_BYTES // max(1, slab * nbytes), slabs // max(1, threads)))
    tail = tuple(
        slice(0, g * c) for g, c in zip(grid[split + 1 :], shape[split + 1 :], strict=True)
    )
    parts: list[GridPart] = []
    for flat, head in enumerate(itertools.product(*(range(g) for g in grid[:split]))):
        region = tuple(slice(i * c, (i + 1) * c) for i, c in zip(head, shape, strict=False))
        first = flat * grid[split]
        for a0 in range(0, grid[split], step):
            a1 = min(a0 + step, grid[split])
            parts.append(
                GridPart(
                    lo=(first + a0) * slab,
                    hi=(first + a1) * slab,
                    region=(*region, slice(a0 * shape[split], a1 * shape[split]), *tail),
                    counts=(*(1,) * split, a1 - a0, *grid[split + 1 :]),
                )
            )
    return parts


def interleaved(
    block: npt.NDArray[Any], counts: tuple[int, ...], shape: tuple[int, ...], *, writeable: bool
) -> npt.NDArray[Any]:
    """``block`` (``counts`` inner chunks of ``shape`` per axis) viewed as (k0, c0, k1, c1, ...).

    Any strides: the view steps over exactly ``block``'s own memory.
    """
    return np.lib.stride_tricks.as_strided(
        block,
        shape=tuple(x for k, c in zip(counts, shape, strict=True) for x in (k, c)),
        strides=tuple(x for st, c in zip(block.strides, shape, strict=True) for x in (st * c, st)),
        writeable=writeable,
    )


def interleaved_chunks(
    chunks: npt.NDArray[Any], counts: tuple[int, ...], shape: tuple[int, ...]
) -> npt.NDArray[Any]:
    """Contiguous chunks (C order over ``counts``) as a (k0, c0, k1, c1, ...) view.

    The axes of :func:`interleaved`'s view, so one assignment copies between the layouts.
    """
    nd = len(shape)
    axes = tuple(i for d in range(nd) for i in (d, d + nd))
    return chunks.reshape((*counts, *shape)).transpose(axes)
