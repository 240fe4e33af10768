"""Drift-proof measurement for ``bench.compare``: persistent workers, interleaved rounds.

Running engine after engine bills the engines measured late for any drift of a shared
machine's speed during the run. Here every engine at a thread count has one persistent worker
process (its thread limits set once, as before), and each cell (dataset x workload) is
measured in ``rounds`` rounds; a round asks every engine once, in an order rotated by one
engine per round, so every engine sees the same machine. Per engine a cell reports every
round's time, the best and the median; the headline MB/s (tables and targets) is the median
over rounds. Per ratio to the best peer the report gives the min, median and max over rounds
(each round's ratio uses that round's times). Load averages and CPU steal time are recorded
before and after.

Protocol: the orchestrator writes one JSON command per line to a worker's stdin
(``{"cmd": "cell", ...}``, ``{"cmd": "stats"}``, ``{"cmd": "exit"}``) and reads one JSON line
back from its stdout; anything else an engine prints goes to stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "Worker",
    "cpu_times",
    "hold_freed_memory",
    "merge_rounds",
    "page_reporting",
    "round_ratios",
    "serve",
]

#: Linux's free page reporting (virtio-balloon): freed guest memory is handed back to the
#: host, and touching it again costs a host fault per page. Measured on the 2-core machine:
#: reading (g) whole (a 256 MiB output) 2 s after memory was freed took 543-939 ms, against
#: 107-192 ms back to back (bench/results/round3d-c-batch-read-and-disk.md), so an engine's
#: time depended on how long before it the machine had freed memory (the engine order) more
#: than on the engine.
PAGE_REPORTING = Path("/sys/module/page_reporting/parameters")
#: Blocks of at least 2^order pages are reported; no free block is that large (x86-64's
#: largest buddy order is 10), so none is reported.
NO_REPORTING_ORDER = 11


def cpu_times() -> dict[str, int] | None:
    """Aggregate CPU jiffies from ``/proc/stat`` (``steal``: time a hypervisor took)."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return {n: int(v) for n, v in zip(names, first[1:], strict=False)}


def page_reporting() -> dict[str, int] | None:
    """The free page reporting state: ``order`` and ``reported_kib`` so far (``None``: absent)."""
    try:
        order = int((PAGE_REPORTING / "page_reporting_order").read_text())
    except (OSError, ValueError):
        return None
    try:
        reported = int((PAGE_REPORTING / "reported_kib").read_text())
    except (OSError, ValueError):
        reported = -1  # the stock kernel does not count reported memory
    return {"order": order, "reported_kib": reported}


@contextlib.contextmanager
def hold_freed_memory() -> Iterator[int | None]:
    """Turn free page reporting off for the block (needs root); yield the order it had.

    Yields ``None`` (and changes nothing) where the kernel has no free page reporting. The
    previous order is restored on exit, whatever happens inside.

    Raises
    ------
    SystemExit
        When reporting exists but its setting cannot be written (not root).
    """
    state = page_reporting()
    if state is None:
        yield None
        return
    path = PAGE_REPORTING / "page_reporting_order"
    try:
        path.write_text(f"{NO_REPORTING_ORDER}\n")
    except OSError as exc:
        raise SystemExit(f"--hold-freed-memory: cannot write {path} ({exc}); run as root") from exc
    try:
        yield state["order"]
    finally:
        path.write_text(f"{state['order']}\n")


def steal_fraction(before: dict[str, int] | None, after: dict[str, int] | None) -> float | None:
    """Share of CPU time stolen between two :func:`cpu_times` snapshots."""
    if not before or not after:
        return None
    total = sum(after.values()) - sum(before.values())
    return (after.get("steal", 0) - before.get("steal", 0)) / total if total > 0 else None


