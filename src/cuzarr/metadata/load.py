"""Read array and group metadata documents from a :class:`~cuzarr.stores.base.ChunkStore`.

A node at ``path`` is a Zarr v3 node when ``{path}/zarr.json`` exists, else a v2 array when
``{path}/.zarray`` exists (with optional ``{path}/.zattrs``), else a v2 group when
``{path}/.zgroup`` exists. This is the order zarr-python uses when the format is not given.

On a remote store (:attr:`~cuzarr.stores.base.StoreCaps.remote`) each document costs a round
trip, so :func:`fetch_documents` asks for the documents of many nodes in waves, each wave's
requests in flight together: every ``zarr.json`` first, then ``.zarray`` and ``.zattrs``
where there was none, then ``.zgroup`` where there was no ``.zarray``. The requests are those
that looking node by node makes (one more, ``.zattrs``, for a path with no node at all);
the round trips are at most three for any number of nodes instead of up to four per node.
Where the caller has listed the store (``cuzarr info``, ``verify``, ``copy``), one wave asks
for exactly the documents that exist.
"""

from __future__ import annotations

import contextlib
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from cuzarr._json import JsonReader, load_json_document
from cuzarr.errors import CuzarrError, MetadataError, NodeNotFoundError
from cuzarr.metadata.spec import ArraySpec
from cuzarr.metadata.v2 import parse_v2
from cuzarr.metadata.v3 import parse_v3

if TYPE_CHECKING:
    from cuzarr.codecs.base import Buf
    from cuzarr.stores.base import ChunkStore

__all__ = [
    "Documents",
    "GroupSpec",
    "fetch_documents",
    "holds_node",
    "normalize_node_path",
    "read_array_spec",
    "read_node",
    "read_nodes",
]

V3_DOCUMENT = "zarr.json"
V2_ARRAY_DOCUMENT = ".zarray"
V2_GROUP_DOCUMENT = ".zgroup"
V2_ATTRS_DOCUMENT = ".zattrs"


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSpec:
    """A Zarr group as read from its metadata.

    Attributes
    ----------
    path : str
        The group's path inside its store (``""`` for the root).
    zarr_format : {2, 3}
        The Zarr format version.
    attributes : dict
        User attributes.
    """

    path: str
    zarr_format: Literal[2, 3]
    attributes: dict[str, Any] = field(default_factory=dict)


def normalize_node_path(path: str) -> str:
    """Return a node path in the form used for store keys.

    Backslashes become slashes, leading and trailing slashes are stripped and repeated slashes
    collapse (as zarr-python's ``normalize_path`` does), so the result is always relative to
    the store's root.

    Parameters
    ----------
    path : str
        A node path such as ``"/group/array/"``.

    Returns
    -------
    str
        The normalised path, ``""`` for the root.

    Raises
    ------
    MetadataError
        If ``path`` is not a string or has ``"."`` or ``".."`` segments.
    """
    if not isinstance(path, str):
        raise MetadataError(
            f"Invalid node path {path!r}: expected a str, got {type(path).__name__}"
        )
    text = path.replace("\\", "/").strip("/")
    segments = [s for s in text.split("/") if s]
    for segment in segments:
        if segment in (".", ".."):
            raise MetadataError(
                f"Invalid node path {path!r}: '{segment}' segments are not allowed "
                "(paths are relative to the store root and cannot leave it)"
            )
    return "/".join(segments)


