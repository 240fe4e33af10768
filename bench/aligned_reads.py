"""Read all through zarr into configure()'s AlignedNDBuffer against zarr's own ndbuffer.

In one process per dataset: the array read whole through zarr with cuzarr's pipeline
(``cuzarr.configure``, 2 threads, strict), zarr's ``ndbuffer`` switched between zarr's own
CPU ``NDBuffer`` and ``cuzarr.zarr_buffers.AlignedNDBuffer`` in alternating order each round,
then the explicit API's ``a[...]``; the medians and the speed-up. Usage::

    .venv/bin/python -m bench.aligned_reads --data /dev/shm/data512 a b c [--rounds 8]

bench/results/probe-512-session45.md holds its numbers.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path

import zarr
from numcodecs import blosc

import cuzarr

ZARRS = "zarr.buffer.cpu.NDBuffer"


def measure(path: Path, rounds: int) -> dict[str, float]:
    """Median seconds of a whole read per variant."""
    aligned = zarr.config.get("ndbuffer")
    z = zarr.open_array(str(path), mode="r")
    api = cuzarr.open(str(path), "r", settings=cuzarr.Settings(threads=2, strict=True))
    variants = {"zarr's ndbuffer": ZARRS, "AlignedNDBuffer": aligned}
    times: dict[str, list[float]] = {name: [] for name in [*variants, "explicit API"]}
    for value in variants.values():  # warm both, and the API
        zarr.config.set({"ndbuffer": value})
        z[...]
    api[...]
    for rep in range(rounds):
        names = list(variants) if rep % 2 == 0 else list(variants)[::-1]
        for name in names:
            zarr.config.set({"ndbuffer": variants[name]})
            gc.collect()
            start = time.perf_counter()
            out = z[...]
            times[name].append(time.perf_counter() - start)
            del out
        gc.collect()
        start = time.perf_counter()
        out = api[...]
        times["explicit API"].append(time.perf_counter() - start)
        del out
    zarr.config.set({"ndbuffer": aligned})
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    """Measure each dataset named on the command line and print one line for each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="bench.datasets' folder")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("datasets", nargs="+", help="dataset keys (a, b, ...)")
    args = parser.parse_args()
    cuzarr.configure(threads=2, strict=True)
    zarr.config.set({"threading.max_workers": 2})
    blosc.use_threads = False  # one concurrency budget: the engine's two threads
    got = zarr.config.get("ndbuffer")
    if got != "cuzarr.zarr_buffers.AlignedNDBuffer":
        raise SystemExit(f"configure() did not set the aligned buffer (ndbuffer: {got})")
    for key in args.datasets:
        med = measure(args.data / f"{key}.zarr", args.rounds)
        shown = "  ".join(f"{name}: {s * 1e3:.1f}" for name, s in med.items())
        speedup = med["zarr's ndbuffer"] / med["AlignedNDBuffer"]
        print(f"({key}) {shown}  speed-up {speedup:.2f}x")


if __name__ == "__main__":
    main()
