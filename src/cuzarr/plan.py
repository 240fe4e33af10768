"""Read and write plans: chunk requests, and coalescing of byte ranges within one object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ByteRange", "ChunkRequest", "CoalescedRange", "coalesce"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkRequest:
    """One stored chunk (or shard) touched by a selection.

    Attributes
    ----------
    key : str
        Store key of the chunk or shard.
    chunk_selection : tuple
        Selection inside the decoded chunk (zarr's indexer form).
    out_selection : Any
        Where the selected values go in the output (or come from in the written value).
    complete : bool
        Whether the selection covers the whole chunk.
    """

    key: str
    chunk_selection: tuple[Any, ...]
    out_selection: Any
    complete: bool


@dataclass(frozen=True, slots=True)
class ByteRange:
    """A byte range ``[start, start + length)`` of one object, tagged with its owner."""

    start: int
    length: int
    tag: int


@dataclass(frozen=True, slots=True)
class CoalescedRange:
    """One read covering several byte ranges."""

    start: int
    length: int
    parts: tuple[ByteRange, ...]


def coalesce(ranges: list[ByteRange], *, max_gap: int, max_size: int) -> list[CoalescedRange]:
    """Merge byte ranges separated by at most ``max_gap`` into reads of at most ``max_size``.

    Parameters
    ----------
    ranges : list of ByteRange
        Ranges of one object, in any order.
    max_gap : int
        Largest gap bridged (bytes read and thrown away).
    max_size : int
        Largest merged read; a single larger range is still read whole.

    Returns
    -------
    list of CoalescedRange
        Reads in ascending order; every input range lies inside exactly one read.
    """
    out: list[CoalescedRange] = []
    group: list[ByteRange] = []
    g_start = g_end = 0
    for r in sorted(ranges, key=lambda r: r.start):
        end = r.start + r.length
        if group and r.start - g_end <= max_gap and max(g_end, end) - g_start <= max_size:
            group.append(r)
            g_end = max(g_end, end)
            continue
        if group:
            out.append(CoalescedRange(g_start, g_end - g_start, tuple(group)))
        group, g_start, g_end = [r], r.start, end
    if group:
        out.append(CoalescedRange(g_start, g_end - g_start, tuple(group)))
    return out
