"""zarr's CPU buffers with large new arrays on a cache line: what :class:`cuzarr.configure` sets.

zarr allocates the output of every read with its buffer prototype's ``NDBuffer.empty``
(``np.empty``: a large array starts 16 bytes past a cache line, where rows of 128 bytes hold
only one whole line). :class:`AlignedNDBuffer` allocates the large ones with
:func:`cuzarr.backends.cpu.empty_aligned`, so cuzarr's pipeline may copy chunks into them with
streaming stores of whole lines, as into the arrays the explicit API allocates
(bench/results/probe-512-session44.md, read all through zarr into such an output, streamed,
against zarr's own: (a) 1.20x, (b) 1.06x, (c) 1.22x, (d) 1.33x, (h) 1.33x on a Xeon VM;
probe-512-session41.md: 0.94-1.12x on a Zen 4 one).

zarr's sharding codec compares the buffer prototype it is handed within shards with the
configured default; where cuzarr leaves an array of nested shards to zarr's pipeline, the
pipeline's fallback passes zarr's in-shard byte getters the configured prototype
(:class:`cuzarr.zarr_pipeline.Pipeline`), so nested shards read and write under this buffer
too.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Self

import numpy as np
from zarr.buffer.cpu import NDBuffer

from cuzarr.backends.cpu import STREAM_SPAN_MIN, empty_aligned

__all__ = ["ALIGNED_MIN_BYTES", "ALIGNED_NDBUFFER", "AlignedNDBuffer"]

#: Outputs of at least this many bytes start on a cache line: the engine streams only into
#: regions spanning :data:`~cuzarr.backends.cpu.STREAM_SPAN_MIN` bytes or more, which a
#: smaller output cannot hold. Smaller ones are zarr's own (arrays that own their memory).
ALIGNED_MIN_BYTES = STREAM_SPAN_MIN


class AlignedNDBuffer(NDBuffer):
    """zarr's CPU ``NDBuffer`` whose large ``empty`` arrays (C order) start on a cache line.

    An aligned array is a view into a slightly larger allocation (its ``base``;
    ``flags.owndata`` is false), as the explicit API's outputs. Everything else is zarr's:
    arrays under :data:`ALIGNED_MIN_BYTES`, of other orders and of dates and times (whose data
    types zarr restores after allocating) come from zarr's ``empty``, and arrays it is handed
    are kept as they are.
    """

    @classmethod
    def empty(
        cls, shape: tuple[int, ...], dtype: Any, order: Literal["C", "F"] = "C"
    ) -> Self:
        """An uninitialised buffer; large C-ordered ones start on a cache line."""
        dt = np.dtype(dtype)
        if (
            order != "C"
            or dt.kind in "mM"
            or math.prod(shape) * dt.itemsize < ALIGNED_MIN_BYTES
        ):
            return super().empty(shape, dtype, order)
        return cls(empty_aligned(tuple(shape), dt))


#: zarr's ``ndbuffer`` configuration value for :class:`AlignedNDBuffer`.
ALIGNED_NDBUFFER = f"{AlignedNDBuffer.__module__}.{AlignedNDBuffer.__qualname__}"
