"""The explicit API's indexer makes the chunk requests zarr's own ``BasicIndexer`` makes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.core.indexing import BasicIndexer

from cuzarr import _zarr_compat as compat
from cuzarr.engine.requests import ChunkRequest, new_request
from cuzarr.indexing import GridIndexer
from cuzarr.metadata.spec import ArraySpec


def _entry(draw: st.DrawFn, n: int, windows: bool) -> Any:
    if not windows and draw(st.booleans()):
        return draw(st.integers(-n, n - 1))
    start = draw(st.none() | st.integers(-n - 2, n + 2))
    stop = draw(st.none() | st.integers(-n - 2, n + 2))
    step = draw(st.sampled_from([None, 1]) if windows else st.none() | st.integers(1, 4))
    return slice(start, stop, step)


@st.composite
def cases(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], tuple[Any, ...], int]:
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 13)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, n + 2)) for n in shape)
    # Windows (a slice of step 1 per axis) have a fast path of their own: drawn often.
    windows = draw(st.booleans())
    selection = tuple(_entry(draw, n, windows) for n in shape)
    return shape, chunks, selection, draw(st.sampled_from([2, 3]))


def _spec(tmp: Any, shape: tuple[int, ...], chunks: tuple[int, ...], fmt: int) -> ArraySpec:
    zarr.create_array(tmp, shape=shape, chunks=chunks, dtype="u1", zarr_format=fmt)
    import cuzarr

    spec: ArraySpec = cuzarr.open(tmp)._spec
    return spec


@settings(max_examples=400, deadline=None)
@given(case=cases())
def test_requests_equal_zarrs_basic_indexer(
    tmp_path_factory: pytest.TempPathFactory,
    case: tuple[tuple[int, ...], tuple[int, ...], tuple[Any, ...], int],
) -> None:
    shape, chunks, selection, fmt = case
    spec = _spec(tmp_path_factory.mktemp("a") / "a.zarr", shape, chunks, fmt)
    indexer = GridIndexer(spec)
    plan = indexer.basic(selection)
    assert plan is not None
    zarrs = BasicIndexer(selection, shape, compat.chunk_grid(shape, chunks))
    expected = indexer.requests_from_zarr(zarrs)
    assert plan.requests == expected
    assert plan.shape == tuple(zarrs.shape)


def test_new_request_is_the_dataclass() -> None:
    made = new_request("c/1/2", (slice(0, 4), 3), (slice(2, 6),), False)
    expected = ChunkRequest(
        key="c/1/2", chunk_selection=(slice(0, 4), 3), out_selection=(slice(2, 6),), complete=False
    )
    assert type(made) is ChunkRequest
    assert made == expected and hash(made) == hash(expected) and repr(made) == repr(expected)
    with pytest.raises(AttributeError):
        made.key = "c/0/0"  # type: ignore[misc]


def test_many_chunk_keys_follow_the_grid_in_c_order(tmp_path: Any) -> None:
    spec = _spec(tmp_path / "v3.zarr", (4, 6, 3), (2, 2, 3), 3)
    keys = [r.key for r in GridIndexer(spec).basic(Ellipsis).requests]  # type: ignore[union-attr]
    assert keys == [f"c/{i}/{j}/0" for i in range(2) for j in range(3)]
    spec2 = _spec(tmp_path / "v2.zarr", (4, 6), (2, 2), 2)
    plan = GridIndexer(spec2).basic(np.s_[1:, ::2])
    assert plan is not None
    assert [r.key for r in plan.requests] == [f"{i}.{j}" for i in range(2) for j in range(3)]
