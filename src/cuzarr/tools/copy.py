"""``cuzarr copy``: copy an array or a group, re-encoding, rechunking, sharding or converting.

The destination's layout is chosen first (every option left out keeps the source's), its
metadata is written by zarr-python, then the data moves in blocks of whole destination
objects (shards, or chunks), a bounded number of bytes at a time, each block read and written
through cuzarr's engine (its threads decode and encode the chunks of a block in parallel) and
read back to compare with the source unless ``verify=False``.

A progress journal (``.cuzarr-copy.json`` at the destination's root, replaced atomically
after every block) lists the nodes created and the blocks done; ``resume=True`` continues an
interrupted copy from it, skipping finished blocks. It is deleted when the copy completes.

>>> copy("v2.zarr", "v3.zarr", CopyOptions(zarr_format=3, codec="zstd:5"))  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr.api import open_node
from cuzarr.array import Array
from cuzarr.config import Settings, get_settings
from cuzarr.errors import CuzarrError, MetadataError, NodeNotFoundError
from cuzarr.metadata.load import GroupSpec, read_node
from cuzarr.metadata.spec import ArraySpec, CodecSpec
from cuzarr.stores.targets import StoreHandle
from cuzarr.tools._common import (
    JOURNAL_NAME,
    ProgressFn,
    list_store,
    node_paths,
    open_handle,
    read_listed_nodes,
)
from cuzarr.tools.copy_options import (
    BLOSC_CNAMES,
    BLOSC_SHUFFLES,
    CodecChoice,
    CopyError,
    CopyOptions,
    CopyReport,
    parse_codec,
    parse_shape,
)

__all__ = [
    "FAIL_AFTER_ENV",
    "CodecChoice",
    "CopyError",
    "CopyOptions",
    "CopyReport",
    "copy",
    "parse_codec",
    "parse_shape",
]

#: Test hook: exit the process abruptly (status 75) after this many blocks were written.
FAIL_AFTER_ENV = "CUZARR_COPY_FAIL_AFTER"
_JOURNAL_SCHEMA = "cuzarr.copy-journal/1"




# ---------------------------------------------------------------------------------- options














# ---------------------------------------------------------------------------------- journal


class _Journal:
    """The progress journal at the destination's root, rewritten atomically on each change."""

    def __init__(self, handle: StoreHandle, doc: dict[str, Any]) -> None:
        self._store = handle.chunk_store()
        self.doc = doc

    @staticmethod
    def load(handle: StoreHandle) -> dict[str, Any] | None:
        got = handle.chunk_store().get(JOURNAL_NAME)
        if got is None:
            return None
        try:
            doc = json.loads(bytes(memoryview(got.data)))
        except ValueError as exc:
            raise CopyError(f"the copy journal {JOURNAL_NAME} in {handle.name} is unreadable: "
                            f"{exc}") from exc
        if not isinstance(doc, dict) or doc.get("schema") != _JOURNAL_SCHEMA:
            raise CopyError(f"{JOURNAL_NAME} in {handle.name} is not a cuzarr copy journal")
        return doc

    def node(self, path: str) -> dict[str, Any]:
        nodes: dict[str, Any] = self.doc["nodes"]
        entry: dict[str, Any] = nodes.setdefault(path, {"created": False})
        return entry

    def save(self) -> None:
        text = json.dumps(self.doc, separators=(",", ":"))
        self._store.put(JOURNAL_NAME, np.frombuffer(text.encode("utf-8"), np.uint8))

    def delete(self) -> None:
        self._store.delete(JOURNAL_NAME)


# ---------------------------------------------------------------------------------- layout


