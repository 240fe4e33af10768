"""Object stores (S3, GCS, Azure, HTTP) through obstore, with many requests in flight.

Every request is a coroutine of obstore's async API run on one private event-loop thread per
process (:mod:`cuzarr.stores.io_loop`, drained at exit); engine worker threads submit them and
wait. A per-store semaphore bounds the requests in flight, so all the byte ranges of a shard
(and the requests of every worker) go out together up to that limit. Ranges arrive already
coalesced by the engine, so obstore's own coalescing is not used: only needed bytes are fetched.

Reads return the object's version token, its ETag (with the object's generation on GCS, whose
conditional puts match generations); ranges can be conditional on it (``If-Match``).
Writes put whole objects (one request: chunks and shards are never written in parts), with the
mode the engine asks for: a read-modify-write is conditional on the ETag it read (or on the
object still not existing), so a concurrent writer's update is never silently lost. Transient
errors (5xx, dropped connections, timeouts) are retried by obstore with exponential backoff
(``retry_config``); what still fails raises one :class:`~cuzarr.errors.StoreError` naming the URL.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Coroutine, Sequence
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from cuzarr import _zarr_compat as compat
from cuzarr.codecs.base import Buf, as_u8
from cuzarr.errors import (
    NodeNotFoundError,
    ReadOnlyError,
    StaleObjectError,
    StoreError,
    UnsupportedError,
)
from cuzarr.stores.base import (
    BaseChunkStore,
    BufferPool,
    Coalescing,
    GetResult,
    PutMode,
    Range,
    Scratch,
    StoreCaps,
    Suffix,
)
from cuzarr.stores.io_loop import run_on_loop

__all__ = ["MULTIPART_THRESHOLD", "ObstoreChunkStore", "first_line"]

#: Objects larger than this are uploaded in parts (still atomic: visible only when complete).
MULTIPART_THRESHOLD = 64 * 1024 * 1024
#: Requests in flight per store unless told otherwise (``Settings.io_concurrency``'s default).
DEFAULT_CONCURRENCY = 32
_CODE = re.compile(r"<Code>([^<]+)</Code>")
_NO_BYTES = np.empty(0, np.uint8)


# ---------------------------------------------------------------------------- errors


def first_line(exc: BaseException) -> str:
    """The first line of an obstore error, with the server's error code, not its XML body."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    code = _CODE.search(text)
    line = line.split(": <?xml", 1)[0]
    return f"{line} [{code.group(1)}]" if code else line


def _is_status(exc: BaseException, status: int) -> bool:
    """Whether an obstore error is an HTTP ``status`` answer.

    obstore (0.12) raises a generic error for statuses it has no class for (416 Range Not
    Satisfiable among them) and exposes no status code: its message is all there is.
    """
    return f"status code: {status}" in str(exc) or f"status: {status}," in str(exc)


def _missing(exc: BaseException) -> bool:
    from obstore.exceptions import NotFoundError

    # obstore raises the builtin FileNotFoundError for a missing object.
    return isinstance(exc, (NotFoundError, FileNotFoundError)) and not _no_bucket(exc)


#: What S3 and GCS (``NoSuchBucket``) and Azure (``ContainerNotFound``) answer for a missing
#: bucket or container, in the body of their 404.
_NO_BUCKET = ("NoSuchBucket", "ContainerNotFound")


def _no_bucket(exc: BaseException) -> bool:
    text = str(exc)
    return any(code in text for code in _NO_BUCKET)


def _past_end(exc: BaseException) -> bool:
    """Whether a ranged read failed because it starts at or past the end of the object.

    Servers answer 416; Azurite answers a range starting exactly at the end with an empty 206,
    which obstore refuses itself ("Wanted range starting at N, but object was only N bytes").
    """
    return _is_status(exc, 416) or "Wanted range starting at" in str(exc)


def _is_gcs(store: Any) -> bool:
    from obstore.store import GCSStore

    return isinstance(store, GCSStore)


def _is_http(store: Any) -> bool:
    from obstore.store import HTTPStore

    return isinstance(store, HTTPStore)


def _etag(token: str) -> str:
    """The ETag part of a version token (``"etag"`` or ``"etag generation"``)."""
    return token.split(" ", 1)[0]


def _update_mode(token: str) -> dict[str, str]:
    """obstore's put mode for an update conditional on ``token``.

    ETags never contain a space (RFC 9110 8.8.3), so a GCS token is ``"<etag> <generation>"``:
    GCS conditions updates on the generation, the other services on the ETag.
    """
    etag, _, generation = token.partition(" ")
    return {"e_tag": etag, "version": generation} if generation else {"e_tag": etag}


