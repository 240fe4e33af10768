"""``cuzarr verify``: decode every stored chunk of a store and report each one that fails.

Every chunk object in every array's grid is read and decoded (checksums included). For a
sharded array the shard index is decoded and validated (its checksum, every entry inside the
shard, no overlaps), then every inner chunk it lists is decoded. Failures are reported by key
(``temp/c/0/1``, or ``temp/c/0/1 [inner (0, 3)]`` for an inner chunk) with the reason.

In-progress temporary files (suffix ``.partial``) are listed separately as stale temporary
files, and stored keys that belong to no chunk of the grid as warnings; neither makes a store
corrupt.

>>> report = verify("data.zarr")  # doctest: +SKIP
>>> [p.label for p in report.problems]  # doctest: +SKIP
['temp/c/0/1']
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cuzarr.backends.pool import parallel_map
from cuzarr.codecs.base import Buf
from cuzarr.codecs.build import build_chunk_codec
from cuzarr.codecs.chain import ChunkCodec, V2ChunkCodec
from cuzarr.codecs.sharding import EMPTY
from cuzarr.config import get_settings
from cuzarr.errors import CuzarrError, UnsupportedError
from cuzarr.metadata.load import GroupSpec, read_node
from cuzarr.metadata.spec import ArraySpec
from cuzarr.stores.base import ChunkStore
from cuzarr.stores.local import TEMP_SUFFIX
from cuzarr.tools._common import (
    JOURNAL_NAME,
    METADATA_NAMES,
    ProgressFn,
    list_store,
    node_keys,
    node_paths,
    open_handle,
    parse_chunk_key,
    read_listed_nodes,
)

__all__ = ["VERIFY_SCHEMA", "Problem", "VerifyReport", "verify"]

#: Identifies the layout of :meth:`VerifyReport.to_json`; bumped on incompatible changes.
VERIFY_SCHEMA = "cuzarr.verify/1"

Codec = ChunkCodec | V2ChunkCodec


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One chunk (or metadata document) that cannot be read or decoded.

    Attributes
    ----------
    key : str
        The stored object's key.
    array : str
        The array's path.
    kind : {"corrupt", "unreadable", "metadata"}
        ``corrupt``: the bytes do not decode; ``unreadable``: the store failed to return them;
        ``metadata``: the array's metadata cannot be parsed.
    reason : str
        What failed.
    inner : tuple of int or None
        The inner chunk's coordinates inside its shard, for a sharded array.
    """

    key: str
    array: str
    kind: str
    reason: str
    inner: tuple[int, ...] | None = None

    @property
    def label(self) -> str:
        """The key, plus the inner chunk when there is one: ``a/c/0 [inner (1, 2)]``."""
        return self.key if self.inner is None else f"{self.key} [inner {self.inner}]"

    def to_json(self) -> dict[str, Any]:
        """The problem as JSON."""
        return {
            "key": self.key,
            "inner": None if self.inner is None else list(self.inner),
            "label": self.label,
            "array": self.array,
            "kind": self.kind,
            "reason": self.reason,
        }


@dataclass(slots=True, kw_only=True)
class VerifyReport:
    """What :func:`verify` checked and found.

    Attributes
    ----------
    target : str
        The store.
    arrays : int
        Arrays checked.
    chunks_checked : int
        Stored chunk (or shard) objects read and decoded.
    inner_chunks_checked : int
        Inner chunks of shards decoded.
    bytes_checked : int
        Stored bytes read.
    problems : list of Problem
        Every corrupt or unreadable object, sorted by key.
    stale_temporary_files : list of str
        Leftovers of interrupted writes (``*.partial``): harmless, safe to delete.
    warnings : list of str
        Keys outside every chunk grid, arrays the engine cannot decode (not checked).
    """

    target: str
    arrays: int = 0
    chunks_checked: int = 0
    inner_chunks_checked: int = 0
    bytes_checked: int = 0
    problems: list[Problem] = field(default_factory=list)
    stale_temporary_files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether no problem was found (warnings and stale files do not count)."""
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form (schema ``cuzarr.verify/1``, see ``docs/cli.md``)."""
        return {
            "schema": VERIFY_SCHEMA,
            "target": self.target,
            "ok": self.ok,
            "arrays": self.arrays,
            "chunks_checked": self.chunks_checked,
            "inner_chunks_checked": self.inner_chunks_checked,
            "bytes_checked": self.bytes_checked,
            "problems": [p.to_json() for p in self.problems],
            "stale_temporary_files": self.stale_temporary_files,
            "warnings": self.warnings,
        }

    def format(self) -> str:
        """A summary for people, one line per problem."""
        lines = [f"{p.label}: {p.kind}: {p.reason}" for p in self.problems]
        lines += [f"stale temporary file: {k}" for k in self.stale_temporary_files]
        lines += [f"warning: {w}" for w in self.warnings]
        inner = (
            f", {self.inner_chunks_checked} inner chunks" if self.inner_chunks_checked else ""
        )
        verdict = "OK" if self.ok else f"{len(self.problems)} corrupt or unreadable"
        lines.append(
            f"{verdict}: checked {self.arrays} arrays, {self.chunks_checked} stored objects"
            f"{inner}, {self.bytes_checked} bytes"
        )
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class _Item:
    spec: ArraySpec
    codec: Codec
    key: str


