"""Object-store URLs and options: ``s3://``, ``gs://``, ``az://``, ``https://`` through obstore.

:func:`open_url` builds obstore's store for a URL; :func:`split_storage_options` accepts
obstore's own configuration keys and the s3fs names zarr's ``FsspecStore`` takes, so one options
dict works for every front end.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Mapping
from typing import Any

from cuzarr.stores.obstore_ import first_line

__all__ = [
    "CLIENT_OPTIONS",
    "OBJECT_STORE_SCHEMES",
    "RETRY_OPTIONS",
    "open_url",
    "parse_connection_string",
    "service_of",
    "split_storage_options",
]

#: URL schemes :func:`open_url` handles.
OBJECT_STORE_SCHEMES = frozenset(
    {"s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss", "adl", "http", "https"}
)

#: obstore's HTTP client options (``ClientConfig``): accepted at the top level of
#: ``storage_options`` too, where users naturally put them (``{"allow_http": True}``).
CLIENT_OPTIONS = frozenset(
    {
        "allow_http", "allow_invalid_certificates", "connect_timeout", "default_content_type",
        "default_headers", "http1_only", "http2_keep_alive_interval", "http2_keep_alive_timeout",
        "http2_keep_alive_while_idle", "http2_only", "pool_idle_timeout",
        "pool_max_idle_per_host", "proxy_url", "proxy_ca_certificate", "proxy_excludes",
        "root_certificate", "randomize_addresses", "read_timeout", "timeout", "user_agent",
    }
)
#: obstore's retry options (``RetryConfig``), also accepted at the top level.
RETRY_OPTIONS = frozenset({"max_retries", "retry_timeout", "backoff"})

#: The names other libraries use for an option (s3fs, gcsfs, adlfs, fsspec's HTTP) and the
#: obstore configuration key each means, per service.
_ALIASES: dict[str, dict[str, str]] = {
    "s3": {
        "endpoint_url": "endpoint",
        "key": "access_key_id",
        "aws_access_key_id": "access_key_id",
        "secret": "secret_access_key",
        "aws_secret_access_key": "secret_access_key",
        "token": "session_token",
        "aws_session_token": "session_token",
        "region_name": "region",
        "anon": "skip_signature",
    },
    "gcs": {
        "endpoint_url": "base_url",
        "anon": "skip_signature",
        "token": "service_account",  # gcsfs: a path to a service-account file (or "anon")
    },
    "azure": {
        "endpoint_url": "endpoint",
        "anon": "skip_signature",
        "sas_token": "sas_key",
        "credential": "account_key",  # adlfs / azure-storage-blob: an account key string
    },
    "http": {"headers": "default_headers"},
}
#: Where each service takes its endpoint: the configuration key and environment variables.
_ENDPOINTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "s3": ("endpoint", ("AWS_ENDPOINT_URL", "AWS_ENDPOINT")),
    "gcs": ("base_url", ("GOOGLE_BASE_URL",)),
    "azure": ("endpoint", ("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT")),
}
#: The environment variable that allows plain-HTTP endpoints, per service.
_ALLOW_HTTP_ENV = {"s3": "AWS_ALLOW_HTTP", "gcs": "GOOGLE_ALLOW_HTTP", "azure": "AZURE_ALLOW_HTTP"}
_SCHEMES = {
    "s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "azure": "azure",
    "abfs": "azure", "abfss": "azure", "adl": "azure", "http": "http", "https": "http",
}
_DURATIONS = (
    "init_backoff",
    "max_backoff",
    "retry_timeout",
    "timeout",
    "connect_timeout",
    "read_timeout",
    "pool_idle_timeout",
    "http2_keep_alive_interval",
    "http2_keep_alive_timeout",
)


def service_of(url: str) -> str:
    """The service an object-store URL names: ``"s3"``, ``"gcs"``, ``"azure"`` or ``"http"``.

    Raises
    ------
    ValueError
        For a URL of another scheme.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    try:
        return _SCHEMES[scheme]
    except KeyError:
        raise ValueError(
            f"{url!r}: expected an object-store URL ({', '.join(sorted(_SCHEMES))}://...)"
        ) from None


