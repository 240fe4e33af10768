"""Parse a Zarr v2 ``.zarray`` document (and its ``.zattrs``)."""

from __future__ import annotations

from typing import Any

from cuzarr import _zarr_compat as compat
from cuzarr._json import JsonReader
from cuzarr.metadata.spec import ArraySpec, ChunkKeyEncoding, CodecSpec

__all__ = ["parse_v2"]

DOCUMENT = ".zarray"


def _numcodec(reader: JsonReader, field: str, value: object) -> CodecSpec:
    if not isinstance(value, dict):
        raise reader.fail(field, "a numcodecs configuration object", value)
    sub = reader.child(field, value)
    codec_id = sub.str_("id")
    config = {k: v for k, v in value.items() if k != "id"}
    return CodecSpec(name=codec_id, configuration=config)


def parse_v2(
    document: dict[str, Any], *, path: str, attributes: dict[str, Any] | None = None
) -> ArraySpec:
    """Parse a v2 array document (the decoded JSON of ``.zarray``).

    Parameters
    ----------
    document : dict
        The JSON object.
    path : str
        Array path inside its store.
    attributes : dict, optional
        The decoded ``.zattrs``.

    Returns
    -------
    ArraySpec

    Raises
    ------
    MetadataError
        If a field is missing, has the wrong type or an inconsistent value.
    """
    r = JsonReader(document, DOCUMENT, path)
    fmt = r.raw("zarr_format")
    if fmt != 2:
        raise r.fail("zarr_format", "2", fmt)
    shape = r.int_tuple("shape")
    chunks = r.int_tuple("chunks", minimum=1)
    if len(chunks) != len(shape):
        raise r.fail("chunks", f"{len(shape)} dimensions to match 'shape'", list(chunks))
    order = r.choice("order", ("C", "F"), "C")
    sep = r.choice("dimension_separator", (".", "/"), ".")
    compressor_raw = r.raw("compressor", None)
    compressor = None if compressor_raw is None else _numcodec(r, "compressor", compressor_raw)
    filters_raw = r.raw("filters", None)
    filters: tuple[CodecSpec, ...] = ()
    if filters_raw is not None:
        if not isinstance(filters_raw, list):
            raise r.fail("filters", "a list or null", filters_raw)
        filters = tuple(_numcodec(r, f"filters[{i}]", f) for i, f in enumerate(filters_raw))
    dtype_json = r.raw("dtype")
    object_codec = next(
        (f.name for f in filters if f.name in compat.V2_OBJECT_CODECS), None
    )
    zdtype = compat.data_type_from_json(
        {"name": dtype_json, "object_codec_id": object_codec},
        zarr_format=2,
        reader=r,
        field="dtype",
    )
    fill_value = compat.fill_value_from_json(
        zdtype, r.raw("fill_value", None), zarr_format=2, reader=r
    )
    return ArraySpec(
        path=path,
        zarr_format=2,
        shape=shape,
        dtype=zdtype.to_native_dtype(),
        fill_value=fill_value,
        data_type=zdtype,
        chunk_shape=chunks,
        chunk_key_encoding=ChunkKeyEncoding(kind="v2", separator=sep),  # type: ignore[arg-type]
        filters=filters,
        compressor=compressor,
        order=order,  # type: ignore[arg-type]
        attributes=dict(attributes or {}),
    )
