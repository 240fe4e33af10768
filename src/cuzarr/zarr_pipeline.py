"""``cuzarr.Pipeline``: zarr-python's codec pipeline, served by cuzarr's engine.

zarr builds one pipeline per array through :meth:`Pipeline.from_array_metadata_and_store`,
which parses the metadata into cuzarr's own types and compiles the codec chain once. Each
``read`` / ``write`` batch then crosses into a worker thread once and runs on the engine. What
the engine cannot do (a data type, codec, store, or GPU buffers it does not handle yet) goes to
zarr's own ``BatchedCodecPipeline``: logged once per reason and counted, or raised with
``strict=True``.
"""

from __future__ import annotations

import asyncio
import functools
import math
import weakref
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from zarr.abc.codec import CodecPipeline

from cuzarr import _zarr_compat as compat
from cuzarr import _zarr_equivalence as equivalence
from cuzarr import diagnostics
from cuzarr.backends.probe import gpu_status
from cuzarr.backends.select import backend_for
from cuzarr.codecs.build import build_chunk_codec
from cuzarr.codecs.chain import ChunkCodec
from cuzarr.codecs.sharding.format import ShardingCodec
from cuzarr.config import Device, Settings, get_settings, zarr_gpu_buffers_for
from cuzarr.engine import ArrayEngine
from cuzarr.engine.requests import ChunkRequest, new_request
from cuzarr.engine.selection import needed_blocks
from cuzarr.errors import UnsupportedError
from cuzarr.hop_threads import hop
from cuzarr.metadata import parse_v2, parse_v3
from cuzarr.stores import from_zarr_store, track_zarr_loop
from cuzarr.stores.base import Coalescing, StoreCaps
from cuzarr.zarr_buffers import AlignedNDBuffer

if TYPE_CHECKING:
    from zarr.abc.codec import Codec, GetResult
    from zarr.abc.store import ByteGetter, ByteSetter, Store
    from zarr.core.array_spec import ArraySpec as ZArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.indexing import SelectorTuple
    from zarr.core.metadata import ArrayMetadata

__all__ = ["Pipeline"]

_WRITE_ORDERS = ("morton", "lexicographic", "colexicographic", "unordered")

#: Reads of one chunk from a local folder or memory that decode at most this many bytes run
#: on zarr's event loop thread itself, instead of hopping to a thread and back (measured with
#: ``asyncio.to_thread``, before :func:`cuzarr.hop_threads.hop`): the two hops cost ~100 us
#: in and ~140 us back (8 KiB chunks), more than a small read, and 4-15 % of a read of one
#: chunk of 512 KiB to 1.2 MB (chunk by chunk through zarr, paired in one process, four
#: runs: 1.04-1.23x a call on (a), (c), (d), (f), (h), (j) in three, 0.97-1.04x in one taken
#: while the VM ran slower; bench/results/probe-512-session42.md). For a sharded array the
#: bytes are those of the inner chunks the selection touches. 4 MiB decodes in a few
#: milliseconds; what running on the loop risks is a call from another thread that arrives
#: meanwhile waiting that long to start (with another task already on the loop, work hops:
#: :func:`_loop_is_free`). Larger or remote reads and the GPU hop.
INLINE_READ_MAX_BYTES = 4 * 1024 * 1024

#: Writes to an unsharded array in a local folder or memory whose chunks total at most this
#: many bytes run on the event loop as well: the hop was ~10 % of a write of 8 chunks of
#: 8 KiB through zarr (1.11x faster inline, paired, in one process). Writes of 8 chunks of
#: 512 KiB (4 MiB), each call after a collection and a sync as the benchmark makes them,
#: paired in one process: on an Intel Xeon VM 1.02-1.07x faster inline ((h) blosc-lz4
#: 1.06-1.07x, (d) uncompressed 1.05-1.07x, (a), (c), (f) zstd 1.00-1.03x; writes over the
#: bound, which hop either way, 1.000-1.005x), on a Zen 4 VM level (0.99-1.01x); two to four
#: threads writing such regions at once through zarr, 0.99-1.06x the throughput
#: (bench/results/probe-512-session43.md, probe-512-session42.md). As for reads, a call from
#: another thread that arrives while a write runs on the loop waits for it to finish.
#: Sharded writes rewrite whole shards: they hop.
INLINE_WRITE_MAX_BYTES = 4 * 1024 * 1024

BatchInfo = tuple[Any, "ZArraySpec", "SelectorTuple", "SelectorTuple", bool]


