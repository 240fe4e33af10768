"""moto's S3 server on 127.0.0.1 (``ThreadedMotoServer``, random port), logging every request.

moto's server is a real S3 endpoint over HTTP (SigV4, conditional requests, multipart, IAM);
its WSGI app is wrapped to record each request and the bytes of its response, and to inject
the log's faults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopback.log import Request, RequestLog

__all__ = ["KEY", "REGION", "S3", "SECRET", "start_moto"]

KEY = "testing"
SECRET = "testing"
REGION = "us-east-1"


class _Counting:
    """WSGI middleware: log each request and the body bytes of its response."""

    def __init__(self, app: Any, log: RequestLog) -> None:
        self.app = app
        self.log = log

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        method = environ["REQUEST_METHOD"]
        entry = Request(
            method=method,
            path=environ.get("PATH_INFO", ""),
            query=environ.get("QUERY_STRING", ""),
            range=environ.get("HTTP_RANGE"),
            if_match=environ.get("HTTP_IF_MATCH"),
            if_none_match=environ.get("HTTP_IF_NONE_MATCH"),
            sent=int(environ.get("CONTENT_LENGTH") or 0),
        )
        fault = self.log.take_fault(method)
        if fault is not None:
            entry.status = fault
            self.log.record(entry)
            start_response(f"{fault} Injected", [("Content-Length", "0")])
            return [b""]

        def start(status: str, headers: Any, *args: Any) -> Any:
            # Logged before the response leaves: the client cannot see it first.
            entry.status = int(status.split()[0])
            length = [v for k, v in headers if k.lower() == "content-length"]
            entry.nbytes = int(length[0]) if length and method == "GET" else 0
            self.log.record(entry)
            return start_response(status, headers, *args)

        return self.app(environ, start)


@dataclass
class S3:
    """The running server: its endpoint and request log."""

    endpoint: str
    log: RequestLog
    server: Any

    def options(self, **extra: Any) -> dict[str, Any]:
        """s3fs-style storage options (cuzarr and zarr's FsspecStore both take them)."""
        return {
            "endpoint_url": self.endpoint,
            "key": KEY,
            "secret": SECRET,
            "client_kwargs": {"region_name": REGION},
            **extra,
        }

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
            region_name=REGION,
        )

    def obstore(self, bucket: str, prefix: str = "") -> Any:
        from obstore.store import S3Store

        return S3Store(
            bucket,
            prefix=prefix or None,
            endpoint=self.endpoint,
            access_key_id=KEY,
            secret_access_key=SECRET,
            region=REGION,
            virtual_hosted_style_request=False,
            client_options={"allow_http": True},
        )

    def close(self) -> None:
        self.server.stop()


def start_moto() -> S3:
    """Start moto's server on 127.0.0.1 with a random port, its app wrapped to log."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    log = RequestLog()
    # The server's WSGI app, wrapped to log what it serves (werkzeug reads ``server.app``).
    server._server.app = _Counting(server._server.app, log)
    host, port = server.get_host_and_port()
    assert host == "127.0.0.1"
    return S3(endpoint=f"http://{host}:{port}", log=log, server=server)
