"""Whole-chunk reads of an array served over HTTP: cuzarr against zarr-python.

Serve a folder of Zarr arrays with any static web server (the committed numbers used nginx on
loopback: a Python server answers a request in about a millisecond and would be what is
measured), then::

    python bench/remote_chunks.py --url http://127.0.0.1:18080/e.zarr --rows 64

reads ``array[:rows]`` through ``cuzarr.open(url)`` and through zarr-python (its ObjectStore
over obstore's HTTPStore, zarr's default pipeline), both with 2 threads, alternating, checks
that both return the same values, and prints the median time and the time per chunk.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="URL of a Zarr v3 array")
    p.add_argument("--rows", type=int, default=64, help="read array[:ROWS]")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()

    import zarr
    from obstore.store import HTTPStore

    import cuzarr

    a = cuzarr.open(args.url, settings=cuzarr.Settings(threads=2))
    assert isinstance(a, cuzarr.Array)
    store = zarr.storage.ObjectStore(
        HTTPStore(args.url, client_options={"allow_http": True}), read_only=True
    )
    zarr.config.set({"threading.max_workers": 2})
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}):
        z = zarr.open_array(store, mode="r")
    sel = slice(0, args.rows)
    chunks = math.prod(-(-n // c) for n, c in zip((args.rows, *a.shape[1:]), a.chunks, strict=True))
    times: dict[str, list[float]] = {"cuzarr": [], "zarr": []}
    want = None
    for _ in range(args.repeat):
        for name, arr in (("cuzarr", a), ("zarr", z)):
            start = time.perf_counter()
            got = np.asarray(arr[sel])
            times[name].append(time.perf_counter() - start)
            if want is None:
                want = got
            elif not np.array_equal(got, want):
                raise SystemExit(f"{name} returned other values")
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"{name}: {t * 1e3:.0f} ms, {t / chunks * 1e6:.0f} us a chunk ({chunks} chunks)")


if __name__ == "__main__":
    main()
