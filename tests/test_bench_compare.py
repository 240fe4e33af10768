"""bench/compare.py, the comparison harness: a --quick run end to end, and its pieces
(bench/datasets.py, engines.py, cells.py, floor.py, report.py).

bench/ is not part of the installed package: it is imported from the repository root.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import cells, datasets, engines, floor, matrix, report, zarr_own  # noqa: E402

QUICK_ENGINES = ("cuzarr", "cuzarr-api", "tensorstore")
QUICK_DATASETS = ("a", "b")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("results")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.compare",
            "--quick",
            "--datasets",
            ",".join(QUICK_DATASETS),
            "--engines",
            ",".join(QUICK_ENGINES),
            "--name",
            "t",
            "--out",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[bench.compare]" in done.stderr
    return json.loads((out / "t.json").read_text()), out


def test_quick_run_covers_every_cell_and_verifies(quick_run: tuple[dict[str, Any], Path]) -> None:
    doc, _ = quick_run
    assert doc["args"]["quick"] is True and doc["args"]["threads"] == [1]
    assert doc["verified"] is True
    # every worker made one untimed read of the first dataset before the timed cells
    assert doc["warm_up"] == [
        {"threads": 1, "cmd": "cell", "dataset": "a", "workload": "read_all", "repeats": 1}
    ]
    by_key = {(c["engine"], c["dataset"], c["workload"]): c for c in doc["results"]}
    expected = {(e, d, w) for e in QUICK_ENGINES for d in QUICK_DATASETS for w in matrix.WORKLOADS}
    expected |= {("floor", d, w) for d in QUICK_DATASETS for w in ("read_all", "write_all")}
    assert set(by_key) == expected
    for key, c in by_key.items():
        # every engine named here supports every case: each cell has a verified number
        assert c["error"] is None, (key, c["error"])
        assert c["verified"] is True and c["threads"] == 1
        assert len(c["seconds"]) == 1 and c["best_seconds"] == c["seconds"][0] > 0
        assert c["mb_per_s"] == pytest.approx(c["nbytes"] / 1e6 / c["best_seconds"])
    spec = doc["dataset_specs"]
    assert spec["a"]["shape"] == [64, 64, 64] and spec["b"]["shards"] == [64, 64, 64]
    # one call per (inner) chunk; the strided read returns every 4th plane
    assert by_key[("cuzarr-api", "b", "read_chunks")]["calls"] == 8
    assert by_key[("tensorstore", "a", "read_strided")]["nbytes"] == 16 * 64 * 64 * 2
    # the engines ran on what they claim
    assert by_key[("cuzarr", "a", "read_all")]["pipeline"] == "cuzarr.zarr_pipeline.Pipeline"
    assert by_key[("tensorstore", "a", "read_all")]["pipeline"].startswith("tensorstore")
    # cuzarr ran strict: its engine served reads and writes, nothing fell back
    for stats in doc["cuzarr_stats"].values():
        assert not any(v for k, v in stats.items() if k.startswith("fallback"))
    assert doc["cuzarr_stats"]["cuzarr/threads=1"]["engine_reads"] > 0


def test_quick_run_rss_targets_and_report(quick_run: tuple[dict[str, Any], Path]) -> None:
    doc, out = quick_run
    rss = {(r["engine"], r["dataset"]): r for r in doc["rss"]}
    assert set(rss) == {(e, d) for e in QUICK_ENGINES for d in QUICK_DATASETS}
    for r in rss.values():
        assert r["verified"] is True and r["error"] is None
        assert r["peak_bytes"] >= r["baseline_bytes"] > 0
        assert r["over_baseline_bytes"] == r["peak_bytes"] - r["baseline_bytes"]
    ids = {(t["id"], t["engine"], t["dataset"]) for t in doc["targets"]}
    assert ("read_all_vs_floor", "cuzarr", "a") in ids
    assert ("read_chunks_vs_tensorstore", "cuzarr-api", "b") in ids
    assert ("rss_read_all", "cuzarr-api", "b") in ids
    assert not any(t["dataset"] == "e" for t in doc["targets"])  # (e) was not run
    env = doc["environment"]
    assert env["versions"]["tensorstore"] and env["versions"]["zarrs"]
    assert env["cpu_count"] >= 1 and len(doc["load_before"]) == 3
    md = (out / "t.md").read_text()
    assert "| (a) 64^3 chunks, zstd(3) | read_all |" in md
    assert "## Targets" in md and "## Peak RSS" in md and "Load average" in md


def test_quick_run_probes_the_machine_after_every_dataset(
    quick_run: tuple[dict[str, Any], Path],
) -> None:
    """bench/drift.py: the probe ran in a fresh process at the start and after each dataset."""
    from bench import drift

    doc, out = quick_run
    samples = doc["drift"]
    assert [s["label"] for s in samples] == [
        "start",
        "threads=1 after (a)",
        "threads=1 after (b)",
    ]
    minutes = [s["minutes"] for s in samples]
    assert minutes == sorted(minutes) and minutes[0] >= 0
    for s in samples:
        assert "error" not in s, s
        assert all(0 < s[f] < 10_000 for f in drift.PROBE_FIELDS)
    md = (out / "t.md").read_text()
    assert "## The machine over the run" in md
    start = samples[0]
    row = (
        f"| start | {start['minutes']} | {start['load']} | {start['decode_ms']:.3g} (1.00) | "
        f"{start['fresh_ms']:.3g} (1.00) | {start['copy_ms']:.3g} (1.00) |"
    )
    assert row in md


def test_drift_table_gives_speeds_relative_to_the_start_and_names_failures() -> None:
    from bench.report import _drift_table

    samples = [
        {"label": "start", "minutes": 0.0, "load": 0.5, "decode_ms": 1.0, "fresh_ms": 10.0,
         "copy_ms": 8.0},
        {"label": "threads=2 after (a)", "minutes": 6.5, "load": 1.9,
         "error": "bench.drift exited with 1: MemoryError"},
        {"label": "threads=2 after (b)", "minutes": 12.0, "load": 2.0, "decode_ms": 1.25,
         "fresh_ms": 8.0, "copy_ms": 8.0},
    ]
    lines = _drift_table(samples)
    assert "| threads=2 after (b) | 12.0 | 2.0 | 1.25 (0.80) | 8 (1.25) | 8 (1.00) |" in lines
    assert "| threads=2 after (a) | 6.5 | 1.9 | bench.drift exited with 1: MemoryError | | |" in (
        lines
    )
    # A failed first probe: the next good one is the reference.
    lines = _drift_table(samples[1:])
    assert "| threads=2 after (b) | 12.0 | 2.0 | 1.25 (1.00) | 8 (1.00) | 8 (1.00) |" in lines


def test_drift_probe_in_a_subprocess_reports_a_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A probe that cannot run is recorded as an error naming the exit, not a crash."""
    from bench import drift

    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "__init__.py").write_text("")
    (tmp_path / "bench" / "drift.py").write_text("raise SystemExit('no probe here')\n")
    monkeypatch.setenv("PYTHONPATH", "")
    got = drift.probe_in_subprocess(tmp_path)
    assert got == {"error": "bench.drift exited with 1: no probe here"}