@dataclass(slots=True)
class _Result:
    problems: list[Problem] = field(default_factory=list)
    inner: int = 0
    nbytes: int = 0


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, CuzarrError) else f"{type(exc).__name__}: {text}"


def _decode(codec: Codec, raw: Buf) -> None:
    out = np.empty(codec.shape, codec.dtype)
    codec.decode_into(raw, out)


def _check(store: ChunkStore, item: _Item) -> _Result:
    result = _Result()
    path = item.spec.path
    try:
        got = store.get(item.key)
    except Exception as exc:
        result.problems.append(Problem(key=item.key, array=path, kind="unreadable",
                                       reason=_describe(exc)))
        return result
    if got is None:  # deleted since the listing
        return result
    raw = got.data
    result.nbytes = memoryview(raw).nbytes
    sh = item.codec.sharding
    if sh is None:
        try:
            _decode(item.codec, raw)
        except Exception as exc:
            result.problems.append(Problem(key=item.key, array=path, kind="corrupt",
                                           reason=_describe(exc)))
        return result
    try:
        u8, table = sh.split(raw)
    except Exception as exc:
        result.problems.append(Problem(key=item.key, array=path, kind="corrupt",
                                       reason=f"shard index: {_describe(exc)}"))
        return result
    for i, coords in enumerate(sh.inner_coords()):
        if table[i, 0] == EMPTY and table[i, 1] == EMPTY:
            continue
        result.inner += 1
        start, length = int(table[i, 0]), int(table[i, 1])
        try:
            _decode(sh.inner, u8[start : start + length])
        except Exception as exc:
            result.problems.append(Problem(key=item.key, array=path, kind="corrupt",
                                           reason=_describe(exc), inner=coords))
    return result


def verify(
    target: Any,
    *,
    threads: int | None = None,
    progress: ProgressFn | None = None,
) -> VerifyReport:
    """Decode every stored chunk of every array of a store and report what fails.

    Parameters
    ----------
    target : str, os.PathLike or zarr.abc.store.Store
        A local path, a ``file://`` URL, or a zarr-python store (an array or a group).
    threads : int, optional
        Worker threads (default: the engine's setting).
    progress : callable, optional
        Called as ``progress("verify", done, total)`` as objects are checked.

    Returns
    -------
    VerifyReport
        ``report.ok`` is false when any object is corrupt or unreadable.

    Raises
    ------
    NodeNotFoundError
        If there is no array or group at the target's root.
    """
    handle = open_handle(target, read_only=True)
    store = handle.chunk_store()
    listing = list_store(handle)
    nodes = node_paths(listing)
    if "" not in nodes:
        read_node(store, "")  # raises NodeNotFoundError naming the store
    report = VerifyReport(target=handle.name)
    settings = get_settings()
    report.stale_temporary_files = sorted(k for k in listing.sizes if k.endswith(TEMP_SUFFIX))
    items: list[_Item] = []
    found = read_listed_nodes(store, nodes, listing)
    for path, node in zip(nodes, found, strict=True):
        meta_key = f"{path}/" if path else ""
        if isinstance(node, UnsupportedError):
            report.warnings.append(f"array '{path}' not checked: {node}")
            continue
        if isinstance(node, CuzarrError):
            report.problems.append(
                Problem(key=meta_key + "(metadata)", array=path, kind="metadata",
                        reason=_describe(node))
            )
            continue
        if isinstance(node, GroupSpec):
            continue
        try:
            codec = build_chunk_codec(
                node, max_chunk_nbytes=settings.max_chunk_nbytes, zstd_encoder=settings.zstd_encoder
            )
        except UnsupportedError as exc:
            report.warnings.append(f"array '{path}' not checked: {exc}")
            continue
        except CuzarrError as exc:
            report.problems.append(
                Problem(key=meta_key + "(metadata)", array=path, kind="metadata",
                        reason=_describe(exc))
            )
            continue
        report.arrays += 1
        grid = node.grid_shape
        for key in sorted(node_keys(listing, path, nodes)):
            rel = key[len(meta_key) :]
            if rel in METADATA_NAMES or rel == JOURNAL_NAME or key.endswith(TEMP_SUFFIX):
                continue
            coords = parse_chunk_key(node, rel)
            if coords is None or not all(0 <= c < g for c, g in zip(coords, grid, strict=True)):
                report.warnings.append(
                    f"key '{key}' is not a chunk of array '{path}' (grid {grid})"
                )
                continue
            items.append(_Item(node, codec, key))

    total = len(items)
    done = 0
    lock = threading.Lock()
    if progress is not None:
        progress("verify", 0, total)

    def one(item: _Item) -> _Result:
        nonlocal done
        result = _check(store, item)
        if progress is not None:
            with lock:
                done += 1
                progress("verify", done, total)
        return result

    n_threads = threads if threads is not None else get_settings().n_threads
    for result in parallel_map(one, items, n_threads):
        report.chunks_checked += 1
        report.inner_chunks_checked += result.inner
        report.bytes_checked += result.nbytes
        report.problems.extend(result.problems)
    report.problems.sort(key=lambda p: (p.key, p.inner or ()))
    return report
