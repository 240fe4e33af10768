"""The batch helper's own threads (``cz_pool`` in ``czbatch.c``) taking boxes of a put_boxes call.

Whichever thread encodes and writes a box, the file is the same: these tests compare every
file with the calling thread's own (``helpers=0``), for each compressor kind, and check what
must hold around the threads: a failed box fails alone, callers on several threads at once,
a forked child (whose helpers do not exist), and the engine lending its other threads only to
a write that runs on the calling thread.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, ZstdCodec
from zarr.storage import LocalStore

import cuzarr
from cuzarr import _native
from cuzarr.codecs import blosc_batch, zstd_batch
from put_boxes_calls import record_put_boxes
from threaded import run_threads

pytestmark = pytest.mark.skipif(
    _native.helper() is None, reason=f"batch helper: {_native.unavailable_reason()}"
)

KW: dict[str, Any] = dict(tag=b".t-", first=0, suffix=b".p", exchange=False, exchange_min=0)


@pytest.fixture(autouse=True)
def _lend_always() -> Iterator[None]:
    """These tests are about the helpers: they lend them whatever else runs on the machine.

    (The default, ``"idle"`` lending, lends none while other threads keep the CPUs busy:
    tests/test_lending.py.)
    """
    with _native.lending("always"):
        yield


def _compressors() -> dict[str, _native.Compressor | None]:
    found: dict[str, _native.Compressor | None] = {"raw": None}
    blosc = blosc_batch.compressor(blosc_batch.BloscParams(b"zstd", 5, 1, 2, 0))
    if blosc is not None:
        found["blosc"] = blosc
    for encoder in ("numcodecs", "zstandard"):
        zstd = zstd_batch.compressor(numcodecs.Zstd(level=3), encoder)
        if zstd is not None:
            found[f"zstd-{encoder}"] = zstd
    return found


COMPRESSORS = _compressors()


def _value() -> np.ndarray[Any, Any]:
    """A strided view (boxes are copied into C order), compressible and not."""
    rng = np.random.default_rng(11)
    base = rng.integers(0, 1 << 16, (48, 40, 33), dtype="uint16") >> rng.integers(0, 16, 1)
    base[::2] //= 97
    return base[:, :, 1:]


def _put(
    root: Path, n: int, helpers: int, compressor: _native.Compressor | None
) -> tuple[list[int], dict[str, bytes]]:
    value = _value()
    starts = [(8 * (i % 6), 8 * ((i // 6) % 5), 16 * (i // 30)) for i in range(n)]
    root.mkdir()
    paths = [os.fsencode(root / f"c{i}") for i in range(n)]
    status = _native.put_boxes(paths, value, starts, (8, 8, 16), compressor, helpers=helpers, **KW)
    return status, {p.name: p.read_bytes() for p in root.iterdir()}


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
@pytest.mark.parametrize("n", [2, 7, 60])
def test_files_written_by_helpers_are_the_callers_files(tmp_path: Path, kind: str, n: int) -> None:
    want_status, want = _put(tmp_path / "alone", n, 0, COMPRESSORS[kind])
    assert want_status == [0] * n and len(want) == n
    for helpers in (1, 3, _native.MAX_HELPERS):
        status, files = _put(tmp_path / f"h{helpers}", n, helpers, COMPRESSORS[kind])
        assert status == [0] * n
        assert files == want


def test_a_box_that_fails_fails_alone(tmp_path: Path) -> None:
    """Boxes whose file cannot be written (a folder there) get their errno; the rest land."""
    value = np.arange(64 * 8, dtype="uint8").reshape(64, 8)
    paths = []
    for i in range(16):
        path = tmp_path / f"c{i}"
        if i % 5 == 2:
            (path / "inside").mkdir(parents=True)  # rename over a folder that is not empty
        paths.append(os.fsencode(path))
    starts = [(4 * i, 0) for i in range(16)]
    status = _native.put_boxes(paths, value, starts, (4, 8), None, helpers=3, **KW)
    for i, code in enumerate(status):
        if i % 5 == 2:
            assert code < 0 and code != _native.NOT_ENCODED
            assert (tmp_path / f"c{i}").is_dir()
        else:
            assert code == 0
            assert (tmp_path / f"c{i}").read_bytes() == value[4 * i : 4 * i + 4].tobytes()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".p")]  # no temporary left


def test_callers_on_several_threads_at_once(tmp_path: Path) -> None:
    """One call is helped at a time; the others run alone and all write their files."""
    compressor = COMPRESSORS.get("zstd-numcodecs") or COMPRESSORS["raw"]
    _, want = _put(tmp_path / "want", 12, 0, compressor)

    def caller(k: int) -> None:
        for r in range(15):
            status, files = _put(tmp_path / f"t{k}-{r}", 12, 2, compressor)
            assert status == [0] * 12 and files == want

    run_threads([functools.partial(caller, k) for k in range(4)])



def test_calls_closing_together_each_wait_only_for_their_own_helpers(tmp_path: Path) -> None:
    """Short calls on three threads at once, in many bursts: none waits for ever.

    A call can open its job while a helper of a closed call still finishes a box; both calls
    then wait for helpers. The pool once counted seated helpers for all jobs and woke one
    waiting call when the count fell to zero, so the other call waited until some later call
    ended: the last burst of a program hung (seen in CI as a hung thread in the test above;
    this test failed 4 runs in 4 against that pool on a 2-core VM, within 21 s).
    """
    value = np.zeros((3 * 8, 1024), dtype="uint8")
    value[:, ::7] = np.arange(24, dtype="uint8")[:, None]

    def caller(folder: Path) -> None:
        paths = [os.fsencode(folder / f"c{i}") for i in range(3)]
        status = _native.put_boxes(
            paths, value, [(8 * i, 0) for i in range(3)], (8, 1024), None, helpers=2, **KW
        )
        assert status == [0] * 3
        for i in range(3):
            assert (folder / f"c{i}").read_bytes() == value[8 * i : 8 * i + 8].tobytes()

    folders = [tmp_path / f"t{k}" for k in range(3)]
    for folder in folders:
        folder.mkdir()
    for _ in range(1000):  # each burst replaces the files of the one before
        run_threads([functools.partial(caller, f) for f in folders], timeout=20)


FORKED = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from cuzarr import _native

    _native.set_lending("always")  # helpers whatever else runs (tests/test_lending.py)

    def put(folder, helpers):
        os.makedirs(folder)
        value = np.arange(32 * 16, dtype="uint16").reshape(32, 16)
        paths = [os.fsencode(os.path.join(folder, f"c{i}")) for i in range(8)]
        starts = [(4 * i, 0) for i in range(8)]
        kw = dict(tag=b".t-", first=0, suffix=b".p", exchange=False, exchange_min=0)
        status = _native.put_boxes(paths, value, starts, (4, 16), None, helpers=helpers, **kw)
        assert status == [0] * 8, status
        for i in range(8):
            with open(paths[i], "rb") as f:
                assert f.read() == value[4 * i : 4 * i + 4].tobytes()

    put(os.path.join(sys.argv[1], "parent"), 2)  # the helpers exist now
    pid = os.fork()
    if pid == 0:
        put(os.path.join(sys.argv[1], "child"), 2)  # new helpers in the child
        os._exit(0)
    _, code = os.waitpid(pid, 0)
    put(os.path.join(sys.argv[1], "after"), 2)  # the parent's helpers still serve
    print("child", os.waitstatus_to_exitcode(code))
    """
)


