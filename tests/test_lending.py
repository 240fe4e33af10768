"""When the batch helper's calls take the helper threads their callers offer (``cz_lending``).

A single Blosc chunk read split into parts only gains where its helper threads find idle CPUs.
Under Dask, with one chunk a task, every worker thread reads at once and the helpers only queue
for the CPUs (a sum over a Blosc-zstd array, 2 threads: 327-340 ms without them, 415-427 ms
with). The default, ``"idle"``, lets such a read take at most the calling thread's CPUs less the
threads running on the system at that moment; these tests make the machine busy (another
process spinning) or small (the caller confined to one CPU) and check that no chunk is then read
split, and that ``"always"`` would have split it. Writes (``put_boxes``) take what they are
offered except under ``"never"``, and write the same files in every mode.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr import _native
from cuzarr.codecs import blosc_batch
from cuzarr.testing import assert_same_array, use_pipeline

pytestmark = pytest.mark.skipif(
    _native.helper() is None or blosc_batch._getitem() is None,
    reason=f"batch helper with c-blosc's getitem: {_native.unavailable_reason()}",
)

LINUX = sys.platform.startswith("linux")
SHAPE, CHUNKS = (16, 96, 512), (8, 96, 512)  # 768 KiB u2 chunks: split when lent helpers
ONE = np.s_[0:8, 0:96, :]


@pytest.fixture
def array(tmp_path: Path) -> tuple[cuzarr.Array, np.ndarray]:
    rng = np.random.default_rng(5)
    data = (rng.integers(0, 200, SHAPE) + np.arange(SHAPE[-1]) // 5).astype("u2")
    path = tmp_path / "a.zarr"
    z = zarr.create_array(
        zarr.storage.LocalStore(path), shape=SHAPE, chunks=CHUNKS, dtype="u2", fill_value=0,
        compressors=zarr.codecs.BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"),
    )
    with use_pipeline("zarr"):
        z[...] = data
    a = cuzarr.open(path, settings=cuzarr.Settings(threads=2))
    assert isinstance(a, cuzarr.Array)
    return a, data


def _splits_of_one_read(a: cuzarr.Array, data: np.ndarray) -> int:
    """Read one chunk on this thread (equal to ``data``); how many reads were split."""
    before = blosc_batch.split_reads()
    assert_same_array(a[ONE], data[ONE])
    return blosc_batch.split_reads() - before


@pytest.fixture
def confined() -> Iterator[set[int]]:
    """This thread confined to two of its CPUs for the test (its affinity restored after)."""
    if not LINUX or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs Linux and two CPUs this process may use")
    kept = os.sched_getaffinity(0)
    two = set(sorted(kept)[:2])
    os.sched_setaffinity(0, two)  # the calling thread only (Linux)
    try:
        yield two
    finally:
        os.sched_setaffinity(0, kept)


SPIN = "import sys\nprint('spinning', flush=True)\nwhile True:\n    pass\n"


@pytest.fixture
def spinner() -> Iterator[None]:
    """Another process that keeps one CPU busy (always runnable) for the test."""
    proc = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "spinning"
        yield
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def test_modes_are_checked_and_restored() -> None:
    previous = _native.set_lending("never")
    try:
        assert _native.set_lending("always") == "never"
        with pytest.raises(ValueError, match="lending mode: expected one of"):
            _native.set_lending("sometimes")
        assert _native.set_lending("always") == "always"  # the bad mode changed nothing
        with pytest.raises(KeyError), _native.lending("idle"):
            assert _native.set_lending("idle") == "idle"
            raise KeyError("inside")
        assert _native.set_lending("always") == "always"  # restored on the way out
    finally:
        _native.set_lending(previous)
    assert previous == "idle"  # the default


@pytest.mark.skipif(not LINUX, reason="/proc/loadavg")
def test_running_threads_count_this_one() -> None:
    got = _native.running_threads()
    assert got is not None and got >= 1


def test_never_lends(array: tuple[cuzarr.Array, np.ndarray]) -> None:
    a, data = array
    with _native.lending("never"):
        assert _splits_of_one_read(a, data) == 0
    with _native.lending("always"):
        assert _splits_of_one_read(a, data) == 1


def test_idle_lends_nothing_to_a_thread_on_one_cpu(
    array: tuple[cuzarr.Array, np.ndarray], confined: set[int]
) -> None:
    a, data = array
    os.sched_setaffinity(0, {min(confined)})  # one CPU: the caller itself runs on it
    with _native.lending("idle"):
        assert _splits_of_one_read(a, data) == 0
    with _native.lending("always"):
        assert _splits_of_one_read(a, data) == 1


def test_idle_lends_nothing_while_other_threads_keep_the_cpus_busy(
    array: tuple[cuzarr.Array, np.ndarray], confined: set[int], spinner: None
) -> None:
    """Two CPUs for the caller, another process always running: none idle, nothing split."""
    a, data = array
    deadline = time.monotonic() + 10
    while (_native.running_threads() or 0) < 2:  # the spinner is counted once it runs
        assert time.monotonic() < deadline, "the spinning process never showed as running"
        time.sleep(0.01)
    with _native.lending("idle"):
        for _ in range(5):
            assert _splits_of_one_read(a, data) == 0
    with _native.lending("always"):
        assert _splits_of_one_read(a, data) == 1


def test_writes_are_the_same_whatever_the_mode(tmp_path: Path) -> None:
    """put_boxes offered helpers writes the same files lent none, some or all."""
    rng = np.random.default_rng(3)
    value = rng.integers(0, 1 << 12, (64, 40), dtype="uint16")
    starts = [(8 * i, 0) for i in range(8)]
    kw = dict(tag=b".t-", first=0, suffix=b".p", exchange=False, exchange_min=0)
    for mode in _native.LENDING_MODES:
        folder = tmp_path / mode
        folder.mkdir()
        paths = [os.fsencode(folder / f"c{i}") for i in range(8)]
        with _native.lending(mode):
            status = _native.put_boxes(paths, value, starts, (8, 40), None, helpers=3, **kw)
        assert status == [0] * 8
        for i in range(8):
            assert (folder / f"c{i}").read_bytes() == value[8 * i : 8 * i + 8].tobytes()
