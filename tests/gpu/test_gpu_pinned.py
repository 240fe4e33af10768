"""The pinned stages of the GPU's host copies stay bounded, and windows give the same bytes.

Each thread uploads (``pinned.upload``) and downloads (``GpuHostBackend.decode``) waves through
its own pinned buffer, which stops growing at ``pinned.STAGE_BYTES``; larger waves go through
it in windows. The stage is made small here so that the arrays below need several windows.
Data checks run on a real GPU too; the copy counts read the device simulator's record.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import zarr

import cuzarr

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

from cuzarr.gpu import pinned  # noqa: E402  (imports CuPy: only once it is there)

STAGE = 4096


@pytest.fixture
def small_stage(monkeypatch):
    monkeypatch.setattr(pinned, "STAGE_BYTES", STAGE)
    monkeypatch.setattr(pinned, "MIN_STAGE_BYTES", 512)
    # Stages made before hold more than this test's bound: start from fresh ones.
    monkeypatch.setattr(pinned, "_uploads", pinned.PinnedStage("uploads"))


def _copies(sim, kind):
    return [e for e in sim.data_transfers(kind) if e.info["pinned"]]


def _parts(rng, n, big=False):
    sizes = rng.integers(0, 3 * STAGE if big else 900, n)
    return [rng.integers(0, 256, int(s), dtype=np.uint8).tobytes() for s in sizes]


@pytest.mark.parametrize("leads", [False, True])
@pytest.mark.parametrize("big", [False, True])
def test_upload_in_windows_puts_every_part_at_its_offset(small_stage, leads, big):
    rng = np.random.default_rng(7 + big + 2 * leads)
    parts = _parts(rng, 40, big)
    lead = [int(x) for x in rng.integers(0, 9, len(parts))] if leads else None
    dev, offsets, sizes = pinned.upload(parts, lead)
    host = cp.asnumpy(dev)
    assert sizes == [len(p) for p in parts]
    for p, off, lead_i in zip(parts, offsets, lead or [0] * len(parts), strict=True):
        assert (off + lead_i) % 16 == 0  # nvCOMP's alignment, of the lead byte
        assert host[off : off + len(p)].tobytes() == p
    assert pinned._uploads.held() <= STAGE


def test_upload_of_one_window_or_less_is_one_copy(small_stage, sim):
    parts = [b"x" * 1000, b"y" * 1000]
    pinned.upload(parts)
    assert len(_copies(sim, "h2d")) == 1
    sim.reset()
    parts = [b"z" * 3000] * 5  # 5 slots of 3008 bytes: 15,040 bytes, 4 windows
    dev, offsets, _ = pinned.upload(parts)
    assert len(_copies(sim, "h2d")) == 4
    assert all(e.info["nbytes"] <= STAGE for e in _copies(sim, "h2d"))
    assert cp.asnumpy(dev)[offsets[4] : offsets[4] + 3000].tobytes() == parts[4]


def test_a_device_read_from_the_host_goes_through_a_bounded_stage(small_stage, sim):
    store = zarr.storage.MemoryStore()
    z = zarr.create_array(
        store, shape=(96, 90), chunks=(16, 15), dtype="<f4",
        compressors=[zarr.codecs.ZstdCodec()],
    )
    data = np.random.default_rng(1).random((96, 90), dtype=np.float32)
    z[...] = data
    a = cuzarr.open(store, device="gpu")
    sim.reset()
    np.testing.assert_array_equal(cp.asnumpy(a[...]), data)
    # 36 chunks of ~1 KiB stored (random floats barely compress): several windows, one
    # nvCOMP call.
    assert len(_copies(sim, "h2d")) > 1
    assert len([e for e in sim.events if e.kind == "decode"]) == 1
    assert pinned._uploads.held() <= STAGE


def _auto(path, mode="r"):
    # Crossover at one chunk: every read and write of these arrays runs on the GPU.
    settings = cuzarr.Settings(gpu_crossover_bytes=16 * 15 * 4)
    return cuzarr.open(path, mode=mode, device="auto", settings=settings)


def _written(path):
    z = zarr.create_array(
        path, shape=(96, 90), chunks=(16, 15), dtype="<f4",
        compressors=[zarr.codecs.ZstdCodec()],
    )
    data = (np.arange(96 * 90, dtype="<f4") * 0.5).reshape(96, 90)
    z[...] = data
    return data


@pytest.mark.parametrize(
    "sel",
    [
        (...,),
        (slice(3, 90), slice(5, 81)),  # partial chunks: decoded whole, then scattered
        (slice(16, 48), slice(15, 45)),  # whole chunks only
    ],
)
def test_a_wave_larger_than_the_stage_comes_back_in_windows(small_stage, tmp_path, sel):
    data = _written(tmp_path / "a")
    a = _auto(tmp_path / "a")
    assert a._engine.backend.name == "gpu-host"
    np.testing.assert_array_equal(a[sel], data[sel])
    assert a._engine.backend._stage.held() <= STAGE


def test_windows_are_whole_chunks_one_copy_each(small_stage, tmp_path, sim):
    data = _written(tmp_path / "a")
    a = _auto(tmp_path / "a")
    sim.reset()
    np.testing.assert_array_equal(a[...], data)
    downloads = _copies(sim, "d2h")
    unit = 16 * 15 * 4  # 960 bytes: 4 chunks a window of 4,096
    assert [e.info["nbytes"] for e in downloads] == [4 * unit] * 9  # 36 chunks, one wave


def test_a_chunk_larger_than_the_stage_grows_it_to_one_chunk(small_stage, tmp_path):
    z = zarr.create_array(
        tmp_path / "a", shape=(64, 64), chunks=(32, 64), dtype="<f4",
        compressors=[zarr.codecs.ZstdCodec()],
    )
    data = np.arange(64 * 64, dtype="<f4").reshape(64, 64)
    z[...] = data
    a = cuzarr.open(
        tmp_path / "a", device="auto", settings=cuzarr.Settings(gpu_crossover_bytes=8192)
    )
    np.testing.assert_array_equal(a[...], data)
    np.testing.assert_array_equal(a[1:63, 2:60], data[1:63, 2:60])
    assert a._engine.backend._stage.held() == 32 * 64 * 4


def test_writes_through_windows_round_trip(small_stage, tmp_path):
    data = _written(tmp_path / "a")
    a = _auto(tmp_path / "a", mode="r+")
    new = data[::-1, ::-1] + 1
    a[...] = new
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], new)
    assert pinned._uploads.held() <= STAGE


def test_each_thread_holds_at_most_one_stage(small_stage, tmp_path):
    data = _written(tmp_path / "a")
    a = _auto(tmp_path / "a")
    held, errors = [], []

    def read() -> None:
        try:
            np.testing.assert_array_equal(a[...], data)
            held.append(a._engine.backend._stage.held())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(held) == 4 and all(0 < h <= STAGE for h in held)
