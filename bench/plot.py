"""Bar chart of cuzarr's throughput over the best peer's, from a bench.compare results file.

``python -m bench.plot [RESULTS.json] [-o docs/bench.png]``; by default the newest full (not
``--quick``) run in bench/results. One group of bars per dataset x workload at the largest
thread count of the run: cuzarr through zarr and cuzarr's explicit API, each over the fastest of
zarr, zarr-fused, zarrs-python and TensorStore on that cell. Cells without a verified number are
left empty.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.matrix import CUZARR_ENGINES, REPO, RESULTS_DIR
from bench.report import best_peer, cell_speed, index_results


def latest_results(folder: Path = RESULTS_DIR) -> Path:
    """The newest results file of a full run (quick runs are skipped)."""
    runs = []
    for path in folder.glob("*.json"):
        doc = json.loads(path.read_text())
        if "dataset_specs" not in doc:  # another harness's results
            continue
        if not doc["args"]["quick"]:
            runs.append((doc.get("created", ""), path))
    if not runs:
        raise SystemExit(f"no full-run results in {folder}; run python -m bench.compare first")
    return max(runs)[1]


def ratios(doc: dict[str, Any]) -> tuple[list[str], dict[str, list[float | None]]]:
    """Cell labels and, per cuzarr engine, its ratio to the best peer (``None``: no number)."""
    idx = index_results(doc["results"])
    threads = max(doc["args"]["threads"])
    labels: list[str] = []
    values: dict[str, list[float | None]] = {e: [] for e in CUZARR_ENGINES}
    for key in doc["args"]["datasets"]:
        for workload in doc["args"]["workloads"]:
            peer = best_peer(idx, threads, key, workload)
            labels.append(f"({key}) {workload}")
            for e in CUZARR_ENGINES:
                s = cell_speed(idx, e, threads, key, workload)
                values[e].append(None if s is None or peer is None else s / peer[1])
    return labels, values


def plot(doc: dict[str, Any], out: Path) -> Path:
    """Draw the chart of ``doc`` into ``out`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, values = ratios(doc)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.45 * len(labels) + 2), 4.8), layout="constrained")
    width = 0.8 / len(values)
    for i, (engine, vals) in enumerate(values.items()):
        xs = [j + (i - (len(values) - 1) / 2) * width for j in range(len(labels))]
        ax.bar(xs, [0.0 if v is None else v for v in vals], width, label=engine)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("throughput / best peer")
    env = doc["environment"]
    ax.set_title(
        f"cuzarr vs best of zarr, zarr-fused, zarrs, TensorStore; size {doc['args']['size']}, "
        f"{max(doc['args']['threads'])} threads, {env.get('cpus_usable')} CPUs "
        f"({doc['name']})",
        fontsize=9,
    )
    ax.legend()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.plot", description=__doc__)
    p.add_argument("results", nargs="?", type=Path, help="a results JSON (newest full run)")
    p.add_argument("-o", "--out", type=Path, default=REPO / "docs" / "bench.png")
    args = p.parse_args(argv)
    path = args.results or latest_results()
    print(plot(json.loads(path.read_text()), args.out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
