"""Every use of zarr-python internals in one place (tested against zarr 3.4.x).

cuzarr parses metadata itself but delegates data-type and fill-value decoding to zarr's dtype
registry so that fill values (NaN payloads, -0.0, base64 bytes, datetimes) mean exactly what
zarr-python says they mean. Anything here may need updating when the pinned zarr range moves.
"""

from __future__ import annotations

import base64
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from cuzarr.errors import MetadataError, UnsupportedError

if TYPE_CHECKING:
    from cuzarr._json import JsonReader

__all__ = [
    "V2_OBJECT_CODECS",
    "data_type_from_json",
    "default_scalar",
    "fill_value_from_json",
    "metadata_document",
]

#: numcodecs ids zarr treats as object codecs (``zarr.core.dtype.common.OBJECT_CODEC_IDS``).
V2_OBJECT_CODECS = frozenset(
    {"vlen-utf8", "vlen-bytes", "vlen-array", "pickle", "json2", "msgpack2"}
)


def data_type_from_json(value: Any, *, zarr_format: int, reader: JsonReader, field: str) -> Any:
    """Resolve a data type through zarr's registry, naming the field on failure."""
    from zarr.core.dtype import get_data_type_from_json

    try:
        return get_data_type_from_json(value, zarr_format=zarr_format)  # type: ignore[arg-type]
    except (ValueError, TypeError, KeyError) as exc:
        shown = value["name"] if zarr_format == 2 and isinstance(value, dict) else value
        raise reader.fail(field, "a Zarr data type", shown) from exc


def fill_value_from_json(zdtype: Any, value: Any, *, zarr_format: int, reader: JsonReader) -> Any:
    """Decode a JSON fill value for ``zdtype``; ``None`` stays ``None`` for v2."""
    if value is None:
        if zarr_format == 2:
            return None
        raise reader.fail("fill_value", f"a fill value for {zdtype}", value)
    expected = f"a fill value for {zdtype}"
    native = zdtype.to_native_dtype()
    if zarr_format == 3 and native.kind in "fc":
        exact = _float_fill_from_hex(value, native)
        if exact is not None:
            return exact
    if isinstance(value, str) and _is_base64_type(zdtype, native):
        try:
            base64.b64decode(value.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError) as exc:
            raise reader.fail("fill_value", f"{expected} (base64)", value) from exc
    try:
        fill = zdtype.from_json_scalar(value, zarr_format=zarr_format)
    except (ValueError, TypeError, OverflowError) as exc:
        raise reader.fail("fill_value", expected, value) from exc
    too_long = np.asarray(fill).dtype.itemsize > native.itemsize
    if native.kind in "SUV" and native.itemsize and too_long:
        raise reader.fail("fill_value", f"{expected} of at most {native.itemsize} bytes", value)
    if native.kind == "V" and np.asarray(fill).dtype.itemsize != native.itemsize:
        raise reader.fail("fill_value", f"{expected} of exactly {native.itemsize} bytes", value)
    return fill


def _is_base64_type(zdtype: Any, native: np.dtype[Any]) -> bool:
    """Whether zarr encodes this data type's fill values as base64 strings."""
    from zarr.core.dtype import VariableLengthBytes

    return native.kind in "SV" or isinstance(zdtype, VariableLengthBytes)


def _hex_bits(value: object, nbytes: int) -> bytes | None:
    """The big-endian bytes of a ``"0x..."`` string of exactly ``nbytes`` bytes, else ``None``."""
    if not isinstance(value, str) or not value.startswith("0x") or len(value) != 2 + 2 * nbytes:
        return None
    try:
        return bytes.fromhex(value[2:])
    except ValueError:
        return None


def _float_fill_from_hex(value: Any, native: np.dtype[Any]) -> Any:
    """Decode v3 hex float fill values bit for bit, or return ``None`` to let zarr decode.

    zarr decodes ``"0x..."`` through a Python float, which quiets signalling NaNs and drops
    float16 NaN payloads; the specification says the string is the value's exact bytes.
    """
    if native.kind == "f":
        bits = _hex_bits(value, native.itemsize)
        if bits is None:
            return None
        return np.frombuffer(bits, dtype=native.newbyteorder(">"))[0].astype(native)
    if not isinstance(value, list) or len(value) != 2:
        return None
    part = np.dtype(f"f{native.itemsize // 2}").newbyteorder(native.byteorder)
    parts = [_hex_bits(v, part.itemsize) for v in value]
    if all(p is None for p in parts):
        return None
    out = np.zeros(2, dtype=part)
    for i, (bits, v) in enumerate(zip(parts, value, strict=True)):
        if bits is not None:
            out[i] = np.frombuffer(bits, dtype=part.newbyteorder(">"))[0]
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[i] = v
        elif v in ("NaN", "Infinity", "-Infinity"):
            out[i] = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}[v]
        else:
            return None
    return out.view(native)[0]


