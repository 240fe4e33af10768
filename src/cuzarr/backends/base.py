"""The backend interface: where chunks are decoded and encoded, and the arrays that hold them.

The engine's read and write loops (:mod:`cuzarr.engine.read`, :mod:`cuzarr.engine.write`) are
written once against :class:`Backend`; the CPU backend (:class:`cuzarr.backends.cpu.CpuBackend`,
NumPy arrays) and the GPU backend (:class:`cuzarr.gpu.backend.GpuBackend`, CuPy arrays, nvCOMP)
implement it. Stores, locks, conditional puts, waves, the empty-chunk rule, fallbacks and
counters are the loops' business, so they apply to every backend alike.

A backend decides how chunk work is grouped (:meth:`Backend.batching`): the CPU decodes one
chunk per task in many parallel tasks (or a few small zstd chunks together); the GPU decodes a
whole wave in one batched call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf
from cuzarr.codecs.chain import ChunkCodec, V2ChunkCodec
from cuzarr.codecs.sharding.reader import BackendReads
from cuzarr.errors import CorruptChunkError, CuzarrError
from cuzarr.stores.base import ChunkStore

if TYPE_CHECKING:  # config imports the backends (zarr_buffers -> cpu)
    from cuzarr.config import Settings

__all__ = [
    "EACH",
    "Backend",
    "Batching",
    "Codec",
    "DecodeItem",
    "EncodedGrid",
    "InnerGrid",
    "Namer",
    "Op",
    "decode_failure",
    "per_wave",
]

Codec = ChunkCodec | V2ChunkCodec
#: What a batch does: fetch and decode chunks, decode inner chunks, or encode.
Op = Literal["read", "decode", "encode"]
#: An array of the backend's memory (``numpy.ndarray`` on the CPU, ``cupy.ndarray`` on the GPU).
Array = Any


class DecodeItem(NamedTuple):
    """One stored chunk to decode."""

    #: The stored bytes: host memory, or what the backend's own :meth:`Backend.fetch` returned
    #: (device memory on the GPU).
    raw: Any
    #: Where the decoded chunk goes: a chunk-shaped array of the backend's memory (possibly a
    #: strided view of the output), or ``None`` for "any buffer" (then read it before the next
    #: decode on this thread).
    dest: Array | None
    #: The chunk's (or shard's) key, and for an inner chunk of a shard its coordinates.
    key: str
    inner: tuple[int, ...] | None = None
    #: ``dest`` may be written with streaming stores (:func:`cuzarr.backends.cpu.streams`
    #: decides where they pay); ``False`` for zarr's output buffers.
    stream: bool = False


class InnerGrid(NamedTuple):
    """A box of inner chunks of one shard whose stored bytes lie in one host buffer."""

    #: The shard's bytes (contiguous).
    data: npt.NDArray[np.uint8]
    #: Per inner chunk of the box, in C order: where its bytes begin in ``data`` (``-1``:
    #: empty, it reads as the fill value) and how many there are.
    starts: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.int64]
    #: Inner chunks per dimension of the box, and the coordinates of its first one.
    grid: tuple[int, ...]
    origin: tuple[int, ...]
    #: The shard's key (for messages).
    key: str


class EncodedGrid(NamedTuple):
    """The encoded inner chunks of a box, C order over the box: row ``i`` holds chunk ``i``."""

    #: ``(n, stride)``: chunk ``i``'s stored bytes are ``rows[i, :sizes[i]]``.
    rows: npt.NDArray[np.uint8]
    #: Stored size per chunk; ``0``: the chunk is all fill value and left out of the shard.
    sizes: npt.NDArray[np.int64]


#: Names a chunk in messages from its key and inner coordinates (``ArrayContext.where``): only
#: called when something failed, so the hot path formats no strings.
Namer = Callable[[str, "tuple[int, ...] | None"], str]


@dataclass(frozen=True, slots=True)
class Batching:
    """How the loops group chunk work.

    Attributes
    ----------
    size : int
        Chunks per backend call.
    parallel : bool
        Batches run at once on the engine's threads (else one after another, each fetching its
        chunks on the I/O threads first).
    placed : int
        For reads one chunk per task (``size`` 1, ``parallel``) of a local store: requests go
        to :meth:`Backend.read_batch` this many at a time, and what it leaves is read one at a
        time; 0: they are all read one at a time.
    """

    size: int
    parallel: bool
    placed: int = 0


#: One chunk per task, tasks in parallel: what the CPU does for most work.
EACH = Batching(size=1, parallel=True)


def per_wave(wave_bytes: int, item_nbytes: int) -> int:
    """How many items of ``item_nbytes`` decoded bytes a wave of ``wave_bytes`` holds (>= 1)."""
    return max(1, wave_bytes // max(1, item_nbytes))


def decode_failure(where: str, exc: Exception) -> CorruptChunkError:
    """The error for a chunk that failed to decode, naming it."""
    if isinstance(exc, CorruptChunkError):
        return CorruptChunkError(f"Corrupt {where}: {exc}")
    return CorruptChunkError(f"Failed to decode {where}: {type(exc).__name__}: {exc}")


def reraise_decode(where: str, exc: Exception) -> None:
    """Raise ``exc`` named by ``where`` (a :class:`CuzarrError` other than corruption as is)."""
    if isinstance(exc, CuzarrError) and not isinstance(exc, CorruptChunkError):
        raise exc
    raise decode_failure(where, exc) from exc


class Backend(Protocol):
    """What the loops need from the place chunks are decoded."""

    @property
    def name(self) -> str:
        """``"cpu"`` or ``"gpu"``."""
        ...

    @property
    def xp(self) -> Any:
        """The array module of results (``numpy``, ``cupy``)."""
        ...

    def asarray(self, value: Any) -> Array:
        """A value to write, in this backend's memory (no copy if it is already there)."""
        ...

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Array:
        """An uninitialised array."""
        ...

    def full(self, shape: tuple[int, ...], value: Any, dtype: Any) -> Array:
        """An array of ``value``."""
        ...

    def copy(self, array: Array, dtype: Any) -> Array:
        """A writable copy of ``array`` as ``dtype``."""
        ...

    def batching(self, codec: Codec, n: int, *, remote: bool, op: Op, threads: int) -> Batching:
        """How to group ``n`` chunk reads (fetch and decode), decodes or encodes.

        ``threads`` is how many of the engine's threads run parallel batches.
        """
        ...

    def wave_bytes(self, settings: Settings) -> int:
        """Decoded bytes one wave of a large read or write holds (chunks, shards).

        The CPU: ``settings.max_bytes_in_flight`` (host memory); the GPU:
        ``settings.gpu_wave_bytes``, within the device's free memory.
        """
        ...

    def size_hint(self, codec: Codec) -> int | None:
        """An upper bound of a stored chunk's size, for stores with small reads (or ``None``)."""
        ...

    def fetch(self, store: ChunkStore, keys: Sequence[str], codec: Codec) -> list[Any] | None:
        """Fetch a batch's stored chunks the backend's own way, or ``None`` to leave it.

        Called for batches that are not run in parallel (``Batching.parallel`` false). The
        result has one entry per key: what :meth:`decode` takes as ``DecodeItem.raw`` (``None``
        for a missing chunk). ``None``: the loops fetch the chunks on the host.
        """
        ...

    def range_reads(self, store: ChunkStore, codec: Codec) -> BackendReads | None:
        """How the shard reader reads inner chunks of ``codec`` from ``store`` this backend's way.

        ``codec`` is the inner chunks' chain. The result reads byte ranges of a shard the
        shard reader holds open (one version) into this backend's memory, in the form
        :meth:`decode` takes as ``DecodeItem.raw``; ``None``: the shard reader reads them on
        the host (the CPU backend, stores without local files, chains the backend needs the
        whole stored bytes of on the host).
        """
        ...

    def read_batch(
        self,
        store: ChunkStore,
        codec: Codec,
        keys: Sequence[str],
        selections: Sequence[tuple[Any, Any]],
        out: Array,
        *,
        stream: bool = False,
        helpers: int = 0,
    ) -> list[int] | None:
        """Fetch, decode and place a batch of chunks in one go, if this backend can.

        ``selections`` pairs each key with its ``(chunk_selection, out_selection)``: the
        decoded chunk's ``chunk_selection`` goes to ``out[out_selection]`` (no dropped axes).
        Called for batches run in parallel (``Batching.parallel``, ``Batching.placed``) and
        for reads of one chunk. ``stream``: large chunks may be written into ``out`` with
        streaming stores (as ``DecodeItem.stream``). ``helpers``: for a read of one chunk,
        how many more threads may work on it (the call's others are idle). Returns per key 1:
        placed, 0: the chunk
        is missing (nothing written), -1: not done (the loops read it the usual way, which
        also names what is wrong with it, or writes its whole region); ``None``: nothing done.
        """
        ...

    def read_direct(self, store: ChunkStore, key: str, codec: Codec, dest: Array) -> int | None:
        """Read an uncompressed chunk straight into ``dest`` if this backend can.

        Returns the stored size (``-1``: not done here, read and decode as usual; ``None``:
        the chunk is missing).
        """
        ...

    def decode(self, codec: Codec, items: Sequence[DecodeItem], name: Namer) -> list[Array]:
        """Decode stored chunks; return the array holding each (its ``dest`` if given).

        Raises
        ------
        CorruptChunkError
            Naming (with ``name``) the item that failed.
        """
        ...

    def decode_grid(
        self, codec: Codec, grid: InnerGrid, dest: Array, fill: Any, name: Namer, threads: int
    ) -> bool:
        """Decode a box of inner chunks into ``dest`` at once, if this backend can.

        ``dest`` has the box's shape (``grid`` times ``codec.shape``). Returns whether it was
        done (``False``: nothing written; the loops decode the inner chunks one by one).

        Raises
        ------
        CorruptChunkError
            Naming (with ``name``) the inner chunk that failed.
        """
        ...

    def encode(self, codec: Codec, chunks: Sequence[Array]) -> list[Buf]:
        """Encode chunk-shaped arrays to stored bytes (host memory)."""
        ...

    def encode_grid(
        self, codec: Codec, src: Array, fill: Any, write_empty: bool, threads: int
    ) -> EncodedGrid | None:
        """Encode every inner chunk of a box ``src`` (whole inner chunks) at once, if possible.

        ``None``: not done here (the loops encode the inner chunks one by one).
        """
        ...

    def all_equal(self, chunk: Array, fill: Any) -> bool:
        """zarr's empty-chunk rule: every element equals ``fill`` (NaN equal, -0.0 != 0.0)."""
        ...
