"""Compare cuzarr with its peers and with the codec floor, on the same data, in one run.

Run ``python -m bench.compare --help`` from the repository root (or ``cuzarr bench --compare
...`` from a checkout). What it measures and how is documented in ``bench/README.md``.

Structure: the parent process generates the datasets once (Zarr v3 arrays written by zarr's
default pipeline, plus the expected data as ``.npy`` files), then runs every engine at every
thread count in its own subprocess (``--worker``), so each engine's thread pools are sized from
a fresh configuration and no engine's pools or caches affect another's. Peak RSS of a
whole-array read runs in yet another subprocess per engine and dataset (``--rss``). Every cell
is verified against the expected data; a cell that fails verification has no number.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import importlib.metadata
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zstandard

from bench import interleave

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"

#: Engines, in table order. "cuzarr" is zarr with cuzarr.Pipeline; "cuzarr-api" is cuzarr.open.
ENGINES = ("cuzarr", "cuzarr-api", "zarr", "zarr-fused", "zarrs", "tensorstore")
CUZARR_ENGINES = ("cuzarr", "cuzarr-api")
PEERS = ("zarr", "zarr-fused", "zarrs", "tensorstore")
#: The codec floor: every chunk decoded (encoded) in memory with the codec library cuzarr uses.
FLOOR = "floor"
WORKLOADS = ("read_all", "read_chunks", "read_strided", "write_all", "write_partial")
FLOOR_WORKLOADS = ("read_all", "write_all")
DATASET_KEYS = ("a", "b", "c", "d", "e", "f", "g", "h")
STRIDE = 4
#: Repeats of write_partial per round, at least (best counts, as for ``--repeats``): one call
#: is 1-25 ms, where one sample's jitter is as large as the engines' differences.
PARTIAL_REPEATS = 5
SEED = 0
ZARR_PIPELINES = {
    "zarr": "zarr.core.codec_pipeline.BatchedCodecPipeline",
    "zarr-fused": "zarr.core.codec_pipeline.FusedCodecPipeline",
    "zarrs": "zarrs.ZarrsCodecPipeline",
    "cuzarr": "cuzarr.zarr_pipeline.Pipeline",
}
#: How each engine is held to N threads (recorded in the results).
THREAD_CONTROLS = {
    "cuzarr": "cuzarr.configure(threads=N, strict=True) (the engine's pool); "
    "zarr threading.max_workers=N",
    "cuzarr-api": "cuzarr.open(..., settings=cuzarr.Settings(threads=N, strict=True))",
    "zarr": "zarr threading.max_workers=N (the executor codecs run on via asyncio.to_thread); "
    "async.concurrency left at 10 (a bound on chunks in flight, not threads)",
    "zarr-fused": "zarr codec_pipeline.max_workers=N (the fused pipeline's pool) and "
    "threading.max_workers=N",
    "zarrs": "zarr threading.max_workers=N (zarrs passes it as num_threads to its Rust pool), "
    "RAYON_NUM_THREADS=N, codec_pipeline.strict=True (no silent fallback to zarr's pipeline)",
    "tensorstore": "Context data_copy_concurrency.limit=N and file_io_concurrency.limit=N; "
    "no cache pool (TensorStore's default)",
    "floor": "the libraries cuzarr codes with: zstd decoded by numcodecs' libzstd in one call "
    "(chunks of 64 KiB or more) or python-zstandard, encoded by python-zstandard; other codecs "
    "numcodecs decode/encode with out= buffers; on a ThreadPoolExecutor of N threads",
    "all": "numcodecs.blosc.use_threads=False in every process (blosc never adds threads of its "
    "own); each engine and thread count has one persistent worker process, and the engines "
    "take turns cell by cell (rounds in rotating order, bench/interleave.py)",
}


# ----------------------------------------------------------------------------- datasets


@dataclass(frozen=True, slots=True, kw_only=True)
class Dataset:
    """One generated array.

    Attributes
    ----------
    key : str
        ``a`` .. ``h`` (``a`` .. ``f`` from the first performance issue, ``g`` and ``h``
        from the second).
    description : str
        Human-readable layout.
    source : str
        Name of the ``.npy`` file holding the expected data.
    shape, chunks, shards
        Array shape, (inner) chunk shape, shard shape or ``None``.
    dtype : str
        NumPy dtype name.
    codec : {"zstd", "blosc", "blosc-lz4", "none"}
        Compressor (``blosc``: blosc zstd level 3; ``blosc-lz4``: blosc lz4 level 5; both
        with byte shuffle).
    """

    key: str
    description: str
    source: str
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    codec: str

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize

    @property
    def nchunks(self) -> int:
        return math.prod(-(-n // c) for n, c in zip(self.shape, self.chunks, strict=True))

    def chunk_regions(self) -> Iterator[tuple[slice, ...]]:
        """Regions of the (inner) chunks in C order of the grid, clipped to the shape."""
        grid = [range(-(-n // c)) for n, c in zip(self.shape, self.chunks, strict=True)]
        for idx in itertools.product(*grid):
            yield tuple(
                slice(i * c, min((i + 1) * c, n))
                for i, c, n in zip(idx, self.chunks, self.shape, strict=True)
            )

    def partial_block(self) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """``(block, region)``: the first shard (unsharded: a 4-chunk-edge block) and the
        first half of it along every axis, the region a partial overwrite writes."""
        edge = self.shards or tuple(
            min(n, 4 * c) for n, c in zip(self.shape, self.chunks, strict=True)
        )
        edge = tuple(min(e, n) for e, n in zip(edge, self.shape, strict=True))
        block = tuple(slice(0, e) for e in edge)
        region = tuple(slice(0, max(e // 2, 1)) for e in edge)
        return block, region

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "description": self.description,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "chunks": list(self.chunks),
            "shards": None if self.shards is None else list(self.shards),
            "codec": self.codec,
            "nbytes": self.nbytes,
            "nchunks": self.nchunks,
        }


def _cap(shape: Sequence[int], chunk: int) -> tuple[int, ...]:
    return tuple(min(chunk, n) for n in shape)


def datasets_for(size: int) -> dict[str, Dataset]:
    """The eight datasets of the issues for a cube of edge ``size`` (512 in the full run).

    (e) is a cube of edge ``size // 2`` in 16^3 chunks; (f) a ``16 size`` square float32 image
    in 512x512 chunks (8192^2 at 512: as many bytes as the cube); (g) the cube in shards of
    small inner chunks of a fast codec; (h) the cube in blosc with lz4. Chunk and shard shapes
    are capped to the array; shards stay a multiple of the inner chunks.
    """
    if size < 2:
        raise ValueError(f"size: expected an integer >= 2, got {size}")
    cube = (size,) * 3
    inner = min(32, size)
    shard = min(256, -(-size // inner) * inner)
    small_inner = min(16, size)
    small_shard = min(256, -(-size // small_inner) * small_inner)
    small = (max(size // 2, 1),) * 3
    image = (16 * size,) * 2
    c64 = _cap(cube, 64)
    return {
        "a": Dataset(
            key="a",
            description="64^3 chunks, zstd(3)",
            source="cube",
            shape=cube,
            dtype="uint16",
            chunks=c64,
            shards=None,
            codec="zstd",
        ),
        "b": Dataset(
            key="b",
            description="32^3 chunks in 256^3 shards, zstd(3)",
            source="cube",
            shape=cube,
            dtype="uint16",
            chunks=(inner,) * 3,
            shards=(shard,) * 3,
            codec="zstd",
        ),
        "c": Dataset(
            key="c",
            description="64^3 chunks, blosc zstd(3)+shuffle",
            source="cube",
            shape=cube,
            dtype="uint16",
            chunks=c64,
            shards=None,
            codec="blosc",
        ),
        "d": Dataset(
            key="d",
            description="64^3 chunks, uncompressed",
            source="cube",
            shape=cube,
            dtype="uint16",
            chunks=c64,
            shards=None,
            codec="none",
        ),
        "e": Dataset(
            key="e",
            description=f"{small[0]}^3 in 16^3 chunks (8 KiB), zstd(3)",
            source="small",
            shape=small,
            dtype="uint16",
            chunks=_cap(small, 16),
            shards=None,
            codec="zstd",
        ),
        "f": Dataset(
            key="f",
            description="2-D float32 image, 512x512 chunks, zstd(3)",
            source="image",
            shape=image,
            dtype="float32",
            chunks=_cap(image, 512),
            shards=None,
            codec="zstd",
        ),
        "g": Dataset(
            key="g",
            description="16^3 chunks (8 KiB) in 256^3 shards, blosc lz4(5)+shuffle",
            source="cube",
            shape=cube,
            dtype="uint16",
            chunks=(small_inner,) * 3,
            shards=(small_shard,) * 3,
            codec="blosc-lz4",
        ),
        "h": Dataset(
            key="h",
            description="64^3 chunks, blosc lz4(5)+shuffle",
            source="cube",
            shape=cube,
            dtype="uint16",
            chunks=c64,
            shards=None,
            codec="blosc-lz4",
        ),
    }


def make_image(edge: int, *, seed: int = SEED) -> np.ndarray:
    """A ``(edge, edge)`` float32 image: a smooth gradient plus noise, in quarter steps."""
    rng = np.random.default_rng(seed)
    out = np.empty((edge, edge), np.float32)
    rows = max(1, (1 << 22) // edge)
    cols = np.arange(edge, dtype=np.float32)
    for r in range(0, edge, rows):
        stop = min(r + rows, edge)
        y = np.arange(r, stop, dtype=np.float32)[:, None]
        noise = rng.integers(0, 64, (stop - r, edge)).astype(np.float32)
        out[r:stop] = (y * 0.5 + cols * 0.25 + noise) * 0.25
    return out


def _codecs(ds: Dataset) -> dict[str, Any]:
    from zarr.codecs import BloscCodec, ZstdCodec

    if ds.codec == "zstd":
        return {"compressors": ZstdCodec(level=3)}
    if ds.codec == "blosc":
        return {"compressors": BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")}
    if ds.codec == "blosc-lz4":
        return {"compressors": BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")}
    return {"compressors": None}


def create_array(ds: Dataset, path: Path) -> Any:
    """Create ``ds``'s (empty) array at ``path`` with zarr-python; return the zarr array."""
    import zarr

    return zarr.create_array(
        store=zarr.storage.LocalStore(path),
        shape=ds.shape,
        dtype=ds.dtype,
        chunks=ds.chunks,
        shards=ds.shards,
        zarr_format=3,
        overwrite=True,
        **_codecs(ds),
    )


