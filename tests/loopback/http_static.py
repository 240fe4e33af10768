"""A static HTTP server on 127.0.0.1: aiohttp's file server over a directory.

aiohttp's ``FileResponse`` is a real, widely deployed implementation of what public Zarr data
over HTTPS relies on: ``Range`` (one range, suffix ranges, 416 past the end), ``ETag``,
``If-Match`` (412) and ``HEAD``; it serves GET and HEAD only (405 for writes). Middleware
records each request in a :class:`~loopback.log.RequestLog`, injects its faults, and answers
403 below ``/private/`` (a denied path); it waits the log's ``delay`` before answering and
counts the requests in flight (so tests can see which requests a client sends together).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

from loopback.log import Request, RequestLog

__all__ = ["StaticServer"]


class StaticServer:
    """Serve ``root`` on ``127.0.0.1:<random port>`` from a thread of its own.

    Parameters
    ----------
    root : Path
        The directory served at ``/``.
    log : RequestLog
        Where requests are recorded (and faults taken from).
    """

    def __init__(self, root: Path, log: RequestLog) -> None:
        self.root = root
        self.log = log
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._port = 0
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the static HTTP server did not start within 30 s")

    @property
    def port(self) -> int:
        return self._port

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.log.begin()
        try:
            if self.log.delay > 0:
                await asyncio.sleep(self.log.delay)
            status = self.log.take_fault(request.method)
            if status is None and request.path.startswith("/private/"):
                status = 403
            if status is not None:
                return web.Response(status=status)
            return await handler(request)  # type: ignore[no-any-return]
        finally:
            self.log.end()

    def _entry(self, request: web.Request, status: int, nbytes: int) -> Request:
        h = request.headers
        return Request(
            method=request.method,
            path=request.path,
            query=request.query_string,
            range=h.get("Range"),
            if_match=h.get("If-Match"),
            if_none_match=h.get("If-None-Match"),
            status=status,
            nbytes=nbytes,
        )

    async def _prepared(self, request: web.Request, response: web.StreamResponse) -> None:
        # Called once the status and headers are final, before anything is sent.
        n = response.content_length if request.method == "GET" else 0
        self.log.record(self._entry(request, response.status, int(n or 0)))

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(middlewares=[self._middleware])
        app.on_response_prepare.append(self._prepared)
        app.router.add_static("/", self.root, show_index=False, follow_symlinks=False)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        server = site._server
        assert server is not None and server.sockets
        self._port = int(server.sockets[0].getsockname()[1])
        self._ready.set()
        self._loop.run_forever()

    def close(self) -> None:
        async def stop() -> None:
            assert self._runner is not None
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()
