"""A kit for testing cuzarr (and other pipelines) against zarr-python's default pipeline.

- :mod:`cuzarr.testing.arrays`: run zarr-python code under either pipeline, list what a store
  holds, compare arrays bit for bit;
- :mod:`cuzarr.testing.parity`: :func:`check_parity`, the same writes through both pipelines,
  then identical stored keys and every cross-read equal to a NumPy model;
- :mod:`cuzarr.testing.faults`: :class:`FaultyStore`, a store wrapper that fails on purpose.
"""

from __future__ import annotations

from cuzarr.testing.arrays import (
    CUZARR_PIPELINE,
    METADATA_KEYS,
    ZARR_PIPELINE,
    assert_same_array,
    chunk_keys,
    sample_values,
    stored_items,
    stored_keys,
    use_pipeline,
)
from cuzarr.testing.parity import (
    Append,
    ParityResult,
    Resize,
    Selection,
    Step,
    Write,
    check_parity,
    model_get,
    model_set,
    read,
    write,
)

__all__ = [
    "CUZARR_PIPELINE",
    "METADATA_KEYS",
    "ZARR_PIPELINE",
    "Append",
    "ParityResult",
    "Resize",
    "Selection",
    "Step",
    "Write",
    "assert_same_array",
    "check_parity",
    "chunk_keys",
    "model_get",
    "model_set",
    "read",
    "sample_values",
    "stored_items",
    "stored_keys",
    "use_pipeline",
    "write",
]
