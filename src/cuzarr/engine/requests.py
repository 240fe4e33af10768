"""Chunk requests: what a selection touches in one stored chunk (or shard)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ChunkRequest"]


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
