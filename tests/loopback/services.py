"""One interface over the four loopback servers, for the object-store test matrix.

A :class:`Service` makes buckets, URLs, ``storage_options``, a raw obstore store (to write and
corrupt objects behind cuzarr's back), the environment a CLI process needs, and names request
paths as its server logs them.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopback.log import RequestLog

__all__ = ["Service"]


@dataclass
class Service:
    """A running server behind the matrix's interface.

    Attributes
    ----------
    name : str
        ``"s3"``, ``"gcs"``, ``"azure"`` or ``"http"``.
    log : RequestLog
        What the server answered.
    server : object
        The server object (``S3``, ``FakeGCS``, ``Azurite``, ``StaticServer``).
    """

    name: str
    log: RequestLog
    server: Any

    @property
    def writable(self) -> bool:
        """Whether cuzarr writes through this service's URLs (HTTP(S) is read-only)."""
        return self.name != "http"

    @property
    def scheme(self) -> str:
        return {"s3": "s3", "gcs": "gs", "azure": "az", "http": "http"}[self.name]

    def new_bucket(self) -> str:
        """A fresh, empty bucket (container; a served directory for HTTP)."""
        name = f"cz{uuid.uuid4().hex[:12]}"
        if self.name == "s3":
            self.server.client().create_bucket(Bucket=name)
        elif self.name == "gcs":
            self.server.create_bucket(name)
        elif self.name == "azure":
            self.server.create_container(name)
        else:
            (self.server.root / name).mkdir()
        return name

    def url(self, bucket: str, key: str = "") -> str:
        """The URL of ``key`` in ``bucket`` as users write it."""
        tail = f"{bucket}/{key}" if key else bucket
        if self.name == "http":
            return f"http://127.0.0.1:{self.server.port}/{tail}"
        return f"{self.scheme}://{tail}"

    def options(self, **extra: Any) -> dict[str, Any]:
        """``storage_options`` for cuzarr (each service's natural option names)."""
        if self.name == "s3":
            base: dict[str, Any] = self.server.options()
        elif self.name == "gcs":
            base = {"service_account_key": self.server.service_account_key()}
        elif self.name == "azure":
            from loopback.azure import ACCOUNT, ACCOUNT_KEY

            base = {
                "connection_string": (
                    f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};"
                    f"AccountKey={ACCOUNT_KEY};BlobEndpoint={self.server.endpoint};"
                )
            }
        else:
            base = {"allow_http": True}  # what users naturally pass for http:// (not needed)
        return {**base, **extra}

    def env(self) -> dict[str, str]:
        """The environment variables obstore documents, for a CLI process (no options)."""
        if self.name == "s3":
            from loopback.s3 import KEY, REGION, SECRET

            extra = {
                "AWS_ACCESS_KEY_ID": KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_REGION": REGION,
                "AWS_ENDPOINT_URL": self.server.endpoint,
                "AWS_ALLOW_HTTP": "true",
            }
        elif self.name == "gcs":
            extra = {"GOOGLE_SERVICE_ACCOUNT_KEY": self.server.service_account_key()}
        elif self.name == "azure":
            from loopback.azure import ACCOUNT, ACCOUNT_KEY

            extra = {
                "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT,
                "AZURE_STORAGE_ACCOUNT_KEY": ACCOUNT_KEY,
                "AZURE_STORAGE_ENDPOINT": self.server.endpoint,
                "AZURE_ALLOW_HTTP": "true",
            }
        else:
            extra = {}
        return {**os.environ, **extra}

    def raw(self, bucket: str, prefix: str = "") -> Any:
        """An obstore store on ``bucket`` (a local store on the served directory for HTTP)."""
        from obstore.store import AzureStore, GCSStore, LocalStore

        if self.name == "s3":
            return self.server.obstore(bucket, prefix)
        if self.name == "gcs":
            return GCSStore(
                bucket, prefix=prefix or None,
                service_account_key=self.server.service_account_key(),
                client_options={"allow_http": True},
            )
        if self.name == "azure":
            from loopback.azure import ACCOUNT, ACCOUNT_KEY

            return AzureStore(
                bucket, prefix=prefix or None, account_name=ACCOUNT, account_key=ACCOUNT_KEY,
                endpoint=self.server.endpoint, client_options={"allow_http": True},
            )
        path = Path(self.server.root) / bucket / prefix
        path.mkdir(parents=True, exist_ok=True)
        return LocalStore(path)

    def path(self, bucket: str, key: str) -> str:
        """The request path the server logs for ``key`` in ``bucket``."""
        if self.name == "azure":
            from loopback.azure import ACCOUNT

            return f"/{ACCOUNT}/{bucket}/{key}"
        return f"/{bucket}/{key}"

    def put_raw(self, bucket: str, key: str, data: bytes) -> None:
        """Write ``key`` behind cuzarr's back (another writer, or corruption)."""
        import obstore

        obstore.put(self.raw(bucket), key, data)

    def get_raw(self, bucket: str, key: str) -> bytes:
        import obstore

        return bytes(obstore.get(self.raw(bucket), key).bytes())
