"""The results document's environment, the issues' targets, and the Markdown report."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path
from typing import Any

from bench import drift, interleave
from bench.datasets import datasets_for
from bench.matrix import (
    ALL_DATASET_KEYS,
    CUZARR_ENGINES,
    ENGINES,
    FLOOR,
    FLOOR_WORKLOADS,
    PARTIAL_REPEATS,
    PEERS,
    THREAD_CONTROLS,
    ZARR_OWN,
)


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


def index_results(
    results: list[dict[str, Any]],
) -> dict[tuple[str, int, str, str], dict[str, Any]]:
    """Cells by ``(engine, threads, dataset, workload)``."""
    return {(c["engine"], c["threads"], c["dataset"], c["workload"]): c for c in results}


def cell_speed(
    idx: dict[tuple[str, int, str, str], dict[str, Any]],
    engine: str,
    threads: int,
    key: str,
    workload: str,
) -> float | None:
    """A verified cell's MB/s (``None`` if it was not measured or failed): :func:`_measured`."""
    cell = _measured(idx.get((engine, threads, key, workload)))
    if cell is None:
        return None
    speed: float = cell["mb_per_s"]
    return speed


def _measured(cell: dict[str, Any] | None) -> dict[str, Any] | None:
    """``cell`` where it has a number: verified, or ``zarr-own``'s (never verified,
    bench/zarr_own.py) where it did not fail; else ``None``."""
    if cell is None or not (cell["verified"] or (cell["engine"] == ZARR_OWN and not cell["error"])):
        return None
    return cell


def best_peer(
    idx: dict[tuple[str, int, str, str], dict[str, Any]], threads: int, key: str, workload: str
) -> tuple[str, float] | None:
    """The fastest verified peer on a cell, ``(engine, MB/s)``."""
    speeds = [
        (p, s) for p in PEERS if (s := cell_speed(idx, p, threads, key, workload)) is not None
    ]
    return max(speeds, key=lambda x: x[1]) if speeds else None


def evaluate_targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Check the issue's targets against the results (at the largest thread count run).

    Each target is evaluated for both cuzarr engines except where the issue names one
    (chunk-by-chunk reads: the explicit API). ``measured`` is ``None`` when a needed cell is
    missing or failed; ``met`` is then ``None`` too.
    """
    idx = index_results(doc["results"])
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
        mine = cell_speed(idx, engine, threads, key, workload)
        peer = best_peer(idx, threads, key, workload)
        return None if mine is None or peer is None else mine / peer[1]

    def ratio_to(
        engine: str, other: str, key: str, workload: str, t: int = threads
    ) -> float | None:
        mine = cell_speed(idx, engine, t, key, workload)
        ref = cell_speed(idx, other, t, key, workload)
        return None if mine is None or ref is None else mine / ref

    for engine in CUZARR_ENGINES:
        for key in ALL_DATASET_KEYS:
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
        for key in ALL_DATASET_KEYS:
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
            one = cell_speed(idx, engine, 1, "a", "read_all")
            two = cell_speed(idx, engine, 2, "a", "read_all")
            add(
                "scaling",
                "read all, 2 threads >= 1.8x 1 thread",
                engine,
                "a",
                None if one is None or two is None else two / one,
                1.8,
            )
    for key in ALL_DATASET_KEYS:
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


def format_reporting(before: dict[str, int] | None, during: dict[str, int] | None) -> str:
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


def _median_ms(cell: dict[str, Any] | None) -> float | None:
    """A cell's time in ms (the median over rounds), where it has a number (:func:`_measured`)."""
    cell = _measured(cell)
    return None if cell is None else 1e3 * float(cell.get("median_seconds", cell["best_seconds"]))


