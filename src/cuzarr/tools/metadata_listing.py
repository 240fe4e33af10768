"""A store's keys without listing it: for servers that cannot list (HTTP(S) static hosting).

Static web servers and CDNs answer GET and HEAD but have no listing, so ``cuzarr info``,
``verify`` and ``copy`` find what they need from the metadata instead: the root node's
document, its groups' consolidated metadata (zarr v3 ``consolidated_metadata`` in
``zarr.json``, v2 ``.zmetadata``) for the nodes below it, and every array's chunk grid for its
chunk keys. Each possible chunk key costs one one-byte ranged GET (which returns the object's
size); missing chunks are simply not stored, as in a listing.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cuzarr.errors import CuzarrError, UnsupportedError
from cuzarr.metadata.load import read_node, read_nodes
from cuzarr.metadata.spec import ArraySpec
from cuzarr.stores.base import ChunkStore, Suffix

__all__ = ["sizes_from_metadata"]

_DOCUMENTS = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")
#: Size requests in flight at once.
_WORKERS = 16


def _key(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


def _size(store: ChunkStore, key: str) -> int | None:
    got = store.get(key, Suffix(1))
    if got is None:
        return None
    return int(got.size) if got.size is not None else int(got.data.nbytes)


def _children(store: ChunkStore, path: str, name: str) -> list[str]:
    """Paths of every node below the group at ``path``, from its consolidated metadata."""
    v3 = store.get(_key(path, "zarr.json"))
    if v3 is not None:
        meta: Any = json.loads(bytes(v3.data)).get("consolidated_metadata")
        if isinstance(meta, dict) and isinstance(meta.get("metadata"), dict):
            return sorted(_key(path, str(k)) for k in meta["metadata"])
    else:
        zmeta = store.get(_key(path, ".zmetadata"))
        if zmeta is not None:
            entries: Any = json.loads(bytes(zmeta.data)).get("metadata")
            if isinstance(entries, dict):
                heads = {
                    head
                    for head, _, doc in (str(k).rpartition("/") for k in entries)
                    if doc in (".zarray", ".zgroup") and head
                }
                return sorted(_key(path, h) for h in heads)
    raise UnsupportedError(
        f"cannot list the group at '{path}' in {name}: the server has no listing (HTTP(S)) "
        "and the group has no consolidated metadata; consolidate it "
        "(zarr.consolidate_metadata) or name an array inside it"
    )


def _chunk_keys(spec: ArraySpec) -> Iterator[str]:
    for coords in itertools.product(*(range(n) for n in spec.grid_shape)):
        yield spec.chunk_key(tuple(coords))


def sizes_from_metadata(store: ChunkStore, name: str) -> dict[str, int]:
    """Every stored key of the node tree at the store's root, with its size, from metadata.

    Parameters
    ----------
    store : ChunkStore
        A store without listing (:attr:`~cuzarr.stores.base.StoreCaps.listing` false).
    name : str
        What messages call the store (its URL).

    Returns
    -------
    dict of str to int
        Metadata documents and chunks (shards) that exist, with their sizes.

    Raises
    ------
    NodeNotFoundError
        If there is no node at the root.
    UnsupportedError
        For a group without consolidated metadata (its members cannot be found).
    """
    root = read_node(store, "")
    nodes = [""]
    if not isinstance(root, ArraySpec):
        nodes += _children(store, "", name)
    keys: list[str] = []
    for path, node in zip(nodes, [root, *read_nodes(store, nodes[1:])], strict=True):
        if isinstance(node, CuzarrError):
            raise node
        keys += [_key(path, d) for d in _DOCUMENTS]
        if isinstance(node, ArraySpec):
            keys += list(_chunk_keys(node))
    with ThreadPoolExecutor(_WORKERS) as pool:
        sizes = list(pool.map(lambda k: _size(store, k), keys))
    return {k: n for k, n in zip(keys, sizes, strict=True) if n is not None}
