"""Chunk arithmetic for the Dask adapter: shard-sized read blocks and shard-aligned write blocks.

Pure functions over shapes; no Dask, no zarr, no I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

__all__ = ["aligned_chunks", "grouped_chunks", "is_aligned", "merge_factors"]

Chunks = tuple[tuple[int, ...], ...]


def merge_factors(
    shape: Sequence[int], block: Sequence[int], itemsize: int, target_nbytes: int
) -> tuple[int, ...]:
    """How many ``block``s to merge along each axis so a group stays within ``target_nbytes``.

    Factors grow by doubling, axis 0 first and round-robin, and never past the number of blocks
    along an axis; a single block larger than the target is kept whole (factor 1).

    Parameters
    ----------
    shape : sequence of int
        Array shape.
    block : sequence of int
        The unit that is never split (a shard, or a chunk of an unsharded array).
    itemsize : int
        Bytes per element.
    target_nbytes : int
        Largest decoded size of one group in bytes.

    Returns
    -------
    tuple of int
        One factor per axis.
    """
    nblocks = [max(1, math.ceil(s / b)) for s, b in zip(shape, block, strict=True)]
    factors = [1] * len(block)

    def nbytes(f: Sequence[int]) -> int:
        extents = (min(fi * b, s) for fi, b, s in zip(f, block, shape, strict=True))
        return math.prod(extents) * itemsize

    grew = True
    while grew:
        grew = False
        for axis in range(len(block)):
            if factors[axis] >= nblocks[axis]:
                continue
            trial = list(factors)
            trial[axis] = min(factors[axis] * 2, nblocks[axis])
            if nbytes(trial) <= target_nbytes:
                factors = trial
                grew = True
    return tuple(factors)


def grouped_chunks(shape: Sequence[int], block: Sequence[int], factors: Sequence[int]) -> Chunks:
    """Dask chunks made of ``factors[i]`` blocks along axis ``i`` (the last group may be short)."""
    out: list[tuple[int, ...]] = []
    for s, b, f in zip(shape, block, factors, strict=True):
        size = b * f
        out.append(tuple(min(size, s - start) for start in range(0, s, size)) if s else (0,))
    return tuple(out)


def is_aligned(chunks: Chunks, block: Sequence[int], offset: Sequence[int]) -> bool:
    """Whether every inner boundary of ``chunks`` (placed at ``offset``) lies on the block grid.

    The array's grid starts at 0: a boundary at absolute coordinate ``x`` is aligned when ``x``
    is a multiple of the block size. The outer edges (the region's start and stop) may fall
    anywhere: the task that holds them is the only writer of the blocks they cut.
    """
    for axis_chunks, b, start in zip(chunks, block, offset, strict=True):
        position = start
        for size in axis_chunks[:-1]:
            position += size
            if position % b:
                return False
    return True


def aligned_chunks(
    chunks: Chunks, block: Sequence[int], offset: Sequence[int], extent: Sequence[int]
) -> Chunks:
    """Chunks over ``extent`` elements starting at ``offset`` whose inner boundaries are aligned.

    Each axis is cut on a grid of ``k * block`` with ``k`` chosen so that the new chunks are
    about as large as the largest of the old ones (and at least one block).

    Parameters
    ----------
    chunks : tuple of tuple of int
        The current Dask chunks (used only for the target size).
    block : sequence of int
        Block (shard or chunk) shape of the zarr array.
    offset : sequence of int
        Where the written region starts in the array.
    extent : sequence of int
        Length of the written region along each axis.

    Returns
    -------
    tuple of tuple of int
        New chunks: ``sum(new[i]) == extent[i]``, every inner boundary a multiple of ``block``.
    """
    out: list[tuple[int, ...]] = []
    for axis_chunks, b, start, n in zip(chunks, block, offset, extent, strict=True):
        if n == 0:
            out.append((0,))
            continue
        widest = max(axis_chunks) if axis_chunks else b
        step = max(1, round(widest / b)) * b
        stop = start + n
        cuts = [start]
        edge = (start // step + 1) * step
        while edge < stop:
            cuts.append(edge)
            edge += step
        cuts.append(stop)
        out.append(tuple(hi - lo for lo, hi in itertools.pairwise(cuts)))
    return tuple(out)
