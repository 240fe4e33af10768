"""zarr's empty-chunk rule for NumPy chunks of plain numbers, without zarr's generic scan.

A chunk that equals the fill value everywhere is not stored (unless ``write_empty_chunks``).
zarr decides that with ``NDBuffer.all_equal`` (NaN equals NaN; for floats, a fill of zero
compares bit patterns, so -0.0 differs from 0.0), which costs ~40 us for an 8 KiB chunk,
mostly its per-slice broadcasting. For booleans, integers, IEEE floats and complex numbers
the same rule is one NumPy comparison per slice, about 6 us for that chunk
(:func:`fill_test` says which; the GPU backend applies the same test to CuPy arrays):

- booleans and integers: every element ``== fill``;
- floats, ``fill == 0`` (either sign): every element's bits equal the fill's bits;
- floats, ``fill`` NaN: every element is NaN (any payload, as ``equal_nan``);
- floats, any other ``fill``: every element ``== fill`` (a NaN element differs);
- complex numbers: as floats, NaN where either part is, and no bitwise zero (zarr compares
  bit patterns for real floats only).

:func:`uniform` answers ``None`` for anything else (other kinds, a fill of another dtype,
0-d or empty chunks), and the caller asks zarr. ``tests/test_fill_check.py`` checks it against
zarr's rule across dtypes, fills and layouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["FillTest", "fill_test", "first_differs", "uniform"]

#: Elements compared in the first slice; slices then double (zarr's block, the same idea:
#: a chunk that differs early returns early, a uniform one costs one scan).
BLOCK = 1 << 14

_UNSIGNED: dict[int, np.dtype[Any]] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.uint16),
    4: np.dtype(np.uint32),
    8: np.dtype(np.uint64),
}


@dataclass(frozen=True, slots=True)
class FillTest:
    """How to compare a chunk's elements with its fill value under zarr's rule.

    Attributes
    ----------
    view : numpy.dtype or None
        Compare the elements' bit patterns as this unsigned dtype (``None``: as they are).
    target : Any
        What every element (or its bits) must equal; ``None``: every element must be NaN.
    """

    view: np.dtype[Any] | None
    target: Any


def fill_test(dtype: np.dtype[Any], fill: Any) -> FillTest | None:
    """zarr's empty-chunk rule for elements of ``dtype`` and ``fill``; ``None``: not here.

    Shared by the CPU (:func:`uniform`) and the GPU (``cuzarr.gpu.device.all_fill``), which
    apply it to NumPy or CuPy arrays. Decided for booleans, integers, IEEE floats and complex
    numbers whose fill is a NumPy scalar of exactly ``dtype``.
    """
    kind = dtype.kind
    if kind not in "biufc" or not isinstance(fill, np.generic) or fill.dtype != dtype:
        return None
    if kind == "c":  # NaN if either part is; no bitwise zero (zarr's is for real floats only)
        return FillTest(None, None) if np.isnan(fill) else FillTest(None, fill)
    if kind == "f":
        unsigned = _UNSIGNED.get(dtype.itemsize)
        if unsigned is None:
            return None
        if fill != fill:
            return FillTest(None, None)
        if fill == 0:
            return FillTest(unsigned, np.asarray(fill).view(unsigned)[()])
    return FillTest(None, fill)


def first_differs(first: Any, fill: Any) -> bool:
    """Whether a chunk whose first element is ``first`` is known not to be all ``fill``.

    A first element that is not NaN/NaT and differs from the fill value by value also differs
    bitwise: the chunk is not all fill under any of zarr's rules. ``False``: not decided (the
    whole chunk is checked), also where the values do not compare.
    """
    try:
        return bool(first == first) and bool(first != fill)
    except (TypeError, ValueError):
        return False


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
    test = fill_test(chunk.dtype, fill)
    if test is None:
        return None
    return _scan(chunk if test.view is None else chunk.view(test.view), test.target)


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