def default_scalar(zdtype: Any) -> Any:
    """The value zarr uses where a v2 array has no fill value."""
    return zdtype.default_scalar()


def metadata_document(metadata: Any) -> tuple[int, dict[str, Any]]:
    """Return ``(zarr_format, JSON document)`` for zarr-python's parsed array metadata."""
    from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata

    if isinstance(metadata, ArrayV3Metadata):
        doc = metadata.to_dict()
        return 3, _jsonable(doc)
    if isinstance(metadata, ArrayV2Metadata):
        doc = metadata.to_dict()
        doc.pop("attributes", None)
        return 2, _jsonable(doc)
    raise UnsupportedError(f"unknown metadata type {type(metadata).__name__}")


def _jsonable(value: Any) -> Any:
    """Turn tuples into lists and numpy scalars into Python values, recursively."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "to_dict"):
        return _jsonable(value.to_dict())
    return value


def fill_for_missing(fill_value: Any, zdtype: Any) -> Any:
    """The value that a missing chunk reads as (zarr's ``fill_value_or_default``)."""
    return default_scalar(zdtype) if fill_value is None else fill_value


def check_metadata_error(exc: Exception, document: str, path: str) -> MetadataError:
    """Wrap an error from zarr's metadata parsing so it names the document and path."""
    return MetadataError(f"Failed to parse {document} of '{path}': {exc}")


def all_equal(chunk: Any, fill: Any) -> bool:
    """zarr's empty-chunk rule: every element equals ``fill`` (NaN equal, -0.0 != 0.0)."""
    from zarr.core.buffer.cpu import NDBuffer

    return bool(NDBuffer(chunk).all_equal(fill))


def default_pipeline(metadata: Any) -> Any:
    """zarr's own ``BatchedCodecPipeline`` for an array, built as ``create_codec_pipeline`` does.

    Mirrors ``zarr.core.array.create_codec_pipeline`` (zarr 3.4) without consulting the
    configured pipeline class, which is cuzarr's own.
    """
    from zarr.codecs._v2 import V2Codec
    from zarr.core.array_spec import ArrayConfig, ArraySpec
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.codec_pipeline import BatchedCodecPipeline
    from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata
    from zarr.core.metadata.v3 import RegularChunkGridMetadata

    if isinstance(metadata, ArrayV3Metadata):
        pipeline = BatchedCodecPipeline.from_codecs(metadata.codecs)
        if isinstance(metadata.chunk_grid, RegularChunkGridMetadata):
            chunk_shape = metadata.chunk_grid.chunk_shape
        else:
            chunk_shape = (1,) * len(metadata.shape)
        spec = ArraySpec(
            shape=chunk_shape,
            dtype=metadata.data_type,
            fill_value=metadata.fill_value,
            config=ArrayConfig.from_dict({}),
            prototype=default_buffer_prototype(),
        )
        return pipeline.evolve_from_array_spec(spec)
    if isinstance(metadata, ArrayV2Metadata):
        v2_codec = V2Codec(filters=metadata.filters, compressor=metadata.compressor)
        pipeline = BatchedCodecPipeline.from_codecs([v2_codec])
        spec = ArraySpec(
            shape=metadata.chunks,
            dtype=metadata.dtype,
            fill_value=metadata.fill_value,
            config=ArrayConfig.from_dict({"order": metadata.order}),
            prototype=default_buffer_prototype(),
        )
        return pipeline.evolve_from_array_spec(spec)
    raise UnsupportedError(f"unknown metadata type {type(metadata).__name__}")


class InShardBytes:
    """One of zarr's in-shard byte getters (or setters), its prototype checked as zarr means it.

    zarr's sharding codec hands the inner chunks of a shard to an inner pipeline through
    ``_ShardingByteGetter``/``_ShardingByteSetter``, which refuse any buffer prototype but the
    configured default; yet for a nested shard's index it asks them with its own fixed CPU
    prototype (``numpy_buffer_prototype()``), which differs from the default once zarr's
    ``ndbuffer`` is another class (cuzarr's ``AlignedNDBuffer``): zarr 3.4's nested shards then
    fail with "Non-default buffer prototypes are not supported within shards". Byte getters
    return ``Buffer`` objects only, so a prototype whose ``buffer`` class is the default's asks
    for exactly what the default does: this wrapper passes the default instead, and any other
    prototype unchanged (refused as zarr refuses it). Everything else is the wrapped getter's.
    """

    __slots__ = ("_default", "_inner")

    def __init__(self, inner: Any, default: Any) -> None:
        self._inner = inner
        self._default = default

    def _prototype(self, prototype: Any) -> Any:
        if prototype is not None and prototype.buffer is self._default.buffer:
            return self._default
        return prototype

    async def get(self, prototype: Any, byte_range: Any = None) -> Any:
        """The wrapped getter's ``get``."""
        return await self._inner.get(self._prototype(prototype), byte_range)

    def get_sync(self, prototype: Any = None, byte_range: Any = None) -> Any:
        """The wrapped getter's ``get_sync``."""
        return self._inner.get_sync(self._prototype(prototype), byte_range)

    async def set(self, value: Any, byte_range: Any = None) -> None:
        """The wrapped setter's ``set``."""
        await self._inner.set(value, byte_range)

    def set_sync(self, value: Any) -> None:
        """The wrapped setter's ``set_sync``."""
        self._inner.set_sync(value)

    async def delete(self) -> None:
        """The wrapped setter's ``delete``."""
        await self._inner.delete()

    def delete_sync(self) -> None:
        """The wrapped setter's ``delete_sync``."""
        self._inner.delete_sync()

    async def set_if_not_exists(self, default: Any) -> None:
        """The wrapped setter's ``set_if_not_exists``."""
        await self._inner.set_if_not_exists(default)


def in_shard_batch(batch: list[Any]) -> list[Any]:
    """A pipeline batch whose zarr in-shard byte getters take zarr's own CPU prototype.

    The batch as it is unless its getters are zarr's in-shard ones (an inner pipeline of
    zarr's sharding codec) while zarr's configured buffers differ from its fixed CPU
    prototype; then each getter is wrapped in :class:`InShardBytes`.
    """
    from zarr.codecs.sharding import _ShardingByteGetter
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.buffer.cpu import numpy_buffer_prototype

    if not batch or not isinstance(batch[0][0], _ShardingByteGetter):
        return batch
    default = default_buffer_prototype()
    if default == numpy_buffer_prototype():
        return batch
    return [(InShardBytes(item[0], default), *item[1:]) for item in batch]


def default_pipeline_from_codecs(codecs: Any) -> Any:
    """zarr's ``BatchedCodecPipeline`` from a codec list."""
    from zarr.core.codec_pipeline import BatchedCodecPipeline

    return BatchedCodecPipeline.from_codecs(codecs)


def as_numpy(buffer: Any) -> Any:
    """The NumPy array behind a zarr ``NDBuffer``, or ``None`` for device buffers."""
    arr = buffer.as_ndarray_like()
    return arr if isinstance(arr, np.ndarray) else None


def as_device_array(buffer: Any) -> Any:
    """The CuPy array behind a zarr GPU ``NDBuffer``, or ``None``.

    CuPy is looked up in ``sys.modules`` only: a CuPy array exists only if CuPy was imported.
    """
    cupy = sys.modules.get("cupy")
    arr = buffer.as_ndarray_like()
    return arr if cupy is not None and isinstance(arr, cupy.ndarray) else None


def store_and_key(byte_getter: Any) -> tuple[Any, str] | None:
    """``(store, key)`` of a zarr ``StorePath``, or ``None`` for other byte getters."""
    from zarr.storage._common import StorePath

    if isinstance(byte_getter, StorePath):
        return byte_getter.store, byte_getter.path
    return None


def write_empty_chunks(chunk_spec: Any) -> bool:
    """The ``write_empty_chunks`` setting a zarr ``ArraySpec`` carries."""
    return bool(chunk_spec.config.write_empty_chunks)


def sharding_coalescing(chunk_spec: Any) -> tuple[int, int]:
    """``(max_gap_bytes, max_bytes)``: zarr's ``sharding_coalesce_*`` setting of an array.

    Global (``array.sharding_coalesce_max_gap_bytes`` / ``..._max_bytes``) or per array
    (``ArrayConfig``): a zarr ``ArraySpec`` carries the resolved values.
    """
    config = chunk_spec.config
    return int(config.sharding_coalesce_max_gap_bytes), int(config.sharding_coalesce_max_bytes)


# ---------------------------------------------------------------------- explicit API


def chunk_grid(shape: tuple[int, ...], chunk_shape: tuple[int, ...]) -> Any:
    """zarr's regular ``ChunkGrid`` for an array shape and chunk (or shard) shape."""
    from zarr.core.chunk_grids import ChunkGrid

    return ChunkGrid.from_sizes(shape, chunk_shape)


def orthogonal_indexer(selection: Any, shape: tuple[int, ...], grid: Any) -> Any:
    """zarr's ``OrthogonalIndexer`` (iterable of chunk projections, ``shape``, ``drop_axes``)."""
    from zarr.core.indexing import OrthogonalIndexer, ensure_tuple, replace_lists

    return OrthogonalIndexer(replace_lists(ensure_tuple(selection)), shape, grid)


def vectorized_indexer(selection: Any, shape: tuple[int, ...], grid: Any) -> Any:
    """zarr's ``CoordinateIndexer`` or ``MaskIndexer``, chosen as ``Array.vindex`` does."""
    from zarr.core.indexing import (
        CoordinateIndexer,
        MaskIndexer,
        ensure_tuple,
        is_coordinate_selection,
        is_mask_selection,
        replace_lists,
    )
    from zarr.errors import VindexInvalidSelectionError

    selection = replace_lists(ensure_tuple(selection))
    if is_coordinate_selection(selection, shape):
        return CoordinateIndexer(selection, shape, grid)
    if is_mask_selection(selection, shape):
        return MaskIndexer(selection, shape, grid)
    raise VindexInvalidSelectionError(
        "unsupported selection type for vectorized indexing; only coordinate selection "
        "(tuple of integer arrays) and mask selection (single Boolean array) are supported; "
        f"got {selection!r}"
    )


def is_coordinate_indexer(indexer: Any) -> bool:
    """Whether a zarr indexer is a ``CoordinateIndexer`` (its output is reshaped)."""
    from zarr.core.indexing import CoordinateIndexer

    return isinstance(indexer, CoordinateIndexer)


def block_indexer(selection: Any, shape: tuple[int, ...], grid: Any) -> Any:
    """zarr's ``BlockIndexer``."""
    from zarr.core.indexing import BlockIndexer

    return BlockIndexer(selection, shape, grid)


def selection_kind(selection: Any, ndim: int) -> str:
    """How ``zarr.Array.__getitem__`` dispatches a selection: vindex, oindex or basic."""
    from zarr.core.indexing import is_pure_fancy_indexing, is_pure_orthogonal_indexing

    if is_pure_fancy_indexing(selection, ndim):
        return "vindex"
    if is_pure_orthogonal_indexing(selection, ndim):
        return "oindex"
    return "basic"


def run_sync(coro: Any) -> Any:
    """Run a zarr store coroutine on zarr's event loop from synchronous code."""
    from zarr.core.sync import sync

    return sync(coro)


def list_dir(store: Any, prefix: str) -> list[str]:
    """Names directly below ``prefix`` in a zarr ``Store``."""

    async def collect() -> list[str]:
        return [name async for name in store.list_dir(prefix)]

    return list(run_sync(collect()))


def list_sizes(store: Any, prefix: str) -> list[tuple[str, int]]:
    """Every key below ``prefix`` in a zarr ``Store`` with its size in bytes."""

    async def collect() -> list[tuple[str, int]]:
        keys = [key async for key in store.list_prefix(prefix)]
        return [(key, int(await store.getsize(key))) for key in keys]

    return list(run_sync(collect()))


def bind_pipeline(array: Any, pipeline: Any) -> Any:
    """Make a ``zarr.Array`` read and write through ``pipeline`` (replaces its codec pipeline)."""
    object.__setattr__(array.async_array, "codec_pipeline", pipeline)
    return array


def is_zarr_store(obj: Any) -> bool:
    """Whether ``obj`` is a zarr-python ``Store``."""
    from zarr.abc.store import Store

    return isinstance(obj, Store)


def zarr_io_loop() -> Any:
    """zarr-python's event loop (``zarr.core.sync``), started if it is not yet."""
    from zarr.core.sync import _get_loop

    return _get_loop()


def is_zarr_io_loop(loop: Any) -> bool:
    """Whether ``loop`` is zarr-python's own event loop (its synchronous API's; not started)."""
    from zarr.core import sync

    return sync.loop[0] is loop


def object_store(obstore_store: Any, *, read_only: bool) -> Any:
    """A zarr ``ObjectStore`` over an obstore store."""
    from zarr.storage import ObjectStore

    return ObjectStore(obstore_store, read_only=read_only)

