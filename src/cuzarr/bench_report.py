"""What a ``cuzarr bench`` run measured, and its rendering: measurements, report, environment."""

from __future__ import annotations

import importlib.metadata
import math
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["BASELINE_NAME", "BenchReport", "Measurement", "environment_info", "format_report"]

Operation = Literal["read", "write"]
#: The engine ratios are taken against (zarr's default pipeline).
BASELINE_NAME = "zarr"


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """Timings of one engine on one workload.

    Attributes
    ----------
    engine : str
        Engine name.
    pipeline : str
        The pipeline class zarr built, as ``module.qualname``.
    layout : str
        Layout description.
    operation : {"read", "write"}
        Whole-array read or write.
    nbytes : int
        Decoded bytes moved per repeat.
    seconds : tuple of float
        Wall time of each repeat.
    """

    engine: str
    pipeline: str
    layout: str
    operation: Operation
    nbytes: int
    seconds: tuple[float, ...]

    @property
    def best_seconds(self) -> float:
        """Fastest repeat."""
        return min(self.seconds)

    @property
    def mb_per_s(self) -> float:
        """Throughput of the fastest repeat in MB/s (decoded bytes, 1 MB = 10**6 bytes)."""
        return self.nbytes / 1e6 / max(self.best_seconds, 1e-9)


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchReport:
    """Everything one benchmark run measured.

    Attributes
    ----------
    dataset : dict
        What was read and written (path or ``None``, shape, dtype, nbytes, generated or not).
    measurements : tuple of Measurement
        One per engine and workload.
    repeats : int
        Repeats per measurement.
    threads : int or None
        Thread setting passed to the engines (``None``: their defaults).
    device : {"auto", "cpu", "gpu"}
        Where cuzarr's engine decoded and encoded.
    verified : bool
        Every read and every written array matched the expected data.
    cuzarr_stats : dict
        ``cuzarr.stats()`` counters accumulated while cuzarr ran.
    environment : dict
        Versions, Python, CPU count, git commit.
    """

    dataset: dict[str, Any]
    measurements: tuple[Measurement, ...]
    repeats: int
    threads: int | None
    device: str
    verified: bool
    cuzarr_stats: dict[str, int]
    environment: dict[str, Any]

    def ratio(self, m: Measurement) -> float | None:
        """Throughput of ``m`` over the baseline engine's on the same workload."""
        for b in self.measurements:
            if (b.engine, b.layout, b.operation) == (BASELINE_NAME, m.layout, m.operation):
                return m.mb_per_s / b.mb_per_s
        return None

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict of the report."""
        return {
            "dataset": self.dataset,
            "repeats": self.repeats,
            "threads": self.threads,
            "device": self.device,
            "verified": self.verified,
            "cuzarr_stats": self.cuzarr_stats,
            "environment": self.environment,
            "results": [
                {
                    "engine": m.engine,
                    "pipeline": m.pipeline,
                    "layout": m.layout,
                    "operation": m.operation,
                    "nbytes": m.nbytes,
                    "seconds": list(m.seconds),
                    "best_seconds": m.best_seconds,
                    "mb_per_s": m.mb_per_s,
                    "ratio_to_zarr": self.ratio(m),
                }
                for m in self.measurements
            ],
        }


def _version(dist: str) -> str | None:
    """``dist``'s installed version; cuzarr's own from the package when run from a source tree."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        if dist == "cuzarr":
            from cuzarr import __version__

            return __version__
        return None


def _git(*args: str) -> str | None:
    here = Path(__file__).resolve().parent
    try:
        done = subprocess.run(
            ["git", "-C", str(here), *args], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def environment_info() -> dict[str, Any]:
    """Describe the machine and software a benchmark ran on.

    Returns
    -------
    dict
        Versions of cuzarr, zarr, numcodecs and numpy; Python version and implementation;
        platform; CPU counts; the git commit of cuzarr's source tree (``None`` outside a
        checkout) and whether it had uncommitted changes.
    """
    here = Path(__file__).resolve()
    top = _git("rev-parse", "--show-toplevel")
    # Only a checkout of cuzarr itself counts (not some repository an install lies inside).
    ours = top is not None and (Path(top) / "src" / "cuzarr" / here.name).resolve() == here
    commit = _git("rev-parse", "HEAD") if ours else None
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    affinity = getattr(os, "sched_getaffinity", None)
    return {
        "versions": {d: _version(d) for d in ("cuzarr", "zarr", "numcodecs", "numpy")},
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(affinity(0)) if affinity is not None else os.cpu_count(),
        "git_commit": commit or None,
        "git_dirty": bool(status) if commit else None,
    }


def format_report(report: BenchReport) -> str:
    """Render a report as a text table and a one-line summary.

    Parameters
    ----------
    report : BenchReport
        What to render.

    Returns
    -------
    str
        The table (MB/s of decoded bytes, best of the repeats, and the ratio to zarr's default
        pipeline) followed by a summary of cuzarr's ratios.
    """
    ds = report.dataset
    env = report.environment
    head = (
        f"{'x'.join(str(s) for s in ds['shape'])} {ds['dtype']} ({ds['nbytes'] / 1e6:.1f} MB), "
        f"best of {report.repeats}, threads={report.threads or 'default'}, "
        f"device={report.device}, "
        f"{env['cpus_usable']} CPUs, Python {env['python']}, "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    )
    rows = [("workload", "engine", "MB/s", "vs zarr")]
    for m in report.measurements:
        ratio = report.ratio(m)
        rows.append(
            (
                f"{m.operation} all, {m.layout}",
                m.engine,
                f"{m.mb_per_s:.0f}",
                "" if ratio is None else f"{ratio:.2f}x",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [head, ""]
    for i, r in enumerate(rows):
        lines.append(
            f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:>{widths[3]}}"
        )
        if i == 0:
            lines.append("-" * (sum(widths) + 6))
    lines.append("")
    lines.append(_summary(report))
    return "\n".join(lines)


def _summary(report: BenchReport) -> str:
    ratios = [
        r
        for m in report.measurements
        if m.engine == "cuzarr" and (r := report.ratio(m)) is not None
    ]
    if not ratios:
        return "Summary: cuzarr was not measured."
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    fallbacks = sum(v for k, v in report.cuzarr_stats.items() if k.startswith("fallback_"))
    note = "" if not fallbacks else f"; {fallbacks} fallbacks to zarr's pipeline (see stats)"
    return (
        f"Summary: cuzarr ran at {geo:.2f}x zarr's default pipeline (geometric mean of "
        f"{len(ratios)} workloads, range {min(ratios):.2f}x-{max(ratios):.2f}x); "
        f"all data verified{note}."
    )