def _own_time_table(
    doc: dict[str, Any], idx: dict[tuple[str, int, str, str], dict[str, Any]], threads: int
) -> list[str]:
    """What zarr's own work leaves to a pipeline plugged into it, cell by cell."""
    lines = [
        "",
        f"## zarr's own time ({threads} thread(s))",
        "",
        f"`{ZARR_OWN}`: zarr's API with a pipeline that takes its batch and does nothing "
        "(bench/zarr_own.py): what every pipeline through zarr pays on top of its own work. "
        "`left` = the best peer's time - zarr's own: a pipeline meets `>= 1.0x the best peer` "
        "through zarr only if its own work fits in it; cuzarr-api's whole call (its own indexer "
        "and output included) shows what cuzarr's engine needs. Times: the median over rounds "
        "of the cell as timed (read_chunks: the loop over every chunk).",
        "",
        "| dataset | workload | zarr's own ms | best peer ms | own / best peer | left ms | "
        "cuzarr (through zarr) ms | cuzarr-api ms |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def ms(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3g}"

    for key in doc["args"]["datasets"]:
        for workload in doc["args"]["workloads"]:
            times = {
                e: _median_ms(idx.get((e, threads, key, workload)))
                for e in (ZARR_OWN, *CUZARR_ENGINES, *PEERS)
            }
            own = times[ZARR_OWN]
            peer = best_peer(idx, threads, key, workload)
            peer_ms = None if peer is None else times[peer[0]]
            share = left = None
            if own is not None and peer_ms is not None:
                share, left = own / peer_ms, peer_ms - own
            lines.append(
                f"| ({key}) | {workload} | {ms(own)} | "
                + ("n/a" if peer is None else f"{ms(peer_ms)} ({peer[0]})")
                + (" | n/a | " if share is None else f" | {100 * share:.0f} % | ")
                + ("none" if left is not None and left <= 0 else ms(left))
                + f" | {ms(times['cuzarr'])} | {ms(times['cuzarr-api'])} |"
            )
    return lines


def _drift_table(samples: list[dict[str, Any]]) -> list[str]:
    """The machine probe over the run (bench/drift.py), each timing also as the start's speed."""
    lines = [
        "",
        "## The machine over the run",
        "",
        "One fixed probe, single-threaded, in a fresh process (no engine, no worker history: "
        "bench/drift.py), at the start and after every dataset: a 1 MiB zstd frame decoded "
        "(CPU), 64 MiB of fresh memory written (page faults), 64 MiB copied (memory "
        "bandwidth), each the best of a few. In brackets the speed relative to the start "
        "(below 1.00: the machine was slower than at the start). The rounds interleave the "
        "engines, so a slow machine slows every engine of the cells measured then, though "
        "not necessarily alike (an engine that faults in more fresh memory loses more when "
        "the fresh-memory probe is slow); absolute speeds and the per-chunk target "
        "((time - floor) / chunks) move with it.",
        "",
        "| when | minutes | load | decode ms | fresh ms | copy ms |",
        "|---|---|---|---|---|---|",
    ]
    first = next((s for s in samples if "error" not in s), None)
    for s in samples:
        if "error" in s:
            lines.append(f"| {s['label']} | {s['minutes']} | {s['load']} | {s['error']} | | |")
            continue
        cells = []
        for field in drift.PROBE_FIELDS:
            speed = "" if first is None else f" ({first[field] / s[field]:.2f})"
            cells.append(f"{s[field]:.3g}{speed}")
        lines.append(f"| {s['label']} | {s['minutes']} | {s['load']} | " + " | ".join(cells) + " |")
    return lines


def _ratio_table(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown rows of per-round ratios: min / median / max per engine and cell."""
    lines = [
        "| dataset | workload | engine | min | median | max |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| ({rr['dataset']}) | {rr['workload']} | {rr['engine']} | "
        f"{rr['min']:.2f}x | {rr['median']:.2f}x | {rr['max']:.2f}x |"
        for rr in rows
    ]
    return lines


def format_markdown(doc: dict[str, Any]) -> str:
    """The results as markdown: a header, one table per thread count, targets, peak RSS."""
    env = doc["environment"]
    idx = index_results(doc["results"])
    # zarr-own's speeds (a pipeline that does nothing) are no engine's: its own section only
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
        f"{format_reporting(doc.get('page_reporting_before'), doc.get('page_reporting_during'))}.",
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
                    s = cell_speed(idx, e, threads, key, workload)
                    row.append(
                        ""
                        if e == FLOOR and workload not in FLOOR_WORKLOADS
                        else ("n/a" if s is None else f"{s:.0f}")
                    )
                peer = best_peer(idx, threads, key, workload)
                for e in CUZARR_ENGINES:
                    s = cell_speed(idx, e, threads, key, workload)
                    row.append(
                        "n/a" if s is None or peer is None else f"{s / peer[1]:.2f}x ({peer[0]})"
                    )
                s = cell_speed(idx, "cuzarr", threads, key, workload)
                f = cell_speed(idx, FLOOR, threads, key, workload)
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
    ratios = [rr for rr in doc.get("round_ratios", []) if rr["threads"] == top]
    best = [rr for rr in ratios if rr.get("statistic", "best") == "best"]
    typical = [rr for rr in ratios if rr.get("statistic") == "median"]
    if best:
        lines += [
            "",
            f"## Ratios to the best peer over rounds ({top} thread(s))",
            "",
            "Each round's ratio uses that round's times of every engine (the best peer of "
            "that round); min / median / max over rounds.",
            "",
        ]
        lines += _ratio_table(best)
    if typical:
        lines += [
            "",
            f"## Write partial, the median call ({top} thread(s))",
            "",
            "As above, but each engine's time in a round is the median of its calls in that "
            "round, not the best: what a typical call costs (the headline and the targets use "
            "the best call).",
            "",
        ]
        lines += _ratio_table(typical)
    if ZARR_OWN in doc["args"]["engines"]:
        lines += _own_time_table(doc, idx, top)
    if doc.get("drift"):
        lines += _drift_table(doc["drift"])
    errors = [c for c in doc["results"] if c["error"]]
    if errors:
        lines += ["", "## Cells without a number", ""]
        lines += [
            f"- {c['engine']} threads={c['threads']} ({c['dataset']}) {c['workload']}: {c['error']}"
            for c in errors
        ]
    lines += ["", "## Thread limits", ""]
    lines += [
        f"- {k}: {v}"
        for k, v in THREAD_CONTROLS.items()
        if k != ZARR_OWN or ZARR_OWN in doc["args"]["engines"]
    ]
    return "\n".join(lines) + "\n"
