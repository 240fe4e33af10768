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

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from cuzarr import _zarr_compat as compat
from cuzarr.array_meta import ArrayInfo
from cuzarr.array_select import ArraySelections
from cuzarr.attributes import Attributes, persist_attributes
from cuzarr.backends.select import backend_for
from cuzarr.codecs.build import build_chunk_codec
from cuzarr.config import Settings
from cuzarr.engine import ArrayEngine
from cuzarr.errors import MetadataError
from cuzarr.indexing import BasicPlan, GridIndexer
from cuzarr.metadata.load import read_node
from cuzarr.metadata.spec import ArraySpec
from cuzarr.stores import is_remote
from cuzarr.stores.cached import ObjectCache, cached

if TYPE_CHECKING:
    from cuzarr.stores.base import ChunkStore
    from cuzarr.stores.targets import StoreHandle

__all__ = ["Array", "ArrayInfo", "Attributes"]










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


class Array(ArraySelections):
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
        codec = build_chunk_codec(
            spec, max_chunk_nbytes=settings.max_chunk_nbytes, zstd_encoder=settings.zstd_encoder
        )
        self._handle = handle
        self._spec = spec
        self._settings = settings
        self._write_empty_chunks = write_empty_chunks
        # Shard indexes of object stores are cached across reads of this array (its own
        # writes invalidate them; another writer's changes need a re-open).
        backend = backend_for(settings, codec, where=spec.path)
        self._engine = ArrayEngine(spec, codec, settings, cache_shard_indexes=True, backend=backend)
        #: The array module of results: numpy, or cupy on the GPU.
        self._xp: Any = self._engine.xp
        #: New result buffers: the backend's (on the CPU, cache-line aligned).
        self._empty: Callable[[tuple[int, ...], Any], Any] = self._engine.backend.empty
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
    def xp(self) -> Any:
        """The array module of results: ``numpy``, or ``cupy`` for ``device="gpu"``."""
        return self._xp

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
            self._engine.read_batch(self._chunk_store(), jobs)
        for i, buf in scalars:
            results[i] = buf[()]
        for i in later:
            results[i] = self[selections[i]]
        return results



    def _read_plan(self, plan: BasicPlan, out: npt.NDArray[Any] | None) -> Any:
        result, buf, target = self._buffers(plan, out)
        if plan.requests:
            self._engine.read(self._chunk_store(), plan.requests, target)
        if plan.scalar and out is None:
            return buf[()]
        return result



    def _read_zarr(self, kind: str, selection: Any, out: npt.NDArray[Any] | None) -> Any:
        indexer = self._zarr_indexer(kind, selection)
        shape = tuple(indexer.shape)
        coordinate = compat.is_coordinate_indexer(indexer)
        final = tuple(indexer.sel_shape) if coordinate else shape
        if out is None:
            buf = self._empty(shape, self._dtype)
        else:
            buf = self._check_out(out, final).reshape(shape)
            if buf.size and not self._xp.shares_memory(buf, out):
                buf = self._empty(shape, self._dtype)  # a strided buffer: read, then copy
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
        out = self._empty(tuple(e - s for s, e in region), self._dtype)
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
            buf = self._empty(tuple(e - s for s, e in region), self._dtype)
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
            arr = _broadcast(self._xp, arr, plan.result_shape)
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


def _broadcast(xp: Any, arr: Any, shape: tuple[int, ...]) -> Any:
    """``arr`` broadcast to ``shape``, read-only (the engine never writes into a value).

    A NumPy array of that shape already is a read-only view of itself: the same result as
    ``broadcast_to``, which costs ~5 us warm and ~80 us after the caches were flushed (a
    small write's whole budget is ~500 us).
    """
    if isinstance(arr, np.ndarray) and arr.shape == shape:
        view = arr.view()
        view.flags.writeable = False
        return view
    return xp.broadcast_to(arr, shape)


def create_array_at(
    handle: StoreHandle,
    path: str,
    *,
    settings: Settings,
    write_empty_chunks: bool,
    zarr_kwargs: dict[str, Any],
) -> Array:
    """Create an array at ``path`` of a store (zarr-python writes the metadata) and open it.

    ``zarr_kwargs`` are ``zarr.create_array``'s arguments (not ``store`` and ``name``).

    Raises
    ------
    UnsupportedError
        If the engine cannot handle the array (its metadata has been written; zarr-python
        can still use it).
    """
    import zarr

    zarr.create_array(handle.zarr_store(), name=path or None, **zarr_kwargs)
    node = read_node(handle.chunk_store(), path, zarr_format=zarr_kwargs.get("zarr_format"))
    if not isinstance(node, ArraySpec):  # pragma: no cover - zarr just wrote an array there
        raise MetadataError(f"expected an array at '{path}' in {handle.name}")
    return Array(handle, node, settings=settings, write_empty_chunks=write_empty_chunks)
