"""``cuzarr info``, ``cuzarr verify`` and ``cuzarr copy``, run as subprocesses on generated stores.

Stores are written with zarr-python (not cuzarr), and expectations are computed from the files
on disk (sizes, shard indexes parsed with NumPy) or from zarr-python's reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr

from cuzarr.tools import parse_codec, parse_shape
from cuzarr.tools.copy import FAIL_AFTER_ENV

EMPTY = 2**64 - 1
INDEX_BYTES = 4 * 16 + 4  # 2x2 inner chunks per shard: (offset, nbytes) uint64 pairs + crc32c


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env.pop(FAIL_AFTER_ENV, None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "cuzarr", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=full_env,
    )


def run_json(*args: str) -> dict[str, Any]:
    done = run(*args, "--json")
    assert done.returncode in (0, 1), done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("cuzarr: error: "), lines[0]
    return lines[0]


# ------------------------------------------------------------------ stores


def v2_group(root: Path) -> Path:
    """A v2 group: 2-D ``temp`` (zstd + delta, big-endian) and ``sub/f`` (NaN fill, gaps)."""
    path = root / "v2.zarr"
    g = zarr.create_group(str(path), zarr_format=2, attributes={"title": "v2 source"})
    temp = g.create_array(
        "temp", shape=(50, 40), chunks=(10, 10), dtype=">u2",
        compressors=numcodecs.Zstd(level=1), filters=[numcodecs.Delta(dtype=">u2")],
        attributes={"units": "K"}, fill_value=0,
    )
    temp[:] = np.arange(2000, dtype=np.uint16).reshape(50, 40)
    sub = g.create_group("sub", attributes={"level": 1})
    f = sub.create_array(
        "f", shape=(30, 20), chunks=(7, 7), dtype="f4", fill_value=float("nan"),
        compressors=numcodecs.Blosc(cname="lz4"),
    )
    f[:14, :] = np.linspace(0, 1, 14 * 20, dtype=np.float32).reshape(14, 20)
    return path


def v3_group(root: Path) -> Path:
    """A v3 group: sharded ``sharded`` (40x40 int32, 8x8 chunks in 16x16 shards) and ``plain``."""
    path = root / "v3.zarr"
    g = zarr.create_group(str(path), zarr_format=3)
    s = g.create_array(
        "sharded", shape=(40, 40), chunks=(8, 8), shards=(16, 16), dtype="i4",
        compressors=zarr.codecs.ZstdCodec(level=1),
    )
    s[:] = np.arange(1600, dtype=np.int32).reshape(40, 40)
    p = g.create_array(
        "plain", shape=(20, 20), chunks=(5, 5), dtype="i8",
        compressors=zarr.codecs.ZstdCodec(level=1),
    )
    p[:] = np.arange(400).reshape(20, 20)
    return path


def chunk_files(array_dir: Path) -> dict[str, int]:
    """Chunk files below an array folder (relative keys) with their sizes."""
    out: dict[str, int] = {}
    for folder, _dirs, files in os.walk(array_dir):
        for name in files:
            if name in (".zarray", ".zattrs", "zarr.json"):
                continue
            full = Path(folder) / name
            out[full.relative_to(array_dir).as_posix()] = full.stat().st_size
    return out


def shard_index(path: Path) -> np.ndarray:
    raw = path.read_bytes()
    return np.frombuffer(raw[-INDEX_BYTES:-4], "<u8").reshape(-1, 2)


# ------------------------------------------------------------------ library helpers


def test_parse_codec_and_shape() -> None:
    assert parse_codec("zstd:3").level == 3
    assert parse_codec("gzip:5").name == "gzip"
    b = parse_codec("blosc:zstd:5:bitshuffle")
    assert (b.name, b.cname, b.level, b.shuffle) == ("blosc", "zstd", 5, "bitshuffle")
    assert parse_codec("none").name == "none"
    for bad in ("zstd:x", "gzip:12", "blosc:nope", "lzma", "blosc:lz4:5:sideways", "none:1"):
        with pytest.raises(ValueError, match="codec"):
            parse_codec(bad)
    assert parse_shape("64, 64,64") == (64, 64, 64)
    for bad in ("", "0,4", "4,-1", "a"):
        with pytest.raises(ValueError, match="shape"):
            parse_shape(bad)


# ------------------------------------------------------------------ info


def test_info_json_and_text(tmp_path: Path) -> None:
    src = v2_group(tmp_path)
    doc = run_json("info", str(src))
    assert doc["schema"] == "cuzarr.info/1"
    nodes = {n["path"]: n for n in doc["nodes"]}
    assert [n["path"] for n in doc["nodes"]] == ["", "sub", "sub/f", "temp"]
    assert nodes[""]["kind"] == "group"
    assert nodes[""]["attributes"] == {"title": "v2 source"}
    assert nodes["sub"]["kind"] == "group"

    temp = nodes["temp"]
    files = chunk_files(src / "temp")
    assert temp["kind"] == "array"
    assert temp["zarr_format"] == 2
    assert temp["shape"] == [50, 40]
    assert temp["dtype"] == ">u2"
    assert temp["chunks"] == [10, 10]
    assert temp["shards"] is None
    assert [c["name"] for c in temp["codecs"]] == ["delta", "zstd"]
    assert temp["codecs"][1]["configuration"]["level"] == 1
    assert (temp["chunks_total"], temp["chunks_present"], temp["chunks_missing"]) == (20, 20, 0)
    assert temp["stored_bytes"] == sum(files.values())
    assert temp["decoded_bytes"] == 20 * 10 * 10 * 2
    assert temp["ratio"] == pytest.approx(temp["decoded_bytes"] / temp["stored_bytes"], 1e-3)

    f = nodes["sub/f"]
    f_files = chunk_files(src / "sub" / "f")
    # rows 0..13 written: chunk rows 0 and 1 (7 rows each), 3 chunk columns; 5x3 in the grid
    assert len(f_files) == 6
    assert (f["chunks_total"], f["chunks_present"], f["chunks_missing"]) == (15, 6, 9)
    assert f["stored_bytes"] == sum(f_files.values())
    assert f["fill_value"] == "nan"
    assert f["attributes"] == {}

    text = run("info", str(src))
    assert text.returncode == 0, text.stderr
    assert text.stderr == ""
    for needle in ("sub/", "temp", "(50, 40)", "delta", "zstd(level=1)", "20 of 20 chunks",
                   "6 of 15 chunks present (9 missing)"):
        assert needle in text.stdout, (needle, text.stdout)


def test_info_sharded(tmp_path: Path) -> None:
    src = v3_group(tmp_path)
    nodes = {n["path"]: n for n in run_json("info", str(src))["nodes"]}
    s = nodes["sharded"]
    assert s["chunks"] == [8, 8]
    assert s["shards"] == [16, 16]
    assert s["unit"] == "shard"
    assert [c["name"] for c in s["codecs"]] == ["sharding_indexed"]
    assert (s["chunks_total"], s["chunks_present"]) == (9, 9)
    assert s["stored_bytes"] == sum(chunk_files(src / "sharded").values())


# ------------------------------------------------------------------ verify


def test_verify_clean_store(tmp_path: Path) -> None:
    src = v3_group(tmp_path)
    # a leftover of an interrupted write: listed, but not corruption
    stale = src / "plain" / "c" / "0" / "0.3f2a.partial"
    stale.write_bytes(b"half a chunk")
    done = run("verify", str(src), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""  # no progress bar in a pipe
    report = json.loads(done.stdout)
    assert report["schema"] == "cuzarr.verify/1"
    assert report["ok"] is True
    assert report["problems"] == []
    assert report["stale_temporary_files"] == ["plain/c/0/0.3f2a.partial"]
    shards = chunk_files(src / "sharded")
    plain = [k for k in chunk_files(src / "plain") if not k.endswith(".partial")]
    assert report["arrays"] == 2
    assert report["chunks_checked"] == len(shards) + len(plain)
    inner = sum(
        int(((shard_index(src / "sharded" / k) != EMPTY).all(axis=1)).sum()) for k in shards
    )
    assert inner == 25  # 40x40 in 8x8 inner chunks; those past the edge are never stored
    assert report["inner_chunks_checked"] == inner

    text = run("verify", str(src))
    assert text.returncode == 0
    assert "stale temporary file: plain/c/0/0.3f2a.partial" in text.stdout
    assert text.stdout.strip().splitlines()[-1].startswith("OK")


def test_verify_reports_every_corrupt_chunk(tmp_path: Path) -> None:
    src = v3_group(tmp_path)
    rng = np.random.default_rng(0)

    def garbage(n: int) -> bytes:
        data = bytearray(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        data[:4] = b"JUNK"  # never a zstd frame's magic number
        return bytes(data)

    # 1. a plain chunk overwritten with garbage
    chunk = src / "plain" / "c" / "1" / "2"
    chunk.write_bytes(garbage(chunk.stat().st_size))
    # 2. a shard whose index fails its checksum
    bad_index = src / "sharded" / "c" / "0" / "1"
    raw = bytearray(bad_index.read_bytes())
    raw[-INDEX_BYTES + 3] ^= 0xFF
    bad_index.write_bytes(bytes(raw))
    # 3. a truncated shard
    truncated = src / "sharded" / "c" / "1" / "1"
    truncated.write_bytes(truncated.read_bytes()[:50])
    # 4. one inner chunk of a shard overwritten (inner (1, 0) of shard c/0/0)
    inner_shard = src / "sharded" / "c" / "0" / "0"
    table = shard_index(inner_shard)
    offset, length = (int(x) for x in table[2])
    raw = bytearray(inner_shard.read_bytes())
    raw[offset : offset + length] = garbage(length)
    inner_shard.write_bytes(bytes(raw))
    # 5. a stale temporary file and a key outside the grid: warnings only
    (src / "sharded" / "c" / "2" / "2.abcd.partial").write_bytes(b"x")
    (src / "plain" / "c" / "9").mkdir()
    (src / "plain" / "c" / "9" / "0").write_bytes(b"stray")

    done = run("verify", str(src), "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False
    labels = [p["label"] for p in report["problems"]]
    assert labels == [
        "plain/c/1/2",
        "sharded/c/0/0 [inner (1, 0)]",
        "sharded/c/0/1",
        "sharded/c/1/1",
    ]
    by_label = {p["label"]: p for p in report["problems"]}
    assert all(p["kind"] == "corrupt" for p in report["problems"])
    assert by_label["sharded/c/0/0 [inner (1, 0)]"]["inner"] == [1, 0]
    assert "shard index" in by_label["sharded/c/0/1"]["reason"]
    assert "checksum" in by_label["sharded/c/0/1"]["reason"].lower()
    assert "truncated" in by_label["sharded/c/1/1"]["reason"]
    assert report["stale_temporary_files"] == ["sharded/c/2/2.abcd.partial"]
    assert any("plain/c/9/0" in w for w in report["warnings"])
    # the corrupt inner chunk's neighbours in the same shard still decoded
    assert report["inner_chunks_checked"] >= 3

    text = run("verify", str(src))
    assert text.returncode == 1
    for label in labels:
        assert label in text.stdout
    assert "4 corrupt or unreadable" in text.stdout


# ------------------------------------------------------------------ copy


def test_copy_v2_group_to_sharded_v3(tmp_path: Path) -> None:
    src = v2_group(tmp_path)
    dst = tmp_path / "out.zarr"
    done = run(
        "copy", str(src), str(dst), "--zarr-format", "3", "--chunks", "5,5",
        "--shards", "10,20", "--codec", "blosc:lz4:5:bitshuffle", "--json",
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    summary = json.loads(done.stdout)
    assert summary["schema"] == "cuzarr.copy/1"
    assert (summary["arrays"], summary["groups"]) == (2, 2)
    assert summary["verified"] is True
    assert summary["blocks_skipped"] == 0
    assert summary["blocks_written"] == summary["blocks_total"] >= 2
    assert not (dst / ".cuzarr-copy.json").exists()

    a = zarr.open_group(str(src), mode="r")
    b = zarr.open_group(str(dst), mode="r")
    assert b.metadata.zarr_format == 3
    assert dict(b.attrs) == {"title": "v2 source"}
    assert dict(b["sub"].attrs) == {"level": 1}
    for name in ("temp", "sub/f"):
        x, y = a[name], b[name]
        assert y.metadata.zarr_format == 3
        assert y.chunks == (5, 5)
        assert y.shards == (10, 20)
        assert [type(c).__name__ for c in y.compressors] == ["BloscCodec"]
        blosc = y.compressors[0].to_dict()["configuration"]
        assert (blosc["cname"], blosc["shuffle"], blosc["clevel"]) == ("lz4", "bitshuffle", 5)
        assert dict(y.attrs) == dict(x.attrs)
        np.testing.assert_array_equal(y[...], x[...])
    # missing source chunks stay missing: sub/f rows 14.. are fill (NaN)
    assert np.isnan(b["sub/f"][14:, :]).all()
    assert run("verify", str(dst)).returncode == 0

    # the destination now exists: a second copy refuses in one line
    line = one_error_line(run("copy", str(src), str(dst)))
    assert "--overwrite" in line
    # and nothing to resume
    assert "nothing to resume" in one_error_line(run("copy", str(src), str(dst), "--resume"))


def test_copy_bad_options_are_one_line(tmp_path: Path) -> None:
    src = v2_group(tmp_path)
    line = one_error_line(run("copy", str(src), str(tmp_path / "o.zarr"), "--chunks", "5,5,5"))
    assert "--chunks" in line and "temp" in line
    line = one_error_line(
        run("copy", str(src), str(tmp_path / "p.zarr"), "--zarr-format", "3",
            "--chunks", "4,4", "--shards", "10,10")
    )
    assert "not a multiple" in line
    done = run("copy", str(src), str(tmp_path / "q.zarr"), "--codec", "lzma")
    assert done.returncode == 2 and "codec 'lzma'" in done.stderr  # argparse's usage error


def test_copy_interrupted_then_resumed(tmp_path: Path) -> None:
    src = tmp_path / "big.zarr"
    a = zarr.create_array(
        str(src), shape=(1024, 512), chunks=(64, 64), dtype="f8",
        compressors=zarr.codecs.ZstdCodec(level=1), attributes={"k": "v"},
    )
    data = np.add.outer(np.arange(1024.0), np.arange(512.0) / 512)
    a[:] = data
    dst = tmp_path / "copy.zarr"
    args = ("copy", str(src), str(dst), "--chunks", "128,128", "--block-mb", "1")

    killed = run(*args, env={FAIL_AFTER_ENV: "2"})
    assert killed.returncode == 75, killed.stderr  # the hook's abrupt exit
    journal = json.loads((dst / ".cuzarr-copy.json").read_text())
    entry = journal["nodes"][""]
    assert entry["created"] is True
    assert sorted(entry["done"]) == [0, 1]
    block_rows = entry["block_shape"][0]
    assert entry["block_shape"][1] == 512
    assert block_rows * 512 * 8 <= 1024 * 1024
    n_blocks = -(-1024 // block_rows)
    assert n_blocks > 2
    # the chunk files of the finished blocks, with their modification times
    first = {
        k: (dst / k).stat().st_mtime_ns
        for k in chunk_files(dst)
        if k.startswith("c/") and int(k.split("/")[1]) * 128 < 2 * block_rows
    }
    assert len(first) == (2 * block_rows // 128) * 4

    resumed = run(*args, "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["resumed"] is True
    assert summary["blocks_skipped"] == 2
    assert summary["blocks_written"] == n_blocks - 2
    assert summary["blocks_total"] == n_blocks
    assert not (dst / ".cuzarr-copy.json").exists()
    # the finished blocks were not written again
    assert {k: (dst / k).stat().st_mtime_ns for k in first} == first

    out = zarr.open_array(str(dst), mode="r")
    assert out.chunks == (128, 128)
    assert dict(out.attrs) == {"k": "v"}
    np.testing.assert_array_equal(out[...], data)


# ------------------------------------------------------------------ command line basics


def test_errors_are_one_line_and_debug_shows_traceback(tmp_path: Path) -> None:
    line = one_error_line(run("info", str(tmp_path / "missing.zarr")))
    assert "missing.zarr" in line
    debug = run("--debug", "verify", str(tmp_path / "missing.zarr"))
    assert debug.returncode != 0
    assert "Traceback" in debug.stderr
    debug = run("verify", str(tmp_path / "missing.zarr"), "--debug")
    assert "Traceback" in debug.stderr


def test_bench_device_gpu_names_what_is_missing() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "from cuzarr.backends import gpu_status; print(gpu_status())"],
        capture_output=True, text=True, timeout=60,
    )
    missing = probe.stdout.strip()
    if missing == "None":  # pragma: no cover - only once a GPU backend exists
        pytest.skip("a GPU backend is usable here")
    done = run("bench", "--device", "gpu", "--size", "8", "--repeats", "1")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines == [f"cuzarr bench: error: --device gpu: {missing}"]


def test_info_gpu_without_a_gpu_says_what_is_missing(capsys):
    from cuzarr.backends import gpu_status
    from cuzarr.cli import main

    if gpu_status() is None:
        pytest.skip("a GPU is usable here")
    assert main(["info", "--gpu"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GPU: not usable (") and "cuzarr[cu13]" in out
    assert main(["info", "--gpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["usable"] is False
    assert main(["info"]) == 2
    assert "TARGET is required" in capsys.readouterr().err
