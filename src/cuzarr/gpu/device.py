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

UNVERIFIED facts (nothing here has run on a GPU yet; ``bench/gpu_check/probe_api.py`` checks
each, by the tag in brackets):

- [decode-list] ``Codec.decode`` accepts a Python list of device arrays and returns a list;
  the fallback wraps the list with ``nvcomp.as_arrays``.
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
import os
import threading
from collections.abc import Sequence
from typing import Any

import cupy
import numpy as np
import numpy.typing as npt
from nvidia import nvcomp

from cuzarr.codecs.base import Buf
from cuzarr.codecs.crc32c_ import Crc32cCodec
from cuzarr.errors import CorruptChunkError, CuzarrError, UnsupportedError
from cuzarr.gpu import blosc_frames, streams
from cuzarr.gpu.kernels import SOURCE
from cuzarr.gpu.plan import GpuChain, pack

__all__ = [
    "all_fill",
    "decode_chunks",
    "encode_chunks",
    "gdsinfo",
    "gpu_only_decode",
    "gpu_only_encode",
    "read_file_into",
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


def decode_batch(algorithm: str, inputs: Sequence[Any]) -> list[Any]:
    """Decode device byte arrays (raw streams) with one nvCOMP call; CuPy uint8 results.

    [decode-list]: ``Codec.decode`` is called with a list; if it refuses one, with
    ``nvcomp.as_arrays(list)``.
    """
    if not inputs:
        return []
    codec = _codec(algorithm)
    arrays = [nvcomp.as_array(a) for a in inputs]
    try:
        out = codec.decode(arrays)
    except TypeError:
        out = codec.decode(nvcomp.as_arrays(arrays))
    return [_as_u8(o) for o in out]


def encode_batch(
    algorithm: str, inputs: Sequence[Any], kind: str = "RAW", **options: Any
) -> list[Any]:
    """Encode device byte arrays with one nvCOMP call; CuPy uint8 results [raw-encode]."""
    if not inputs:
        return []
    codec = _codec(algorithm, kind, **options)
    arrays = [nvcomp.as_array(a) for a in inputs]
    try:
        out = codec.encode(arrays)
    except TypeError:
        out = codec.encode(nvcomp.as_arrays(arrays))
    return [_as_u8(o) for o in out]


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


def upload(parts: Sequence[Buf]) -> tuple[Any, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Pack host byte strings into pinned memory and copy them to the device in one go."""
    sizes = np.array([memoryview(p).nbytes for p in parts], np.int64)
    total = int(((sizes + 7) // 8 * 8).sum())
    batch = pack(parts, out=_pinned.get(total))
    dev = cupy.empty(batch.data.nbytes, cupy.uint8)
    dev.set(batch.data)
    return dev, batch.offsets, batch.sizes


# ---------------------------------------------------------------------- chunk decode


class _Prepared:
    """Host-side state of one chunk in a wave."""

    __slots__ = ("blosc", "part", "raw", "stream")

    def __init__(self) -> None:
        self.raw: Buf | None = None
        self.stream: streams.RawStream | None = None
        self.blosc: blosc_frames.BloscFrame | None = None
        self.part: int = -1


def _strip_crc(chain: GpuChain, raw: Buf) -> Buf:
    data = raw
    for _ in range(chain.crc32c):
        data = Crc32cCodec().decode(data, None)
    return data


def decode_chunks(chain: GpuChain, raws: Sequence[Buf], nbytes: int) -> list[Any]:
    """Decode stored chunks of one chain to flat uint8 device arrays (stored element order).

    Raises
    ------
    CorruptChunkError
        For a chunk whose wrapper, frame or decoded size is wrong (the message has the index
        of the chunk in ``raws``; the engine adds the key).
    """
    preps: list[_Prepared] = []
    host_parts: list[Buf] = []
    comp = chain.compressor
    for i, raw in enumerate(raws):
        p = _Prepared()
        try:
            data = _strip_crc(chain, raw)
            if comp is None:
                if memoryview(data).nbytes != nbytes:
                    raise CorruptChunkError(
                        f"stored {memoryview(data).nbytes} bytes, expected {nbytes}"
                    )
            elif comp == "blosc":
                p.blosc = blosc_frames.parse_frame(data, nbytes)
                if p.blosc.header.compressor == "blosclz":
                    raise UnsupportedError("blosclz streams have no GPU decoder")
            else:
                p.stream = streams.locate(comp, data, nbytes)
        except CuzarrError as exc:
            raise type(exc)(f"chunk #{i}: {exc}") from exc
        p.raw = data
        p.part = len(host_parts)
        if p.stream is not None:
            # Pack the raw stream itself, so that every nvCOMP input starts 8-byte aligned.
            host_parts.append(memoryview(data)[p.stream.offset : p.stream.offset + p.stream.length])
        else:
            host_parts.append(data)
        preps.append(p)
    dev, offsets, _sizes = upload(host_parts)
    outs: list[Any] = [None] * len(preps)
    if comp is None:
        return [dev[int(offsets[p.part]) : int(offsets[p.part]) + nbytes] for p in preps]
    if comp != "blosc":
        algo = _ALGORITHM[comp]
        inputs = []
        for p in preps:
            assert p.stream is not None
            start = int(offsets[p.part])
            inputs.append(dev[start : start + p.stream.length])
        for lo in range(0, len(inputs), MAX_BATCH):
            decoded = decode_batch(algo, inputs[lo : lo + MAX_BATCH])
            for j, d in enumerate(decoded):
                if d.size != nbytes:
                    raise CorruptChunkError(
                        f"chunk #{lo + j}: decoded {d.size} bytes, expected {nbytes}"
                    )
                outs[lo + j] = d
        return outs
    return _decode_blosc(preps, dev, offsets, nbytes)


def _decode_blosc(
    preps: list[_Prepared], dev: Any, offsets: npt.NDArray[np.int64], nbytes: int
) -> list[Any]:
    """Decode the Blosc frames of a wave.

    Compressed streams go to nvCOMP (one call per algorithm), stored ones are copied, then one
    unshuffle launch per shuffle kind.
    """
    shuffled = cupy.empty(len(preps) * nbytes, cupy.uint8)
    by_algo: dict[str, list[tuple[Any, int, int]]] = {}
    byte_rows: list[list[int]] = []
    bit_rows: list[list[int]] = []
    for i, p in enumerate(preps):
        f = p.blosc
        assert f is not None
        base = int(offsets[p.part])
        dst0 = i * nbytes
        name = "copy" if f.header.memcpyed else f.header.compressor
        for s in f.streams:
            src = dev[
                base + int(s["src_offset"]) : base + int(s["src_offset"]) + int(s["src_size"])
            ]
            d0 = dst0 + int(s["dst_offset"])
            if s["stored"]:
                shuffled[d0 : d0 + int(s["dst_size"])] = src
                continue
            if name == "zlib":
                assert p.raw is not None
                start = int(s["src_offset"])
                loc = streams.locate_zlib(memoryview(p.raw)[start : start + int(s["src_size"])])
                src = src[loc.offset : loc.offset + loc.length]
            by_algo.setdefault(_ALGORITHM[name], []).append((src, d0, int(s["dst_size"])))
        if f.needs_unshuffle:
            rows = byte_rows if f.header.shuffle else bit_rows
            for b, bsize in enumerate(f.block_sizes.tolist()):
                off = dst0 + b * f.header.blocksize
                rows.append([off, off, bsize, f.header.typesize])
    for algo, items in by_algo.items():
        for lo in range(0, len(items), MAX_BATCH):
            chunk = items[lo : lo + MAX_BATCH]
            decoded = decode_batch(algo, [src for src, _, _ in chunk])
            for (_, d0, size), d in zip(chunk, decoded, strict=True):
                if d.size != size:
                    raise CorruptChunkError(
                        f"blosc stream decoded to {d.size} bytes, expected {size}"
                    )
                shuffled[d0 : d0 + size] = d
    out = shuffled
    if byte_rows or bit_rows:
        out = shuffled.copy()
        for name, rows in (
            ("cuzarr_byte_unshuffle", byte_rows),
            ("cuzarr_bit_unshuffle", bit_rows),
        ):
            if rows:
                table = np.array(rows, np.int64)
                _table_launch(name, shuffled, out, table, table[:, 2].copy())
    return [out[i * nbytes : (i + 1) * nbytes] for i in range(len(preps))]


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
            wrapped = streams.wrap(comp, cupy.asnumpy(r), decoded, int(f.size))
            blobs.append(np.frombuffer(wrapped, np.uint8))
    for _ in range(chain.crc32c):
        blobs = [np.frombuffer(bytes(Crc32cCodec().encode(b)), np.uint8) for b in blobs]
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


# ---------------------------------------------------------------------- I/O report


def gdsinfo() -> dict[str, Any]:
    """Whether kvikio reads go through GPUDirect Storage, and its settings [kvikio]."""
    import kvikio
    import kvikio.defaults

    info: dict[str, Any] = {"kvikio": getattr(kvikio, "__version__", "?")}
    try:
        info["compat_mode"] = bool(kvikio.defaults.is_compat_mode_preferred())
    except Exception as exc:  # the probe reports what failed
        info["compat_mode_error"] = f"{type(exc).__name__}: {exc}"
    info["gds"] = info.get("compat_mode") is False
    info["threads"] = os.environ.get("KVIKIO_NTHREADS")
    return info


def read_file_into(path: str, out: Any, offset: int = 0) -> int:
    """Read ``out.nbytes`` bytes of a local file at ``offset`` into a device buffer [kvikio]."""
    import kvikio

    with kvikio.CuFile(path, "r") as f:
        return int(f.pread(out, out.nbytes, offset).get())
