"""`cuzarr bench` end to end (small sizes), and the command line's basics."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from cuzarr import benchmark, cli

ENGINE_NAMES = {e.name for e in benchmark.ENGINES}


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cuzarr", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_bench_generated_json(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = _run("bench", "--size", "64", "--repeats", "1", "--json", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())

    assert report["verified"] is True
    assert report["dataset"]["generated"] is True
    assert report["dataset"]["shape"] == [64, 64, 64]
    assert report["dataset"]["nbytes"] == 64**3 * 2
    results = report["results"]
    # every engine x {read, write} x {chunked, sharded}
    keys = {(r["engine"], r["operation"], r["layout"]) for r in results}
    assert len(keys) == len(results) == len(ENGINE_NAMES) * 2 * 2
    assert {r["engine"] for r in results} == ENGINE_NAMES
    for r in results:
        assert r["nbytes"] == 64**3 * 2
        assert len(r["seconds"]) == 1
        assert r["mb_per_s"] > 0
        assert r["ratio_to_zarr"] > 0
    # each engine ran on the pipeline it names, not on zarr's default
    pipelines = {r["engine"]: r["pipeline"] for r in results}
    assert pipelines["zarr"] == "zarr.core.codec_pipeline.BatchedCodecPipeline"
    assert pipelines["zarr-fused"] == "zarr.core.codec_pipeline.FusedCodecPipeline"
    assert pipelines["cuzarr"] == "cuzarr.zarr_pipeline.Pipeline"
    # cuzarr ran strict: the engine served both reads and writes, nothing fell back
    stats = report["cuzarr_stats"]
    assert stats.get("engine_reads", 0) > 0
    assert stats.get("engine_writes", 0) > 0
    assert not any(v for k, v in stats.items() if k.startswith("fallback"))

    env = report["environment"]
    for dist in ("cuzarr", "zarr", "numcodecs", "numpy"):
        assert env["versions"][dist]
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    assert env["cpu_count"] >= 1

    # the table went to stdout, progress to stderr
    assert "cuzarr" in done.stdout and "Summary:" in done.stdout
    assert "[cuzarr bench]" in done.stderr and "[cuzarr bench]" not in done.stdout


def test_bench_keep_writes_dataset(tmp_path: Path) -> None:
    keep = tmp_path / "data"
    assert cli.main(["bench", "--size", "40", "--repeats", "1", "--keep", str(keep)]) == 0
    expected = benchmark.make_data(40)
    for name in ("chunked", "sharded"):
        arr = zarr.open_array(store=str(keep / f"{name}.zarr"), mode="r")
        np.testing.assert_array_equal(arr[...], expected)
    # one shard covers the 40^3 array: 64 is the smallest multiple of the 32^3 inner chunks
    assert zarr.open_array(store=str(keep / "sharded.zarr"), mode="r").shards == (64, 64, 64)
    # the arrays each engine wrote are scratch, removed after the check
    assert sorted(p.name for p in keep.iterdir()) == ["chunked.zarr", "sharded.zarr"]


def test_bench_target_reads_existing_array(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = np.arange(30 * 20, dtype="float32").reshape(30, 20)
    arr = zarr.create_array(
        store=str(tmp_path / "a.zarr"), shape=data.shape, dtype=data.dtype, chunks=(8, 8)
    )
    arr[...] = data
    out = tmp_path / "t.json"
    code = cli.main(["bench", str(tmp_path / "a.zarr"), "--repeats", "2", "--json", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["verified"] is True
    assert report["dataset"]["generated"] is False
    assert {r["operation"] for r in report["results"]} == {"read"}
    assert {r["engine"] for r in report["results"]} == ENGINE_NAMES
    assert all(len(r["seconds"]) == 2 and r["nbytes"] == data.nbytes for r in report["results"])
    assert "Summary:" in capsys.readouterr().out


def test_bench_device_cpu_and_the_settings_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cpu.json"
    assert cli.main(["bench", "--device", "cpu", "--size", "16", "--repeats", "1",
                     "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["verified"] is True
    assert "device=cpu" in capsys.readouterr().out
    # Without --device, the settings' device (CUZARR_DEVICE) is the one measured and reported.
    from cuzarr import config

    monkeypatch.setenv("CUZARR_DEVICE", "cpu")
    monkeypatch.setattr(config, "_current", None)  # read from the environment again
    report = benchmark.run_benchmark(size=8, repeats=1, engines=benchmark.ENGINES[2:])
    assert report.device == "cpu"
    with pytest.raises(ValueError, match="device: expected one of"):
        benchmark.run_benchmark(size=8, repeats=1, device="tpu")
    with pytest.raises(ValueError, match="device: expected one of"):
        benchmark.run_target_benchmark(tmp_path, device="GPU")


def test_make_data_is_seeded_and_compressible() -> None:
    a = benchmark.make_data(16, seed=1)
    assert a.shape == (16, 16, 16) and a.dtype == np.uint16
    np.testing.assert_array_equal(a, benchmark.make_data(16, seed=1))
    assert not np.array_equal(a, benchmark.make_data(16, seed=2))
    # a ramp (index // 256) plus noise in 0..63
    noise = a.ravel().astype(np.int64) - np.arange(a.size) // 256
    assert noise.min() >= 0 and noise.max() <= 63


def test_default_layouts_shards_divide_by_inner_chunks() -> None:
    for size in (1, 33, 64, 100, 512, 600):
        chunked, sharded = benchmark.default_layouts(size)
        assert chunked.shards is None
        assert sharded.shards is not None
        assert all(s % c == 0 for s, c in zip(sharded.shards, sharded.chunks, strict=True))
    assert benchmark.default_layouts(512)[0].chunks == (64, 64, 64)
    assert benchmark.default_layouts(512)[1].shards == (256, 256, 256)


def test_wrong_pipeline_is_detected(tmp_path: Path) -> None:
    arr = zarr.create_array(store=str(tmp_path / "x.zarr"), shape=(4,), dtype="uint8")
    fused = benchmark.ENGINES[1]
    with pytest.raises(benchmark.BenchmarkError, match="did not take effect"):
        benchmark._checked_pipeline(arr, fused)


def test_mismatch_fails_loudly() -> None:
    expected = np.arange(10, dtype="uint16")
    bad = expected.copy()
    bad[3] += 1
    with pytest.raises(benchmark.BenchmarkError, match="1 of 10 elements differ"):
        benchmark._check_equal(bad, expected, "read")


def test_help_and_errors(tmp_path: Path) -> None:
    done = _run("--help", cwd=tmp_path)
    assert done.returncode == 0
    assert "bench" in done.stdout
    done = _run("bench", "--help", cwd=tmp_path)
    assert done.returncode == 0
    for option in ("--size", "--repeats", "--threads", "--json", "--keep", "TARGET"):
        assert option in done.stdout
    done = _run("bench", "--size", "0", cwd=tmp_path)
    assert done.returncode == 2
    assert "expected an integer >= 1" in done.stderr
    done = _run(cwd=tmp_path)
    assert done.returncode == 2


def test_the_report_names_cuzarrs_version_when_run_from_a_source_tree(monkeypatch):
    """On the GPU machine cuzarr runs from ``src`` on ``PYTHONPATH``, not installed: the report
    said ``cuzarr None`` there (bench/results/gpu-check-2026-12-06)."""
    import importlib.metadata

    import cuzarr
    from cuzarr import bench_report

    def not_installed(dist):
        raise importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert bench_report._version("cuzarr") == cuzarr.__version__
    assert bench_report._version("zarr") is None