def _durations(options: Mapping[str, Any]) -> dict[str, Any]:
    """Numbers of seconds become ``timedelta`` where obstore wants a duration."""
    out: dict[str, Any] = {}
    for k, v in options.items():
        if isinstance(v, Mapping) and k != "default_headers":
            out[k] = _durations(v)
        elif k in _DURATIONS and isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = datetime.timedelta(seconds=v)
        else:
            out[k] = v
    return out


def _true(text: str | None) -> bool:
    return (text or "").strip().lower() in ("1", "true", "yes", "on")


def parse_connection_string(text: str) -> dict[str, Any]:
    """An Azure Storage connection string as obstore's Azure configuration.

    Understands ``AccountName``, ``AccountKey``, ``BlobEndpoint``, ``SharedAccessSignature``,
    ``UseDevelopmentStorage=true`` (Azurite's defaults), ``DefaultEndpointsProtocol`` and
    ``EndpointSuffix`` (an endpoint built from the account name); the other services'
    endpoints (``QueueEndpoint``...) are ignored.

    Raises
    ------
    ValueError
        For a part that is not ``name=value`` or a name Azure does not define.
    """
    parts: dict[str, str] = {}
    for item in text.strip().strip(";").split(";"):
        name, sep, value = item.strip().partition("=")
        if not sep or not name:
            raise ValueError(
                f"connection_string: expected 'Name=value;...' parts, got {item.strip()!r}"
            )
        parts[name.strip()] = value.strip()
    known = {
        "AccountName", "AccountKey", "BlobEndpoint", "SharedAccessSignature",
        "UseDevelopmentStorage", "DefaultEndpointsProtocol", "EndpointSuffix",
        "QueueEndpoint", "TableEndpoint", "FileEndpoint", "DevelopmentStorageProxyUri",
    }
    unknown = sorted(set(parts) - known)
    if unknown:
        raise ValueError(f"connection_string: unknown part(s) {unknown}; expected {sorted(known)}")
    if _true(parts.get("UseDevelopmentStorage")):
        return {"use_emulator": True}
    config: dict[str, Any] = {}
    if "AccountName" in parts:
        config["account_name"] = parts["AccountName"]
    if "AccountKey" in parts:
        config["account_key"] = parts["AccountKey"]
    if "SharedAccessSignature" in parts:
        config["sas_key"] = parts["SharedAccessSignature"]
    if "BlobEndpoint" in parts:
        config["endpoint"] = parts["BlobEndpoint"].rstrip("/")
    elif "EndpointSuffix" in parts and "AccountName" in parts:
        protocol = parts.get("DefaultEndpointsProtocol", "https")
        config["endpoint"] = f"{protocol}://{parts['AccountName']}.blob.{parts['EndpointSuffix']}"
    return config


def _plain_http(service: str, url: str, config: Mapping[str, Any]) -> bool:
    """Whether the endpoint (given, or from the environment) or the URL is ``http://``."""
    if url.startswith("http://"):
        return True
    if service == "http":
        return False
    if _true(os.environ.get(_ALLOW_HTTP_ENV[service])):
        return True
    if service == "azure" and (
        config.get("use_emulator") or _true(os.environ.get("AZURE_STORAGE_USE_EMULATOR"))
    ):
        return True  # Azurite speaks plain HTTP
    key, env = _ENDPOINTS[service]
    endpoint = config.get(key) or next((os.environ[e] for e in env if os.environ.get(e)), "")
    if service == "gcs" and not endpoint:
        endpoint = _gcs_key_base_url(
            config.get("service_account_key") or os.environ.get("GOOGLE_SERVICE_ACCOUNT_KEY")
        )
    return str(endpoint).startswith("http://")


def _gcs_key_base_url(key: Any) -> str:
    """The ``gcs_base_url`` a GCS service-account key names (emulators), if any."""
    if not isinstance(key, str):
        return ""
    try:
        doc = json.loads(key)
    except ValueError:
        return ""
    return str(doc.get("gcs_base_url", "")) if isinstance(doc, dict) else ""


