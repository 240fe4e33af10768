"""The cuzarr error hierarchy.

Every error cuzarr raises derives from :class:`CuzarrError` and also from the builtin that a
caller would naturally catch (``ValueError`` for bad data, ``FileNotFoundError`` for missing
nodes, ``NotImplementedError`` for what the engine cannot do), so code written against
zarr-python keeps working when cuzarr is the engine underneath.
"""

from __future__ import annotations

__all__ = [
    "CorruptChunkError",
    "CuzarrError",
    "MetadataError",
    "NodeNotFoundError",
    "ReadOnlyError",
    "StaleObjectError",
    "StoreError",
    "UnsupportedError",
]


class CuzarrError(Exception):
    """Base class of every error raised by cuzarr."""


class MetadataError(CuzarrError, ValueError):
    """Array or group metadata is malformed or inconsistent.

    The message names the document (``zarr.json``, ``.zarray``), the field and the bad value.
    """


class CorruptChunkError(CuzarrError, ValueError):
    """A stored chunk or shard cannot be decoded into what the metadata promises.

    Raised for decompression failures, wrong decoded sizes, checksum mismatches, truncated
    shards and shard indexes that point outside their shard. The message names the key.
    """


class UnsupportedError(CuzarrError, NotImplementedError):
    """The engine cannot handle this array, codec or store.

    In the zarr pipeline adapter this drives the fallback to zarr-python's own pipeline (logged
    once, counted); with ``strict=True`` it is raised instead.
    """


class StoreError(CuzarrError, OSError):
    """A store could not be read or written (permissions, full disk, unreachable)."""


class NodeNotFoundError(CuzarrError, FileNotFoundError):
    """No array or group exists at the given path."""


class StaleObjectError(StoreError):
    """An object changed since the version a read or put was conditional on.

    HTTP 412 on ``If-Match``, or a conditional put refused because another writer replaced
    (or created) the object first. The shard reader re-reads a shard's index and retries; a
    refused put is raised to the caller with the other writer's object left in place.
    """


class ReadOnlyError(CuzarrError, ValueError):
    """A write to a store or array opened read-only (a ``ValueError``, as in zarr-python)."""
