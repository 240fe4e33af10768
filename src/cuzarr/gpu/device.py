"""Every CUDA call of cuzarr: nvCOMP batched decode/encode, pinned uploads, CuPy kernels, kvikio.

Imported only by the GPU backend (:mod:`cuzarr.gpu.backend`) and the GPU-only codecs, when they
run. Host-side work (stream location, Blosc parsing, packing, descriptors) is in
:mod:`cuzarr.gpu.plan`, :mod:`cuzarr.gpu.streams` and :mod:`cuzarr.gpu.blosc_frames`, tested on
the CPU.

:func:`decode_chunks` decodes a wave of stored chunks of one chain: stored chunks packed into one
pinned buffer and copied to the device once (or read there by kvikio), crc32c checksums
verified on the device in one kernel launch, wrappers checked on the host from each chunk's
first and last bytes, all raw streams decoded in one nvCOMP call per algorithm, Blosc blocks
unshuffled in one kernel launch; :func:`to_chunk` swaps bytes and transposes.
:func:`encode_chunks` is the reverse, in the bitstreams CPU libraries read.

Facts checked on a GPU (H200, nvCOMP 6.0.0, 2026-12-04; ``bench/gpu_check/probe_api.py``,
``probe_errors.py``, ``probe_c_faults.py``; results in bench/results/gpu-check-2026-12-04),
by the tag in brackets:

- [decode-status] nvCOMP's batched C API (:mod:`cuzarr.gpu.nvcomp_batched`) reports each
  stream's decoded size (short decodes are caught by it; the statuses stayed
  ``nvcompSuccess`` for every bad stream tried). The Python API's ``Codec.decode`` reported
  the capacities it was given ([decode-out-sizes] was false) and blocked when given a config
  built from sizes ([sync-free-config] was false): decoding no longer goes through it.
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

Not protected against (measured, tests/gpu/nvcomp_limits.py): some corrupt zstd frames decode
with success and their full size, and some corrupt deflate and truncated zstd streams make
nvCOMP's kernels fault, which loses the CUDA context; a crc32c codec in the chain is checked
before any decode.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import cupy
import numpy as np
import numpy.typing as npt
from nvidia import nvcomp

from cuzarr.backends.fill_check import fill_test
from cuzarr.codecs.base import Buf
from cuzarr.codecs.crc32c_ import Crc32cCodec
from cuzarr.diagnostics import count
from cuzarr.errors import CorruptChunkError, CuzarrError, UnsupportedError
from cuzarr.gpu import blosc_frames, crc, nvcomp_batched, streams, zstd_frames
from cuzarr.gpu.checksums import append_crc32c, checksums, verify_crc32c
from cuzarr.gpu.files import ALIGN, DeviceChunk, aligned_slots, span, stream_prefix
from cuzarr.gpu.launch import byteswap, copy_ranges, launch, table_launch
from cuzarr.gpu.pinned import upload
from cuzarr.gpu.plan import GpuChain

__all__ = [
    "all_fill",
    "checksums",
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
    into one device buffer cuzarr owns (no allocation by nvCOMP, no result that dies with its
    batch). nvCOMP's batched C API (:mod:`cuzarr.gpu.nvcomp_batched`) decodes them and reports
    each stream's status and decoded size; both are checked [decode-status].

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
    src_base, out_base = int(src.data.ptr), int(out.data.ptr)
    todo = [i for i in range(n) if out_sizes[i] > 0]
    for lo in range(0, len(todo), MAX_BATCH):
        part = todo[lo : lo + MAX_BATCH]
        want = [int(out_sizes[i]) for i in part]
        try:
            statuses, got = nvcomp_batched.decompress(
                algorithm,
                [src_base + int(offsets[i]) for i in part],
                [int(sizes[i]) for i in part],
                [out_base + starts[i] for i in part],
                want,
            )
        except nvcomp_batched.NvcompCallError as exc:
            raise CorruptChunkError(f"nvCOMP {algorithm} decode failed: {exc}") from exc
        for i, status, g, w in zip(part, statuses.tolist(), got.tolist(), want, strict=True):
            if status != 0:
                name = nvcomp_batched.STATUS_NAMES.get(status, str(status))
                raise CorruptChunkError(f"chunk #{i}: nvCOMP {algorithm} decode failed: {name}")
            if g != w:
                raise CorruptChunkError(f"chunk #{i}: decoded {g} bytes, expected {w}")
    return out, starts


class EncodedBatch(NamedTuple):
    """A batch encoded on the device: its streams there and on the host."""

    #: The device buffer holding every stream (uint8).
    device: Any
    #: Where each stream starts in ``device``, and its length.
    starts: list[int]
    sizes: list[int]
    #: The same streams, copied to the host in one go.
    host: list[npt.NDArray[np.uint8]]


def encode_batch(
    algorithm: str, inputs: Sequence[Any], kind: str = "RAW", **options: Any
) -> EncodedBatch:
    """Encode flat uint8 device arrays with one nvCOMP call; the streams on device and host.

    The outputs go to one device buffer cuzarr owns, sized by nvCOMP's bound for each input,
    and come back to the host in one copy [raw-encode].
    """
    if not inputs:
        return EncodedBatch(cupy.empty(1, cupy.uint8), [], [], [])
    codec = _codec(algorithm, kind, **options)
    arrays = [nvcomp.as_array(a) for a in inputs]
    bounds = [int(codec.get_max_comp_buffer_size(a)) for a in arrays]
    starts = aligned_slots(bounds, ALIGN)
    out = cupy.empty(max(1, span(starts, bounds)), cupy.uint8)
    outs = nvcomp.as_arrays(out, starts, bounds)
    config = codec.compression_config([int(a.size) for a in inputs])
    got = codec.encode(nvcomp.as_arrays(arrays), out=outs, compression_config=config)
    sizes = [int(n) for n in got.buffer_sizes]
    host = cupy.asnumpy(out)
    streams_ = [host[s : s + n] for s, n in zip(starts, sizes, strict=True)]
    return EncodedBatch(out, starts, sizes, streams_)


def _one_buffer(chunks: Sequence[DeviceChunk], prefixes: Sequence[int]) -> list[DeviceChunk]:
    """The chunks in one device buffer, each raw stream ``ALIGN``-aligned.

    A wave read or uploaded in one piece is that already and stays where it is; chunks from
    several buffers (shards read one by one) are copied into one, one copy launch per source
    buffer, so that the wave is still one nvCOMP call.
    """
    first = chunks[0].buffer
    if all(
        c.buffer is first and (c.offset + p) % ALIGN == 0
        for c, p in zip(chunks, prefixes, strict=True)
    ):
        return list(chunks)
    pads = [(-p) % ALIGN for p in prefixes]
    slots = [pad + c.size for pad, c in zip(pads, chunks, strict=True)]
    starts = aligned_slots(slots, ALIGN)
    buf = cupy.empty(max(1, span(starts, slots)), cupy.uint8)
    by_source: dict[int, tuple[Any, list[tuple[int, int, int]]]] = {}
    for c, start, pad in zip(chunks, starts, pads, strict=True):
        by_source.setdefault(id(c.buffer), (c.buffer, []))[1].append(
            (c.offset, start + pad, c.size)
        )
    for source, ranges in by_source.values():
        copy_ranges(source, buf, ranges)
    return [
        DeviceChunk(buf, start + pad, c.size, c.head, c.tail)
        for c, start, pad in zip(chunks, starts, pads, strict=True)
    ]


def _decode_device_chunks(chain: GpuChain, chunks: Sequence[DeviceChunk], nbytes: int) -> list[Any]:
    """Decode stored chunks in device memory (read there by kvikio, or uploaded).

    Their crc32c checksums are checked on the device, their wrappers on the host from their
    first and last bytes; gzip's CRC-32 of the decoded bytes is checked on the device too.
    """
    comp = chain.compressor
    n_crc = chain.crc32c
    prefixes: list[int] = []
    for i, c in enumerate(chunks):
        try:
            if c.size < 4 * n_crc or len(memoryview(c.tail)) < 4 * n_crc:
                raise CorruptChunkError(
                    f"crc32c: {c.size} bytes is too short to hold {n_crc} checksum(s)"
                )
            prefix = stream_prefix(comp, c.head, c.size - 4 * n_crc)
            if prefix is None:
                raise UnsupportedError(f"{comp} header longer than the bytes read on the host")
        except CuzarrError as exc:
            raise type(exc)(f"chunk #{i}: {exc}") from exc
        prefixes.append(prefix)
    chunks = _one_buffer(chunks, prefixes)
    buf = chunks[0].buffer
    if n_crc:
        verify_crc32c(chunks, n_crc)
    offsets: list[int] = []
    located: list[streams.RawStream] = []
    for i, c in enumerate(chunks):
        body = c.size - 4 * n_crc
        try:
            if comp is None:
                if body != nbytes:
                    raise CorruptChunkError(f"stored {body} bytes, expected {nbytes}")
                offsets.append(c.offset)
                continue
            tail = memoryview(c.tail).cast("B")
            stream = streams.locate_parts(comp, c.head, tail[: len(tail) - 4 * n_crc], body, nbytes)
        except CuzarrError as exc:
            raise type(exc)(f"chunk #{i}: {exc}") from exc
        offsets.append(c.offset + stream.offset)
        located.append(stream)
    if comp is None:
        return [buf[o : o + nbytes] for o in offsets]
    if comp == "zstd":
        _walk_zstd_frames(buf, [c.head for c in chunks], offsets, located)
    lengths = [s.length for s in located]
    out, starts = decode_batch(_ALGORITHM[comp], buf, offsets, lengths, [nbytes] * len(chunks))
    if comp == "gzip":
        decoded = checksums(out, [(s, nbytes, crc.register_after(0)) for s in starts], crc.CRC32)
        for i, (got, stream) in enumerate(zip(decoded, located, strict=True)):
            if got != stream.crc32:
                raise CorruptChunkError(f"chunk #{i}: gzip stream: CRC-32 mismatch")
    return [out[s : s + nbytes] for s in starts]


def _walk_zstd_frames(
    buf: Any, heads: Sequence[Buf], offsets: Sequence[int], located: Sequence[streams.RawStream]
) -> None:
    """Check that each zstd frame's blocks end where its chunk does, in one launch.

    nvCOMP's decoder can fault the CUDA context on a truncated frame (zstd_frames); a frame
    that fails the walk is a corrupt chunk, one followed by more bytes goes to the CPU.
    """
    rows = np.empty((len(offsets), 3), np.int64)
    for i, (head, offset, stream) in enumerate(zip(heads, offsets, located, strict=True)):
        first = _of_chunk(i, zstd_frames.header_length, memoryview(head).cast("B"))
        rows[i] = (offset + first, offset + stream.length, int(stream.zstd_checksum))
    verdicts = cupy.zeros(len(offsets), cupy.int64)
    launch("cuzarr_zstd_walk", len(offsets), buf, cupy.asarray(rows), verdicts, np.int64(len(rows)))
    for i, verdict in enumerate(verdicts.get().tolist()):
        _zstd_verdict(i, verdict)


def _of_chunk(i: int, fn: Callable[[memoryview], int], frame: memoryview) -> int:
    """``fn(frame)``, a ``CorruptChunkError`` it raises named as chunk ``i``'s."""
    try:
        return fn(frame)
    except CorruptChunkError as exc:
        raise CorruptChunkError(f"chunk #{i}: {exc}") from exc


