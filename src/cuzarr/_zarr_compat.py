"""Every use of zarr-python internals in one place (tested against zarr 3.4.x).

cuzarr parses metadata itself but delegates data-type and fill-value decoding to zarr's dtype
registry so that fill values (NaN payloads, -0.0, base64 bytes, datetimes) mean exactly what
zarr-python says they mean. Anything here may need updating when the pinned zarr range moves.
"""

from __future__ import annotations

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
V2_OBJECT_CODECS = frozenset({"vlen-utf8", "vlen-bytes", "vlen-array", "pickle", "json2", "msgpack2"})


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
    try:
        return zdtype.from_json_scalar(value, zarr_format=zarr_format)
    except (ValueError, TypeError, OverflowError) as exc:
        raise reader.fail("fill_value", f"a fill value for {zdtype}", value) from exc


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


def default_pipeline_from_codecs(codecs: Any) -> Any:
    """zarr's ``BatchedCodecPipeline`` from a codec list."""
    from zarr.core.codec_pipeline import BatchedCodecPipeline

    return BatchedCodecPipeline.from_codecs(codecs)


def as_numpy(buffer: Any) -> Any:
    """The NumPy array behind a zarr ``NDBuffer``, or ``None`` for device buffers."""
    arr = buffer.as_ndarray_like()
    return arr if isinstance(arr, np.ndarray) else None


def store_and_key(byte_getter: Any) -> tuple[Any, str] | None:
    """``(store, key)`` of a zarr ``StorePath``, or ``None`` for other byte getters."""
    from zarr.storage._common import StorePath

    if isinstance(byte_getter, StorePath):
        return byte_getter.store, byte_getter.path
    return None


def write_empty_chunks(chunk_spec: Any) -> bool:
    """The ``write_empty_chunks`` setting a zarr ``ArraySpec`` carries."""
    return bool(chunk_spec.config.write_empty_chunks)
