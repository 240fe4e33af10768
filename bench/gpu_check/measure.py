"""GPU measurements of the issue's benchmark, in one run; writes one JSON.

Usage: ``python3 measure.py OUT.json [--size-gib 1]``. Every measurement is guarded: one that
fails records its error and the others still run. Arrays live in /dev/shm or /tmp (page cache).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import cupy as cp
import numcodecs.zarr3
import numpy as np
import zarr

import cuzarr

GIB = 1 << 30
MIB = 1 << 20


def best(fn: Callable[[], Any], reps: int = 2) -> float:
    times = []
    for _ in range(reps):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        times.append(time.perf_counter() - t0)
    return min(times)


def guarded(results: dict[str, Any], key: str, fn: Callable[[], Any]) -> None:
    try:
        results[key] = fn()
    except Exception as exc:
        results[key] = {
            "error": f"{type(exc).__name__}: {exc}",
            "trace": traceback.format_exc(limit=4),
        }
    print(key, json.dumps(results[key], default=str)[:300], flush=True)


def make_data(nbytes: int) -> np.ndarray:
    n = nbytes // 2
    rng = np.random.default_rng(0)
    ramp = (np.arange(n, dtype=np.uint32) % 4096).astype(np.uint16)
    return ramp + rng.integers(0, 64, n, dtype=np.uint16)


def pinned_h2d(nbytes: int) -> dict[str, Any]:
    mem = cp.cuda.alloc_pinned_memory(nbytes)
    host = np.frombuffer(mem, np.uint8, count=nbytes)
    host[:] = 1
    dev = cp.empty(nbytes, cp.uint8)
    t = best(lambda: dev.set(host), reps=5)
    return {"bytes": nbytes, "seconds": t, "gib_s": nbytes / t / GIB}


def nvcomp_raw_decode(data: np.ndarray, chunk: int) -> dict[str, Any]:
    import numcodecs
    from nvidia import nvcomp

    from cuzarr.backends.pool import parallel_map
    from cuzarr.gpu.device import decode_batch, upload

    u8 = data.view(np.uint8)
    pieces = [u8[i : i + chunk] for i in range(0, u8.size, chunk)]
    codec = numcodecs.Zstd(level=1)
    encs = parallel_map(lambda p: bytes(codec.encode(p)), pieces, os.cpu_count() or 1)
    dev, offsets, sizes = upload(encs)  # one packed device buffer, as a wave has it
    out_sizes = [p.size for p in pieces]

    def run() -> None:
        decode_batch("Zstd", dev, offsets, sizes, out_sizes)
        cp.cuda.get_current_stream().synchronize()

    run()  # warm-up
    t = best(run)
    return {
        "chunk_bytes": chunk,
        "n": len(encs),
        "seconds": t,
        "gib_s": u8.size / t / GIB,
        "ratio": u8.size / sum(map(len, encs)),
        "nvcomp": nvcomp.__version__,
    }


CODECS: dict[str, dict[str, Any]] = {
    "zstd": {"compressors": [zarr.codecs.ZstdCodec(level=1)]},
    "lz4": {"compressors": [numcodecs.zarr3.LZ4()]},
    "blosc-zstd": {
        "compressors": [zarr.codecs.BloscCodec(cname="zstd", clevel=1, shuffle="shuffle")]
    },
}


def end_to_end(
    root: Path, data: np.ndarray, name: str, chunk_mib: int, sharded: bool, threads: int
) -> dict[str, Any]:
    n = data.size
    chunk = chunk_mib * MIB // 2
    path = root / f"{name}_{chunk_mib}{'_sharded' if sharded else ''}"
    kwargs = dict(CODECS["zstd" if sharded else name])
    if sharded:
        kwargs["shards"] = (chunk * 16,)
    settings = cuzarr.Settings(threads=threads)
    t0 = time.perf_counter()
    a = cuzarr.create(
        path, shape=(n,), chunks=(chunk,), dtype="u2", settings=settings, device="cpu", **kwargs
    )
    a[...] = data
    t_write_cpu = time.perf_counter() - t0
    stored = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    cpu = cuzarr.open(path, device="cpu", settings=settings)
    t_cpu = best(lambda: cpu[...])
    gpu = cuzarr.open(path, device="gpu", settings=settings)
    out = cp.empty(n, "u2")
    t_gpu = best(lambda: gpu.read(..., out=out))
    step = max(1, n // 1_000_003)
    ok = bool((out[::step].get() == data[::step]).all())
    # The same read with the chunk files read on the host (the engine's threads) and uploaded
    # once per wave (pinned), instead of kvikio's reads into device memory: the question when
    # kvikio runs in compatibility mode (no GDS). Bench-only switch: fetch declines.
    from cuzarr.gpu.backend import GpuBackend

    kvikio_fetch = GpuBackend.fetch
    GpuBackend.fetch = lambda self, store, keys, codec: None  # type: ignore[method-assign]
    try:
        t_gpu_host_reads = best(lambda: gpu.read(..., out=out))
    finally:
        GpuBackend.fetch = kvikio_fetch  # type: ignore[method-assign]
    ok = ok and bool((out[::step].get() == data[::step]).all())
    # kvikio's reads with one thread per core instead of its default (one, in compat mode): is
    # the read side of a 1 GiB wave kvikio's single thread? (None where kvikio cannot set it.)
    import kvikio.defaults

    kv_set = getattr(kvikio.defaults, "set", None)
    t_gpu_kvikio_threads = None
    if kv_set is not None:
        with kv_set("num_threads", threads):
            t_gpu_kvikio_threads = best(lambda: gpu.read(..., out=out))
        ok = ok and bool((out[::step].get() == data[::step]).all())
    # The waves as they were before gpu_wave_bytes (64 MiB of decoded chunks, the host's
    # max_bytes_in_flight): the change's gain in the same run. One repeat (64 MiB LZ4 chunks
    # took 9 s a read on the H100 this way).
    old = cuzarr.open(path, device="gpu", settings=replace(settings, gpu_wave_bytes=64 * MIB))
    t_gpu_64mib_waves = best(lambda: old.read(..., out=out), reps=1)
    ok = ok and bool((out[::step].get() == data[::step]).all())
    # What device="auto" runs past a crossover: decoded on the GPU, NumPy results.
    host = cuzarr.open(path, device="auto", settings=replace(settings, gpu_crossover_bytes=1))
    host_out = np.empty(n, "u2")
    t_host = best(lambda: host.read(..., out=host_out))
    ok = ok and bool((host_out[::step] == data[::step]).all())
    # The same with each wave in one pinned copy each way (the stage unbounded, as before
    # gpu.pinned): what copying 1 GiB waves through the 64 MiB stage in windows costs.
    from cuzarr.gpu import pinned

    stage_bytes = host._engine.backend._stage.held()
    bounded = pinned.STAGE_BYTES
    pinned.STAGE_BYTES = 4 * GIB
    try:
        t_host_one_copy = best(lambda: host.read(..., out=host_out), reps=1)
    finally:
        pinned.STAGE_BYTES = bounded
    ok = ok and bool((host_out[::step] == data[::step]).all())
    stats = cuzarr.stats()
    shutil.rmtree(path)
    return {
        "bytes": data.nbytes,
        "chunk_bytes": chunk * 2,  # decoded bytes of one (inner) chunk: what the crossover means
        "stored": stored,
        "gpu_s": t_gpu,
        "gpu_host_reads_s": t_gpu_host_reads,
        "gpu_host_reads_over_kvikio": t_gpu / t_gpu_host_reads,
        "gpu_kvikio_threads_s": t_gpu_kvikio_threads,
        "gpu_64mib_waves_s": t_gpu_64mib_waves,
        "gpu_wave_gain": t_gpu_64mib_waves / t_gpu,
        "cpu_s": t_cpu,
        "gpu_host_s": t_host,
        "gpu_host_backend": host._engine.backend.name,
        "gpu_host_one_copy_s": t_host_one_copy,
        "gpu_host_window_cost": t_host / t_host_one_copy,
        "pinned_stage_bytes": stage_bytes,
        "gpu_gib_s": data.nbytes / t_gpu / GIB,
        "cpu_gib_s": data.nbytes / t_cpu / GIB,
        "gpu_host_gib_s": data.nbytes / t_host / GIB,
        "gpu_over_cpu": t_cpu / t_gpu,
        "gpu_host_over_cpu": t_cpu / t_host,
        "cpu_write_s": t_write_cpu,
        "correct_sample": ok,
        "gpu_cpu_decodes": stats.get("gpu_cpu_decodes", 0),
    }


def gpu_write(root: Path, data: np.ndarray, chunk_mib: int) -> dict[str, Any]:
    path = root / "gpu_write"
    dev = cp.asarray(data)
    a = cuzarr.create(
        path,
        shape=data.shape,
        chunks=(chunk_mib * MIB // 2,),
        dtype="u2",
        compressors=[zarr.codecs.ZstdCodec(level=1)],
        device="gpu",
    )
    t0 = time.perf_counter()
    a[...] = dev
    t = time.perf_counter() - t0
    back = zarr.open_array(path, mode="r")[: 1 << 20]
    ok = bool((back == data[: 1 << 20]).all())
    shutil.rmtree(path)
    return {
        "bytes": data.nbytes,
        "seconds": t,
        "gib_s": data.nbytes / t / GIB,
        "zarr_cpu_reads_back": ok,
    }


def recommended_crossover(rows: list[dict[str, Any]]) -> int | None:
    """The smallest measured chunk size from which GPU-to-host reads keep up with the CPU.

    ``rows``: end-to-end read results (``chunk_bytes``, ``cpu_s``, ``gpu_host_s``; failed
    measurements, without them, are skipped). A size qualifies when the GPU-to-host read is
    at least as fast as the CPU engine's for every row of that size; the answer is the smallest
    size from which that size and every larger measured one qualify, ``None`` if none does.
    """
    ok: dict[int, bool] = {}
    for r in rows:
        if "gpu_host_s" not in r or "cpu_s" not in r:
            continue
        size = int(r["chunk_bytes"])
        ok[size] = ok.get(size, True) and r["gpu_host_s"] <= r["cpu_s"]
    found: int | None = None
    for size in sorted(ok, reverse=True):
        if not ok[size]:
            break
        found = size
    return found


def commit() -> str:
    f = Path(__file__).with_name("COMMIT")
    if f.exists():
        return f.read_text().strip()
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except Exception:
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size-gib", type=float, default=1.0)
    ap.add_argument("--chunk-mib", default="1,8,64", help="chunk sizes of the read sweep")
    args = ap.parse_args()
    nbytes = int(args.size_gib * GIB)
    threads = os.cpu_count() or 1
    props = cp.cuda.runtime.getDeviceProperties(0)
    res: dict[str, Any] = {
        "gpu": props["name"].decode(),
        "driver": cp.cuda.runtime.driverGetVersion(),
        "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
        "cupy": cp.__version__,
        "commit": commit(),
        "threads": threads,
        "array_bytes": nbytes,
        "python": sys.version.split()[0],
    }
    guarded(res, "gds", lambda: __import__("cuzarr.gpu.files", fromlist=["gdsinfo"]).gdsinfo())
    data = make_data(nbytes)
    guarded(res, "pinned_h2d", lambda: pinned_h2d(min(nbytes, GIB)))
    guarded(res, "nvcomp_raw_decode_8mib", lambda: nvcomp_raw_decode(data, 8 * MIB))
    root = Path(tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    try:
        for name in ("zstd", "lz4", "blosc-zstd"):
            for mib in [int(m) for m in args.chunk_mib.split(",")]:
                guarded(
                    res,
                    f"read_{name}_{mib}mib",
                    lambda name=name, mib=mib: end_to_end(root, data, name, mib, False, threads),
                )
        for mib in (1, 8):
            guarded(
                res,
                f"read_sharded-zstd_{mib}mib",
                lambda mib=mib: end_to_end(root, data, "zstd", mib, True, threads),
            )
        guarded(res, "gpu_write_zstd_8mib", lambda: gpu_write(root, data, 8))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    reads = {k: v for k, v in res.items() if k.startswith("read_") and isinstance(v, dict)}
    res["recommended_gpu_crossover_bytes"] = recommended_crossover(list(reads.values()))
    res["recommended_gpu_crossover_bytes_by_codec"] = {
        name: recommended_crossover(
            [v for k, v in reads.items() if k.rsplit("_", 1)[0] == f"read_{name}"]
        )
        for name in sorted({k.rsplit("_", 1)[0].removeprefix("read_") for k in reads})
    }
    try:
        floor = min(res["pinned_h2d"]["gib_s"], res["nvcomp_raw_decode_8mib"]["gib_s"])
        e2e = res["read_zstd_8mib"]
        res["targets"] = {
            "e2e_8mib_zstd_over_floor": e2e["gpu_gib_s"] / floor,
            "e2e_8mib_zstd_over_floor_ok": e2e["gpu_gib_s"] >= 0.7 * floor,
            "gpu_over_cpu_8mib_zstd": e2e["gpu_over_cpu"],
            "gpu_over_cpu_ok": e2e["gpu_over_cpu"] >= 5,
        }
    except Exception as exc:
        res["targets"] = {"error": f"{type(exc).__name__}: {exc}"}
    with open(args.out, "w") as fh:
        json.dump(res, fh, indent=2, default=str)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
