"""Any other zarr-python ``Store`` (zip, fsspec, wrappers, subclasses), through its own API.

Worker threads call the store's coroutines on an event loop that is free while the engine runs:
the loop that awaits the engine in the pipeline adapter, or zarr's own loop otherwise.

The requests are the ones zarr itself makes, so that a store which logs, counts, caches,
decrypts or fails on purpose in its methods sees what it would see under zarr's own pipeline:
whole objects with ``get``, a shard index with one ranged ``get``, the needed inner chunks of a
shard with one ``get_ranges`` call (zarr's coalescing API, which the store may override), with
zarr's ``array.sharding_coalesce_*`` bounds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cuzarr import _zarr_compat as compat
from cuzarr.codecs.base import Buf, as_u8
from cuzarr.errors import ReadOnlyError, StoreError
from cuzarr.stores.base import (
    BaseChunkStore,
    BufferPool,
    Coalescing,
    GetResult,
    ObjectReader,
    PutMode,
    Range,
    Scratch,
    StoreCaps,
    Suffix,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from cuzarr.stores.local import LocalChunkStore

__all__ = ["FolderReadsChunkStore", "ZarrChunkStore"]

#: zarr's defaults for ``array.sharding_coalesce_max_gap_bytes`` / ``..._max_bytes``.
ZARR_DEFAULT_COALESCING = Coalescing(max_gap=1 << 20, max_bytes=16 << 20)


class ZarrChunkStore(BaseChunkStore):
    """Adapter from a zarr ``Store`` to :class:`~cuzarr.stores.base.ChunkStore`.

    It coalesces (:attr:`~cuzarr.stores.base.StoreCaps.coalesces`): ranges go to the store's
    own ``get_ranges``, which merges them.

    Parameters
    ----------
    store : zarr.abc.store.Store
        The store.
    loop : asyncio.AbstractEventLoop or None
        A running loop not blocked by the engine; ``None`` uses zarr's ``sync``.
    """

    def __init__(self, store: Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
        from zarr.core.buffer import default_buffer_prototype

        self._store = store
        self._loop = loop
        self._prototype = default_buffer_prototype()
        self.name = str(store)
        self.caps = StoreCaps(remote=True, coalesces=True, loop_writes=True)

    def _run[T](self, coro: Coroutine[Any, Any, T], what: str = "", key: str = "") -> T:
        try:
            if self._loop is not None:
                return asyncio.run_coroutine_threadsafe(coro, self._loop).result()
            return compat.run_sync(coro)  # type: ignore[no-any-return]
        except (FileNotFoundError, StoreError):
            raise
        except OSError as exc:
            raise self._failed(what, key, exc) from exc

    def _failed(self, what: str, key: str, exc: OSError) -> StoreError:
        """The store's error, named: the operation, the key and the store."""
        return StoreError(f"Failed to {what} '{key}' in {self.name}: {exc}")

    @staticmethod
    def _bytes(value: Any) -> Buf:
        return as_u8(value.as_numpy_array())

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
        """One ``get`` of the store: the whole object, or one range (how zarr reads an index).

        The object's size is known for whole objects and for suffixes longer than the object.
        """
        from zarr.abc.store import RangeByteRequest, SuffixByteRequest

        request: Any = None
        if isinstance(byte_range, Suffix):
            request = SuffixByteRequest(byte_range.length)
        elif byte_range is not None:
            request = RangeByteRequest(byte_range.start, byte_range.start + byte_range.length)
        try:
            value = self._run(self._store.get(key, self._prototype, request), "read", key)
        except FileNotFoundError:
            return None
        if value is None:
            return None
        data = self._bytes(value)
        n = memoryview(data).nbytes
        if byte_range is None:
            return GetResult(data, n)
        if isinstance(byte_range, Suffix):
            return GetResult(data, n if n < byte_range.length else None)
        return GetResult(data, None)

    async def _get_all(self, keys: Sequence[str]) -> list[Any]:
        return await asyncio.gather(
            *(self._store.get(key, self._prototype) for key in keys), return_exceptions=True
        )

    def get_many(self, keys: Sequence[str], size_hint: int | None = None) -> list[Buf | None]:
        """Whole objects (``None`` for missing ones), the store's gets all awaited together.

        A failure raises for the first failed key in ``keys``' order, after every get has
        finished.
        """
        if not keys:
            return []
        results = self._run(self._get_all(keys), "read", keys[0])
        out: list[Buf | None] = []
        for key, value in zip(keys, results, strict=True):
            if isinstance(value, FileNotFoundError) or value is None:
                out.append(None)
            elif isinstance(value, OSError) and not isinstance(value, StoreError):
                raise self._failed("read", key, value) from value
            elif isinstance(value, BaseException):
                raise value
            else:
                out.append(self._bytes(value))
        return out

    def get_ranges(
        self,
        key: str,
        ranges: Sequence[tuple[int, int]],
        *,
        if_match: str | None = None,
        limits: Coalescing | None = None,
    ) -> list[Buf | None] | None:
        """Fetch byte ranges in one call of the store's ``get_ranges`` (it merges them).

        ``limits`` are zarr's ``array.sharding_coalesce_*`` bounds (zarr's defaults if not
        given). ``None`` when the object is missing, as zarr's sharding codec reads a shard
        that disappeared after its index was read; a range the store returns nothing for is
        ``None`` in the list (zarr reads that inner chunk as the fill value). Other failures
        of the store are raised (a single one as itself, named by
        :class:`~cuzarr.errors.StoreError` if it is an ``OSError``).
        """
        from zarr.abc.store import RangeByteRequest

        bounds = limits or ZARR_DEFAULT_COALESCING
        requests = [RangeByteRequest(start, start + length) for start, length in ranges]
        out: list[Buf | None] = [None] * len(requests)

        async def collect() -> bool:
            try:
                async for group in self._store.get_ranges(
                    key,
                    requests,
                    prototype=self._prototype,
                    max_gap_bytes=bounds.max_gap,
                    max_coalesced_bytes=bounds.max_bytes,
                ):
                    for i, buf in group:
                        if buf is not None:
                            out[i] = self._bytes(buf)
            except BaseExceptionGroup as group:
                _, rest = group.split(FileNotFoundError)
                if rest is None:
                    return False
                errors = [e for e in rest.exceptions if not isinstance(e, BaseExceptionGroup)]
                if len(errors) == 1 and isinstance(errors[0], Exception):
                    raise errors[0] from group
                raise
            return True

        if not self._run(collect(), "read ranges of", key):
            return None
        return out

    def check_writable(self) -> None:
        """Raise if the store is read-only (the store's own check decides)."""
        try:
            self._store._check_writable()
        except ValueError as exc:
            raise ReadOnlyError(f"{exc} ({self.name})") from exc

    def put(
        self, key: str, data: Buf, *, mode: PutMode = PutMode.OVERWRITE, version: str | None = None
    ) -> None:
        """Write a whole object through the store's ``set`` (no conditional puts)."""
        value = self._prototype.buffer.from_array_like(as_u8(data))
        self._run(self._store.set(key, value), "write", key)

    def delete(self, key: str) -> None:
        """Delete an object through the store (missing keys are ignored by zarr stores)."""
        self._run(self._store.delete(key), "delete", key)

    def list_dir(self, prefix: str) -> list[str]:
        """Names directly below ``prefix`` through the store's ``list_dir``."""
        base = prefix.strip("/")
        names = compat.list_dir(self._store, f"{base}/" if base else "")
        return sorted({n.strip("/") for n in names})

    def list_sizes(self, prefix: str) -> list[tuple[str, int]]:
        """Every key below ``prefix`` with its size, through the store's listing."""
        base = prefix.strip("/")
        return sorted(compat.list_sizes(self._store, f"{base}/" if base else ""))