def _zstd_verdict(i: int, verdict: int) -> None:
    """Raise for chunk ``i`` what a walk's verdict means (nothing for ``OK``)."""
    if verdict == zstd_frames.BROKEN:
        raise CorruptChunkError(
            f"chunk #{i}: zstd frame: its blocks do not end where the chunk does"
            " (truncated or damaged)"
        )
    if verdict == zstd_frames.MORE:
        raise UnsupportedError(f"chunk #{i}: bytes follow the zstd frame: decoded on the CPU")


# ---------------------------------------------------------------------- chunk decode


def _strip_crc(chain: GpuChain, raw: Buf) -> Buf:
    """Verify and strip crc32c checksums of a Blosc chunk on the host (counted).

    Blosc frames are parsed on the host, whole, so their checksums are checked there.
    """
    data = raw
    for _ in range(chain.crc32c):
        data = Crc32cCodec().decode(data, None)
    if chain.crc32c:
        count("gpu_host_crc32c")
    return data


def _on_device(chain: GpuChain, raws: Sequence[Any]) -> list[DeviceChunk]:
    """The stored chunks of a wave in device memory: host bytes packed and uploaded once.

    Each host chunk is placed so that its raw stream (after the wrapper's prefix) starts
    ``ALIGN``-aligned; chunks already on the device (kvikio reads) stay where they are.
    """
    hosts = [i for i, r in enumerate(raws) if not isinstance(r, DeviceChunk)]
    out: list[Any] = list(raws)
    if not hosts:
        return out
    leads = []
    for i in hosts:
        n = memoryview(raws[i]).nbytes
        leads.append(stream_prefix(chain.compressor, raws[i], n - 4 * chain.crc32c) or 0)
    dev, offsets, sizes = upload([raws[i] for i in hosts], leads)
    for i, offset, size in zip(hosts, offsets, sizes, strict=True):
        out[i] = DeviceChunk(dev, offset, size, raws[i], raws[i])
    return out


