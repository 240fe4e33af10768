"""Every CUDA call of cuzarr: nvCOMP batched decode/encode, pinned uploads, CuPy kernels, kvikio.

Imported only by the GPU backend (:mod:`cuzarr.gpu.backend`) and the GPU-only codecs, when they
run. Host-side work (stream location, Blosc parsing, packing, descriptors) is in
:mod:`cuzarr.gpu.plan`, :mod:`cuzarr.gpu.streams` and :mod:`cuzarr.gpu.blosc_frames`, tested on
the CPU.

:func:`decode_chunks` decodes a wave of stored chunks of one chain: crc32c checked and wrappers
stripped on the host, raw streams packed into one pinned buffer and copied to the device once,
all streams decoded in one nvCOMP call per algorithm, Blosc blocks unshuffled in one kernel
launch; :func:`to_chunk` swaps bytes and transposes. :func:`encode_chunks` is the reverse, in
the bitstreams CPU libraries read.

UNVERIFIED facts (nothing here has run on a GPU yet; the device simulator, tests/gpu_sim,
assumes the permissive answer; ``bench/gpu_check/probe_api.py`` checks each, by the tag in
brackets):

- [sync-free-config] a ``decompression_config`` built from ``compression_config(sizes)``
  decodes RAW streams CPU libraries wrote, without synchronizing the stream.
- [decode-out-sizes] ``buffer_sizes`` of a batch decoded into ``out=`` reports decoded sizes.
- [alignment] no algorithm needs more than ``ALIGN`` (16) bytes of buffer alignment.
- [raw-zstd-checksum] RAW zstd decodes frames that carry a content checksum.
- [raw-zstd-nosize] RAW zstd decodes frames without a content size.
- [raw-lz4] RAW LZ4 decodes numcodecs' block once its 4-byte size prefix is stripped.
- [raw-deflate] RAW Deflate decodes zlib/gzip bodies with header and trailer stripped.
- [raw-encode] RAW encode of Zstd/LZ4/Deflate yields streams CPU libraries decode.
- [native] NVCOMP_NATIVE encode/decode round-trips ANS, Bitcomp, Cascaded, GDeflate.
- [as-array] ``cupy.asarray`` of a decoded nvCOMP array is a zero-copy uint8 device view.
- [kvikio] ``kvikio.CuFile(path, "r").pread(buf, size, offset).get()`` fills a CuPy buffer;
  ``kvikio.defaults.is_compat_mode_preferred()`` tells whether GDS is off.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Sequence
from typing import Any

import cupy
import numpy as np
import numpy.typing as npt
from nvidia import nvcomp

from cuzarr.codecs.base import Buf
from cuzarr.codecs.crc32c_ import Crc32cCodec
from cuzarr.diagnostics import count
from cuzarr.errors import CorruptChunkError, CuzarrError, UnsupportedError
from cuzarr.gpu import blosc_frames, streams
from cuzarr.gpu.files import ALIGN, DeviceChunk, aligned_slots, span
from cuzarr.gpu.kernels import SOURCE
from cuzarr.gpu.plan import MAX_SCATTER_DIMS, GpuChain, pack

__all__ = [
    "all_fill",
    "decode_chunks",
    "encode_chunks",
    "gpu_only_decode",
    "gpu_only_encode",
    "to_chunk",
]

#: Most streams in one nvCOMP call.
MAX_BATCH = 65536
#: nvCOMP's safe chunk size for LZ4/Snappy/Cascaded/Bitcomp/ANS RAW encode (gpu-facts.md).
MAX_RAW_ENCODE = 16 * 1024 * 1024
_THREADS = 256
_ALGORITHM = {
    "zstd": "Zstd",
    "lz4": "LZ4",
    "zlib": "Deflate",
    "gzip": "Deflate",
    "snappy": "Snappy",
}

xp = cupy

# ---------------------------------------------------------------------- nvCOMP and kernels

_local = threading.local()


def _codec(algorithm: str, kind: str = "RAW", **options: Any) -> Any:
    """A per-thread ``nvcomp.Codec`` (codec objects are not thread-safe)."""
    cache: dict[tuple[Any, ...], Any] | None = getattr(_local, "codecs", None)
    if cache is None:
        cache = _local.codecs = {}
    key = (algorithm, kind, tuple(sorted(options.items())))
    codec = cache.get(key)
    if codec is None:
        codec = cache[key] = nvcomp.Codec(
            algorithm=algorithm,
            bitstream_kind=getattr(nvcomp.BitstreamKind, kind),
            cuda_stream=cupy.cuda.get_current_stream().ptr,
            **options,
        )
    return codec


def _as_u8(arr: Any) -> Any:
    """A decoded nvCOMP array as a flat CuPy uint8 view [as-array]."""
    return cupy.asarray(arr).view(cupy.uint8).reshape(-1)


def decode_batch(
    algorithm: str,
    src: Any,
    offsets: Sequence[int],
    sizes: Sequence[int],
    out_sizes: Sequence[int],
) -> tuple[Any, list[int]]:
    """Decode raw streams carved from one device buffer, one nvCOMP call per ``MAX_BATCH``.

    Stream ``i`` is ``src[offsets[i] : offsets[i] + sizes[i]]`` (aligned starts: see
    :func:`upload`) and decodes to exactly ``out_sizes[i]`` bytes. The outputs are written
    into one device buffer cuzarr owns (``out=``: no allocation by nvCOMP, no result that
    dies with its batch), sized from the chunk specs, with a decompression config built from
    those sizes so that nvCOMP makes no synchronizing size query [sync-free-config].

    Returns
    -------
    (cupy.ndarray, list of int)
        The output buffer (uint8) and where each stream's bytes start in it.

    Raises
    ------
    CorruptChunkError
        When nvCOMP fails on a stream or a stream decodes to another size (``chunk #i``).
    """
    n = len(sizes)
    starts = aligned_slots(out_sizes, ALIGN)
    out = cupy.empty(max(1, span(starts, out_sizes)), cupy.uint8)
    if n == 0:
        return out, starts
    codec = _codec(algorithm)
    todo = [i for i in range(n) if out_sizes[i] > 0]
    for lo in range(0, len(todo), MAX_BATCH):
        part = todo[lo : lo + MAX_BATCH]
        want = [int(out_sizes[i]) for i in part]
        srcs = nvcomp.as_arrays(src, [int(offsets[i]) for i in part], [int(sizes[i]) for i in part])
        outs = nvcomp.as_arrays(out, [starts[i] for i in part], want)
        config = codec.decompression_config(codec.compression_config(want))
        try:
            got = codec.decode(srcs, out=outs, decompression_config=config).buffer_sizes
        except (RuntimeError, ValueError) as exc:
            raise CorruptChunkError(f"nvCOMP {algorithm} decode failed: {exc}") from exc
        for i, g, w in zip(part, got, want, strict=True):
            if int(g) != w:
                raise CorruptChunkError(f"chunk #{i}: decoded {int(g)} bytes, expected {w}")
    return out, starts


def encode_batch(
    algorithm: str, inputs: Sequence[Any], kind: str = "RAW", **options: Any
) -> list[npt.NDArray[np.uint8]]:
    """Encode flat uint8 device arrays with one nvCOMP call; the streams as host bytes.

    The outputs go to one device buffer cuzarr owns, sized by nvCOMP's bound for each input,
    and come back to the host in one copy [raw-encode].
    """
    if not inputs:
        return []
    codec = _codec(algorithm, kind, **options)
    arrays = [nvcomp.as_array(a) for a in inputs]
    bounds = [int(codec.get_max_comp_buffer_size(a)) for a in arrays]
    starts = aligned_slots(bounds, ALIGN)
    out = cupy.empty(max(1, span(starts, bounds)), cupy.uint8)
    outs = nvcomp.as_arrays(out, starts, bounds)
    config = codec.compression_config([int(a.size) for a in inputs])
    sizes = codec.encode(nvcomp.as_arrays(arrays), out=outs, compression_config=config).buffer_sizes
    host = cupy.asnumpy(out)
    return [host[s : s + int(n)] for s, n in zip(starts, sizes, strict=True)]


@functools.cache
def _kernel(name: str) -> Any:
    return cupy.RawModule(code=SOURCE, options=("--std=c++14",)).get_function(name)


def _launch(name: str, total: int, *args: Any) -> None:
    if total <= 0:
        return
    blocks = min(65535 * 8, (total + _THREADS - 1) // _THREADS)
    _kernel(name)((blocks,), (_THREADS,), args)


def _table_launch(
    name: str,
    src: Any,
    dst: Any,
    table: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    *extra: Any,
) -> None:
    starts = np.zeros(len(sizes), np.int64)
    if len(sizes) > 1:
        np.cumsum(sizes[:-1], out=starts[1:])
    total = int(sizes.sum())
    _launch(
        name,
        total,
        src,
        dst,
        cupy.asarray(table),
        cupy.asarray(starts),
        np.int64(len(sizes)),
        np.int64(total),
        *extra,
    )


def byteswap(data: Any, itemsize: int) -> Any:
    """Reverse the bytes of each element of a flat uint8 device array."""
    out = cupy.empty_like(data)
    _launch("cuzarr_byteswap", data.size, data, out, np.int64(data.size), np.int64(itemsize))
    return out


# ---------------------------------------------------------------------- pinned staging


class _Pinned:
    """A growing pinned host buffer per thread for one H2D copy per wave."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self, nbytes: int) -> npt.NDArray[np.uint8]:
        buf: npt.NDArray[np.uint8] | None = getattr(self._local, "buf", None)
        if buf is None or buf.nbytes < nbytes:
            mem = cupy.cuda.alloc_pinned_memory(max(nbytes, 1 << 20))
            buf = np.frombuffer(mem, np.uint8, count=max(nbytes, 1 << 20))
            self._local.buf = buf
            self._local.mem = mem
        return buf


_pinned = _Pinned()


def upload(parts: Sequence[Buf]) -> tuple[Any, list[int], list[int]]:
    """Pack host byte strings into pinned memory and copy them to the device in one go.

    Returns the device buffer and each part's offset (``ALIGN``-aligned, as nvCOMP wants its
    inputs) and size.
    """
    sizes = [memoryview(p).nbytes for p in parts]
    total = sum((n + ALIGN - 1) // ALIGN * ALIGN for n in sizes)
    batch = pack(parts, align=ALIGN, out=_pinned.get(total))
    dev = cupy.empty(max(1, batch.data.nbytes), cupy.uint8)
    if batch.data.nbytes:
        dev[: batch.data.nbytes].set(batch.data)
    return dev, batch.offsets.tolist(), sizes


def copy_ranges(src: Any, dst: Any, ranges: Sequence[tuple[int, int, int]]) -> None:
    """Copy byte ranges ``(src_offset, dst_offset, nbytes)`` between flat uint8 device arrays.

    One launch of the scatter kernel (each range a one-dimensional box).
    """
    ranges = [r for r in ranges if r[2] > 0]
    if not ranges:
        return
    width = 3 + 3 * MAX_SCATTER_DIMS
    table = np.zeros((len(ranges), width), np.int64)
    table[:, 3 : 3 + MAX_SCATTER_DIMS] = 1
    for i, (s, d, n) in enumerate(ranges):
        table[i, 0], table[i, 1], table[i, 2] = s, d, n
        table[i, 3 + MAX_SCATTER_DIMS - 1] = n
        table[i, 3 + 2 * MAX_SCATTER_DIMS - 1] = 1
        table[i, 3 + 3 * MAX_SCATTER_DIMS - 1] = 1
    _table_launch("cuzarr_scatter", src, dst, table, table[:, 2].copy(), np.int64(1))


def _decode_device_chunks(chain: GpuChain, chunks: Sequence[DeviceChunk], nbytes: int) -> list[Any]:
    """Decode chunks already in device memory (one :func:`read_files` wave)."""
    comp = chain.compressor
    buf = chunks[0].buffer  # one read_files wave: one buffer
    offsets: list[int] = []
    lengths: list[int] = []
    for i, c in enumerate(chunks):
        try:
            if comp is None:
                if c.size != nbytes:
                    raise CorruptChunkError(f"stored {c.size} bytes, expected {nbytes}")
                offsets.append(c.offset)
                continue
            # The head holds the whole prefix (locate refuses a shorter one).
            stream = streams.locate(comp, c.head, nbytes)
        except CuzarrError as exc:
            raise type(exc)(f"chunk #{i}: {exc}") from exc
        offsets.append(c.offset + stream.offset)
        lengths.append(c.size - stream.offset)
    if comp is None:
        return [buf[o : o + nbytes] for o in offsets]
    out, starts = decode_batch(_ALGORITHM[comp], buf, offsets, lengths, [nbytes] * len(chunks))
    return [out[s : s + nbytes] for s in starts]


# ---------------------------------------------------------------------- chunk decode


def _strip_crc(chain: GpuChain, raw: Buf) -> Buf:
    """Verify and strip the chain's crc32c checksums, on the host (counted: no GPU path yet)."""
    data = raw
    for _ in range(chain.crc32c):
        data = Crc32cCodec().decode(data, None)
    if chain.crc32c:
        count("gpu_host_crc32c")
    return data


def decode_chunks(chain: GpuChain, raws: Sequence[Any], nbytes: int) -> list[Any]:
    """Decode stored chunks of one chain to flat uint8 device arrays (stored element order).

    Host bytes: wrappers are checked and stripped on the host, the raw streams packed into
    one pinned buffer and uploaded in one copy, then decoded with one nvCOMP call per
    algorithm. :class:`DeviceChunk` s (device reads) are decoded where they are.

    Raises
    ------
    CorruptChunkError
        For a chunk whose wrapper, frame or decoded size is wrong (the message has the index
        of the chunk in ``raws``; the engine adds the key).
    """
    comp = chain.compressor
    if raws and isinstance(raws[0], DeviceChunk):
        return _decode_device_chunks(chain, raws, nbytes)
    if comp == "blosc":
        return _decode_blosc(chain, raws, nbytes)
    parts: list[Buf] = []
    for i, raw in enumerate(raws):
        try:
            data = _strip_crc(chain, raw)
            if comp is None:
                if memoryview(data).nbytes != nbytes:
                    raise CorruptChunkError(
                        f"stored {memoryview(data).nbytes} bytes, expected {nbytes}"
                    )
                parts.append(data)
            else:
                stream = streams.locate(comp, data, nbytes)
                parts.append(memoryview(data)[stream.offset : stream.offset + stream.length])
        except CuzarrError as exc:
            raise type(exc)(f"chunk #{i}: {exc}") from exc
    dev, offsets, sizes = upload(parts)
    if comp is None:
        return [dev[o : o + nbytes] for o in offsets]
    out, starts = decode_batch(_ALGORITHM[comp], dev, offsets, sizes, [nbytes] * len(parts))
    return [out[s : s + nbytes] for s in starts]


def _decode_blosc(chain: GpuChain, raws: Sequence[Buf], nbytes: int) -> list[Any]:
    """Decode the Blosc frames of a wave.

    Every compressed stream of every frame is packed (aligned) and uploaded in one copy,
    decoded with one nvCOMP call per algorithm, moved (with the stored streams) into place
    with one copy launch, then unshuffled with one launch per shuffle kind.
    """
    parts: list[Buf] = []
    stored: list[tuple[int, int]] = []  # (part, destination) of streams copied as they are
    by_algo: dict[str, list[tuple[int, int, int]]] = {}  # algo -> (part, destination, size)
    byte_rows: list[list[int]] = []
    bit_rows: list[list[int]] = []
    for i, raw in enumerate(raws):
        try:
            data = _strip_crc(chain, raw)
            frame = blosc_frames.parse_frame(data, nbytes)
            if frame.header.compressor == "blosclz" and not frame.header.memcpyed:
                raise UnsupportedError("blosclz streams have no GPU decoder")
        except CuzarrError as exc:
            raise type(exc)(f"chunk #{i}: {exc}") from exc
        mv = memoryview(data).cast("B")
        base = i * nbytes
        name = "copy" if frame.header.memcpyed else frame.header.compressor
        for s in frame.streams:
            start, size = int(s["src_offset"]), int(s["src_size"])
            body = mv[start : start + size]
            dst = base + int(s["dst_offset"])
            if s["stored"]:
                stored.append((len(parts), dst))
                parts.append(body)
                continue
            if name == "zlib":
                loc = streams.locate_zlib(body)
                body = body[loc.offset : loc.offset + loc.length]
            by_algo.setdefault(_ALGORITHM[name], []).append((len(parts), dst, int(s["dst_size"])))
            parts.append(body)
        if frame.needs_unshuffle:
            rows = byte_rows if frame.header.shuffle else bit_rows
            for b, bsize in enumerate(frame.block_sizes.tolist()):
                off = base + b * frame.header.blocksize
                rows.append([off, off, bsize, frame.header.typesize])
    dev, offsets, sizes = upload(parts)
    shuffled = cupy.empty(max(1, len(raws) * nbytes), cupy.uint8)
    copy_ranges(dev, shuffled, [(offsets[p], d, sizes[p]) for p, d in stored])
    for algo, items in by_algo.items():
        out, starts = decode_batch(
            algo,
            dev,
            [offsets[p] for p, _, _ in items],
            [sizes[p] for p, _, _ in items],
            [n for _, _, n in items],
        )
        copy_ranges(out, shuffled, [(s, d, n) for s, (_, d, n) in zip(starts, items, strict=True)])
    out = shuffled
    if byte_rows or bit_rows:
        out = shuffled.copy()
        for kernel, rows in (
            ("cuzarr_byte_unshuffle", byte_rows),
            ("cuzarr_bit_unshuffle", bit_rows),
        ):
            if rows:
                table = np.array(rows, np.int64)
                _table_launch(kernel, shuffled, out, table, table[:, 2].copy())
    return [out[i * nbytes : (i + 1) * nbytes] for i in range(len(raws))]


def to_chunk(chain: GpuChain, flat: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
    """Decoded bytes (stored element order) as a chunk-shaped CuPy array."""
    if chain.swap_itemsize:
        flat = byteswap(flat, chain.swap_itemsize)
    stored_shape = chain.stored_shape or shape
    arr = flat.view(dtype)
    arr = arr.reshape(stored_shape)
    if chain.axes is not None:
        arr = arr.transpose(chain.axes)
    return arr


def all_fill(chunk: Any, fill: Any) -> Any:
    """Whether every element of a device chunk equals ``fill`` (NaN equal to NaN)."""
    if isinstance(fill, float) and math.isnan(fill):
        return cupy.isnan(chunk).all()
    return (chunk == fill).all()


def encode_chunks(chain: GpuChain, chunks: Sequence[Any]) -> list[npt.NDArray[np.uint8]]:
    """Encode chunk-shaped device arrays in the chain's CPU-readable bitstreams (host bytes)."""
    flats = []
    for c in chunks:
        arr = c
        if chain.axes is not None:
            arr = arr.transpose(tuple(int(i) for i in np.argsort(chain.axes)))
        flat = cupy.ascontiguousarray(arr).view(cupy.uint8).reshape(-1)
        if chain.swap_itemsize:
            flat = byteswap(flat, chain.swap_itemsize)
        flats.append(flat)
    comp = chain.compressor
    if comp is None:
        blobs = [cupy.asnumpy(f) for f in flats]
    else:
        if comp in ("lz4",) and any(f.size > MAX_RAW_ENCODE for f in flats):
            raise UnsupportedError("LZ4 chunks over 16 MiB are encoded on the CPU")
        raws = encode_batch(_ALGORITHM[comp], flats)
        blobs = []
        for f, r in zip(flats, raws, strict=True):
            decoded = cupy.asnumpy(f) if comp in ("zlib", "gzip") else None
            wrapped = streams.wrap(comp, r, decoded, int(f.size))
            blobs.append(np.frombuffer(wrapped, np.uint8))
    for _ in range(chain.crc32c):
        blobs = [np.frombuffer(bytes(Crc32cCodec().encode(b)), np.uint8) for b in blobs]
    if chain.crc32c:
        count("gpu_host_crc32c", len(blobs))  # computed on the host: no GPU path yet
    return blobs


# ---------------------------------------------------------------------- GPU-only codecs


def gpu_only_decode(
    algorithm: str, config: dict[str, Any], data: bytes, decoded_nbytes: int | None
) -> bytes:
    """Decode one nvCOMP-native chunk (``cuzarr.<format>`` codecs) [native]."""
    dev = cupy.asarray(np.frombuffer(data, np.uint8))
    codec = _codec(algorithm, "NVCOMP_NATIVE", **config)
    out = _as_u8(codec.decode(nvcomp.as_array(dev)))
    if decoded_nbytes is not None and out.size != decoded_nbytes:
        raise CorruptChunkError(
            f"{algorithm} chunk decoded to {out.size} bytes, expected {decoded_nbytes}"
        )
    return bytes(cupy.asnumpy(out))


def gpu_only_encode(algorithm: str, config: dict[str, Any], data: bytes) -> bytes:
    """Encode one chunk in nvCOMP's native container (``cuzarr.<format>`` codecs) [native]."""
    dev = cupy.asarray(np.frombuffer(data, np.uint8))
    codec = _codec(algorithm, "NVCOMP_NATIVE", **config)
    return bytes(cupy.asnumpy(_as_u8(codec.encode(nvcomp.as_array(dev)))))
