"""Object-store URLs and options: ``s3://``, ``gs://``, ``az://``, ``https://`` through obstore.

:func:`open_url` builds obstore's store for a URL; :func:`split_storage_options` accepts
obstore's own configuration keys and the s3fs names zarr's ``FsspecStore`` takes, so one options
dict works for every front end.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from typing import Any

from cuzarr.stores.obstore_ import first_line

__all__ = ["OBJECT_STORE_SCHEMES", "open_url", "split_storage_options"]

#: URL schemes :func:`open_url` handles.
OBJECT_STORE_SCHEMES = frozenset(
    {"s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss", "adl", "http", "https"}
)

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
        raise ValueError(f"cannot open {url!r}: {first_line(exc)}") from exc
    return store, concurrency
