"""What a loopback server saw: every request with its response, and injected faults.

Each server fixture records into one :class:`RequestLog`: the S3 server through WSGI
middleware, the HTTP server through aiohttp middleware, Azure through
:class:`~loopback.proxy.LoggingProxy` in front of Azurite, GCS through the translating proxy
in front of fake-gcs-server (:mod:`loopback.gcs`). Paths are recorded as the client sent them
(``/bucket/key`` for S3, GCS and HTTP, ``/account/container/key`` for Azure), query strings
apart.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

__all__ = ["Fault", "Request", "RequestLog"]


@dataclass
class Request:
    """One request and what the server answered."""

    method: str
    path: str
    query: str
    range: str | None
    if_match: str | None
    if_none_match: str | None
    status: int = 0
    #: Body bytes of the response (GET only).
    nbytes: int = 0
    #: Body bytes of the request (PUT/POST).
    sent: int = 0


@dataclass
class Fault:
    """Answer the next ``count`` requests (of ``method``, any when ``None``) with ``status``."""

    status: int
    count: int
    method: str | None = None


@dataclass
class RequestLog:
    """Every request a server answered, in order, and the faults still to inject."""

    entries: list[Request] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Seconds a server that supports it (the static HTTP server) waits before answering.
    delay: float = 0.0
    #: Requests being answered now, and the most there were at once since the last clear.
    in_flight: int = 0
    max_in_flight: int = 0

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.faults.clear()
            self.delay = 0.0
            self.max_in_flight = self.in_flight

    def begin(self) -> None:
        """A request arrived (servers that count requests in flight)."""
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def end(self) -> None:
        """A request was answered."""
        with self.lock:
            self.in_flight -= 1

    def record(self, entry: Request) -> None:
        with self.lock:
            self.entries.append(entry)

    def fail(self, status: int, count: int, method: str | None = None) -> None:
        """Make the next ``count`` requests (of ``method``) answer ``status``."""
        with self.lock:
            self.faults.append(Fault(status, count, method))

    def take_fault(self, method: str) -> int | None:
        """The status to answer instead of serving this request, if a fault is due."""
        with self.lock:
            for fault in self.faults:
                if fault.count > 0 and fault.method in (None, method):
                    fault.count -= 1
                    return fault.status
        return None

    def under(self, prefix: str, method: str | None = None) -> list[Request]:
        """Requests for paths below ``prefix`` (``/bucket/``), of ``method`` if given."""
        with self.lock:
            return [
                e
                for e in self.entries
                if e.path.startswith(prefix) and (method is None or e.method == method)
            ]
