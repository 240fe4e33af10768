"""``cuzarr.Array``: one Zarr array read and written straight through cuzarr's engine.

Metadata is parsed once when the array is opened; the codec chain is compiled once; each read
or write plans its chunk requests (:mod:`cuzarr.indexing`) and hands them to the engine on the
calling thread. There is no event loop, no global configuration lookup and no per-call zarr
object. An :class:`Array` may be shared by many threads (every call is independent) and pickled
(it re-opens its store on first use in the new process).

Semantics are zarr-python's: the same chunk keys, the same bytes, the same fill values for
missing chunks, the same results for every selection. Negative slice steps follow NumPy (the
same elements as a positive-step read, in reverse order), where zarr-python raises.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from cuzarr import _zarr_compat as compat
from cuzarr.backends.probe import resolve_device
from cuzarr.codecs.chain import build_chunk_codec
from cuzarr.config import Device, Settings
from cuzarr.engine import ArrayEngine
from cuzarr.indexing import BasicPlan, GridIndexer
from cuzarr.metadata.spec import ArraySpec
from cuzarr.stores import is_remote
from cuzarr.stores.cached import ObjectCache, cached

if TYPE_CHECKING:
    from cuzarr.stores.base import ChunkStore
    from cuzarr.stores.targets import StoreHandle

__all__ = ["Array", "ArrayInfo", "Attributes"]


class Attributes(MutableMapping[str, Any]):
    """User attributes of an array or group; every change is persisted at once.

    The metadata document (``zarr.json``, or ``.zattrs`` for Zarr v2) is rewritten whole and
    atomically (the store replaces the object in one step). ``update`` persists once.
    """

    def __init__(self, initial: dict[str, Any], persist: Callable[[dict[str, Any]], None]) -> None:
        self._data = dict(initial)
        self._persist = persist
        self._lock = threading.Lock()

    def _commit(self, change: Callable[[dict[str, Any]], None]) -> None:
        with self._lock:
            new = dict(self._data)
            change(new)
            self._persist(new)
            self._data = new

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._commit(lambda d: d.__setitem__(key, value))

    def __delitem__(self, key: str) -> None:
        if key not in self._data:
            raise KeyError(key)
        self._commit(lambda d: d.__delitem__(key))

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Attributes({self._data!r})"

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Update several attributes, persisted in one write."""
        items = dict(*args, **kwargs)
        self._commit(lambda d: d.update(items))

    def put(self, attributes: dict[str, Any]) -> None:
        """Replace all attributes with ``attributes``."""

        def change(d: dict[str, Any]) -> None:
            d.clear()
            d.update(attributes)

        self._commit(change)

    def asdict(self) -> dict[str, Any]:
        """A copy of the attributes as a plain dict."""
        return dict(self._data)


def persist_attributes(
    store: ChunkStore, path: str, zarr_format: int, attributes: dict[str, Any]
) -> None:
    """Rewrite a node's attributes: ``zarr.json``'s ``attributes`` (v3) or ``.zattrs`` (v2)."""
    prefix = f"{path}/" if path else ""
    if zarr_format == 2:
        key = f"{prefix}.zattrs"
        doc: dict[str, Any] = attributes
    else:
        key = f"{prefix}zarr.json"
        got = store.get(key)
        if got is None:
            raise FileNotFoundError(f"zarr.json of '{path}' disappeared from {store.name}")
        doc = json.loads(bytes(memoryview(got.data)))
        doc["attributes"] = attributes
    text = json.dumps(doc, indent=2)
    store.put(key, np.frombuffer(text.encode("utf-8"), np.uint8))


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


class _Indexing:
    """``array.oindex`` / ``array.vindex`` / ``array.blocks``."""

    __slots__ = ("_array", "_kind")

    def __init__(self, array: Array, kind: str) -> None:
        self._array = array
        self._kind = kind

    def __getitem__(self, selection: Any) -> Any:
        return self._array._read_zarr(self._kind, selection, None)

    def __setitem__(self, selection: Any, value: Any) -> None:
        self._array._write_zarr(self._kind, selection, value)


