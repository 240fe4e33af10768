"""Faults mid-read and mid-write: failed calls name what failed, chunks stay old or new.

Faults are injected with :class:`cuzarr.testing.faults.FaultyStore` (which cuzarr's engine
reaches through ``ZarrChunkStore``, the path of every remote store), by failing ``os.write`` /
``os.replace`` under cuzarr's own ``LocalChunkStore``, and by killing a writing process with
SIGKILL. After each fault every chunk must decode to its complete old or complete new value;
a store that tears a write itself (``partial_write``) must make the torn chunk fail loudly on
read, never return garbage.

The SIGKILL test checks the store with ``cuzarr verify`` (its library function: every chunk and
inner chunk decodes, temporaries are only stale files) and with :func:`_big_verify` (every block
wholly old or new, no file in the array folder other than chunk keys and ``.partial``
temporaries).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec
from zarr.storage import LocalStore, MemoryStore

import cuzarr
from cuzarr import CorruptChunkError, StoreError
from cuzarr.stores import local as local_mod
from cuzarr.stores.local import TEMP_SUFFIX
from cuzarr.testing.faults import Fault, FaultError, FaultyStore
from cuzarr.tools.verify import verify

SHAPE = (8, 8)
OLD = np.arange(64, dtype="float64").reshape(SHAPE) + 1
NEW = -OLD

LAYOUTS: dict[str, dict[str, Any]] = {
    "zstd": {"chunks": (2, 2), "compressors": ZstdCodec(level=1)},
    "raw": {"chunks": (2, 2), "compressors": None},
    "sharded": {"chunks": (2, 2), "shards": (4, 4), "compressors": ZstdCodec(level=1)},
    "crc32c": {"chunks": (2, 2), "compressors": [ZstdCodec(level=1), Crc32cCodec()]},
    "v2": {"chunks": (2, 2), "zarr_format": 2, "compressors": None},
}

#: Figures for docs/reliability.md, printed at the end of the session (``-s``).
FIGURES = {"faults_injected": 0, "kills_survived": 0}


@pytest.fixture(autouse=True)
def _strict() -> Iterator[None]:
    cuzarr.reset_stats()
    with cuzarr.configure(strict=True):
        yield


def _blocks(layout: str) -> list[tuple[slice, slice]]:
    """The regions written atomically: chunks, or shards for a sharded layout."""
    step = 4 if "shards" in LAYOUTS[layout] else 2
    return [
        (slice(i, i + step), slice(j, j + step))
        for i in range(0, SHAPE[0], step)
        for j in range(0, SHAPE[1], step)
    ]


def _verify(arr: Any, layout: str) -> dict[str, int]:
    """Every atomic block reads as wholly old or wholly new; count each."""
    counts = {"old": 0, "new": 0}
    for sel in _blocks(layout):
        got = arr[sel]
        if np.array_equal(got, OLD[sel]):
            counts["old"] += 1
        elif np.array_equal(got, NEW[sel]):
            counts["new"] += 1
        else:  # pragma: no cover - the failure this file exists to catch
            raise AssertionError(f"block {sel} is neither old nor new: {got}")
    return counts


def _create(store: Any, layout: str) -> Any:
    arr = zarr.create_array(store, name="arr", shape=SHAPE, dtype="float64", **LAYOUTS[layout])
    arr[...] = OLD
    return arr


def _n_blocks(layout: str) -> int:
    return len(_blocks(layout))


# -------------------------------------------------------------------------------------------
# FaultyStore: errors on the Nth get / set / delete


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_error_on_nth_set_leaves_chunks_old_or_new(layout: str) -> None:
    base = MemoryStore()
    _create(base, layout)
    for nth in range(1, _n_blocks(layout) + 1):
        faulty = FaultyStore(base, [Fault(op="set", nth=nth)])
        arr = zarr.open_array(faulty, path="arr")
        with pytest.raises(StoreError) as info:
            arr[...] = NEW
        ((op, key, kind),) = faulty.log
        assert (op, kind) == ("set", "error")
        message = str(info.value)
        assert f"'{key}'" in message and "write" in message and "faulty-" in message
        assert isinstance(info.value.__cause__, FaultError)
        FIGURES["faults_injected"] += faulty.faults_injected
        counts = _verify(zarr.open_array(base, path="arr", mode="r"), layout)
        assert counts["old"] >= 1  # the failed block kept its old value
        # reset for the next round
        zarr.open_array(base, path="arr")[...] = OLD
    assert cuzarr.stats().get("fallback_writes", 0) == 0


@pytest.mark.parametrize("layout", ["zstd", "sharded", "v2"])
def test_error_on_nth_get_during_partial_write(layout: str) -> None:
    """A read-modify-write whose read fails stores nothing for that block."""
    base = MemoryStore()
    _create(base, layout)
    value = np.where(np.indices(SHAPE).sum(axis=0) % 2 == 0, NEW, OLD)  # touches every block
    for nth in (1, 3):
        faulty = FaultyStore(base, [Fault(op="get", nth=nth)])
        arr = zarr.open_array(faulty, path="arr")
        with pytest.raises(StoreError) as info:
            arr[1:7, 1:7] = value[1:7, 1:7]
        ((_, key, _),) = faulty.log
        assert f"'{key}'" in str(info.value) and "read" in str(info.value)
        FIGURES["faults_injected"] += faulty.faults_injected
        reread = zarr.open_array(base, path="arr", mode="r")
        for sel in _blocks(layout):
            got = reread[sel]
            expected_new = OLD[sel].copy()
            inner = np.zeros(SHAPE, bool)
            inner[1:7, 1:7] = True
            expected_new[inner[sel]] = value[sel][inner[sel]]
            assert np.array_equal(got, OLD[sel]) or np.array_equal(got, expected_new), sel
        zarr.open_array(base, path="arr")[...] = OLD


def test_error_on_delete_names_the_key() -> None:
    base = MemoryStore()
    _create(base, "zstd")
    faulty = FaultyStore(base, [Fault(op="delete", nth=2)])
    arr = zarr.open_array(faulty, path="arr")
    with pytest.raises(StoreError, match="delete") as info:
        arr[...] = 0.0  # the fill value: chunks are deleted
    ((_, key, _),) = faulty.log
    assert f"'{key}'" in str(info.value)
    FIGURES["faults_injected"] += 1
    reread = zarr.open_array(base, path="arr", mode="r")
    got = reread[...]
    for sel in _blocks("zstd"):
        assert np.array_equal(got[sel], OLD[sel]) or not got[sel].any()
    # the chunk whose delete failed kept its old value
    assert any(np.array_equal(got[sel], OLD[sel]) for sel in _blocks("zstd"))


@pytest.mark.parametrize("layout", ["zstd", "raw", "sharded", "crc32c", "v2"])
@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.9])
def test_short_reads_are_corrupt_chunks_not_data(layout: str, fraction: float) -> None:
    base = MemoryStore()
    _create(base, layout)
    faulty = FaultyStore(base, [Fault(op="get", nth=1, kind="short_read", fraction=fraction,
                                      every=1)])
    arr = zarr.open_array(faulty, path="arr", mode="r")
    with pytest.raises(CorruptChunkError) as info:
        arr[...]
    assert any(key in str(info.value) for _, key, _ in faulty.log)
    FIGURES["faults_injected"] += faulty.faults_injected


@pytest.mark.parametrize("layout", ["zstd", "raw", "sharded", "crc32c", "v2"])
@pytest.mark.parametrize("fraction", [0.0, 0.5, 0.95])
def test_torn_write_by_the_store_is_detected_on_read(layout: str, fraction: float) -> None:
    """A store that tears a write (writes a prefix, then fails) leaves a chunk that cuzarr
    refuses to read; the failed write itself names the key."""
    base = MemoryStore()
    _create(base, layout)
    faulty = FaultyStore(base, [Fault(op="set", nth=2, kind="partial_write", fraction=fraction)])
    arr = zarr.open_array(faulty, path="arr")
    with pytest.raises(StoreError) as info:
        arr[...] = NEW
    ((_, torn, _),) = faulty.log
    assert f"'{torn}'" in str(info.value)
    FIGURES["faults_injected"] += 1
    reread = zarr.open_array(base, path="arr", mode="r")
    with pytest.raises(CorruptChunkError, match=torn):
        reread[...]
    # every other block is old or new
    chunk_coords = torn.split("/")[-2:]
    step = 4 if layout == "sharded" else 2
    ti, tj = (int(c) * step for c in chunk_coords) if layout != "v2" else (
        int(c) * step for c in torn.split("/")[-1].split(".")
    )
    for sel in _blocks(layout):
        if (sel[0].start, sel[1].start) == (ti, tj):
            continue
        got = reread[sel]
        assert np.array_equal(got, OLD[sel]) or np.array_equal(got, NEW[sel])


def test_faulty_store_validates_rules() -> None:
    with pytest.raises(ValueError, match="nth"):
        Fault(op="get", nth=0)
    with pytest.raises(ValueError, match="short_read"):
        Fault(op="set", kind="short_read")
    with pytest.raises(ValueError, match="partial_write"):
        Fault(op="get", kind="partial_write")
    rule = Fault(op="get", nth=2, every=3)
    assert [rule.tick() for _ in range(9)] == [False, True, False, False, True, False, False,
                                                True, False]
    assert not Fault(op="get").matches("get", "arr/zarr.json")
    assert Fault(op="get", include_metadata=True).matches("get", "arr/zarr.json")


# -------------------------------------------------------------------------------------------
# LocalChunkStore: the disk fails mid-write


def _chunk_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("layout", ["zstd", "sharded", "v2"])
@pytest.mark.parametrize("fail", ["write", "replace"])
@pytest.mark.parametrize("nth", [1, 4])
def test_local_disk_failure_mid_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str, fail: str, nth: int
) -> None:
    root = tmp_path / "data.zarr"
    _create(LocalStore(root), layout)
    before = {p: p.read_bytes() for p in _chunk_files(root)}
    calls = {"n": 0}
    real_write, real_replace = os.write, os.replace

    def failing_write(fd: int, data: Any) -> int:
        calls["n"] += 1
        if calls["n"] == nth:
            real_write(fd, bytes(memoryview(data)[: max(1, len(memoryview(data)) // 2)]))
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    def failing_replace(src: Any, dst: Any) -> None:
        calls["n"] += 1
        if calls["n"] == nth:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    with cuzarr.configure(threads=1), monkeypatch.context() as m:
        # one thread: chunks are written in order, so exactly nth - 1 land before the fault
        arr = zarr.open_array(LocalStore(root), path="arr")
        # Faults are injected into the os calls of LocalChunkStore.put: the batch helper, which
        # writes in C, is off here (its faults: tests/test_batch_puts.py, test_box_writes.py).
        m.setattr(local_mod, "_put_files", None)
        m.setattr(local_mod, "_put_boxes", None)
        if fail == "write":
            m.setattr(local_mod.os, "write", failing_write)
        else:
            m.setattr(local_mod.os, "replace", failing_replace)
        with pytest.raises(StoreError, match="No space left") as info:
            arr[...] = NEW
    assert "Failed to write chunk 'arr/" in str(info.value)
    FIGURES["faults_injected"] += 1
    files = _chunk_files(root)
    assert not [p for p in files if p.name.endswith(TEMP_SUFFIX)]  # cleaned up
    assert set(files) == set(before)
    counts = _verify(zarr.open_array(LocalStore(root), path="arr", mode="r"), layout)
    assert counts["old"] >= 1
    assert counts["new"] == nth - 1


# -------------------------------------------------------------------------------------------
# SIGKILL in the middle of a large local write

CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    import zarr
    from zarr.storage import LocalStore
    import cuzarr

    cuzarr.configure(strict=True, threads=2)
    root, layout = sys.argv[1], sys.argv[2]
    arr = zarr.open_array(LocalStore(root), path="arr")
    new = -(np.arange(np.prod(arr.shape), dtype="float64").reshape(arr.shape) + 1)
    print("ready", flush=True)
    for i in range(100000):
        arr[...] = new if i % 2 == 0 else -new
    """
)