def test_a_forked_child_makes_its_own_helpers(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORKED, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "child 0"
    assert len(list((tmp_path / "child").iterdir())) == 8


def _affinities() -> dict[str, str]:
    """Every thread of this process: its allowed CPUs (``Cpus_allowed_list``)."""
    found = {}
    for task in Path("/proc/self/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                found[task.name] = line.split(":", 1)[1].strip()
    return found


needs_two_cpus = pytest.mark.skipif(
    not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux and two CPUs this process may use",
)


@needs_two_cpus
def test_a_helper_on_its_callers_cpu_leaves_it_and_restores_its_affinity() -> None:
    # cz_leave_cpu_probe runs the helper's step on this thread: leave the current CPU (the
    # kernel moves the thread at once), then restore the affinity it had.
    lib = _native.helper()
    assert lib is not None
    assert lib.cz_leave_cpu_probe() == 7  # left, ran elsewhere, affinity restored


@needs_two_cpus
def test_a_thread_confined_to_one_cpu_stays_there() -> None:
    lib = _native.helper()
    assert lib is not None
    keep = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(keep)})  # this thread only
        assert lib.cz_leave_cpu_probe() == 4  # nowhere to go: nothing changed
        assert os.sched_getaffinity(0) == {min(keep)}
    finally:
        os.sched_setaffinity(0, keep)