def _with_write_orders(codec: ChunkCodec, zarr_codecs: tuple[Any, ...]) -> ChunkCodec:
    """``codec`` with the write-time layouts of zarr's sharding codecs, nested ones too.

    zarr's ``ShardingCodec`` carries a layout (``subchunk_write_order``, zarr >= 3.4) that is
    not stored in metadata; honoured so that shards are byte-identical to zarr's.
    """
    sh = codec.array_bytes
    at = len(codec.array_codecs)  # zarr's list is in the same order: its array-to-bytes codec
    if not isinstance(sh, ShardingCodec) or len(zarr_codecs) <= at:
        return codec
    order = getattr(zarr_codecs[at], "subchunk_write_order", None)
    inner = _with_write_orders(sh.inner, tuple(getattr(zarr_codecs[at], "codecs", ())))
    layout = order if order in _WRITE_ORDERS else sh.write_order
    return replace(codec, array_bytes=replace(sh, inner=inner, write_order=layout))


def engine_for_metadata(metadata: Any, settings: Settings) -> ArrayEngine:
    """Build the engine for zarr-python's parsed array metadata.

    Raises
    ------
    UnsupportedError
        When the engine does not handle this array.
    """
    foreign = equivalence.foreign_codec(metadata)
    if foreign is not None:
        # zarr would run that code; cuzarr's engine would not (see the equivalence rule).
        raise UnsupportedError(f"{foreign} is not zarr's own implementation")
    fmt, doc = compat.metadata_document(metadata)
    spec = parse_v3(doc, path="") if fmt == 3 else parse_v2(doc, path="")
    codec = build_chunk_codec(
        spec, max_chunk_nbytes=settings.max_chunk_nbytes, zstd_encoder=settings.zstd_encoder
    )
    if isinstance(codec, ChunkCodec):
        codec = _with_write_orders(codec, tuple(getattr(metadata, "codecs", ())))
    # NumPy buffers: ``auto`` picks its backend by the measured crossover (NumPy results
    # either way); ``gpu`` with NumPy buffers stays on the CPU engine (device buffers reach the
    # GPU backend through ``Pipeline._engine_for``).
    device = Device.AUTO if settings.device is Device.AUTO else Device.CPU
    return ArrayEngine(spec, codec, settings, backend=backend_for(settings, codec, device=device))


