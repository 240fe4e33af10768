"""Byte ranges of one object: coalescing, and how one read call fetches from its store.

:func:`coalesce` merges ranges separated by small gaps into fewer reads; :class:`ReadPolicy`
(from :func:`read_policy`) holds what one read call decided about its store: remote or not,
the merge bounds, and whether the store merges ranges itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cuzarr.stores.base import ChunkStore, Coalescing

if TYPE_CHECKING:
    from cuzarr.config import Settings

__all__ = ["ByteRange", "CoalescedRange", "ReadPolicy", "coalesce", "read_policy"]


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
        Reads in ascending order; every input range lies inside exactly one read. A range
        that lies inside the read being built joins it whatever its size (an empty range, such
        as an inner chunk stored with 0 bytes, at the start or end of a larger one), so reads
        of disjoint ranges never overlap; a read is over ``max_size`` only where one range
        alone spans it.
    """
    out: list[CoalescedRange] = []
    group: list[ByteRange] = []
    g_start = g_end = 0
    for r in sorted(ranges, key=lambda r: r.start):
        end = r.start + r.length
        if group and (
            end <= g_end or (r.start - g_end <= max_gap and max(g_end, end) - g_start <= max_size)
        ):
            group.append(r)
            g_end = max(g_end, end)
            continue
        if group:
            out.append(CoalescedRange(g_start, g_end - g_start, tuple(group)))
        group, g_start, g_end = [r], r.start, end
    if group:
        out.append(CoalescedRange(g_start, g_end - g_start, tuple(group)))
    return out


@dataclass(frozen=True, slots=True)
class ReadPolicy:
    """How one read call fetches from its store (decided once per call).

    Attributes
    ----------
    remote : bool
        Requests cost a round trip (object stores, any zarr store used through its API).
    limits : Coalescing
        Bounds on merged byte ranges.
    delegated : bool
        The store merges ranges itself and gets the requests zarr's sharding codec would make
        (a zarr ``Store`` used through its API): no whole-shard overfetch, no pre-merging.
    """

    remote: bool
    limits: Coalescing
    delegated: bool


def read_policy(
    store: ChunkStore, settings: Settings, coalescing: Coalescing | None = None
) -> ReadPolicy:
    """How reads of one call fetch from ``store``.

    Merged reads are bounded by ``Settings.max_gap`` (local files, memory) or
    ``remote_max_gap`` (remote stores) and ``max_coalesced``. zarr's bounds (``coalescing``,
    zarr pipeline path) replace them on remote stores and cap them on local ones: zarr's gap is
    the most a merge *may* bridge, and a read from the page cache costs less than a 1 MiB
    detour through unneeded bytes.
    """
    caps = store.caps
    gap = settings.remote_max_gap if caps.remote else settings.max_gap
    size = settings.max_coalesced
    if coalescing is not None:
        if caps.remote:
            gap, size = coalescing.max_gap, coalescing.max_bytes
        else:
            gap, size = min(gap, coalescing.max_gap), min(size, coalescing.max_bytes)
    return ReadPolicy(remote=caps.remote, limits=Coalescing(gap, size), delegated=caps.coalesces)
