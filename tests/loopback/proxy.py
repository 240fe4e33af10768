"""A logging, fault-injecting reverse proxy on 127.0.0.1 for servers not written in Python.

The client talks to the proxy; the proxy forwards each request unchanged (method, path, query,
headers, body: signatures stay valid) to the upstream server, records it with the answer in a
:class:`~loopback.log.RequestLog`, and returns the upstream's answer. A due
:class:`~loopback.log.Fault` answers instead of the upstream.
"""

from __future__ import annotations

import http.client
import http.server
import threading
import urllib.parse
from typing import Any

from loopback.log import Request, RequestLog

__all__ = ["LoggingProxy", "read_body", "request_entry"]


def read_body(handler: http.server.BaseHTTPRequestHandler) -> bytes:
    """The request body a handler received: ``Content-Length`` or chunked framing."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        parts: list[bytes] = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0], 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(parts)
            parts.append(handler.rfile.read(size))
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return bytes(handler.rfile.read(length)) if length else b""


def request_entry(
    handler: http.server.BaseHTTPRequestHandler, body: bytes, split: urllib.parse.SplitResult
) -> Request:
    """The log entry of the request a handler received (status and reply size filled later).

    The range is ``Range`` or Azure's ``x-ms-range``.
    """
    headers = handler.headers
    return Request(
        method=handler.command,
        path=urllib.parse.unquote(split.path),
        query=split.query,
        range=headers.get("Range") or headers.get("x-ms-range"),
        if_match=headers.get("If-Match"),
        if_none_match=headers.get("If-None-Match"),
        sent=len(body),
    )

#: Hop-by-hop headers (RFC 9110 7.6.1) are not forwarded; bodies are re-framed.
_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
     "upgrade", "content-length"}
)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def handle(self) -> None:
        # One client connection per thread: its upstream connection ends with it.
        try:
            super().handle()
        finally:
            self.server.drop_connection()

    def _forward(self) -> None:
        body = read_body(self)
        split = urllib.parse.urlsplit(self.path)
        entry = request_entry(self, body, split)
        log = self.server.log
        fault = log.take_fault(self.command)
        if fault is not None:
            entry.status = fault
            log.record(entry)
            self.send_response(fault)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        conn = self.server.connection()
        try:
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            self.server.drop_connection()
            raise
        entry.status = resp.status
        entry.nbytes = len(data) if self.command == "GET" else 0
        log.record(entry)
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP:
                self.send_header(k, v)
        if self.command == "HEAD":
            self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = _forward


class _ProxyServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: tuple[str, int], log: RequestLog) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream
        self.log = log
        self._local = threading.local()

    def connection(self) -> http.client.HTTPConnection:
        """A keep-alive connection to the upstream, one per handler thread."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(*self.upstream, timeout=60)
            self._local.conn = conn
        return conn

    def drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class LoggingProxy:
    """Serve on ``127.0.0.1:<random port>``, forwarding to ``upstream``.

    Parameters
    ----------
    upstream : (host, port)
        The server behind the proxy.
    log : RequestLog
        Where requests are recorded (and faults taken from).
    """

    def __init__(self, upstream: tuple[str, int], log: RequestLog) -> None:
        self._server = _ProxyServer(upstream, log)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join()
        self._server.server_close()
