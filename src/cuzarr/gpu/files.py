"""Local files read straight into device memory with kvikio, and the GPU I/O report.

:func:`read_files` reads a wave of chunk files into one device buffer (GPUDirect Storage where
the system has it, kvikio's compatibility mode otherwise), :func:`read_file_exact` one file
into its destination; both detect a file replaced while it was read. Also the buffer layout
shared with :mod:`cuzarr.gpu.device` (``ALIGN``, :func:`aligned_slots`) and the report behind
``cuzarr.gpu_info()``. Imported only by the GPU backend.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cupy

from cuzarr.codecs.base import Buf
from cuzarr.errors import CorruptChunkError, UnsupportedError
from cuzarr.gpu import streams
from cuzarr.gpu.plan import GpuChain
from cuzarr.stores.local import file_version

__all__ = [
    "ALIGN",
    "HEAD_BYTES",
    "DeviceChunk",
    "aligned_slots",
    "device_readable",
    "device_report",
    "identity",
    "gdsinfo",
    "read_file_exact",
    "read_file_into",
    "read_files",
    "span",
    "stream_prefix",
    "tail_bytes",
]

#: Alignment of every nvCOMP input and output (>= any algorithm's required alignment).
ALIGN = 16


def aligned_slots(sizes: Sequence[int], align: int) -> list[int]:
    """Start of each of ``sizes`` bytes laid out back to back, every start ``align``-aligned."""
    starts, pos = [], 0
    for n in sizes:
        starts.append(pos)
        pos += (int(n) + align - 1) // align * align
    return starts


def span(starts: Sequence[int], sizes: Sequence[int]) -> int:
    """Bytes from the first slot's start to the end of the last."""
    return int(starts[-1]) + int(sizes[-1]) if len(starts) else 0


#: Bytes of each file also read on the host, for its header (a zstd frame header is <= 18).
HEAD_BYTES = 32


def device_readable(chain: GpuChain) -> bool:
    """Whether chunks of ``chain`` can be read straight into device memory.

    The host then holds only their first and last bytes: enough for every wrapper the GPU
    path strips (zstd frame header, numcodecs' LZ4 prefix, zlib/gzip header and trailer,
    crc32c checksums, checked on the device). Blosc frames are parsed on the host, whole.
    """
    return chain.gpu_decode and chain.compressor in (None, *streams.TRAILER_BYTES)


def tail_bytes(chain: GpuChain) -> int:
    """Bytes at the end of each chunk the host needs: trailers and crc32c checksums."""
    trailer = streams.TRAILER_BYTES.get(chain.compressor, 0) if chain.compressor else 0
    return trailer + 4 * chain.crc32c


def stream_prefix(compressor: str | None, head: Buf, size: int) -> int | None:
    """Bytes before the raw stream of a ``size``-byte stored chunk (crc32c trailers excluded).

    ``None`` when ``head`` is too short to tell (a gzip header with long optional fields):
    such a chunk is read on the host. A malformed wrapper gives 0 here and is named when
    the chunk is decoded.
    """
    if compressor is None:
        return 0
    try:
        return streams.prefix_length(compressor, head, size)
    except UnsupportedError:
        return None
    except CorruptChunkError:
        return 0


@dataclass(frozen=True, slots=True, eq=False)
class DeviceChunk:
    """A stored chunk in device memory: ``buffer[offset : offset + size]``.

    ``head`` holds its first bytes (at least ``HEAD_BYTES``, or all of them), ``tail`` its
    last bytes (at least :func:`tail_bytes` of its chain), both on the host; either may be
    the whole chunk.
    """

    buffer: Any
    offset: int
    size: int
    head: Buf
    tail: Buf = b""

    def host(self) -> bytes:
        """The stored bytes on the host (error paths and CPU fallbacks only)."""
        return bytes(cupy.asnumpy(self.buffer[self.offset : self.offset + self.size]))


def identity(path: str) -> tuple[int, int, int, int]:
    """The version of the file at ``path`` (as the local store's open objects report it).

    Raises ``FileNotFoundError`` if it is gone.
    """
    return file_version(os.stat(path))