def split_storage_options(
    url: str, storage_options: Mapping[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None, int | None]:
    """Split ``storage_options`` into obstore's config, client options and retry config.

    Accepts, for every service: obstore's own configuration keys; ``client_options`` and
    ``retry_config`` dicts (durations as seconds) and their keys at the top level
    (``allow_http``, ``timeout``, ``max_retries``...); ``concurrency`` (requests in flight).
    And the names other libraries use for the same thing: s3fs's (``endpoint_url``, ``key``,
    ``secret``, ``token``, ``anon``, ``client_kwargs={"region_name": ...}``), gcsfs's
    (``endpoint_url``, ``token``, ``anon``), adlfs's (``account_name``, ``account_key``,
    ``sas_token``, ``connection_string``, ``anon``) and fsspec HTTP's ``headers``. ``http://``
    endpoints get ``allow_http``. HTTP(S) URLs take client and retry options only.

    Returns
    -------
    config, client_options, retry_config, concurrency

    Raises
    ------
    ValueError
        For a repeated option, a bad ``concurrency``, or store configuration on an HTTP URL
        (the message names the options to use instead).
    """
    service = service_of(url)
    options = dict(storage_options or {})
    client: dict[str, Any] = dict(options.pop("client_options", None) or {})
    retry_given = options.pop("retry_config", None)
    retry: dict[str, Any] | None = None if retry_given is None else dict(retry_given)
    concurrency = options.pop("concurrency", None)
    if concurrency is not None and (not isinstance(concurrency, int) or concurrency < 1):
        raise ValueError(
            f"storage_options['concurrency']: expected an integer >= 1, got {concurrency!r}"
        )
    options.update(options.pop("client_kwargs", None) or {})
    aliases = _ALIASES[service]
    config: dict[str, Any] = {}
    for k, v in options.items():
        name = aliases.get(k, k)
        if name in CLIENT_OPTIONS:
            if name in client:
                raise ValueError(f"storage_options: {k!r} repeats client_options[{name!r}]")
            client[name] = v
        elif name in RETRY_OPTIONS:
            retry = {} if retry is None else retry
            if name in retry:
                raise ValueError(f"storage_options: {k!r} repeats retry_config[{name!r}]")
            retry[name] = v
        elif name in config:
            raise ValueError(f"storage_options: {k!r} repeats {name!r}")
        elif service == "azure" and name == "connection_string":
            for ck, cv in parse_connection_string(str(v)).items():
                if ck in config:
                    raise ValueError(f"storage_options: connection_string repeats {ck!r}")
                config[ck] = cv
        else:
            config[name] = v
    if service == "http" and config:
        raise ValueError(
            f"storage_options for {url!r}: HTTP(S) stores take no store configuration, got "
            f"{sorted(config)}; they take HTTP client options ({', '.join(sorted(CLIENT_OPTIONS))}"
            f"; e.g. default_headers={{'Authorization': ...}} for a token), retry options "
            f"({', '.join(sorted(RETRY_OPTIONS))}) and concurrency"
        )
    if service == "gcs" and config.get("service_account") == "anon":
        del config["service_account"]
        config["skip_signature"] = True
    if "skip_signature" in config:
        config["skip_signature"] = bool(config["skip_signature"])
    if service == "azure" and not {"use_emulator", "account_key", "sas_key"} & set(config):
        # The variable Azure's own tools (and adlfs) read, when no credentials were given.
        env_conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
        if env_conn:
            for ck, cv in parse_connection_string(env_conn).items():
                config.setdefault(ck, cv)
    if service == "azure" and "account_name" not in config and not config.get("use_emulator"):
        # obstore reads the account from the environment too, but its store then panics when
        # printed (zarr's ObjectStore prints it): name the account in the config.
        account = os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
        if account:
            config["account_name"] = account
    if _plain_http(service, url, config):
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
