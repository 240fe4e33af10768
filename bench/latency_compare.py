"""Partial reads of a sharded array over a store with a fixed latency per request.

A loopback HTTP server serves a local Zarr folder and sleeps ``--latency`` (20 ms) before each
response: every request costs what it costs on an object store, whatever the client. It
answers ranged GETs (``bytes=a-b``, ``bytes=-n``) and HEADs with an ETag, honours
``If-Match`` (412 when the object changed), as S3 and common HTTP servers do, counts requests
and bytes, and listens on 127.0.0.1 only. The same workload (several windows, each a partial
read of one to four shards) is read by:

- ``zarr``: zarr-python's default pipeline on its ``FsspecStore`` (fsspec's HTTP filesystem);
- ``zarr-obstore``: zarr-python's default pipeline on its ``ObjectStore`` (obstore HTTPStore);
- ``zarrs``: zarrs-python's pipeline on zarr's ``ObjectStore`` (it rebuilds the obstore store in
  Rust); a variant that does not finish within ``--deadline`` is reported as such;
- ``cuzarr``: ``cuzarr.open("http://...")``: the obstore fast path, one Array for the workload
  with default settings (shard indexes cached across its reads, small shards fetched whole);
- ``cuzarr-cache``: the same with a 64 MiB object cache (``Settings(cache_bytes=64 MiB)``,
  off by default): shards read by an earlier window are not fetched again;
- ``cuzarr-batch``: ``cuzarr.Array.read_many(windows)``: all windows in one call;
- ``zarr-gather``: zarr-python's async API, every window's ``getitem`` awaited together (the
  batch counterpart of ``zarr``);
- ``cuzarr-pipeline``: zarr with cuzarr's pipeline on zarr's ``ObjectStore``;
- ``cuzarr-pipeline-fsspec``: zarr with cuzarr's pipeline on zarr's ``FsspecStore`` (cuzarr's
  generic path through any zarr store).

Reported: requests, bytes and wall time of the workload, and ratios to ``zarr``; and the fewest
requests any reader that keeps no data across reads can make (one metadata document, plus one
request per shard touched by each window: a shard's bytes cannot come from another object),
which caps the request ratio of every cache-free variant.

Usage::

    python bench/latency_compare.py [--latency 0.02] [--repeat 3] [--windows 8]
        [--out bench/results/latency_compare]
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import platform
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.storage

import cuzarr

DEFAULT = "zarr.core.codec_pipeline.BatchedCodecPipeline"
ZARRS = "zarrs.ZarrsCodecPipeline"
SHAPE = (2048, 2048)
SHARDS = (512, 512)
CHUNKS = (64, 64)
WINDOW = 300


class LatencyServer(http.server.ThreadingHTTPServer):
    """Serves ``root`` over HTTP on loopback, ``latency`` seconds per request, counting them."""

    daemon_threads = True

    def __init__(self, root: Path, latency: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.latency = latency
        self.lock = threading.Lock()
        self.requests = 0
        self.nbytes = 0

    def reset(self) -> None:
        with self.lock:
            self.requests = 0
            self.nbytes = 0


class _Handler(http.server.BaseHTTPRequestHandler):
    server: LatencyServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without this, Nagle + delayed ACKs add
    # ~40 ms to some responses, on top of the latency under test.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _file(self) -> Path | None:
        rel = self.path.split("?", 1)[0].lstrip("/")
        path = (self.server.root / rel).resolve()
        if self.server.root.resolve() not in path.parents or not path.is_file():
            return None
        return path

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        time.sleep(self.server.latency)
        with self.server.lock:
            self.server.requests += 1
            self.server.nbytes += len(body) if self.command == "GET" else 0
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        path = self._file()
        if path is None:
            self._reply(404, b"", {})
            return
        st = path.stat()
        time.sleep(self.server.latency)
        with self.server.lock:
            self.server.requests += 1
        self.send_response(200)
        self.send_header("Content-Length", str(st.st_size))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", _etag(st))
        self.end_headers()

    def do_GET(self) -> None:
        path = self._file()
        if path is None:
            self._reply(404, b"", {})
            return
        etag = _etag(path.stat())
        data = path.read_bytes()
        size = len(data)
        wanted = self.headers.get("If-Match")
        if wanted is not None and wanted.strip() not in ("*", etag):
            self._reply(412, b"", {"ETag": etag})
            return
        rng = self.headers.get("Range")
        if rng is None:
            self._reply(200, data, {"Accept-Ranges": "bytes", "ETag": etag})
            return
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
        if m is None:
            self._reply(416, b"", {"Content-Range": f"bytes */{size}"})
            return
        a, b = m.groups()
        if a == "":
            start, end = max(0, size - int(b)), size - 1
        else:
            start, end = int(a), (int(b) if b else size - 1)
        end = min(end, size - 1)
        if start >= size or end < start:
            self._reply(416, b"", {"Content-Range": f"bytes */{size}"})
            return
        headers = {"Content-Range": f"bytes {start}-{end}/{size}", "ETag": etag}
        self._reply(206, data[start : end + 1], headers)


def _etag(st: os.stat_result) -> str:
    return f'"{st.st_size:x}-{st.st_mtime_ns:x}"'


def make_data(path: Path) -> np.ndarray:
    rng = np.random.default_rng(0)
    data = (np.add.outer(np.arange(SHAPE[0]), np.arange(SHAPE[1])) % 4096).astype("u2")
    data += rng.integers(0, 64, size=SHAPE, dtype="u2")
    z = zarr.create_array(
        zarr.storage.LocalStore(path), shape=SHAPE, dtype="u2", chunks=CHUNKS, shards=SHARDS,
        compressors=zarr.codecs.ZstdCodec(level=3), overwrite=True,
    )
    z[...] = data
    return data


def windows(n: int) -> list[tuple[slice, slice]]:
    rng = np.random.default_rng(1)
    out = []
    for _ in range(n):
        r, c = (int(x) for x in rng.integers(0, SHAPE[0] - WINDOW, size=2))
        out.append((slice(r, r + WINDOW), slice(c, c + WINDOW)))
    return out


def shards_touched(window: tuple[slice, slice]) -> int:
    """Number of shards a window reads from."""
    n = 1
    for sl, shard in zip(window, SHARDS, strict=True):
        n *= (sl.stop - 1) // shard - sl.start // shard + 1
    return n


class _Batch:
    """Marks a variant that reads all windows in one call: ``read(windows) -> arrays``."""

    def __init__(self, read: Callable[[list[Any]], list[Any]]) -> None:
        self.read = read


def readers(url: str) -> dict[str, Callable[[], Any]]:
    """Each variant: a function returning an object with ``[window]`` reads, or a ``_Batch``."""

    def fsspec_store() -> Any:
        return zarr.storage.FsspecStore.from_url(url, read_only=True)

    def obstore_store() -> Any:
        from obstore.store import HTTPStore

        return zarr.storage.ObjectStore(
            HTTPStore.from_url(url, client_options={"allow_http": True}), read_only=True
        )

    def with_pipeline(path: str, store: Callable[[], Any]) -> Callable[[], Any]:
        def open_() -> Any:
            with zarr.config.set({"codec_pipeline.path": path}):
                return zarr.open_array(store(), mode="r")

        return open_

    def cuzarr_pipeline() -> Any:
        with cuzarr.configure(strict=True):
            return zarr.open_array(obstore_store(), mode="r")

    def cuzarr_pipeline_fsspec() -> Any:
        with cuzarr.configure(strict=True):
            return zarr.open_array(fsspec_store(), mode="r")

    def zarr_gather() -> _Batch:
        # zarr-python's async API: every window's getitem awaited together.
        import asyncio

        from zarr.core.sync import sync

        with zarr.config.set({"codec_pipeline.path": DEFAULT}):
            arr = zarr.open_array(fsspec_store(), mode="r")._async_array

        async def gather(work: list[Any]) -> list[Any]:
            return list(await asyncio.gather(*(arr.getitem(w) for w in work)))

        return _Batch(lambda work: sync(gather(work)))

    def cuzarr_batch() -> _Batch:
        a = cuzarr.open(url)
        assert isinstance(a, cuzarr.Array)
        return _Batch(a.read_many)

    return {
        "zarr": with_pipeline(DEFAULT, fsspec_store),
        "zarr-obstore": with_pipeline(DEFAULT, obstore_store),
        "zarr-gather": zarr_gather,
        # zarrs-python rebuilds the obstore store natively (in Rust).
        "zarrs": with_pipeline(ZARRS, obstore_store),
        "cuzarr": lambda: cuzarr.open(url),
        "cuzarr-cache": lambda: cuzarr.open(url, settings=cuzarr.Settings(cache_bytes=64 << 20)),
        "cuzarr-batch": cuzarr_batch,
        "cuzarr-pipeline": cuzarr_pipeline,
        "cuzarr-pipeline-fsspec": cuzarr_pipeline_fsspec,
    }


def _timed(
    name: str, open_: Callable[[], Any], work: list[Any], data: np.ndarray,
    server: LatencyServer, deadline: float,
) -> dict[str, Any]:
    """Open and read every window in a thread; an error row if it takes over ``deadline``."""
    row: dict[str, Any] = {}

    def body() -> None:
        try:
            t0 = time.perf_counter()
            arr = open_()
            row["requests_open"] = server.requests
            got = arr.read(work) if isinstance(arr, _Batch) else [arr[w] for w in work]
            for w, value in zip(work, got, strict=True):
                if not np.array_equal(value, data[w]):
                    raise AssertionError(f"{name}: wrong data for window {w}")
            row["wall_s"] = time.perf_counter() - t0
            row["requests"] = server.requests
            row["bytes"] = server.nbytes
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(deadline)
    if thread.is_alive():
        return {"error": f"did not finish in {deadline:.0f} s"}
    return row


def run(latency: float, repeat: int, n_windows: int, deadline: float = 60.0) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="cuzarr-latency-"))
    server: LatencyServer | None = None
    try:
        data = make_data(tmp / "a.zarr")
        server = LatencyServer(tmp, latency)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/a.zarr"
        work = windows(n_windows)
        results: dict[str, Any] = {}
        for name, open_ in readers(url).items():
            best: dict[str, Any] | None = None
            for _ in range(repeat):
                server.reset()
                row = _timed(name, open_, work, data, server, deadline)
                if "error" in row:
                    best = row
                    break
                if best is None or row["wall_s"] < best["wall_s"]:
                    best = row
            assert best is not None
            results[name] = best
        floor = 1 + sum(shards_touched(w) for w in work)
        base = results["zarr"]
        for row in results.values():
            if "error" not in row:
                row["requests_ratio_vs_zarr"] = base["requests"] / row["requests"]
                row["speedup_vs_zarr"] = base["wall_s"] / row["wall_s"]
        return {
            "latency_s": latency,
            "windows": n_windows,
            "window": [WINDOW, WINDOW],
            "shape": list(SHAPE),
            "shards": list(SHARDS),
            "chunks": list(CHUNKS),
            "repeat": repeat,
            "min_requests_without_cache": floor,
            "max_request_ratio_without_cache": base.get("requests", 0) / floor,
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "versions": _versions(),
            "results": results,
        }
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        shutil.rmtree(tmp, ignore_errors=True)


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    out = {}
    for pkg in ("cuzarr", "zarr", "zarrs", "obstore", "fsspec", "aiohttp", "numpy"):
        try:
            out[pkg] = version(pkg)
        except Exception:
            out[pkg] = "missing"
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Partial sharded reads at {report['latency_s'] * 1000:.0f} ms per request",
        "",
        f"{report['windows']} windows of {report['window'][0]}x{report['window'][1]} of a "
        f"{report['shape'][0]}x{report['shape'][1]} uint16 array, shards "
        f"{report['shards'][0]}x{report['shards'][1]} of {report['chunks'][0]}x"
        f"{report['chunks'][1]} zstd chunks; best of {report['repeat']}; "
        f"{report['cpu_count']} CPUs. Open included. Ratios: zarr (FsspecStore) / variant.",
        "",
        "| variant | requests | bytes | wall (s) | fewer requests | faster |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    floor = report.get("min_requests_without_cache")
    for name, r in report["results"].items():
        if "error" in r:
            lines.append(f"| {name} | - | - | - | {r['error']} | - |")
            continue
        lines.append(
            f"| {name} | {r['requests']} | {r['bytes']} | {r['wall_s']:.3f} | "
            f"{r['requests_ratio_vs_zarr']:.2f}x | {r['speedup_vs_zarr']:.2f}x |"
        )
    if floor:
        lines += [
            "",
            f"Fewest requests possible for a reader keeping no data across reads, reading the "
            f"windows one after another: {floor} (one metadata document + one request per "
            "shard touched by each window), i.e. at most "
            f"{report['max_request_ratio_without_cache']:.2f}x fewer than zarr. Only a cache of "
            "fetched objects (``cuzarr-cache``) or reading the windows as one batch "
            "(``cuzarr-batch``: each shard once, all requests in flight together) can go "
            "further.",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--latency", type=float, default=0.02)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--windows", type=int, default=8)
    p.add_argument("--deadline", type=float, default=60.0, help="seconds per variant and run")
    p.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = p.parse_args()
    report = run(args.latency, args.repeat, args.windows, args.deadline)
    text = markdown(report)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(text)


if __name__ == "__main__":
    main()