def decode_chunks(chain: GpuChain, raws: Sequence[Any], nbytes: int) -> list[Any]:
    """Decode stored chunks of one chain to flat uint8 device arrays (stored element order).

    Host bytes are packed into one pinned buffer and uploaded in one copy; chunks already in
    device memory (:class:`DeviceChunk`, kvikio reads) are decoded where they are. Checksums
    are verified on the device, wrappers checked on the host, then one nvCOMP call per
    algorithm decodes every raw stream.

    Raises
    ------
    CorruptChunkError
        For a chunk whose checksum, wrapper, frame or decoded size is wrong (the message has
        the index of the chunk in ``raws``; the engine adds the key).
    """
    if chain.compressor == "blosc":
        hosts = [r.host() if isinstance(r, DeviceChunk) else r for r in raws]
        return _decode_blosc(chain, hosts, nbytes)
    if not raws:
        return []
    return _decode_device_chunks(chain, _on_device(chain, raws), nbytes)


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
            elif name == "zstd":  # walked on the host here, as _walk_zstd_frames does
                _zstd_verdict(i, _of_chunk(i, zstd_frames.walk_frame, body))
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
                table_launch(kernel, shuffled, out, table, table[:, 2].copy())
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
    """Whether every element of a device chunk is ``fill`` by zarr's rule (a device bool).

    The CPU's rule (:func:`cuzarr.backends.fill_check.fill_test`: NaN equals NaN; for floats a
    fill of zero compares bit patterns, so -0.0 is not 0.0) on CuPy arrays; ``==`` for what it
    does not decide.
    """
    test = fill_test(chunk.dtype, fill)
    if test is None:
        return (chunk == fill).all()
    data = chunk if test.view is None else chunk.view(test.view)
    return cupy.isnan(data).all() if test.target is None else (data == test.target).all()