def generate(root: Path, size: int, keys: Sequence[str], progress: Callable[[str], None]) -> None:
    """Write the expected data (``.npy``) and the arrays of ``keys`` under ``root``.

    Reuses what a previous run left there when its manifest matches (same size and seed).
    """
    from cuzarr.benchmark import make_data

    manifest = root / "manifest.json"
    done: dict[str, Any] = {}
    if manifest.exists():
        done = json.loads(manifest.read_text())
        if done.get("size") != size or done.get("seed") != SEED:
            done = {}
    done.setdefault("size", size)
    done.setdefault("seed", SEED)
    done.setdefault("arrays", [])
    root.mkdir(parents=True, exist_ok=True)
    sets = datasets_for(size)
    makers = {
        "cube": lambda: make_data(size, seed=SEED),
        "small": lambda: make_data(sets["e"].shape[0], seed=SEED + 1),
        "image": lambda: make_image(sets["f"].shape[0], seed=SEED + 2),
    }
    import zarr

    for key in keys:
        ds = sets[key]
        if key in done["arrays"] and (root / f"{key}.zarr").exists():
            continue
        npy = root / f"{ds.source}.npy"
        if npy.exists():
            data = np.load(npy, mmap_mode="r")
        else:
            progress(f"generating {ds.source} data {ds.shape} {ds.dtype}")
            data = makers[ds.source]()
            np.save(npy, data)
        progress(f"writing dataset ({key}) {ds.description} with zarr's default pipeline")
        with zarr.config.set({"codec_pipeline.path": ZARR_PIPELINES["zarr"]}):
            create_array(ds, root / f"{key}.zarr")[...] = np.asarray(data)
        done["arrays"].append(key)
        manifest.write_text(json.dumps(done))


# ----------------------------------------------------------------------------- engines


class Unsupported(Exception):
    """The engine refuses this case (recorded as n/a, never as a number)."""


class EngineAdapter:
    """How one engine opens, reads and writes an array (one instance per worker process)."""

    name: str

    def open(self, path: Path, writable: bool = False) -> Any:
        raise NotImplementedError

    def read(self, h: Any, sel: Any) -> np.ndarray:
        return np.asarray(h[sel])

    def read_into(self, h: Any, sel: Any, out: np.ndarray) -> None:
        out[...] = h[sel]

    def write(self, h: Any, sel: Any, value: np.ndarray) -> None:
        h[sel] = value

    def pipeline(self, h: Any) -> str:
        return self.name


