"""Chunk requests: what a selection touches in one stored chunk (or shard)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ChunkRequest", "new_request"]


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


def _slot_setter(name: str) -> Callable[[ChunkRequest, Any], None]:
    """The slot descriptor's ``__set__`` of field ``name`` (what the frozen ``__init__`` sets)."""
    setter: Callable[[ChunkRequest, Any], None] = ChunkRequest.__dict__[name].__set__
    return setter


_new = object.__new__
_set_key = _slot_setter("key")
_set_chunk = _slot_setter("chunk_selection")
_set_out = _slot_setter("out_selection")
_set_complete = _slot_setter("complete")


def new_request(
    key: str, chunk_selection: tuple[Any, ...], out_selection: Any, complete: bool
) -> ChunkRequest:
    """``ChunkRequest(key=..., ...)`` for the loops that make one per chunk.

    The same object the dataclass's ``__init__`` makes, without its keyword parsing and its
    four ``object.__setattr__`` calls: about 0.7 us a request instead of 1.7 us (indexers
    make one per chunk of a selection, 4,096 for a read of 8 KiB chunks of 32 MiB).
    """
    request = _new(ChunkRequest)
    _set_key(request, key)
    _set_chunk(request, chunk_selection)
    _set_out(request, out_selection)
    _set_complete(request, complete)
    return request
