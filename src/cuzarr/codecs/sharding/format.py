"""The shard format of the v3 ``sharding_indexed`` codec: many inner chunks in one object.

Layout (Zarr v3 sharding spec): the encoded inner chunks, then (or before them) an index of
``(offset, nbytes)`` uint64 pairs in C order over the shard's inner-chunk grid, encoded with the
index codecs (by default ``bytes`` little-endian plus ``crc32c``). ``(2**64-1, 2**64-1)`` marks an
empty inner chunk, which reads as the fill value.

Everything that knows this layout is here: where the index is (:meth:`ShardingCodec.index_request`),
its decoding and validation (:meth:`ShardingCodec.decode_index`), a whole shard split into its
inner chunks' bytes (:meth:`ShardingCodec.split`, :meth:`ShardingCodec.inner_sources`), and a
shard built from them (:meth:`ShardingCodec.assemble`). How a shard is *read* from a store is
:mod:`cuzarr.codecs.sharding.reader`. Inner chunks may be shards themselves (nested sharding):
their chain's array-to-bytes codec is then a :class:`ShardingCodec`, whose whole-shard
:meth:`ShardingCodec.decode` and :meth:`ShardingCodec.encode` (or
:meth:`ShardingCodec.encode_present`) the inner chain runs.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from cuzarr._json import describe
from cuzarr._native import gather
from cuzarr.codecs.base import Buf, as_u8
from cuzarr.errors import CorruptChunkError, MetadataError
from cuzarr.metadata.spec import CodecSpec
from cuzarr.metadata.v3 import parse_codec_list
from cuzarr.stores.base import Range, Suffix

if TYPE_CHECKING:
    from cuzarr.codecs.chain import ChunkCodec
    from cuzarr.codecs.registry import Builder

__all__ = ["EMPTY", "InnerSources", "RewrittenShard", "ShardingCodec", "from_v3", "morton_order"]

#: Offset and length marking an empty inner chunk.
EMPTY = np.uint64(2**64 - 1)
_EMPTY_INT = int(EMPTY)


class InnerSources(Mapping[int, npt.NDArray[np.uint8]]):
    """The stored bytes of a whole shard's present inner chunks, each view made when asked for.

    A mapping from C-order inner chunk index to a view of ``u8`` (empty inner chunks are
    absent), as :meth:`ShardingCodec.inner_sources` builds for all at once.
    """

    __slots__ = ("_lengths", "_offsets", "_u8")

    def __init__(self, u8: npt.NDArray[np.uint8], table: npt.NDArray[np.uint64]) -> None:
        self._u8 = u8
        self._offsets: list[int] = table[:, 0].tolist()
        self._lengths: list[int] = table[:, 1].tolist()

    def __getitem__(self, i: int) -> npt.NDArray[np.uint8]:
        off = self._offsets[i]
        if off == _EMPTY_INT:
            raise KeyError(i)
        return self._u8[off : off + self._lengths[i]]

    def __iter__(self) -> Iterator[int]:
        return (i for i, off in enumerate(self._offsets) if off != _EMPTY_INT)

    def __len__(self) -> int:
        return sum(1 for off in self._offsets if off != _EMPTY_INT)


@functools.lru_cache(maxsize=64)
def morton_order(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-order flat indices of a grid, sorted by Morton (Z-order) code.

    The code interleaves coordinate bits from the lowest up, dimension 0 first, skipping
    dimensions that have run out of bits: the "compressed Morton code" zarr-python 3.4 uses
    for its default ``subchunk_write_order``, so shards cuzarr writes are byte-identical to
    zarr's.
    """
    n = math.prod(shape)
    if n == 0:
        return ()
    if not shape:
        return (0,)  # a 0-d shard holds one inner chunk
    coords = np.indices(shape, dtype=np.int64).reshape(len(shape), -1)
    bits = [(c - 1).bit_length() for c in shape]
    code = np.zeros(n, dtype=np.int64)
    out_bit = 0
    for bit in range(max(bits, default=0)):
        for dim, nbits in enumerate(bits):
            if bit < nbits:
                code |= ((coords[dim] >> bit) & 1) << out_bit
                out_bit += 1
    return tuple(int(i) for i in np.argsort(code, kind="stable"))


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class RewrittenShard:
    """The layout of a shard rewritten in part (:meth:`ShardingCodec.rewritten`).

    Attributes
    ----------
    lengths, positions : numpy.ndarray of int64
        Per inner chunk in the new shard's write order: its bytes and where they start there.
    sources : numpy.ndarray of int64
        Where each one's bytes are now: its offset in the old shard, or for a new inner chunk
        the start the caller gave.
    from_new : numpy.ndarray of bool
        Which are new inner chunks.
    table : numpy.ndarray of uint64
        The new shard's index table, ``(n_inner, 2)`` in C order.
    """

    lengths: npt.NDArray[np.int64]
    positions: npt.NDArray[np.int64]
    sources: npt.NDArray[np.int64]
    from_new: npt.NDArray[np.bool_]
    table: npt.NDArray[np.uint64]