class ZarrAdapter(EngineAdapter):
    def __init__(self, name: str, threads: int) -> None:
        import zarr

        self.name = name
        self.zarr = zarr
        options: dict[str, Any] = {
            "threading.max_workers": threads,
            "codec_pipeline.max_workers": threads,
        }
        if name == "cuzarr":
            import cuzarr

            cuzarr.configure(threads=threads, strict=True)
        else:
            options["codec_pipeline.path"] = ZARR_PIPELINES[name]
        if name == "zarrs":
            options["codec_pipeline.strict"] = True
        zarr.config.set(options)

    def open(self, path: Path, writable: bool = False) -> Any:
        arr = self.zarr.open_array(store=str(path), mode="r+" if writable else "r")
        self.pipeline(arr)
        return arr

    def pipeline(self, h: Any) -> str:
        cls = type(h.async_array.codec_pipeline)
        got = f"{cls.__module__}.{cls.__qualname__}"
        want = ZARR_PIPELINES[self.name]
        if got != want and not (self.name == "zarrs" and got.startswith("zarrs.")):
            raise RuntimeError(f"{self.name}: zarr built {got}, not {want}")
        if self.name == "zarrs" and getattr(h.async_array.codec_pipeline, "impl", 1) is None:
            raise Unsupported("zarrs cannot handle this array")
        return got

    def read(self, h: Any, sel: Any) -> np.ndarray:
        try:
            return np.asarray(h[sel])
        except Exception as exc:
            self._unsupported(exc)
            raise

    def read_into(self, h: Any, sel: Any, out: np.ndarray) -> None:
        out[...] = self.read(h, sel)

    def _unsupported(self, exc: Exception) -> None:
        if self.name == "zarrs" and type(exc).__module__.startswith("zarrs"):
            raise Unsupported(f"zarrs (strict): {type(exc).__name__}: {exc}") from exc


class CuzarrApiAdapter(EngineAdapter):
    def __init__(self, threads: int) -> None:
        import cuzarr

        self.name = "cuzarr-api"
        self.cuzarr = cuzarr
        self.settings = cuzarr.Settings(threads=threads, strict=True)

    def open(self, path: Path, writable: bool = False) -> Any:
        return self.cuzarr.open(str(path), "r+" if writable else "r", settings=self.settings)

    def read_into(self, h: Any, sel: Any, out: np.ndarray) -> None:
        h.read(sel, out=out)

    def pipeline(self, h: Any) -> str:
        return "cuzarr.Array"


class TensorStoreAdapter(EngineAdapter):
    def __init__(self, threads: int) -> None:
        import tensorstore as ts

        self.name = "tensorstore"
        self.ts = ts
        self.context = ts.Context(
            {
                "data_copy_concurrency": {"limit": threads},
                "file_io_concurrency": {"limit": threads},
            }
        )

    def open(self, path: Path, writable: bool = False) -> Any:
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
        return self.ts.open(spec, context=self.context, read=True, write=writable).result()

    def read(self, h: Any, sel: Any) -> np.ndarray:
        return np.asarray(h[sel].read().result())

    def read_into(self, h: Any, sel: Any, out: np.ndarray) -> None:
        out[...] = h[sel].read().result()

    def write(self, h: Any, sel: Any, value: np.ndarray) -> None:
        h[sel].write(value).result()

    def pipeline(self, h: Any) -> str:
        return f"tensorstore {importlib.metadata.version('tensorstore')}"


def make_adapter(name: str, threads: int) -> EngineAdapter:
    if name in ZARR_PIPELINES:
        return ZarrAdapter(name, threads)
    if name == "cuzarr-api":
        return CuzarrApiAdapter(threads)
    if name == "tensorstore":
        return TensorStoreAdapter(threads)
    raise ValueError(f"unknown engine {name!r}")


# ----------------------------------------------------------------------------- measuring


class Mismatch(Exception):
    """An engine returned or stored wrong data."""


def check_equal(got: Any, expected: Any, what: str) -> None:
    got = np.asarray(got)
    expected = np.asarray(expected)
    if got.shape != expected.shape or got.dtype != expected.dtype:
        raise Mismatch(
            f"{what}: got {got.shape} {got.dtype}, expected {expected.shape} {expected.dtype}"
        )
    if not np.array_equal(got, expected):
        bad = int(np.count_nonzero(got != expected))
        raise Mismatch(f"{what}: {bad} of {expected.size} elements differ")


def _cell(engine: str, threads: int, ds: Dataset, workload: str) -> dict[str, Any]:
    return {
        "engine": engine,
        "threads": threads,
        "dataset": ds.key,
        "workload": workload,
        "nbytes": None,
        "calls": None,
        "seconds": [],
        "best_seconds": None,
        "mb_per_s": None,
        "verified": False,
        "pipeline": None,
        "error": None,
    }


def _finish(cell: dict[str, Any], times: list[float]) -> dict[str, Any]:
    cell["seconds"] = times
    cell["best_seconds"] = min(times)
    cell["mb_per_s"] = cell["nbytes"] / 1e6 / max(min(times), 1e-9)
    cell["verified"] = True
    return cell


def _timed(fn: Callable[[], Any], *, settle: bool = False) -> tuple[float, Any]:
    """Time ``fn``; with ``settle``, first flush dirty pages to disk (``os.sync``) so that the
    write-back of what an earlier engine wrote is not billed to this one."""
    gc.collect()
    if settle:
        os.sync()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def _zarr_default_read(path: Path, sel: Any) -> np.ndarray:
    """Read back through zarr's default pipeline (the independent check of every write)."""
    import zarr

    with zarr.config.set({"codec_pipeline.path": ZARR_PIPELINES["zarr"]}):
        return np.asarray(zarr.open_array(store=str(path), mode="r")[sel])


def measure(
    adapter: EngineAdapter,
    ds: Dataset,
    workload: str,
    *,
    data_dir: Path,
    scratch: Path,
    repeats: int,
    threads: int,
) -> dict[str, Any]:
    """Time one engine x dataset x workload cell (best of ``repeats``) and verify it."""
    cell = _cell(adapter.name, threads, ds, workload)
    expected = np.load(data_dir / f"{ds.source}.npy", mmap_mode="r")
    source = data_dir / f"{ds.key}.zarr"
    times: list[float] = []
    try:
        if workload == "read_all":
            h = adapter.open(source)
            cell["pipeline"] = adapter.pipeline(h)
            cell["nbytes"], cell["calls"] = ds.nbytes, 1
            for i in range(repeats):
                t, got = _timed(lambda: adapter.read(h, Ellipsis))
                check_equal(got, expected, f"read_all repeat {i + 1}")
                del got
                times.append(t)
        elif workload == "read_chunks":
            h = adapter.open(source)
            cell["pipeline"] = adapter.pipeline(h)
            regions = list(ds.chunk_regions())
            cell["nbytes"], cell["calls"] = ds.nbytes, len(regions)
            out = np.empty(ds.shape, ds.dtype)
            for i in range(repeats):
                out.fill(0)

                def loop() -> None:
                    for r in regions:
                        adapter.read_into(h, r, out[r])

                t, _ = _timed(loop)
                check_equal(out, expected, f"read_chunks repeat {i + 1}")
                times.append(t)
        elif workload == "read_strided":
            h = adapter.open(source)
            cell["pipeline"] = adapter.pipeline(h)
            sel = (slice(None, None, STRIDE),)
            want = np.asarray(expected[sel])
            cell["nbytes"], cell["calls"] = want.nbytes, 1
            for i in range(repeats):
                t, got = _timed(lambda: adapter.read(h, sel))
                check_equal(got, want, f"read_strided repeat {i + 1}")
                del got
                times.append(t)
        elif workload == "write_all":
            target = scratch / f"{ds.key}-{adapter.name}.zarr"
            create_array(ds, target)
            h = adapter.open(target, writable=True)
            cell["pipeline"] = adapter.pipeline(h)
            cell["nbytes"], cell["calls"] = ds.nbytes, 1
            data = np.ascontiguousarray(expected)
            for _ in range(repeats):
                t, _ = _timed(lambda: adapter.write(h, Ellipsis, data), settle=True)
                times.append(t)
            del data
            check_equal(_zarr_default_read(target, Ellipsis), expected, "write_all read back")
            shutil.rmtree(target, ignore_errors=True)
        elif workload == "write_partial":
            target = scratch / f"{ds.key}-{adapter.name}-partial.zarr"
            shutil.copytree(source, target)
            block, region = ds.partial_block()
            value = np.asarray(expected[region])
            value = (value + 1).astype(value.dtype)  # uint16 wraps
            h = adapter.open(target, writable=True)
            cell["pipeline"] = adapter.pipeline(h)
            cell["nbytes"], cell["calls"] = value.nbytes, 1
            for _ in range(max(repeats, PARTIAL_REPEATS)):
                t, _ = _timed(lambda: adapter.write(h, region, value), settle=True)
                times.append(t)
            want = np.array(expected[block])
            want[region] = value
            check_equal(_zarr_default_read(target, block), want, "write_partial read back")
            shutil.rmtree(target, ignore_errors=True)
        else:
            raise ValueError(f"unknown workload {workload!r}")
    except Unsupported as exc:
        cell["error"] = f"unsupported: {exc}"
        return cell
    except Mismatch as exc:
        cell["error"] = f"WRONG DATA: {exc}"
        return cell
    except Exception as exc:  # an engine failing is a result, not a crash of the harness
        cell["error"] = f"failed: {type(exc).__name__}: {exc}"
        return cell
    return _finish(cell, times)


