"""``cuzarr.open`` and ``cuzarr.create``: the explicit API's entry points.

A target is a local path, a ``file://`` URL, an object-store URL (``s3://``, ``gs://``,
``az://``, ``https://``; through obstore, configured by ``storage_options``), or any
zarr-python ``Store``.

>>> import cuzarr
>>> a = cuzarr.create("data.zarr", shape=(100, 100), chunks=(10, 10), dtype="f4")  # doctest: +SKIP
>>> a[:10, :10] = 1.0  # doctest: +SKIP
>>> cuzarr.open("data.zarr")[0, :3]  # doctest: +SKIP
array([1., 1., 1.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cuzarr.array import Array, create_array_at
from cuzarr.config import Device, Settings, settings_for
from cuzarr.group import Group, open_node
from cuzarr.metadata.load import normalize_node_path
from cuzarr.stores.targets import StoreHandle, resolve_target

__all__ = ["StoreHandle", "create", "open", "open_node", "resolve_target"]

_MODES = ("r", "r+", "a")
#: ``fill_value`` not given: zarr's default (for v2, ``None`` means "no fill value").
_DEFAULT_FILL: Any = object()


def _check_mode(mode: str) -> None:
    if mode not in _MODES:
        raise ValueError(
            f"mode: expected one of {', '.join(map(repr, _MODES))}, got {mode!r} "
            "(cuzarr.create makes new arrays)"
        )


def open(
    target: Any,
    mode: str = "r",
    *,
    path: str = "",
    device: str | Device | None = None,
    storage_options: Mapping[str, Any] | None = None,
    zarr_format: int | None = None,
    settings: Settings | None = None,
    write_empty_chunks: bool = False,
) -> Array | Group:
    """Open a Zarr array or group.

    Metadata is read and parsed once, here; the returned object holds its own settings and
    never consults global configuration again.

    Parameters
    ----------
    target : str, os.PathLike or zarr.abc.store.Store
        A local path, a ``file://`` URL, an object-store URL (``s3://bucket/path``,
        ``gs://``, ``az://``, ``https://``), or any zarr-python store.
    mode : {"r", "r+", "a"}, default "r"
        ``"r"`` opens read-only; ``"r+"`` and ``"a"`` allow writes to an existing node.
    path : str, default ""
        The node's path inside the store.
    device : {"auto", "cpu", "gpu"}, optional
        Where to decode; by default the device of ``settings``.
    storage_options : mapping, optional
        Options of an object-store URL: obstore's configuration keys or s3fs-style names
        (``endpoint_url``, ``key``, ``secret``, ``anon``...), ``client_options``,
        ``retry_config`` (durations in seconds) and ``concurrency`` (see
        ``docs/object-storage.md``); refused for local paths and zarr stores.
    zarr_format : {2, 3}, optional
        Only look for metadata of this format (default: v3, then v2).
    settings : Settings, optional
        Engine settings; by default ``cuzarr.get_settings()`` at open time.
    write_empty_chunks : bool, default False
        Store chunks whose every element equals the fill value (else such chunks are
        deleted, as zarr-python does by default).

    Returns
    -------
    Array or Group

    Raises
    ------
    NodeNotFoundError
        If there is no array or group at the target (the message names it).
    StoreError
        If the object store refuses access or keeps failing after retries.
    UnsupportedError
        For URLs cuzarr has no store for, or arrays the engine cannot read.
    """
    _check_mode(mode)
    resolved = settings_for(settings, device)
    handle = resolve_target(target, read_only=mode == "r", storage_options=storage_options)
    return open_node(
        handle,
        path,
        settings=resolved,
        write_empty_chunks=write_empty_chunks,
        zarr_format=zarr_format,
    )


def create(
    target: Any,
    *,
    shape: int | tuple[int, ...],
    dtype: Any,
    chunks: Any = "auto",
    shards: Any = None,
    filters: Any = "auto",
    compressors: Any = "auto",
    serializer: Any = "auto",
    fill_value: Any = _DEFAULT_FILL,
    order: Any = None,
    zarr_format: int = 3,
    attributes: dict[str, Any] | None = None,
    chunk_key_encoding: Any = None,
    dimension_names: Any = None,
    overwrite: bool = False,
    path: str = "",
    device: str | Device | None = None,
    storage_options: Mapping[str, Any] | None = None,
    settings: Settings | None = None,
    write_empty_chunks: bool = False,
) -> Array:
    """Create an array (the one ``zarr.create_array`` makes with the same arguments) and open it.

    zarr-python writes the metadata document; the array is then opened with :func:`open`.
    Arguments after ``overwrite`` are :func:`open`'s; the others are ``zarr.create_array``'s.

    Parameters
    ----------
    target : str, os.PathLike or zarr.abc.store.Store
        Where to create the array.
    shape, dtype, chunks, shards, filters, compressors, serializer, fill_value, order
        As ``zarr.create_array`` (``fill_value`` left out means zarr's default; an explicit
        ``None`` is "no fill value" for Zarr v2).
    zarr_format : {2, 3}, default 3
        The format.
    attributes : dict, optional
        User attributes.
    chunk_key_encoding, dimension_names
        As ``zarr.create_array``.
    overwrite : bool, default False
        Replace an existing node.
    path : str, default ""
        The array's path inside the store.
    device, storage_options, settings, write_empty_chunks
        As :func:`open`.

    Returns
    -------
    Array

    Raises
    ------
    UnsupportedError
        If the engine cannot handle the array (its metadata has been written; zarr-python
        can still use it).
    """
    handle = resolve_target(target, read_only=False, storage_options=storage_options)
    zarr_kwargs: dict[str, Any] = {
        "shape": shape,
        "dtype": dtype,
        "chunks": chunks,
        "shards": shards,
        "filters": filters,
        "compressors": compressors,
        "serializer": serializer,
        "order": order,
        "zarr_format": zarr_format,
        "attributes": attributes,
        "chunk_key_encoding": chunk_key_encoding,
        "dimension_names": dimension_names,
        "overwrite": overwrite,
    }
    if fill_value is not _DEFAULT_FILL:
        zarr_kwargs["fill_value"] = fill_value
    return create_array_at(
        handle,
        normalize_node_path(path),
        settings=settings_for(settings, device),
        write_empty_chunks=write_empty_chunks,
        zarr_kwargs=zarr_kwargs,
    )