@dataclass(frozen=True, slots=True)
class ShardingCodec:
    """Sharding of a chunk (the shard) into inner chunks.

    Parameters
    ----------
    chunk_shape : tuple of int
        Inner chunk shape.
    inner : ChunkCodec
        The codec chain of inner chunks, compiled for ``chunk_shape``.
    index : ChunkCodec
        The codec chain of the index, compiled for shape ``(*chunks_per_shard, 2)`` uint64.
    index_location : {"start", "end"}
        Where the index is stored.
    chunks_per_shard : tuple of int
        Inner chunks along each dimension.
    fill_value : Any
        The array's fill value, for empty inner chunks of whole-shard decodes.
    write_order : {"morton", "lexicographic", "colexicographic", "unordered"}
        Layout of inner chunks in shards this codec writes (reads accept any layout).
    """

    chunk_shape: tuple[int, ...]
    inner: ChunkCodec
    index: ChunkCodec
    index_location: Literal["start", "end"]
    chunks_per_shard: tuple[int, ...]
    fill_value: Any
    write_order: Literal["morton", "lexicographic", "colexicographic", "unordered"] = "morton"
    name: str = "sharding_indexed"

    def layout_order(self) -> tuple[int, ...]:
        """C-order indices of inner chunks in the order their bytes are laid out on write.

        ``morton`` is zarr-python's default; zarr's ``subchunk_write_order`` is a write-time
        setting not stored in metadata, which the pipeline adapter carries over.
        """
        if self.write_order == "morton":
            return morton_order(self.chunks_per_shard)
        flat = np.arange(self.n_inner).reshape(self.chunks_per_shard)
        if self.write_order == "colexicographic":
            return tuple(int(i) for i in flat.ravel(order="F"))
        return tuple(range(self.n_inner))

    @property
    def n_inner(self) -> int:
        """Number of inner chunks per shard."""
        return math.prod(self.chunks_per_shard)

    @property
    def index_nbytes(self) -> int:
        """Encoded size of the shard index (the index codecs are fixed-size)."""
        size = self.index.encoded_size()
        assert size is not None  # checked when the chain was built
        return size

    def index_request(self) -> Range | Suffix:
        """The bytes of a shard that hold its index: its first or its last ``index_nbytes``."""
        n = self.index_nbytes
        return Range(0, n) if self.index_location == "start" else Suffix(n)

    def index_start(self, shard_nbytes: int) -> int:
        """Where the index begins in a shard of ``shard_nbytes`` bytes."""
        return 0 if self.index_location == "start" else shard_nbytes - self.index_nbytes

    @staticmethod
    def inner_sources(
        u8: npt.NDArray[np.uint8], table: npt.NDArray[np.uint64], flat: Iterable[int]
    ) -> dict[int, npt.NDArray[np.uint8]]:
        """Views of the stored bytes of the present inner chunks among ``flat`` of a shard.

        ``u8`` holds the whole shard, ``table`` its decoded (validated) index.
        """
        offsets: list[int] = table[:, 0].tolist()
        lengths: list[int] = table[:, 1].tolist()
        empty = int(EMPTY)
        return {
            i: u8[offsets[i] : offsets[i] + lengths[i]] for i in flat if offsets[i] != empty
        }

    def decode_index(self, raw: Buf, *, shard_nbytes: int | None) -> npt.NDArray[np.uint64]:
        """Decode and validate an encoded index.

        Parameters
        ----------
        raw : buffer
            Exactly the encoded index bytes.
        shard_nbytes : int or None
            Total size of the shard object, when known, to bound offsets.

        Returns
        -------
        ndarray
            ``uint64`` array of shape ``(n_inner, 2)``, C order over the inner grid.

        Raises
        ------
        CorruptChunkError
            If the index is truncated, fails its checksum, points outside the shard, or two
            inner chunks overlap.
        """
        if memoryview(raw).nbytes != self.index_nbytes:
            raise CorruptChunkError(
                f"shard index is {memoryview(raw).nbytes} bytes, expected {self.index_nbytes} "
                "(truncated shard?)"
            )
        if shard_nbytes is not None and shard_nbytes < self.index_nbytes:
            raise CorruptChunkError(
                f"shard is {shard_nbytes} bytes, shorter than its {self.index_nbytes}-byte index "
                "(truncated shard?)"
            )
        table = self.index.decode(raw).reshape(self.n_inner, 2)
        table = np.ascontiguousarray(table, dtype=np.uint64)
        offsets, lengths = table[:, 0], table[:, 1]
        empty = (offsets == EMPTY) & (lengths == EMPTY)
        present = ~empty
        if present.any():
            off, ln = offsets[present], lengths[present]
            limit = np.uint64(2**63) if shard_nbytes is None else np.uint64(shard_nbytes)
            # An inner chunk of 0 bytes may sit at the very end (zarr reads it as b"").
            bad = (off > limit) | (ln > limit) | (off + ln > limit) | (off + ln < off)
            if self.index_location == "start":
                bad |= off < np.uint64(self.index_nbytes)
            elif shard_nbytes is not None:
                bad |= off + ln > np.uint64(shard_nbytes - self.index_nbytes)
            if bad.any():
                i = int(np.flatnonzero(present)[np.flatnonzero(bad)[0]])
                raise CorruptChunkError(
                    f"shard index entry {i} (offset {int(offsets[i])}, length {int(lengths[i])}) "
                    + (
                        f"points outside the shard of {shard_nbytes} bytes"
                        if shard_nbytes is not None
                        else "points outside the shard"
                    )
                )
            self._check_overlaps(table, present)
        return table

    @staticmethod
    def _check_overlaps(table: npt.NDArray[np.uint64], present: npt.NDArray[np.bool_]) -> None:
        """Refuse inner chunks whose byte ranges overlap (a hostile or corrupt index)."""
        idx = np.flatnonzero(present & (table[:, 1] > 0))
        if idx.size < 2:
            return
        order = idx[np.argsort(table[idx, 0], kind="stable")]
        starts, ends = table[order, 0], table[order, 0] + table[order, 1]
        clash = np.flatnonzero(starts[1:] < ends[:-1])
        if clash.size:
            a, b = int(order[clash[0]]), int(order[clash[0] + 1])
            raise CorruptChunkError(
                f"shard index entries {min(a, b)} and {max(a, b)} overlap (offsets "
                f"{int(table[a, 0])}+{int(table[a, 1])} and {int(table[b, 0])}+{int(table[b, 1])})"
            )

    def split(self, data: Buf) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]]:
        """Return a whole shard as a byte view and its decoded index table."""
        u8 = as_u8(data)
        n = self.index_nbytes
        if u8.nbytes < n:
            raise CorruptChunkError(
                f"shard is {u8.nbytes} bytes, shorter than its {n}-byte index (truncated shard?)"
            )
        start = self.index_start(u8.nbytes)
        return u8, self.decode_index(u8[start : start + n], shard_nbytes=u8.nbytes)

    def inner_coords(self) -> Iterator[tuple[int, ...]]:
        """Inner chunk coordinates in C order (the index order)."""
        return itertools.product(*(range(n) for n in self.chunks_per_shard))

    def assemble(self, encoded: Mapping[int, Buf]) -> npt.NDArray[np.uint8] | None:
        """Build a shard from encoded inner chunks keyed by C-order index; ``None`` if empty."""
        if not encoded:
            return None
        table = np.full((self.n_inner, 2), EMPTY, dtype=np.uint64)
        n_index = self.index_nbytes
        pos = self._data_start()
        order = [i for i in self.layout_order() if i in encoded]
        sizes = [memoryview(encoded[i]).nbytes for i in order]
        total = sum(sizes) + n_index
        out = np.empty(total, dtype=np.uint8)
        for i, size in zip(order, sizes, strict=True):
            table[i] = (pos, size)
            out[pos : pos + size] = as_u8(encoded[i])
            pos += size
        return self._with_index(out, table)

    def _with_index(
        self, out: npt.NDArray[np.uint8], table: npt.NDArray[np.uint64]
    ) -> npt.NDArray[np.uint8]:
        """``out`` (a shard with room for its index) with ``table`` encoded into its place."""
        n_index = self.index_nbytes
        index_bytes = as_u8(self.index.encode(table.reshape(*self.chunks_per_shard, 2)))
        if self.index_location == "start":
            out[:n_index] = index_bytes
        else:
            out[out.nbytes - n_index :] = index_bytes
        return out

    def _data_start(self) -> int:
        """Where the first inner chunk of an assembled shard begins."""
        return self.index_nbytes if self.index_location == "start" else 0

    def rewritten(
        self,
        old_table: npt.NDArray[np.uint64] | None,
        flat: npt.NDArray[np.intp],
        sizes: npt.NDArray[np.int64],
        new_starts: npt.NDArray[np.int64],
    ) -> RewrittenShard | None:
        """Where each inner chunk goes in a shard rewritten with new inner chunks ``flat``.

        New inner chunk ``flat[i]`` has ``sizes[i]`` bytes (0: empty, left out) found at
        ``new_starts[i]`` of wherever the caller keeps it; every other inner chunk keeps its
        entry of ``old_table`` (the old shard's decoded index, if any; a kept entry of 0 bytes
        stays, as :meth:`assemble` keeps it). The order is the codec's write order
        (:meth:`layout_order`). ``None``: no inner chunk is left (the shard is empty).
        """
        n = self.n_inner
        length = np.zeros(n, np.int64)
        start = np.zeros(n, np.int64)
        present = np.zeros(n, bool)
        if old_table is not None:
            kept = old_table[:, 0] != EMPTY
            length[kept] = old_table[kept, 1].astype(np.int64)
            start[kept] = old_table[kept, 0].astype(np.int64)
            present[kept] = True
        new = np.zeros(n, bool)
        length[flat] = sizes
        start[flat] = new_starts
        new[flat] = True
        present[flat] = sizes > 0
        order = np.asarray(self.layout_order(), np.intp)
        order = order[present[order]]
        if not len(order):
            return None
        lens = length[order]
        pos = np.cumsum(lens) - lens + self._data_start()
        table = np.full((n, 2), EMPTY, dtype=np.uint64)
        table[order, 0] = pos.astype(np.uint64)
        table[order, 1] = lens.astype(np.uint64)
        return RewrittenShard(
            lengths=lens, positions=pos, sources=start[order], from_new=new[order], table=table
        )

    def assemble_grid(
        self,
        old: tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]] | None,
        flat: npt.NDArray[np.intp],
        rows: npt.NDArray[np.uint8],
        sizes: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.uint8] | None:
        """Build a shard as :meth:`assemble` does, from rows of new inner chunks and an old shard.

        Inner chunk ``flat[i]`` is ``rows[i, :sizes[i]]`` (``sizes[i] == 0``: empty); every
        other inner chunk keeps its stored bytes in ``old`` (a whole shard's bytes and its
        decoded index), if given. The same bytes as :meth:`assemble` of the same inner chunks,
        built with one copy loop per source (:func:`cuzarr._native.gather`).
        """
        starts = np.arange(len(flat), dtype=np.int64) * rows.shape[1]
        layout = self.rewritten(None if old is None else old[1], flat, sizes, starts)
        if layout is None:
            return None
        lens, pos, src, from_new = layout.lengths, layout.positions, layout.sources, layout.from_new
        out = np.empty(int(lens.sum()) + self.index_nbytes, dtype=np.uint8)
        gather(rows.reshape(-1), src[from_new], lens[from_new], out, pos[from_new])
        if old is not None and not from_new.all():
            keep = ~from_new
            gather(np.ascontiguousarray(old[0]), src[keep], lens[keep], out, pos[keep])
        return self._with_index(out, layout.table)

    def _region(self, coords: tuple[int, ...]) -> tuple[slice, ...]:
        return tuple(
            slice(c * s, (c + 1) * s) for c, s in zip(coords, self.chunk_shape, strict=True)
        )

    def decode(self, data: Buf, shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        """Decode a whole shard to an array (empty inner chunks read as the fill value)."""
        return self.decode_box(data, tuple(slice(0, n) for n in shape), dtype)

    def decode_box(
        self, data: Buf, box: tuple[slice, ...], dtype: np.dtype[Any]
    ) -> npt.NDArray[Any]:
        """Decode the part ``box`` of a whole shard: only the inner chunks it touches.

        ``box`` holds one slice of step 1 per dimension, inside the shard. The same values as
        ``decode(data, ...)[box]``; inner chunks that are shards themselves are decoded in part
        the same way.
        """
        u8, table = self.split(data)
        shape = tuple(s.stop - s.start for s in box)
        out = np.empty(shape, dtype=dtype)
        ranges = [
            range(s.start // c, (s.stop - 1) // c + 1) if s.stop > s.start else range(0)
            for s, c in zip(box, self.chunk_shape, strict=True)
        ]
        offsets: list[int] = table[:, 0].tolist()
        lengths: list[int] = table[:, 1].tolist()
        nested = self.inner.nested_sharding
        for coords in itertools.product(*ranges):
            flat = 0
            for c, per in zip(coords, self.chunks_per_shard, strict=True):
                flat = flat * per + c
            # The part of this inner chunk inside the box, in the chunk and in ``out``.
            local = []
            dest = []
            for c, n, s in zip(coords, self.chunk_shape, box, strict=True):
                lo, hi = max(s.start, c * n), min(s.stop, (c + 1) * n)
                local.append(slice(lo - c * n, hi - c * n))
                dest.append(slice(lo - s.start, hi - s.start))
            target = out[tuple(dest)]
            off = offsets[flat]
            if off == _EMPTY_INT:
                target[...] = self.fill_value
                continue
            src = u8[off : off + lengths[flat]]
            part = tuple(local)
            if target.shape == self.chunk_shape:  # the whole inner chunk
                self.inner.decode_into(src, target)
            elif nested is not None:
                target[...] = nested.decode_box(self.inner.decode_bytes(src), part, dtype)
            else:
                target[...] = self.inner.decode(src)[part]
        return out

    def encode(self, arr: npt.NDArray[Any]) -> Buf:
        """Encode a whole shard, storing every inner chunk (``write_empty_chunks=True``)."""
        encoded = {
            i: self.inner.encode(arr[self._region(c)]) for i, c in enumerate(self.inner_coords())
        }
        out = self.assemble(encoded)
        assert out is not None
        return out

    def encode_present(
        self,
        arr: Any,
        is_empty: Callable[[Any], bool],
        encode: Callable[[ChunkCodec, Sequence[Any]], Sequence[Buf]],
    ) -> npt.NDArray[np.uint8] | None:
        """Encode a whole shard without the inner chunks ``is_empty`` finds empty.

        zarr's rule for shards nested in shards when ``write_empty_chunks`` is off (its
        sharding codec writes a shard through an inner pipeline that drops inner chunks equal
        to the fill value), so the bytes are zarr's. ``encode(chain, parts)`` encodes inner
        chunks (a backend's ``encode``; ``arr`` is that backend's array); shards nested
        deeper are encoded the same way. ``None`` when every inner chunk is empty.
        """
        flat: list[int] = []
        parts: list[Any] = []
        for i, coords in enumerate(self.inner_coords()):
            part = arr[self._region(coords)]
            if not is_empty(part):
                flat.append(i)
                parts.append(part)
        if self.inner.nested_sharding is None:
            blobs: Sequence[Buf | None] = encode(self.inner, parts)
        else:
            blobs = [self.inner.encode_present(p, is_empty, encode) for p in parts]
        return self.assemble({i: b for i, b in zip(flat, blobs, strict=True) if b is not None})

    def encoded_size(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> int | None:
        """Shards are variable-size."""
        return None


def from_v3(
    b: Builder,
    codec: CodecSpec,
    where: str,
    shard_shape: tuple[int, ...],
    dtype: np.dtype[Any],
) -> ShardingCodec:
    """The ``sharding_indexed`` codec from its v3 configuration (inner and index chains built)."""
    r = b.reader(codec, where)
    r.only(("chunk_shape", "codecs", "index_codecs", "index_location"), "codec 'sharding_indexed'")
    inner_shape = r.int_tuple("chunk_shape", minimum=1)
    if len(inner_shape) != len(shard_shape):
        raise r.fail("chunk_shape", f"{len(shard_shape)} dimensions", list(inner_shape))
    if any(s % c for s, c in zip(shard_shape, inner_shape, strict=True)):
        raise r.fail(
            "chunk_shape",
            f"a shape that divides the shard shape {list(shard_shape)}",
            list(inner_shape),
        )
    cps = tuple(s // c for s, c in zip(shard_shape, inner_shape, strict=True))
    inner_specs: tuple[CodecSpec, ...] = (
        CodecSpec(name="bytes", configuration={"endian": "little"}),
    )
    if "codecs" in codec.configuration:
        inner_specs = parse_codec_list(r, "codecs")
    index_specs: tuple[CodecSpec, ...] = (
        CodecSpec(name="bytes", configuration={"endian": "little"}),
        CodecSpec(name="crc32c"),
    )
    if "index_codecs" in codec.configuration:
        index_specs = parse_codec_list(r, "index_codecs")
    location = r.choice("index_location", ("start", "end"), "end")
    inner = b.chain(
        inner_specs, inner_shape, dtype, f"{where}.configuration.codecs", allow_sharding=True
    )
    index = b.chain(
        index_specs, (*cps, 2), np.dtype(np.uint64), f"{where}.configuration.index_codecs"
    )
    if index.encoded_size() is None:
        raise MetadataError(
            f"Failed to parse '{where}.configuration.index_codecs' in zarr.json of '{b.path}': "
            "index codecs must produce a fixed-size encoding, got "
            f"{describe([c.name for c in index_specs])}"
        )
    return ShardingCodec(
        chunk_shape=inner_shape,
        inner=inner,
        index=index,
        index_location=location,  # type: ignore[arg-type]
        chunks_per_shard=cps,
        fill_value=b.fill_value,
    )
