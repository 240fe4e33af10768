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

__all__ = [
    "ALIGN",
    "DEVICE_READ_FORMATS",
    "HEAD_BYTES",
    "DeviceChunk",
    "aligned_slots",
    "device_report",
    "gdsinfo",
    "read_file_exact",
    "read_file_into",
    "read_files",
    "span",
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


#: Formats whose chunks are read straight into device memory: the host needs only their first
#: bytes (a zstd frame header, numcodecs' LZ4 size prefix; nothing for uncompressed chunks).
DEVICE_READ_FORMATS: dict[str | None, int] = {None: 0, "zstd": 0, "lz4": 4}
#: Bytes of each file also read on the host, for its header (a zstd frame header is <= 18).
HEAD_BYTES = 32


@dataclass(frozen=True, slots=True, eq=False)
class DeviceChunk:
    """A stored chunk read into device memory: ``buffer[offset : offset + size]``.

    ``head`` holds its first bytes (up to ``HEAD_BYTES``), read on the host.
    """

    buffer: Any
    offset: int
    size: int
    head: bytes

    def host(self) -> bytes:
        """The stored bytes on the host (error paths and CPU fallbacks only)."""
        return bytes(cupy.asnumpy(self.buffer[self.offset : self.offset + self.size]))


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def read_files(paths: Sequence[str], compressor: str | None) -> list[DeviceChunk] | None:
    """Read whole files into one device buffer with kvikio (GDS, or its compatibility mode).

    Every file lands in its own slot, placed so that its raw stream (after the format's
    prefix, ``DEVICE_READ_FORMATS``) starts ``ALIGN``-aligned; all reads are issued before
    any is awaited, so kvikio's threads run them together. Each file's first bytes are also
    read on the host, for the header checks.

    Returns
    -------
    list of DeviceChunk, or None
        ``None`` when a file vanished or changed while it was read (writers replace files
        atomically: a new inode, size or mtime); the caller then reads on the host, where one
        descriptor sees one version.
    """
    import kvikio

    try:
        before = [_identity(os.stat(p)) for p in paths]
    except FileNotFoundError:
        return None
    sizes = [b[2] for b in before]
    pad = (-DEVICE_READ_FORMATS[compressor]) % ALIGN
    starts = aligned_slots([n + pad for n in sizes], ALIGN)
    buf = cupy.empty(max(1, span(starts, [n + pad for n in sizes])), cupy.uint8)
    heads: list[bytes] = []
    files: list[Any] = []
    futures: list[Any] = []
    try:
        for path, start, n in zip(paths, starts, sizes, strict=True):
            with open(path, "rb") as fh:
                heads.append(fh.read(HEAD_BYTES))
            cf = kvikio.CuFile(path, "r")
            files.append(cf)
            futures.append(cf.pread(buf[start + pad : start + pad + n], n, 0))
        got = [int(f.get()) for f in futures]
        after = [_identity(os.stat(p)) for p in paths]
    except FileNotFoundError:
        return None
    finally:
        for cf in files:
            cf.close()
    if got != sizes or after != before:
        return None
    return [
        DeviceChunk(buf, start + pad, n, head)
        for start, n, head in zip(starts, sizes, heads, strict=True)
    ]


def read_file_exact(path: str, out: Any) -> int | None:
    """Read a file into a flat uint8 device array if it has exactly ``out.size`` bytes.

    Returns its size (``None``: missing; ``-1``: it changed while read, read it on the host).
    Only a file of ``out.size`` bytes is read; the caller checks the size.
    """
    try:
        before = _identity(os.stat(path))
    except FileNotFoundError:
        return None
    if before[2] != out.size:
        return before[2]
    try:
        n = read_file_into(path, out)
        after = _identity(os.stat(path))
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