BIG = (512, 512)  # 2 MiB of float64 per write, 64 chunks (or 4 shards of 16)
BIG_LAYOUTS = {
    "zstd": {"chunks": (64, 64), "compressors": ZstdCodec(level=1)},
    "sharded": {"chunks": (64, 64), "shards": (256, 256), "compressors": ZstdCodec(level=1)},
    "raw": {"chunks": (64, 64), "compressors": None, "serializer": BytesCodec()},
}


def _big_verify(root: Path, layout: str) -> None:
    old = np.arange(np.prod(BIG), dtype="float64").reshape(BIG) + 1
    arr = zarr.open_array(LocalStore(root), path="arr", mode="r")
    step = BIG_LAYOUTS[layout].get("shards", BIG_LAYOUTS[layout]["chunks"])
    got = arr[...]
    for i in range(0, BIG[0], step[0]):
        for j in range(0, BIG[1], step[1]):
            sel = (slice(i, i + step[0]), slice(j, j + step[1]))
            assert np.array_equal(got[sel], old[sel]) or np.array_equal(got[sel], -old[sel]), sel
    # cuzarr verify: every chunk (and every inner chunk of every shard) decodes; leftover
    # temporaries are reported as stale files, never as chunks.
    report = verify(str(root))
    assert report.problems == [], report.problems
    assert report.chunks_checked > 0
    assert all(k.endswith(TEMP_SUFFIX) for k in report.stale_temporary_files)
    names = {"zarr.json"}
    for p in (root / "arr").rglob("*"):
        if p.is_file() and p.name not in names:
            rel = p.relative_to(root / "arr").as_posix()
            # only chunk keys c/i/j and temporaries; a temporary is never read as a chunk
            assert rel.endswith(TEMP_SUFFIX) or (
                rel.startswith("c/") and all(part.isdigit() for part in rel.split("/")[1:])
            ), rel


