"""Timing one cell (engine x dataset x workload), best of repeats, every result verified."""

from __future__ import annotations

import gc
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.datasets import Dataset, create_array
from bench.engines import EngineAdapter, Unsupported
from bench.matrix import PARTIAL_REPEATS, STRIDE, ZARR_PIPELINES


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


def _unchecked(got: Any, expected: Any, what: str) -> None:
    """No check: the results of ``zarr-own`` (bench/zarr_own.py) are garbage by design."""


def cell_record(engine: str, threads: int, ds: Dataset, workload: str) -> dict[str, Any]:
    """A cell's result record, not yet measured (what the results document holds per cell)."""
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


def finish_cell(cell: dict[str, Any], times: list[float], verified: bool = True) -> dict[str, Any]:
    """Record a cell's times (the best counts within a round); ``verified``: its data was
    checked (all but ``zarr-own``'s cells)."""
    cell["seconds"] = times
    cell["best_seconds"] = min(times)
    cell["mb_per_s"] = cell["nbytes"] / 1e6 / max(min(times), 1e-9)
    cell["verified"] = verified
    return cell


def timed(fn: Callable[[], Any], *, settle: bool = False) -> tuple[float, Any]:
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
    """Time one engine x dataset x workload cell (best of ``repeats``) and verify it.

    An adapter that does not verify (``zarr-own``) is timed the same way, its results unchecked.
    """
    cell = cell_record(adapter.name, threads, ds, workload)
    expected = ds.expected(data_dir)
    source = data_dir / f"{ds.key}.zarr"
    times: list[float] = []
    check = check_equal if adapter.verifies else _unchecked
    try:
        if workload == "read_all":
            h = adapter.open(source)
            cell["pipeline"] = adapter.pipeline(h)
            cell["nbytes"], cell["calls"] = ds.nbytes, 1
            for i in range(repeats):
                t, got = timed(lambda: adapter.read(h, Ellipsis))
                check(got, expected, f"read_all repeat {i + 1}")
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

                t, _ = timed(loop)
                check(out, expected, f"read_chunks repeat {i + 1}")
                times.append(t)
        elif workload == "read_strided":
            h = adapter.open(source)
            cell["pipeline"] = adapter.pipeline(h)
            sel = (slice(None, None, STRIDE),)
            want = np.asarray(expected[sel])
            cell["nbytes"], cell["calls"] = want.nbytes, 1
            for i in range(repeats):
                t, got = timed(lambda: adapter.read(h, sel))
                check(got, want, f"read_strided repeat {i + 1}")
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
                t, _ = timed(lambda: adapter.write(h, Ellipsis, data), settle=True)
                times.append(t)
            del data
            check(_zarr_default_read(target, Ellipsis), expected, "write_all read back")
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
                t, _ = timed(lambda: adapter.write(h, region, value), settle=True)
                times.append(t)
            want = np.array(expected[block])
            want[region] = value
            check(_zarr_default_read(target, block), want, "write_partial read back")
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
    return finish_cell(cell, times, verified=adapter.verifies)
