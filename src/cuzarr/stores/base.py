"""The store contract of the engine: one typed protocol, capabilities declared, not probed.

Every store the engine reads and writes (local folders, memory, object stores, any zarr-python
``Store``) implements :class:`ChunkStore`. What a store can do beyond the common methods is
declared once in its :class:`StoreCaps`; the engine, the shard reader and the locks read those
flags and never look for optional methods. Methods are synchronous and called from worker
threads.

Reads return :class:`GetResult` (the bytes, the object's size when known, its version when the
store has versions), as obstore's ``GetResult`` does; a missing key is ``None``, never an error.
Writes are :meth:`ChunkStore.put` with an explicit :class:`PutMode`: a read-modify-write passes
the version it read, so a store with conditional puts refuses the put if another writer got
there first. No state is handed from one call to the next.
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf, as_u8
from cuzarr.errors import StaleObjectError, UnsupportedError

if TYPE_CHECKING:
    from cuzarr._native import Compressor

__all__ = [
    "BaseChunkStore",
    "BoxBatch",
    "BufferPool",
    "ChunkStore",
    "Coalescing",
    "GetResult",
    "ObjectReader",
    "PutMode",
    "Range",
    "Scratch",
    "StaleObjectError",
    "StoreCaps",
    "Suffix",
    "check_pieces",
]


@dataclass(frozen=True, slots=True)
class StoreCaps:
    """What a store can do, declared by the store.

    Attributes
    ----------
    remote : bool
        A request costs a round trip (object stores, zarr stores used through their API):
        the engine keeps many requests in flight and may cache shard indexes.
    read_into : bool
        :meth:`ChunkStore.read_into` reads straight into the caller's buffer (positional
        reads); otherwise it is a copy of :meth:`ChunkStore.get` and not worth calling.
    open_object : bool
        :meth:`ChunkStore.open_object` gives one version of an object for several ranged
        reads (a local file descriptor, a stored memory buffer).
    small_reads : bool
        ``get(key, size_hint=n)`` reads an object of about ``n`` bytes in one call, without
        looking up its size first.
    versions : bool
        Reads return the object's version (an ETag); ``if_match`` makes them conditional.
    conditional_put : bool
        :meth:`ChunkStore.put` honours :attr:`PutMode.CREATE` and :attr:`PutMode.UPDATE`.
    coalesces : bool
        The store merges the ranges of :meth:`ChunkStore.get_ranges` itself, within the bounds
        passed to it (a zarr ``Store``'s ``get_ranges``): the engine hands it each range as it
        is and makes exactly the requests zarr's sharding codec would make.
    listing : bool
        :meth:`ChunkStore.list_dir` and :meth:`ChunkStore.list_sizes` work.
    device_reads : bool
        Objects are local files (:meth:`ChunkStore.local_file`, :meth:`ChunkStore.file_paths`):
        the GPU backend reads them straight into device memory with kvikio (GPUDirect Storage
        where the system has it), the CPU backend reads batches of small chunks from C. With
        ``open_object``, an :class:`ObjectReader`'s ``token`` is then its file's
        ``(st_dev, st_ino, st_size, st_mtime_ns)``: the GPU backend compares it with the path's
        to read a shard's inner chunks by path from the version whose index it read.
    box_puts : bool
        :meth:`ChunkStore.put_boxes` encodes boxes of an array and writes them as files in one
        call into C (local folders with the batch helper).
    lock_root : str or None
        A folder for cross-process write locks (local folders), see :mod:`cuzarr.engine.locks`.
    concurrency : int or None
        Requests in flight on this store (``None``: ``Settings.io_concurrency`` when remote).
    loop_writes : bool
        Puts and deletes go through a zarr store's own API, run on an event loop (a zarr store
        used through its API, and the writes of one read as a local folder): a write must
        never run on that loop, which would then wait on itself (see
        :func:`cuzarr.zarr_pipeline._inline_write`).
    """

    remote: bool = False
    read_into: bool = False
    open_object: bool = False
    small_reads: bool = False
    versions: bool = False
    conditional_put: bool = False
    coalesces: bool = False
    listing: bool = True
    device_reads: bool = False
    box_puts: bool = False
    lock_root: str | None = None
    concurrency: int | None = None
    loop_writes: bool = False


@dataclass(frozen=True, slots=True)
class BoxBatch:
    """Whole chunks to encode straight from boxes of one array (:meth:`ChunkStore.put_boxes`).

    Attributes
    ----------
    array : ndarray
        The value written (any strides, the chunk's dtype).
    starts : sequence of tuple of int
        Per chunk, the index in ``array`` of its element ``(0, ..., 0)``.
    extent : tuple of int
        The chunk shape: box ``i`` is ``array[starts[i][d] : starts[i][d] + extent[d], ...]``.
    compressor : cuzarr._native.Compressor or None
        c-blosc's or libzstd's encoder and its arguments; ``None``: stored as the C-order
        bytes.
    helpers : int
        Threads besides the caller's the store may use for the batch (the batch helper's own,
        :func:`cuzarr._native.put_boxes`); 0: the calling thread only.
    """

    array: npt.NDArray[Any]
    starts: Sequence[tuple[int, ...]]
    extent: tuple[int, ...]
    compressor: Compressor | None
    helpers: int = 0

    @property
    def nbytes(self) -> int:
        """The bytes of one box."""
        return math.prod(self.extent) * self.array.itemsize


class Range(NamedTuple):
    """The byte range ``[start, start + length)`` of an object (short at its end)."""

    start: int
    length: int


class Suffix(NamedTuple):
    """The last ``length`` bytes of an object (all of it, if shorter)."""

    length: int


class GetResult(NamedTuple):
    """What a read returns: the bytes, the object's size, its version."""

    data: Buf
    #: Size of the whole object in bytes, when the read tells it (always for whole objects).
    size: int | None
    #: The object's version (ETag) on stores with versions, else ``None``.
    version: str | None = None