def _packed(flats: Sequence[Any]) -> tuple[Any, list[int], list[int]]:
    """Flat device arrays copied into one device buffer: the buffer, each start and size."""
    sizes = [int(f.size) for f in flats]
    starts = aligned_slots(sizes, ALIGN)
    buf = cupy.empty(max(1, span(starts, sizes)), cupy.uint8)
    for f, start, n in zip(flats, starts, sizes, strict=True):
        buf[start : start + n] = f
    return buf, starts, sizes


def encode_chunks(chain: GpuChain, chunks: Sequence[Any]) -> list[npt.NDArray[np.uint8]]:
    """Encode chunk-shaped device arrays in the chain's CPU-readable bitstreams (host bytes).

    Checksums are computed on the device where the bytes are: gzip's CRC-32 of each chunk,
    and the crc32c of each stored chunk (the raw stream on the device, continued on the host
    over the few wrapper bytes around it).
    """
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
        buf, starts, sizes = _packed(flats)
        host = cupy.asnumpy(buf)
        blobs = [host[s : s + n] for s, n in zip(starts, sizes, strict=True)]
    else:
        if comp in ("lz4",) and any(f.size > MAX_RAW_ENCODE for f in flats):
            raise UnsupportedError("LZ4 chunks over 16 MiB are encoded on the CPU")
        enc = encode_batch(_ALGORITHM[comp], flats)
        buf, starts, sizes = enc.device, enc.starts, enc.sizes
        crc32s: list[int | None] = [None] * len(flats)
        if comp == "gzip":
            packed, at, ns = _packed(flats)
            ranges = [(s, n, crc.register_after(0)) for s, n in zip(at, ns, strict=True)]
            crc32s = list(checksums(packed, ranges, crc.CRC32))
        blobs = []
        for f, r, c32 in zip(flats, enc.host, crc32s, strict=True):
            decoded = cupy.asnumpy(f) if comp == "zlib" else None  # Adler-32 on the host
            wrapped = streams.wrap(comp, r, decoded, int(f.size), crc32=c32)
            blobs.append(np.frombuffer(wrapped, np.uint8))
    if chain.crc32c:
        blobs = append_crc32c(chain, blobs, buf, starts, sizes)
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
