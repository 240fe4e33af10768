"""``cuzarr info``: the tree of groups and arrays of a store, with what each array stores.

>>> nodes = collect_info("data.zarr")  # doctest: +SKIP
>>> print(format_info(nodes))  # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from cuzarr.errors import CuzarrError, NodeNotFoundError
from cuzarr.metadata.load import GroupSpec, read_node
from cuzarr.metadata.spec import ArraySpec, CodecSpec
from cuzarr.stores.local import TEMP_SUFFIX
from cuzarr.tools._common import (
    JOURNAL_NAME,
    METADATA_NAMES,
    list_store,
    node_keys,
    node_paths,
    open_handle,
    parse_chunk_key,
    read_listed_nodes,
    shard_layout,
)

__all__ = ["INFO_SCHEMA", "NodeInfo", "collect_info", "format_info", "info_to_json"]

#: Identifies the layout of :func:`info_to_json`'s output; bumped on incompatible changes.
INFO_SCHEMA = "cuzarr.info/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInfo:
    """One group or array of a store.

    Attributes
    ----------
    path : str
        Node path inside the store (``""`` for the root).
    kind : {"group", "array"}
        What the node is.
    zarr_format : int
        Zarr format version.
    attributes : dict
        User attributes.
    shape, chunks : tuple of int or None
        Array shape and (inner) chunk shape; ``None`` for groups.
    shards : tuple of int or None
        Shard shape of a sharded array.
    dtype : str or None
        Data type (NumPy notation).
    fill_value : Any
        Fill value as JSON (NaN and infinities as strings).
    codecs : list of dict
        The codec chain, each ``{"name": ..., "configuration": {...}}`` (v2: filters, then
        the compressor).
    unit : {"chunk", "shard"} or None
        What one stored object holds.
    objects_total, objects_present : int
        Stored objects (chunks, or shards) the grid has room for, and those present.
    stored_bytes : int
        Bytes of the stored chunk (or shard) objects.
    metadata_bytes : int
        Bytes of the node's metadata documents.
    decoded_bytes : int
        Decoded size of the present objects (whole chunks, edges included).
    other_keys : list of str
        Keys under the array that are neither metadata nor a chunk of the grid.
    error : str or None
        Why the node's metadata could not be read (other fields then left empty).
    """

    path: str
    kind: str
    zarr_format: int | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    shape: tuple[int, ...] | None = None
    chunks: tuple[int, ...] | None = None
    shards: tuple[int, ...] | None = None
    dtype: str | None = None
    fill_value: Any = None
    codecs: list[dict[str, Any]] = field(default_factory=list)
    unit: str | None = None
    objects_total: int = 0
    objects_present: int = 0
    stored_bytes: int = 0
    metadata_bytes: int = 0
    decoded_bytes: int = 0
    other_keys: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def objects_missing(self) -> int:
        """Stored objects the grid has room for that are not stored (they read as fill)."""
        return self.objects_total - self.objects_present

    @property
    def ratio(self) -> float | None:
        """Decoded over stored bytes of the present objects (``None`` when none is stored)."""
        return self.decoded_bytes / self.stored_bytes if self.stored_bytes else None


def _codecs_json(spec: ArraySpec) -> list[dict[str, Any]]:
    def one(c: CodecSpec) -> dict[str, Any]:
        config = {k: v for k, v in c.configuration.items() if k != "id"}
        return {"name": c.name, "configuration": config}

    if spec.zarr_format == 3:
        return [one(c) for c in spec.codecs]
    chain = [one(f) for f in spec.filters]
    if spec.compressor is not None:
        chain.append(one(spec.compressor))
    return chain


def _json_scalar(value: Any) -> Any:
    """A fill value as JSON: Python scalars, NaN/inf as strings, bytes as lists."""
    if value is None:
        return None
    item = value.item() if hasattr(value, "item") else value
    if isinstance(item, float) and not math.isfinite(item):
        return str(item)
    if isinstance(item, complex):
        return [_json_scalar(item.real), _json_scalar(item.imag)]
    if isinstance(item, bytes):
        return list(item)
    if isinstance(item, (bool, int, float, str)):
        return item
    return str(item)


def _array_info(spec: ArraySpec, keys: dict[str, int]) -> NodeInfo:
    prefix = f"{spec.path}/" if spec.path else ""
    grid = spec.grid_shape
    present = 0
    stored = 0
    metadata = 0
    other: list[str] = []
    for key, size in sorted(keys.items()):
        rel = key[len(prefix) :]
        if rel in METADATA_NAMES:
            metadata += size
            continue
        if rel == JOURNAL_NAME or rel.endswith(TEMP_SUFFIX):
            continue
        coords = parse_chunk_key(spec, rel)
        if coords is not None and all(0 <= c < g for c, g in zip(coords, grid, strict=True)):
            present += 1
            stored += size
        else:
            other.append(key)
    chunks, shards = shard_layout(spec)
    return NodeInfo(
        path=spec.path,
        kind="array",
        zarr_format=spec.zarr_format,
        attributes=dict(spec.attributes),
        shape=spec.shape,
        chunks=chunks,
        shards=shards,
        dtype=spec.dtype.name if spec.dtype.isnative else spec.dtype.str,
        fill_value=_json_scalar(spec.fill_value),
        codecs=_codecs_json(spec),
        unit="chunk" if shards is None else "shard",
        objects_total=math.prod(grid),
        objects_present=present,
        stored_bytes=stored,
        metadata_bytes=metadata,
        decoded_bytes=present * spec.chunk_nbytes,
        other_keys=other,
    )


def collect_info(target: Any) -> list[NodeInfo]:
    """Describe every group and array of a store, root first, then depth-first by path.

    The store is listed once; no chunk is read.

    Parameters
    ----------
    target : str, os.PathLike or zarr.abc.store.Store
        A local path, a ``file://`` URL, or a zarr-python store.

    Returns
    -------
    list of NodeInfo
        One entry per node. A node whose metadata cannot be parsed has ``error`` set.

    Raises
    ------
    NodeNotFoundError
        If there is no group or array at the target's root.
    """
    handle = open_handle(target, read_only=True)
    listing = list_store(handle)
    nodes = node_paths(listing)
    if "" not in nodes:
        # Raises the standard "no array or group" error naming the store.
        read_node(handle.chunk_store(), "")
        raise NodeNotFoundError(f"No Zarr array or group at the root of {handle.name}")
    nodes.sort(key=lambda p: p.split("/") if p else [])
    store = handle.chunk_store()
    out: list[NodeInfo] = []
    found = read_listed_nodes(store, nodes, listing)
    for path, node in zip(nodes, found, strict=True):
        if isinstance(node, CuzarrError):
            out.append(NodeInfo(path=path, kind="unknown", error=str(node)))
            continue
        if isinstance(node, GroupSpec):
            out.append(
                NodeInfo(
                    path=path,
                    kind="group",
                    zarr_format=node.zarr_format,
                    attributes=dict(node.attributes),
                )
            )
        else:
            out.append(_array_info(node, node_keys(listing, path, nodes)))
    return out


def info_to_json(nodes: list[NodeInfo], target: str) -> dict[str, Any]:
    """The stable JSON form of :func:`collect_info`'s result (schema ``cuzarr.info/1``).

    Parameters
    ----------
    nodes : list of NodeInfo
        What :func:`collect_info` returned.
    target : str
        The target as given, echoed in the output.

    Returns
    -------
    dict
        ``{"schema", "target", "nodes": [...]}``; see ``docs/cli.md`` for every field.
    """
    rows: list[dict[str, Any]] = []
    for n in nodes:
        row: dict[str, Any] = {
            "path": n.path,
            "kind": n.kind,
            "zarr_format": n.zarr_format,
            "attributes": n.attributes,
        }
        if n.kind == "array":
            row.update(
                shape=list(n.shape or ()),
                dtype=n.dtype,
                fill_value=n.fill_value,
                chunks=list(n.chunks or ()),
                shards=None if n.shards is None else list(n.shards),
                codecs=n.codecs,
                unit=n.unit,
                chunks_total=n.objects_total,
                chunks_present=n.objects_present,
                chunks_missing=n.objects_missing,
                stored_bytes=n.stored_bytes,
                metadata_bytes=n.metadata_bytes,
                decoded_bytes=n.decoded_bytes,
                ratio=None if n.ratio is None else round(n.ratio, 4),
                other_keys=n.other_keys,
            )
        if n.error is not None:
            row["error"] = n.error
        rows.append(row)
    return {"schema": INFO_SCHEMA, "target": target, "nodes": rows}


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def _codec_text(codecs: list[dict[str, Any]]) -> str:
    parts: list[str] = []
    for c in codecs:
        config = c["configuration"]
        if c["name"] == "sharding_indexed":
            inner = _codec_text([
                {"name": x.get("name"), "configuration": x.get("configuration", {})}
                for x in config.get("codecs", [])
                if isinstance(x, dict)
            ])
            parts.append(f"sharding_indexed[{inner}]")
            continue
        shown = {k: v for k, v in config.items() if k not in ("endian", "typesize", "blocksize")}
        args = ", ".join(f"{k}={v}" for k, v in shown.items())
        parts.append(f"{c['name']}({args})" if args else str(c["name"]))
    return ", ".join(parts) or "(none)"


def format_info(nodes: list[NodeInfo]) -> str:
    """Render :func:`collect_info`'s result as an indented tree for people.

    Parameters
    ----------
    nodes : list of NodeInfo
        What :func:`collect_info` returned.

    Returns
    -------
    str
        The text, without a trailing newline.
    """
    lines: list[str] = []
    for n in nodes:
        depth = n.path.count("/") + 1 if n.path else 0
        pad = "  " * depth
        name = "/" if not n.path else n.path.rsplit("/", 1)[-1] + ("/" if n.kind == "group" else "")
        if n.error is not None:
            lines.append(f"{pad}{name}  ERROR: {n.error}")
            continue
        if n.kind == "group":
            attrs = f", {len(n.attributes)} attributes" if n.attributes else ""
            lines.append(f"{pad}{name}  (group, zarr v{n.zarr_format}{attrs})")
            continue
        ratio = "n/a" if n.ratio is None else f"{n.ratio:.2f}x"
        sub = pad + "    "
        lines.append(f"{pad}{name}  (array, zarr v{n.zarr_format})")
        lines.append(f"{sub}shape    {n.shape}  {n.dtype}  fill {n.fill_value!r}")
        shards = "" if n.shards is None else f"  shards {n.shards}"
        lines.append(f"{sub}chunks   {n.chunks}{shards}")
        lines.append(f"{sub}codecs   {_codec_text(n.codecs)}")
        lines.append(
            f"{sub}stored   {n.objects_present} of {n.objects_total} {n.unit}s present "
            f"({n.objects_missing} missing), {_size(n.stored_bytes)}, ratio {ratio}"
        )
        if n.other_keys:
            shown = ", ".join(n.other_keys[:3]) + (" ..." if len(n.other_keys) > 3 else "")
            lines.append(f"{sub}other    {len(n.other_keys)} keys outside the grid: {shown}")
    return "\n".join(lines)