def test_datasets_match_the_issue_at_full_size() -> None:
    sets = datasets.datasets_for(512)
    assert sets["a"].shape == (512,) * 3 and sets["a"].chunks == (64,) * 3
    assert sets["b"].chunks == (32,) * 3 and sets["b"].shards == (256,) * 3
    assert (sets["c"].codec, sets["d"].codec) == ("blosc", "none")
    e = sets["e"]
    assert e.shape == (256,) * 3 and np.prod(e.chunks) * 2 == 8192 and e.nchunks == 16**3
    f = sets["f"]
    assert f.dtype == "float32" and f.chunks == (512, 512) and len(f.shape) == 2
    block, region = sets["b"].partial_block()
    assert block == (slice(0, 256),) * 3 and region == (slice(0, 128),) * 3
    g, h = sets["g"], sets["h"]  # the second issue's: small inner chunks, blosc without zstd
    assert g.chunks == (16,) * 3 and g.shards == (256,) * 3 and g.codec == "blosc-lz4"
    assert g.nchunks == 32**3 and h.chunks == (64,) * 3 and h.codec == "blosc-lz4"

def test_independent_check_datasets_at_full_size() -> None:
    sets = datasets.datasets_for(512)
    assert set(matrix.ALL_DATASET_KEYS) == set(sets)
    i, j, k = sets["i"], sets["j"], sets["k"]
    # (i), (k): the cube's values in 5-D and 4-D; (j) its own grid, with partial edge chunks.
    assert i.shape == (4, 2, 64, 512, 512) and i.nbytes == sets["a"].nbytes
    assert i.chunks == (1, 1, 16, 128, 128) and i.codec == "blosc-lz4" and i.source == "cube"
    assert j.shape == (128, 385, 768) and j.chunks == (16, 97, 192) and j.dtype == "float32"
    assert any(n % c for n, c in zip(j.shape, j.chunks, strict=True))
    assert k.shape == (8, 64, 512, 512) and k.shards == (1, 64, 256, 256)
    assert k.chunks == (1, 16, 32, 32) and k.codec == "zstd" and k.nchunks == 8192
    # Not in the default run; only where the cube's edge is a multiple of 8.
    assert "i" not in matrix.DATASET_KEYS and "i" not in datasets.datasets_for(36)


