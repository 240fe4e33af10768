"""The GPU backend: CuPy arrays, nvCOMP batched decode and encode.

:class:`GpuBackend` implements :class:`~cuzarr.backends.base.Backend` and nothing else: the
engine's read and write loops (the same code as on the CPU) fetch, lock, put conditionally,
apply the empty-chunk rule and count; this backend decodes and encodes the batches they hand it.
Work is grouped in waves (up to ``Settings.gpu_wave_bytes`` decoded bytes within the device's
free memory, at most ``MAX_BATCH`` chunks: nvCOMP needs many streams per call to fill a GPU):
the stored chunks of a wave are read into device memory (kvikio) or fetched on the I/O
threads, packed into one pinned buffer and uploaded once, then decoded in one nvCOMP call per
algorithm (:mod:`cuzarr.gpu.device`). Chains without a GPU path decode (and encode) on the
CPU and move their results across (logged once per array, counted as ``gpu_cpu_decodes`` /
``gpu_cpu_encodes``).

Imported only for ``device="gpu"``: it imports CuPy and nvCOMP.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cupy
import numpy as np

from cuzarr.backends.base import (
    Batching,
    Codec,
    DecodeItem,
    EncodedGrid,
    InnerGrid,
    Namer,
    Op,
    per_wave,
    reraise_decode,
)
from cuzarr.backends.pool import parallel_map
from cuzarr.codecs.base import Buf
from cuzarr.codecs.sharding.reader import BackendReads
from cuzarr.config import Settings
from cuzarr.diagnostics import count, log_once
from cuzarr.errors import CorruptChunkError, UnsupportedError
from cuzarr.gpu import device, files, shard_reads
from cuzarr.gpu.plan import GpuChain, classify_chain
from cuzarr.stores.base import ChunkStore

__all__ = ["MAX_BATCH", "GpuBackend"]

#: Most streams in one nvCOMP call.
MAX_BATCH = 65536

def _host(raw: Any) -> Buf:
    """Stored bytes on the host (a device read's chunk is copied back: error paths only)."""
    return raw.host() if isinstance(raw, files.DeviceChunk) else raw


class GpuBackend:
    """Decodes into and encodes from CuPy arrays on the current device.

    Parameters
    ----------
    settings : Settings
        ``gpu_wave_bytes`` sizes the waves (within the device's free memory); ``threads`` the
        CPU decodes of chains without a GPU path.
    """

    name = "gpu"
    xp = cupy

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Keyed by identity (chains hold numcodecs codecs, which are unhashable); the codec is
        # kept with its chain so that its id stays unique.
        self._chains: dict[int, tuple[Codec, GpuChain]] = {}

    def chain(self, codec: Codec) -> GpuChain:
        """How ``codec``'s chunks decode on the GPU (classified once per chain)."""
        hit = self._chains.get(id(codec))
        if hit is not None:
            return hit[1]
        chain = classify_chain(codec)
        cfg = chain.compressor_config or {}
        if chain.compressor == "blosc" and cfg.get("cname") == "blosclz":
            chain = GpuChain(cpu_reason="blosclz streams have no GPU decoder")
        if chain.cpu_reason is not None:
            log_once(f"GPU decodes of {codec.shape} chunks run on the CPU: {chain.cpu_reason}")
        self._chains[id(codec)] = (codec, chain)
        return chain

    # ------------------------------------------------------------------ memory

    def asarray(self, value: Any) -> Any:
        """The value on the device (uploaded if it is a host array)."""
        return cupy.asarray(value)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """An uninitialised device array."""
        return cupy.empty(shape, dtype)

    def full(self, shape: tuple[int, ...], value: Any, dtype: Any) -> Any:
        """A device array of ``value``."""
        return cupy.full(shape, value, dtype=dtype)

    def copy(self, array: Any, dtype: Any) -> Any:
        """A writable device copy."""
        return cupy.array(array, dtype=dtype, copy=True)

    # ------------------------------------------------------------------ planning

    def wave_bytes(self, settings: Settings) -> int:
        """``settings.gpu_wave_bytes``, at most a quarter of the device's free memory."""
        free, _total = cupy.cuda.runtime.memGetInfo()
        return max(1, min(settings.gpu_wave_bytes, int(free) // 4))

    def batching(self, codec: Codec, n: int, *, remote: bool, op: Op, threads: int) -> Batching:
        """Waves: up to :meth:`wave_bytes` decoded bytes and ``MAX_BATCH`` chunks per call."""
        size = per_wave(self.wave_bytes(self.settings), codec.nbytes)
        return Batching(size=max(1, min(MAX_BATCH, size, n)), parallel=False)

    def size_hint(self, codec: Codec) -> int | None:
        """No small-read hint: waves read whole chunks."""
        return None

    def fetch(self, store: ChunkStore, keys: Sequence[str], codec: Codec) -> list[Any] | None:
        """A wave of local files read straight into device memory with kvikio.

        For stores with device reads (local folders) and chains whose chunks the host needs
        only the first and last bytes of (:func:`files.device_readable`: every GPU chain but
        Blosc). Others, and a wave whose files changed while read
        (``gpu_device_read_retries``), are fetched on the host and uploaded once per wave.
        """
        chain = self._device_chain(store, codec)
        if chain is None:
            return None
        paths = [store.local_file(k) for k in keys]
        present = [p for p in paths if p is not None]
        chunks = files.read_files(present, chain) if present else []
        if chunks is None:
            count("gpu_device_read_retries")
            return None
        count("gpu_device_reads", len(present))
        found = iter(chunks)
        return [None if p is None else next(found) for p in paths]

    def _device_chain(self, store: ChunkStore, codec: Codec) -> GpuChain | None:
        """``codec``'s chain if its chunks in ``store`` are read into device memory, else None.

        Local files of chains whose chunks the host needs only the first and last bytes of
        (:func:`~cuzarr.gpu.files.device_readable`).
        """
        if not store.caps.device_reads:
            return None
        chain = self.chain(codec)
        return chain if files.device_readable(chain) else None

    def range_reads(self, store: ChunkStore, codec: Codec) -> BackendReads | None:
        """Inner chunks of local shards read straight into device memory with kvikio.

        For the chains :meth:`fetch` reads so; the index stays a host read from the shard
        reader's open version (:mod:`cuzarr.gpu.shard_reads`).
        """
        chain = self._device_chain(store, codec) if store.caps.open_object else None
        return None if chain is None else shard_reads.DeviceShardReads(store, chain)

    def read_batch(
        self,
        store: ChunkStore,
        codec: Codec,
        keys: Sequence[str],
        selections: Sequence[tuple[Any, Any]],
        out: Any,
        *,
        stream: bool = False,
        helpers: int = 0,
    ) -> list[int] | None:
        """Not here: waves are fetched and decoded in one call (:meth:`fetch`, :meth:`decode`)."""
        return None

    def read_direct(self, store: ChunkStore, key: str, codec: Codec, dest: Any) -> int | None:
        """An uncompressed chunk of a local file straight into ``dest`` with kvikio."""
        if not (
            store.caps.device_reads
            and codec.raw
            and dest.flags.c_contiguous
            and dest.dtype == codec.dtype
        ):
            return -1
        path = store.local_file(key)
        if path is None:
            return None
        size = files.read_file_exact(path, dest.reshape(-1).view(cupy.uint8))
        if size is not None and size >= 0:
            count("gpu_device_reads")
        return size

    # ------------------------------------------------------------------ codecs

    def decode(self, codec: Codec, items: Sequence[DecodeItem], name: Namer) -> list[Any]:
        """Decode a wave of stored chunks in one nvCOMP call per algorithm (or on the CPU)."""
        if not items:
            return []
        chain = self.chain(codec)
        chunks: list[Any] | None = None
        if chain.gpu_decode:
            try:
                flats = device.decode_chunks(chain, [it.raw for it in items], codec.nbytes)
            except CorruptChunkError as exc:
                self._name_corrupt(codec, items, name, exc)
            except UnsupportedError:
                flats = None
            if flats is not None:
                chunks = [device.to_chunk(chain, f, codec.shape, codec.dtype) for f in flats]
        if chunks is None:
            count("gpu_cpu_decodes", len(items))

            def on_cpu(item: DecodeItem) -> Any:
                try:
                    return np.ascontiguousarray(codec.decode(_host(item.raw)))
                except Exception as exc:
                    reraise_decode(name(item.key, item.inner), exc)
                    raise  # pragma: no cover

            hosts = parallel_map(on_cpu, list(items), self.settings.n_threads)
            chunks = [cupy.asarray(h) for h in hosts]
        out: list[Any] = []
        for item, chunk in zip(items, chunks, strict=True):
            if item.dest is not None:
                item.dest[...] = chunk
                chunk = item.dest
            out.append(chunk)
        return out

    def decode_grid(
        self, codec: Codec, grid: InnerGrid, dest: Any, fill: Any, name: Namer, threads: int
    ) -> bool:
        """Not here: the inner chunks of a wave go to :meth:`decode` together (one call)."""
        return False

    @staticmethod
    def _name_corrupt(
        codec: Codec, items: Sequence[DecodeItem], name: Namer, exc: CorruptChunkError
    ) -> None:
        """Raise the error of the chunk that made a wave fail, named by its key.

        nvCOMP reports a failed batch, not always which stream failed: the wave's chunks are
        decoded again on the CPU (only now, on the error path) and the first that fails is
        named. If every one decodes there, the GPU result is the fault, and says so.
        """
        for item in items:
            try:
                codec.decode(_host(item.raw))
            except Exception as cpu_exc:
                reraise_decode(name(item.key, item.inner), cpu_exc)
        first = name(items[0].key, items[0].inner)
        raise CorruptChunkError(
            f"GPU decode of a wave of {len(items)} chunks from {first} failed, yet each "
            f"decodes on the CPU: {exc}"
        ) from exc

    def encode_grid(
        self, codec: Codec, src: Any, fill: Any, write_empty: bool, threads: int
    ) -> EncodedGrid | None:
        """Not here: the inner chunks of a wave go to :meth:`encode` together (one call)."""
        return None

    def encode(self, codec: Codec, chunks: Sequence[Any]) -> list[Buf]:
        """Encode device chunks in one nvCOMP call, in CPU-readable bitstreams (or on the CPU)."""
        if not chunks:
            return []
        chain = self.chain(codec)
        if chain.gpu_encode:
            try:
                return list(device.encode_chunks(chain, chunks))
            except UnsupportedError:
                pass
        count("gpu_cpu_encodes", len(chunks))
        return [codec.encode(cupy.asnumpy(c)) for c in chunks]

    def all_equal(self, chunk: Any, fill: Any) -> bool:
        """Every element equals ``fill`` (NaN equal to NaN)."""
        return bool(device.all_fill(chunk, fill))
