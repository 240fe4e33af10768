"""Helpers shared by the tools: listing a store, finding nodes, parsing chunk keys."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cuzarr.codecs.base import Buf
from cuzarr.errors import CuzarrError
from cuzarr.metadata.load import GroupSpec, read_nodes
from cuzarr.metadata.spec import ArraySpec
from cuzarr.stores.base import ChunkStore
from cuzarr.stores.targets import StoreHandle, resolve_target

__all__ = [
    "JOURNAL_NAME",
    "METADATA_NAMES",
    "Listing",
    "ProgressFn",
    "list_store",
    "node_keys",
    "node_paths",
    "open_handle",
    "parse_chunk_key",
    "shard_layout",
]

#: Called as ``progress(description, done, total)``; ``total`` may be ``None``.
ProgressFn = Callable[[str, int, int | None], None]

#: Metadata documents; never chunk keys.
METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"})

#: The progress journal ``cuzarr copy`` keeps at the destination's root while it runs.
JOURNAL_NAME = ".cuzarr-copy.json"


def open_handle(target: Any, *, read_only: bool) -> StoreHandle:
    """Resolve a path, ``file://`` URL or zarr ``Store`` (see :func:`cuzarr.api.resolve_target`).

    Parameters
    ----------
    target : str, os.PathLike or zarr.abc.store.Store
        The store.
    read_only : bool
        Refuse writes.

    Returns
    -------
    StoreHandle
    """
    return resolve_target(target, read_only=read_only)


@dataclass(frozen=True, slots=True)
class Listing:
    """Every object of a store with its size.

    Attributes
    ----------
    sizes : dict of str to int
        Key to size in bytes, temporary files included.
    documents : dict of str to bytes or None
        Metadata documents already read to make the listing (stores without listing, walked
        from their metadata), ``None`` for those known to be missing; empty otherwise. Pass
        them on to :func:`cuzarr.metadata.load.read_nodes` instead of reading them again.
    """

    sizes: dict[str, int]
    documents: dict[str, Buf | None] = field(default_factory=dict)


def list_store(handle: StoreHandle) -> Listing:
    """List every object of the store, in-progress temporary files included.

    Stores without listing (HTTP(S)) are walked from their metadata instead
    (:mod:`cuzarr.tools.metadata_listing`).

    Parameters
    ----------
    handle : StoreHandle
        The store.

    Returns
    -------
    Listing
    """
    store = handle.chunk_store()
    if not store.caps.listing:
        from cuzarr.tools.metadata_listing import walk_metadata

        walk = walk_metadata(store, handle.name)
        return Listing(walk.sizes, walk.documents)
    return Listing(dict(store.list_sizes("")))


def read_listed_nodes(
    store: ChunkStore, nodes: Sequence[str], listing: Listing
) -> list[ArraySpec | GroupSpec | CuzarrError]:
    """:func:`~cuzarr.metadata.load.read_nodes` of ``nodes``, with what ``listing`` knows.

    The listing's keys say which documents exist (one wave of exactly those on a remote
    store), and the documents a metadata walk already read are not read again.
    """
    return read_nodes(store, nodes, listed=listing.sizes, documents=listing.documents or None)


def node_paths(listing: Listing) -> list[str]:
    """Paths of every node (a folder holding a metadata document), sorted, root first."""
    found: set[str] = set()
    for key in listing.sizes:
        head, _, name = key.rpartition("/")
        if name in ("zarr.json", ".zarray", ".zgroup"):
            found.add(head)
    return sorted(found, key=lambda p: (p.count("/") if p else -1, p))


def node_keys(listing: Listing, path: str, nodes: list[str]) -> dict[str, int]:
    """Keys below the node ``path`` that belong to no deeper node, with their sizes."""
    prefix = f"{path}/" if path else ""
    deeper = [f"{n}/" for n in nodes if n != path and n.startswith(prefix)]
    return {
        key: size
        for key, size in listing.sizes.items()
        if key.startswith(prefix) and not any(key.startswith(d) for d in deeper)
    }


def parse_chunk_key(spec: ArraySpec, rel: str) -> tuple[int, ...] | None:
    """Grid coordinates of a chunk key relative to the array, or ``None`` if it is not one.

    Parameters
    ----------
    spec : ArraySpec
        The array.
    rel : str
        A key relative to the array's path.

    Returns
    -------
    tuple of int or None
        The coordinates (not checked against the grid), or ``None``.
    """
    enc = spec.chunk_key_encoding
    ndim = len(spec.shape)
    if enc.kind == "default":
        if rel == "c" and ndim == 0:
            return ()
        head = f"c{enc.separator}"
        if not rel.startswith(head):
            return None
        rel = rel[len(head) :]
    elif ndim == 0:
        return () if rel == "0" else None
    parts = rel.split(enc.separator)
    if len(parts) != ndim or not all(p.isdigit() and p.isascii() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def shard_layout(spec: ArraySpec) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """Return ``(chunks, shards)`` as zarr-python names them (inner chunks, shard shape).

    Parameters
    ----------
    spec : ArraySpec
        The array.

    Returns
    -------
    tuple
        The (inner) chunk shape and the shard shape, or ``None`` when not sharded.
    """
    if spec.zarr_format == 3 and spec.codecs and spec.codecs[0].name == "sharding_indexed":
        inner = spec.codecs[0].configuration.get("chunk_shape")
        if isinstance(inner, list) and all(isinstance(x, int) for x in inner):
            return tuple(inner), spec.chunk_shape
    return spec.chunk_shape, None
