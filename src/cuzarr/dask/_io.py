"""``from_zarr`` / ``to_zarr``: Dask arrays read and written by cuzarr, one task per shard group.

Every task reads or writes whole shards (whole chunks for unsharded arrays), so a task fetches
each shard index once, and no two tasks ever write one shard. The array travels to the tasks in
a :class:`_Source`: pickled once per graph, unpickled once per worker process (a per-process
cache keyed by a token of store, path, metadata and settings).
"""

from __future__ import annotations

import json
import pickle
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal, cast

import dask
import dask.array as da
import numpy as np
import zarr
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph
from dask.utils import parse_bytes

from cuzarr.config import Device, configure, get_settings
from cuzarr.dask._chunks import aligned_chunks, grouped_chunks, is_aligned, merge_factors
from cuzarr.stores.targets import zarr_target
from cuzarr.zarr_pipeline import Pipeline

__all__ = ["from_zarr", "to_zarr", "write_block_shape"]

_CACHE_SIZE = 64
_cache: OrderedDict[str, Any] = OrderedDict()
_cache_lock = threading.Lock()


class _Source:
    """A zarr array on cuzarr's pipeline, shipped to tasks cheaply.

    Pickles to ``(token, bytes)``; the bytes are produced once per ``_Source`` and turned back
    into an array once per process (the cache), so a graph of a thousand tasks costs one
    metadata parse per worker. Without pickling (threaded scheduler) the live array is used.

    Parameters
    ----------
    token : str
        Identity of store + path + metadata + settings + access mode.
    array : zarr.Array
        The array: a ``cuzarr.Array``, or a ``zarr.Array`` on ``cuzarr.Pipeline``.
    gpu : bool
        Read into device memory.
    """

    __slots__ = ("_payload", "array", "gpu", "token")

    def __init__(self, token: str, array: Any, gpu: bool = False) -> None:
        self.token = token
        self.array = array
        self.gpu = gpu
        self._payload: bytes | None = None

    def __reduce__(self) -> tuple[Any, tuple[str, bytes, bool]]:
        if self._payload is None:
            self._payload = pickle.dumps(self.array, protocol=pickle.HIGHEST_PROTOCOL)
        return (_restore_source, (self.token, self._payload, self.gpu))

    def __dask_tokenize__(self) -> str:
        return self.token


def _restore_source(token: str, payload: bytes, gpu: bool) -> _Source:
    with _cache_lock:
        array = _cache.get(token)
        if array is not None:
            _cache.move_to_end(token)
    if array is None:
        array = pickle.loads(payload)
        with _cache_lock:
            _cache[token] = array
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    return _Source(token, array, gpu)


# ---------------------------------------------------------------------------- task functions
# Kept small and swappable. Reads go through the explicit API (``cuzarr.Array.read``) when the
# engine handles the array, else through zarr-python with cuzarr's pipeline (and its
# fallback); writes go through zarr-python with cuzarr's pipeline.


def _read_block(source: _Source, selection: tuple[slice, ...]) -> Any:
    """Read one block (a group of whole shards) of the array."""
    array = source.array
    if isinstance(array, zarr.Array):
        if source.gpu:
            from zarr.buffer import gpu as zarr_gpu

            return array.get_basic_selection(selection, prototype=zarr_gpu.buffer_prototype)
        return array[selection]
    if not selection:  # a 0-d array: read returns a scalar unless handed its output
        return array.read(selection, out=array.xp.empty((), dtype=array.dtype))
    # The engine's own output: on a cache line, and for large blocks memory of earlier
    # blocks that are gone (cuzarr.backends.recycle) instead of new pages.
    return array.read(selection)


class _Target:
    """The ``da.store`` target: writes each block through the (cached) zarr array."""

    def __init__(self, source: _Source) -> None:
        self.source = source
        array = source.array
        self.shape: tuple[int, ...] = tuple(array.shape)
        self.dtype = array.dtype
        self.ndim = len(self.shape)

    def __setitem__(self, key: Any, value: Any) -> None:
        if hasattr(value, "get") and not isinstance(value, np.ndarray):  # CuPy: to host
            value = value.get()  # pragma: no cover - needs a GPU
        self.source.array[key] = value

    def __getitem__(self, key: Any) -> Any:
        return _read_block(self.source, key)

    def __dask_tokenize__(self) -> str:
        return self.source.token


# ---------------------------------------------------------------------------- helpers


def _use_gpu(device: str | Device) -> bool:
    dev = Device(device)
    if dev is Device.GPU:
        from cuzarr.backends import require_gpu

        require_gpu()
        return True
    # "auto" returns NumPy arrays wherever it decodes (cuzarr.backends.select): NumPy blocks.
    return False