@pytest.mark.parametrize("size", [16, 32])
def test_independent_check_datasets_read_back_and_floor(tmp_path: Path, size: int) -> None:
    datasets.generate(tmp_path, size, ["i", "j", "k"], lambda _m: None)
    cube = np.load(tmp_path / "cube.npy")
    for key in ("i", "j", "k"):
        ds = datasets.datasets_for(size)[key]
        want = ds.expected(tmp_path)
        assert want.shape == ds.shape
        if ds.source == "cube":  # the cube's values, reshaped in C order
            assert np.array_equal(want.ravel(), cube.ravel())
        cells.check_equal(cells._zarr_default_read(tmp_path / f"{key}.zarr", Ellipsis), want, key)
        for kind in ("read_all", "write_all"):
            cell = floor.measure_floor(ds, kind, data_dir=tmp_path, repeats=1, threads=2)
            assert cell["error"] is None and cell["verified"] is True, (key, kind, cell)



def test_blosc_lz4_floor_and_small_zstd_floor(tmp_path: Path) -> None:
    datasets.generate(tmp_path, 32, ["g", "e"], lambda _m: None)
    for key in ("g", "e"):
        ds = datasets.datasets_for(32)[key]
        for kind in ("read_all", "write_all"):
            cell = floor.measure_floor(ds, kind, data_dir=tmp_path, repeats=1, threads=2)
            assert cell["error"] is None and cell["verified"] is True, (key, kind, cell)


def test_stored_chunks_and_floor_on_a_sharded_array(tmp_path: Path) -> None:
    datasets.generate(tmp_path, 64, ["b"], lambda _m: None)
    ds = datasets.datasets_for(64)["b"]
    chunks = floor._stored_chunks(ds, tmp_path / "b.zarr")
    assert len(chunks) == ds.nchunks == 8
    for kind in ("read_all", "write_all"):
        cell = floor.measure_floor(ds, kind, data_dir=tmp_path, repeats=2, threads=2)
        assert cell["error"] is None and cell["verified"] is True and len(cell["seconds"]) == 2