@pytest.mark.parametrize("layout", list(BIG_LAYOUTS))
def test_sigkill_mid_write_leaves_old_or_new_chunks(tmp_path: Path, layout: str) -> None:
    rng = random.Random(f"sigkill-{layout}")
    root = tmp_path / "big.zarr"
    arr = zarr.create_array(
        LocalStore(root), name="arr", shape=BIG, dtype="float64", **BIG_LAYOUTS[layout]
    )
    arr[...] = np.arange(np.prod(BIG), dtype="float64").reshape(BIG) + 1
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for _ in range(2):
        errlog = tmp_path / "child.err"
        with errlog.open("wb") as err, subprocess.Popen(
            [sys.executable, str(script), str(root), layout],
            stdout=subprocess.PIPE, stderr=err, env=env,
        ) as proc:
            try:
                assert proc.stdout is not None
                line = proc.stdout.readline()
                assert line.strip() == b"ready", errlog.read_text()
                time.sleep(rng.uniform(0.05, 0.4))
                assert proc.poll() is None, "the writer finished before it was killed"
                proc.send_signal(signal.SIGKILL)
            finally:
                proc.kill()  # no-op once dead; never leave a writer behind on failure
                proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        _big_verify(root, layout)
        FIGURES["kills_survived"] += 1
        # What the writer wrote, it wrote fully; reset to the known old data for the next kill.
        zarr.open_array(LocalStore(root), path="arr")[...] = (
            np.arange(np.prod(BIG), dtype="float64").reshape(BIG) + 1
        )


def teardown_module() -> None:
    """Print the figures for docs/reliability.md (``CUZARR_FIGURES=1 pytest -s ...``)."""
    if os.environ.get("CUZARR_FIGURES"):
        print(f"\nhardening faults: {FIGURES}")
