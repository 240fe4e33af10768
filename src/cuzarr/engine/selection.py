"""Per-dimension helpers over the chunk selections zarr's indexers produce.

A chunk selection is a tuple with one entry per dimension: an ``int``, a ``slice`` (positive
step), a boolean mask of the chunk's length, or an integer array (possibly shaped by
``numpy.ix_``). These helpers find which inner chunks of a shard a selection touches and
re-base a selection onto a sub-box of the shard.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "Box",
    "is_full",
    "needed_blocks",
    "part_in_block",
    "rebase",
    "selection_bounds",
    "selection_box",
]

Selector = Any
Box = tuple[tuple[int, int], ...]


def _slice_bounds(s: slice, n: int) -> tuple[int, int, int]:
    start, stop, step = s.indices(n)
    return start, stop, step


def dim_blocks(entry: Selector, block: int, n: int) -> npt.NDArray[np.intp]:
    """Sorted unique block indices (blocks of length ``block``) that ``entry`` touches."""
    if isinstance(entry, slice):
        start, stop, step = _slice_bounds(entry, n)
        if stop <= start:
            return np.empty(0, np.intp)
        if step == 1:
            return np.arange(start // block, (stop - 1) // block + 1, dtype=np.intp)
        return np.unique(np.arange(start, stop, step) // block)
    if isinstance(entry, np.ndarray):
        if entry.dtype == bool:
            return np.unique(np.flatnonzero(entry) // block)
        return np.unique(entry.reshape(-1).astype(np.intp) // block)
    return np.array([int(entry) // block], dtype=np.intp)


def needed_blocks(
    selection: Sequence[Selector], block_shape: Sequence[int], shape: Sequence[int]
) -> list[npt.NDArray[np.intp]]:
    """Per dimension, the block indices a selection touches (their product covers it)."""
    return [dim_blocks(e, b, n) for e, b, n in zip(selection, block_shape, shape, strict=True)]


def iter_blocks(per_dim: Sequence[npt.NDArray[np.intp]]) -> Iterator[tuple[int, ...]]:
    """All block coordinates in the product of per-dimension block lists, C order."""
    return itertools.product(*(map(int, d) for d in per_dim))


def flat_indexes(per_dim: Sequence[npt.NDArray[np.intp]], grid: Sequence[int]) -> list[int]:
    """C-order indexes in a grid of shape ``grid`` of the blocks :func:`iter_blocks` yields.

    In the same order, computed for all blocks at once (``ravel_multi_index`` per block costs
    more than decoding a small inner chunk).
    """
    flat = np.zeros(1, np.intp)
    for d, n in zip(per_dim, grid, strict=True):
        flat = (flat[:, None] * n + np.asarray(d, np.intp)[None, :]).reshape(-1)
    return [int(i) for i in flat.tolist()]


def rebase(
    selection: Sequence[Selector], origin: Sequence[int], size: Sequence[int]
) -> tuple[Selector, ...]:
    """Shift a selection so it indexes a box starting at ``origin`` of extent ``size``."""
    out: list[Selector] = []
    for entry, o, n in zip(selection, origin, size, strict=True):
        if isinstance(entry, slice):
            start, stop, step = entry.indices(1 << 62)
            out.append(slice(start - o, stop - o, step))
        elif isinstance(entry, np.ndarray):
            if entry.dtype == bool:
                out.append(entry[o : o + n])
            else:
                out.append(entry - o)
        else:
            out.append(int(entry) - o)
    return tuple(out)


def selection_bounds(selection: Sequence[Selector], shape: Sequence[int]) -> Box:
    """Per dimension ``(lo, hi)``: every index the selection picks lies in ``[lo, hi)``.

    The bounding box of the selection (``(0, 0)`` along a dimension where it picks nothing);
    exact for slices of step 1 and integers, a cover for steps, masks and integer arrays.
    """
    box: list[tuple[int, int]] = []
    for entry, n in zip(selection, shape, strict=True):
        if isinstance(entry, slice):
            start, stop, step = _slice_bounds(entry, n)
            if stop <= start:
                box.append((0, 0))
            else:
                box.append((start, start + (stop - 1 - start) // step * step + 1))
            continue
        if isinstance(entry, np.ndarray):
            picked = np.flatnonzero(entry) if entry.dtype == bool else entry.reshape(-1)
            if picked.size == 0:
                box.append((0, 0))
            else:
                box.append((int(picked.min()), int(picked.max()) + 1))
            continue
        box.append((int(entry), int(entry) + 1))
    return tuple(box)


def part_in_block(
    bounds: Box, block: tuple[int, ...], chunk_shape: tuple[int, ...]
) -> tuple[slice, ...] | None:
    """The part of inner chunk ``block`` a selection within ``bounds`` needs, in the chunk.

    ``None`` where that is the whole inner chunk (or nothing: a block the selection touches
    always meets its bounds).
    """
    part: list[slice] = []
    whole = True
    for (lo, hi), b, c in zip(bounds, block, chunk_shape, strict=True):
        start, stop = max(lo - b * c, 0), min(hi - b * c, c)
        if stop <= start:
            return None
        whole = whole and start == 0 and stop == c
        part.append(slice(start, stop))
    return None if whole else tuple(part)


def selection_box(selection: Sequence[Selector], shape: Sequence[int]) -> Box | None:
    """The box ``((start, stop), ...)`` a selection covers exactly, or ``None`` if not a box.

    Only slices with step 1 and integers form boxes.
    """
    box: list[tuple[int, int]] = []
    for entry, n in zip(selection, shape, strict=True):
        if isinstance(entry, slice):
            start, stop, step = entry.indices(n)
            if step != 1:
                return None
            box.append((start, max(start, stop)))
        elif isinstance(entry, (int, np.integer)):
            box.append((int(entry), int(entry) + 1))
        else:
            return None
    return tuple(box)


def is_full(selection: Sequence[Selector], shape: Sequence[int]) -> bool:
    """Whether a selection is exactly the whole of ``shape`` made of slices (no dropped axes)."""
    if len(selection) != len(shape):
        return False
    for entry, n in zip(selection, shape, strict=True):
        if type(entry) is not slice:
            return False
        start, stop, step = entry.start, entry.stop, entry.step
        if (
            (start is None or start == 0)
            and (step is None or step == 1)
            and (stop is None or (stop >= n and stop >= 0))
        ):
            continue
        if entry.indices(n) != (0, n, 1):
            return False
    return True
