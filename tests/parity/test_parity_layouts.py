"""Parity over layouts: 0-d to 5-d, ragged edges, sharding (index at start and end, with and
without the index checksum), chunk key encodings and separators, v2 ``order="F"``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cuzarr.testing import METADATA_KEYS, Write, check_parity, sample_values

from ._layouts import LAYOUTS, NO_BYTE_COMPARE, grid, layout_params, selections


def _expected_key(layout: str, coords: tuple[int, ...]) -> str:
    """The chunk key of ``coords`` as the zarr spec spells it (independent of zarr-python)."""
    kw = LAYOUTS[layout]
    if kw["zarr_format"] == 2:
        sep = kw.get("chunk_key_encoding", {"separator": "."})["separator"]
        return "arr/" + (sep.join(map(str, coords)) if coords else "0")
    cke = kw.get("chunk_key_encoding", {"name": "default", "separator": "/"})
    if cke["name"] == "v2":
        return "arr/" + (cke["separator"].join(map(str, coords)) if coords else "0")
    return "arr/" + cke["separator"].join(["c", *map(str, coords)])


@pytest.mark.parametrize("layout", layout_params())
def test_layout_parity(layout: str, store_kind: str, make_store: Any) -> None:
    kw = LAYOUTS[layout]
    # each layout sees both dtypes, one per store (a covering design, not a full product)
    dtype = "f4" if store_kind == "memory" else ">u2"
    shape: tuple[int, ...] = kw["shape"]
    fill = np.zeros((), dtype=dtype)[()]
    full = sample_values(dtype, shape, seed=3)
    half = tuple(slice(n // 3, n - n // 4) for n in shape)
    part = sample_values(dtype, tuple(len(range(n)[s]) for n, s in zip(shape, half, strict=True)))
    steps = [Write(Ellipsis, full), Write(half, part), Write((-1,) * len(shape), full.flat[-1])]
    first_block = tuple(slice(0, c) for c in grid(kw))
    steps.append(Write(first_block, fill))
    reads = list(selections(shape, grid(kw)).values())
    result = check_parity(
        make_store,
        {**kw, "dtype": dtype},
        steps,
        reads=reads,
        compare_bytes=layout not in NO_BYTE_COMPARE,
    )
    chunk_keys = {k for k in result.keys if k.rsplit("/", 1)[-1] not in METADATA_KEYS}
    # the first chunk (or shard) went back to the fill value and is gone, unless it is the only
    # one; the last one is stored under the spec's key
    nblocks = [-(-n // c) for n, c in zip(shape, grid(kw), strict=True)]
    assert _expected_key(layout, (0,) * len(shape)) not in chunk_keys
    if shape:
        assert _expected_key(layout, tuple(b - 1 for b in nblocks)) in chunk_keys
        assert len(chunk_keys) == int(np.prod(nblocks)) - 1
    else:
        assert chunk_keys == set()


@pytest.mark.parametrize("layout", layout_params(["v3-0d", "v2-0d"]))
def test_zero_d_scalar_writes(layout: str, make_store: Any) -> None:
    kw = {**LAYOUTS[layout], "dtype": "c16", "fill_value": complex(np.nan, -0.0)}
    result = check_parity(make_store, kw, [Write((), complex(1, 2)), Write(Ellipsis, 3.5)])
    assert _expected_key(layout, ()) in result.keys