def _source_codec(spec: ArraySpec) -> CodecChoice | None:
    """The source's compressor as a :class:`CodecChoice`, when it is one of those we name."""
    comp: CodecSpec | None
    if spec.zarr_format == 2:
        comp = spec.compressor
    else:
        chain = list(spec.codecs)
        if chain and chain[0].name == "sharding_indexed":
            inner = chain[0].configuration.get("codecs", [])
            chain = [
                CodecSpec(name=str(c.get("name")), configuration=dict(c.get("configuration", {})))
                for c in inner
                if isinstance(c, dict)
            ]
        bytes_codecs = [c for c in chain if c.name in ("zstd", "gzip", "blosc")]
        comp = bytes_codecs[0] if bytes_codecs else None
        if comp is None and all(c.name in ("bytes", "transpose") for c in chain):
            return CodecChoice("none")
    if comp is None:
        return CodecChoice("none") if spec.zarr_format == 2 else None
    cfg = comp.configuration
    level = cfg.get("level", cfg.get("clevel"))
    level = level if isinstance(level, int) else None
    if comp.name == "zstd":
        return CodecChoice("zstd", level)
    if comp.name == "gzip":
        return CodecChoice("gzip", level)
    if comp.name == "blosc":
        cname = cfg.get("cname", "zstd")
        shuffle: Any = cfg.get("shuffle", "shuffle")
        if isinstance(shuffle, int):
            shuffle = BLOSC_SHUFFLES[shuffle] if 0 <= shuffle < 3 else "shuffle"
        if cname in BLOSC_CNAMES and shuffle in BLOSC_SHUFFLES:
            return CodecChoice("blosc", level, str(cname), str(shuffle))
    return None


def _create_args(
    spec: ArraySpec, src_zarr: Any, options: CopyOptions
) -> dict[str, Any]:
    """``zarr.create_array`` arguments for the destination of one array."""
    fmt = options.zarr_format or spec.zarr_format
    same = fmt == spec.zarr_format
    ndim = len(spec.shape)
    where = f"array '{spec.path or '/'}'"
    chunks = tuple(src_zarr.chunks) if options.chunks is None else options.chunks
    if len(chunks) != ndim:
        raise CopyError(f"--chunks {options.chunks} has {len(chunks)} dimensions, {where} has "
                        f"{ndim}")
    shards: Any
    if options.shards == "none" or fmt == 2:
        shards = None
    elif options.shards == "keep":
        shards = src_zarr.shards
    else:
        shards = options.shards
    if shards is not None:
        if len(shards) != ndim:
            raise CopyError(f"--shards {tuple(shards)} has {len(shards)} dimensions, {where} "
                            f"has {ndim}")
        bad = [(s, c) for s, c in zip(shards, chunks, strict=True) if s % c]
        if bad:
            raise CopyError(f"shard shape {tuple(shards)} is not a multiple of the chunk shape "
                            f"{chunks} for {where}")
    args: dict[str, Any] = {
        "shape": spec.shape,
        "dtype": src_zarr.metadata.data_type if same else spec.dtype,
        "chunks": chunks,
        "shards": shards,
        "zarr_format": fmt,
        "attributes": dict(spec.attributes),
    }
    if spec.fill_value is not None:
        args["fill_value"] = spec.fill_value
    if options.codec is not None:
        args["compressors"] = parse_codec(options.codec).compressors(fmt, spec.dtype.itemsize)
        args["filters"] = src_zarr.filters if same else "auto"
    elif same:
        args["compressors"] = src_zarr.compressors
        args["filters"] = src_zarr.filters
    else:
        choice = _source_codec(spec)
        args["compressors"] = (
            "auto" if choice is None else choice.compressors(fmt, spec.dtype.itemsize)
        )
    if same and fmt == 3:
        args["serializer"] = src_zarr.serializer
        args["chunk_key_encoding"] = {
            "name": spec.chunk_key_encoding.kind,
            "configuration": {"separator": spec.chunk_key_encoding.separator},
        }
    if same and fmt == 2:
        args["order"] = spec.order
        args["chunk_key_encoding"] = {
            "name": "v2", "configuration": {"separator": spec.chunk_key_encoding.separator}
        }
    if fmt == 3 and spec.dimension_names is not None:
        args["dimension_names"] = spec.dimension_names
    if fmt == 2 and spec.dimension_names is not None:
        args["attributes"].setdefault("_ARRAY_DIMENSIONS", list(spec.dimension_names))
    return args


