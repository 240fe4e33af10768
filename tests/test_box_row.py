"""``box_row``: the box a pair of selections describes, against a plain statement of its rule.

The function runs once per chunk of a batched read and is written for speed; the reference here
states the contract directly (per dimension, indexed), and the two must agree on every input,
including the ones refused: selections of other types, bounds that are not plain ``int``,
steps that are not positive, output steps other than 1 and extents that differ.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cuzarr.backends.placed import box_row


def reference(chunk_sel: Any, out_sel: Any, ndim: int) -> list[int] | None:
    if type(chunk_sel) is not tuple or type(out_sel) is not tuple:
        return None
    if len(chunk_sel) != ndim or len(out_sel) != ndim:
        return None
    row = [0] * (4 * ndim)
    for d in range(ndim):
        c, o = chunk_sel[d], out_sel[d]
        if type(c) is not slice or type(o) is not slice:
            return None
        step = 1 if c.step is None else c.step
        bounds = (c.start, c.stop, o.start, o.stop)
        if any(type(b) is not int for b in bounds):
            return None
        if type(step) is not int or step < 1 or o.step not in (None, 1):
            return None
        taken = max(0, -(-(c.stop - c.start) // step))
        if taken != o.stop - o.start:
            return None
        row[d] = c.start
        row[ndim + d] = o.start
        row[2 * ndim + d] = o.stop - o.start
        row[3 * ndim + d] = step
    return row


_bound = st.one_of(
    st.integers(-3, 40),
    st.none(),
    st.sampled_from([np.int64(4), 2.0, True]),
)
_step = st.one_of(st.none(), st.integers(-2, 5), st.sampled_from([np.int64(2), 1.0, True]))


@st.composite
def _slices(draw: st.DrawFn) -> slice:
    return slice(draw(_bound), draw(_bound), draw(_step))


@st.composite
def _pair(draw: st.DrawFn) -> tuple[Any, Any, int]:
    ndim = draw(st.integers(1, 4))
    n_c = draw(st.sampled_from([ndim, ndim, ndim, ndim - 1, ndim + 1]))
    n_o = draw(st.sampled_from([ndim, ndim, ndim, ndim + 1]))
    # Now and then an integer where a slice belongs (refused).
    element = st.one_of(_slices(), _slices(), _slices(), st.integers(0, 3))
    chunk = tuple(draw(element) for _ in range(n_c))
    out = tuple(draw(_slices()) for _ in range(n_o))
    return chunk, out, ndim


@st.composite
def _matching(draw: st.DrawFn) -> tuple[Any, Any, int]:
    """Pairs that describe a box (the reads' common case), so the accepted path is drawn often."""
    ndim = draw(st.integers(1, 4))
    chunk, out = [], []
    for _ in range(ndim):
        start = draw(st.integers(0, 30))
        step = draw(st.sampled_from([None, 1, 2, 3]))
        stop = draw(st.integers(start - 2, start + 20))
        taken = max(0, -(-(stop - start) // (step or 1)))
        o0 = draw(st.integers(0, 50))
        chunk.append(slice(start, stop, step))
        out.append(slice(o0, o0 + taken, draw(st.sampled_from([None, 1]))))
    return tuple(chunk), tuple(out), ndim


@settings(max_examples=600, deadline=None)
@given(_pair())
def test_box_row_agrees_with_the_rule(case: tuple[Any, Any, int]) -> None:
    chunk, out, ndim = case
    assert box_row(chunk, out, ndim) == reference(chunk, out, ndim)


@settings(max_examples=400, deadline=None)
@given(_matching())
def test_box_row_accepts_boxes(case: tuple[Any, Any, int]) -> None:
    chunk, out, ndim = case
    want = reference(chunk, out, ndim)
    assert want is not None
    got = box_row(chunk, out, ndim)
    assert got == want
    assert got is not None and all(type(v) is int for v in got)


def test_box_row_refuses_lists_and_other_types() -> None:
    box = (slice(0, 4, None),)
    assert box_row(box, box, 1) == [0, 0, 4, 1]
    assert box_row([slice(0, 4)], box, 1) is None
    assert box_row(box, [slice(0, 4)], 1) is None
    assert box_row((slice(0, 4, 2),), (slice(0, 2, 2),), 1) is None  # output step 2
    assert box_row((slice(0, 4, 2),), (slice(0, 2),), 1) == [0, 0, 2, 2]
    assert box_row((slice(np.int64(0), 4),), box, 1) is None  # bounds must be int
