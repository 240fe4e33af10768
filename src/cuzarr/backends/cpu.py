"""The CPU backend: NumPy arrays, codecs that release the GIL.

Its work runs on the process-wide pool of :mod:`cuzarr.backends.pool`.

:class:`CpuBackend` implements :class:`~cuzarr.backends.base.Backend`: chunks decode straight
into their destination where the chain and the memory layout allow (uncompressed chunks are
read straight into it), else into a per-thread scratch chunk and one strided copy; many small
zstd chunks decode in GIL-free batches.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from cuzarr import _native
from cuzarr import _zarr_compat as compat
from cuzarr.backends import recycle
from cuzarr.backends.base import (
    EACH,
    Batching,
    Codec,
    DecodeItem,
    EncodedGrid,
    InnerGrid,
    Namer,
    Op,
    reraise_decode,
)
from cuzarr.backends.fill_check import first_differs, uniform
from cuzarr.backends.grid_parts import GridPart, grid_parts, interleaved, interleaved_chunks
from cuzarr.backends.placed import box_row, read_blosc_one
from cuzarr.backends.pool import parallel_map
from cuzarr.codecs import blosc_batch, zstd_batch
from cuzarr.codecs.base import Buf, as_u8
from cuzarr.codecs.chain import ChunkCodec
from cuzarr.codecs.numcodecs_ import zstd_decode_many
from cuzarr.errors import CorruptChunkError
from cuzarr.stores.base import ChunkStore

if TYPE_CHECKING:  # config imports this module (through zarr_buffers)
    from cuzarr.config import Settings

__all__ = ["CpuBackend"]

#: Chunks per batch of the batched small-zstd path, and the largest chunk it takes (larger
#: chunks decode straight into the output, where a batch would add a copy). 16 was measured
#: best among 4..128 on two threads (overlapping reads with GIL-free decoding).
ZSTD_BATCH = 16
ZSTD_BATCH_MAX_CHUNK = 128 * 1024
ZSTD_BATCHES = Batching(size=ZSTD_BATCH, parallel=True)
#: Local reads of many such chunks take up to this many per batch, two batches per thread at
#: least (:func:`read_batch_size`): a call costs ~40 us of set-up (~70 before ABI 13). Measured
#: (2 threads, tmpfs, 8 KiB chunks, ABI 12) against batches of 16: 4,096 chunks 1.22x in 128
#: (256: 0.87x of 64's); 1,024 1.19x in 64 or 128; 128 chunks 1.05x in 32, 0.80x in one batch
#: of 128. With ABI 13: 4,096 chunks 1.11x in 128.
ZSTD_READ_BATCH_MAX = 128

#: Local reads of larger zstd chunks (over ``ZSTD_BATCH_MAX_CHUNK``) are read, decoded and
#: placed from C too (:meth:`CpuBackend.read_batch`), about this many decoded bytes a call
#: (:func:`placed_batch_size`): one call's set-up (~40 us) is then ~1 % of its decoding. Before,
#: each such chunk was read, decoded into a scratch chunk and copied by Python calls, one task
#: a chunk: read all of 512 chunks of 64^3 ``uint16`` (2 threads) 184 -> 172 ms a call.
PLACED_BATCH_BYTES = 4 * 1024 * 1024

#: Boxes of at least this many inner chunks decode at once (:meth:`CpuBackend.decode_grid`), in
#: parts (:func:`~cuzarr.backends.grid_parts.grid_parts`).
GRID_MIN = 2 * ZSTD_BATCH

class _ChunkScratch:
    """Per-thread decoded-chunk buffers keyed by shape and dtype."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        cache: dict[tuple[tuple[int, ...], str], npt.NDArray[Any]] | None = getattr(
            self._local, "cache", None
        )
        if cache is None:
            cache = self._local.cache = {}
        key = (shape, dtype.str)
        buf = cache.get(key)
        if buf is None:
            if len(cache) > 8:
                cache.clear()
            buf = cache[key] = np.empty(shape, dtype=dtype)
        return buf