class Pipeline(CodecPipeline):
    """zarr-python's ``CodecPipeline`` implemented by cuzarr's engine.

    Select it with ``cuzarr.configure()``, ``zarr.config.set({"codec_pipeline.path":
    "cuzarr.Pipeline"})`` or ``ZARR_CODEC_PIPELINE__PATH=cuzarr.Pipeline``.

    Parameters
    ----------
    fallback : CodecPipeline
        zarr's own pipeline for the same codecs, used for what the engine does not handle.
    engine : ArrayEngine or None
        The engine for this array; ``None`` when the whole array falls back.
    settings : Settings
        Settings captured when zarr created the pipeline.
    reason : str or None
        Why ``engine`` is ``None``.
    """

    def __init__(
        self,
        *,
        fallback: CodecPipeline,
        engine: ArrayEngine | None,
        settings: Settings,
        reason: str | None = None,
    ) -> None:
        self.fallback = fallback
        self.engine = engine
        self.settings = settings
        self.reason = reason
        # The same array on the GPU backend, built on the first device (CuPy) buffer.
        self._gpu_engine: ArrayEngine | None = None

    def __repr__(self) -> str:
        state = "engine" if self.engine is not None else f"fallback ({self.reason})"
        return f"cuzarr.Pipeline({state})"

    def __eq__(self, other: object) -> bool:
        # zarr compares arrays field by field, the codec pipeline included: an array and its
        # pickled copy must compare equal, as they do with zarr's own (dataclass) pipelines.
        if not isinstance(other, Pipeline):
            return NotImplemented
        return (
            self.engine == other.engine
            and self.settings == other.settings
            and self.reason == other.reason
            and self.fallback == other.fallback
        )

    def __hash__(self) -> int:
        return hash((self.engine, self.settings, self.reason))

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_array_metadata_and_store(cls, array_metadata: ArrayMetadata, store: Store) -> Self:
        """Build the pipeline of one array: parse metadata, compile codecs, or fall back."""
        settings = get_settings()
        if equivalence.is_object_store(store):
            # obstore calls back into zarr's loop for this array's metadata requests (and into
            # it or cuzarr's for its chunks): drain both at exit (cuzarr.stores.io_loop).
            track_zarr_loop()
        fallback = compat.default_pipeline(array_metadata)
        # CUZARR_DEVICE=gpu alone (no configure call): zarr returns CuPy arrays from here on.
        no_gpu = zarr_gpu_buffers_for(settings)
        if no_gpu is not None:
            if settings.strict:
                return cls(fallback=fallback, engine=None, settings=settings, reason=no_gpu)
            diagnostics.log_once(f"{no_gpu}: zarr keeps its CPU buffers (NumPy results)")
        try:
            engine = engine_for_metadata(array_metadata, settings)
        except UnsupportedError as exc:
            if settings.strict:
                # zarr swallows NotImplementedError (so UnsupportedError) here and rebuilds the
                # pipeline with ``from_codecs``, losing the reason; keep it, so that the first
                # read or write raises UnsupportedError saying why.
                return cls(fallback=fallback, engine=None, settings=settings, reason=str(exc))
            diagnostics.count("fallback_arrays")
            diagnostics.log_fallback(str(exc))
            return cls(fallback=fallback, engine=None, settings=settings, reason=str(exc))
        return cls(fallback=fallback, engine=engine, settings=settings)

    @classmethod
    def from_codecs(cls, codecs: Iterable[Codec]) -> Self:
        """A pipeline from codecs alone (zarr uses this inside its sharding codec): zarr's."""
        return cls(
            fallback=compat.default_pipeline_from_codecs(codecs),
            engine=None,
            settings=get_settings(),
            reason="built from codecs without array metadata",
        )

    def evolve_from_array_spec(self, array_spec: ZArraySpec) -> Self:
        """Evolve the fallback pipeline; the engine was compiled from full metadata."""
        return type(self)(
            fallback=self.fallback.evolve_from_array_spec(array_spec),
            engine=self.engine,
            settings=self.settings,
            reason=self.reason,
        )

    # ------------------------------------------------------------------ delegated

    @property
    def supports_partial_decode(self) -> bool:
        """As zarr's pipeline for the same codecs."""
        return self.fallback.supports_partial_decode

    @property
    def supports_partial_encode(self) -> bool:
        """As zarr's pipeline for the same codecs."""
        return self.fallback.supports_partial_encode

    def __iter__(self) -> Any:
        return iter(self.fallback)  # type: ignore[call-overload]

    def validate(self, *, shape: tuple[int, ...], dtype: Any, chunk_grid: Any) -> None:
        """Validate codecs against the array (zarr's rules)."""
        self.fallback.validate(shape=shape, dtype=dtype, chunk_grid=chunk_grid)

    def compute_encoded_size(self, byte_length: int, array_spec: ZArraySpec) -> int:
        """Encoded size (zarr's rules)."""
        return self.fallback.compute_encoded_size(byte_length, array_spec)

    async def decode(
        self, chunk_bytes_and_specs: Iterable[tuple[Buffer | None, ZArraySpec]]
    ) -> Iterable[NDBuffer | None]:
        """Decode loose chunks (not used by array reads, which go through ``read``)."""
        return await self.fallback.decode(chunk_bytes_and_specs)

    async def encode(
        self, chunk_arrays_and_specs: Iterable[tuple[NDBuffer | None, ZArraySpec]]
    ) -> Iterable[Buffer | None]:
        """Encode loose chunks (not used by array writes, which go through ``write``)."""
        return await self.fallback.encode(chunk_arrays_and_specs)

    # ------------------------------------------------------------------ reads and writes

    def _engine_for(self, buffer: NDBuffer) -> tuple[ArrayEngine, Any] | str:
        """The engine for a zarr buffer and the array behind it, or the reason to fall back.

        NumPy buffers go to the array's engine (the CPU's; for ``device="auto"`` past the
        measured crossover the GPU's with NumPy results); device buffers
        (``zarr.config.enable_gpu()``, ``cuzarr.configure(device="gpu")``: CuPy arrays) to the
        same array on the GPU backend.
        """
        engine = self.engine
        if engine is None:
            return self.reason or "no engine"
        host = compat.as_numpy(buffer)
        if host is not None:
            return engine, host
        device = compat.as_device_array(buffer)
        if device is None:
            kind = type(buffer.as_ndarray_like()).__name__
            return f"buffers of {kind} arrays are neither NumPy nor CuPy"
        if self._gpu_engine is None:
            status = gpu_status()
            if status is not None:
                return f"device (GPU) buffers, but {status}"
            backend = backend_for(self.settings, engine.codec, device=Device.GPU)
            self._gpu_engine = ArrayEngine(
                engine.spec, engine.codec, self.settings, backend=backend
            )
        return self._gpu_engine, device

    def _route(
        self, batch: list[BatchInfo], engine: ArrayEngine
    ) -> tuple[Any, list[ChunkRequest]] | str:
        """Return ``(store, requests)`` for the engine, or the reason to fall back."""
        first = compat.store_and_key(batch[0][0])
        if first is None:
            return f"byte getter {type(batch[0][0]).__name__} is not a StorePath"
        store = first[0]
        getter_type = type(batch[0][0])
        shape = engine.codec.shape
        spec0 = None
        requests: list[ChunkRequest] = []
        append = requests.append
        for getter, chunk_spec, chunk_sel, out_sel, complete in batch:
            # One type and identity check per chunk; compat.store_and_key did the first.
            if type(getter) is not getter_type or getter.store is not store:
                return "a batch spans several stores"
            if chunk_spec is not spec0:
                if tuple(chunk_spec.shape) != shape:
                    return "irregular chunk shapes"
                spec0 = chunk_spec
            append(
                new_request(
                    getter.path,
                    chunk_sel if type(chunk_sel) is tuple else tuple(chunk_sel),  # type: ignore[arg-type]
                    out_sel,
                    bool(complete),
                )
            )
        return store, requests

    def _fallback_or_raise(self, reason: str, what: str) -> None:
        if self.settings.strict:
            raise UnsupportedError(f"cuzarr cannot {what} this array: {reason}")
        diagnostics.count(f"fallback_{what}s")
        diagnostics.log_fallback(reason)

    async def read(
        self,
        batch_info: Iterable[tuple[ByteGetter, ZArraySpec, SelectorTuple, SelectorTuple, bool]],
        out: NDBuffer,
        drop_axes: tuple[int, ...] = (),
    ) -> tuple[GetResult, ...]:
        """Read a batch of chunks into ``out`` through the engine."""
        batch = list(batch_info)
        if not batch:
            return ()
        picked = self._engine_for(out)
        routed = picked if isinstance(picked, str) else self._route(batch, picked[0])
        if isinstance(routed, str):
            self._fallback_or_raise(routed, "read")
            return await self.fallback.read(compat.in_shard_batch(batch), out, drop_axes)
        assert not isinstance(picked, str)
        engine, out_array = picked
        store, requests = routed
        chunk_store = from_zarr_store(
            store, asyncio.get_running_loop(), concurrency=self.settings.io_concurrency
        )
        coalescing = None
        if engine.sharding is not None:
            coalescing = Coalescing(*compat.sharding_coalescing(batch[0][1]))
        # Large chunks go into zarr's output with streaming stores only where it is cuzarr's
        # buffer (configure()'s AlignedNDBuffer: new memory on a cache line, as the explicit
        # API's own outputs); zarr's np.empty arrays start 16 bytes past a line, where
        # streaming read (h) and (i) up to 10 % slower (bench/results/probe-512-session41.md).
        call = functools.partial(
            engine.read,
            chunk_store,
            requests,
            out_array,
            tuple(drop_axes),
            coalescing=coalescing,
            stream=isinstance(out, AlignedNDBuffer),
        )
        if _inline_read(engine, chunk_store.caps, requests):
            present = call()
        else:
            present = await hop(call)
        return tuple({"status": "present" if p else "missing"} for p in present)

    async def write(
        self,
        batch_info: Iterable[tuple[ByteSetter, ZArraySpec, SelectorTuple, SelectorTuple, bool]],
        value: NDBuffer,
        drop_axes: tuple[int, ...] = (),
    ) -> None:
        """Merge ``value`` into a batch of chunks and store them through the engine."""
        batch = list(batch_info)
        if not batch:
            return
        picked = self._engine_for(value)
        routed = picked if isinstance(picked, str) else self._route(batch, picked[0])
        if isinstance(routed, str):
            self._fallback_or_raise(routed, "write")
            await self.fallback.write(compat.in_shard_batch(batch), value, drop_axes)
            return
        assert not isinstance(picked, str)
        engine, value_array = picked
        store, requests = routed
        chunk_store = from_zarr_store(
            store, asyncio.get_running_loop(), concurrency=self.settings.io_concurrency
        )
        call = functools.partial(
            engine.write,
            chunk_store,
            requests,
            value_array,
            tuple(drop_axes),
            write_empty_chunks=compat.write_empty_chunks(batch[0][1]),
        )
        if _inline_write(engine, chunk_store.caps, requests):
            call()
        else:
            await hop(call)


