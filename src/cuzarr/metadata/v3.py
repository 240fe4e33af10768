"""Parse a Zarr v3 ``zarr.json`` array document."""

from __future__ import annotations

from typing import Any

from cuzarr import _zarr_compat as compat
from cuzarr._json import JsonReader, describe
from cuzarr.errors import MetadataError, UnsupportedError
from cuzarr.metadata.spec import ArraySpec, ChunkKeyEncoding, CodecSpec

__all__ = ["parse_codec_list", "parse_v3"]

DOCUMENT = "zarr.json"


def parse_codec_list(reader: JsonReader, field: str) -> tuple[CodecSpec, ...]:
    """Parse a v3 codec list (``codecs``, or a sharding codec's ``codecs``/``index_codecs``).

    Parameters
    ----------
    reader : JsonReader
        Reader of the object holding the list.
    field : str
        Name of the list field.

    Returns
    -------
    tuple of CodecSpec
    """
    items = reader.list_(field)
    if not items:
        raise reader.fail(field, "a non-empty list of codecs", items)
    out: list[CodecSpec] = []
    for i, item in enumerate(items):
        where = f"{field}[{i}]"
        if isinstance(item, str):
            out.append(CodecSpec(name=item))
            continue
        if not isinstance(item, dict):
            raise reader.fail(where, "a codec name or object", item)
        sub = reader.child(where, item)
        name = sub.str_("name")
        config = sub.object_("configuration", {})
        out.append(CodecSpec(name=name, configuration=config))
    return tuple(out)


def _parse_chunk_grid(reader: JsonReader, ndim: int) -> tuple[int, ...]:
    grid = reader.object_("chunk_grid")
    sub = reader.child("chunk_grid", grid)
    name = sub.str_("name")
    if name != "regular":
        raise UnsupportedError(
            f"Array '{reader.path}': chunk grid '{name}' is not supported by cuzarr's engine "
            "(only 'regular')"
        )
    cfg = sub.child("configuration", sub.object_("configuration"))
    chunk_shape = cfg.int_tuple("chunk_shape", minimum=1)
    if len(chunk_shape) != ndim:
        raise cfg.fail("chunk_shape", f"{ndim} dimensions to match 'shape'", list(chunk_shape))
    return chunk_shape


def _parse_key_encoding(reader: JsonReader) -> ChunkKeyEncoding:
    enc = reader.object_("chunk_key_encoding")
    sub = reader.child("chunk_key_encoding", enc)
    name = sub.choice("name", ("default", "v2"))
    cfg = sub.child("configuration", sub.object_("configuration", {}))
    default_sep = "/" if name == "default" else "."
    sep = cfg.choice("separator", ("/", "."), default_sep)
    return ChunkKeyEncoding(kind=name, separator=sep)  # type: ignore[arg-type]


#: The fields of a v3 array document defined by the Zarr v3 specification.
ARRAY_FIELDS = frozenset(
    {
        "zarr_format",
        "node_type",
        "data_type",
        "shape",
        "chunk_grid",
        "chunk_key_encoding",
        "fill_value",
        "codecs",
        "attributes",
        "storage_transformers",
        "dimension_names",
    }
)


def _check_extra_fields(reader: JsonReader) -> None:
    """Refuse extension fields that must be understood.

    The v3 specification lets a document carry extra top-level fields only as objects with
    ``"must_understand": false``; any other extra field changes the meaning of the array in a
    way cuzarr cannot know, so the array cannot be read safely.
    """
    for key, value in reader.obj.items():
        if key in ARRAY_FIELDS:
            continue
        if isinstance(value, dict) and value.get("must_understand") is False:
            continue
        raise UnsupportedError(
            f"Array '{reader.path}': field '{key}' in {reader.document} is an extension that must "
            f"be understood, which cuzarr does not (got {describe(value)}; extensions that may be "
            'ignored are objects with "must_understand": false)'
        )


def parse_v3(document: dict[str, Any], *, path: str) -> ArraySpec:
    """Parse a v3 array document (the decoded JSON of ``zarr.json``).

    Parameters
    ----------
    document : dict
        The JSON object.
    path : str
        The array path inside its store, for keys and messages.

    Returns
    -------
    ArraySpec

    Raises
    ------
    MetadataError
        If a field is missing, has the wrong type or an inconsistent value.
    UnsupportedError
        If the array uses a feature the engine does not implement.
    """
    r = JsonReader(document, DOCUMENT, path)
    fmt = r.raw("zarr_format")
    if fmt != 3:
        raise r.fail("zarr_format", "3", fmt)
    node_type = r.raw("node_type")
    if node_type != "array":
        raise r.fail("node_type", "'array'", node_type)
    shape = r.int_tuple("shape")
    chunk_shape = _parse_chunk_grid(r, len(shape))
    key_encoding = _parse_key_encoding(r)
    codecs = parse_codec_list(r, "codecs")
    data_type_json = r.raw("data_type")
    zdtype = compat.data_type_from_json(data_type_json, zarr_format=3, reader=r, field="data_type")
    fill_json = r.raw("fill_value")
    fill_value = compat.fill_value_from_json(zdtype, fill_json, zarr_format=3, reader=r)
    storage_transformers = r.list_("storage_transformers", [])
    if storage_transformers:
        raise UnsupportedError(
            f"Array '{path}': storage transformers are not supported by cuzarr's engine"
        )
    dim_names_raw = r.raw("dimension_names", None)
    dimension_names: tuple[str | None, ...] | None = None
    if dim_names_raw is not None:
        if not isinstance(dim_names_raw, list) or any(
            n is not None and not isinstance(n, str) for n in dim_names_raw
        ):
            raise r.fail("dimension_names", "a list of str or null", dim_names_raw)
        if len(dim_names_raw) != len(shape):
            raise r.fail("dimension_names", f"{len(shape)} names to match 'shape'", dim_names_raw)
        dimension_names = tuple(dim_names_raw)
    attributes = r.object_("attributes", {})
    _check_extra_fields(r)
    try:
        dtype = zdtype.to_native_dtype()
    except Exception as exc:  # pragma: no cover - zarr validated it already
        raise MetadataError(
            f"Failed to parse 'data_type' in {DOCUMENT} of '{path}': {exc}"
        ) from exc
    return ArraySpec(
        path=path,
        zarr_format=3,
        shape=shape,
        dtype=dtype,
        fill_value=fill_value,
        data_type=zdtype,
        chunk_shape=chunk_shape,
        chunk_key_encoding=key_encoding,
        codecs=codecs,
        order="C",
        dimension_names=dimension_names,
        attributes=attributes,
    )