def read_batch_size(n: int, threads: int) -> int:
    """Chunks per batch of a local read of ``n`` small zstd chunks on ``threads`` threads."""
    return max(ZSTD_BATCH, min(ZSTD_READ_BATCH_MAX, -(-n // (2 * max(1, threads)))))


def placed_batch_size(n: int, nbytes: int, threads: int) -> int:
    """Chunks per call of a local read of ``n`` larger zstd chunks of ``nbytes`` bytes each.

    About :data:`PLACED_BATCH_BYTES` of decoded chunks a call, at least one chunk, and at least
    two calls per thread so that every thread has work until the end.
    """
    by_bytes = max(1, PLACED_BATCH_BYTES // max(1, nbytes))
    return max(1, min(by_bytes, -(-n // (2 * max(1, threads)))))


def _grid_decoder(codec: Codec) -> Callable[..., npt.NDArray[np.bool_]] | None:
    """The batch decoder for ``codec``'s inner chunks (:meth:`CpuBackend.decode_grid`)."""
    if not isinstance(codec, ChunkCodec):
        return None
    if codec.blosc_params is not None and blosc_batch.available():
        return blosc_batch.decode_frames
    if codec.zstd_frames and zstd_batch.available():
        return zstd_batch.decode_frames
    return None


#: Chunks of at least this many bytes may be copied into a strided region of the output with
#: streaming stores (:func:`cuzarr._native.copy_array`), which write the output's memory
#: without first reading its lines into the cache. Smaller chunks are copied by NumPy
#: (bench/results/probe-512-session31-stream.md).
STREAM_PLACE_MIN = 256 * 1024

#: ... into rows (the region's last axis, contiguous) of at least this many bytes: a row this
#: long may hold a whole cache line, and only whole lines are streamed (``cz_stream_run``
#: writes a row's partial first and last lines by ordinary stores). Measured on a Zen 4 VM
#: (``bench/stream_rows.c``), a chunk copied into rows 1 KiB apart of a 256 MiB array 16 bytes
#: past a line (where NumPy's large arrays start): level with memcpy (rows of 64 bytes) to 2.2x
#: faster (512), 1.7-1.9x faster than streaming partial lines too (the helper before ABI
#: 19, which lost to NumPy's copy in rows under 512 bytes); rows on a line, 2.4-3.4x faster
#: than memcpy. Chunk by chunk into a caller's array, 1.03-1.14x a call for 64^3 uint16
#: chunks (128-byte rows) (bench/results/probe-512-session41.md).
STREAM_ROW_MIN = 64

#: ... and only where the region spans at least this many bytes of memory (from its first
#: byte to its last): a smaller output's lines may stay in the cache for the caller to read.
#: Reading 64^3 uint16 chunks into a new output and summing it, streaming was 2-3 % slower
#: for outputs of 1 and 2 MiB and 1-6 % faster from 4 MiB (that VM: 1 MiB of L2 a core).
STREAM_SPAN_MIN = 4 * 1024 * 1024

#: Alignment of the arrays :meth:`CpuBackend.empty` returns: a cache line, so a chunk's rows
#: that are a multiple of 64 bytes long start on a line and are streamed whole (NumPy's large
#: arrays start 16 bytes past one).
ALIGNMENT = 64


def place(dest: npt.NDArray[Any], chunk: npt.NDArray[Any], stream: bool) -> None:
    """``dest[...] = chunk``, with streaming stores where ``stream`` and :func:`streams` say so.

    Anything ``copy_array`` refuses (data types that differ, Python objects) is copied by
    NumPy.
    """
    if not (
        stream
        and chunk.nbytes >= STREAM_PLACE_MIN
        and streams(dest)
        and _native.copy_array(dest, chunk, streaming=True)
    ):
        dest[...] = chunk


def streams(dest: npt.NDArray[Any]) -> bool:
    """Whether a large chunk is written into ``dest`` with streaming stores.

    Where ``dest``'s rows (its last axis) are contiguous and :data:`STREAM_ROW_MIN` bytes or
    longer, and it spans :data:`STREAM_SPAN_MIN` bytes or more.
    """
    item = dest.itemsize
    rows = dest.ndim >= 1 and dest.strides[-1] == item
    if not (rows and dest.shape[-1] * item >= STREAM_ROW_MIN):
        return False
    span = item
    for n, stride in zip(dest.shape, dest.strides, strict=True):
        span += (n - 1) * abs(stride)
    return span >= STREAM_SPAN_MIN


def empty_aligned(shape: tuple[int, ...], dtype: Any) -> npt.NDArray[Any]:
    """An uninitialised C-ordered array whose first byte is :data:`ALIGNMENT`-aligned.

    A view into a slightly larger buffer (its ``base``), as ``pyfftw.empty_aligned`` makes;
    large ones recycle memory of earlier large arrays that are gone (:mod:`.recycle`). Data
    types whose items are not plain bytes (Python objects, NumPy's variable-width strings,
    subarrays) get ``np.empty``'s array.
    """
    dt = np.dtype(dtype)
    if dt.hasobject or dt.kind not in _PLAIN_KINDS or dt.subdtype is not None:
        return np.empty(shape, dt)
    nbytes = math.prod(shape) * dt.itemsize
    raw = recycle.empty(nbytes + ALIGNMENT)
    skip = -int(raw.ctypes.data) % ALIGNMENT
    flat: npt.NDArray[Any] = raw[skip : skip + nbytes].view(dt)
    return flat.reshape(shape)


#: Kinds of data types whose items are plain bytes (Booleans, numbers, dates, fixed-width
#: strings and bytes, structures).
_PLAIN_KINDS = frozenset("biufcmMSUV")


def _small_zstd(codec: Codec) -> bool:
    return codec.zstd_frames and codec.nbytes <= ZSTD_BATCH_MAX_CHUNK


class CpuBackend:
    """NumPy arrays; decoding and encoding with the chains' CPU codecs."""

    name = "cpu"
    xp = np

    def __init__(self) -> None:
        self._scratch = _ChunkScratch()
        #: id(codec) -> (codec, batched small zstd?, frame bound, decoded size): chains are
        #: immutable, and these are asked once per batch of the hot small-chunk path.
        self._zstd: dict[int, tuple[Codec, bool, int | None, int]] = {}

    def _zstd_params(self, codec: Codec) -> tuple[Codec, bool, int | None, int]:
        got = self._zstd.get(id(codec))
        if got is None or got[0] is not codec:
            got = (codec, _small_zstd(codec), codec.frame_bound, codec.nbytes)
            self._zstd[id(codec)] = got
        return got

    # ------------------------------------------------------------------ memory

    def asarray(self, value: Any) -> npt.NDArray[Any]:
        """The value as a NumPy array (no copy when it is one)."""
        return np.asarray(value)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> npt.NDArray[Any]:
        """An uninitialised array, its first byte on a cache line (:func:`empty_aligned`)."""
        return empty_aligned(shape, dtype)

    def full(self, shape: tuple[int, ...], value: Any, dtype: Any) -> npt.NDArray[Any]:
        """An array of ``value``."""
        return np.full(shape, value, dtype=dtype)

    def copy(self, array: Any, dtype: Any) -> npt.NDArray[Any]:
        """A writable copy."""
        return np.array(array, dtype=dtype, copy=True)

    # ------------------------------------------------------------------ planning

    def wave_bytes(self, settings: Settings) -> int:
        """``settings.max_bytes_in_flight``: a wave's decoded bytes are host memory."""
        return settings.max_bytes_in_flight

    def batching(self, codec: Codec, n: int, *, remote: bool, op: Op, threads: int) -> Batching:
        """One chunk per task, except many small zstd chunks: ``ZSTD_BATCH`` per task.

        Batched reads here are for local stores only: a remote store's reads are one chunk per
        task as far as the backend is concerned, and the read loop groups them into batches of
        ``get_many`` calls itself (:func:`cuzarr.engine.read.remote_batching`). Encodes batch
        one-block zstd chunks (one GIL-free call per batch,
        :meth:`~cuzarr.codecs.chain.ChunkCodec.encode_many`) for any store.

        Local reads of larger zstd chunks (where the batch helper is built) are one chunk per
        task, placed from C in groups first (``Batching.placed``, :func:`placed_batch_size`).

        Decodes and encodes (no I/O) of many light chunks (``codec.light``: a few
        microseconds of codec work each, blosc lz4 inner chunks of 8 KiB) run on one thread:
        each call holds the GIL for longer than it releases it, so a second thread only adds
        GIL handoffs (measured: 16^3 ``u2`` blosc-lz4 inner chunks decoded at 326 MB/s on one
        thread, 212 MB/s on two).

        Encodes of fewer than ``2 * ZSTD_BATCH`` such chunks (a small write) are one batch, one
        task: the GIL handoffs between two threads cost more than the second thread saves
        (measured, 2 threads, local tmpfs store: 16 chunks of 8 KiB written in 3.87 ms one per
        task, 0.93 ms as one batch; 8 of 64 KiB 2.32 / 1.48 ms; 4 of 128 KiB 1.21 / 1.03 ms).
        """
        _codec, small, bound, nbytes = self._zstd_params(codec)
        larger_zstd = bound is not None and not small and zstd_batch.available()
        if op == "read" and not remote and larger_zstd:
            return Batching(size=1, parallel=True, placed=placed_batch_size(n, nbytes, threads))
        if n < 2 * ZSTD_BATCH:
            if n > 1 and op == "encode" and (codec.batch_encodes or codec.light):
                return Batching(size=n, parallel=True)
            return EACH
        if op != "read" and codec.light:
            return Batching(size=n, parallel=False)
        if op == "encode":
            return ZSTD_BATCHES if codec.batch_encodes else EACH
        if small and not (op == "read" and remote):
            if op == "read":
                return Batching(size=read_batch_size(n, threads), parallel=True)
            return ZSTD_BATCHES
        return EACH

    def size_hint(self, codec: Codec) -> int | None:
        """The largest well-formed stored chunk, for one-frame zstd chains."""
        return self._zstd_params(codec)[2]

    def fetch(self, store: ChunkStore, keys: Sequence[str], codec: Codec) -> list[Any] | None:
        """Not here: the loops fetch on the host (the CPU's batches run in parallel anyway)."""
        return None

    def range_reads(self, store: ChunkStore, codec: Codec) -> None:
        """Not here: the shard reader reads inner chunks on the host, into host memory."""
        return None

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
        """zstd chunks of local files: read, decoded and placed from C.

        For local folders (:attr:`~cuzarr.stores.base.StoreCaps.device_reads`), chains that are
        zstd frames of a C-ordered chunk (``codec.frame_bound``), a NumPy output of the chain's
        data type and selections that are boxes (slices, of any positive step in the chunk and
        step 1 in ``out``) of the same shape on both sides. Other selections of the batch get
        -1. Each thread reads into its own scratch buffer, kept from batch to batch. A whole
        chunk over a contiguous region of ``out`` is decoded straight into it; other boxes of
        chunks of :data:`STREAM_PLACE_MIN` bytes or more are copied with streaming stores where
        ``stream`` and :func:`streams` say so for the whole of ``out`` (the helper streams only
        rows of :data:`STREAM_ROW_MIN` bytes or more; :func:`place` asks :func:`streams` of the
        chunk's region instead, which spans less of the output). One Blosc chunk with
        ``helpers``: decoded and copied by that many more threads too (:func:`read_blosc_one`).
        """
        _codec, _small, bound, nbytes = self._zstd_params(codec)
        # A chain of zstd frames (a frame bound) is not one Blosc frame: no split read.
        if bound is None and helpers > 0 and len(keys) == 1 and isinstance(codec, ChunkCodec):
            got = read_blosc_one(
                lambda n: self._scratch.get((n,), np.dtype(np.uint8)), store, codec, keys[0],
                selections[0], out, streaming=stream and streams(out), helpers=helpers,
            )
            if got is not None:
                return [got]
        if not (
            codec.shape  # 0-d arrays: the general way
            and bound is not None
            and nbytes > 0
            and store.caps.device_reads
            and type(out) is np.ndarray
            and out.dtype == codec.dtype
            and out.flags.writeable
            and zstd_batch.available()
        ):
            return None
        ndim = len(codec.shape)
        rows = [box_row(c, o, ndim) for c, o in selections]
        take = [i for i, row in enumerate(rows) if row is not None]
        status = [-1] * len(keys)
        if not take:
            return status
        boxes = np.array([rows[i] for i in take], np.int64).reshape(len(take), 4, ndim)
        paths = store.file_paths([keys[i] for i in take])
        cap = bound + 1
        scratch = self._scratch.get((cap + nbytes,), np.dtype(np.uint8))
        streaming = stream and nbytes >= STREAM_PLACE_MIN and streams(out)
        done = zstd_batch.read_boxes(
            paths, cap, codec.shape, codec.dtype.itemsize, boxes, out, scratch,
            streaming=streaming,
        ).tolist()
        for i, s in zip(take, done, strict=True):
            status[i] = s
        return status

    def read_direct(self, store: ChunkStore, key: str, codec: Codec, dest: Any) -> int | None:
        """Uncompressed chunks into a contiguous host destination: one read, no copy."""
        if not (codec.raw and dest.flags.c_contiguous and dest.dtype == codec.dtype):
            return -1
        return store.read_into(key, dest.reshape(-1).view(np.uint8))

    # ------------------------------------------------------------------ codecs

    def decode(
        self, codec: Codec, items: Sequence[DecodeItem], name: Namer
    ) -> list[npt.NDArray[Any]]:
        """Decode into each destination (or a scratch chunk); small zstd chunks in one call."""
        if len(items) <= 1:
            return [self._decode_one(codec, item, True, name) for item in items]
        if self._zstd_params(codec)[1]:
            batched = self._decode_zstd_batch(codec, items)
            if batched is not None:
                return batched
        # A lone chunk without a destination may use this thread's scratch chunk; several
        # need a buffer each.
        shared = len(items) == 1
        return [self._decode_one(codec, item, shared, name) for item in items]

    def _decode_one(
        self, codec: Codec, item: DecodeItem, shared: bool, name: Namer
    ) -> npt.NDArray[Any]:
        raw, dest, key, inner, stream = item
        try:
            if dest is None:
                if codec.direct:
                    tmp = (
                        self._scratch.get(codec.shape, codec.dtype)
                        if shared
                        else np.empty(codec.shape, codec.dtype)
                    )
                    codec.decode_into(raw, tmp)
                    return tmp
                return codec.decode(raw)
            if dest.flags.c_contiguous or not codec.direct:
                codec.decode_into(raw, dest)
            elif codec.raw:
                # Uncompressed: the codec views the stored bytes (checking their size), copied
                # once into the strided region (through a scratch chunk it was two copies: 12
                # of 53 ms of copying in a whole read of 512 uncompressed 512 KiB chunks).
                place(dest, codec.decode(raw), stream)
            else:
                tmp = self._scratch.get(codec.shape, codec.dtype)
                codec.decode_into(raw, tmp)
                place(dest, tmp, stream)
            return dest  # type: ignore[no-any-return]
        except Exception as exc:
            reraise_decode(name(key, inner), exc)
            raise  # pragma: no cover - reraise_decode always raises

    def decode_grid(
        self, codec: Codec, grid: InnerGrid, dest: Any, fill: Any, name: Namer, threads: int
    ) -> bool:
        """Decode a box of Blosc or zstd inner chunks in C loops, one strided copy per part.

        Taken for chains whose stored bytes are one Blosc frame (``codec.blosc_params``) or
        zstd frames (``codec.zstd_frames``) of the chunk when the batch helper is built
        (:func:`_grid_decoder`): per part (a block of whole inner chunks,
        :func:`~cuzarr.backends.grid_parts.grid_parts`), the frames are decoded into a
        contiguous scratch buffer by one GIL-free call (``blosc_batch`` /
        ``zstd_batch.decode_frames``), empty inner chunks filled, and the part copied into
        ``dest`` by one NumPy assignment through a view that interleaves the grid and chunk
        axes. Parts run on ``threads`` threads. A frame the batch refuses is decoded on its
        own, which names what is wrong.
        """
        n = len(grid.starts)
        decode_frames = _grid_decoder(codec) if n >= GRID_MIN else None
        if (
            decode_frames is None
            or not isinstance(dest, np.ndarray)
            or dest.dtype != codec.dtype
            or not dest.flags.writeable
        ):
            return False
        shape, g, nbytes = codec.shape, grid.grid, codec.nbytes
        assert dest.shape == tuple(a * c for a, c in zip(g, shape, strict=True))
        parts = grid_parts(g, shape, nbytes, threads)

        def one(part: GridPart) -> None:
            lo, hi = part.lo, part.hi
            m = hi - lo
            stage = self._scratch.get((m * nbytes,), np.dtype(np.uint8))
            starts, lengths = grid.starts[lo:hi], grid.lengths[lo:hi]
            present = starts >= 0
            rows = np.flatnonzero(present)
            ok = decode_frames(
                grid.data, starts[rows], lengths[rows], stage, rows * nbytes, nbytes
            )
            chunks = stage.view(codec.dtype).reshape((m, *shape))
            if len(rows) < m:
                chunks[~present] = fill
            for j in rows[~ok].tolist():
                start, length = int(starts[j]), int(lengths[j])
                inner = tuple(
                    o + int(x)
                    for o, x in zip(grid.origin, np.unravel_index(lo + j, g), strict=True)
                )
                item = DecodeItem(grid.data[start : start + length], chunks[j], grid.key, inner)
                self._decode_one(codec, item, False, name)
            target = interleaved(dest[part.region], part.counts, shape, writeable=True)
            target[...] = interleaved_chunks(chunks, part.counts, shape)

        parallel_map(one, parts, threads)
        return True

    def encode_grid(
        self, codec: Codec, src: Any, fill: Any, write_empty: bool, threads: int
    ) -> EncodedGrid | None:
        """Encode a box of Blosc inner chunks: one strided copy and one C loop per part.

        Taken for chains whose stored bytes are one Blosc frame (``codec.blosc_params``) when
        the batch helper is built and the box holds at least :data:`GRID_MIN` inner chunks.
        Per part (:func:`~cuzarr.backends.grid_parts.grid_parts`), the inner chunks are
        copied into a contiguous buffer in C order of the box, those equal to the fill value
        found (zarr's rule, :meth:`all_equal`, asked only of chunks whose first element does
        not already differ from it), and the rest compressed by one GIL-free call
        (:func:`~cuzarr.codecs.blosc_batch.encode_rows`): numcodecs' frames, byte for byte.
        """
        params = codec.blosc_params if isinstance(codec, ChunkCodec) else None
        if (
            params is None
            or not blosc_batch.available()
            or not isinstance(src, np.ndarray)
            or src.dtype != codec.dtype
        ):
            return None
        shape, nbytes = codec.shape, codec.nbytes
        g = tuple(s // c for s, c in zip(src.shape, shape, strict=True))
        n = math.prod(g)
        if n < GRID_MIN or src.shape != tuple(a * c for a, c in zip(g, shape, strict=True)):
            return None
        # The stored byte order must be the in-memory one (``direct``): checked by blosc_params.
        parts = grid_parts(g, shape, nbytes, threads)
        stride = nbytes + blosc_batch.BLOSC_OVERHEAD
        rows = np.empty((n, stride), np.uint8)
        flat_rows = rows.reshape(-1)
        sizes = np.zeros(n, np.int64)

        def one(part: GridPart) -> None:
            lo, m = part.lo, part.hi - part.lo
            stage = self._scratch.get((m, *shape), codec.dtype)
            source = interleaved(src[part.region], part.counts, shape, writeable=False)
            interleaved_chunks(stage, part.counts, shape)[...] = source
            keep = np.ones(m, bool)
            if not write_empty:
                first = stage.reshape(m, -1)[:, 0]
                try:
                    with np.errstate(invalid="ignore"):
                        differs = np.asarray((first == first) & (first != fill), bool)
                except (TypeError, ValueError):
                    differs = np.zeros(m, bool)
                for j in np.flatnonzero(~differs).tolist():
                    keep[j] = not self.all_equal(stage[j], fill)
            todo = np.flatnonzero(keep)
            u8 = stage.reshape(-1).view(np.uint8)
            got = blosc_batch.encode_rows(
                u8, todo * nbytes, nbytes, params, flat_rows, (lo + todo) * stride
            )
            sizes[lo + todo] = got
            for j in todo[got <= 0].tolist():
                # c-blosc refused: numcodecs reports why (or encodes it after all)
                blob = as_u8(codec.encode(stage[j]))
                rows[lo + j, : blob.nbytes] = blob
                sizes[lo + j] = blob.nbytes

        parallel_map(one, parts, threads)
        return EncodedGrid(rows, sizes)

    def _decode_zstd_batch(
        self, codec: Codec, items: Sequence[DecodeItem]
    ) -> list[npt.NDArray[Any]] | None:
        """Single zstd frames decoded in one GIL-free call; ``None``: decode one by one.

        Any frame longer than a well-formed one, or a batch that fails (a bad frame, or a
        valid chunk of several frames), goes back to one by one, which names the culprit.
        """
        _codec, _small, bound, nbytes = self._zstd_params(codec)
        frames: list[Buf] = [item[0] for item in items]
        if bound is not None and any(
            (len(f) if type(f) is bytes else memoryview(f).nbytes) > bound for f in frames
        ):
            return None
        try:
            decoded = zstd_decode_many(frames, nbytes)
        except CorruptChunkError:
            return None
        out: list[npt.NDArray[Any]] = []
        dtype, shape = codec.dtype, codec.shape
        for j, item in enumerate(items):
            chunk = np.frombuffer(decoded[j], dtype).reshape(shape)
            dest = item[1]
            if dest is not None:
                dest[...] = chunk
                chunk = dest
            out.append(chunk)
        # Each view keeps its segment, and each segment the buffer it lies in, alive.
        return out

    def encode(self, codec: Codec, chunks: Sequence[Any]) -> list[Buf]:
        """Encode the chunks with the chain's CPU codecs (one-block zstd: in one call)."""
        return codec.encode_many(chunks)

    def all_equal(self, chunk: Any, fill: Any) -> bool:
        """zarr's empty-chunk rule, with a cheap exit when the first element differs."""
        if chunk.size and first_differs(chunk[(0,) * chunk.ndim], fill):
            return False
        decided = uniform(chunk, fill)
        return compat.all_equal(chunk, fill) if decided is None else decided
