"""kvikio's ``GDSStore`` handed to zarr, with cuzarr's pipeline: read as the folder it is.

kvikio documents GPU reads of Zarr as ``zarr.config.enable_gpu()``, then
``zarr.open_array(kvikio.zarr.GDSStore(root))[...]``. ``GDSStore`` is zarr's ``LocalStore``
whose ``get`` reads the same files with kvikio into the caller's buffers, so cuzarr reads the
folder itself (kvikio device reads into one buffer per wave on the GPU, its local reads on the
CPU) and writes through the store's own ``set`` (see ``cuzarr._zarr_equivalence.gds_store_root``).
A subclass or a patch that replaces ``get`` goes through the store's API. Under the simulator
``kvikio.zarr`` is ``tests/gpu_sim/_kvikio_zarr.py``, a copy of kvikio 26.10's source over the
simulated ``kvikio.CuFile``; on a real GPU these tests run against the real kvikio.
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.stores import FolderReadsChunkStore, ZarrChunkStore, from_zarr_store

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
kvikio_zarr = pytest.importorskip("kvikio.zarr")
GDSStore = kvikio_zarr.GDSStore

CODECS = {
    "zstd": {"compressors": [zarr.codecs.ZstdCodec(level=3)]},
    "uncompressed": {"compressors": None},
}
SHAPE, CHUNKS = (40, 33), (10, 8)
N_CHUNKS = 4 * 5


@pytest.fixture
def store_reads(sim, monkeypatch):
    """Paths the stand-in ``GDSStore.get`` read (its module's ``_read``, not the class)."""
    from gpu_sim import _kvikio_zarr

    seen: list[str] = []
    real = _kvikio_zarr._read

    def counting(path, prototype, byte_range):
        seen.append(path.name)
        return real(path, prototype, byte_range)

    monkeypatch.setattr(_kvikio_zarr, "_read", counting)
    return seen


def _cpu_written(path, codec):
    z = zarr.create_array(path, shape=SHAPE, chunks=CHUNKS, dtype="<i4", **CODECS[codec])
    data = (np.arange(40 * 33, dtype="<i4") * 7919 % 10007).reshape(SHAPE)
    z[...] = data
    return data


def _events(sim, kind):
    return [e for e in sim.events if e.kind == kind]


def test_a_gdsstore_is_its_folder_for_reads_and_its_api_for_writes(tmp_path, sim):
    store = GDSStore(tmp_path)
    chunk_store = from_zarr_store(store)
    assert isinstance(chunk_store, FolderReadsChunkStore)
    assert chunk_store.caps.device_reads and not chunk_store.caps.remote
    # Its writes run on zarr's loop through the store's API: the pipeline never runs a write
    # on that loop (it would wait on itself).
    assert chunk_store.caps.loop_writes and chunk_store.api.caps.loop_writes
    assert chunk_store.local.root == tmp_path
    assert chunk_store.api._store is store
    assert from_zarr_store(GDSStore(tmp_path, read_only=True)).local.read_only


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_enable_gpu_reads_of_a_gdsstore_use_cuzarrs_device_reads(tmp_path, sim, store_reads, codec):
    data = _cpu_written(tmp_path / "a", codec)
    with zarr.config.enable_gpu(), cuzarr.configure(strict=True):
        z = zarr.open_array(GDSStore(tmp_path / "a"), mode="r")
        metadata = list(store_reads)  # zarr reads the metadata through the store
        assert "zarr.json" in metadata
        sim.reset()
        cuzarr.reset_stats()
        got = z[...]
        part = z[3:29, 5:31]
    assert isinstance(got, cp.ndarray) and isinstance(part, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(got), data)
    np.testing.assert_array_equal(cp.asnumpy(part), data[3:29, 5:31])
    assert store_reads == metadata  # no chunk through GDSStore.get
    reads = _events(sim, "cufile")
    # Every chunk of both reads (20 + 3 x 4) read by cuzarr's kvikio reads into device memory,
    # no upload (but nvCOMP's pointer tables).
    n_read = N_CHUNKS + 3 * 4
    assert len(reads) == n_read and all(e.info["device"] for e in reads)
    assert not sim.data_transfers("h2d")
    stats = cuzarr.stats()
    assert stats.get("fallback_reads", 0) == 0
    assert stats.get("gpu_cpu_decodes", 0) == 0
    if codec == "zstd":
        assert stats["gpu_device_reads"] == n_read
        assert len(_events(sim, "decode")) == 2  # one nvCOMP call per wave


def test_cpu_reads_of_a_gdsstore_read_the_folder(tmp_path, sim, store_reads):
    data = _cpu_written(tmp_path / "a", "zstd")
    with cuzarr.configure(strict=True):
        z = zarr.open_array(GDSStore(tmp_path / "a"), mode="r")
        metadata = list(store_reads)
        sim.reset()
        cuzarr.reset_stats()
        got = z[...]
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, data)
    assert store_reads == metadata  # no chunk through GDSStore.get
    assert cuzarr.stats().get("engine_reads", 0) > 0
    assert not _events(sim, "cufile")  # the CPU engine's own reads


class CountingGDSStore(GDSStore):
    """A subclass that does something of its own in ``get``."""

    calls = 0

    async def get(self, key, prototype=None, byte_range=None):
        type(self).calls += 1
        return await super().get(key, prototype, byte_range)


