"""The empty-chunk check agrees with zarr's ``NDBuffer.all_equal`` wherever it decides."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from cuzarr import _zarr_compat as compat
from cuzarr.backends import fill_check
from cuzarr.backends.cpu import CpuBackend

DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


def _fills(dtype: np.dtype[Any]) -> list[Any]:
    if dtype.kind == "b":
        return [np.False_, np.True_]
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return [dtype.type(0), dtype.type(7), dtype.type(info.max), dtype.type(info.min)]
    if dtype.kind == "c":
        return [dtype.type(v) for v in (0j, complex(-0.0, -0.0), complex(np.nan, 0), 1.5 + 2j)]
    return [dtype.type(v) for v in (0.0, -0.0, np.nan, 1.5, np.inf, -np.inf)]


def _variants(dtype: np.dtype[Any], fill: Any, shape: tuple[int, ...]) -> list[np.ndarray]:
    """Chunks that are all fill, or fill but for one element (first, last, middle), with -0.0
    and NaN payload twins for floats."""
    base = np.full(shape, fill, dtype)
    out = [base]
    other = dtype.type(1) if dtype.kind == "b" or fill != 1 else dtype.type(2)
    if dtype.kind == "b":
        other = np.logical_not(fill)
    for pos in (0, base.size - 1, base.size // 2):
        c = base.copy()
        c.reshape(-1)[pos] = other
        out.append(c)
    if dtype.kind == "c":
        for special in (dtype.type(complex(-0.0, 0.0)), dtype.type(complex(0.0, np.nan))):
            c = base.copy()
            c.reshape(-1)[base.size // 3] = special
            out.append(c)
        out.append(np.full(shape, complex(np.nan, 1.0), dtype))
    if dtype.kind == "f":
        for special in (dtype.type(-0.0), dtype.type(0.0), dtype.type(np.nan)):
            c = base.copy()
            c.reshape(-1)[base.size // 3] = special
            out.append(c)
        # A NaN with another payload everywhere: equal to a NaN fill under equal_nan.
        unsigned = np.dtype(f"u{dtype.itemsize}")
        odd = np.full(shape, np.nan, dtype)
        odd.view(unsigned)[...] |= unsigned.type(1)
        out.append(odd)
        out.append(np.full(shape, -0.0 if np.signbit(fill) is np.False_ else 0.0, dtype))
    return out


def _layouts(chunk: np.ndarray) -> list[np.ndarray]:
    """The chunk as it is, as a strided view into a larger array, and Fortran-ordered."""
    big = np.zeros(tuple(2 * s for s in chunk.shape), chunk.dtype)
    view = big[tuple(slice(1, 1 + s) for s in chunk.shape)]
    view[...] = chunk
    return [chunk, view, np.asfortranarray(chunk)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (5,), (3, 4), (16, 16, 16), (300, 70)])
def test_uniform_matches_zarr(dtype: str, shape: tuple[int, ...]) -> None:
    dt = np.dtype(dtype)
    backend = CpuBackend()
    checked = 0
    for fill in _fills(dt):
        for chunk in _variants(dt, fill, shape):
            for layout in _layouts(chunk):
                want = compat.all_equal(layout, fill)
                got = fill_check.uniform(layout, fill)
                assert got is not None, (dtype, fill, shape)
                assert got == want, (dtype, repr(fill), shape, layout)
                assert backend.all_equal(layout, fill) == want
                checked += 1
    assert checked >= 3 * len(_fills(dt))


def test_uniform_scans_past_the_first_block() -> None:
    chunk = np.zeros((64, 64, 64), np.uint16)
    assert fill_check.uniform(chunk, np.uint16(0)) is True
    for pos in ((63, 63, 63), (40, 0, 0), (5, 1, 2)):
        chunk[pos] = 9
        assert fill_check.uniform(chunk, np.uint16(0)) is False
        assert compat.all_equal(chunk, np.uint16(0)) is False
        chunk[pos] = 0


@pytest.mark.parametrize(
    ("chunk", "fill"),
    [
        (np.zeros(4, ">u2"), np.uint16(0)),  # fill of another byte order
        (np.zeros(4, np.int32), np.int64(0)),  # fill of another dtype
        (np.zeros(4, np.int32), 0),  # a Python int, not a parsed fill
        (np.zeros(4, "datetime64[s]"), np.datetime64(0, "s")),
        (np.zeros((0, 3), np.uint8), np.uint8(0)),  # empty
        (np.zeros((), np.uint8), np.uint8(0)),  # 0-d
        (np.zeros(4, np.longdouble), np.longdouble(0)),  # no unsigned twin
    ],
)
def test_uniform_leaves_the_rest_to_zarr(chunk: np.ndarray, fill: Any) -> None:
    assert fill_check.uniform(chunk, fill) is None
    backend = CpuBackend()
    assert backend.all_equal(chunk, fill) == compat.all_equal(chunk, fill)


def test_every_fill_and_variant_pair_is_distinct_enough() -> None:
    """The variants exercise both answers for every dtype (a guard on the test itself)."""
    for dtype in DTYPES:
        dt = np.dtype(dtype)
        answers = {
            compat.all_equal(c, f)
            for f, c in itertools.chain.from_iterable(
                ((f, c) for c in _variants(dt, f, (3, 4))) for f in _fills(dt)
            )
        }
        assert answers == {True, False}, dtype