def serve(
    job: dict[str, Any],
    run_cell: Callable[[str, str, int], dict[str, Any]],
    stats: Callable[[], dict[str, int] | None],
) -> None:
    """Body of a ``--serve`` worker: answer commands until ``exit`` or end of input."""
    proto: TextIO = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints of engines go to stderr, not into the protocol
    sys.stdout = sys.stderr
    proto.write(json.dumps({"ready": job["engine"]}) + "\n")
    proto.flush()
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "cell":
            out: Any = run_cell(cmd["dataset"], cmd["workload"], int(cmd["repeats"]))
        elif cmd["cmd"] == "stats":
            out = {"cuzarr_stats": stats()}
        else:
            break
        proto.write(json.dumps(out) + "\n")
        proto.flush()


class Worker:
    """One persistent ``python -m bench.compare --serve`` process."""

    def __init__(self, job: dict[str, Any], repo: Path) -> None:
        env = dict(os.environ)
        env["RAYON_NUM_THREADS"] = str(job["threads"])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
        self.engine = job["engine"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.compare", "--serve", json.dumps(job)],
            cwd=repo,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._read()  # {"ready": ...}: imports and adapters are paid for before timing

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise RuntimeError(f"worker {self.engine} exited with {code}")
        out: dict[str, Any] = json.loads(line)
        return out

    def ask(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Send one command, wait for its answer."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        """Ask the worker to exit and wait for it."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"cmd": "exit"}) + "\n")
                self.proc.stdin.close()
            except OSError:
                pass
            self.proc.wait(timeout=60)


def merge_rounds(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One engine's cell over its rounds: every round's time, best, median (the headline)."""
    failed = [c for c in cells if c["error"]]
    if failed:
        return failed[0]
    merged = dict(cells[0])
    times = [float(c["best_seconds"]) for c in cells]
    merged["seconds"] = times
    merged["best_seconds"] = min(times)
    merged["median_seconds"] = statistics.median(times)
    merged["mb_per_s"] = merged["nbytes"] / 1e6 / max(merged["median_seconds"], 1e-9)
    merged["mb_per_s_best"] = merged["nbytes"] / 1e6 / max(merged["best_seconds"], 1e-9)
    merged["rounds"] = len(cells)
    calls = [_calls(c) for c in cells]
    merged["call_seconds"] = calls
    merged["median_call_seconds"] = statistics.median(t for r in calls for t in r)
    return merged


def _calls(cell: dict[str, Any]) -> list[float]:
    """One round's call times of an engine (a cell without them: its best one)."""
    return [float(t) for t in cell.get("seconds", [cell["best_seconds"]])]


def _round_time(cell: dict[str, Any], statistic: str) -> float:
    """A round's time of one engine: its best call, or the median of its calls."""
    if statistic == "best":
        return float(cell["best_seconds"])
    if statistic == "median":
        return statistics.median(_calls(cell))
    raise ValueError(f"statistic must be 'best' or 'median', not {statistic!r}")


def round_ratios(
    per_engine: dict[str, list[dict[str, Any]]],
    engines: Sequence[str],
    peers: Sequence[str],
    statistic: str = "best",
) -> list[dict[str, Any]]:
    """Per engine of ``engines``: its speed over the best peer's, round by round.

    ``statistic`` picks each engine's time in a round: ``"best"`` (its best call, the
    headline) or ``"median"`` (the median of its calls, for cells timed several times a
    round: what a typical call costs, which a best-of-N hides).
    """
    out: list[dict[str, Any]] = []
    for engine in engines:
        cells = per_engine.get(engine)
        if not cells or any(c["error"] for c in cells):
            continue
        ratios = []
        for r, cell in enumerate(cells):
            peer_times = [
                _round_time(per_engine[p][r], statistic)
                for p in peers
                if p in per_engine and not per_engine[p][r]["error"]
            ]
            if peer_times:
                ratios.append(min(peer_times) / _round_time(cell, statistic))
        if ratios:
            c0 = cells[0]
            out.append(
                {
                    "engine": engine,
                    "threads": c0["threads"],
                    "dataset": c0["dataset"],
                    "workload": c0["workload"],
                    "vs": "best peer",
                    "statistic": statistic,
                    "ratios": ratios,
                    "min": min(ratios),
                    "median": statistics.median(ratios),
                    "max": max(ratios),
                }
            )
    return out
