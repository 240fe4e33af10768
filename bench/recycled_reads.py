"""Whole reads into recycled memory against new memory, paired in one process.

In one process per dataset: the array read whole through zarr (``cuzarr.configure``, 2
threads, strict) and through the explicit API, each with the process-wide pool of recycled
memory (:mod:`cuzarr.backends.recycle`) on (its default limit) and off (a pool of 0 bytes),
in alternating order each round, every result dropped before the next read (as a loop over
arrays does, and the benchmark's read all); the medians and the speed-up. Usage::

    .venv/bin/python -m bench.recycled_reads --data /dev/shm/data512 a b c [--rounds 8]

bench/results/probe-512-session46.md holds its numbers.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path
from typing import Any

import zarr
from numcodecs import blosc

import cuzarr
from cuzarr.backends import recycle


def measure(path: Path, rounds: int) -> dict[str, float]:
    """Median seconds of a whole read per reader and pool."""
    pools = {"new memory": recycle.Pool(0), "recycled": recycle.Pool(recycle.limit())}
    z = zarr.open_array(str(path), mode="r")
    api = cuzarr.open(str(path), "r", settings=cuzarr.Settings(threads=2, strict=True))
    readers: dict[str, Any] = {"through zarr": z, "explicit API": api}
    times: dict[str, list[float]] = {f"{r}, {p}": [] for r in readers for p in pools}
    for reader in readers.values():  # warm both readers
        reader[...]
    for rep in range(rounds):
        order = list(pools) if rep % 2 == 0 else list(pools)[::-1]
        for name in order:
            recycle._POOL = pools[name]
            for label, reader in readers.items():
                out = reader[...]  # the pool's first read, untimed: it has nothing held yet
                del out
                gc.collect()
                start = time.perf_counter()
                out = reader[...]
                times[f"{label}, {name}"].append(time.perf_counter() - start)
                del out
    for pool in pools.values():
        pool.release()
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    """Measure each dataset named on the command line and print one line for each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="+", help="dataset keys (a, b, ...)")
    parser.add_argument("--data", type=Path, required=True, help="the generated datasets")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    blosc.set_nthreads(1)
    with cuzarr.configure(threads=2, strict=True):
        for key in args.datasets:
            med = measure(args.data / f"{key}.zarr", args.rounds)
            cells = []
            for reader in ("through zarr", "explicit API"):
                new, old = med[f"{reader}, recycled"], med[f"{reader}, new memory"]
                cells.append(f"{reader} {old * 1e3:7.1f} -> {new * 1e3:7.1f} ms ({old / new:.2f}x)")
            print(f"({key}) " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
