"""``cuzarr bench --device gpu``: cuzarr's engine measured on the GPU, every result checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import zarr

from cuzarr import benchmark, cli

pytestmark = pytest.mark.gpu


def test_bench_device_gpu_decodes_and_encodes_on_the_device(sim, tmp_path: Path, capsys) -> None:
    out = tmp_path / "report.json"
    before = {k: zarr.config.get(k) for k in ("buffer", "ndbuffer", "codec_pipeline.path")}
    code = cli.main(
        ["bench", "--device", "gpu", "--size", "16", "--repeats", "1", "--json", str(out)]
    )
    assert code == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    assert report["device"] == "gpu" and report["verified"] is True
    assert {r["engine"] for r in report["results"]} == {e.name for e in benchmark.ENGINES}
    assert "device=gpu" in capsys.readouterr().out
    stats = report["cuzarr_stats"]
    # Strict: nothing fell back to zarr's pipeline, nothing was coded on the host.
    assert not any(v for k, v in stats.items() if k.startswith("fallback"))
    assert stats.get("gpu_cpu_decodes", 0) == 0 and stats.get("gpu_cpu_encodes", 0) == 0
    kinds = {e.kind for e in sim.events}
    assert "decode" in kinds and "encode" in kinds, sorted(kinds)
    # Each timed GPU read waited for the device (one read per layout: --repeats 1).
    assert len([e for e in sim.events if e.kind == "sync" and e.name == "device"]) == 2
    # zarr's buffers and pipeline are as they were before the run.
    assert {k: zarr.config.get(k) for k in before} == before


def test_bench_target_device_gpu_reads_on_the_device(sim, tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    data = benchmark.make_data(16)
    arr = zarr.create_array(store=str(path), shape=data.shape, dtype=data.dtype, chunks=(8, 8, 8))
    arr[...] = data
    cuzarr_only = (benchmark.BASELINE, *(e for e in benchmark.ENGINES if e.name == "cuzarr"))
    report = benchmark.run_target_benchmark(path, repeats=1, engines=cuzarr_only, device="gpu")
    assert report.device == "gpu" and report.verified
    assert [e for e in sim.events if e.kind == "decode"]
    assert report.cuzarr_stats.get("gpu_cpu_decodes", 0) == 0
