"""Parity over selections: every layout x every kind of selection, read and written.

Kinds: slices with steps, negative indices and slices, integers, ellipsis, orthogonal
(integer arrays, masks, mixed), vectorized (coordinates, a boolean mask) and blocks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cuzarr.testing import Selection, Write, check_parity, model_get, sample_values

from ._layouts import LAYOUTS, NO_BYTE_COMPARE, grid, selections, store_factory

#: Layouts whose reads and writes take different engine paths (chunk key encodings do not
#: change how a selection maps onto chunks; test_layout_parity covers those).
SELECTION_LAYOUTS = [
    "v3-0d",
    "v2-0d",
    "v3-1d",
    "v3-2d-ragged",
    "v3-3d-transpose",
    "v3-5d-tczyx",
    "v3-sharded-index-end",
    "v3-sharded-index-start",
    "v3-sharded-3d-index-nocrc",
    "v3-sharded-5d-tczyx",
    "v3-nested-sharded",
    "v3-nested-sharded-3d-crc",
    "v2-3d-F",
    "v2-2d-F-slash",
]
#: ... and those also run on a LocalStore (ranged reads of shards, F-order chunk files).
LOCAL_TOO = {
    "v3-sharded-index-end",
    "v3-sharded-index-start",
    "v3-sharded-3d-index-nocrc",
    "v3-nested-sharded",
    "v2-3d-F",
}


def _cases() -> list[Any]:
    cases = []
    for layout in SELECTION_LAYOUTS:
        kw = LAYOUTS[layout]
        kinds = ["memory", "local"] if layout in LOCAL_TOO else ["memory"]
        for sel_id in selections(kw["shape"], grid(kw)):
            cases.extend(
                pytest.param(layout, sel_id, kind, id=f"{kind}-{layout}-{sel_id}") for kind in kinds
            )
    return cases


@pytest.mark.parametrize(("layout", "sel_id", "store_kind"), _cases())
def test_selection_parity(layout: str, sel_id: str, store_kind: str, tmp_path: Any) -> None:
    kw = {**LAYOUTS[layout], "dtype": "i4", "fill_value": -1}
    shape = kw["shape"]
    block = grid(kw)
    sels = selections(shape, block)
    sel = sels[sel_id]
    full = sample_values("i4", shape, seed=5)
    target = np.asarray(model_get(np.zeros(shape, "i4"), sel, block))
    value: Any = sample_values("i4", target.shape, seed=6) if target.ndim else np.int32(-77)
    steps = [Write(Ellipsis, full), Write(sel, value)]
    # read the same selection back (test_layout_parity reads every selection of each layout)
    check_parity(
        store_factory(store_kind, tmp_path),
        kw,
        steps,
        reads=[sel],
        compare_bytes=layout not in NO_BYTE_COMPARE,
    )


@pytest.mark.parametrize(
    "layout", ["v3-2d-ragged", "v3-sharded-index-end", "v3-nested-sharded", "v2-3d-F"]
)
def test_scalar_broadcast_through_every_kind(layout: str, tmp_path: Any) -> None:
    kw = {**LAYOUTS[layout], "dtype": "f8", "fill_value": np.nan}
    sels = selections(kw["shape"], grid(kw))
    steps = [Write(s, float(i) - 0.5) for i, s in enumerate(sels.values())]
    check_parity(
        store_factory("local", tmp_path),
        kw,
        steps,
        reads=[Selection("basic", Ellipsis)],
        compare_bytes=layout not in NO_BYTE_COMPARE,
    )
