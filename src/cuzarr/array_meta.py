"""What a :class:`cuzarr.Array` is, without reading any data: shape, chunks, codecs, info.

:class:`ArrayMeta` is the base of :class:`~cuzarr.array.Array` holding its metadata properties
and the inspection that lists the store (:attr:`ArrayMeta.info`, :meth:`ArrayMeta.nbytes_stored`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from cuzarr.attributes import Attributes
from cuzarr.config import Settings
from cuzarr.metadata.spec import ArraySpec

if TYPE_CHECKING:
    from cuzarr.engine import ArrayEngine
    from cuzarr.indexing import GridIndexer
    from cuzarr.stores.targets import StoreHandle

__all__ = ["ArrayInfo", "ArrayMeta"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrayInfo:
    """What an array is and what it stores (from :attr:`Array.info`).

    Attributes
    ----------
    path, store : str
        The array's path and its store.
    zarr_format : int
        Zarr format version.
    shape, chunks : tuple of int
        Array and (inner) chunk shapes.
    shards : tuple of int or None
        Shard shape of a sharded array.
    dtype : numpy.dtype
        Data type.
    fill_value : Any
        Fill value.
    codecs : tuple of str
        The codec chain (v2: filters then compressor).
    unit : {"chunk", "shard"}
        What one stored object holds.
    n_objects : int
        Stored objects the grid has room for (chunks, or shards).
    n_present, n_missing : int
        Stored objects present and missing.
    nbytes : int
        Decoded size of the whole array.
    nbytes_stored : int
        Bytes stored under the array (metadata included).
    compression_ratio : float or None
        Decoded bytes of the present objects over their stored bytes (``None`` if none).
    """

    path: str
    store: str
    zarr_format: int
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    dtype: np.dtype[Any]
    fill_value: Any
    codecs: tuple[str, ...]
    unit: str
    n_objects: int
    n_present: int
    n_missing: int
    nbytes: int
    nbytes_stored: int
    compression_ratio: float | None

    def __str__(self) -> str:
        ratio = "n/a" if self.compression_ratio is None else f"{self.compression_ratio:.2f}"
        rows = [
            ("Path", repr(self.path)),
            ("Store", self.store),
            ("Zarr format", str(self.zarr_format)),
            ("Shape", str(self.shape)),
            ("Chunk shape", str(self.chunks)),
            ("Shard shape", str(self.shards)),
            ("Data type", str(self.dtype)),
            ("Fill value", repr(self.fill_value)),
            ("Codecs", ", ".join(self.codecs) or "(none)"),
            (f"{self.unit.capitalize()}s", f"{self.n_present} present, {self.n_missing} "
             f"missing of {self.n_objects}"),
            ("Bytes", str(self.nbytes)),
            ("Bytes stored", str(self.nbytes_stored)),
            ("Compression ratio", ratio),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}} : {v}" for k, v in rows)


def _codec_names(spec: ArraySpec) -> tuple[str, ...]:
    out: list[str] = []
    if spec.zarr_format == 3:
        for c in spec.codecs:
            out.append(c.name)
            if c.name == "sharding_indexed":
                inner = c.configuration.get("codecs", [])
                names = ", ".join(str(x.get("name")) for x in inner if isinstance(x, dict))
                out[-1] = f"sharding_indexed[{names}]"
        return tuple(out)
    out = [f.name for f in spec.filters]
    if spec.compressor is not None:
        out.append(spec.compressor.name)
    return tuple(out)


class ArrayMeta:
    """Metadata properties and store inspection of an array (the base of ``cuzarr.Array``)."""

    _handle: StoreHandle
    _spec: ArraySpec
    _settings: Settings
    _write_empty_chunks: bool
    _dtype: np.dtype[Any]
    _chunks: tuple[int, ...]
    _shards: tuple[int, ...] | None
    _engine: ArrayEngine
    _indexer: GridIndexer
    attrs: Attributes

    @property
    def shape(self) -> tuple[int, ...]:
        """Array shape."""
        return self._spec.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """Data type of what reads return (v2: in the stored byte order)."""
        return self._dtype

    @property
    def chunks(self) -> tuple[int, ...]:
        """Chunk shape (the inner chunks of a sharded array, as zarr-python)."""
        return self._chunks

    @property
    def shards(self) -> tuple[int, ...] | None:
        """Shard shape, or ``None`` if the array is not sharded."""
        return self._shards

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._spec.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self._spec.shape)

    @property
    def nbytes(self) -> int:
        """Decoded size of the whole array in bytes."""
        return self.size * self._dtype.itemsize

    @property
    def fill_value(self) -> Any:
        """The fill value (``None`` for a v2 array without one)."""
        return self._spec.fill_value

    @property
    def zarr_format(self) -> int:
        """Zarr format version."""
        return self._spec.zarr_format

    @property
    def metadata(self) -> ArraySpec:
        """The parsed metadata (attributes as of the last change through :attr:`attrs`)."""
        return replace(self._spec, attributes=self.attrs.asdict())

    @property
    def path(self) -> str:
        """The array's path inside its store."""
        return self._spec.path

    @property
    def store(self) -> Any:
        """A zarr-python ``Store`` over the array's store (a ``LocalStore`` for local paths)."""
        return self._handle.zarr_store()

    @property
    def read_only(self) -> bool:
        """Whether writes are refused."""
        return self._handle.read_only

    @property
    def settings(self) -> Settings:
        """The engine settings this array holds."""
        return self._settings

    @property
    def write_empty_chunks(self) -> bool:
        """Whether chunks equal to the fill value everywhere are stored."""
        return self._write_empty_chunks

    @property
    def cdata_shape(self) -> tuple[int, ...]:
        """Number of (inner) chunks along each dimension."""
        return tuple(-(-s // c) for s, c in zip(self.shape, self._chunks, strict=True))

    @property
    def nchunks(self) -> int:
        """Number of (inner) chunks in the grid."""
        return math.prod(self.cdata_shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __repr__(self) -> str:
        return (
            f"<cuzarr.Array {self._handle.name} '{self.path}' shape={self.shape} "
            f"dtype={self._dtype}>"
        )

    def nbytes_stored(self) -> int:
        """Bytes stored under the array, metadata documents included (as zarr-python)."""
        return sum(size for _key, size in self._handle.sizes(self.path))

    @property
    def info(self) -> ArrayInfo:
        """Codecs, stored chunk counts, stored bytes and compression ratio (lists the store)."""
        sizes = self._handle.sizes(self.path)
        prefix = f"{self.path}/" if self.path else ""
        present = 0
        chunk_bytes = 0
        grid = self._indexer.grid_shape
        for key, size in sizes:
            coords = self._parse_key(key[len(prefix) :])
            if coords is not None and all(0 <= c < g for c, g in zip(coords, grid, strict=True)):
                present += 1
                chunk_bytes += size
        n_objects = math.prod(grid)
        decoded = present * self._engine.codec.nbytes
        return ArrayInfo(
            path=self.path,
            store=self._handle.name,
            zarr_format=self.zarr_format,
            shape=self.shape,
            chunks=self._chunks,
            shards=self._shards,
            dtype=self._dtype,
            fill_value=self.fill_value,
            codecs=_codec_names(self._spec),
            unit="chunk" if self._shards is None else "shard",
            n_objects=n_objects,
            n_present=present,
            n_missing=n_objects - present,
            nbytes=self.nbytes,
            nbytes_stored=sum(size for _key, size in sizes),
            compression_ratio=decoded / chunk_bytes if chunk_bytes else None,
        )

    def _parse_key(self, rel: str) -> tuple[int, ...] | None:
        """Grid coordinates of a chunk key relative to the array, or ``None``."""
        enc = self._spec.chunk_key_encoding
        if enc.kind == "default":
            if rel == "c" and self.ndim == 0:
                return ()
            head = f"c{enc.separator}"
            if not rel.startswith(head):
                return None
            rel = rel[len(head) :]
        elif self.ndim == 0:
            return () if rel == "0" else None
        parts = rel.split(enc.separator)
        if len(parts) != self.ndim or not all(p.isdigit() for p in parts):
            return None
        return tuple(int(p) for p in parts)
