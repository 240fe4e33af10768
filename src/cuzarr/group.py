"""``cuzarr.Group``: navigate a Zarr hierarchy and open its arrays through cuzarr.

>>> g = cuzarr.open("data.zarr")  # doctest: +SKIP
>>> g["temp/t2m"][0, :10]  # doctest: +SKIP
>>> sorted(g.keys())  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from cuzarr.array import Array, create_array_at
from cuzarr.attributes import Attributes, persist_attributes
from cuzarr.config import Device, Settings, settings_for
from cuzarr.errors import MetadataError, NodeNotFoundError
from cuzarr.metadata.load import (
    Documents,
    GroupSpec,
    fetch_documents,
    holds_node,
    normalize_node_path,
    read_node,
)

if TYPE_CHECKING:
    from cuzarr.stores.targets import StoreHandle

__all__ = ["Group", "open_node"]


class Group:
    """A Zarr group (open with :func:`cuzarr.open`).

    Members are opened on access (``group["a/b"]``) with the group's settings; listing reads
    the store. ``keys()`` names the direct members (arrays and groups).

    Parameters
    ----------
    handle : StoreHandle
        The store.
    spec : GroupSpec
        Parsed group metadata.
    settings : Settings
        Engine settings handed to the arrays opened from this group.
    write_empty_chunks : bool, default False
        Handed to the arrays opened from this group.
    """

    def __init__(
        self,
        handle: StoreHandle,
        spec: GroupSpec,
        *,
        settings: Settings,
        write_empty_chunks: bool = False,
    ) -> None:
        self._handle = handle
        self._spec = spec
        self._settings = settings
        self._write_empty_chunks = write_empty_chunks
        self.attrs = Attributes(spec.attributes, self._persist_attributes)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "handle": self._handle,
            "spec": GroupSpec(
                path=self._spec.path,
                zarr_format=self._spec.zarr_format,
                attributes=self.attrs.asdict(),
            ),
            "settings": self._settings,
            "write_empty_chunks": self._write_empty_chunks,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["handle"],
            state["spec"],
            settings=state["settings"],
            write_empty_chunks=state["write_empty_chunks"],
        )

    def _persist_attributes(self, attributes: dict[str, Any]) -> None:
        store = self._handle.chunk_store()
        store.check_writable()
        persist_attributes(store, self.path, self.zarr_format, attributes)

    # ------------------------------------------------------------------ properties

    @property
    def path(self) -> str:
        """The group's path inside its store (``""`` for the root)."""
        return self._spec.path

    @property
    def zarr_format(self) -> int:
        """Zarr format version."""
        return self._spec.zarr_format

    @property
    def metadata(self) -> GroupSpec:
        """The parsed group metadata (attributes as of the last change through :attr:`attrs`)."""
        return GroupSpec(
            path=self._spec.path, zarr_format=self._spec.zarr_format, attributes=self.attrs.asdict()
        )

    @property
    def store(self) -> Any:
        """A zarr-python ``Store`` over the group's store."""
        return self._handle.zarr_store()

    @property
    def read_only(self) -> bool:
        """Whether writes are refused."""
        return self._handle.read_only

    @property
    def settings(self) -> Settings:
        """The engine settings handed to member arrays."""
        return self._settings

    def __repr__(self) -> str:
        return f"<cuzarr.Group {self._handle.name} '{self.path}'>"

    # ------------------------------------------------------------------ members

    def _child(self, key: str) -> str:
        if not isinstance(key, str):
            raise TypeError(f"group keys are str, got {type(key).__name__}")
        rel = normalize_node_path(key)
        if not rel:
            raise KeyError(key)
        return f"{self.path}/{rel}" if self.path else rel

    def __getitem__(self, key: str) -> Array | Group:
        return self._open(key, self._child(key), None)

    def _open(self, key: str, path: str, documents: Documents | None) -> Array | Group:
        try:
            return open_node(
                self._handle, path, settings=self._settings,
                write_empty_chunks=self._write_empty_chunks, documents=documents,
            )
        except NodeNotFoundError as exc:
            raise KeyError(
                f"no member {key!r} in group '{self.path}' of {self._handle.name}"
            ) from exc

    def get(self, key: str, default: Any = None) -> Any:
        """The member at ``key``, or ``default`` if there is none."""
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        try:
            path = self._child(key)
        except (KeyError, MetadataError):
            return False
        return self._handle.has_node(path)

    def _found(self) -> tuple[list[tuple[str, str]], Documents | None]:
        """``(name, path)`` of each direct member, and the documents fetched to find them.

        On a remote store the documents of every listed name are fetched together
        (:func:`~cuzarr.metadata.load.fetch_documents`: at most three round trips for the whole
        group, where looking name by name costs one to three each) and opening the members
        reuses them; a local store is asked name by name.
        """
        names = self._handle.list_dir(self.path)
        paths = [f"{self.path}/{name}" if self.path else name for name in names]
        store = self._handle.chunk_store()
        if not store.caps.remote:
            found = [(n, p) for n, p in zip(names, paths, strict=True) if self._handle.has_node(p)]
            return found, None
        documents = fetch_documents(store, paths)
        found = [(n, p) for n, p in zip(names, paths, strict=True) if holds_node(documents, p)]
        return found, documents

    def keys(self) -> list[str]:
        """Names of the direct members (arrays and groups), sorted."""
        return [name for name, _ in self._found()[0]]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def members(self) -> Iterator[tuple[str, Array | Group]]:
        """Yield ``(name, member)`` for every direct member, sorted by name."""
        found, documents = self._found()
        for name, path in found:
            yield name, self._open(name, path, documents)

    def arrays(self) -> Iterator[tuple[str, Array]]:
        """Yield ``(name, array)`` for every direct member that is an array."""
        for name, member in self.members():
            if isinstance(member, Array):
                yield name, member

    def groups(self) -> Iterator[tuple[str, Group]]:
        """Yield ``(name, group)`` for every direct member that is a group."""
        for name, member in self.members():
            if isinstance(member, Group):
                yield name, member

    def create_array(
        self,
        name: str,
        *,
        settings: Settings | None = None,
        device: str | Device | None = None,
        write_empty_chunks: bool | None = None,
        **zarr_kwargs: Any,
    ) -> Array:
        """Create an array member (arguments as :func:`cuzarr.create`, without a target)."""
        zarr_kwargs.setdefault("zarr_format", self.zarr_format)
        return create_array_at(
            self._handle,
            self._child(name),
            settings=settings_for(settings or self._settings, device),
            write_empty_chunks=(
                self._write_empty_chunks if write_empty_chunks is None else write_empty_chunks
            ),
            zarr_kwargs=zarr_kwargs,
        )


def open_node(
    handle: StoreHandle,
    path: str = "",
    *,
    settings: Settings,
    write_empty_chunks: bool = False,
    zarr_format: int | None = None,
    documents: Documents | None = None,
) -> Array | Group:
    """Open the array or group at ``path`` of an already resolved store.

    ``documents``: metadata documents already fetched (see
    :func:`~cuzarr.metadata.load.read_node`).

    Raises
    ------
    NodeNotFoundError
        If no array or group exists there.
    """
    node = read_node(handle.chunk_store(), path, zarr_format=zarr_format, documents=documents)
    if isinstance(node, GroupSpec):
        return Group(handle, node, settings=settings, write_empty_chunks=write_empty_chunks)
    return Array(handle, node, settings=settings, write_empty_chunks=write_empty_chunks)
