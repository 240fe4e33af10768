"""Checksums on the device: crc32c of stored chunks, gzip's CRC-32 of decoded ones.

:func:`checksums` computes the CRCs of many byte ranges of one device buffer in one launch
of ``cuzarr_crc`` (the arithmetic: :mod:`cuzarr.gpu.crc`). Reads verify a wave's crc32c
checksums with it (:func:`verify_crc32c`); writes compute them where the encoded bytes are
(:func:`append_crc32c`), continuing on the host only over the few wrapper bytes around each
stream. Imported only by :mod:`cuzarr.gpu.device`: it imports CuPy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import crc32c as crc32c_lib
import cupy
import numpy as np
import numpy.typing as npt

from cuzarr.codecs.crc32c_ import checksum
from cuzarr.errors import CorruptChunkError
from cuzarr.gpu import crc, streams
from cuzarr.gpu.files import DeviceChunk
from cuzarr.gpu.launch import launch
from cuzarr.gpu.plan import GpuChain

__all__ = ["append_crc32c", "checksums", "verify_crc32c"]


def checksums(
    buf: Any, ranges: Sequence[tuple[int, int, int]], poly: int = crc.CRC32C
) -> list[int]:
    """CRCs of byte ranges of a flat uint8 device array, in one kernel launch.

    Parameters
    ----------
    buf : cupy.ndarray
        The bytes (uint8, flat).
    ranges : sequence of (offset, nbytes, register)
        Each range, and the register its CRC starts from (``crc.register_after(0)`` for a
        CRC of the range alone; ``crc.register_after(c)`` to continue a CRC ``c``).
    poly : int
        ``crc.CRC32C`` or ``crc.CRC32``.

    Returns
    -------
    list of int
        The finished CRC of each range (one small upload of the tables, one download).
    """
    if not ranges:
        return []
    rows = np.array(ranges, np.int64).reshape(-1, 3)
    starts, total = crc.segment_plan(rows[:, 1].tolist())
    table, x2n = crc.tables(poly)
    # One upload: the rows, their segment starts, then the two uint32 tables.
    ints = np.concatenate([rows.reshape(-1), starts])
    host = np.concatenate([ints.view(np.uint8), table.view(np.uint8), x2n.view(np.uint8)])
    dev = cupy.asarray(host)
    a, b, c = rows.size * 8, ints.size * 8, ints.size * 8 + table.nbytes
    out = cupy.zeros(len(rows), cupy.uint32)
    launch(
        "cuzarr_crc",
        total,
        buf,
        out,
        dev[:a].view(cupy.int64),
        dev[a:b].view(cupy.int64),
        dev[b:c].view(cupy.uint32),
        dev[c:].view(cupy.uint32),
        np.int64(len(rows)),
        np.int64(total),
        np.int64(crc.SEGMENT),
        np.uint32(poly),
    )
    return [int(v) for v in cupy.asnumpy(out)]


def verify_crc32c(chunks: Sequence[DeviceChunk], n_crc: int) -> None:
    """Check the chain's crc32c checksums of chunks in one device buffer (one launch).

    Checksum ``j`` (0: the outermost) covers all but the last ``4 * (j + 1)`` bytes and is
    stored in the 4 bytes after them, little-endian, as the CPU codec writes it.
    """
    ranges: list[tuple[int, int, int]] = []
    stored: list[int] = []
    for c in chunks:
        tail = memoryview(c.tail).cast("B")
        for j in range(n_crc):
            end = len(tail) - 4 * j
            stored.append(int.from_bytes(tail[end - 4 : end], "little"))
            ranges.append((c.offset, c.size - 4 * (j + 1), crc.register_after(0)))
    for k, (got, want) in enumerate(zip(checksums(chunks[0].buffer, ranges), stored, strict=True)):
        if got != want:
            raise CorruptChunkError(
                f"chunk #{k // n_crc}: crc32c checksum mismatch: stored {want:#010x}, "
                f"computed {got:#010x}"
            )


def append_crc32c(
    chain: GpuChain,
    blobs: Sequence[npt.NDArray[np.uint8]],
    buf: Any,
    starts: Sequence[int],
    sizes: Sequence[int],
) -> list[npt.NDArray[np.uint8]]:
    """Append the chain's crc32c checksums to encoded chunks whose streams are in ``buf``.

    Stream ``i`` (``buf[starts[i] : starts[i] + sizes[i]]``) is ``blobs[i]`` less its
    wrapper's prefix and trailer: its CRC is computed on the device, continuing the prefix's
    CRC, and continued on the host over the trailer (at most 8 bytes) and over each inner
    checksum for nested ``crc32c`` codecs.
    """
    comp = chain.compressor
    heads = [
        0 if comp is None else streams.prefix_length(comp, b, b.nbytes) for b in blobs
    ]
    ranges = [
        (s, n, crc.register_after(checksum(b[:h])))
        for b, s, n, h in zip(blobs, starts, sizes, heads, strict=True)
    ]
    out = []
    for b, h, n, value in zip(blobs, heads, sizes, checksums(buf, ranges), strict=True):
        value = int(crc32c_lib.crc32c(b[h + n :], value))
        parts = [b]
        for _ in range(chain.crc32c):
            le = value.to_bytes(4, "little")
            parts.append(np.frombuffer(le, np.uint8))
            value = int(crc32c_lib.crc32c(le, value))
        out.append(np.concatenate(parts))
    return out