class FolderReadsChunkStore(BaseChunkStore):
    """A zarr store that is a local folder for reads and its own API for writes.

    For kvikio's ``GDSStore`` (:func:`cuzarr._zarr_equivalence.gds_store_root`): its ``get`` reads
    the same files as zarr's ``LocalStore`` and only puts the bytes elsewhere, so every read
    (and the GPU backend's kvikio device reads, :attr:`StoreCaps.device_reads`) goes to the
    folder through ``local``. Its ``set`` rewrites a file in place with kvikio, where cuzarr
    replaces files atomically, so writes, deletes and the writable check go through the
    store's own methods (``api``), exactly as zarr's pipeline would call them. Listing is the
    folder's (the same files).

    Parameters
    ----------
    local : LocalChunkStore
        The store's root folder.
    api : ZarrChunkStore
        The same store through its own API.
    """

    def __init__(self, local: LocalChunkStore, api: ZarrChunkStore) -> None:
        self.local = local
        self.api = api
        self.name = local.name
        # Reads as the folder's; writes one put per object through the store (on its event
        # loop: loop_writes), without cuzarr's batch writes of boxes (they write files
        # directly). The folder's write locks still serialize cuzarr's read-modify-writes
        # with other cuzarr writers.
        self.caps = replace(local.caps, box_puts=False, loop_writes=True)

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
        """The folder's :meth:`LocalChunkStore.get`."""
        return self.local.get(
            key, byte_range, if_match=if_match, scratch=scratch, size_hint=size_hint, fresh=fresh
        )

    def get_ranges(
        self,
        key: str,
        ranges: Sequence[tuple[int, int]],
        *,
        if_match: str | None = None,
        limits: Coalescing | None = None,
    ) -> list[Buf | None] | None:
        """The folder's :meth:`LocalChunkStore.get_ranges`."""
        return self.local.get_ranges(key, ranges, if_match=if_match, limits=limits)

    def get_many(self, keys: Sequence[str], size_hint: int | None = None) -> list[Buf | None]:
        """The folder's :meth:`LocalChunkStore.get_many`."""
        return self.local.get_many(keys, size_hint)

    def read_into(self, key: str, out: npt.NDArray[np.uint8]) -> int | None:
        """The folder's :meth:`LocalChunkStore.read_into`."""
        return self.local.read_into(key, out)

    def open_object(self, key: str) -> ObjectReader | None:
        """The folder's :meth:`LocalChunkStore.open_object`."""
        return self.local.open_object(key)

    def local_file(self, key: str) -> str | None:
        """The folder's :meth:`LocalChunkStore.local_file` (the GPU backend's device reads)."""
        return self.local.local_file(key)

    def file_paths(self, keys: Sequence[str]) -> list[bytes]:
        """The folder's :meth:`LocalChunkStore.file_paths`."""
        return self.local.file_paths(keys)

    def list_dir(self, prefix: str) -> list[str]:
        """The folder's :meth:`LocalChunkStore.list_dir`."""
        return self.local.list_dir(prefix)

    def list_sizes(self, prefix: str) -> list[tuple[str, int]]:
        """The folder's :meth:`LocalChunkStore.list_sizes`."""
        return self.local.list_sizes(prefix)

    def check_writable(self) -> None:
        """The store's own check."""
        self.api.check_writable()

    def put(
        self, key: str, data: Buf, *, mode: PutMode = PutMode.OVERWRITE, version: str | None = None
    ) -> None:
        """One ``set`` of the store (no conditional puts: :attr:`StoreCaps.conditional_put`)."""
        self.api.put(key, data, mode=mode, version=version)

    def delete(self, key: str) -> None:
        """One ``delete`` of the store."""
        self.api.delete(key)
