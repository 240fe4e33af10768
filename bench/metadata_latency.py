"""Metadata of a Zarr tree over HTTP with a fixed latency: ``cuzarr info`` and opening an array.

Writes a consolidated tree of 27 nodes (a root group, 20 arrays, a subgroup of 5 arrays) in
Zarr v2 and in v3, serves it from a loopback HTTP server that waits ``--latency`` seconds
before each answer (bench/latency_compare.py's server), and prints the requests and the best
wall time of 3 of ``collect_info`` (``cuzarr info``) and of ``cuzarr.open`` of one array::

    python bench/metadata_latency.py [--latency 0.02]

Run it under two checkouts (``PYTHONPATH=<checkout>/src``) to compare them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.latency_compare import LatencyServer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--latency", type=float, default=0.02)
    args = p.parse_args()

    import zarr

    import cuzarr
    from cuzarr.tools import collect_info

    root = Path(tempfile.mkdtemp(prefix="cuzarr-metadata-"))
    for fmt in (2, 3):
        g = zarr.open_group(str(root / f"t{fmt}.zarr"), mode="w", zarr_format=fmt)
        for i in range(20):
            g.create_array(f"a{i}", shape=(4,), dtype="i4", chunks=(4,))[...] = i
        sub = g.create_group("sub")
        for i in range(5):
            sub.create_array(f"b{i}", shape=(4,), dtype="i4", chunks=(4,))[...] = i
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # consolidated metadata is not in the v3 spec
            zarr.consolidate_metadata(str(root / f"t{fmt}.zarr"))
    server = LatencyServer(root, args.latency)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    print(f"cuzarr from {Path(cuzarr.__file__).parent}, latency {args.latency * 1e3:.0f} ms")
    for fmt in (2, 3):
        for what in ("open an array", "cuzarr info"):
            best, requests, nodes = float("inf"), 0, 1
            for _ in range(3):
                server.reset()
                start = time.perf_counter()
                if what == "cuzarr info":
                    nodes = len(collect_info(f"{base}/t{fmt}.zarr"))
                else:
                    cuzarr.open(f"{base}/t{fmt}.zarr/a3")
                best = min(best, time.perf_counter() - start)
                requests = server.requests
            print(f"v{fmt} {what}: {nodes} node(s), {requests} requests, {best * 1e3:.0f} ms")
    server.shutdown()


if __name__ == "__main__":
    main()
