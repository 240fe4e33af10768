"""What the read and write loops know about one array, in one frozen record.

Its parsed metadata, codecs, settings, fill value, backend and shard reader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from cuzarr.backends.base import Backend, Batching, Codec, per_wave
from cuzarr.backends.pool import parallel_map
from cuzarr.codecs.sharding.format import ShardingCodec
from cuzarr.codecs.sharding.reader import ShardReader
from cuzarr.config import Settings
from cuzarr.metadata.spec import ArraySpec
from cuzarr.stores.base import Scratch

__all__ = ["ArrayContext", "run_batches", "waves"]


@dataclass(frozen=True, slots=True)
class ArrayContext:
    """One array as the loops see it.

    Attributes
    ----------
    spec : ArraySpec
        Parsed metadata.
    codec : ChunkCodec or V2ChunkCodec
        The compiled chain of the array's chunks (shards, for sharded arrays).
    settings : Settings
        Threads, coalescing and memory bounds.
    fill : Any
        What a missing chunk reads as.
    backend : Backend
        Where chunks are decoded and encoded.
    shards : ShardReader or None
        Reads inner chunks of shards (sharded arrays).
    scratch : Scratch
        Per-thread buffers for stored bytes, reused across calls.
    """

    spec: ArraySpec
    codec: Codec
    settings: Settings
    fill: Any
    backend: Backend
    shards: ShardReader | None
    scratch: Scratch = field(default_factory=Scratch)

    @property
    def sharding(self) -> ShardingCodec | None:
        """The shard format, for sharded arrays."""
        return self.codec.sharding

    def where(self, key: str, inner: tuple[int, ...] | None = None) -> str:
        """``chunk 'key'`` (plus the array path when the key does not hold it), for messages.

        An inner chunk of a shard is ``chunk 'c/0/0[inner chunk (0, 1)]'``.
        """
        if inner is not None:
            key = f"{key}[inner chunk {inner}]"
        path = self.spec.path
        if path and not key.startswith(path + "/"):
            return f"chunk '{key}' of array '{path}'"
        return f"chunk '{key}'"

    def shard_where(self, key: str) -> str:
        """``shard 'key'`` (plus the array path), for messages."""
        return self.where(key).replace("chunk", "shard", 1)

    def per_wave(self, item_nbytes: int, max_count: int | None = None) -> int:
        """How many items of ``item_nbytes`` decoded bytes one wave holds.

        A wave is the backend's :meth:`~cuzarr.backends.base.Backend.wave_bytes`.
        """
        n = per_wave(self.backend.wave_bytes(self.settings), item_nbytes)
        return n if max_count is None else min(n, max_count)


def waves[T](items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """``items`` in consecutive slices of ``size``."""
    for lo in range(0, len(items), max(1, size)):
        yield items[lo : lo + size]


def run_batches[T](
    run: Callable[[Sequence[T]], None], items: Sequence[T], batching: Batching, threads: int
) -> None:
    """Run ``run`` over ``items`` in slices of ``batching.size``, in parallel or in turn."""
    if batching.size == 1 and batching.parallel:
        parallel_map(lambda x: run((x,)), items, threads)
        return
    batches = list(waves(items, batching.size))
    if batching.parallel:
        parallel_map(run, batches, threads)
    else:
        for batch in batches:
            run(batch)
