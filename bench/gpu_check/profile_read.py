"""Where a GPU read's time goes: one cProfile of ``device="gpu"`` reads, as text.

Usage: ``python3 profile_read.py OUT.txt [--size-gib 1]``. A 1 MiB-chunk zstd array in /dev/shm
is read once to warm up, then profiled (cumulative and own time, top 30 each), for the wave
loop, the file reads, the uploads and the nvCOMP calls to be told apart.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import tempfile
import time
from pathlib import Path

import cupy as cp
import numpy as np
import zarr

import cuzarr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size-gib", type=float, default=1.0)
    args = ap.parse_args()
    n = int(args.size_gib * (1 << 30)) // 2
    root = Path(tempfile.mkdtemp(dir="/dev/shm"))
    lines = []
    try:
        data = (np.arange(n, dtype=np.uint32) % 4096).astype(np.uint16)
        for name, chunk_mib in (("zstd", 1), ("zstd", 8)):
            path = root / f"{name}{chunk_mib}"
            a = cuzarr.create(
                path,
                shape=(n,),
                chunks=(chunk_mib << 19,),
                dtype="u2",
                compressors=[zarr.codecs.ZstdCodec(level=1)],
            )
            a[...] = data
            gpu = cuzarr.open(path, device="gpu")
            out = cp.empty(n, "u2")
            gpu.read(..., out=out)
            cp.cuda.Device().synchronize()
            cuzarr.reset_stats()
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            gpu.read(..., out=out)
            cp.cuda.Device().synchronize()
            prof.disable()
            wall = time.perf_counter() - t0
            ok = bool((out[:: 1 << 16].get() == data[:: 1 << 16]).all())
            mib = data.nbytes >> 20
            lines.append(f"==== {name} {chunk_mib} MiB chunks, {mib} MiB: {wall:.3f} s")
            lines.append(f"correct sample: {ok}; stats: {cuzarr.stats()}")
            for key in ("cumulative", "tottime"):
                buf = io.StringIO()
                pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(30)
                lines.append(buf.getvalue())
        # A GPU write of the same data (zstd, 8 MiB chunks), profiled the same way.
        path = root / "write"
        dev = cp.asarray(data)
        w = cuzarr.create(
            path,
            shape=(n,),
            chunks=(8 << 19,),
            dtype="u2",
            compressors=[zarr.codecs.ZstdCodec(level=1)],
            device="gpu",
        )
        w[...] = dev
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        w[...] = dev
        cp.cuda.Device().synchronize()
        prof.disable()
        lines.append(f"==== GPU write, zstd 8 MiB chunks: {time.perf_counter() - t0:.3f} s")
        for key in ("cumulative", "tottime"):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(30)
            lines.append(buf.getvalue())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines)[:3000])


if __name__ == "__main__":
    main()