def test_a_gdsstore_subclass_overriding_get_goes_through_its_api(tmp_path, sim, store_reads):
    data = _cpu_written(tmp_path / "a", "zstd")
    store = CountingGDSStore(tmp_path / "a")
    assert isinstance(from_zarr_store(store), ZarrChunkStore)
    CountingGDSStore.calls = 0
    with zarr.config.enable_gpu(), cuzarr.configure(strict=True):
        got = zarr.open_array(store, mode="r")[...]
    assert isinstance(got, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(got), data)
    chunk_reads = [name for name in store_reads if not name.startswith((".", "zarr"))]
    assert len(chunk_reads) == N_CHUNKS  # every chunk through the subclass's get
    assert CountingGDSStore.calls == len(store_reads)
    assert "gpu_device_reads" not in cuzarr.stats()


def test_a_patched_gdsstore_get_goes_through_the_api(tmp_path, sim, monkeypatch):
    _cpu_written(tmp_path / "a", "zstd")
    real = GDSStore.get

    async def logged(self, key, prototype=None, byte_range=None):
        return await real(self, key, prototype, byte_range)

    monkeypatch.setattr(GDSStore, "get", logged)
    assert isinstance(from_zarr_store(GDSStore(tmp_path / "a")), ZarrChunkStore)
    monkeypatch.undo()
    assert isinstance(from_zarr_store(GDSStore(tmp_path / "a")), FolderReadsChunkStore)
    store = GDSStore(tmp_path / "a")
    store.get = logged.__get__(store)  # an instance override
    assert isinstance(from_zarr_store(store), ZarrChunkStore)


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_writes_through_a_gdsstore_use_its_set(tmp_path, sim, codec):
    data = _cpu_written(tmp_path / "a", codec)
    with zarr.config.enable_gpu(), cuzarr.configure(strict=True):
        z = zarr.open_array(GDSStore(tmp_path / "a"), mode="r+")
        sim.reset()
        cuzarr.reset_stats()
        z[5:25, 3:20] = cp.asarray(data[5:25, 3:20] + 1)  # partial chunks
        z[30:40, :] = cp.asarray(np.zeros((10, 33), "<i4"))  # empty chunks are deleted
    data[5:25, 3:20] += 1
    data[30:40, :] = 0
    stats = cuzarr.stats()
    assert stats.get("fallback_writes", 0) == 0
    # Each rewritten chunk by one GDSStore.set (kvikio's CuFile.write), none replaced by cuzarr.
    written = {e.name for e in _events(sim, "cufile-write")}
    assert len(written) == 3 * 3 and all(name.startswith(str(tmp_path)) for name in written)
    assert not list((tmp_path / "a").rglob("*.partial"))
    assert not list((tmp_path / "a" / "c" / "3").iterdir())  # deleted through the store
    # zarr's own pipeline (no cuzarr, CPU buffers) reads what was written.
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)


def test_numpy_writes_and_new_arrays_through_a_gdsstore(tmp_path, sim):
    data = np.arange(40 * 33, dtype="<f8").reshape(SHAPE)
    with cuzarr.configure(strict=True):
        z = zarr.create_array(
            GDSStore(tmp_path / "b"),
            shape=SHAPE,
            chunks=CHUNKS,
            dtype="<f8",
            compressors=[zarr.codecs.ZstdCodec()],
        )
        z[...] = data
        z[1:3, 1:3] = -1.0
    data[1:3, 1:3] = -1.0
    assert len({e.name for e in _events(sim, "cufile-write")}) == 1 + N_CHUNKS
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "b", mode="r")[...], data)


def test_sharded_partial_writes_through_a_gdsstore(tmp_path, sim):
    z = zarr.create_array(
        GDSStore(tmp_path / "s"),
        shape=SHAPE,
        chunks=CHUNKS,
        shards=(20, 16),
        dtype="<i4",
        compressors=[zarr.codecs.ZstdCodec()],
    )
    data = (np.arange(40 * 33, dtype="<i4") * 31 % 1009).reshape(SHAPE)
    z[...] = data
    with zarr.config.enable_gpu(), cuzarr.configure(strict=True):
        z = zarr.open_array(GDSStore(tmp_path / "s"), mode="r+")
        sim.reset()
        z[5:15, 3:12] = cp.asarray(data[5:15, 3:12] * 2)  # inner chunks of one shard kept
        got = z[...]
    data[5:15, 3:12] *= 2
    assert cuzarr.stats().get("fallback_writes", 0) == 0
    assert [e.name.rsplit("/", 3)[-3:] for e in _events(sim, "cufile-write")] == [["c", "0", "0"]]
    assert not list((tmp_path / "s").rglob("*.partial"))
    np.testing.assert_array_equal(cp.asnumpy(got), data)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "s", mode="r")[...], data)


def test_cuzarr_open_of_a_gdsstore_reads_its_folder_on_the_device(tmp_path, sim, store_reads):
    data = _cpu_written(tmp_path / "a", "zstd")
    a = cuzarr.open(GDSStore(tmp_path / "a"), device="gpu")
    metadata = list(store_reads)
    sim.reset()
    cuzarr.reset_stats()
    got = a[...]
    np.testing.assert_array_equal(cp.asnumpy(got), data)
    assert store_reads == metadata
    assert cuzarr.stats()["gpu_device_reads"] == N_CHUNKS
