"""The engine: read and write batches of chunk requests of one array on one store.

:class:`ArrayEngine` is a thin facade over the loops (:mod:`cuzarr.engine.read`,
:mod:`cuzarr.engine.write`), which run on a :class:`~cuzarr.backends.base.Backend` (the CPU's
by default; the GPU's for ``device="gpu"``, and for ``device="auto"`` past the measured
crossover, :mod:`cuzarr.backends.select`). Every read and write of every front end (zarr's
pipeline, the explicit API, Dask tasks, the CLI) goes through it and is counted once in
:func:`cuzarr.stats`.

Modules: :mod:`~cuzarr.engine.requests` (what a selection touches), :mod:`~cuzarr.engine.selection`
(per-dimension helpers), :mod:`~cuzarr.engine.context` (an array as the loops see it),
:mod:`~cuzarr.engine.read`, :mod:`~cuzarr.engine.write`, :mod:`~cuzarr.engine.locks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cuzarr import _zarr_compat as compat
from cuzarr import diagnostics
from cuzarr.backends.base import Backend, Codec
from cuzarr.backends.cpu import CpuBackend
from cuzarr.backends.select import backend_named
from cuzarr.codecs.sharding.format import ShardingCodec
from cuzarr.codecs.sharding.reader import ShardReader
from cuzarr.config import Settings
from cuzarr.engine.context import ArrayContext
from cuzarr.engine.read import read_chunk_groups, read_chunks, read_shards
from cuzarr.engine.requests import ChunkRequest
from cuzarr.engine.write import write_chunks, write_shards
from cuzarr.errors import MetadataError
from cuzarr.metadata.spec import ArraySpec
from cuzarr.stores.base import ChunkStore, Coalescing
from cuzarr.stores.ranges import ReadPolicy, read_policy

__all__ = ["ArrayEngine", "ChunkRequest"]


class ArrayEngine:
    """Reads and writes chunks of one array.

    Parameters
    ----------
    spec : ArraySpec
        Parsed metadata.
    codec : ChunkCodec or V2ChunkCodec
        The compiled codec chain of the array's chunks.
    settings : Settings
        Thread count, coalescing and memory bounds.
    cache_shard_indexes : bool, default False
        Trust decoded shard indexes of remote stores kept across calls even when the store
        cannot check their version (see :class:`~cuzarr.codecs.sharding.reader.ShardReader`);
        this engine's writes invalidate them. Indexes with a version (an object store's ETag)
        are kept and used either way: ranges are then read only if the shard still has it.
    backend : Backend, optional
        Where chunks are decoded and encoded (default: the CPU).
    """

    def __init__(
        self,
        spec: ArraySpec,
        codec: Codec,
        settings: Settings,
        *,
        cache_shard_indexes: bool = False,
        backend: Backend | None = None,
    ) -> None:
        if codec.nbytes > settings.max_chunk_nbytes:
            # Refused before anything is allocated: metadata may come from anyone.
            raise MetadataError(
                f"Refusing array '{spec.path}': one chunk decodes to {codec.nbytes} bytes, over "
                f"the max_chunk_nbytes limit of {settings.max_chunk_nbytes} (raise it with "
                "cuzarr.configure(max_chunk_nbytes=...) if you trust this data)"
            )
        self.spec = spec
        self.codec = codec
        self.settings = settings
        self.backend: Backend = backend if backend is not None else CpuBackend()
        self.fill = compat.fill_for_missing(spec.fill_value, spec.data_type)
        self.sharding: ShardingCodec | None = codec.sharding
        self._trust_indexes = cache_shard_indexes
        shards = None
        if self.sharding is not None:
            shards = ShardReader(
                self.sharding,
                shard_nbytes=codec.nbytes,
                max_overfetch=settings.max_overfetch,
                trust_cache=cache_shard_indexes,
            )
        self._ctx = ArrayContext(spec, codec, settings, self.fill, self.backend, shards)

    @property
    def xp(self) -> Any:
        """The array module of results (``numpy``, or ``cupy`` on the GPU)."""
        return self.backend.xp

    @property
    def shards(self) -> ShardReader | None:
        """The shard reader (sharded arrays), with its index caches."""
        return self._ctx.shards

    def __getstate__(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "codec": self.codec,
            "settings": self.settings,
            "cache_shard_indexes": self._trust_indexes,
            "backend": self.backend.name,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        backend = backend_named(state.get("backend", "cpu"), state["settings"])
        self.__init__(  # type: ignore[misc]
            state["spec"],
            state["codec"],
            state["settings"],
            cache_shard_indexes=state.get("cache_shard_indexes", False),
            backend=backend,
        )

    def __eq__(self, other: object) -> bool:
        # Value equality (what a pickled copy keeps): same metadata, codecs, settings, policy.
        if not isinstance(other, ArrayEngine):
            return NotImplemented
        return (
            self.spec == other.spec
            and self.codec == other.codec
            and self.settings == other.settings
            and self._trust_indexes == other._trust_indexes
            and self.backend.name == other.backend.name
        )

    def __hash__(self) -> int:
        return hash((self.spec.path, self.codec.shape, self.settings))

    def fetch_policy(self, store: ChunkStore, coalescing: Coalescing | None = None) -> ReadPolicy:
        """How reads of one call fetch from ``store`` (:func:`cuzarr.stores.ranges.read_policy`)."""
        return read_policy(store, self.settings, coalescing)

    # ------------------------------------------------------------------ reads

    def read(
        self,
        store: ChunkStore,
        requests: Sequence[ChunkRequest],
        out: Any,
        drop_axes: tuple[int, ...] = (),
        *,
        coalescing: Coalescing | None = None,
        stream: bool = True,
    ) -> list[bool]:
        """Read requests into ``out``; return, per request, whether the chunk was present.

        ``coalescing`` is zarr's ``array.sharding_coalesce_*`` configuration of the array (zarr
        pipeline path); see :func:`~cuzarr.stores.ranges.read_policy` for how it bounds reads.
        ``stream``: large chunks may be written into ``out`` with streaming stores
        (``DecodeItem.stream``; the CPU backend's :func:`~cuzarr.backends.cpu.streams` decides
        where they pay).
        """
        diagnostics.count("engine_reads")
        if self.sharding is not None:
            items = [(req, out, drop_axes) for req in requests]
            return read_shards(self._ctx, store, items, coalescing)
        return read_chunks(self._ctx, store, requests, out, drop_axes, stream)

    def read_batch(
        self,
        store: ChunkStore,
        jobs: Sequence[tuple[Sequence[ChunkRequest], Any]],
        *,
        coalescing: Coalescing | None = None,
    ) -> None:
        """Read the requests of several selections, each into its own output, as one batch.

        A chunk or shard touched by several selections is fetched (and a chunk decoded) once;
        the fetches of every selection are in flight together, so on an object store a batch
        of windows costs the round trips of one.
        """
        diagnostics.count("engine_reads")
        if self.sharding is not None:
            items = [(req, out, ()) for reqs, out in jobs for req in reqs]
            read_shards(self._ctx, store, items, coalescing)
            return
        read_chunk_groups(self._ctx, store, jobs)

    # ------------------------------------------------------------------ writes

    def write(
        self,
        store: ChunkStore,
        requests: Sequence[ChunkRequest],
        value: Any,
        drop_axes: tuple[int, ...] = (),
        *,
        write_empty_chunks: bool = False,
    ) -> None:
        """Merge ``value`` into the requested chunks and store them (or delete empty ones)."""
        store.check_writable()
        diagnostics.count("engine_writes")
        value = self.backend.asarray(value)
        try:
            if self.sharding is not None:
                write_shards(self._ctx, store, requests, value, drop_axes, write_empty_chunks)
            else:
                write_chunks(self._ctx, store, requests, value, drop_axes, write_empty_chunks)
        finally:
            store.settle()  # e.g. replaced local files removed: none left behind
