"""zarr's CPU buffers with new arrays on a cache line: what :class:`cuzarr.configure` sets.

zarr allocates the output of every read with its buffer prototype's ``NDBuffer.empty``
(``np.empty``: a large array starts 16 bytes past a cache line). :class:`AlignedNDBuffer`
allocates it with :func:`cuzarr.backends.cpu.empty_aligned`, so cuzarr's pipeline may copy
large chunks into it with streaming stores of whole lines, as into the arrays the explicit API
allocates (bench/results/probe-512-session41.md: a whole read through zarr into such a
buffer, streamed, against zarr's, not streamed: (a) 1.09-1.12x, (c) 1.08-1.10x, (d)
1.06-1.08x, (j) level, (h) 0.97x, (i) 0.94x).
"""

from __future__ import annotations

from typing import Any, Literal, Self

import numpy as np
from zarr.buffer.cpu import NDBuffer

from cuzarr.backends.cpu import empty_aligned

__all__ = ["ALIGNED_NDBUFFER", "AlignedNDBuffer"]


class AlignedNDBuffer(NDBuffer):
    """zarr's CPU ``NDBuffer`` whose ``empty`` arrays (C order) start on a cache line.

    Everything else is zarr's: arrays of other orders and of dates and times (whose data
    types zarr restores after allocating) come from zarr's ``empty``, and arrays it is handed
    are kept as they are.
    """

    @classmethod
    def empty(
        cls, shape: tuple[int, ...], dtype: Any, order: Literal["C", "F"] = "C"
    ) -> Self:
        """An uninitialised buffer; C-ordered ones start on a cache line (``empty_aligned``)."""
        dt = np.dtype(dtype)
        if order != "C" or dt.kind in "mM":
            return super().empty(shape, dtype, order)
        return cls(empty_aligned(tuple(shape), dt))


#: zarr's ``ndbuffer`` configuration value for :class:`AlignedNDBuffer`.
ALIGNED_NDBUFFER = f"{AlignedNDBuffer.__module__}.{AlignedNDBuffer.__qualname__}"