@needs_two_cpus
@pytest.mark.parametrize("kind", ["raw", "zstd-numcodecs"])
def test_helped_calls_from_worker_threads_leave_every_affinity_as_it_was(
    tmp_path: Path, kind: str
) -> None:
    """As zarr's synchronous API calls the engine: from a thread the caller waits on."""
    if kind not in COMPRESSORS:
        pytest.skip(f"{kind} is not available")
    before = _affinities()
    _, want = _put(tmp_path / "want", 8, 0, COMPRESSORS[kind])
    with ThreadPoolExecutor(1) as pool:
        for r in range(40):
            status, files = pool.submit(_put, tmp_path / f"r{r}", 8, 1, COMPRESSORS[kind]).result()
            assert status == [0] * 8 and files == want
    after = _affinities()
    assert {after[t] for t in after} == {before[next(iter(before))]}


def test_helpers_out_of_range_are_refused(tmp_path: Path) -> None:
    a = np.zeros((4, 4), np.uint8)
    path = [os.fsencode(tmp_path / "x")]
    for helpers in (-1, _native.MAX_HELPERS + 1):
        with pytest.raises(ValueError, match="helpers"):
            _native.put_boxes(path, a, [(0, 0)], (2, 2), None, helpers=helpers, **KW)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("compressors", ["zstd", "blosc"])
def test_the_engine_lends_its_other_threads_to_a_write_on_the_calling_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compressors: str
) -> None:
    codec: Any = ZstdCodec(level=3) if compressors == "zstd" else BloscCodec(cname="lz4")
    root = tmp_path / "a"
    zarr.create_array(
        LocalStore(root), shape=(64, 64, 64), chunks=(16, 16, 16), dtype="uint16",
        compressors=codec,
    )
    value = np.arange(64**3, dtype="uint16").reshape(64, 64, 64)
    seen = record_put_boxes(monkeypatch)
    asked = seen.calls
    for threads in (1, 2, 4):
        asked.clear()
        arr = cuzarr.open(root, mode="r+", settings=cuzarr.Settings(threads=threads))
        arr[:32, :32, :32] = value[:32, :32, :32] + threads  # 8 chunks: one batch
        assert asked == [(8, threads - 1)]
        np.testing.assert_array_equal(arr[:32, :32, :32], value[:32, :32, :32] + threads)
    asked.clear()
    arr = cuzarr.open(root, mode="r+", settings=cuzarr.Settings(threads=2))
    arr[...] = value  # 64 chunks
    assert sum(n for n, _ in asked) == 64
    if compressors == "zstd":  # batches of 16 on both threads: none lent
        assert len(asked) > 1 and {h for _, h in asked} == {0}
    else:  # light chunks: one batch on the calling thread (the GIL's handoffs cost more)
        assert asked == [(64, 1)]
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}):
        np.testing.assert_array_equal(zarr.open_array(LocalStore(root))[...], value)