def _key(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


#: Fetched metadata documents by store key: the bytes, or ``None`` for a missing document.
type Documents = Mapping[str, Buf | None]


def _get_document(
    store: ChunkStore, path: str, name: str, documents: Documents
) -> dict[str, Any] | None:
    key = _key(path, name)
    if key in documents:
        data = documents[key]
    else:
        got = store.get(key)
        data = None if got is None else got.data
    if data is None:
        return None
    return load_json_document(bytes(memoryview(data)), document=name, path=path)


def _wave(store: ChunkStore, keys: list[str], into: dict[str, Buf | None]) -> None:
    if keys:
        into.update(zip(keys, store.get_many(keys), strict=True))


def _from_listing(
    store: ChunkStore,
    paths: Sequence[str],
    zarr_format: int | None,
    listed: Container[str],
    into: dict[str, Buf | None],
) -> None:
    """Fetch the documents of ``paths`` in one wave, only those ``listed`` holds.

    The documents it does not hold go into ``into`` as missing first.
    """
    wanted: list[str] = []
    for path in paths:
        v3, array, group, attrs = (
            _key(path, n)
            for n in (V3_DOCUMENT, V2_ARRAY_DOCUMENT, V2_GROUP_DOCUMENT, V2_ATTRS_DOCUMENT)
        )
        if zarr_format in (None, 3) and v3 in listed:
            wanted.append(v3)
            continue
        if zarr_format != 3:
            found = array if array in listed else group if group in listed else None
            if found is not None:
                wanted += [found, attrs] if attrs in listed else [found]
        into.update((k, None) for k in (v3, array, group, attrs) if k not in listed)
    _wave(store, wanted, into)


def fetch_documents(
    store: ChunkStore,
    paths: Sequence[str],
    *,
    zarr_format: int | None = None,
    listed: Container[str] | None = None,
) -> dict[str, Buf | None]:
    """Fetch the metadata documents of the nodes at ``paths`` in at most three waves.

    Parameters
    ----------
    store : ChunkStore
        The store holding the nodes.
    paths : sequence of str
        Node paths (normalised as by :func:`normalize_node_path`).
    zarr_format : {2, 3}, optional
        Only fetch documents of this format; by default v3 first, then v2.
    listed : container of str, optional
        Every key of the store, from a listing: then the documents are fetched in one wave,
        only those that exist (a listed key gone before it is read reads as missing).

    Returns
    -------
    dict of str to bytes or None
        Each fetched document by store key, ``None`` where it is missing; pass it to
        :func:`read_node`.

    Raises
    ------
    CuzarrError
        If the store fails a request (the error names the first failed key of its wave).
    """
    into: dict[str, Buf | None] = {}
    _fetch_into(store, paths, zarr_format, listed, into)
    return into


def _fetch_into(
    store: ChunkStore,
    paths: Sequence[str],
    zarr_format: int | None,
    listed: Container[str] | None,
    into: dict[str, Buf | None],
) -> None:
    """Fetch as :func:`fetch_documents` does, wave by wave into ``into``.

    On a failed wave ``into`` keeps what the waves before it fetched.
    """
    rest = list(dict.fromkeys(paths))
    if listed is not None:
        _from_listing(store, rest, zarr_format, listed, into)
        return
    if zarr_format in (None, 3):
        _wave(store, [_key(p, V3_DOCUMENT) for p in rest], into)
        rest = [p for p in rest if into[_key(p, V3_DOCUMENT)] is None]
    if zarr_format == 3:
        return
    _wave(store, [_key(p, n) for p in rest for n in (V2_ARRAY_DOCUMENT, V2_ATTRS_DOCUMENT)], into)
    _wave(
        store,
        [_key(p, V2_GROUP_DOCUMENT) for p in rest if into[_key(p, V2_ARRAY_DOCUMENT)] is None],
        into,
    )


def _format_error(path: str, document: str, doc: dict[str, Any], expected: int) -> MetadataError:
    reader = JsonReader(doc, document, path)
    return reader.fail("zarr_format", str(expected), doc.get("zarr_format"))


def holds_node(documents: Documents, path: str) -> bool:
    """Whether documents fetched by :func:`fetch_documents` show a node at ``path``.

    A node is there when any of ``zarr.json``, ``.zarray``, ``.zgroup`` exists (the waves
    fetch each only where the ones before it are missing).
    """
    return any(
        documents.get(_key(path, name)) is not None
        for name in (V3_DOCUMENT, V2_ARRAY_DOCUMENT, V2_GROUP_DOCUMENT)
    )


def read_node(
    store: ChunkStore,
    path: str = "",
    *,
    zarr_format: int | None = None,
    documents: Documents | None = None,
) -> ArraySpec | GroupSpec:
    """Read the metadata of the array or group at ``path``.

    Parameters
    ----------
    store : ChunkStore
        The store holding the node.
    path : str
        The node's path inside the store (``""`` for the root).
    zarr_format : {2, 3}, optional
        Only look for documents of this format; by default v3 first, then v2.
    documents : mapping, optional
        Documents already fetched (:func:`fetch_documents`); others are read from ``store``.
        By default a remote store's documents are fetched in waves, a local one's one by one.

    Returns
    -------
    ArraySpec or GroupSpec

    Raises
    ------
    NodeNotFoundError
        If no metadata document exists at ``path``.
    MetadataError
        If a document is malformed or inconsistent (the message names it, the field and the
        bad value).
    UnsupportedError
        If the array uses a feature the engine does not implement.
    """
    if zarr_format not in (None, 2, 3):
        raise ValueError(f"zarr_format: expected 2, 3 or None, got {zarr_format!r}")
    node = normalize_node_path(path)
    if documents is None:
        documents = (
            fetch_documents(store, [node], zarr_format=zarr_format) if store.caps.remote else {}
        )
    if zarr_format in (None, 3):
        doc = _get_document(store, node, V3_DOCUMENT, documents)
        if doc is not None:
            return _parse_v3_node(doc, node)
    if zarr_format in (None, 2):
        doc = _get_document(store, node, V2_ARRAY_DOCUMENT, documents)
        if doc is not None:
            attrs = _get_document(store, node, V2_ATTRS_DOCUMENT, documents)
            return parse_v2(doc, path=node, attributes=attrs)
        doc = _get_document(store, node, V2_GROUP_DOCUMENT, documents)
        if doc is not None:
            if doc.get("zarr_format") != 2:
                raise _format_error(node, V2_GROUP_DOCUMENT, doc, 2)
            attrs = _get_document(store, node, V2_ATTRS_DOCUMENT, documents)
            return GroupSpec(path=node, zarr_format=2, attributes=attrs or {})
    looked = {
        None: f"{V3_DOCUMENT}, {V2_ARRAY_DOCUMENT} or {V2_GROUP_DOCUMENT}",
        3: V3_DOCUMENT,
        2: f"{V2_ARRAY_DOCUMENT} or {V2_GROUP_DOCUMENT}",
    }[zarr_format]
    raise NodeNotFoundError(
        f"No Zarr array or group at '{node}' in {store.name}: found no {looked}"
    )


def read_nodes(
    store: ChunkStore,
    paths: Sequence[str],
    *,
    zarr_format: int | None = None,
    listed: Container[str] | None = None,
    documents: Documents | None = None,
) -> list[ArraySpec | GroupSpec | CuzarrError]:
    """Read the metadata of the nodes at ``paths``, each node's failure in its place.

    A remote store's documents are fetched together (:func:`fetch_documents`; if the store
    fails a wave, the documents the waves before it fetched are kept and the rest are read node
    by node, so that each node's failure is its own), a local one's node by node. Each entry
    is what :func:`read_node` returns for its path, or the
    :class:`~cuzarr.errors.CuzarrError` it raises (a missing node, a malformed document, a
    store failure): tools that report every node (``info``, ``verify``) go on past one.

    Parameters
    ----------
    store : ChunkStore
        The store holding the nodes.
    paths : sequence of str
        Node paths inside the store.
    zarr_format : {2, 3}, optional
        Only look for documents of this format; by default v3 first, then v2.
    listed : container of str, optional
        Every key of the store, when the caller has listed it: a remote store's documents
        are then fetched in one wave, only those that exist.
    documents : mapping, optional
        Documents the caller has already read (a walk of a store without listing): nothing
        is fetched ahead, and a document not among them is read on its own.

    Returns
    -------
    list
        One :class:`~cuzarr.metadata.spec.ArraySpec`, :class:`GroupSpec` or error per path.
    """
    nodes = [normalize_node_path(p) for p in paths]
    if documents is None:
        fetched: dict[str, Buf | None] = {}
        if store.caps.remote:
            # On a failed wave: what the waves before it fetched is kept, the rest is read
            # node by node below, each node's failure in its place.
            with contextlib.suppress(CuzarrError):
                _fetch_into(store, nodes, zarr_format, listed, fetched)
        documents = fetched
    out: list[ArraySpec | GroupSpec | CuzarrError] = []
    for node in nodes:
        try:
            out.append(read_node(store, node, zarr_format=zarr_format, documents=documents))
        except CuzarrError as exc:
            out.append(exc)
    return out


def _parse_v3_node(doc: dict[str, Any], path: str) -> ArraySpec | GroupSpec:
    reader = JsonReader(doc, V3_DOCUMENT, path)
    if reader.raw("zarr_format") != 3:
        raise _format_error(path, V3_DOCUMENT, doc, 3)
    node_type = reader.choice("node_type", ("array", "group"))
    if node_type == "group":
        return GroupSpec(path=path, zarr_format=3, attributes=reader.object_("attributes", {}))
    return parse_v3(doc, path=path)


def read_array_spec(
    store: ChunkStore, path: str = "", *, zarr_format: int | None = None
) -> ArraySpec:
    """Read the metadata of the array at ``path``.

    Parameters
    ----------
    store : ChunkStore
        The store holding the array.
    path : str
        The array's path inside the store (``""`` for the root).
    zarr_format : {2, 3}, optional
        Only look for documents of this format; by default v3 first, then v2.

    Returns
    -------
    ArraySpec

    Raises
    ------
    NodeNotFoundError
        If no metadata document exists at ``path``.
    MetadataError
        If the node is a group, or its document is malformed or inconsistent.
    UnsupportedError
        If the array uses a feature the engine does not implement.
    """
    node = read_node(store, path, zarr_format=zarr_format)
    if isinstance(node, GroupSpec):
        document = V3_DOCUMENT if node.zarr_format == 3 else V2_GROUP_DOCUMENT
        raise MetadataError(
            f"Expected an array at '{node.path}' in {store.name}, found a group ({document})"
        )
    return node
