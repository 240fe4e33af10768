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

import os
import threading
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cuzarr import _zarr_compat as compat
from cuzarr.config import Device, Settings, get_settings
from cuzarr.errors import MetadataError, UnsupportedError
from cuzarr.metadata.load import GroupSpec, normalize_node_path, read_node
from cuzarr.stores import from_zarr_store, track_zarr_loop
from cuzarr.stores.local import TEMP_SUFFIX, LocalChunkStore
from cuzarr.stores.obstore_ import OBJECT_STORE_SCHEMES

if TYPE_CHECKING:
    from cuzarr.array import Array
    from cuzarr.group import Group
    from cuzarr.stores.base import ChunkStore

__all__ = ["StoreHandle", "create", "open", "open_node", "resolve_target"]

_MODES = ("r", "r+", "a")
#: ``fill_value`` not given: zarr's default (for v2, ``None`` means "no fill value").
_DEFAULT_FILL: Any = object()
_METADATA_DOCUMENTS = ("zarr.json", ".zarray", ".zgroup")


class StoreHandle:
    """Where a node lives: a local folder or a zarr ``Store``, re-opened lazily after pickling.

    Parameters
    ----------
    root : str, optional
        Absolute path of a local store's root folder.
    zarr_store : zarr.abc.store.Store, optional
        Any other zarr store (pickled by zarr's own rules: a ``MemoryStore`` by value).
    read_only : bool
        Refuse writes.
    url : str, optional
        The object-store URL ``zarr_store`` was opened from (names the store in messages).
    concurrency : int, optional
        Requests in flight on an object store.
    """

    def __init__(
        self,
        *,
        root: str | None = None,
        zarr_store: Any = None,
        read_only: bool = True,
        url: str | None = None,
        concurrency: int | None = None,
    ) -> None:
        if (root is None) == (zarr_store is None):
            raise ValueError("StoreHandle needs exactly one of root= and zarr_store=")
        self.root = root
        self._zarr_store = zarr_store
        self.read_only = read_only
        self.url = url
        self.concurrency = concurrency
        self._chunk_store: ChunkStore | None = None
        self._local_zarr: Any = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "zarr_store": self._zarr_store,
            "read_only": self.read_only,
            "url": self.url,
            "concurrency": self.concurrency,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            root=state["root"],
            zarr_store=state["zarr_store"],
            read_only=state["read_only"],
            url=state.get("url"),
            concurrency=state.get("concurrency"),
        )

    @property
    def name(self) -> str:
        """A short description for messages (``file:///data/a.zarr``, ``s3://b/a.zarr``...)."""
        if self.root is not None:
            return Path(self.root).as_uri()
        if self.url is not None:
            return self.url
        return str(self._zarr_store)

    def chunk_store(self) -> ChunkStore:
        """The engine's store (created on first use)."""
        store = self._chunk_store
        if store is None:
            with self._lock:
                store = self._chunk_store
                if store is None:
                    if self.root is not None:
                        store = LocalChunkStore(self.root, read_only=self.read_only)
                    else:
                        store = from_zarr_store(
                            self._zarr_store, name=self.url, concurrency=self.concurrency
                        )
                    self._chunk_store = store
        return store

    def zarr_store(self) -> Any:
        """A zarr-python ``Store`` over the same data (a ``LocalStore`` for local folders)."""
        if self._zarr_store is not None:
            return self._zarr_store
        if self._local_zarr is None:
            from zarr.storage import LocalStore

            self._local_zarr = LocalStore(self.root, read_only=self.read_only)  # type: ignore[arg-type]
        return self._local_zarr

    def list_dir(self, path: str) -> list[str]:
        """Names directly below the node path ``path`` (sorted)."""
        if self.root is not None:
            folder = os.path.join(self.root, path) if path else self.root
            try:
                with os.scandir(folder) as entries:
                    return sorted(e.name for e in entries if e.is_dir())
            except (FileNotFoundError, NotADirectoryError):
                return []
        prefix = f"{path}/" if path else ""
        return sorted({n.strip("/") for n in compat.list_dir(self.zarr_store(), prefix)})

    def sizes(self, path: str) -> list[tuple[str, int]]:
        """Every stored key below the node path ``path`` with its size in bytes."""
        prefix = f"{path}/" if path else ""
        if self.root is None:
            return compat.list_sizes(self.zarr_store(), prefix)
        out: list[tuple[str, int]] = []
        top = os.path.join(self.root, path) if path else self.root
        for folder, _dirs, files in os.walk(top):
            rel = os.path.relpath(folder, self.root)
            base = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for f in files:
                if f.endswith(TEMP_SUFFIX):
                    continue
                try:
                    size = os.stat(os.path.join(folder, f)).st_size
                except FileNotFoundError:
                    continue
                out.append((base + f, size))
        return out

    def has_node(self, path: str) -> bool:
        """Whether a metadata document exists at the node path ``path``."""
        store = self.chunk_store()
        return any(
            store.get(f"{path}/{doc}" if path else doc) is not None for doc in _METADATA_DOCUMENTS
        )