def _loop_is_free() -> bool:
    """Whether the engine may run on the running loop: zarr's own, this task its only one.

    zarr's synchronous API runs every call as a task on one shared loop (``zarr.core.sync``):
    with another task there (a call from another thread, waiting or in flight), work run on
    the loop would hold it up, so the engine hops to a thread instead and the calls overlap.
    On any other loop (zarr's asynchronous API in the caller's own program, which may have
    many tasks in flight) the engine always hops; that also keeps the task count, which
    ``asyncio.all_tasks`` makes by a walk over the process's tasks, to zarr's loop.
    """
    loop = asyncio.get_running_loop()
    if not compat.is_zarr_io_loop(loop):
        return False
    return _tasks_bound() <= 1 or len(asyncio.all_tasks(loop)) <= 1


#: asyncio's registries of the tasks of every loop (CPython 3.12, 3.13: a ``WeakSet`` of
#: scheduled tasks and a set of eager ones), where this Python has them.
_TASK_SETS = tuple(
    found
    for found in map(vars(asyncio.tasks).get, ("_scheduled_tasks", "_eager_tasks"))
    if isinstance(found, (set, weakref.WeakSet))
)


def _tasks_bound() -> int:
    """A bound on the running loop's tasks: those of every loop, counted without a walk.

    ``asyncio.all_tasks`` walks the registries and filters by loop (~3 us a zarr call on
    CPython 3.13, ~7 us with the surrounding check); their sizes bound its count, so a count
    of at most one settles the question. Without those registries (other Pythons, where
    ``all_tasks`` is native), a bound that never settles it.
    """
    if len(_TASK_SETS) != 2:
        return 2
    return sum(len(found) for found in _TASK_SETS)