def read_files(paths: Sequence[str], chain: GpuChain) -> list[DeviceChunk] | None:
    """Read whole files into one device buffer with kvikio (GDS, or its compatibility mode).

    Each file's first ``HEAD_BYTES`` and last :func:`tail_bytes` bytes are read on the host
    first (for the wrapper checks); then every file lands in its own slot, placed so that its
    raw stream (after the wrapper's prefix) starts ``ALIGN``-aligned, all reads issued before
    any is awaited, so kvikio's threads run them together.

    Returns
    -------
    list of DeviceChunk, or None
        ``None`` when a file vanished or changed while it was read (writers replace files
        atomically: a new inode, size or mtime), or a header was too long to place it; the
        caller then reads on the host, where one descriptor sees one version.
    """
    import kvikio

    try:
        before = [identity(p) for p in paths]
        need = tail_bytes(chain)
        ends = [_head_and_tail(p, st[2], need) for p, st in zip(paths, before, strict=True)]
    except FileNotFoundError:
        return None
    sizes = [b[2] for b in before]
    pads: list[int] = []
    for (head, _), n in zip(ends, sizes, strict=True):
        prefix = stream_prefix(chain.compressor, head, n - 4 * chain.crc32c)
        if prefix is None:
            return None
        pads.append((-prefix) % ALIGN)
    slots = [p + n for p, n in zip(pads, sizes, strict=True)]
    starts = aligned_slots(slots, ALIGN)
    buf = cupy.empty(max(1, span(starts, slots)), cupy.uint8)
    files: list[Any] = []
    futures: list[Any] = []
    try:
        for path, start, pad, n in zip(paths, starts, pads, sizes, strict=True):
            cf = kvikio.CuFile(path, "r")
            files.append(cf)
            futures.append(cf.pread(buf[start + pad : start + pad + n], n, 0))
        got = [int(f.get()) for f in futures]
        after = [identity(p) for p in paths]
    except FileNotFoundError:
        return None
    finally:
        for cf in files:
            cf.close()
    if got != sizes or after != before:
        return None
    return [
        DeviceChunk(buf, start + pad, n, head, tail)
        for start, pad, n, (head, tail) in zip(starts, pads, sizes, ends, strict=True)
    ]


def _head_and_tail(path: str, size: int, tail: int) -> tuple[bytes, bytes]:
    """The first ``HEAD_BYTES`` and the last ``tail`` bytes of a file of ``size`` bytes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        head = os.pread(fd, HEAD_BYTES, 0)
        end = os.pread(fd, min(tail, size), size - min(tail, size)) if tail else b""
    finally:
        os.close(fd)
    return head, end


def read_file_exact(path: str, out: Any) -> int | None:
    """Read a file into a flat uint8 device array if it has exactly ``out.size`` bytes.

    Returns its size (``None``: missing; ``-1``: it changed while read, read it on the host).
    Only a file of ``out.size`` bytes is read; the caller checks the size.
    """
    try:
        before = identity(path)
    except FileNotFoundError:
        return None
    if before[2] != out.size:
        return before[2]
    try:
        n = read_file_into(path, out)
        after = identity(path)
    except FileNotFoundError:
        return -1
    return before[2] if n == before[2] and after == before else -1


# ---------------------------------------------------------------------- the I/O report


def gdsinfo() -> dict[str, Any]:
    """Whether kvikio reads go through GPUDirect Storage, and its settings [kvikio].

    ``gds`` is true when kvikio is not in compatibility mode (reads by cuFile, GDS where the
    file system allows); ``bounce_buffer_bytes``, ``threads``, ``task_size`` are kvikio's
    settings (``kvikio.defaults.get``), ``None`` where this kvikio does not report one.
    """
    import kvikio
    import kvikio.defaults

    info: dict[str, Any] = {"kvikio": getattr(kvikio, "__version__", "?")}
    try:
        info["compat_mode"] = bool(kvikio.defaults.is_compat_mode_preferred())
    except Exception as exc:  # the report says what failed
        info["compat_mode_error"] = f"{type(exc).__name__}: {exc}"
    info["gds"] = info.get("compat_mode") is False
    for key, name in (
        ("bounce_buffer_bytes", "bounce_buffer_size"),
        ("threads", "num_threads"),
        ("task_size", "task_size"),
    ):
        try:
            info[key] = int(kvikio.defaults.get(name))
        except Exception:  # an older or newer kvikio without that setting
            info[key] = None
    return info


def _nvcomp() -> Any:
    from nvidia import nvcomp

    return nvcomp


def device_report() -> dict[str, Any]:
    """The device, CUDA, nvCOMP and kvikio in use (for ``cuzarr.gpu_info``)."""
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"]
    return {
        "device": name.decode() if isinstance(name, bytes) else str(name),
        "devices": int(cupy.cuda.runtime.getDeviceCount()),
        "cuda_runtime": int(cupy.cuda.runtime.runtimeGetVersion()),
        "cuda_driver": int(cupy.cuda.runtime.driverGetVersion()),
        "cupy": cupy.__version__,
        "nvcomp": getattr(_nvcomp(), "__version__", "?"),
        "io": gdsinfo(),
    }


def read_file_into(path: str, out: Any, offset: int = 0) -> int:
    """Read ``out.nbytes`` bytes of a local file at ``offset`` into a device buffer [kvikio]."""
    import kvikio

    with kvikio.CuFile(path, "r") as f:
        return int(f.pread(out, out.nbytes, offset).get())