def resolve_target(
    target: Any, *, read_only: bool, storage_options: Mapping[str, Any] | None = None
) -> StoreHandle:
    """Turn a path, URL, zarr ``Store`` or :class:`StoreHandle` into a :class:`StoreHandle`.

    Raises
    ------
    UnsupportedError
        For URLs of schemes cuzarr has no store for.
    TypeError
        For targets of other types.
    ValueError
        For ``storage_options`` with a target that takes none.
    """
    if isinstance(target, StoreHandle):
        _no_storage_options(storage_options, "a StoreHandle")
        return target
    if isinstance(target, (str, os.PathLike)):
        text = os.fspath(target)
        if isinstance(text, bytes):
            text = os.fsdecode(text)
        scheme = urllib.parse.urlsplit(text).scheme.lower() if "://" in text else ""
        if scheme in OBJECT_STORE_SCHEMES:
            return _object_store_handle(text, read_only=read_only, storage_options=storage_options)
        if scheme and scheme != "file":
            raise UnsupportedError(
                f"cannot open {text!r}: cuzarr has no store for {scheme}:// URLs; open the store "
                f"with zarr-python and pass it instead, e.g. "
                f"cuzarr.open(zarr.storage.FsspecStore.from_url({text!r}))"
            )
        if scheme == "file":
            parts = urllib.parse.urlsplit(text)
            if parts.netloc not in ("", "localhost"):
                raise UnsupportedError(
                    f"cannot open {text!r}: file:// URLs on other hosts are not supported"
                )
            text = urllib.request.url2pathname(parts.path)
        _no_storage_options(storage_options, "a local path")
        return StoreHandle(root=os.path.abspath(text), read_only=read_only)
    if compat.is_zarr_store(target):
        _no_storage_options(storage_options, "a zarr Store (configure the store itself)")
        root = compat.local_store_root(target)
        if root is not None:
            return StoreHandle(
                root=os.path.abspath(str(root)), read_only=read_only or target.read_only
            )
        return StoreHandle(zarr_store=target, read_only=read_only or target.read_only)
    raise TypeError(
        f"cannot open a {type(target).__name__}: expected a local path, a file:// URL or a "
        "zarr Store"
    )


def _object_store_handle(
    url: str, *, read_only: bool, storage_options: Mapping[str, Any] | None
) -> StoreHandle:
    """A handle on an object-store URL: obstore underneath, a zarr ``ObjectStore`` for zarr."""
    from cuzarr.stores.obstore_ import open_url

    store, concurrency = open_url(url, storage_options)
    track_zarr_loop()
    return StoreHandle(
        zarr_store=compat.object_store(store, read_only=read_only),
        read_only=read_only,
        url=url.rstrip("/"),
        concurrency=concurrency,
    )


def _no_storage_options(options: Mapping[str, Any] | None, what: str) -> None:
    if options:
        raise ValueError(
            f"storage_options apply to object-store URLs only, not to {what}; "
            f"got {sorted(options)}"
        )


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