def _on_cuzarr(array: Any) -> bool:
    from cuzarr.zarr_pipeline import Pipeline

    return isinstance(array._async_array.codec_pipeline, Pipeline)


def _open(
    target: Any,
    *,
    mode: Literal["r", "r+"],
    path: str | None,
    storage_options: dict[str, Any] | None,
    device: str | Device,
) -> Any:
    """Open ``target`` (path, URL, zarr Store or zarr.Array) with cuzarr's pipeline."""
    if isinstance(target, zarr.Array):
        if _on_cuzarr(target) and (mode == "r" or not target.read_only):
            return target
        store, path = target.store, target.path
        storage_options = None
    else:
        store, storage_options = zarr_target(
            target, read_only=(mode == "r"), storage_options=storage_options
        )
    kwargs: dict[str, Any] = {"mode": mode}
    if path:
        kwargs["path"] = path
    if storage_options:
        kwargs["storage_options"] = storage_options
    with configure(device=_device_setting(device)):
        return zarr.open_array(store, **kwargs)


def _device_setting(device: str | Device) -> Device:
    # "auto" defers to the settings' device; an "auto" array then picks its backend by
    # Settings.gpu_crossover_bytes (cuzarr.backends.select.backend_for), NumPy results.
    dev = Device(device)
    return get_settings().device if dev is Device.AUTO else dev


def _token(array: Any, kind: str, gpu: bool) -> str:
    settings: Any
    if isinstance(array, zarr.Array):
        metadata = json.dumps(array.metadata.to_dict(), sort_keys=True, default=str)
        pipeline = array._async_array.codec_pipeline
        settings = pipeline.settings if isinstance(pipeline, Pipeline) else None
    else:  # cuzarr.Array
        metadata, settings = repr(array.metadata), array.settings
    return str(tokenize(repr(array.store), array.path, metadata, repr(settings), kind, gpu))


def _open_for_read(
    target: Any,
    *,
    path: str | None,
    storage_options: dict[str, Any] | None,
    device: str | Device,
) -> Any:
    """A ``cuzarr.Array`` (explicit API) when the engine reads the array, else a zarr.Array."""
    from cuzarr.api import open as cuzarr_open
    from cuzarr.array import Array
    from cuzarr.errors import UnsupportedError

    if isinstance(target, Array):
        return target
    if isinstance(target, zarr.Array):
        where, where_path, options = target.store, target.path, None
    else:
        where, where_path, options = target, path or "", storage_options
    kwargs: dict[str, Any] = {"path": where_path, "device": _device_setting(device)}
    if options:
        kwargs["storage_options"] = options
    try:
        node = cuzarr_open(where, "r", **kwargs)
    except UnsupportedError:
        if get_settings().strict:
            raise
        node = None  # zarr-python with cuzarr's pipeline (which falls back per case)
    if isinstance(node, Array):
        return node
    return _open(target, mode="r", path=path, storage_options=storage_options, device=device)


def write_block_shape(array: Any) -> tuple[int, ...]:
    """The unit one writer must own: the shard shape, or the chunk shape when not sharded.

    Parameters
    ----------
    array : zarr.Array or cuzarr.Array
        Any array with a regular grid.

    Returns
    -------
    tuple of int
    """
    shards = array.shards
    return tuple(shards if shards is not None else array.chunks)


def _target_nbytes(block_nbytes: int | str | None) -> int:
    if block_nbytes is None:
        block_nbytes = dask.config.get("array.chunk-size")
    return int(parse_bytes(block_nbytes)) if isinstance(block_nbytes, str) else int(block_nbytes)


def _meta(dtype: np.dtype[Any], ndim: int, gpu: bool) -> Any:
    if gpu:
        import cupy

        return cupy.empty((0,) * ndim, dtype=dtype)
    return np.empty((0,) * ndim, dtype=dtype)


# ---------------------------------------------------------------------------- from_zarr


