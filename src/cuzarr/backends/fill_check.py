"""zarr's empty-chunk rule for NumPy chunks of plain numbers, without zarr's generic scan.

A chunk that equals the fill value everywhere is not stored (unless ``write_empty_chunks``).
zarr decides that with ``NDBuffer.all_equal`` (NaN equals NaN; for floats, a fill of zero
compares bit patterns, so -0.0 differs from 0.0), which costs ~40 us for an 8 KiB chunk,
mostly its per-slice broadcasting. For booleans, integers and IEEE floats the same rule is
one NumPy comparison per slice, about 6 us for that chunk:

- booleans and integers: every element ``== fill``;
- floats, ``fill == 0`` (either sign): every element's bits equal the fill's bits;
- floats, ``fill`` NaN: every element is NaN (any payload, as ``equal_nan``);
- floats, any other ``fill``: every element ``== fill`` (a NaN element differs).

:func:`uniform` answers ``None`` for anything else (other kinds, a fill of another dtype,
0-d or empty chunks), and the caller asks zarr. ``tests/test_fill_check.py`` checks it against
zarr's rule across dtypes, fills and layouts.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["uniform"]

#: Elements compared in the first slice; slices then double (zarr's block, the same idea:
#: a chunk that differs early returns early, a uniform one costs one scan).
BLOCK = 1 << 14

_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def uniform(chunk: Any, fill: Any) -> bool | None:
    """Whether every element of ``chunk`` is ``fill`` by zarr's rule; ``None``: not decided here.

    Parameters
    ----------
    chunk : Any
        The chunk's values (a NumPy array, any strides).
    fill : Any
        The array's fill value, as parsed for its dtype.

    Returns
    -------
    bool or None
        The answer, or ``None`` where the caller must ask zarr's ``NDBuffer.all_equal``.
    """
    if type(chunk) is not np.ndarray or chunk.ndim == 0 or chunk.size == 0:
        return None
    dtype = chunk.dtype
    kind = dtype.kind
    if kind not in "biuf" or not isinstance(fill, np.generic) or fill.dtype != dtype:
        return None
    data = chunk
    target: Any = fill
    if kind == "f":
        if dtype.itemsize not in _UNSIGNED:
            return None
        if fill != fill:
            return _scan(chunk, None)
        if fill == 0:
            unsigned = _UNSIGNED[dtype.itemsize]
            data = chunk.view(unsigned)
            target = np.asarray(fill).view(unsigned)[()]
    return _scan(data, target)


def _scan(data: np.ndarray, target: Any) -> bool:
    """Compare ``data`` with ``target`` (``None``: test for NaN) in doubling leading slices."""
    lead = data.shape[0]
    step = max(1, BLOCK // max(1, data.size // lead))
    start = 0
    while start < lead:
        stop = min(start + step, lead)
        part = data[start:stop]
        same = np.isnan(part) if target is None else part == target
        if not same.all():
            return False
        start = stop
        step *= 2
    return True
