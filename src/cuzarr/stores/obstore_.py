"""Object stores (S3, GCS, Azure, HTTP) through obstore, with many requests in flight.

Every request is a coroutine of obstore's async API run on one private event-loop thread per
process (:mod:`cuzarr.stores.io_loop`, drained at exit); engine worker threads submit them and
wait. A per-store semaphore bounds the requests
in flight, so all the byte ranges of a shard (and the requests of every worker) go out together
up to that limit. Ranges arrive already coalesced by the engine (``Settings.max_gap`` and
``max_coalesced``), so obstore's own coalescing is turned off: only needed bytes are fetched.

Writes put whole objects (one request: chunks and shards are never written in parts). A
read-modify-write of a chunk or shard is conditional where the store supports it: the object
is written only if it still has the ETag it had when it was read (or still does not exist), so
a concurrent writer's update is never silently lost. Transient errors (5xx, dropped
connections, timeouts) are retried by obstore with exponential backoff (``retry_config``);
what still fails raises one :class:`~cuzarr.errors.StoreError` naming the URL.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import re
import threading
from collections.abc import Coroutine, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from cuzarr.codecs.base import Buf, as_u8
from cuzarr.errors import NodeNotFoundError, StoreError
from cuzarr.stores.base import BufferPool, Scratch, StaleObjectError
from cuzarr.stores.io_loop import run_on_loop

__all__ = [
    "OBJECT_STORE_SCHEMES",
    "ObstoreChunkStore",
    "open_url",
    "run_on_loop",
]

#: URL schemes :func:`open_url` handles.
OBJECT_STORE_SCHEMES = frozenset(
    {"s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss", "adl", "http", "https"}
)
#: Objects larger than this are uploaded in parts (still atomic: visible only when complete).
MULTIPART_THRESHOLD = 64 * 1024 * 1024
_CODE = re.compile(r"<Code>([^<]+)</Code>")
_NO_BYTES = np.empty(0, np.uint8)


# ---------------------------------------------------------------------------- errors


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    code = _CODE.search(text)
    # Keep the message short: the server's error code, not its XML body.
    line = line.split(": <?xml", 1)[0]
    return f"{line} [{code.group(1)}]" if code else line


def _is_status(exc: BaseException, status: int) -> bool:
    return f"status code: {status}" in str(exc) or f"status: {status}," in str(exc)


class ObstoreChunkStore:
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
        Requests in flight at once (default: ``Settings.io_concurrency`` when created).
    """

    #: High latency per request: the engine keeps many requests in flight and caches indexes.
    remote = True

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
        #: Requests in flight at once (``None``: ``Settings.io_concurrency``).
        self.io_concurrency = concurrency
        if concurrency is None:
            from cuzarr.config import get_settings

            concurrency = get_settings().io_concurrency
        self._max_in_flight = concurrency
        self._sem: asyncio.Semaphore | None = None
        # Versions seen by ``get_for_update`` on this thread, for the conditional ``set``.
        self._versions = threading.local()
        self._generation = 0

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

    def _error(self, exc: BaseException, what: str, key: str) -> Exception:
        """The cuzarr error for an obstore failure: one line naming the operation and URL."""
        from obstore.exceptions import (
            InvalidPathError,
            NotFoundError,
            PermissionDeniedError,
            UnauthenticatedError,
        )

        detail = _first_line(exc)
        where = f"'{key}' in {self.name}"
        if isinstance(exc, (NotFoundError, FileNotFoundError)) and "NoSuchBucket" in str(exc):
            return NodeNotFoundError(
                f"Failed to {what} {where}: the bucket does not exist ({detail})"
            )
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

    def _call[T](self, coro: Coroutine[Any, Any, T], what: str, key: str) -> T:
        from obstore.exceptions import BaseError

        try:
            return run_on_loop(coro)
        except (BaseError, OSError) as exc:
            if isinstance(exc, StoreError):
                raise
            raise self._error(exc, what, key) from exc

    @staticmethod
    def _missing(exc: BaseException) -> bool:
        from obstore.exceptions import NotFoundError

        # obstore raises the builtin FileNotFoundError for a missing object.
        return isinstance(exc, (NotFoundError, FileNotFoundError)) and (
            "NoSuchBucket" not in str(exc)
        )

    # ------------------------------------------------------------------ reads

    async def _get(self, key: str) -> tuple[Any, Any] | None:
        import obstore

        async def get() -> tuple[Any, Any] | None:
            try:
                result = await obstore.get_async(self._store, key)
                return await result.bytes_async(), result.meta
            except Exception as exc:
                if self._missing(exc):
                    return None
                raise

        return await self._guard(get)

    def get(self, key: str, scratch: Scratch | BufferPool | None = None) -> Buf | None:
        """Fetch a whole object (one GET); ``None`` if missing."""
        got = self._call(self._get(key), "read", key)
        return None if got is None else np.frombuffer(got[0], np.uint8)

    def get_versioned(self, key: str) -> tuple[Buf, str | None] | None:
        """Fetch a whole object (one GET) and its ETag; ``None`` if missing."""
        got = self._call(self._get(key), "read", key)
        if got is None:
            return None
        return np.frombuffer(got[0], np.uint8), got[1].get("e_tag")

    def get_for_update(self, key: str) -> Buf | None:
        """Fetch an object that the calling thread is about to rewrite.

        Remembers its ETag (or that it is missing), so that the next :meth:`set` of ``key``
        on this thread in the same write call is conditional on it.
        """
        got = self._call(self._get(key), "read", key)
        table: dict[str, tuple[int, str | None]] | None = getattr(self._versions, "table", None)
        if table is None:
            table = self._versions.table = {}
        if got is None:
            table[key] = (self._generation, None)
            return None
        table[key] = (self._generation, got[1].get("e_tag"))
        return np.frombuffer(got[0], np.uint8)

    def read_into(self, key: str, out: npt.NDArray[np.uint8]) -> int | None:
        """Fetch an object and copy it into ``out`` when the sizes match."""
        data = self.get(key)
        if data is None:
            return None
        n = int(data.nbytes)
        if n == out.nbytes:
            out[...] = data
        return n

    async def _range(self, key: str, start: int, length: int) -> Any:
        import obstore

        if length <= 0:
            return _NO_BYTES

        async def one() -> Any:
            try:
                return await obstore.get_range_async(self._store, key, start=start, length=length)
            except Exception as exc:
                if _is_status(exc, 416):
                    # Starts past the end of the object: the caller sees a short read.
                    return _NO_BYTES
                raise

        return await self._guard(one)

    async def _ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[Any] | None:
        try:
            return list(await asyncio.gather(*(self._range(key, s, n) for s, n in ranges)))
        except Exception as exc:
            if self._missing(exc):
                return None
            raise

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[Buf] | None:
        """Fetch byte ranges of one object, all in flight together; ``None`` if missing."""
        got = self._call(self._ranges(key, ranges), "read ranges of", key)
        if got is None:
            return None
        return [b if isinstance(b, np.ndarray) else np.frombuffer(b, np.uint8) for b in got]

    async def _range_versioned(self, key: str, start: int, length: int) -> tuple[Any, Any] | None:
        import obstore

        async def one() -> tuple[Any, Any] | None:
            try:
                result = await obstore.get_async(
                    self._store, key, options={"range": (start, start + length)}
                )
                return await result.bytes_async(), result.meta.get("e_tag")
            except Exception as exc:
                if self._missing(exc):
                    return None
                if _is_status(exc, 416):
                    return _NO_BYTES, None
                raise

        return await self._guard(one)

    def get_range_versioned(
        self, key: str, start: int, length: int
    ) -> tuple[Buf, str | None] | None:
        """One byte range of an object and the object's ETag (one request); ``None`` if missing."""
        got = self._call(self._range_versioned(key, start, length), "read a range of", key)
        if got is None:
            return None
        data, tag = got
        return (data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)), tag

    async def _range_if(self, key: str, start: int, length: int, version: str) -> Any:
        import obstore

        if length <= 0:
            return _NO_BYTES

        async def one() -> Any:
            try:
                result = await obstore.get_async(
                    self._store,
                    key,
                    options={"range": (start, start + length), "if_match": version},
                )
                return await result.bytes_async()
            except Exception as exc:
                if _is_status(exc, 416):
                    return _NO_BYTES
                raise

        return await self._guard(one)

    async def _ranges_if(
        self, key: str, ranges: list[tuple[int, int]], version: str
    ) -> list[Any] | None:
        from obstore.exceptions import PreconditionError

        try:
            return list(
                await asyncio.gather(*(self._range_if(key, s, n, version) for s, n in ranges))
            )
        except PreconditionError as exc:
            raise StaleObjectError(
                f"'{key}' in {self.name} changed since its version {version} was read"
            ) from exc
        except Exception as exc:
            if self._missing(exc):
                return None
            raise

    def get_ranges_if(
        self, key: str, ranges: list[tuple[int, int]], version: str | None
    ) -> list[Buf] | None:
        """Byte ranges of one object, only if it still has ETag ``version`` (``If-Match``).

        Raises
        ------
        StaleObjectError
            If the object changed since (the server answered 412 Precondition Failed).
        """
        if version is None:
            return self.get_ranges(key, ranges)
        got = self._call(self._ranges_if(key, ranges, version), "read ranges of", key)
        if got is None:
            return None
        return [b if isinstance(b, np.ndarray) else np.frombuffer(b, np.uint8) for b in got]

    async def _suffix(self, key: str, length: int) -> tuple[Any, int, str | None] | None:
        import obstore
        from obstore.exceptions import NotSupportedError, PreconditionError

        async def suffix() -> tuple[Any, int, str | None] | None:
            try:
                try:
                    result = await obstore.get_async(
                        self._store, key, options={"range": {"suffix": length}}
                    )
                    meta = result.meta
                    return await result.bytes_async(), int(meta["size"]), meta.get("e_tag")
                except NotSupportedError:
                    pass  # Azure has no suffix requests: size first, then the range
                except Exception as exc:
                    if not _is_status(exc, 416):
                        raise
                    # An empty object has no suffix to return.
                head = await obstore.head_async(self._store, key)
                size = int(head["size"])
                tag = head.get("e_tag")
                start = max(0, size - length)
                if size == start:
                    return _NO_BYTES, size, tag
                if tag is None:
                    data = await obstore.get_range_async(self._store, key, start=start, end=size)
                else:
                    got = await obstore.get_async(
                        self._store, key, options={"range": (start, size), "if_match": tag}
                    )
                    data = await got.bytes_async()
                return data, size, tag
            except PreconditionError as exc:  # Azure's HEAD-then-range raced a writer
                raise StaleObjectError(f"'{key}' in {self.name} changed while read") from exc
            except Exception as exc:
                if self._missing(exc):
                    return None
                raise

        return await self._guard(suffix)

    def get_suffix(self, key: str, length: int) -> tuple[Buf, int] | None:
        """Fetch the last ``length`` bytes and the object's size in one request."""
        got = self.get_suffix_versioned(key, length)
        return None if got is None else (got[0], got[1])

    def get_suffix_versioned(self, key: str, length: int) -> tuple[Buf, int, str | None] | None:
        """The last ``length`` bytes, the object's size and its ETag, in one request."""
        got = self._call(self._suffix(key, length), "read the end of", key)
        if got is None:
            return None
        data, size, tag = got
        u8 = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
        return u8, size, tag

    # ------------------------------------------------------------------ writes

    def check_writable(self) -> None:
        """Raise if the store is read-only; starts a new write call (see ``get_for_update``)."""
        if self.read_only:
            raise ValueError(
                f"store was opened in read-only mode and does not support writing ({self.name})"
            )
        self._generation += 1

    def _take_version(self, key: str) -> tuple[bool, str | None]:
        table: dict[str, tuple[int, str | None]] | None = getattr(self._versions, "table", None)
        if not table:
            return False, None
        seen = table.pop(key, None)
        if seen is None or seen[0] != self._generation:
            return False, None
        return True, seen[1]

    async def _put(self, key: str, data: npt.NDArray[np.uint8], mode: Any) -> None:
        import obstore

        multipart = mode == "overwrite" and data.nbytes > MULTIPART_THRESHOLD

        async def put() -> None:
            await obstore.put_async(self._store, key, data, mode=mode, use_multipart=multipart)

        await self._guard(put)

    def set(self, key: str, data: Buf) -> None:
        """Put a whole object (atomic: readers see the old or the new object, never a part).

        After :meth:`get_for_update` of the same key on this thread, the put is conditional
        on the object being unchanged (``If-Match`` its ETag, or ``If-None-Match: *`` if it was
        missing); a conflict raises :class:`~cuzarr.errors.StoreError` and leaves the other
        writer's object in place.
        """
        from obstore.exceptions import AlreadyExistsError, NotSupportedError, PreconditionError

        u8 = np.ascontiguousarray(as_u8(data))
        known, etag = self._take_version(key)
        mode: Any = "overwrite"
        if known:
            mode = "create" if etag is None else {"e_tag": etag}
        try:
            self._call(self._put(key, u8, mode), "write", key)
        except StoreError as exc:
            cause = exc.__cause__
            if isinstance(cause, NotSupportedError) and mode != "overwrite":
                # The store has no conditional puts: write unconditionally, as zarr does.
                self._call(self._put(key, u8, "overwrite"), "write", key)
                return
            if isinstance(cause, (AlreadyExistsError, PreconditionError)):
                raise StoreError(
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
                if not self._missing(exc):
                    raise

        await self._guard(delete)

    def delete(self, key: str) -> None:
        """Delete an object; a missing key is not an error."""
        self._take_version(key)
        self._call(self._delete(key), "delete", key)


# ---------------------------------------------------------------------------- URLs

#: s3fs / zarr-style option names and the obstore configuration keys they mean.
_ALIASES = {
    "endpoint_url": "endpoint",
    "key": "access_key_id",
    "aws_access_key_id": "access_key_id",
    "secret": "secret_access_key",
    "aws_secret_access_key": "secret_access_key",
    "token": "session_token",
    "aws_session_token": "session_token",
    "region_name": "region",
    "anon": "skip_signature",
}
_DURATIONS = (
    "init_backoff",
    "max_backoff",
    "retry_timeout",
    "timeout",
    "connect_timeout",
    "pool_idle_timeout",
    "http2_keep_alive_interval",
    "http2_keep_alive_timeout",
)


def _durations(options: Mapping[str, Any]) -> dict[str, Any]:
    """Numbers of seconds become ``timedelta`` where obstore wants a duration."""
    out: dict[str, Any] = {}
    for k, v in options.items():
        if isinstance(v, Mapping):
            out[k] = _durations(v)
        elif k in _DURATIONS and isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = datetime.timedelta(seconds=v)
        else:
            out[k] = v
    return out


def _env_endpoint(url: str) -> str:
    """The endpoint an S3 URL gets from the environment (``AWS_ENDPOINT_URL``), if any."""
    if not url.startswith(("s3://", "s3a://")):
        return ""
    return os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT") or ""


def split_storage_options(
    url: str, storage_options: Mapping[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None, int | None]:
    """Split ``storage_options`` into obstore's config, client options and retry config.

    Accepts obstore's own keys, s3fs-style names (``endpoint_url``, ``key``, ``secret``,
    ``token``, ``anon``, ``client_kwargs``), ``client_options`` and ``retry_config`` dicts
    (durations as seconds), and ``concurrency`` (requests in flight).

    Returns
    -------
    config, client_options, retry_config, concurrency
    """
    options = dict(storage_options or {})
    client: dict[str, Any] = dict(options.pop("client_options", None) or {})
    retry = options.pop("retry_config", None)
    concurrency = options.pop("concurrency", None)
    if concurrency is not None and (not isinstance(concurrency, int) or concurrency < 1):
        raise ValueError(
            f"storage_options['concurrency']: expected an integer >= 1, got {concurrency!r}"
        )
    options.update(options.pop("client_kwargs", None) or {})
    config: dict[str, Any] = {}
    for k, v in options.items():
        name = _ALIASES.get(k, k)
        if name in config:
            raise ValueError(f"storage_options: {k!r} repeats {name!r}")
        config[name] = v
    if "skip_signature" in config:
        config["skip_signature"] = bool(config["skip_signature"])
    endpoint = str(config.get("endpoint", "") or _env_endpoint(url))
    if (
        endpoint.startswith("http://")
        or url.startswith("http://")
        or os.environ.get("AWS_ALLOW_HTTP", "").strip().lower() in ("1", "true", "yes")
    ):
        client.setdefault("allow_http", True)
    return (
        config,
        _durations(client),
        None if retry is None else _durations(retry),
        concurrency,
    )


def open_url(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, int | None]:
    """Build the obstore store for an object-store URL.

    Parameters
    ----------
    url : str
        ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``https://host/path``, ...
    storage_options : mapping, optional
        See :func:`split_storage_options`.

    Returns
    -------
    store, concurrency
        The obstore store and the requested concurrency (``None``: the default).

    Raises
    ------
    ValueError
        For options obstore does not know (the message names them).
    """
    try:
        from obstore.store import from_url
    except ImportError as exc:  # pragma: no cover - obstore is the s3 extra
        raise ImportError(f"opening {url!r} needs obstore: pip install 'cuzarr[s3]'") from exc
    from obstore.exceptions import BaseError

    config, client, retry, concurrency = split_storage_options(url, storage_options)
    kwargs: dict[str, Any] = {"client_options": client}
    if retry is not None:
        kwargs["retry_config"] = retry
    try:
        store = from_url(url.rstrip("/"), config=config or None, **kwargs)  # type: ignore[arg-type]
    except BaseError as exc:
        raise ValueError(f"cannot open {url!r}: {_first_line(exc)}") from exc
    return store, concurrency
