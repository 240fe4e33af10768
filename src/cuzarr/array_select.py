"""How a selection of a :class:`cuzarr.Array` becomes output buffers and zarr indexers.

:class:`ArraySelections` is a base of :class:`~cuzarr.array.Array`: it checks ``out=`` buffers,
allocates the buffers a read fills (in the backend's memory), and builds zarr's indexers for
orthogonal, vectorized and block selections. No store I/O happens here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr import _zarr_compat as compat
from cuzarr.array_meta import ArrayMeta
from cuzarr.indexing import BasicPlan

__all__ = ["ArraySelections"]


class ArraySelections(ArrayMeta):
    """Output buffers and zarr indexers of an array's selections."""

    _xp: Any
    _empty: Callable[[tuple[int, ...], Any], Any]
    _grid: Any

    def _check_out(self, out: Any, shape: tuple[int, ...]) -> npt.NDArray[Any]:
        if not isinstance(out, self._xp.ndarray):
            raise TypeError(
                f"out: expected a {self._xp.__name__}.ndarray, got {type(out).__name__}"
            )
        if out.shape != shape:
            raise ValueError(f"out: expected shape {shape}, got {out.shape}")
        if out.dtype != self._dtype:
            raise ValueError(f"out: expected dtype {self._dtype}, got {out.dtype}")
        # NumPy arrays can be read-only; CuPy's have no such flag (device memory is always
        # writable, and ``cupy.ndarray.flags`` has no ``writeable``).
        if isinstance(out, np.ndarray) and not out.flags.writeable:
            raise ValueError("out: the buffer is read-only")
        return out  # type: ignore[no-any-return]  # numpy, or cupy on the GPU

    def _buffers(
        self, plan: BasicPlan, out: npt.NDArray[Any] | None
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
        """Where ``plan`` is read to: result, buffer and engine target.

        The result is ``out`` or a new array; the buffer is the result without its new axes;
        the target is the buffer with reversed axes flipped back.
        """
        if out is None:
            buf = self._empty(plan.shape, self._dtype)
            result: npt.NDArray[Any] = buf
            if plan.newaxes:
                result = buf.reshape(plan.result_shape)
        else:
            result = self._check_out(out, plan.result_shape)
            buf = result
            if plan.newaxes:
                drop = tuple(
                    0 if i in plan.newaxes else slice(None) for i in range(result.ndim)
                )
                buf = result[drop]
        return result, buf, (buf if plan.flip is None else buf[plan.flip])

    def _dispatch(self, selection: Any) -> str:
        kind = compat.selection_kind(selection, self.ndim)
        if kind == "basic":
            raise IndexError(
                f"unsupported selection {selection!r}: expected integers, slices, '...', "
                "None, or integer / Boolean arrays (see Array.oindex and Array.vindex)"
            )
        return kind

    def _zarr_indexer(self, kind: str, selection: Any) -> Any:
        grid = self._grid
        if grid is None:
            grid = self._grid = compat.chunk_grid(self.shape, self._spec.chunk_shape)
        if kind == "oindex":
            return compat.orthogonal_indexer(selection, self.shape, grid)
        if kind == "vindex":
            return compat.vectorized_indexer(selection, self.shape, grid)
        return compat.block_indexer(selection, self.shape, grid)
