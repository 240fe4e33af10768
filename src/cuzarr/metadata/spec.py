"""Frozen descriptions of a Zarr array, shared by every layer of the engine.

These types are pure data: no I/O and no GPU imports. They are built by
:mod:`cuzarr.metadata.v3` and :mod:`cuzarr.metadata.v2` from the JSON documents, or from
zarr-python's parsed metadata at the pipeline adapter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

__all__ = ["ArraySpec", "ChunkKeyEncoding", "CodecSpec", "Order"]

Order = Literal["C", "F"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CodecSpec:
    """One codec of a chain as named in metadata.

    Attributes
    ----------
    name : str
        The codec name (v3 ``name``, or the numcodecs ``id`` for v2 filters and compressors).
    configuration : dict
        The codec's configuration, as JSON.
    """

    name: str
    configuration: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the v3 JSON form ``{"name": ..., "configuration": ...}``."""
        if self.configuration:
            return {"name": self.name, "configuration": dict(self.configuration)}
        return {"name": self.name}


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkKeyEncoding:
    """How chunk grid coordinates become store keys.

    Attributes
    ----------
    kind : {"default", "v2"}
        ``default`` writes ``c/1/2``; ``v2`` writes ``1.2`` (``0`` for a 0-d array).
    separator : {"/", "."}
        Separator between coordinates.
    """

    kind: Literal["default", "v2"]
    separator: Literal["/", "."]

    def encode(self, coords: tuple[int, ...]) -> str:
        """Return the key of the chunk at grid position ``coords``, relative to the array."""
        if self.kind == "default":
            return self.separator.join(("c", *map(str, coords)))
        return self.separator.join(map(str, coords)) if coords else "0"


@dataclass(frozen=True, slots=True, kw_only=True)
class ArraySpec:
    """Everything the engine needs to know about one array.

    Attributes
    ----------
    path : str
        The array's path inside its store (``""`` for the root), used in messages and keys.
    zarr_format : {2, 3}
        The Zarr format version.
    shape : tuple of int
        Array shape.
    dtype : numpy.dtype
        The in-memory dtype. For v2 it carries the stored byte order; for v3 it is
        native-endian and the ``bytes`` codec carries the stored byte order.
    fill_value : Any
        The fill value as a NumPy scalar, or ``None`` for a v2 array without one.
    data_type : Any
        zarr-python's data-type object (``ZDType``), kept for exact fill-value semantics.
    chunk_shape : tuple of int
        The regular chunk grid's chunk shape (for sharded arrays: the shard shape).
    chunk_key_encoding : ChunkKeyEncoding
        Chunk key encoding.
    codecs : tuple of CodecSpec
        v3: the codec chain. v2: empty (see ``filters`` and ``compressor``).
    filters : tuple of CodecSpec
        v2 filters, numcodecs configurations.
    compressor : CodecSpec or None
        v2 compressor.
    order : {"C", "F"}
        v2 storage order of chunk elements (``"C"`` for v3).
    dimension_names : tuple of (str or None), or None
        v3 dimension names.
    attributes : dict
        User attributes.
    """

    path: str
    zarr_format: Literal[2, 3]
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fill_value: Any
    data_type: Any
    chunk_shape: tuple[int, ...]
    chunk_key_encoding: ChunkKeyEncoding
    codecs: tuple[CodecSpec, ...] = ()
    filters: tuple[CodecSpec, ...] = ()
    compressor: CodecSpec | None = None
    order: Order = "C"
    dimension_names: tuple[str | None, ...] | None = None
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Number of chunks along each dimension."""
        return tuple(
            math.ceil(s / c) if c else 0 for s, c in zip(self.shape, self.chunk_shape, strict=True)
        )

    @property
    def chunk_nbytes(self) -> int:
        """Decoded size in bytes of one (full) chunk."""
        return math.prod(self.chunk_shape) * self.dtype.itemsize

    def chunk_key(self, coords: tuple[int, ...]) -> str:
        """Return the store key of a chunk, including the array path."""
        key = self.chunk_key_encoding.encode(coords)
        return f"{self.path}/{key}" if self.path else key