# ----------------------------------------------------------------------------- the floor


def _numcodec(ds: Dataset) -> Any:
    from numcodecs import Blosc, Zstd

    if ds.codec == "zstd":
        return Zstd(level=3)
    if ds.codec == "blosc":
        return Blosc(cname="zstd", clevel=3, shuffle=Blosc.SHUFFLE)
    if ds.codec == "blosc-lz4":
        return Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE)
    return None


def _stored_chunks(ds: Dataset, path: Path) -> list[memoryview]:
    """Every encoded (inner) chunk of ``ds``'s array, loaded into memory, in grid order."""
    chunks: list[memoryview] = []
    if ds.shards is None:
        for region in ds.chunk_regions():
            idx = [r.start // c for r, c in zip(region, ds.chunks, strict=True)]
            chunks.append(memoryview((path / "c").joinpath(*map(str, idx)).read_bytes()))
        return chunks
    per = [s // c for s, c in zip(ds.shards, ds.chunks, strict=True)]
    n = math.prod(per)
    grid = [-(-s // h) for s, h in zip(ds.shape, ds.shards, strict=True)]
    by_coord: dict[tuple[int, ...], memoryview] = {}
    for shard in itertools.product(*map(range, grid)):
        raw = memoryview((path / "c").joinpath(*map(str, shard)).read_bytes())
        index = np.frombuffer(raw[len(raw) - 16 * n - 4 : len(raw) - 4], "<u8").reshape(n, 2)
        for k, inner in enumerate(itertools.product(*map(range, per))):
            off, nb = (int(v) for v in index[k])
            coord = tuple(s * p + i for s, p, i in zip(shard, per, inner, strict=True))
            by_coord[coord] = raw[off : off + nb]
    chunks += [
        by_coord[tuple(r.start // c for r, c in zip(region, ds.chunks, strict=True))]
        for region in ds.chunk_regions()
    ]
    return chunks


def _split(items: Sequence[Any], parts: int) -> list[Sequence[Any]]:
    step = -(-len(items) // parts)
    return [items[i : i + step] for i in range(0, len(items), step)]


def measure_floor(
    ds: Dataset, workload: str, *, data_dir: Path, repeats: int, threads: int
) -> dict[str, Any]:
    """Decode (read_all) or encode (write_all) every chunk held in memory: the codec floor.

    Decoding writes each chunk into a per-thread scratch buffer with the decoder library cuzarr
    uses (for zstd numcodecs' libzstd in one call for chunks of 64 KiB or more, python-zstandard
    for smaller ones; numcodecs otherwise); encoding starts from contiguous
    chunk arrays prepared beforehand, zstd with python-zstandard (cuzarr's default encoder).
    Uncompressed: a copy.
    Verified in a separate, untimed pass.
    """
    cell = _cell(FLOOR, threads, ds, workload)
    cell["pipeline"] = "zstandard" if ds.codec == "zstd" else "numcodecs"  # see encode_part
    expected = np.load(data_dir / f"{ds.source}.npy", mmap_mode="r")
    codec = _numcodec(ds)
    chunk_nbytes = math.prod(ds.chunks) * np.dtype(ds.dtype).itemsize
    regions = list(ds.chunk_regions())
    cell["nbytes"], cell["calls"] = ds.nbytes, len(regions)
    pool = ThreadPoolExecutor(threads)
    times: list[float] = []
    try:
        if workload == "read_all":
            stored = _stored_chunks(ds, data_dir / f"{ds.key}.zarr")

            # The same decoder library cuzarr uses: for zstd, numcodecs' libzstd in one call
            # for chunks of ZSTD_ONE_CALL_MIN bytes or more (zstd_batch.decode_into, where the
            # batch helper is built), else python-zstandard (a reused context per thread);
            # numcodecs for the others.
            from cuzarr.codecs import zstd_batch
            from cuzarr.codecs.numcodecs_ import ZSTD_ONE_CALL_MIN

            zstd = codec is not None and codec.codec_id == "zstd"
            one_call = zstd and chunk_nbytes >= ZSTD_ONE_CALL_MIN and zstd_batch.available()
            if one_call:
                cell["pipeline"] = "numcodecs-libzstd"

            def decode_part(part: Sequence[memoryview]) -> None:
                scratch = np.empty(chunk_nbytes, np.uint8)
                if one_call:
                    for buf in part:
                        if not zstd_batch.decode_into(np.frombuffer(buf, np.uint8), scratch):
                            raise Mismatch("floor decode: a stored chunk did not decode")
                    return
                if zstd:
                    dctx = zstandard.ZstdDecompressor()
                    for buf in part:
                        with dctx.stream_reader(buf) as reader:
                            reader.readinto(scratch)
                    return
                for buf in part:
                    if codec is None:
                        scratch[:] = np.frombuffer(buf, np.uint8)
                    else:
                        codec.decode(buf, out=scratch)

            parts = _split(stored, threads)
            for _ in range(repeats):
                t, _ = _timed(lambda: list(pool.map(decode_part, parts)))
                times.append(t)
            for r, buf in zip(regions, stored, strict=True):
                raw = bytes(buf) if codec is None else codec.decode(buf)
                got = np.frombuffer(raw, ds.dtype).reshape(ds.chunks)
                check_equal(
                    got[tuple(slice(0, s.stop - s.start) for s in r)], expected[r], "floor decode"
                )
        elif workload == "write_all":
            arrays = []
            for r in regions:
                a = np.zeros(ds.chunks, ds.dtype)
                a[tuple(slice(0, s.stop - s.start) for s in r)] = expected[r]
                arrays.append(a)

            # cuzarr compresses zstd with python-zstandard (Settings.zstd_encoder's default: a
            # reused context per thread), other codecs with numcodecs.
            zstd = codec is not None and codec.codec_id == "zstd"

            def encode_part(part: Sequence[np.ndarray]) -> list[Any]:
                if codec is None:
                    return [a.tobytes() for a in part]
                if zstd:
                    cctx = zstandard.ZstdCompressor(level=codec.level)
                    return [cctx.compress(a) for a in part]
                return [codec.encode(a) for a in part]

            parts = _split(arrays, threads)
            encoded: list[Any] = []
            for _ in range(repeats):
                del encoded
                t, res = _timed(lambda: list(pool.map(encode_part, parts)))
                encoded = [e for p in res for e in p]
                times.append(t)
            for a, enc in zip(arrays, encoded, strict=True):
                raw = enc if codec is None else codec.decode(enc)
                check_equal(np.frombuffer(raw, ds.dtype).reshape(ds.chunks), a, "floor encode")
        else:
            raise ValueError(f"the floor has no workload {workload!r}")
    except Mismatch as exc:
        cell["error"] = f"WRONG DATA: {exc}"
        return cell
    except Exception as exc:
        cell["error"] = f"failed: {type(exc).__name__}: {exc}"
        return cell
    finally:
        pool.shutdown()
    return _finish(cell, times)


# ----------------------------------------------------------------------------- subprocesses


def _limit_blosc() -> None:
    from numcodecs import blosc

    blosc.use_threads = False


def _vm(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _peak_rss() -> int:
    peak = _vm("VmHWM")
    if peak is not None:
        return peak
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def run_rss(job: dict[str, Any]) -> dict[str, Any]:
    """Body of an ``--rss`` subprocess: peak RSS of one whole-array read, over a baseline.

    The baseline is the peak after importing the engine and opening the array (metadata only);
    the read follows, then the check against the expected data (after the peak was taken).
    """
    _limit_blosc()
    ds = datasets_for(job["size"])[job["dataset"]]
    adapter = make_adapter(job["engine"], job["threads"])
    result: dict[str, Any] = {
        "engine": job["engine"],
        "threads": job["threads"],
        "dataset": ds.key,
        "output_bytes": ds.nbytes,
        "baseline_bytes": None,
        "peak_bytes": None,
        "over_baseline_bytes": None,
        "verified": False,
        "error": None,
    }
    try:
        h = adapter.open(Path(job["data"]) / f"{ds.key}.zarr")
        gc.collect()
        result["baseline_bytes"] = base = _peak_rss()
        got = adapter.read(h, Ellipsis)
        result["peak_bytes"] = peak = _peak_rss()
        result["over_baseline_bytes"] = peak - base
        check_equal(got, np.load(Path(job["data"]) / f"{ds.source}.npy", mmap_mode="r"), "rss")
        result["verified"] = True
    except Unsupported as exc:
        result["error"] = f"unsupported: {exc}"
        result["peak_bytes"] = result["over_baseline_bytes"] = None
    except Mismatch as exc:
        result["error"] = f"WRONG DATA: {exc}"
        result["peak_bytes"] = result["over_baseline_bytes"] = None
    return result


def _progress(message: str) -> None:
    print(f"[bench.compare] {message}", file=sys.stderr, flush=True)


def _subprocess(mode: str, job: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ)
    env["RAYON_NUM_THREADS"] = str(job["threads"])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "bench.compare", mode, json.dumps(job)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{mode} {job.get('engine')} exited with {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- report


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for dist in ("cuzarr", "zarr", "numcodecs", "numpy", "tensorstore", "zarrs", "crc32c"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def environment() -> dict[str, Any]:
    from cuzarr.benchmark import environment_info

    env = environment_info()
    env["versions"] = _versions()
    env["cpu_model"] = _cpu_model()
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    env["memory_bytes"] = mem
    return env


def _index(results: list[dict[str, Any]]) -> dict[tuple[str, int, str, str], dict[str, Any]]:
    return {(c["engine"], c["threads"], c["dataset"], c["workload"]): c for c in results}


def _speed(
    idx: dict[tuple[str, int, str, str], dict[str, Any]],
    engine: str,
    threads: int,
    key: str,
    workload: str,
) -> float | None:
    cell = idx.get((engine, threads, key, workload))
    if cell is None or not cell["verified"]:
        return None
    speed: float = cell["mb_per_s"]
    return speed


def best_peer(
    idx: dict[tuple[str, int, str, str], dict[str, Any]], threads: int, key: str, workload: str
) -> tuple[str, float] | None:
    """The fastest verified peer on a cell, ``(engine, MB/s)``."""
    speeds = [(p, s) for p in PEERS if (s := _speed(idx, p, threads, key, workload)) is not None]
    return max(speeds, key=lambda x: x[1]) if speeds else None


def evaluate_targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Check the issue's targets against the results (at the largest thread count run).

    Each target is evaluated for both cuzarr engines except where the issue names one
    (chunk-by-chunk reads: the explicit API). ``measured`` is ``None`` when a needed cell is
    missing or failed; ``met`` is then ``None`` too.
    """
    idx = _index(doc["results"])
    threads = max(doc["args"]["threads"])
    sets = datasets_for(doc["args"]["size"])
    targets: list[dict[str, Any]] = []

    def add(
        tid: str,
        text: str,
        engine: str,
        key: str,
        measured: float | None,
        threshold: float,
        higher: bool = True,
        unit: str = "x",
    ) -> None:
        met = (
            None
            if measured is None
            else (measured >= threshold if higher else measured <= threshold)
        )
        targets.append(
            {
                "id": tid,
                "target": text,
                "engine": engine,
                "dataset": key,
                "threads": threads,
                "measured": measured,
                "threshold": threshold,
                "unit": unit,
                "met": met,
            }
        )

    def ratio_to_peer(engine: str, key: str, workload: str) -> float | None:
        mine = _speed(idx, engine, threads, key, workload)
        peer = best_peer(idx, threads, key, workload)
        return None if mine is None or peer is None else mine / peer[1]

    def ratio_to(
        engine: str, other: str, key: str, workload: str, t: int = threads
    ) -> float | None:
        mine = _speed(idx, engine, t, key, workload)
        ref = _speed(idx, other, t, key, workload)
        return None if mine is None or ref is None else mine / ref

    for engine in CUZARR_ENGINES:
        for key in DATASET_KEYS:
            add(
                "read_all_vs_peer",
                "read all >= 1.0x best peer",
                engine,
                key,
                ratio_to_peer(engine, key, "read_all"),
                1.0,
            )
        add(
            "read_all_vs_floor",
            "read all >= 0.8x decode floor",
            engine,
            "a",
            ratio_to(engine, FLOOR, "a", "read_all"),
            0.8,
        )
        if "e" in sets:
            cell = idx.get((engine, threads, "e", "read_all"))
            floor = idx.get((FLOOR, threads, "e", "read_all"))
            over = None
            if cell and floor and cell["verified"] and floor["verified"]:
                over = (cell["best_seconds"] - floor["best_seconds"]) / sets["e"].nchunks * 1e6
            add(
                "per_chunk_overhead",
                "many small chunks: (time - floor) / chunks <= 10 us",
                engine,
                "e",
                over,
                10.0,
                higher=False,
                unit="us",
            )
        for key in DATASET_KEYS:
            for workload in ("write_all", "write_partial"):
                add(
                    f"{workload}_vs_peer",
                    f"{workload.replace('_', ' ')} >= 1.0x best peer",
                    engine,
                    key,
                    ratio_to_peer(engine, key, workload),
                    1.0,
                )
        add(
            "write_all_vs_floor",
            "write all >= 0.9x encode floor",
            engine,
            "a",
            ratio_to(engine, FLOOR, "a", "write_all"),
            0.9,
        )
        for r in doc.get("rss", []):
            if r["engine"] == engine:
                over = r["over_baseline_bytes"]
                limit = r["output_bytes"] + 64 * 2**20
                add(
                    "rss_read_all",
                    "peak RSS of read all <= output + 64 MiB over baseline",
                    engine,
                    r["dataset"],
                    None if over is None else over / 2**20,
                    limit / 2**20,
                    higher=False,
                    unit="MiB",
                )
        if {1, 2} <= set(doc["args"]["threads"]):
            one = _speed(idx, engine, 1, "a", "read_all")
            two = _speed(idx, engine, 2, "a", "read_all")
            add(
                "scaling",
                "read all, 2 threads >= 1.8x 1 thread",
                engine,
                "a",
                None if one is None or two is None else two / one,
                1.8,
            )
    for key in DATASET_KEYS:
        add(
            "read_chunks_vs_tensorstore",
            "read chunk by chunk (explicit API) >= 1.2x TensorStore",
            "cuzarr-api",
            key,
            ratio_to("cuzarr-api", "tensorstore", key, "read_chunks"),
            1.2,
        )
    present = {c["dataset"] for c in doc["results"]}
    return [t for t in targets if t["dataset"] in present]


def _fmt_share(x: float | None) -> str:
    return "unknown" if x is None else f"{100 * x:.1f} %"


def _fmt_ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def _fmt_target(t: dict[str, Any]) -> str:
    if t["measured"] is None:
        value = "n/a"
    elif t["unit"] == "x":
        value = f"{t['measured']:.2f}x"
    else:
        value = f"{t['measured']:.1f} {t['unit']}"
    mark = {True: "yes", False: "NO", None: "?"}[t["met"]]
    return f"{value} {mark}"


def file_system_of(path: Path) -> str | None:
    """The type of the file system holding ``path`` (Linux ``/proc/mounts``), e.g. ``ext4``."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    real = os.path.realpath(path)
    best: tuple[int, str] | None = None
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1]
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) > best[0]):
            best = (len(point), parts[2])
    return None if best is None else best[1]


def _fmt_reporting(before: dict[str, int] | None, during: dict[str, int] | None) -> str:
    """How much freed memory the kernel reported to the host during the run."""
    if before is None or during is None:
        return "not available (not recorded, or not this kernel)"
    # Held: turned off by --hold-freed-memory, or already off when the run started.
    held = during["order"] != before["order"] or during["order"] >= interleave.NO_REPORTING_ORDER
    state = "off for the run (--hold-freed-memory)" if held else f"on (order {before['order']})"
    if before["reported_kib"] < 0 or during["reported_kib"] < 0:
        return state
    mib = (during["reported_kib"] - before["reported_kib"]) / 1024
    return f"{state}, {mib:,.0f} MiB reported during the run"


def format_markdown(doc: dict[str, Any]) -> str:
    """The results as markdown: a header, one table per thread count, targets, peak RSS."""
    env = doc["environment"]
    idx = _index(doc["results"])
    engines = [e for e in (*ENGINES, FLOOR) if e in doc["args"]["engines"] or e == FLOOR]
    lines = [
        f"# cuzarr vs peers: {doc['name']}",
        "",
        f"- Run at {doc['created']} ({'quick mode' if doc['args']['quick'] else 'full'}), "
        f"size {doc['args']['size']}, {doc['args'].get('rounds', 1)} round(s) of every engine "
        f"in rotating order (best of {doc['args']['repeats']} per round), threads "
        f"{', '.join(map(str, doc['args']['threads']))}; write_partial best of "
        f"{max(doc['args']['repeats'], PARTIAL_REPEATS)} per round."
        + (
            f" Each engine's worker first made one untimed read ({doc['warm_up'][0]['dataset']}"
            " read all)."
            if doc.get("warm_up")
            else ""
        ),
        f"- Load average before/after: {doc['load_before']} / {doc['load_after']} "
        f"({env['cpus_usable']} usable CPUs). Numbers from a loaded machine are not final.",
        f"- Machine: {env.get('cpu_model')}, {env['platform']}, Python {env['python']}, "
        f"memory {(env.get('memory_bytes') or 0) / 2**30:.1f} GiB.",
        f"- Commit {env.get('git_commit')} (dirty: {env.get('git_dirty')}); versions: "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items()),
        f"- CPU time stolen by the hypervisor during the run: "
        f"{_fmt_share(doc.get('steal_fraction'))}.",
        f"- Write workloads wrote below {doc.get('scratch_dir') or 'the temporary folder'} "
        f"({doc.get('scratch_fs') or 'file system not recorded'}).",
        f"- Free page reporting (freed memory handed back to the VM's host): "
        f"{_fmt_reporting(doc.get('page_reporting_before'), doc.get('page_reporting_during'))}.",
        "- MB/s = decoded bytes of the selection / the median over rounds of each round's time "
        "(1 MB = 10^6 B); ratios and targets use these medians. "
        "`best peer` = fastest of zarr, zarr-fused, zarrs, tensorstore. n/a = not measured, "
        "unsupported, or failed (see the JSON's `error`); wrong data never gets a number.",
        "",
    ]
    targets_by_cell: dict[tuple[str, str], list[dict[str, Any]]] = {}
    workload_of = {
        "read_all_vs_peer": "read_all",
        "read_all_vs_floor": "read_all",
        "per_chunk_overhead": "read_all",
        "write_all_vs_peer": "write_all",
        "write_all_vs_floor": "write_all",
        "read_chunks_vs_tensorstore": "read_chunks",
        "scaling": "read_all",
    }
    for t in doc["targets"]:
        if t["id"] in workload_of:
            targets_by_cell.setdefault((t["dataset"], workload_of[t["id"]]), []).append(t)
    top = max(doc["args"]["threads"])
    for threads in doc["args"]["threads"]:
        lines.append(f"## {threads} thread{'s' if threads > 1 else ''} (MB/s)")
        lines.append("")
        head = [
            "dataset",
            "workload",
            *engines,
            "cuzarr / best peer",
            "cuzarr-api / best peer",
            "cuzarr / floor",
        ]
        if threads == top:
            head.append("targets (engine: measured, met?)")
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        for key in doc["args"]["datasets"]:
            for workload in doc["args"]["workloads"]:
                row = [f"({key}) {doc['dataset_specs'][key]['description']}", workload]
                for e in engines:
                    s = _speed(idx, e, threads, key, workload)
                    row.append(
                        ""
                        if e == FLOOR and workload not in FLOOR_WORKLOADS
                        else ("n/a" if s is None else f"{s:.0f}")
                    )
                peer = best_peer(idx, threads, key, workload)
                for e in CUZARR_ENGINES:
                    s = _speed(idx, e, threads, key, workload)
                    row.append(
                        "n/a" if s is None or peer is None else f"{s / peer[1]:.2f}x ({peer[0]})"
                    )
                s = _speed(idx, "cuzarr", threads, key, workload)
                f = _speed(idx, FLOOR, threads, key, workload)
                row.append(
                    ""
                    if workload not in FLOOR_WORKLOADS
                    else _fmt_ratio(None if s is None or f is None else s / f)
                )
                if threads == top:
                    row.append(
                        "; ".join(
                            f"{t['target']} [{t['engine']}]: {_fmt_target(t)}"
                            for t in targets_by_cell.get((key, workload), [])
                        )
                    )
                lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    lines += [
        "## Targets",
        "",
        "| target | engine | dataset | threads | measured | met? |",
        "|---|---|---|---|---|---|",
    ]
    for t in doc["targets"]:
        lines.append(
            f"| {t['target']} | {t['engine']} | ({t['dataset']}) | {t['threads']} | "
            f"{_fmt_target(t).rsplit(' ', 1)[0]} | "
            f"{ {True: 'yes', False: 'NO', None: '?'}[t['met']] } |"
        )
    if doc.get("rss"):
        lines += [
            "",
            "## Peak RSS of read all (MiB over the import+open baseline)",
            "",
            "| dataset | output MiB | " + " | ".join(ENGINES) + " |",
            "|---|---|" + "---|" * len(ENGINES),
        ]
        rss = {(r["engine"], r["dataset"]): r for r in doc["rss"]}
        for key in doc["args"]["datasets"]:
            row = [f"({key})", f"{doc['dataset_specs'][key]['nbytes'] / 2**20:.0f}"]
            for e in ENGINES:
                r = rss.get((e, key))
                row.append(
                    ""
                    if r is None
                    else "n/a"
                    if r["over_baseline_bytes"] is None
                    else f"{r['over_baseline_bytes'] / 2**20:.0f}"
                )
            lines.append("| " + " | ".join(row) + " |")
    if doc.get("round_ratios"):
        lines += [
            "",
            f"## Ratios to the best peer over rounds ({top} thread(s))",
            "",
            "Each round's ratio uses that round's times of every engine (the best peer of "
            "that round); min / median / max over rounds.",
            "",
            "| dataset | workload | engine | min | median | max |",
            "|---|---|---|---|---|---|",
        ]
        for rr in doc["round_ratios"]:
            if rr["threads"] == top:
                lines.append(
                    f"| ({rr['dataset']}) | {rr['workload']} | {rr['engine']} | "
                    f"{rr['min']:.2f}x | {rr['median']:.2f}x | {rr['max']:.2f}x |"
                )
    errors = [c for c in doc["results"] if c["error"]]
    if errors:
        lines += ["", "## Cells without a number", ""]
        lines += [
            f"- {c['engine']} threads={c['threads']} ({c['dataset']}) {c['workload']}: {c['error']}"
            for c in errors
        ]
    lines += ["", "## Thread limits", ""]
    lines += [f"- {k}: {v}" for k, v in THREAD_CONTROLS.items()]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- main


def _csv(choices: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated subset of {','.join(choices)}, got {text!r}"
            )
        return items

    return parse


def _threads(text: str) -> list[int]:
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1 like 1,2, got {text!r}")
    return sorted(set(values))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.compare",
        description="Compare cuzarr with zarr's pipelines, zarrs-python and TensorStore on the "
        "same generated data (see bench/README.md). Results: bench/results/NAME.json and .md.",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes (--size 64), 1 round, threads 1: a smoke test",
    )
    p.add_argument("--size", type=int, default=None, help="edge of the cube datasets (512)")
    p.add_argument(
        "--datasets",
        type=_csv(DATASET_KEYS),
        default=list(DATASET_KEYS),
        help="subset of a,b,c,d,e,f,g,h (all)",
    )
    p.add_argument(
        "--engines",
        type=_csv(ENGINES),
        default=list(ENGINES),
        help=f"subset of {','.join(ENGINES)} (all); the floor always runs",
    )
    p.add_argument(
        "--workloads",
        type=_csv(WORKLOADS),
        default=list(WORKLOADS),
        help=f"subset of {','.join(WORKLOADS)} (all)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds per cell, engines interleaved in rotating order; the median counts (4)",
    )
    p.add_argument(
        "--repeats", type=int, default=None, help="repeats per engine in a round, best counts (1)"
    )
    p.add_argument("--threads", type=_threads, default=None, help="thread counts to run (1,2)")
    p.add_argument("--no-rss", action="store_true", help="skip the peak-RSS subprocesses")
    p.add_argument("--no-floor", action="store_true", help="skip the codec floor")
    p.add_argument(
        "--hold-freed-memory",
        action="store_true",
        help="turn Linux's free page reporting off during the run (root; restored after): on "
        "a VM that reports freed memory to its host, re-touching it costs a host fault per page",
    )
    p.add_argument(
        "--data",
        type=Path,
        default=None,
        help="keep the generated datasets in DIR and reuse them (default: temporary)",
    )
    p.add_argument(
        "--scratch",
        type=Path,
        default=None,
        help="write the write workloads' arrays below DIR (default: the temporary folder); "
        "a tmpfs such as /dev/shm takes the disk out of the write numbers",
    )
    p.add_argument("--name", default=None, help="results file name (default: a timestamp)")
    p.add_argument(
        "--out",
        type=Path,
        default=RESULTS_DIR,
        help="folder for NAME.json and NAME.md (bench/results)",
    )
    return p


def _run_interleaved(
    doc: dict[str, Any],
    args: argparse.Namespace,
    engines: Sequence[str],
    threads: int,
    size: int,
    rounds: int,
    repeats: int,
    data_dir: Path,
    scratch: Path,
) -> None:
    """Every cell in ``rounds`` rounds of all engines, rotating the order (bench/interleave.py)."""
    base = {"threads": threads, "size": size, "data": str(data_dir), "scratch": str(scratch)}
    workers: dict[str, interleave.Worker] = {}
    try:
        for engine in engines:
            _progress(f"starting worker {engine} threads={threads}")
            workers[engine] = interleave.Worker({**base, "engine": engine}, REPO)
        # One untimed read per worker first: a process's first read pays for lazy imports,
        # thread pools and the VM's first touch of fresh memory (full-512-round6: the first
        # round of (a) read all took 1.6-2.3x the later rounds for every engine).
        warm = {"cmd": "cell", "dataset": args.datasets[0], "workload": "read_all", "repeats": 1}
        for engine in engines:
            workers[engine].ask(warm)
        doc.setdefault("warm_up", []).append({"threads": threads, **warm})
        for key in args.datasets:
            for workload in args.workloads:
                active = [e for e in engines if e != FLOOR or workload in FLOOR_WORKLOADS]
                per_engine: dict[str, list[dict[str, Any]]] = {e: [] for e in active}
                _progress(f"threads={threads} ({key}) {workload}: {rounds} round(s)")
                for r in range(rounds):
                    k = r % len(active)
                    for engine in active[k:] + active[:k]:
                        cmd = {"cmd": "cell", "dataset": key, "workload": workload,
                               "repeats": repeats}
                        per_engine[engine].append(workers[engine].ask(cmd))
                for engine in active:
                    cell = interleave.merge_rounds(per_engine[engine])
                    if cell["error"]:
                        _progress(f"  {engine} -> {cell['error']}")
                    doc["results"].append(cell)
                doc["round_ratios"] += interleave.round_ratios(per_engine, CUZARR_ENGINES, PEERS)
        for engine in engines:
            if engine in CUZARR_ENGINES:
                stats = workers[engine].ask({"cmd": "stats"})["cuzarr_stats"]
                doc["cuzarr_stats"][f"{engine}/threads={threads}"] = stats
    finally:
        for w in workers.values():
            w.close()


def run_server(job: dict[str, Any]) -> None:
    """Body of a ``--serve`` worker: one engine at one thread count, cells on request."""
    _limit_blosc()
    engine, threads = job["engine"], job["threads"]
    data_dir, scratch = Path(job["data"]), Path(job["scratch"])
    sets = datasets_for(job["size"])
    adapter = None if engine == FLOOR else make_adapter(engine, threads)
    if engine in CUZARR_ENGINES:
        import cuzarr

        cuzarr.reset_stats()

    def run_cell(key: str, workload: str, repeats: int) -> dict[str, Any]:
        ds = sets[key]
        if adapter is None:
            return measure_floor(ds, workload, data_dir=data_dir, repeats=repeats, threads=threads)
        return measure(
            adapter, ds, workload, data_dir=data_dir, scratch=scratch, repeats=repeats,
            threads=threads,
        )

    def stats() -> dict[str, int] | None:
        if engine not in CUZARR_ENGINES:
            return None
        import cuzarr

        return cuzarr.stats()

    interleave.serve(job, run_cell, stats)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the comparison the parsed ``args`` describe; return the results document."""
    size = args.size or (64 if args.quick else 512)
    repeats = args.repeats or 1
    rounds = args.rounds or (1 if args.quick else 4)
    if rounds < 1:
        raise SystemExit("--rounds: expected an integer >= 1")
    threads = args.threads or ([1] if args.quick else [1, 2])
    if repeats < 1:
        raise SystemExit("--repeats: expected an integer >= 1")
    sets = datasets_for(size)
    created = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    name = args.name or created.strftime("%Y%m%dT%H%M%SZ") + ("-quick" if args.quick else "")
    doc: dict[str, Any] = {
        "schema": 1,
        "name": name,
        "created": created.isoformat(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "cpu_times_before": interleave.cpu_times(),
        "page_reporting_before": interleave.page_reporting(),
        "args": {
            "quick": bool(args.quick),
            "size": size,
            "rounds": rounds,
            "repeats": repeats,
            "threads": threads,
            "datasets": args.datasets,
            "engines": args.engines,
            "workloads": args.workloads,
            "rss": not args.no_rss,
            "floor": not args.no_floor,
            "hold_freed_memory": bool(args.hold_freed_memory),
            "scratch": None if args.scratch is None else str(args.scratch),
        },
        "environment": environment(),
        "thread_controls": THREAD_CONTROLS,
        "dataset_specs": {k: sets[k].to_json() for k in args.datasets},
        "results": [],
        "round_ratios": [],
        "rss": [],
        "cuzarr_stats": {},
    }
    held = interleave.hold_freed_memory() if args.hold_freed_memory else contextlib.nullcontext()
    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)  # like --data: made if missing
    with (
        tempfile.TemporaryDirectory(prefix="cuzarr-compare-") as tmp,
        tempfile.TemporaryDirectory(prefix="cuzarr-writes-", dir=args.scratch) as scratch_dir,
        held,
    ):
        data_dir = args.data or Path(tmp) / "data"
        scratch = Path(scratch_dir)
        doc["scratch_dir"] = str(scratch.parent)
        doc["scratch_fs"] = file_system_of(scratch)
        generate(data_dir, size, args.datasets, _progress)
        engines = list(args.engines) + ([] if args.no_floor else [FLOOR])
        for n in threads:
            _run_interleaved(doc, args, engines, n, size, rounds, repeats, data_dir, scratch)
        if not args.no_rss and "read_all" in args.workloads:
            # Untimed, so these run side by side (peak RSS is per process).
            jobs = [
                {
                    "engine": engine,
                    "threads": max(threads),
                    "size": size,
                    "dataset": key,
                    "data": str(data_dir),
                }
                for key in args.datasets
                for engine in args.engines
            ]
            _progress(f"peak RSS of read all: {len(jobs)} subprocesses")
            with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
                doc["rss"] = list(pool.map(lambda job: _subprocess("--rss", job), jobs))
        doc["page_reporting_during"] = interleave.page_reporting()
    doc["load_after"] = [round(x, 2) for x in os.getloadavg()]
    doc["cpu_times_after"] = interleave.cpu_times()
    doc["steal_fraction"] = interleave.steal_fraction(
        doc["cpu_times_before"], doc["cpu_times_after"]
    )
    doc["verified"] = not any(
        (c["error"] or "").startswith("WRONG") for c in (*doc["results"], *doc["rss"])
    )
    doc["targets"] = evaluate_targets(doc)
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--serve"]:
        run_server(json.loads(argv[1]))
        return 0
    if argv[:1] == ["--rss"]:
        print(json.dumps(run_rss(json.loads(argv[1]))))
        return 0
    args = build_parser().parse_args(argv)
    doc = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"{doc['name']}.json"
    md_path = args.out / f"{doc['name']}.md"
    json_path.write_text(json.dumps(doc, indent=1) + "\n")
    md_path.write_text(format_markdown(doc))
    print(md_path.read_text())
    _progress(f"wrote {json_path} and {md_path}")
    wrong = [c for c in doc["results"] if (c["error"] or "").startswith("WRONG")]
    wrong += [r for r in doc["rss"] if (r["error"] or "").startswith("WRONG")]
    if wrong:
        _progress(f"{len(wrong)} cells returned or stored WRONG DATA (see the report)")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