def _block_shape(
    shape: tuple[int, ...], unit: tuple[int, ...], itemsize: int, max_bytes: int
) -> tuple[int, ...]:
    """Whole destination objects per block, grown along trailing axes up to ``max_bytes``."""
    block = list(unit)
    for ax in reversed(range(len(shape))):
        cap = -(-shape[ax] // unit[ax]) * unit[ax]
        while block[ax] < cap:
            grown = min(block[ax] * 2, cap)
            if math.prod([*block[:ax], grown, *block[ax + 1 :]]) * itemsize > max_bytes:
                break
            block[ax] = grown
        if block[ax] < cap:
            break
    return tuple(block)


def _same(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> bool:
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    if a.dtype.kind in "mM":
        return bool(np.array_equal(a.view(np.int64), b.view(np.int64)))
    return bool(np.array_equal(a, b))


# ---------------------------------------------------------------------------------- copy


def _prepare_destination(
    src: StoreHandle, dst: StoreHandle, *, resume: bool, overwrite: bool, options: CopyOptions
) -> tuple[dict[str, Any], bool]:
    """Check the destination; return the journal document and whether it is resumed."""
    if src.root is not None and dst.root is not None:
        a, b = os.path.realpath(src.root), os.path.realpath(dst.root)
        if a == b or b.startswith(a + os.sep) or a.startswith(b + os.sep):
            raise CopyError(f"source {src.name} and destination {dst.name} overlap")
    fresh = {
        "schema": _JOURNAL_SCHEMA,
        "source": src.name,
        "options": options.to_json(),
        "nodes": {},
    }
    journal = _Journal.load(dst)
    exists = dst.has_node("")
    if resume and journal is not None:
        if journal.get("source") != src.name or journal.get("options") != options.to_json():
            raise CopyError(
                f"the interrupted copy into {dst.name} was from {journal.get('source')} with "
                f"options {json.dumps(journal.get('options'))}; resume it with the same source "
                "and options"
            )
        return journal, True
    if resume and exists:
        raise CopyError(
            f"nothing to resume: {dst.name} has no copy journal ({JOURNAL_NAME}); the copy "
            "finished, or the destination was not written by cuzarr copy"
        )
    if journal is not None or exists:
        if not overwrite:
            if journal is not None:
                raise CopyError(
                    f"destination {dst.name} holds an interrupted copy: use --resume to "
                    "continue it, or --overwrite to replace it"
                )
            raise CopyError(
                f"destination {dst.name} already holds a Zarr node: use --overwrite to "
                "replace it"
            )
        if dst.root is None:
            raise CopyError("--overwrite is supported for local destinations only")
        shutil.rmtree(dst.root)
    return fresh, False


def copy(
    source: Any,
    destination: Any,
    options: CopyOptions | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    verify: bool = True,
    max_block_bytes: int = 128 * 1024 * 1024,
    settings: Settings | None = None,
    progress: ProgressFn | None = None,
) -> CopyReport:
    """Copy the array or group (recursively, attributes included) at ``source``.

    Parameters
    ----------
    source, destination : str, os.PathLike or zarr.abc.store.Store
        Local paths, ``file://`` URLs, or zarr-python stores.
    options : CopyOptions, optional
        The destination's codec, chunks, shards and format (default: the source's).
    resume : bool, default False
        Continue an interrupted copy from the destination's journal.
    overwrite : bool, default False
        Replace an existing local destination.
    verify : bool, default True
        Read every written block back and compare it with the source.
    max_block_bytes : int, default 128 MiB
        Decoded bytes per block (at least one destination shard or chunk). Memory use is
        about twice this with ``verify``.
    settings : Settings, optional
        Engine settings (threads...); ``cuzarr.get_settings()`` by default.
    progress : callable, optional
        Called as ``progress("copy", bytes_done, bytes_total)``.

    Returns
    -------
    CopyReport

    Raises
    ------
    CopyError
        If the destination exists (without ``resume`` or ``overwrite``), the options do not
        fit an array, or a block read back differs from the source.
    NodeNotFoundError
        If there is no array or group at ``source``.
    """
    import zarr

    options = options or CopyOptions()
    settings = settings or get_settings()
    src = open_handle(source, read_only=True)
    dst = open_handle(destination, read_only=False)
    src_store = src.chunk_store()
    listing = list_store(src)
    nodes = node_paths(listing)
    if "" not in nodes:
        read_node(src_store, "")  # raises NodeNotFoundError naming the store
        raise NodeNotFoundError(f"No Zarr array or group at the root of {src.name}")
    specs: list[ArraySpec | GroupSpec] = []
    for node in read_listed_nodes(src_store, nodes, listing):
        if isinstance(node, CuzarrError):
            raise node
        specs.append(node)
    doc, resumed = _prepare_destination(
        src, dst, resume=resume, overwrite=overwrite, options=options
    )
    if dst.root is not None:
        os.makedirs(dst.root, exist_ok=True)
    journal = _Journal(dst, doc)
    journal.save()
    report = CopyReport(source=src.name, destination=dst.name, verified=verify, resumed=resumed)
    total_bytes = sum(
        math.prod(s.shape) * s.dtype.itemsize for s in specs if isinstance(s, ArraySpec)
    )
    done_bytes = 0
    fail_after = int(os.environ.get(FAIL_AFTER_ENV, "0") or 0)
    if progress is not None:
        progress("copy", 0, total_bytes)
    for spec in specs:
        entry = journal.node(spec.path)
        report.nodes.append(spec.path)
        if isinstance(spec, GroupSpec):
            report.groups += 1
            if not entry["created"]:
                zarr.create_group(
                    dst.zarr_store(),
                    path=spec.path or None,
                    zarr_format=options.zarr_format or spec.zarr_format,  # type: ignore[arg-type]
                    attributes=dict(spec.attributes),
                    overwrite=True,
                )
                entry["created"] = True
                journal.save()
            continue
        report.arrays += 1
        src_arr = open_node(src, spec.path, settings=settings)
        assert isinstance(src_arr, Array)
        if not entry["created"]:
            src_zarr = zarr.open_array(
                src.zarr_store(), path=spec.path, mode="r", zarr_format=spec.zarr_format
            )
            args = _create_args(spec, src_zarr, options)
            try:
                zarr.create_array(
                    dst.zarr_store(), name=spec.path or None, overwrite=True, **args
                )
            except (ValueError, TypeError) as exc:
                raise CopyError(
                    f"cannot create array '{spec.path or '/'}' in {dst.name}: {exc}"
                ) from exc
            dst_node = open_node(dst, spec.path, settings=settings)
            if not isinstance(dst_node, Array):  # pragma: no cover - zarr just wrote an array
                raise MetadataError(f"expected an array at '{spec.path}' in {dst.name}")
            unit = dst_node.metadata.chunk_shape
            entry["block_shape"] = list(
                _block_shape(spec.shape, unit, spec.dtype.itemsize, max_block_bytes)
            )
            entry["done"] = []
            entry["created"] = True
            journal.save()
        dst_arr = open_node(dst, spec.path, settings=settings)
        assert isinstance(dst_arr, Array)
        block = tuple(int(b) for b in entry["block_shape"])
        grid = [-(-n // b) if b else 0 for n, b in zip(spec.shape, block, strict=True)]
        done = set(entry["done"])
        for flat, index in enumerate(itertools.product(*map(range, grid))):
            sel = tuple(
                slice(i * b, min((i + 1) * b, n))
                for i, b, n in zip(index, block, spec.shape, strict=True)
            )
            nbytes = math.prod(s.stop - s.start for s in sel) * spec.dtype.itemsize
            report.blocks_total += 1
            if flat in done:
                report.blocks_skipped += 1
            else:
                data = src_arr.read(sel)
                dst_arr.write(sel, data)
                if verify:
                    back = dst_arr.read(sel)
                    if not _same(np.asarray(data), np.asarray(back)):
                        raise CopyError(
                            f"verification failed: block {sel} of array '{spec.path or '/'}' "
                            f"read back from {dst.name} differs from the source"
                        )
                entry["done"].append(flat)
                journal.save()
                report.blocks_written += 1
                report.bytes_copied += nbytes
                if fail_after and report.blocks_written >= fail_after:
                    os._exit(75)
            done_bytes += nbytes
            if progress is not None:
                progress("copy", done_bytes, total_bytes)
    journal.delete()
    return report
