"""Inner chunks of local shards read straight into device memory with kvikio.

:class:`DeviceShardReads` is what the GPU backend hands the shard reader
(:class:`~cuzarr.codecs.sharding.reader.BackendReads`): the shard reader reads a shard's index
on the host from one open version (a file descriptor) and plans the reads (coalesced ranges
of the needed inner chunks, or one range over all of them); :func:`read_ranges` reads each
range with one ``kvikio.CuFile(path).pread`` into one device buffer per shard (each range at
an ``ALIGN``-aligned start; all reads issued before any is awaited) and returns one
:class:`~cuzarr.gpu.files.DeviceChunk` per inner chunk, a view of its range. The inner
chunks' heads and tails (for the header and trailer checks) are read on the host from the
open version while the device reads run. Inner chunks inside a range are not aligned: the
decode gathers each raw stream into an aligned slot (one device copy per wave, which a wave
of several shards needs anyway) rather than one read per inner chunk (a read costs a cuFile
call, or in kvikio's compatibility mode a bounce-buffer copy; shards hold many small inner
chunks).

kvikio opens by path: the path's file must be the open version (same device, inode, size and
mtime, as the local store's ``ObjectReader.token`` says) before and after the device reads,
else the reads are declined (``gpu_device_read_retries``) and the shard reader reads the
ranges from its open version on the host. Imported only by the GPU backend.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cupy

from cuzarr.diagnostics import count
from cuzarr.gpu import files
from cuzarr.gpu.plan import GpuChain
from cuzarr.stores.base import ChunkStore, ObjectReader
from cuzarr.stores.ranges import ByteRange, CoalescedRange

__all__ = ["EDGE_GAP", "DeviceShardReads", "read_edges", "read_ranges"]

#: Head and tail windows this close are read together by one host read (one page: the same
#: read call, a few more bytes copied).
EDGE_GAP = 4096


def read_edges(
    reader: ObjectReader, parts: Sequence[ByteRange], tail: int
) -> list[tuple[bytes, bytes]]:
    """The first ``HEAD_BYTES`` and last ``tail`` bytes of each part, read from ``reader``.

    The windows are merged where they overlap or lie within ``EDGE_GAP`` of each other (an
    inner chunk's tail and the next one's head are usually adjacent) and read with one
    ``reader.read`` call. A part shorter than a window gives all its bytes.
    """
    windows: list[tuple[int, int]] = []
    for p in parts:
        end = p.start + p.length
        windows.append((p.start, p.start + min(files.HEAD_BYTES, p.length)))
        windows.append((end - min(tail, p.length), end))
    merged: list[list[int]] = []
    for a, b in sorted(windows):
        if merged and a - merged[-1][1] <= EDGE_GAP:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    data = reader.read([(a, b - a) for a, b in merged])
    firsts = [a for a, _ in merged]

    def take(a: int, b: int) -> bytes:
        k = bisect_right(firsts, a) - 1
        return bytes(memoryview(data[k])[a - firsts[k] : b - firsts[k]])

    it = iter(windows)
    return [(take(*h), take(*t)) for h, t in zip(it, it, strict=True)]


def read_ranges(
    path: str, reader: ObjectReader, reads: Sequence[CoalescedRange], chain: GpuChain
) -> dict[int, files.DeviceChunk] | None:
    """Read ``reads`` of the file at ``path`` into one device buffer with kvikio.

    Parameters
    ----------
    path : str
        The file (kvikio opens it by path).
    reader : ObjectReader
        The version the reads must come from (its ``token`` is the file's identity); the
        heads and tails are read from it.
    reads : sequence of CoalescedRange
        Ranges inside the file; each becomes one ``pread`` into its own ``ALIGN``-aligned
        slot, all issued before any is awaited.
    chain : GpuChain
        The inner chunks' chain: how many of their last bytes the host needs
        (:func:`~cuzarr.gpu.files.tail_bytes`); an inner chunk whose header is longer than
        ``HEAD_BYTES`` (gzip's optional fields) gets all its bytes as its head.

    Returns
    -------
    dict of int to DeviceChunk, or None
        Per part's tag, its bytes (a view of its range's slot) with its head and tail;
        ``None`` when the file at ``path`` is not (or stopped being) ``reader``'s version.
    """
    import kvikio

    lengths = [r.length for r in reads]
    starts = files.aligned_slots(lengths, files.ALIGN)
    try:
        if files.identity(path) != reader.token:
            return None
        cf = kvikio.CuFile(path, "r")
    except FileNotFoundError:
        return None
    buf = cupy.empty(max(1, files.span(starts, lengths)), cupy.uint8)
    parts = [p for r in reads for p in r.parts]
    futures: list[Any] = []
    try:
        for start, r in zip(starts, reads, strict=True):
            if r.length:
                futures.append(cf.pread(buf[start : start + r.length], r.length, r.start))
        # Host reads of the open version while the device reads run.
        edges = read_edges(reader, parts, files.tail_bytes(chain))
        for k, (p, (head, tail)) in enumerate(zip(parts, edges, strict=True)):
            body = p.length - 4 * chain.crc32c
            if files.stream_prefix(chain.compressor, head, body) is None:
                edges[k] = (bytes(memoryview(reader.read([(p.start, p.length)])[0])), tail)
    finally:
        got = [int(f.get()) for f in futures]  # never close a file with reads in flight
        cf.close()
    try:
        after = files.identity(path)
    except FileNotFoundError:
        return None
    if got != [n for n in lengths if n] or after != reader.token:
        return None
    out: dict[int, files.DeviceChunk] = {}
    edge = iter(edges)
    for start, r in zip(starts, reads, strict=True):
        for p in r.parts:
            head, tail = next(edge)
            out[p.tag] = files.DeviceChunk(buf, start + p.start - r.start, p.length, head, tail)
    return out


@dataclass(frozen=True, slots=True)
class DeviceShardReads:
    """The GPU backend's reads of inner chunks of the shards of one local store.

    A :class:`~cuzarr.codecs.sharding.reader.BackendReads`: counts the inner chunks read
    (``gpu_device_reads``) and the shards declined because their file changed or vanished
    since the shard reader opened it (``gpu_device_read_retries``).
    """

    store: ChunkStore
    #: The inner chunks' chain.
    chain: GpuChain

    def __call__(
        self, key: str, reader: ObjectReader, reads: Sequence[CoalescedRange]
    ) -> dict[int, Any] | None:
        """Per inner chunk of ``reads``, its :class:`~cuzarr.gpu.files.DeviceChunk`."""
        path = self.store.local_file(key)
        got = None if path is None else read_ranges(path, reader, reads, self.chain)
        if got is None:
            count("gpu_device_read_retries")
            return None
        count("gpu_device_reads", len(got))
        return got
