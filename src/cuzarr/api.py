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
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cuzarr.config import Device, Settings, get_settings
from cuzarr.errors import MetadataError
from cuzarr.metadata.load import GroupSpec, normalize_node_path, read_node
from cuzarr.stores.targets import StoreHandle, resolve_target

if TYPE_CHECKING:
    from cuzarr.array import Array
    from cuzarr.group import Group

__all__ = ["StoreHandle", "create", "open", "open_node", "resolve_target"]

_MODES = ("r", "r+", "a")
#: ``fill_value`` not given: zarr's default (for v2, ``None`` means "no fill value").
_DEFAULT_FILL: Any = object()


def _settings(settings: Settings | None, device: str | Device | None) -> Settings:
    base = get_settings() if settings is None else settings
    if device is None:
        return base
    dev = Device(device)
    if dev is Device.GPU:
        from cuzarr.backends import require_gpu

        require_gpu()
    return base if base.device is dev else replace(base, device=dev)


def _check_mode(mode: str) -> None:
    if mode not in _MODES:
        raise ValueError(
            f"mode: expected one of {', '.join(map(repr, _MODES))}, got {mode!r} "
            "(cuzarr.create makes new arrays)"
        )


def open_node(
    handle: StoreHandle,
    path: str = "",
    *,
    settings: Settings,
    write_empty_chunks: bool = False,
    zarr_format: int | None = None,
) -> Array | Group:
    """Open the array or group at ``path`` of an already resolved store.

    Raises
    ------
    NodeNotFoundError
        If no array or group exists there.
    """
    from cuzarr.array import Array
    from cuzarr.group import Group

    node = read_node(handle.chunk_store(), path, zarr_format=zarr_format)
    if isinstance(node, GroupSpec):
        return Group(handle, node, settings=settings, write_empty_chunks=write_empty_chunks)
    return Array(handle, node, settings=settings, write_empty_chunks=write_empty_chunks)


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
    resolved = _settings(settings, device)
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
    import zarr

    resolved = _settings(settings, device)
    handle = resolve_target(target, read_only=False, storage_options=storage_options)
    node = normalize_node_path(path)
    optional = {} if fill_value is _DEFAULT_FILL else {"fill_value": fill_value}
    zarr.create_array(
        handle.zarr_store(),
        name=node or None,
        shape=shape,
        dtype=dtype,
        chunks=chunks,
        shards=shards,
        filters=filters,
        compressors=compressors,
        serializer=serializer,
        order=order,
        zarr_format=zarr_format,  # type: ignore[arg-type]
        attributes=attributes,
        chunk_key_encoding=chunk_key_encoding,
        dimension_names=dimension_names,
        overwrite=overwrite,
        **optional,
    )
    opened = open_node(
        handle, node, settings=resolved, write_empty_chunks=write_empty_chunks,
        zarr_format=zarr_format,
    )
    from cuzarr.array import Array

    if not isinstance(opened, Array):  # pragma: no cover - zarr just wrote an array there
        raise MetadataError(f"expected an array at '{node}' in {handle.name}")
    return opened