class _WrongEngine(engines.EngineAdapter):
    """Returns data off by one: the harness must refuse to report a number."""

    name = "wrong"

    def __init__(self, inner: engines.EngineAdapter) -> None:
        self.inner = inner

    def open(self, path: Path, writable: bool = False) -> Any:
        return self.inner.open(path, writable)

    def read(self, h: Any, sel: Any) -> np.ndarray:
        got = self.inner.read(h, sel).copy()
        got.flat[0] += 1
        return got

    def read_into(self, h: Any, sel: Any, out: np.ndarray) -> None:
        out[...] = self.read(h, sel)

    def write(self, h: Any, sel: Any, value: np.ndarray) -> None:
        bad = np.array(value)
        bad.flat[-1] += 1
        self.inner.write(h, sel, bad)


def test_wrong_data_gets_no_number(tmp_path: Path) -> None:
    data = tmp_path / "data"
    datasets.generate(data, 32, ["a"], lambda _m: None)
    ds = datasets.datasets_for(32)["a"]
    wrong = _WrongEngine(engines.CuzarrApiAdapter(threads=1))
    for workload in matrix.WORKLOADS:
        cell = cells.measure(
            wrong, ds, workload, data_dir=data, scratch=tmp_path, repeats=1, threads=1
        )
        assert cell["error"].startswith("WRONG DATA"), workload
        assert cell["mb_per_s"] is None and cell["verified"] is False


def _doc(speeds: dict[tuple[str, int, str, str], float], threads: list[int]) -> dict[str, Any]:
    results = [
        {
            "engine": e,
            "threads": t,
            "dataset": d,
            "workload": w,
            "mb_per_s": s,
            "best_seconds": 100.0 / s,
            "verified": True,
            "error": None,
        }
        for (e, t, d, w), s in speeds.items()
    ]
    return {"args": {"threads": threads, "size": 512}, "results": results, "rss": []}


def test_targets_use_the_best_peer_and_the_floor() -> None:
    speeds = {
        ("cuzarr", 2, "a", "read_all"): 300.0,
        ("zarr", 2, "a", "read_all"): 100.0,
        ("tensorstore", 2, "a", "read_all"): 250.0,  # the best peer: 300 / 250 = 1.2 >= 1.0
        ("cuzarr", 2, "b", "read_all"): 90.0,
        ("zarrs", 2, "b", "read_all"): 100.0,  # 0.9 < 1.0
        ("cuzarr", 2, "b", "write_partial"): 120.0,
        ("tensorstore", 2, "b", "write_partial"): 100.0,  # 1.2 >= 1.0
        ("floor", 2, "a", "read_all"): 360.0,  # 300 / 360 = 0.83 >= 0.8
        ("cuzarr", 1, "a", "read_all"): 160.0,  # 300 / 160 = 1.875 >= 1.8
        ("cuzarr-api", 2, "a", "read_chunks"): 230.0,
        ("tensorstore", 2, "a", "read_chunks"): 200.0,  # 1.15 < 1.2
    }
    targets = {
        (t["id"], t["engine"], t["dataset"]): t
        for t in report.evaluate_targets(_doc(speeds, [1, 2]))
    }
    t = targets[("read_all_vs_peer", "cuzarr", "a")]
    assert t["measured"] == pytest.approx(1.2) and t["met"] is True and t["threads"] == 2
    t = targets[("read_all_vs_peer", "cuzarr", "b")]
    assert t["measured"] == pytest.approx(0.9) and t["met"] is False
    t = targets[("write_partial_vs_peer", "cuzarr", "b")]
    assert t["measured"] == pytest.approx(1.2) and t["met"] is True
    t = targets[("read_all_vs_floor", "cuzarr", "a")]
    assert t["measured"] == pytest.approx(300 / 360) and t["met"] is True
    t = targets[("scaling", "cuzarr", "a")]
    assert t["measured"] == pytest.approx(1.875) and t["met"] is True
    t = targets[("read_chunks_vs_tensorstore", "cuzarr-api", "a")]
    assert t["measured"] == pytest.approx(1.15) and t["met"] is False
    # a cell that was not measured is unknown, never met
    assert targets[("read_all_vs_peer", "cuzarr-api", "a")]["met"] is None