def from_zarr(
    target: Any,
    *,
    chunks: Any = None,
    device: str | Device = "auto",
    storage_options: dict[str, Any] | None = None,
    path: str | None = None,
    block_nbytes: int | str | None = None,
    name: str | None = None,
) -> da.Array:
    """A Dask array over a zarr array, read by cuzarr's engine.

    Parameters
    ----------
    target : str, os.PathLike, zarr Store, zarr.Array or cuzarr.Array
        The array. Tasks read through ``cuzarr.Array.read``; an array the engine does not
        handle is read through zarr-python with cuzarr's pipeline (which falls back to
        zarr's own, logged), or raises with ``strict=True``.
    chunks : optional
        Dask chunks (anything ``dask.array.normalize_chunks`` takes). Default: whole shards (or
        whole chunks of an unsharded array), merged up to ``block_nbytes`` per task.
    device : {"auto", "cpu", "gpu"}
        Where blocks land: ``gpu`` gives CuPy blocks (and a CuPy ``meta``).
    storage_options : dict, optional
        For object-store URLs (``s3://``, ``gs://``, ``az://``, ``https://``): the options
        ``cuzarr.open`` takes (see :func:`cuzarr.stores.object_urls.split_storage_options`),
        one obstore store for the reads; for other URLs, passed to zarr (fsspec options).
    path : str, optional
        Array path inside the store.
    block_nbytes : int or str, optional
        Target decoded size of one default block; default Dask's ``array.chunk-size`` (128 MiB).
    name : str, optional
        Dask key prefix; default a deterministic token.

    Returns
    -------
    dask.array.Array
        One task per block; tasks hold no data and open the array once per worker.

    Examples
    --------
    >>> import cuzarr.dask  # doctest: +SKIP
    >>> x = cuzarr.dask.from_zarr("data.zarr")  # doctest: +SKIP
    >>> x.sum().compute()  # doctest: +SKIP
    """
    gpu = _use_gpu(device)
    array = _open_for_read(target, path=path, storage_options=storage_options, device=device)
    shape = tuple(int(s) for s in array.shape)
    dtype = np.dtype(array.dtype)
    block = write_block_shape(array)
    if chunks is None:
        factors = merge_factors(shape, block, dtype.itemsize, _target_nbytes(block_nbytes))
        norm = grouped_chunks(shape, block, factors)
    else:
        norm = da.core.normalize_chunks(  # type: ignore[no-untyped-call]
            chunks, shape, dtype=dtype, previous_chunks=block
        )
    source = _Source(_token(array, "r", gpu), array, gpu)
    name = name or f"cuzarr-from-zarr-{tokenize(source.token, norm)}"
    dsk: dict[Any, Any] = {}
    starts = [np.concatenate(([0], np.cumsum(c)[:-1])).astype(int).tolist() for c in norm]
    for index in np.ndindex(*(len(c) for c in norm)):
        selection = tuple(
            slice(starts[a][i], starts[a][i] + norm[a][i]) for a, i in enumerate(index)
        )
        dsk[(name, *index)] = (_read_block, source, selection)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=())
    return da.Array(  # type: ignore[no-untyped-call]
        graph, name, norm, meta=_meta(dtype, len(shape), gpu)
    )


# ---------------------------------------------------------------------------- to_zarr


def _create_or_open(
    darr: da.Array,
    target: Any,
    *,
    mode: str,
    path: str | None,
    storage_options: dict[str, Any] | None,
    device: str | Device,
    create_kwargs: dict[str, Any],
) -> Any:
    if isinstance(target, zarr.Array):
        return _open(target, mode="r+", path=None, storage_options=None, device=device)
    if mode not in ("w", "w-", "a", "r+"):
        raise ValueError(f"mode: expected 'w', 'w-', 'a' or 'r+', got {mode!r}")
    if mode in ("a", "r+"):
        try:
            return _open(target, mode="r+", path=path, storage_options=storage_options,
                         device=device)
        except FileNotFoundError:
            if mode == "r+":
                raise
    kwargs = dict(create_kwargs)
    kwargs.setdefault("shape", darr.shape)
    kwargs.setdefault("dtype", darr.dtype)
    if kwargs.get("chunks") is None:
        kwargs["chunks"] = tuple(max(1, max(c)) for c in darr.chunks)
    if path:
        kwargs["name"] = path
    store, storage_options = zarr_target(target, read_only=False, storage_options=storage_options)
    if storage_options:
        kwargs["storage_options"] = storage_options
    with configure(device=_device_setting(device)):
        return zarr.create_array(store, overwrite=(mode == "w"), **kwargs)


def _refuse_memory_store_on_cluster(array: Any) -> None:
    if not isinstance(array.store, zarr.storage.MemoryStore):
        return
    try:
        from distributed import default_client

        default_client()  # type: ignore[no-untyped-call]
    except (ImportError, ValueError):
        return
    raise RuntimeError(
        "cuzarr.dask.to_zarr cannot write into a zarr MemoryStore from a distributed cluster: "
        "each worker would write into its own copy; use a LocalStore or an object store"
    )


