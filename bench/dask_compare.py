"""Dask on a sharded zarr array: cuzarr.dask.from_zarr vs dask.array.from_zarr vs zarrs-python.

Reads a sharded, zstd-compressed array through Dask and reduces it (``x.sum()``), so the time
is read + decode + a cheap reduction, with no result concatenation. Every variant runs in the
same process on the same data; results are reported as ratios to dask's default
(``dask.array.from_zarr`` on zarr-python's default pipeline: one task per inner chunk).

Usage::

    python bench/dask_compare.py [--shape 512 512 256] [--repeat 3] [--scheduler threads]
        [--out bench/results/dask_compare]

``--scheduler distributed`` runs on a ``LocalCluster`` (one process per core, one thread each)
with ``cuzarr.dask.install``; zarr-python and zarrs arrays are opened on the client and carry
their pipeline to the workers inside the pickled array.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import zarr

import cuzarr
import cuzarr.dask

DEFAULT = "zarr.core.codec_pipeline.BatchedCodecPipeline"
ZARRS = "zarrs.ZarrsCodecPipeline"
BASELINE = "dask.array.from_zarr (zarr default pipeline)"


def make_data(path: Path, shape: tuple[int, ...], chunks: tuple[int, ...],
              shards: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    ramp = np.add.outer(np.add.outer(np.arange(shape[0]), np.arange(shape[1])),
                        np.arange(shape[2])).astype("u2")
    data = ramp + rng.integers(0, 64, size=shape, dtype="u2")
    with cuzarr.configure():
        z = zarr.create_array(
            zarr.storage.LocalStore(path), shape=shape, dtype="u2", chunks=chunks,
            shards=shards, compressors=zarr.codecs.ZstdCodec(level=3), overwrite=True,
        )
        z[...] = data


def open_with(path: Path, pipeline: str) -> Any:
    with zarr.config.set({"codec_pipeline.path": pipeline}):
        return zarr.open_array(zarr.storage.LocalStore(path, read_only=True), mode="r")


def variants(path: Path) -> dict[str, Any]:
    """Name -> function building the Dask array (built inside the timed region)."""
    return {
        "cuzarr.dask.from_zarr (default blocks)": lambda: cuzarr.dask.from_zarr(str(path)),
        "cuzarr.dask.from_zarr (one shard per task)": lambda: cuzarr.dask.from_zarr(
            str(path), block_nbytes=1
        ),
        "dask.array.from_zarr (zarr default pipeline)": lambda: da.from_zarr(
            open_with(path, DEFAULT)
        ),
        "dask.array.from_zarr (zarr default, chunks=shards)": lambda: (
            lambda z: da.from_zarr(z, chunks=z.shards)
        )(open_with(path, DEFAULT)),
        "dask.array.from_zarr (zarrs-python pipeline)": lambda: da.from_zarr(
            open_with(path, ZARRS)
        ),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    shape, chunks, shards = tuple(args.shape), tuple(args.chunks), tuple(args.shards)
    workdir = Path(tempfile.mkdtemp(prefix="cuzarr-dask-bench-"))
    path = workdir / "a.zarr"
    client = cluster = None
    try:
        make_data(path, shape, chunks, shards)
        nbytes = int(np.prod(shape)) * 2
        expected = int(open_with(path, DEFAULT)[...].sum(dtype="u8"))
        if args.scheduler == "distributed":
            import distributed

            n = os.cpu_count() or 1
            cluster = distributed.LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0"
            )
            client = distributed.Client(cluster)
            cuzarr.dask.install(client)
            compute_kwargs: dict[str, Any] = {}
        else:
            compute_kwargs = {"scheduler": args.scheduler}
        builders = variants(path)
        times: dict[str, list[float]] = {name: [] for name in builders}
        ntasks: dict[str, int] = {}
        # Variants interleaved round by round (best of ``repeat`` after a warm-up round), so
        # that a load spike on a shared machine does not land on one variant only.
        for i in range(args.repeat + 1):
            for name, build in builders.items():
                t0 = time.perf_counter()
                x = build()
                total = int(x.sum(dtype="u8").compute(**compute_kwargs))
                dt = time.perf_counter() - t0
                if total != expected:
                    raise AssertionError(f"{name}: wrong sum {total} != {expected}")
                ntasks[name] = len(x.__dask_graph__())
                if i:
                    times[name].append(dt)
        rows = []
        for name, ts in times.items():
            best = min(ts)
            rows.append({
                "variant": name, "read_tasks": ntasks[name], "best_s": round(best, 4),
                "median_s": round(float(np.median(ts)), 4),
                "MB_per_s": round(nbytes / best / 1e6, 1),
            })
        base = next(r for r in rows if r["variant"] == BASELINE)
        for r in rows:
            r["speedup_vs_dask_default"] = round(base["best_s"] / r["best_s"], 2)
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "benchmark": "dask_compare",
        "workload": {
            "shape": shape, "dtype": "uint16", "chunks": chunks, "shards": shards,
            "codec": "zstd level 3", "decoded_MB": round(nbytes / 1e6, 1),
            "operation": "x.sum(dtype='u8').compute()", "repeat": args.repeat,
            "scheduler": args.scheduler,
            "inner_chunks": int(np.prod([s // c for s, c in zip(shape, chunks, strict=True)])),
            "shards_count": int(np.prod([-(-s // c) for s, c in zip(shape, shards, strict=True)])),
        },
        "results": rows,
        "environment": {
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "dask": dask.__version__, "zarr": zarr.__version__, "cuzarr": cuzarr.__version__,
            "zarrs": _version("zarrs"), "numpy": np.__version__, "commit": _commit(),
        },
    }


def _version(pkg: str) -> str:
    from importlib.metadata import version

    return version(pkg)


def _commit() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def markdown(result: dict[str, Any]) -> str:
    w = result["workload"]
    lines = [
        "# Dask on a sharded array: cuzarr.dask vs dask.array.from_zarr vs zarrs-python",
        "",
        f"Array {tuple(w['shape'])} {w['dtype']}, inner chunks {tuple(w['chunks'])} "
        f"({w['inner_chunks']}), shards {tuple(w['shards'])} ({w['shards_count']}), "
        f"{w['codec']}, {w['decoded_MB']} MB decoded. Operation `{w['operation']}`, "
        f"scheduler `{w['scheduler']}`, best of {w['repeat']} interleaved rounds after a "
        "warm-up round, "
        f"{result['environment']['cpus']} cores, one run of this script.",
        "",
        "| variant | read tasks | best s | MB/s | speedup vs dask default |",
        "|---|---|---|---|---|",
    ]
    lines.extend(
        f"| {r['variant']} | {r['read_tasks']} | {r['best_s']} | {r['MB_per_s']} | "
        f"{r['speedup_vs_dask_default']}x |"
        for r in result["results"]
    )
    env = result["environment"]
    lines += ["", ", ".join(f"{k} {v}" for k, v in env.items()), ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", type=int, nargs=3, default=[512, 512, 256])
    p.add_argument("--chunks", type=int, nargs=3, default=[32, 32, 32])
    p.add_argument("--shards", type=int, nargs=3, default=[256, 256, 256])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--scheduler", default="threads",
                   choices=["threads", "processes", "sync", "distributed"])
    p.add_argument("--out", type=Path, default=None,
                   help="write OUT.json and OUT.md (e.g. bench/results/dask_compare)")
    args = p.parse_args()
    result = run(args)
    text = markdown(result)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(text)


if __name__ == "__main__":
    main()
