"""Dask and xarray on cuzarr: shard-sized reads, shard-safe writes, cluster-wide configuration.

Needs the ``dask`` extra (``pip install 'cuzarr[dask]'``); ``import cuzarr`` never imports Dask.

- :func:`from_zarr`: a Dask array whose tasks read whole shards (merged to ~128 MiB) through
  cuzarr's engine: one task per shard group, not one per inner chunk.
- :func:`to_zarr`: every task owns whole shards (unaligned input is rechunked onto the shard
  grid), so two tasks never rewrite one shard.
- :func:`install`: a distributed worker plugin that configures cuzarr on every worker, including
  workers that join later; :func:`worker_report` says what a process uses.
- :func:`xarray_chunks`: shard-aligned ``chunks=`` for ``xarray.open_zarr``.

See ``docs/scaling.md``.
"""

from __future__ import annotations

from typing import Any

try:
    import dask.array  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "cuzarr.dask needs Dask: install the extra with pip install 'cuzarr[dask]'"
    ) from exc

from cuzarr.dask._io import from_zarr, to_zarr, write_block_shape
from cuzarr.dask._xarray import xarray_chunks

__all__ = [
    "CuzarrPlugin",
    "from_zarr",
    "install",
    "to_zarr",
    "worker_report",
    "write_block_shape",
    "xarray_chunks",
]

_DISTRIBUTED = ("CuzarrPlugin", "install", "worker_report")


def __getattr__(name: str) -> Any:
    # distributed is imported only when its part of the API is used.
    if name in _DISTRIBUTED:
        try:
            from cuzarr.dask import _distributed
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                f"cuzarr.dask.{name} needs distributed: pip install 'cuzarr[dask]'"
            ) from exc
        return getattr(_distributed, name)
    raise AttributeError(f"module 'cuzarr.dask' has no attribute {name!r}")