def test_per_chunk_overhead_target() -> None:
    # (e) at 512: 4096 chunks; 100 / MB/s seconds each (see _doc)
    speeds = {
        ("cuzarr", 1, "e", "read_all"): 100.0 / 0.05,
        ("floor", 1, "e", "read_all"): 100.0 / 0.01,
    }
    targets = {(t["id"], t["engine"]): t for t in report.evaluate_targets(_doc(speeds, [1]))}
    t = targets[("per_chunk_overhead", "cuzarr")]
    assert t["measured"] == pytest.approx(0.04 / 4096 * 1e6) and t["met"] is True


def test_plot_writes_a_png(quick_run: tuple[dict[str, Any], Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from bench import plot

    doc, _ = quick_run
    labels, values = plot.ratios(doc)
    assert len(labels) == len(QUICK_DATASETS) * len(matrix.WORKLOADS)
    assert all(v is not None and v > 0 for v in values["cuzarr"])
    out = plot.plot(doc, tmp_path / "b.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_compare_forwards_and_explains(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cuzarr import cli

    done = subprocess.run(
        [sys.executable, "-m", "cuzarr", "bench", "--compare", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "--datasets" in done.stdout and "--quick" in done.stdout
    assert cli.main(["bench", "--json", "x.json", "--compare"]) == 2
    monkeypatch.setattr(cli, "_checkout_root", lambda: None)  # an installed package
    assert cli.main(["bench", "--compare", "--quick"]) == 2
    assert "python -m bench.compare" in capsys.readouterr().err


def test_interleaved_rounds_rotate_and_report_medians(tmp_path: Path) -> None:
    """Three rounds: every cell has a time per round and the headline is their median; per-round
    ratios to the best peer are reported (bench/interleave.py)."""
    from bench import interleave

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.compare",
            "--quick",
            "--rounds",
            "3",
            "--datasets",
            "a",
            "--engines",
            "cuzarr-api,zarr,zarr-own",
            "--workloads",
            "read_all,write_all,write_partial",
            "--no-rss",
            "--no-drift",
            "--scratch",
            str(tmp_path / "missing" / "scratch"),
            "--name",
            "r",
            "--out",
            str(tmp_path),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["args"]["rounds"] == 3
    assert doc["args"]["drift"] is False and "drift" not in doc  # --no-drift
    # --scratch names a folder that did not exist: made, written below, left empty.
    assert doc["scratch_dir"] == str(tmp_path / "missing" / "scratch")
    assert list((tmp_path / "missing" / "scratch").iterdir()) == []
    for c in doc["results"]:
        assert c["error"] is None and len(c["seconds"]) == 3
        assert c["best_seconds"] == min(c["seconds"])
        assert c["mb_per_s"] == pytest.approx(c["nbytes"] / 1e6 / sorted(c["seconds"])[1])
        # zarr-own (zarr with a pipeline that does nothing) is timed like the others, unchecked
        assert c["verified"] is (c["engine"] != "zarr-own")
    by_key = {(c["engine"], c["workload"]): c for c in doc["results"]}
    assert by_key[("zarr-own", "read_all")]["pipeline"] == "bench.zarr_own.NoOpPipeline"
    ratios = {(r["engine"], r["workload"], r["statistic"]): r for r in doc["round_ratios"]}
    rr = ratios[("cuzarr-api", "read_all", "best")]
    assert len(rr["ratios"]) == 3 and rr["min"] <= rr["median"] <= rr["max"]
    # zarr-own is never a peer: each round's ratio is to zarr, the one peer run
    mine, peer = by_key[("cuzarr-api", "read_all")], by_key[("zarr", "read_all")]
    assert rr["ratios"] == [p / m for p, m in zip(peer["seconds"], mine["seconds"], strict=True)]
    assert not any(r["engine"] == "zarr-own" for r in doc["round_ratios"])
    # write_partial is timed PARTIAL_REPEATS times a round: every call kept, and its ratios
    # reported for the median call as well; single-call workloads have no median-call row.
    for c in doc["results"]:
        calls = c["call_seconds"]
        per_round = matrix.PARTIAL_REPEATS if c["workload"] == "write_partial" else 1
        assert [len(r) for r in calls] == [per_round] * 3
        assert c["seconds"] == [min(r) for r in calls]
        assert c["median_call_seconds"] == statistics.median(t for r in calls for t in r)
    assert {k for k in ratios if k[2] == "median"} == {("cuzarr-api", "write_partial", "median")}
    md = (tmp_path / "r.md").read_text()
    assert "## Ratios to the best peer over rounds" in md
    assert "## Write partial, the median call" in md
    own = 1e3 * by_key[("zarr-own", "read_all")]["median_seconds"]
    peer_ms = 1e3 * peer["median_seconds"]
    assert "## zarr's own time (1 thread(s))" in md
    assert "## The machine over the run" not in md
    assert "| zarr-own |" not in md.split("## Targets")[0]  # no column of no-op speeds
    row = f"| (a) | read_all | {own:.3g} | {peer_ms:.3g} (zarr) | {100 * own / peer_ms:.0f} % |"
    assert row in md
    # Per-round ratios and the merge, on fake cells.
    fake = [
        {
            "engine": e,
            "threads": 1,
            "dataset": "a",
            "workload": "read_all",
            "nbytes": 10**6,
            "best_seconds": t,
            "error": None,
        }
        for e, t in (("cuzarr", 1.0), ("zarr", 2.0))
    ]
    per_engine = {
        "cuzarr": [fake[0], dict(fake[0], best_seconds=0.5)],
        "zarr": [fake[1], dict(fake[1], best_seconds=2.0)],
    }
    (got,) = interleave.round_ratios(per_engine, ["cuzarr"], ["zarr"])
    assert got["ratios"] == [2.0, 4.0] and got["median"] == 3.0
    merged = interleave.merge_rounds(per_engine["cuzarr"])
    assert merged["seconds"] == [1.0, 0.5] and merged["median_seconds"] == 0.75
    # The median call: cuzarr's typical call is slow in round 1, zarr's in round 2.
    per_engine["cuzarr"][0]["seconds"] = [1.0, 3.0, 3.0]
    per_engine["cuzarr"][1]["seconds"] = [0.5, 0.5, 0.6]
    per_engine["zarr"][0]["seconds"] = [2.0, 2.0, 2.0]
    per_engine["zarr"][1]["seconds"] = [2.0, 6.0, 6.0]
    (got,) = interleave.round_ratios(per_engine, ["cuzarr"], ["zarr"], statistic="median")
    assert got["statistic"] == "median" and got["ratios"] == [2.0 / 3.0, 12.0]
    with pytest.raises(ValueError, match="statistic"):
        interleave.round_ratios(per_engine, ["cuzarr"], ["zarr"], statistic="mean")


def test_zarr_own_pipeline_reads_and_stores_nothing(tmp_path: Path) -> None:
    """bench/zarr_own.py's pipeline takes zarr's batch and does nothing: what zarr-own times is
    zarr's own work only."""
    import zarr

    path = str(tmp_path / "a.zarr")
    data = np.arange(64, dtype="u2").reshape(8, 8)
    zarr.create_array(path, shape=(8, 8), chunks=(4, 4), dtype="u2", fill_value=7)[...] = data
    zarr_own.register()
    with zarr.config.set({"codec_pipeline.path": matrix.ZARR_PIPELINES["zarr-own"]}):
        arr = zarr.open_array(path, mode="r+")
        assert type(arr.async_array.codec_pipeline) is zarr_own.NoOpPipeline
        arr[:4, :] = 1000  # two chunks: stores nothing
        got = arr[...]  # four chunks: reads nothing into zarr's output
    assert not np.array_equal(got, data)
    np.testing.assert_array_equal(zarr.open_array(path, mode="r")[...], data)


def _fake_reporting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, reported_kib: int | None
) -> Path:
    """A stand-in for the kernel's page_reporting parameters (order 9), used by interleave."""
    from bench import interleave

    params = tmp_path / "parameters"
    params.mkdir()
    (params / "page_reporting_order").write_text("9\n")
    if reported_kib is not None:  # the stock kernel has no counter
        (params / "reported_kib").write_text(f"{reported_kib}\n")
    monkeypatch.setattr(interleave, "PAGE_REPORTING", params)
    return params


def test_hold_freed_memory_turns_reporting_off_and_restores_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench import interleave

    params = _fake_reporting(tmp_path, monkeypatch, reported_kib=2048)
    before = interleave.page_reporting()
    assert before == {"order": 9, "reported_kib": 2048}
    with pytest.raises(RuntimeError, match="inside"), interleave.hold_freed_memory() as old:
        assert old == 9
        assert interleave.page_reporting() == {
            "order": interleave.NO_REPORTING_ORDER,
            "reported_kib": 2048,
        }
        (params / "reported_kib").write_text("3072\n")
        during = interleave.page_reporting()
        raise RuntimeError("inside")
    assert (params / "page_reporting_order").read_text() == "9\n"  # restored after an error
    assert report.format_reporting(before, during) == (
        "off for the run (--hold-freed-memory), 1 MiB reported during the run"
    )
    assert report.format_reporting(before, before).startswith("on (order 9), 0 MiB")
    # Already off when the run began (held by hand, or by a run before): off, not "on".
    assert report.format_reporting(during, during).startswith("off for the run")
    assert report.format_reporting(None, None).startswith("not available")


def test_hold_freed_memory_without_the_kernel_feature_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench import interleave

    monkeypatch.setattr(interleave, "PAGE_REPORTING", tmp_path / "absent")
    assert interleave.page_reporting() is None
    with interleave.hold_freed_memory() as old:
        assert old is None
    assert not (tmp_path / "absent").exists()


def test_hold_freed_memory_needs_a_writable_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench import interleave

    params = _fake_reporting(tmp_path, monkeypatch, reported_kib=None)
    assert interleave.page_reporting() == {"order": 9, "reported_kib": -1}

    def refuse(self: Path, *args: Any, **kwargs: Any) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "write_text", refuse)
    with (
        pytest.raises(SystemExit, match=r"page_reporting_order.*run as root"),
        interleave.hold_freed_memory(),
    ):
        pass  # pragma: no cover - never entered
    monkeypatch.undo()
    assert (params / "page_reporting_order").read_text() == "9\n"


def test_file_system_of_names_the_mount(tmp_path: Path) -> None:
    if not Path("/proc/mounts").exists():
        pytest.skip("no /proc/mounts")
    fs = report.file_system_of(tmp_path)
    assert isinstance(fs, str) and fs
    assert report.file_system_of(Path("/proc")) == "proc"


def test_write_partial_is_timed_best_of_several_calls(tmp_path: Path) -> None:
    """write_partial calls are 1-25 ms: every engine gets PARTIAL_REPEATS of them per round."""
    data, scratch = tmp_path / "data", tmp_path / "scratch"
    scratch.mkdir()
    datasets.generate(data, 64, ["e"], lambda _msg: None)
    ds = datasets.datasets_for(64)["e"]
    adapter = engines.make_adapter("cuzarr-api", 1)
    cell = cells.measure(
        adapter, ds, "write_partial", data_dir=data, scratch=scratch, repeats=1, threads=1
    )
    assert cell["error"] is None and cell["verified"] is True
    assert len(cell["seconds"]) == matrix.PARTIAL_REPEATS >= 5
    assert cell["best_seconds"] == min(cell["seconds"])
