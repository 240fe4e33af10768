"""Session fixtures: one server per service for the whole run, a fresh bucket per test.

A server that cannot start here (Azurite without Node.js, fake-gcs-server off linux-x86_64)
skips its tests with the reason; with ``CUZARR_REQUIRE_SERVERS=1`` (set by ``.ci/run``) it
fails them instead, so CI never skips a service silently.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopback.log import RequestLog
from loopback.services import Service

__all__ = ["SERVICES", "azurite", "gcs", "http_static", "s3", "service"]

SERVICES = ("s3", "gcs", "azure", "http")


def _unavailable(what: str, exc: BaseException) -> None:
    message = f"{what} is not available here: {exc}"
    if os.environ.get("CUZARR_REQUIRE_SERVERS") == "1":
        pytest.fail(f"{message} (CUZARR_REQUIRE_SERVERS=1: every service must run)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def s3() -> Iterator[Any]:
    pytest.importorskip("moto.server")
    from loopback.s3 import start_moto

    server = start_moto()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def gcs() -> Iterator[Any]:
    try:
        from loopback.gcs import FakeGCS

        server = FakeGCS(RequestLog())
    except (ImportError, FileNotFoundError, RuntimeError) as exc:
        _unavailable("fake-gcs-server", exc)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def azurite() -> Iterator[Any]:
    from loopback.azure import Azurite

    try:
        server = Azurite(RequestLog())
    except (FileNotFoundError, RuntimeError) as exc:
        _unavailable("Azurite (run scripts/bootstrap.sh with npm on PATH)", exc)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def http_static() -> Iterator[Any]:
    from loopback.http_static import StaticServer

    root = Path(tempfile.mkdtemp(prefix="cuzarr-http-"))
    server = StaticServer(root, RequestLog())
    try:
        yield server
    finally:
        server.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=SERVICES)
def service(request: pytest.FixtureRequest) -> Service:
    """Each service in turn (the test runs once per server)."""
    name = str(request.param)
    fixture = {"s3": "s3", "gcs": "gcs", "azure": "azurite", "http": "http_static"}[name]
    server = request.getfixturevalue(fixture)
    svc = Service(name=name, log=server.log, server=server)
    svc.log.clear()
    return svc
