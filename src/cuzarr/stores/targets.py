"""Where nodes live: resolving a path, ``file://`` URL, object-store URL or zarr ``Store``.

:func:`resolve_target` turns what a user passes (to ``cuzarr.open``, the CLI, Dask) into a
:class:`StoreHandle`, which makes the engine's store lazily (and again after pickling) and
answers listing questions through it.
"""

from __future__ import annotations

import os
import threading
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cuzarr import _zarr_compat as compat
from cuzarr import _zarr_equivalence as equivalence
from cuzarr.errors import ReadOnlyError, UnsupportedError
from cuzarr.stores import from_zarr_store, track_zarr_loop
from cuzarr.stores.base import ChunkStore
from cuzarr.stores.local import TEMP_SUFFIX, LocalChunkStore
from cuzarr.stores.object_urls import OBJECT_STORE_SCHEMES, open_url, service_of

__all__ = [
    "METADATA_DOCUMENTS",
    "StoreHandle",
    "is_object_store_url",
    "resolve_target",
    "zarr_target",
]

#: The documents whose presence makes a node (v3, v2 array, v2 group).
METADATA_DOCUMENTS = ("zarr.json", ".zarray", ".zgroup")


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
        Requests in flight on an object store (default: what :meth:`chunk_store` is told).
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

    def chunk_store(self, default_concurrency: int = 32) -> ChunkStore:
        """The engine's store (created on first use).

        ``default_concurrency`` (an Array passes its ``Settings.io_concurrency``) bounds the
        requests in flight on an object store opened without a ``concurrency`` option.
        """
        store = self._chunk_store
        if store is None:
            with self._lock:
                store = self._chunk_store
                if store is None:
                    if self.root is not None:
                        store = LocalChunkStore(self.root, read_only=self.read_only)
                    else:
                        store = from_zarr_store(
                            self._zarr_store,
                            name=self.url,
                            concurrency=self.concurrency or default_concurrency,
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
        return self.chunk_store().list_dir(f"{path}/" if path else "")

    def sizes(self, path: str) -> list[tuple[str, int]]:
        """Every stored key below the node path ``path`` with its size (no in-progress writes)."""
        listed = self.chunk_store().list_sizes(f"{path}/" if path else "")
        return [(k, n) for k, n in listed if not k.endswith(TEMP_SUFFIX)]

    def has_node(self, path: str) -> bool:
        """Whether a metadata document exists at the node path ``path``."""
        store = self.chunk_store()
        return any(
            store.get(f"{path}/{doc}" if path else doc) is not None for doc in METADATA_DOCUMENTS
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
        root = equivalence.local_store_root(target)
        if root is not None:
            return StoreHandle(
                root=os.path.abspath(str(root)), read_only=read_only or target.read_only
            )
        return StoreHandle(zarr_store=target, read_only=read_only or target.read_only)
    raise TypeError(
        f"cannot open a {type(target).__name__}: expected a local path, a file:// URL or a "
        "zarr Store"
    )


def is_object_store_url(target: Any) -> bool:
    """Whether ``target`` is a URL of a scheme cuzarr opens through obstore (``s3://``...)."""
    if not isinstance(target, (str, os.PathLike)):
        return False
    text = os.fspath(target)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    return "://" in text and urllib.parse.urlsplit(text).scheme.lower() in OBJECT_STORE_SCHEMES


def zarr_target(
    target: Any, *, read_only: bool, storage_options: Mapping[str, Any] | None
) -> tuple[Any, dict[str, Any] | None]:
    """What to hand zarr-python for ``target``: one store stack with :func:`resolve_target`.

    Object-store URLs become a zarr ``ObjectStore`` over the same obstore store (and options)
    ``cuzarr.open`` uses, so zarr's own opening never goes through fsspec for them; anything
    else is returned as given, with its ``storage_options`` for zarr.

    Returns
    -------
    target, storage_options
        The zarr store (or the original target) and the options still to pass to zarr.
    """
    if is_object_store_url(target):
        handle = _object_store_handle(
            os.fsdecode(os.fspath(target)), read_only=read_only, storage_options=storage_options
        )
        return handle.zarr_store(), None
    return target, dict(storage_options) if storage_options else None


def _object_store_handle(
    url: str, *, read_only: bool, storage_options: Mapping[str, Any] | None
) -> StoreHandle:
    """A handle on an object-store URL: obstore underneath, a zarr ``ObjectStore`` for zarr.

    Raises
    ------
    ReadOnlyError
        For an ``http(s)://`` URL opened for writing (cuzarr reads HTTP(S) only).
    """
    if not read_only and service_of(url) == "http":
        raise ReadOnlyError(
            f"cannot open {url!r} for writing: cuzarr reads http(s):// URLs only (static "
            "servers and CDNs take no writes); open it with mode='r', or write to a local "
            "path or an s3://, gs:// or az:// URL"
        )
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


