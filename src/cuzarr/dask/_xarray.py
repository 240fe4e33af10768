"""Shard-aligned Dask chunks for xarray.

``xarray.open_zarr`` chunks each variable like its zarr *inner* chunks by default (one task per
inner chunk of a sharded array). :func:`xarray_chunks` gives a ``chunks=`` mapping whose sizes
are multiples of every variable's shard (or chunk) along each dimension, merged up to a target
size, so that each Dask task reads whole shards and a later ``to_zarr`` writes whole shards.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import zarr

from cuzarr.dask._chunks import merge_factors
from cuzarr.dask._io import _target_nbytes, write_block_shape
from cuzarr.stores.targets import zarr_target

__all__ = ["xarray_chunks"]


def _dimension_names(array: Any) -> tuple[str, ...] | None:
    names = getattr(array.metadata, "dimension_names", None)
    if names is None:
        names = array.attrs.get("_ARRAY_DIMENSIONS")
    if names is None or any(n is None for n in names):
        return None
    return tuple(str(n) for n in names)


def xarray_chunks(
    store: Any,
    *,
    group: str | None = None,
    block_nbytes: int | str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> dict[str, int]:
    """A ``chunks=`` mapping for ``xarray.open_zarr`` made of whole shards.

    Parameters
    ----------
    store : str, os.PathLike or zarr Store
        The dataset (a zarr group).
    group : str, optional
        Group path inside the store.
    block_nbytes : int or str, optional
        Target decoded size of the largest variable's block; default Dask's
        ``array.chunk-size``.
    storage_options : dict, optional
        For object-store URLs: the options ``cuzarr.open`` takes (one store stack); for other
        targets, passed to zarr.

    Returns
    -------
    dict of str to int
        Dimension name to chunk size: a multiple of each variable's shard (or chunk) size along
        that dimension (the least common multiple, then merged). Dimension coordinates are not
        counted (xarray loads them whole).

    Examples
    --------
    >>> ds = xr.open_zarr(path, chunks=cuzarr.dask.xarray_chunks(path))  # doctest: +SKIP
    """
    target, options = zarr_target(store, read_only=True, storage_options=storage_options)
    root = zarr.open_group(target, mode="r", path=group or "", storage_options=options)
    unit: dict[str, int] = {}
    sizes: dict[str, int] = {}
    largest: tuple[int, tuple[str, ...], np.dtype[Any]] | None = None
    for _, array in root.arrays():
        dims = _dimension_names(array)
        if dims is None or len(dims) != array.ndim:
            continue
        if dims == (array.basename,):
            continue  # a dimension coordinate: xarray loads it whole into its index
        for dim, b, s in zip(dims, write_block_shape(array), array.shape, strict=True):
            unit[dim] = math.lcm(unit.get(dim, 1), int(b))
            sizes[dim] = int(s)
        if largest is None or array.nbytes > largest[0]:
            largest = (int(array.nbytes), dims, np.dtype(array.dtype))
    if largest is None:
        return {}
    _, dims, dtype = largest
    factors = merge_factors(
        [sizes[d] for d in dims], [unit[d] for d in dims], dtype.itemsize,
        _target_nbytes(block_nbytes),
    )
    chunks = dict(unit)
    for dim, f in zip(dims, factors, strict=True):
        chunks[dim] = unit[dim] * f
    return {d: min(c, max(sizes[d], 1)) for d, c in chunks.items()}