def _u8(data: Any) -> Buf:
    return data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)


def _store_error(exc: BaseException, what: str, where: str) -> Exception:
    """The cuzarr error for an obstore failure: one line naming the operation and ``where``."""
    from obstore.exceptions import (
        InvalidPathError,
        NotFoundError,
        PermissionDeniedError,
        UnauthenticatedError,
    )

    detail = first_line(exc)
    if isinstance(exc, (NotFoundError, FileNotFoundError)) and _no_bucket(exc):
        kind = "container" if "ContainerNotFound" in str(exc) else "bucket"
        return NodeNotFoundError(f"Failed to {what} {where}: the {kind} does not exist ({detail})")
    if isinstance(exc, PermissionDeniedError):
        return StoreError(
            f"Failed to {what} {where}: access denied (check the credentials and the "
            f"bucket policy): {detail}"
        )
    if isinstance(exc, UnauthenticatedError):
        return StoreError(f"Failed to {what} {where}: bad or missing credentials: {detail}")
    if isinstance(exc, InvalidPathError):
        return StoreError(f"Failed to {what} {where}: invalid object key: {detail}")
    return StoreError(f"Failed to {what} {where}: {detail}")


def _reraise(exc: BaseException, what: str, key: str, store: str) -> NoReturn:
    """Raise ``exc`` as it leaves the store: obstore's failures as cuzarr errors naming ``key``.

    obstore raises ``NotImplementedError`` for what a store cannot do (HTTPStore: puts with a
    mode other than overwrite); cuzarr's own errors and anything else pass as they are.
    """
    from obstore.exceptions import BaseError

    if isinstance(exc, StoreError) or not isinstance(
        exc, (BaseError, OSError, NotImplementedError)
    ):
        raise exc
    raise _store_error(exc, what, f"'{key}' in {store}") from exc