class Array:
    """A Zarr array read and written through cuzarr's engine (open with :func:`cuzarr.open`).

    Parameters
    ----------
    handle : StoreHandle
        The store.
    spec : ArraySpec
        Parsed metadata.
    settings : Settings
        Engine settings held by this array.
    write_empty_chunks : bool, default False
        Store chunks equal to the fill value everywhere (else delete them).

    Raises
    ------
    UnsupportedError
        If the engine cannot handle the array's data type or codecs.
    """

    def __init__(
        self,
        handle: StoreHandle,
        spec: ArraySpec,
        *,
        settings: Settings,
        write_empty_chunks: bool = False,
    ) -> None:
        codec = build_chunk_codec(spec)
        self._handle = handle
        self._spec = spec
        self._settings = settings
        self._write_empty_chunks = write_empty_chunks
        # Shard indexes of object stores are cached across reads of this array (its own
        # writes invalidate them; another writer's changes need a re-open).
        self._engine: Any
        #: The array module of results: numpy, or cupy on the GPU.
        self._xp: Any = np
        if resolve_device(settings.device) is Device.GPU:
            from cuzarr.gpu.backend import GpuEngine

            self._engine = GpuEngine(spec, codec, settings)
            self._xp = self._engine.xp
        else:
            self._engine = ArrayEngine(spec, codec, settings, cache_shard_indexes=True)
        self._indexer = GridIndexer(spec)
        self._store: ChunkStore | None = None
        self._grid: Any = None
        self._dtype: np.dtype[Any] = codec.dtype
        sharding = codec.sharding
        self._chunks = sharding.chunk_shape if sharding is not None else spec.chunk_shape
        self._shards = spec.chunk_shape if sharding is not None else None
        self.attrs = Attributes(spec.attributes, self._persist_attributes)
        self.oindex = _Indexing(self, "oindex")
        self.vindex = _Indexing(self, "vindex")
        self.blocks = _Indexing(self, "blocks")

    # ------------------------------------------------------------------ pickling

    def __getstate__(self) -> dict[str, Any]:
        return {
            "handle": self._handle,
            "spec": replace(self._spec, attributes=self.attrs.asdict()),
            "settings": self._settings,
            "write_empty_chunks": self._write_empty_chunks,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["handle"],
            state["spec"],
            settings=state["settings"],
            write_empty_chunks=state["write_empty_chunks"],
        )

    # ------------------------------------------------------------------ properties

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

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> npt.NDArray[Any]:
        out = np.asarray(self.read(...))
        return out if dtype is None else out.astype(dtype, copy=False)

    def _chunk_store(self) -> ChunkStore:
        store = self._store
        if store is None:
            store = self._handle.chunk_store(self._settings.io_concurrency)
            if self._settings.cache_bytes > 0 and is_remote(store):
                store = cached(store, ObjectCache(self._settings.cache_bytes))
            self._store = store
        return store

    def _persist_attributes(self, attributes: dict[str, Any]) -> None:
        self._chunk_store().check_writable()
        persist_attributes(self._chunk_store(), self.path, self.zarr_format, attributes)

    # ------------------------------------------------------------------ reads

    def __getitem__(self, selection: Any) -> Any:
        plan = self._indexer.basic(selection)
        if plan is None:
            return self._read_zarr(self._dispatch(selection), selection, None)
        return self._read_plan(plan, None)

    def read(self, selection: Any = Ellipsis, *, out: npt.NDArray[Any] | None = None) -> Any:
        """Read a selection, optionally into a caller's buffer.

        Parameters
        ----------
        selection : object, default ``...``
            Any selection ``array[selection]`` accepts.
        out : numpy.ndarray, optional
            Destination of exactly the selection's shape and the array's dtype; the engine
            decodes into it directly.

        Returns
        -------
        numpy.ndarray or scalar
            ``out`` when given; else a new array (a scalar when every axis is an integer).

        Raises
        ------
        ValueError
            If ``out`` has the wrong shape or dtype, or is read-only.
        """
        plan = self._indexer.basic(selection)
        if plan is None:
            return self._read_zarr(self._dispatch(selection), selection, out)
        return self._read_plan(plan, out)

    def read_many(self, selections: Sequence[Any]) -> list[Any]:
        """Read several selections in one batch.

        Every chunk or shard the selections touch is fetched once, and the fetches of all of
        them are in flight together: on an object store a batch of windows (training crops,
        map tiles) costs the round trips of a single read instead of one per window, and
        shards shared by several windows are fetched once.

        Parameters
        ----------
        selections : sequence
            Selections as ``array[selection]`` accepts. Basic ones (integers, slices with
            any step, ``...``, ``None``) are batched; others (``oindex``-style lists, masks)
            are read one by one, after the batch.

        Returns
        -------
        list
            One result per selection, as ``array[selection]`` would return it.

        Examples
        --------
        >>> windows = [np.s_[0:64, 0:64], np.s_[512:576, 8:72]]
        >>> crops = a.read_many(windows)  # doctest: +SKIP
        """
        results: list[Any] = [None] * len(selections)
        jobs: list[tuple[Sequence[Any], Any]] = []
        scalars: list[tuple[int, Any]] = []  # 0-d buffers read as scalars once filled
        later: list[int] = []
        for i, selection in enumerate(selections):
            plan = self._indexer.basic(selection)
            if plan is None:
                later.append(i)
                continue
            result, buf, target = self._buffers(plan, None)
            if plan.requests:
                jobs.append((plan.requests, target))
            results[i] = result
            if plan.scalar:
                scalars.append((i, buf))
        if jobs:
            batch = getattr(self._engine, "read_batch", None)
            store = self._chunk_store()
            if batch is not None:
                batch(store, jobs)
            else:
                for requests, target in jobs:
                    self._engine.read(store, requests, target)
        for i, buf in scalars:
            results[i] = buf[()]
        for i in later:
            results[i] = self[selections[i]]
        return results

    def _check_out(self, out: Any, shape: tuple[int, ...]) -> npt.NDArray[Any]:
        if not isinstance(out, self._xp.ndarray):
            raise TypeError(
                f"out: expected a {self._xp.__name__}.ndarray, got {type(out).__name__}"
            )
        if out.shape != shape:
            raise ValueError(f"out: expected shape {shape}, got {out.shape}")
        if out.dtype != self._dtype:
            raise ValueError(f"out: expected dtype {self._dtype}, got {out.dtype}")
        if not out.flags.writeable:
            raise ValueError("out: the buffer is read-only")
        return out  # type: ignore[no-any-return]  # numpy, or cupy on the GPU

    def _buffers(
        self, plan: BasicPlan, out: npt.NDArray[Any] | None
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
        """Where ``plan`` is read to: result, buffer and engine target.

        The result is ``out`` or a new array; the buffer is the result without its new axes;
        the target is the buffer with reversed axes flipped back.
        """
        if out is None:
            buf = self._xp.empty(plan.shape, self._dtype)
            result: npt.NDArray[Any] = buf
            if plan.newaxes:
                result = buf.reshape(plan.result_shape)
        else:
            result = self._check_out(out, plan.result_shape)
            buf = result
            if plan.newaxes:
                drop = tuple(
                    0 if i in plan.newaxes else slice(None) for i in range(result.ndim)
                )
                buf = result[drop]
        return result, buf, (buf if plan.flip is None else buf[plan.flip])

    def _read_plan(self, plan: BasicPlan, out: npt.NDArray[Any] | None) -> Any:
        result, buf, target = self._buffers(plan, out)
        if plan.requests:
            self._engine.read(self._chunk_store(), plan.requests, target)
        if plan.scalar and out is None:
            return buf[()]
        return result

    def _dispatch(self, selection: Any) -> str:
        kind = compat.selection_kind(selection, self.ndim)
        if kind == "basic":
            raise IndexError(
                f"unsupported selection {selection!r}: expected integers, slices, '...', "
                "None, or integer / Boolean arrays (see Array.oindex and Array.vindex)"
            )
        return kind

    def _zarr_indexer(self, kind: str, selection: Any) -> Any:
        grid = self._grid
        if grid is None:
            grid = self._grid = compat.chunk_grid(self.shape, self._spec.chunk_shape)
        if kind == "oindex":
            return compat.orthogonal_indexer(selection, self.shape, grid)
        if kind == "vindex":
            return compat.vectorized_indexer(selection, self.shape, grid)
        return compat.block_indexer(selection, self.shape, grid)

    def _read_zarr(self, kind: str, selection: Any, out: npt.NDArray[Any] | None) -> Any:
        indexer = self._zarr_indexer(kind, selection)
        shape = tuple(indexer.shape)
        coordinate = compat.is_coordinate_indexer(indexer)
        final = tuple(indexer.sel_shape) if coordinate else shape
        if out is None:
            buf = self._xp.empty(shape, self._dtype)
        else:
            buf = self._check_out(out, final).reshape(shape)
            if buf.size and not self._xp.shares_memory(buf, out):
                buf = self._xp.empty(shape, self._dtype)  # a strided buffer: read, then copy
        if math.prod(shape):
            requests = self._indexer.requests_from_zarr(indexer)
            self._engine.read(self._chunk_store(), requests, buf, tuple(indexer.drop_axes))
        if out is not None:
            if buf.size and not self._xp.shares_memory(buf, out):
                out[...] = buf.reshape(final)
            return out
        return buf.reshape(final) if coordinate else buf

    def read_chunk(self, coords: tuple[int, ...]) -> npt.NDArray[Any]:
        """The decoded chunk at grid position ``coords``, clipped to the array at its edges.

        For a sharded array the grid is that of the inner chunks (:attr:`chunks`).

        Raises
        ------
        IndexError
            If ``coords`` is outside the chunk grid.
        """
        coords = tuple(int(c) for c in coords)
        grid = self.cdata_shape
        inside = len(coords) == len(grid) and all(
            0 <= c < g for c, g in zip(coords, grid, strict=True)
        )
        if not inside:
            raise IndexError(f"chunk coordinates {coords} are outside the chunk grid {grid}")
        region = [
            (c * k, min((c + 1) * k, n))
            for c, k, n in zip(coords, self._chunks, self.shape, strict=True)
        ]
        out = self._xp.empty(tuple(e - s for s, e in region), self._dtype)
        self._engine.read(self._chunk_store(), self._indexer.region(region), out)
        return out  # type: ignore[no-any-return]  # numpy, or cupy on the GPU

    def iter_chunks(self) -> Iterator[tuple[tuple[int, ...], npt.NDArray[Any]]]:
        """Yield ``(coords, chunk)`` for every (inner) chunk, clipped at the array's edges.

        Chunks come in C order of the grid; for a sharded array, shard by shard (each shard
        read once, its inner chunks in C order). Each yielded array is independent of later
        ones (for sharded arrays, a view of that shard's own buffer).
        """
        if not self.size:
            return
        import itertools

        if self._shards is None:
            for coords in itertools.product(*map(range, self.cdata_shape)):
                yield coords, self.read_chunk(coords)
            return
        per_shard = [s // c for s, c in zip(self._shards, self._chunks, strict=True)]
        grid = self.cdata_shape
        for shard in itertools.product(*map(range, self._indexer.grid_shape)):
            region = [
                (i * s, min((i + 1) * s, n))
                for i, s, n in zip(shard, self._shards, self.shape, strict=True)
            ]
            buf = self._xp.empty(tuple(e - s for s, e in region), self._dtype)
            self._engine.read(self._chunk_store(), self._indexer.region(region), buf)
            ranges = [
                range(i * p, min((i + 1) * p, g))
                for i, p, g in zip(shard, per_shard, grid, strict=True)
            ]
            for coords in itertools.product(*ranges):
                local = tuple(
                    slice(c * k - s, (c + 1) * k - s)
                    for c, k, (s, _) in zip(coords, self._chunks, region, strict=True)
                )
                yield coords, buf[local]

    # ------------------------------------------------------------------ writes

    def __setitem__(self, selection: Any, value: Any) -> None:
        self.write(selection, value)

    def write(self, selection: Any, value: Any) -> None:
        """Write ``value`` (a scalar, or anything NumPy broadcasts to the selection).

        Chunks left equal to the fill value everywhere are deleted unless the array was opened
        with ``write_empty_chunks=True``.

        Raises
        ------
        ValueError
            If the array is read-only or ``value`` does not broadcast to the selection.
        """
        plan = self._indexer.basic(selection)
        if plan is None:
            self._write_zarr(self._dispatch(selection), selection, value)
            return
        arr = self._value(value)
        if arr.ndim:
            arr = self._xp.broadcast_to(arr, plan.result_shape)
            if plan.newaxes:
                arr = arr[tuple(0 if i in plan.newaxes else slice(None) for i in range(arr.ndim))]
            if plan.flip is not None:
                arr = arr[plan.flip]
        if plan.requests:
            self._engine.write(
                self._chunk_store(), plan.requests, arr,
                write_empty_chunks=self._write_empty_chunks,
            )
        elif self.read_only:
            self._chunk_store().check_writable()

    def _value(self, value: Any) -> npt.NDArray[Any]:
        """``value`` as an array of the array's dtype (zarr's conversion rules)."""
        if np.isscalar(value):
            return self._xp.asarray(value, dtype=self._dtype)  # type: ignore[no-any-return]
        arr = self._xp.asarray(value)
        if arr.dtype != self._dtype:
            arr = arr.astype(self._dtype)
        return arr  # type: ignore[no-any-return]

    def _write_zarr(self, kind: str, selection: Any, value: Any) -> None:
        indexer = self._zarr_indexer(kind, selection)
        arr = self._value(value)
        if arr.ndim:
            if compat.is_coordinate_indexer(indexer):
                arr = self._xp.broadcast_to(arr, tuple(indexer.sel_shape)).reshape(-1)
            else:
                arr = self._xp.broadcast_to(arr, tuple(indexer.shape))
        requests = self._indexer.requests_from_zarr(indexer)
        if requests:
            self._engine.write(
                self._chunk_store(), requests, arr, tuple(indexer.drop_axes),
                write_empty_chunks=self._write_empty_chunks,
            )

    # ------------------------------------------------------------------ inspection

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

    def to_zarr(self) -> Any:
        """A ``zarr.Array`` over the same array, reading and writing through cuzarr's engine.

        The zarr array uses this array's engine and settings, whatever zarr's configured
        codec pipeline is.
        """
        import zarr

        from cuzarr.zarr_pipeline import Pipeline

        arr = zarr.open_array(
            self._handle.zarr_store(),
            path=self.path,
            mode="r" if self.read_only else "r+",
            zarr_format=self.zarr_format,  # type: ignore[arg-type]
            config={"write_empty_chunks": self._write_empty_chunks},
        )
        pipeline = Pipeline(
            fallback=compat.default_pipeline(arr.metadata),
            engine=self._engine,
            settings=self._settings,
        )
        return compat.bind_pipeline(arr, pipeline)