def _inline_read(engine: ArrayEngine, caps: StoreCaps, requests: list[ChunkRequest]) -> bool:
    """Whether a read is small enough to run on the event loop (:data:`INLINE_READ_MAX_BYTES`).

    One request on the CPU, from a store that is neither remote nor used through zarr's async
    API (those need the loop free while the engine waits on them), decoding at most
    :data:`INLINE_READ_MAX_BYTES` (:func:`_decoded_bytes`), with no other task on the loop
    (:func:`_loop_is_free`).
    """
    if len(requests) != 1 or caps.remote or engine.backend.name != "cpu":
        return False
    nbytes = _decoded_bytes(engine, requests[0])
    return nbytes is not None and nbytes <= INLINE_READ_MAX_BYTES and _loop_is_free()


def _inline_write(engine: ArrayEngine, caps: StoreCaps, requests: list[ChunkRequest]) -> bool:
    """Whether a write is small enough to run on the event loop (:data:`INLINE_WRITE_MAX_BYTES`).

    On the CPU, to a store that is not remote and does not write through a zarr store's API
    on the loop (``caps.loop_writes``: kvikio's ``GDSStore`` reads as a folder but writes
    through its API, which would wait on the blocked loop), of an unsharded array whose
    requested chunks total at most :data:`INLINE_WRITE_MAX_BYTES`, with no other task on the
    loop (:func:`_loop_is_free`).
    """
    if caps.remote or caps.loop_writes or engine.backend.name != "cpu":
        return False
    if engine.sharding is not None:
        return False
    return len(requests) * engine.codec.nbytes <= INLINE_WRITE_MAX_BYTES and _loop_is_free()


def _decoded_bytes(engine: ArrayEngine, req: ChunkRequest) -> int | None:
    """The bytes decoding ``req`` takes: its chunk's, or of the inner chunks it touches.

    ``None`` where a sharded array's selection is not ints and slices of positive steps (the
    count is then not worth working out here).
    """
    sh = engine.sharding
    if sh is None:
        return engine.codec.nbytes
    sel = req.chunk_selection
    if (
        type(sel) is not tuple
        or len(sel) != len(sh.chunk_shape)
        or not all(
            isinstance(s, (int, np.integer))
            or (type(s) is slice and (s.step is None or s.step >= 1))
            for s in sel
        )
    ):
        return None
    blocks = needed_blocks(sel, sh.chunk_shape, engine.codec.shape)
    return math.prod(len(b) for b in blocks) * sh.inner.nbytes