def to_zarr(
    darr: da.Array,
    target: Any,
    *,
    chunks: Sequence[int] | None = None,
    shards: Sequence[int] | None = None,
    compressors: Any = "auto",
    filters: Any = "auto",
    serializer: Any = "auto",
    fill_value: Any = None,
    region: tuple[slice, ...] | None = None,
    mode: Literal["w-", "w", "a", "r+"] = "w-",
    path: str | None = None,
    storage_options: dict[str, Any] | None = None,
    device: str | Device = "auto",
    compute: bool = True,
    return_stored: bool = False,
    **create_kwargs: Any,
) -> Any:
    """Write a Dask array to zarr through cuzarr, each task the only writer of its shards.

    Dask chunks that already cover whole shards (whole chunks when unsharded) are written as
    they are; others are rechunked onto the shard grid first, so that no shard is ever
    read-modified-written by two tasks at once (the data loss of dask#12583 /
    zarr-python#3682).

    Parameters
    ----------
    darr : dask.array.Array
        The data (known chunk sizes).
    target : str, os.PathLike, zarr Store or zarr.Array
        Where to write. A ``zarr.Array`` is written into as is (``mode`` is ignored).
    chunks, shards : tuple of int, optional
        Inner chunk and shard shape of a new array (default chunks: the widest Dask chunk).
    compressors, filters, serializer, fill_value
        Codecs and fill value of a new array, as in ``zarr.create_array``.
    region : tuple of slice, optional
        Write into this part of an existing array (``darr.shape`` must match it).
    mode : {"w-", "w", "a", "r+"}
        ``w-`` create, fail if present; ``w`` create, overwrite; ``a`` open if present else
        create; ``r+`` open, must exist.
    path : str, optional
        Array path inside the store.
    storage_options : dict, optional
        For object-store URLs: the options ``cuzarr.create`` takes; the array is written through
        cuzarr's obstore store (conditional puts). For other URLs, passed to zarr.
    device : {"auto", "cpu", "gpu"}
        Device setting of the pipeline that writes.
    compute : bool
        Write now (``True``) or return a lazy Dask collection that writes when computed.
    return_stored : bool
        Return a Dask array of what was stored (see ``dask.array.store``).
    **create_kwargs
        Other ``zarr.create_array`` arguments (``dimension_names``, ``attributes``, ...).

    Returns
    -------
    None or dask collection
        What ``dask.array.store`` returns, like ``dask.array.to_zarr``.
    """
    if any(np.isnan(s) for s in darr.shape):
        raise ValueError("to_zarr needs known chunk sizes: call darr.compute_chunk_sizes() first")
    create_kwargs.update(
        chunks=tuple(chunks) if chunks is not None else None,
        compressors=compressors,
        filters=filters,
        serializer=serializer,
        fill_value=fill_value,
    )
    if shards is not None:
        create_kwargs["shards"] = tuple(shards)
    if region is not None and not isinstance(target, zarr.Array) and mode not in ("a", "r+"):
        raise ValueError("region= writes into an existing array: pass a zarr.Array or mode='r+'")
    array = _create_or_open(
        darr, target, mode=mode, path=path, storage_options=storage_options, device=device,
        create_kwargs=create_kwargs,
    )
    _refuse_memory_store_on_cluster(array)
    shape = tuple(int(s) for s in array.shape)
    if region is None:
        offset = (0,) * len(shape)
        extent = shape
    else:
        region = tuple(region) + (slice(None),) * (len(shape) - len(region))
        bounds = [r.indices(s) for r, s in zip(region, shape, strict=True)]
        if any(step != 1 for _, _, step in bounds):
            raise ValueError(f"region: expected slices with step 1, got {region!r}")
        offset = tuple(start for start, _, _ in bounds)
        extent = tuple(max(0, stop - start) for start, stop, _ in bounds)
        region = tuple(slice(o, o + n) for o, n in zip(offset, extent, strict=True))
    if tuple(darr.shape) != extent:
        raise ValueError(
            f"shape mismatch: the Dask array has shape {darr.shape}, the target region "
            f"{'of the array ' if region is None else ''}has shape {extent}"
        )
    block = write_block_shape(array)
    if not is_aligned(darr.chunks, block, offset):
        darr = darr.rechunk(  # type: ignore[no-untyped-call]
            aligned_chunks(darr.chunks, block, offset, extent)
        )
    source = _Source(_token(array, "w", False), array)
    return da.store(
        darr,
        cast(Any, _Target(source)),
        regions=[region] if region is not None else None,
        lock=False,
        compute=compute,
        return_stored=return_stored,
    )