class ObstoreChunkStore(BaseChunkStore):
    """The engine's store over an obstore store (``S3Store``, ``GCSStore``, ``HTTPStore``...).

    Parameters
    ----------
    store : obstore.store.ObjectStore
        The obstore store (its URL prefix is part of it).
    name : str, optional
        What messages call the store (default: the obstore store's ``repr``); the URL for
        stores opened from one.
    read_only : bool, default False
        Refuse writes.
    concurrency : int, optional
        Requests in flight at once (default: ``Settings.io_concurrency``, 32).
    """

    def __init__(
        self,
        store: Any,
        *,
        name: str | None = None,
        read_only: bool = False,
        concurrency: int | None = None,
    ) -> None:
        self._store = store
        self.name = name or repr(store)
        self.read_only = read_only
        limit = concurrency or DEFAULT_CONCURRENCY
        http = _is_http(store)
        # HTTP servers have no listing and no conditional puts (obstore's HTTPStore).
        self.caps = StoreCaps(
            remote=True, versions=True, conditional_put=not http, listing=not http,
            concurrency=limit,
        )
        self._generations = _is_gcs(store)
        self._max_in_flight = limit
        self._sem: asyncio.Semaphore | None = None
        self._zarr_store: Any = None

    def __repr__(self) -> str:
        return f"ObstoreChunkStore({self.name})"

    @property
    def obstore(self) -> Any:
        """The underlying obstore store."""
        return self._store

    # ------------------------------------------------------------------ plumbing

    def _limit(self) -> asyncio.Semaphore:
        # Created on the loop thread only (see ``_guard``), so no lock is needed.
        if self._sem is None:
            self._sem = asyncio.Semaphore(self._max_in_flight)
        return self._sem

    async def _guard[T](self, make: Any) -> T:
        async with self._limit():
            return await make()  # type: ignore[no-any-return]

    def _call[T](self, coro: Coroutine[Any, Any, T], what: str, key: str) -> T:
        try:
            return run_on_loop(coro)
        except Exception as exc:
            _reraise(exc, what, key, self.name)

    def _token(self, meta: Any) -> str | None:
        """The version token of an object's metadata: its ETag, and generation on GCS."""
        tag = meta.get("e_tag")
        generation = meta.get("version") if self._generations else None
        if tag is None or generation is None:
            return tag  # type: ignore[no-any-return]
        return f"{tag} {generation}"

    def _stale(self, key: str, version: str | None) -> StaleObjectError:
        return StaleObjectError(f"'{key}' in {self.name} changed since its version {version}")

    # ------------------------------------------------------------------ reads

    async def _get(
        self, key: str, byte_range: Range | None, if_match: str | None
    ) -> GetResult | None:
        import obstore
        from obstore.exceptions import PreconditionError

        if byte_range is not None and byte_range.length <= 0:
            return GetResult(_NO_BYTES, None, None)
        options: Any = {}
        if byte_range is not None:
            options["range"] = (byte_range.start, byte_range.start + byte_range.length)
        if if_match is not None:
            options["if_match"] = _etag(if_match)

        async def get() -> GetResult | None:
            try:
                result = await obstore.get_async(self._store, key, options=options or None)
                meta = result.meta
                data = await result.bytes_async()
                return GetResult(_u8(data), int(meta["size"]), self._token(meta))
            except PreconditionError as exc:
                raise self._stale(key, if_match) from exc
            except Exception as exc:
                if _missing(exc):
                    return None
                if byte_range is not None and _past_end(exc):
                    # Starts past the end of the object: a short (empty) read.
                    return GetResult(_NO_BYTES, None, None)
                raise

        return await self._guard(get)

    async def _suffix(self, key: str, length: int) -> GetResult | None:
        import obstore
        from obstore.exceptions import NotSupportedError, PreconditionError

        async def suffix() -> GetResult | None:
            try:
                try:
                    result = await obstore.get_async(
                        self._store, key, options={"range": {"suffix": length}}
                    )
                    meta = result.meta
                    data = await result.bytes_async()
                    return GetResult(_u8(data), int(meta["size"]), self._token(meta))
                except NotSupportedError:
                    pass  # Azure has no suffix requests: size first, then the range
                except Exception as exc:
                    if not _is_status(exc, 416):
                        raise
                    # An empty object has no suffix to return.
                head = await obstore.head_async(self._store, key)
                size = int(head["size"])
                tag = head.get("e_tag")
                token = self._token(head)
                start = max(0, size - length)
                if size == start:
                    return GetResult(_NO_BYTES, size, token)
                if tag is None:
                    data = await obstore.get_range_async(self._store, key, start=start, end=size)
                else:
                    got = await obstore.get_async(
                        self._store, key, options={"range": (start, size), "if_match": tag}
                    )
                    data = await got.bytes_async()
                return GetResult(_u8(data), size, token)
            except PreconditionError as exc:  # Azure's HEAD-then-range raced a writer
                raise StaleObjectError(f"'{key}' in {self.name} changed while read") from exc
            except Exception as exc:
                if _missing(exc):
                    return None
                raise

        return await self._guard(suffix)

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
        """One GET: the whole object or a range (optionally ``If-Match``), with size and ETag.

        A suffix is one request where the service has suffix ranges (S3, GCS, HTTP), a HEAD
        and a conditional range where it does not (Azure).
        """
        if isinstance(byte_range, Suffix):
            return self._call(self._suffix(key, byte_range.length), "read", key)
        return self._call(self._get(key, byte_range, if_match), "read", key)

    async def _get_all(self, keys: Sequence[str]) -> list[GetResult | BaseException | None]:
        return await asyncio.gather(
            *(self._get(key, None, None) for key in keys), return_exceptions=True
        )

    def get_many(self, keys: Sequence[str], size_hint: int | None = None) -> list[Buf | None]:
        """Whole objects (``None`` for missing ones), all requested together.

        The requests are in flight at once, up to the store's concurrency, so a batch costs
        about one round trip. A failure raises for the first failed key in ``keys``' order,
        after every request has finished.
        """
        if not keys:
            return []
        results = run_on_loop(self._get_all(keys))
        out: list[Buf | None] = []
        for key, got in zip(keys, results, strict=True):
            if isinstance(got, BaseException):
                _reraise(got, "read", key, self.name)
            out.append(None if got is None else got.data)
        return out

    async def _range(self, key: str, start: int, length: int, version: str | None) -> Any:
        import obstore

        if length <= 0:
            return _NO_BYTES

        async def one() -> Any:
            try:
                if version is None:
                    # obstore's plain ranged read: the cheaper call (no metadata).
                    return await obstore.get_range_async(
                        self._store, key, start=start, length=length
                    )
                result = await obstore.get_async(
                    self._store,
                    key,
                    options={"range": (start, start + length), "if_match": _etag(version)},
                )
                return await result.bytes_async()
            except Exception as exc:
                if _past_end(exc):
                    # Starts past the end of the object: the caller sees a short read.
                    return _NO_BYTES
                raise

        return await self._guard(one)

    async def _ranges(
        self, key: str, ranges: Sequence[tuple[int, int]], version: str | None
    ) -> list[Any] | None:
        from obstore.exceptions import PreconditionError

        try:
            return list(
                await asyncio.gather(*(self._range(key, s, n, version) for s, n in ranges))
            )
        except PreconditionError as exc:
            raise self._stale(key, version) from exc
        except Exception as exc:
            if _missing(exc):
                return None
            raise

    def get_ranges(
        self,
        key: str,
        ranges: Sequence[tuple[int, int]],
        *,
        if_match: str | None = None,
        limits: Coalescing | None = None,
    ) -> list[Buf | None] | None:
        """Byte ranges of one object, all in flight together (``If-Match`` when given)."""
        got = self._call(self._ranges(key, ranges, if_match), "read ranges of", key)
        if got is None:
            return None
        return [_u8(b) for b in got]

    def read_into(self, key: str, out: npt.NDArray[np.uint8]) -> int | None:
        """Fetch an object and copy it into ``out`` when the sizes match."""
        got = self.get(key)
        if got is None:
            return None
        n = int(got.data.nbytes)
        if n == out.nbytes:
            out[...] = got.data
        return n

    # ------------------------------------------------------------------ writes

    def check_writable(self) -> None:
        """Raise if the store is read-only."""
        if self.read_only:
            raise ReadOnlyError(
                f"store was opened in read-only mode and does not support writing ({self.name})"
            )

    async def _put(self, key: str, data: npt.NDArray[np.uint8], mode: Any) -> None:
        import obstore

        multipart = mode == "overwrite" and data.nbytes > MULTIPART_THRESHOLD

        async def put() -> None:
            await obstore.put_async(self._store, key, data, mode=mode, use_multipart=multipart)

        await self._guard(put)

    def put(
        self, key: str, data: Buf, *, mode: PutMode = PutMode.OVERWRITE, version: str | None = None
    ) -> None:
        """Put a whole object (atomic: readers see the old or the new object, never a part).

        ``CREATE`` is ``If-None-Match: *``, ``UPDATE`` is ``If-Match: version``; a refusal
        raises :class:`~cuzarr.errors.StaleObjectError` and leaves the other writer's object in
        place. A service without conditional puts gets an unconditional one, as zarr does.
        """
        from obstore.exceptions import AlreadyExistsError, NotSupportedError, PreconditionError

        u8 = np.ascontiguousarray(as_u8(data))
        wanted: Any = "overwrite"
        if mode is PutMode.CREATE:
            wanted = "create"
        elif mode is PutMode.UPDATE and version is not None:
            wanted = _update_mode(version)
        try:
            self._call(self._put(key, u8, wanted), "write", key)
        except StoreError as exc:
            cause = exc.__cause__
            unsupported = isinstance(cause, (NotSupportedError, NotImplementedError))
            if unsupported and wanted != "overwrite":
                self._call(self._put(key, u8, "overwrite"), "write", key)
                return
            if isinstance(cause, (AlreadyExistsError, PreconditionError)):
                raise StaleObjectError(
                    f"Failed to write '{key}' in {self.name}: another writer changed it while "
                    "cuzarr was updating it (conditional put refused; the other writer's object "
                    "is kept). Re-read and retry."
                ) from cause
            raise

    async def _delete(self, key: str) -> None:
        import obstore

        async def delete() -> None:
            try:
                await obstore.delete_async(self._store, key)
            except Exception as exc:
                if not _missing(exc):
                    raise

        await self._guard(delete)

    def delete(self, key: str) -> None:
        """Delete an object; a missing key is not an error."""
        self._call(self._delete(key), "delete", key)

    # ------------------------------------------------------------------ listing

    def _as_zarr(self) -> Any:
        if self._zarr_store is None:
            self._zarr_store = compat.object_store(self._store, read_only=True)
        return self._zarr_store

    def _listing(self, prefix: str, list_fn: Any) -> Any:
        """``list_fn`` over zarr's view of this store, failures named (``prefix``, the URL)."""
        if not self.caps.listing:
            raise UnsupportedError(
                f"cannot list '{prefix}' in {self.name}: the server has no listing (HTTP(S)); "
                "open arrays and groups by their paths, or read a consolidated group"
            )
        base = prefix.strip("/")
        try:
            return list_fn(self._as_zarr(), f"{base}/" if base else "")
        except Exception as exc:
            _reraise(exc, "list", prefix, self.name)

    def list_dir(self, prefix: str) -> list[str]:
        """Names directly below ``prefix`` (one delimited listing)."""
        return sorted({n.strip("/") for n in self._listing(prefix, compat.list_dir)})

    def list_sizes(self, prefix: str) -> list[tuple[str, int]]:
        """Every key below ``prefix`` with its size."""
        return sorted(self._listing(prefix, compat.list_sizes))
