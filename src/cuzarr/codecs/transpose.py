"""The v3 ``transpose`` codec."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["TransposeCodec"]


@dataclass(frozen=True, slots=True)
class TransposeCodec:
    """Permute the axes of a chunk: encoded axis ``i`` is decoded axis ``order[i]``.

    Parameters
    ----------
    order : tuple of int
        A permutation of ``range(ndim)``.
    """

    order: tuple[int, ...]
    name: str = "transpose"

    @property
    def inverse(self) -> tuple[int, ...]:
        """The permutation that undoes ``order``."""
        return tuple(int(i) for i in np.argsort(self.order))

    def resolve(
        self, shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """Return the transposed shape."""
        return tuple(shape[i] for i in self.order), dtype

    def decode(
        self, arr: npt.NDArray[Any], shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> npt.NDArray[Any]:
        """Undo the permutation (a view)."""
        return arr.transpose(self.inverse)

    def encode(self, arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Apply the permutation (a view)."""
        return arr.transpose(self.order)