class PutMode(enum.Enum):
    """How :meth:`ChunkStore.put` treats an existing object."""

    #: Replace whatever is there (or create).
    OVERWRITE = "overwrite"
    #: Create; refuse if the object exists (it did not when it was read).
    CREATE = "create"
    #: Replace only if the object still has the version passed with the put.
    UPDATE = "update"


@dataclass(frozen=True, slots=True)
class Coalescing:
    """Bounds on merging byte ranges of one object into fewer reads.

    zarr-python's ``array.sharding_coalesce_max_gap_bytes`` and
    ``array.sharding_coalesce_max_bytes`` (global or per array) in the zarr pipeline path.

    Attributes
    ----------
    max_gap : int
        Ranges at most this many bytes apart may be read as one.
    max_bytes : int
        No merged read is larger than this.
    """

    max_gap: int
    max_bytes: int


class Scratch:
    """A per-thread growable byte buffer for compressed chunks (no allocation per chunk).

    A view returned by :meth:`get` is valid until the same thread asks again.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self, nbytes: int) -> npt.NDArray[np.uint8]:
        """Return a writable ``uint8`` view of at least ``nbytes`` for this thread."""
        buf: npt.NDArray[np.uint8] | None = getattr(self._local, "buf", None)
        if buf is None or buf.nbytes < nbytes:
            buf = np.empty(max(nbytes, 1 << 16, 0 if buf is None else buf.nbytes * 2), np.uint8)
            self._local.buf = buf
        return buf[:nbytes]


#: :class:`BufferPool` allocates in multiples of this many bytes (64 KiB).
POOL_GRAIN = 64 * 1024


class BufferPool:
    """Byte buffers handed out for one wave of reads and taken back together afterwards.

    Whole shards read in one wave stay alive until their inner chunks are decoded; reusing the
    same buffers wave after wave avoids allocating (and page-faulting) fresh memory per shard.
    It has :class:`Scratch`'s ``get`` so stores accept either.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[npt.NDArray[np.uint8]] = []
        self._used: list[npt.NDArray[np.uint8]] = []

    def get(self, nbytes: int) -> npt.NDArray[np.uint8]:
        """Return a buffer of at least ``nbytes`` not handed out since the last release.

        The smallest free buffer that fits is reused. Where none fits, the largest free one
        (too small) is dropped for the new one, so the pool never holds more buffers than one
        wave used at once: shards of a wave a few bytes larger than the last wave's would
        otherwise each add a buffer (measured: a whole-array read of 19 MB shards held one
        extra shard's worth, 320 instead of 300 MiB of peak RSS). New buffers are rounded up
        to :data:`POOL_GRAIN` so that the next wave's slightly larger shards still fit.
        """
        with self._lock:
            for i, buf in enumerate(self._free):
                if buf.nbytes >= nbytes:
                    del self._free[i]
                    break
            else:
                if self._free:
                    del self._free[-1]  # sorted by size: the largest, and still too small
                buf = np.empty(-(-nbytes // POOL_GRAIN) * POOL_GRAIN, np.uint8)
            self._used.append(buf)
        return buf[:nbytes]

    def release(self) -> None:
        """Take every buffer back (their contents must no longer be used)."""
        with self._lock:
            self._free.extend(self._used)
            self._used.clear()
            self._free.sort(key=lambda b: b.nbytes)


class ObjectReader(Protocol):
    """One open version of one object: ranged reads that all see the same bytes.

    Stores with :attr:`StoreCaps.open_object` hand these out; the shard reader then reads a
    shard's index and inner chunks from the same version.
    """

    #: Identifies this version of the object (equal tokens: same bytes).
    token: object
    #: Size of the object in bytes.
    size: int

    def read(self, ranges: list[tuple[int, int]]) -> list[Buf]:
        """Return ``[start, start+length)`` byte ranges (short at the end of the object)."""
        ...

    def close(self) -> None:
        """Release the object."""
        ...


@runtime_checkable
class ChunkStore(Protocol):
    """What the engine needs from a store (see the module docstring)."""

    #: A short description for messages, e.g. ``file:///data/a.zarr``.
    name: str
    #: What the store can do beyond the common methods.
    caps: StoreCaps

    def get(
        self,
        key: str,
        byte_range: Range | Suffix | None = None,
        *,
        if_match: str | None = None,
        scratch: Scratch | BufferPool | None = None,
        size_hint: int | None = None,
        fresh: bool = False,
    ) -> GetResult | None:
        """Read an object, or one range of it; ``None`` if it is missing.

        Parameters
        ----------
        key : str
            The object.
        byte_range : Range or Suffix, optional
            Only these bytes (a range past the end is short or empty).
        if_match : str, optional
            Only if the object still has this version (:class:`StaleObjectError` otherwise);
            stores without versions ignore it.
        scratch : Scratch or BufferPool, optional
            The store may return a view into a buffer taken from it.
        size_hint : int, optional
            The expected size, for stores with :attr:`StoreCaps.small_reads` (the result is
            the whole object whatever its size).
        fresh : bool
            Bypass any cache: the caller is about to rewrite the object.
        """
        ...

    def get_ranges(
        self,
        key: str,
        ranges: Sequence[tuple[int, int]],
        *,
        if_match: str | None = None,
        limits: Coalescing | None = None,
    ) -> list[Buf | None] | None:
        """Read ``(start, length)`` ranges of one object, in flight together.

        ``None`` if the object is missing. Stores with :attr:`StoreCaps.coalesces` merge the
        ranges within ``limits``; others read each range as given (the engine merged them), and
        a ``None`` entry appears only for a range a coalescing store returned nothing for.

        Raises
        ------
        StaleObjectError
            With ``if_match``, if the object no longer has that version.
        """
        ...

    def read_into(self, key: str, out: npt.NDArray[np.uint8]) -> int | None:
        """Read a whole object into ``out``; return its size (``None`` if missing).

        Only ``min(size, len(out))`` bytes are written, and only if the size equals
        ``len(out)``: the caller checks the size.
        """
        ...

    def get_many(self, keys: Sequence[str], size_hint: int | None = None) -> list[Buf | None]:
        """Whole objects (``None`` for missing ones), in the order of ``keys``.

        For batches of small objects. Local stores read them one after another in this
        thread (stores with :attr:`StoreCaps.small_reads` each in one call when it is at most
        ``size_hint`` bytes; the result is whole either way); remote stores send the requests
        together, so a batch costs about one round trip. A failure raises for the first failed
        key in ``keys``' order.
        """
        ...

    def open_object(self, key: str) -> ObjectReader | None:
        """Open one version of an object (:attr:`StoreCaps.open_object`); ``None`` if missing."""
        ...

    def put(
        self, key: str, data: Buf, *, mode: PutMode = PutMode.OVERWRITE, version: str | None = None
    ) -> None:
        """Write a whole object atomically: readers see the old or the new value.

        Raises
        ------
        StaleObjectError
            On stores with conditional puts, if ``mode`` is ``CREATE`` and the object exists,
            or ``UPDATE`` and it no longer has ``version`` (the other writer's object is kept).
        """
        ...

    def put_spliced(self, key: str, source: ObjectReader, pieces: Sequence[Range | Buf]) -> None:
        """Write ``key`` whole (``PutMode.OVERWRITE``, atomically as :meth:`put`) from pieces.

        The object is the concatenation of ``pieces`` in order: a :class:`Range` stands for
        those bytes of ``source`` (one open version of an object of this store, from
        :meth:`open_object`, still open), anything else for its own bytes. A shard rewritten
        in part keeps its untouched inner chunks this way: local folders copy them from the
        old file inside the kernel (``copy_file_range``) instead of reading and writing them.

        Raises
        ------
        ValueError
            A range outside ``source`` (nothing written).
        """
        ...

    def put_many(self, keys: Sequence[str], blobs: Sequence[Buf]) -> None:
        """Write whole objects one after another in this thread (``PutMode.OVERWRITE``).

        Each atomically, as :meth:`put` writes it. For batches of small objects on stores
        without conditional puts: local folders write the batch in one call into C. On a
        failure, the other objects of the batch may be written, the failed one is not (its
        old value is kept).
        """
        ...

    def put_boxes(self, keys: Sequence[str], boxes: BoxBatch) -> list[int]:
        """Encode box ``i`` of ``boxes`` and write it whole as ``keys[i]`` (``OVERWRITE``).

        Stores with :attr:`StoreCaps.box_puts` do it in one call into C; the others write
        nothing. Returns the positions of the boxes not written, for the caller to encode
        and put the general way (which names what failed); the rest are written atomically,
        as :meth:`put` writes them.
        """
        ...

    def settle(self) -> None:
        """Wait for what earlier :meth:`put` calls left to background work to finish.

        Local folders remove replaced files on a background thread; the engine calls this
        before a write returns (or raises). Other stores have nothing to wait for.
        """
        ...

    def delete(self, key: str) -> None:
        """Remove an object; a missing key is not an error."""
        ...

    def check_writable(self) -> None:
        """Raise :class:`~cuzarr.errors.ReadOnlyError` before any write to a read-only store."""
        ...

    def local_file(self, key: str) -> str | None:
        """The path of the file holding ``key`` (:attr:`StoreCaps.device_reads`).

        ``None`` if it does not exist. Readers of the path must detect a replacement between
        two looks (writers replace files atomically: the inode changes).
        """
        ...

    def file_paths(self, keys: Sequence[str]) -> list[bytes]:
        """The file-system paths of the files of ``keys`` (:attr:`StoreCaps.device_reads`).

        Encoded for the file system; whether they exist is not checked (a batched reader opens
        them itself).

        Raises
        ------
        StoreError
            For a key that is not a valid relative path below the store.
        """
        ...

    def list_dir(self, prefix: str) -> list[str]:
        """Names directly below ``prefix`` (``""`` or ending in ``/``), sorted."""
        ...

    def list_sizes(self, prefix: str) -> list[tuple[str, int]]:
        """Every key below ``prefix`` with its size in bytes."""
        ...


def check_pieces(size: int, pieces: Sequence[Range | Buf]) -> None:
    """Refuse a :meth:`ChunkStore.put_spliced` range outside a source of ``size`` bytes."""
    for p in pieces:
        if isinstance(p, Range) and (p.start < 0 or p.length < 0 or p.start + p.length > size):
            raise ValueError(
                f"spliced range [{p.start}, {p.start + p.length}) lies outside the source "
                f"object of {size} bytes"
            )


class BaseChunkStore:
    """Defaults for the methods a store without the matching capability still answers.

    ``read_into`` copies from :meth:`get`, ``get_ranges`` reads the ranges one by one,
    ``open_object`` refuses; listing is refused unless the store implements it.
    """

    name: str
    caps: StoreCaps

    def get(
        self,
        key: str,
        byte_range: Range | Suffix | None = None,
        *,
        if_match: str | None = None,
        scratch: Scratch | BufferPool | None = None,
        size_hint: int | None = None,
        fresh: bool = False,
    ) -> GetResult | None:  # pragma: no cover - every store implements it
        """See :meth:`ChunkStore.get`."""
        raise NotImplementedError

    def get_ranges(
        self,
        key: str,
        ranges: Sequence[tuple[int, int]],
        *,
        if_match: str | None = None,
        limits: Coalescing | None = None,
    ) -> list[Buf | None] | None:
        """One :meth:`get` per range (stores that can do better override this)."""
        out: list[Buf | None] = []
        for start, length in ranges:
            got = self.get(key, Range(start, length), if_match=if_match)
            if got is None:
                return None
            out.append(got.data)
        return out

    def get_many(self, keys: Sequence[str], size_hint: int | None = None) -> list[Buf | None]:
        """One :meth:`get` per key."""
        out: list[Buf | None] = []
        for key in keys:
            got = self.get(key, size_hint=size_hint)
            out.append(None if got is None else got.data)
        return out

    def read_into(self, key: str, out: npt.NDArray[np.uint8]) -> int | None:
        """Copy the object into ``out`` when the sizes match; return its size."""
        got = self.get(key)
        if got is None:
            return None
        data = as_u8(got.data)
        if data.nbytes == out.nbytes:
            out[...] = data
        return int(data.nbytes)

    def put(
        self, key: str, data: Buf, *, mode: PutMode = PutMode.OVERWRITE, version: str | None = None
    ) -> None:  # pragma: no cover - every store implements it
        """See :meth:`ChunkStore.put`."""
        raise NotImplementedError

    def put_spliced(self, key: str, source: ObjectReader, pieces: Sequence[Range | Buf]) -> None:
        """The ranges read from ``source``, the pieces joined in memory, one :meth:`put`."""
        check_pieces(source.size, pieces)
        ranges = [(p.start, p.length) for p in pieces if isinstance(p, Range)]
        got = iter(source.read(ranges))
        parts = [as_u8(next(got)) if isinstance(p, Range) else as_u8(p) for p in pieces]
        self.put(key, np.concatenate(parts) if parts else np.empty(0, np.uint8))

    def put_many(self, keys: Sequence[str], blobs: Sequence[Buf]) -> None:
        """One :meth:`put` per key (``PutMode.OVERWRITE``)."""
        for key, blob in zip(keys, blobs, strict=True):
            self.put(key, blob)

    def put_boxes(self, keys: Sequence[str], boxes: BoxBatch) -> list[int]:
        """Writes nothing (no :attr:`StoreCaps.box_puts`): every position is left to the caller."""
        return list(range(len(keys)))

    def settle(self) -> None:
        """Nothing to wait for: :meth:`ChunkStore.put` finished its work."""

    def open_object(self, key: str) -> ObjectReader | None:
        """Refused: this store has no :attr:`StoreCaps.open_object`."""
        raise UnsupportedError(f"{self.name} cannot open one version of an object for reads")

    def local_file(self, key: str) -> str | None:
        """Refused: this store has no :attr:`StoreCaps.device_reads`."""
        raise UnsupportedError(f"{self.name} keeps no local files for device reads")

    def file_paths(self, keys: Sequence[str]) -> list[bytes]:
        """Refused: this store has no :attr:`StoreCaps.device_reads`."""
        raise UnsupportedError(f"{self.name} keeps no local files")

    def list_dir(self, prefix: str) -> list[str]:
        """Refused unless the store implements listing."""
        raise UnsupportedError(f"{self.name} cannot list its keys")

    def list_sizes(self, prefix: str) -> list[tuple[str, int]]:
        """Refused unless the store implements listing."""
        raise UnsupportedError(f"{self.name} cannot list its keys")
