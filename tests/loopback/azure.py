"""Azurite's Blob service on 127.0.0.1 (in memory), behind a logging proxy.

Azurite (npm ``azurite``, pinned in ``tests/loopback/node``, installed by
``scripts/bootstrap.sh``) is Microsoft's own emulator of the Blob REST API: SharedKey
authentication, conditional requests, block uploads. Its well-known development account
``devstoreaccount1`` is used; containers are created with a SharedKey-signed REST call (obstore
has no container operations).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import shutil
import socket
import subprocess
import tempfile
import time
from email.utils import formatdate
from pathlib import Path

from loopback.log import RequestLog
from loopback.proxy import LoggingProxy

__all__ = ["ACCOUNT", "ACCOUNT_KEY", "AZURITE", "Azurite"]

#: Azurite's well-known development account and key (published in Azurite's documentation).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
AZURITE = Path(__file__).parent / "node" / "node_modules" / ".bin" / "azurite-blob"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Azurite:
    """Azurite's Blob service on a random port, and a :class:`LoggingProxy` in front of it.

    Parameters
    ----------
    log : RequestLog
        Where the proxy records requests.
    """

    def __init__(self, log: RequestLog) -> None:
        if shutil.which("node") is None or not AZURITE.exists():
            raise FileNotFoundError(f"Azurite is not installed at {AZURITE}")
        self._dir = tempfile.mkdtemp(prefix="azurite-")
        port = _free_port()
        self._proc = subprocess.Popen(
            [str(AZURITE), "--inMemoryPersistence", "--blobHost", "127.0.0.1", "--blobPort",
             str(port), "--disableTelemetry", "--silent", "--skipApiVersionCheck"],
            cwd=self._dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            if self._proc.poll() is not None:
                out = self._proc.stdout.read().decode() if self._proc.stdout else ""
                raise RuntimeError(f"Azurite exited with {self._proc.returncode}: {out}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError("Azurite did not listen within 60 s") from None
                time.sleep(0.02)
        self.upstream_port = port
        self.log = log
        self.proxy = LoggingProxy(("127.0.0.1", port), log)

    @property
    def endpoint(self) -> str:
        """The Blob endpoint clients use (through the proxy): ``http://127.0.0.1:P/account``."""
        return f"http://127.0.0.1:{self.proxy.port}/{ACCOUNT}"

    def create_container(self, name: str) -> None:
        """Create a container (a SharedKey-signed ``PUT ?restype=container``)."""
        date = formatdate(usegmt=True)
        version = "2021-08-06"
        to_sign = "\n".join(
            ["PUT", "", "", "", "", "", "", "", "", "", "", "",
             f"x-ms-date:{date}", f"x-ms-version:{version}",
             f"/{ACCOUNT}/{ACCOUNT}/{name}", "restype:container"]
        )
        mac = hmac.new(base64.b64decode(ACCOUNT_KEY), to_sign.encode(), hashlib.sha256)
        headers = {
            "x-ms-date": date,
            "x-ms-version": version,
            "Authorization": f"SharedKey {ACCOUNT}:{base64.b64encode(mac.digest()).decode()}",
            "Content-Length": "0",
        }
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=30)
        try:
            conn.request("PUT", f"/{ACCOUNT}/{name}?restype=container", headers=headers)
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        if resp.status != 201:
            raise RuntimeError(f"creating container {name!r}: {resp.status} {body[:300]!r}")

    def close(self) -> None:
        if hasattr(self, "proxy"):
            self.proxy.close()
        self._proc.terminate()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout:
            self._proc.stdout.close()
        shutil.rmtree(self._dir, ignore_errors=True)
