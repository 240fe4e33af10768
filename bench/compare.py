"""Compare cuzarr with its peers and with the codec floor, on the same data, in one run.

Run ``python -m bench.compare --help`` from the repository root (or ``cuzarr bench --compare
...`` from a checkout). What it measures and how is documented in ``bench/README.md``.

Structure: the parent process generates the datasets once (Zarr v3 arrays written by zarr's
default pipeline, plus the expected data as ``.npy`` files), then runs every engine at every
thread count in one persistent worker subprocess (``--serve``), so each engine's thread pools
are sized from a fresh configuration and no engine's pools or caches affect another's; the
engines take turns cell by cell, in rotating order (``bench/interleave.py``). Peak RSS of a
whole-array read runs in yet another subprocess per engine and dataset (``--rss``). Every cell
is verified against the expected data; a cell that fails verification has no number. The
pieces live beside this file: ``matrix``, ``datasets``, ``engines``, ``cells``, ``floor``,
``interleave``, ``drift`` (the machine's speed over the run), ``report``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import drift, interleave
from bench.cells import Mismatch, check_equal, measure
from bench.datasets import datasets_for, generate
from bench.engines import Unsupported, make_adapter
from bench.floor import measure_floor
from bench.matrix import (
    ALL_DATASET_KEYS,
    CUZARR_ENGINES,
    DATASET_KEYS,
    ENGINES,
    FLOOR,
    FLOOR_WORKLOADS,
    MULTI_CALL_WORKLOADS,
    OPTIONAL_ENGINES,
    PEERS,
    REPO,
    RESULTS_DIR,
    THREAD_CONTROLS,
    WORKLOADS,
    ZARR_OWN,
)
from bench.report import environment, evaluate_targets, file_system_of, format_markdown

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
        check_equal(got, ds.expected(Path(job["data"])), "rss")
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
        type=_csv(ALL_DATASET_KEYS),
        default=list(DATASET_KEYS),
        help="subset of a..k (a..h; i,j,k are the independent check, size a multiple of 8)",
    )
    p.add_argument(
        "--engines",
        type=_csv(ENGINES + OPTIONAL_ENGINES),
        default=list(ENGINES),
        help=f"subset of {','.join(ENGINES)} (all), or with {ZARR_OWN} (zarr's API with a "
        "pipeline that does nothing: zarr's own time, bench/zarr_own.py); the floor always runs",
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
        "--no-drift",
        action="store_true",
        help="skip the machine probe (bench/drift.py) at the start and after every dataset",
    )
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


def _probe_drift(
    doc: dict[str, Any], args: argparse.Namespace, label: str, started: float
) -> None:
    """Time the machine probe in a fresh process (bench/drift.py) and record it as ``label``
    with the minutes since ``started`` (a ``time.monotonic()``)."""
    if args.no_drift:
        return
    sample = drift.probe_in_subprocess(REPO)
    sample["label"] = label
    sample["minutes"] = round((time.monotonic() - started) / 60, 2)
    sample["load"] = round(os.getloadavg()[0], 2)
    doc.setdefault("drift", []).append(sample)


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
    started: float,
) -> None:
    """Every cell in ``rounds`` rounds of all engines, rotating the order (bench/interleave.py);
    the machine probe after every dataset (:func:`_probe_drift`)."""
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
                if workload in MULTI_CALL_WORKLOADS:
                    doc["round_ratios"] += interleave.round_ratios(
                        per_engine, CUZARR_ENGINES, PEERS, statistic="median"
                    )
            _probe_drift(doc, args, f"threads={threads} after ({key})", started)
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
    if missing := [k for k in args.datasets if k not in sets]:
        raise SystemExit(
            f"--datasets {','.join(missing)}: the independent check's datasets need --size a "
            f"multiple of 8, got {size}"
        )
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
            "drift": not args.no_drift,
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
        started = time.monotonic()
        _probe_drift(doc, args, "start", started)
        for n in threads:
            _run_interleaved(
                doc, args, engines, n, size, rounds, repeats, data_dir, scratch, started
            )
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
                if engine != ZARR_OWN  # its reads return garbage by design
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
