"""A shard rewritten in part, as pieces: byte ranges of the old shard and new inner chunks.

A write that changes some inner chunks of a stored shard needs the old bytes of the others in
the new shard, unchanged. Instead of reading the whole old shard and assembling the new one in
memory (:meth:`~cuzarr.codecs.sharding.format.ShardingCodec.assemble_grid`), the write reads
the old index only and hands the store the layout of the new shard
(:meth:`~cuzarr.stores.base.ChunkStore.put_spliced`): runs of kept inner chunks that lie one
after another in the old shard become one :class:`~cuzarr.stores.base.Range` of it (copied
inside the kernel by local folders), new inner chunks their own bytes, and the new index its
bytes. The result is byte for byte the shard ``assemble_grid`` builds from the same inputs
(tests/test_shard_splice.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf, as_u8
from cuzarr.codecs.sharding.format import ShardingCodec
from cuzarr.codecs.sharding.reader import raw_index
from cuzarr.stores.base import ObjectReader, Range

__all__ = ["grid_blobs", "old_index", "splice_pieces"]


def old_index(sh: ShardingCodec, reader: ObjectReader) -> npt.NDArray[np.uint64]:
    """The decoded, validated index of the open shard ``reader`` (one read of its bytes).

    Raises
    ------
    CorruptChunkError
        A shard shorter than its index, or an index that fails its checks.
    """
    return sh.decode_index(raw_index(sh, reader), shard_nbytes=reader.size)


def splice_pieces(
    sh: ShardingCodec, table: npt.NDArray[np.uint64], new: Mapping[int, Buf]
) -> list[Range | Buf] | None:
    """The new shard: the old one (index ``table``) with inner chunk ``i`` replaced by ``new[i]``.

    ``new[i]`` of 0 bytes makes inner chunk ``i`` empty; every inner chunk not in ``new`` keeps
    its stored bytes (as a range of the old shard). The layout is
    :meth:`ShardingCodec.rewritten`'s, the one :meth:`ShardingCodec.assemble_grid` builds.
    ``None``: every inner chunk is empty (the shard is to be deleted).
    """
    blobs = [as_u8(b) for b in new.values()]
    flat = np.fromiter(new.keys(), np.intp, len(new))
    sizes = np.fromiter((b.nbytes for b in blobs), np.int64, len(blobs))
    # For new inner chunks, the "source" is the position in blobs.
    layout = sh.rewritten(table, flat, sizes, np.arange(len(flat), dtype=np.int64))
    if layout is None:
        return None
    index = as_u8(sh.index.encode(layout.table.reshape(*sh.chunks_per_shard, 2)))
    lens, src, from_new = layout.lengths, layout.sources, layout.from_new
    # A piece starts at every new inner chunk, after one, and where the old bytes of two kept
    # inner chunks that follow each other in the new shard do not follow in the old one.
    cut = np.ones(len(lens), bool)
    cut[1:] = from_new[1:] | from_new[:-1] | (src[1:] != src[:-1] + lens[:-1])
    firsts = np.flatnonzero(cut)
    run_bytes = np.add.reduceat(lens, firsts)
    data: list[Range | Buf] = []
    for nbytes, new_one, at in zip(
        run_bytes.tolist(), from_new[firsts].tolist(), src[firsts].tolist(), strict=True
    ):
        if new_one:
            data.append(blobs[at])
        elif nbytes:
            data.append(Range(at, nbytes))
    return [index, *data] if sh.index_location == "start" else [*data, index]


def grid_blobs(
    flat: Sequence[int], rows: npt.NDArray[np.uint8], sizes: npt.NDArray[np.int64]
) -> dict[int, Buf]:
    """Inner chunks encoded as rows (``Backend.encode_grid``), as :func:`splice_pieces` takes them.

    Inner chunk ``flat[j]`` is ``rows[j, :sizes[j]]`` (0 bytes: empty).
    """
    return {i: rows[j, :s] for j, (i, s) in enumerate(zip(flat, sizes.tolist(), strict=True))}
