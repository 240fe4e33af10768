"""A store's keys without listing it: for servers that cannot list (HTTP(S) static hosting).

Static web servers and CDNs answer GET and HEAD but have no listing, so ``cuzarr info``,
``verify`` and ``copy`` find what they need from the metadata instead: the root node's
document, its groups' consolidated metadata (zarr v3 ``consolidated_metadata`` in
``zarr.json``, v2 ``.zmetadata``) for the nodes below it, and every array's chunk grid for its
chunk keys. The metadata documents are fetched in waves
(:func:`cuzarr.metadata.load.fetch_documents`), which gives their sizes too; each other possible
key (a chunk, a document not fetched) costs one one-byte ranged GET (which returns the object's
size); missing chunks are simply not stored, as in a listing.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from cuzarr.codecs.base import Buf
from cuzarr.errors import UnsupportedError
from cuzarr.metadata.load import fetch_documents, read_node
from cuzarr.metadata.spec import ArraySpec
from cuzarr.stores.base import ChunkStore, Suffix

__all__ = ["MetadataWalk", "walk_metadata"]

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


def _children(
    store: ChunkStore, path: str, name: str, documents: dict[str, Buf | None]
) -> list[str]:
    """Paths of every node below the group at ``path``, from its consolidated metadata.

    ``documents`` holds the group's fetched documents; ``.zmetadata`` (v2) is added to it.
    """
    v3 = documents.get(_key(path, "zarr.json"))
    if v3 is not None:
        meta: Any = json.loads(bytes(memoryview(v3))).get("consolidated_metadata")
        if isinstance(meta, dict) and isinstance(meta.get("metadata"), dict):
            return sorted(_key(path, str(k)) for k in meta["metadata"])
    else:
        key = _key(path, ".zmetadata")
        got = store.get(key)
        documents[key] = zmeta = None if got is None else got.data
        if zmeta is not None:
            entries: Any = json.loads(bytes(memoryview(zmeta))).get("metadata")
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


@dataclass(frozen=True, slots=True)
class MetadataWalk:
    """What :func:`walk_metadata` found.

    Attributes
    ----------
    sizes : dict of str to int
        Metadata documents and chunks (shards) that exist, with their sizes.
    documents : dict of str to bytes or None
        The metadata documents read on the way (``None``: known to be missing).
    """

    sizes: dict[str, int]
    documents: dict[str, Buf | None]


def walk_metadata(store: ChunkStore, name: str) -> MetadataWalk:
    """Every stored key of the node tree at the store's root, with its size, from metadata.

    Parameters
    ----------
    store : ChunkStore
        A store without listing (:attr:`~cuzarr.stores.base.StoreCaps.listing` false).
    name : str
        What messages call the store (its URL).

    Returns
    -------
    MetadataWalk
        The keys and sizes, and the documents read to find them.

    Raises
    ------
    NodeNotFoundError
        If there is no node at the root.
    UnsupportedError
        For a group without consolidated metadata (its members cannot be found).
    """
    documents = fetch_documents(store, [""])
    root = read_node(store, "", documents=documents)
    nodes = [""]
    if not isinstance(root, ArraySpec):
        nodes += _children(store, "", name, documents)
        documents.update(fetch_documents(store, nodes[1:]))
    keys: list[str] = []
    known: dict[str, int] = {}
    for path in nodes:
        node = root if path == "" else read_node(store, path, documents=documents)
        for doc in _DOCUMENTS:
            key = _key(path, doc)
            if key not in documents:
                keys.append(key)  # not fetched: its size is asked for
            elif (data := documents[key]) is not None:
                known[key] = memoryview(data).nbytes
        if isinstance(node, ArraySpec):
            keys += list(_chunk_keys(node))
    with ThreadPoolExecutor(_WORKERS) as pool:
        sizes = list(pool.map(lambda k: _size(store, k), keys))
    found = {k: n for k, n in zip(keys, sizes, strict=True) if n is not None}
    return MetadataWalk(known | found, documents)
