"""How a wave runs on the device: one upload, one nvCOMP call, no synchronizing size query.

These tests read the device simulator's record (tests/gpu_sim) and are skipped on a real GPU,
where the same properties are measured by bench/gpu_check instead.
"""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.errors import CorruptChunkError

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")


def _events(sim, kind, name=None):
    return [e for e in sim.events if e.kind == kind and (name is None or e.name == name)]


SYNC_QUERIES = {"decode-configure", "decompression_config", "get_uncomp_buffer_size"}


@pytest.mark.parametrize(
    ("compressors", "algorithm", "crc_launches"),
    [
        ([zarr.codecs.ZstdCodec(level=3)], "Zstd", 0),
        # gzip: its CRC-32 of the decoded bytes, checked on the device.
        ([zarr.codecs.GzipCodec(level=5)], "Deflate", 1),
        ([zarr.codecs.ZstdCodec(), zarr.codecs.Crc32cCodec()], "Zstd", 1),
    ],
    ids=["zstd", "gzip", "zstd-crc32c"],
)
def test_one_wave_one_upload_one_decode_call(tmp_path, sim, compressors, algorithm, crc_launches):
    z = zarr.create_array(
        tmp_path / "a", shape=(64, 60), chunks=(16, 15), dtype="<f4", compressors=compressors
    )
    data = np.arange(64 * 60, dtype="<f4").reshape(64, 60)
    z[...] = data
    a = cuzarr.open(tmp_path / "a", device="gpu")
    sim.reset()
    got = a[...]
    np.testing.assert_array_equal(cp.asnumpy(got), data)
    decodes = _events(sim, "decode", algorithm)
    assert len(decodes) == 1, decodes
    assert decodes[0].info["n"] == 16
    assert decodes[0].info["configured"] and decodes[0].info["out"]
    assert not [e for e in _events(sim, "sync") if e.name in SYNC_QUERIES]
    # Local chunk files: kvikio reads every file straight into device memory; the host reads
    # only each file's first and last bytes. No pinned upload of chunk bytes.
    reads = _events(sim, "cufile")
    assert len(reads) == 16 and all(e.info["device"] for e in reads)
    assert not [e for e in _events(sim, "h2d") if e.info["pinned"]]
    assert cuzarr.stats()["gpu_device_reads"] == 16
    # Checksums: one kernel launch for the wave (crc32c of the stored chunks, or gzip's CRC-32
    # of the decoded ones), its tables uploaded in one small copy; none on the host.
    assert len(_events(sim, "launch", "cuzarr_crc")) == crc_launches
    assert len(sim.data_transfers("h2d")) == crc_launches
    assert cuzarr.stats().get("gpu_host_crc32c", 0) == 0
    assert cuzarr.stats().get("gpu_cpu_decodes", 0) == 0


@pytest.mark.parametrize("crc", [False, True])
def test_a_wave_from_the_host_is_one_pinned_upload(sim, crc):
    """Chunks of other stores: one pinned upload per wave, checksums on the device."""
    store = zarr.storage.MemoryStore()
    compressors = [zarr.codecs.ZstdCodec()] + ([zarr.codecs.Crc32cCodec()] if crc else [])
    z = zarr.create_array(
        store, shape=(64, 60), chunks=(16, 15), dtype="<f4", compressors=compressors
    )
    data = np.arange(64 * 60, dtype="<f4").reshape(64, 60)
    z[...] = data
    a = cuzarr.open(store, device="gpu")
    sim.reset()
    np.testing.assert_array_equal(cp.asnumpy(a[...]), data)
    pinned = [e for e in _events(sim, "h2d") if e.info["pinned"]]
    assert len(pinned) == 1
    assert len(_events(sim, "decode", "Zstd")) == 1
    assert len(_events(sim, "launch", "cuzarr_crc")) == int(crc)
    assert cuzarr.stats().get("gpu_host_crc32c", 0) == 0


def test_a_file_replaced_during_a_device_read_is_read_again_on_the_host(tmp_path, sim):
    from gpu_sim import _kvikio

    z = zarr.create_array(
        tmp_path / "a",
        shape=(64,),
        chunks=(16,),
        dtype="<i4",
        compressors=[zarr.codecs.ZstdCodec()],
    )
    z[...] = np.arange(64, dtype="<i4")
    new = np.arange(16, dtype="<i4") + 1000
    a = cuzarr.open(tmp_path / "a", device="gpu")

    def replace_chunk_1(path):
        if path.endswith("/c/1"):
            _kvikio.DURING_READ.clear()
            zarr.open_array(tmp_path / "a", mode="r+")[16:32] = new  # atomic replacement

    _kvikio.DURING_READ.append(replace_chunk_1)
    try:
        got = cp.asnumpy(a[...])
    finally:
        _kvikio.DURING_READ.clear()
    want = np.arange(64, dtype="<i4")
    want[16:32] = new
    np.testing.assert_array_equal(got, want)
    assert cuzarr.stats()["gpu_device_read_retries"] == 1


def test_uncompressed_chunks_are_read_into_their_place(tmp_path, sim):
    z = zarr.create_array(
        tmp_path / "a", shape=(32, 16), chunks=(8, 16), dtype="<u2", compressors=None
    )
    data = np.arange(512, dtype="<u2").reshape(32, 16)
    z[...] = data
    a = cuzarr.open(tmp_path / "a", device="gpu")
    sim.reset()
    np.testing.assert_array_equal(cp.asnumpy(a[8:16]), data[8:16])  # one chunk: into out
    np.testing.assert_array_equal(cp.asnumpy(a[...]), data)  # a wave
    assert len(_events(sim, "cufile")) == 5
    assert not _events(sim, "h2d")


def _ones_zstd(path):
    """A (64, 60) ``<f4`` array of ones in 16 zstd chunks of (16, 15): 960 bytes each."""
    z = zarr.create_array(
        path, shape=(64, 60), chunks=(16, 15), dtype="<f4", compressors=[zarr.codecs.ZstdCodec()]
    )
    z[...] = np.ones((64, 60), "<f4")
    return 16 * 15 * 4


def test_waves_follow_gpu_wave_bytes_not_the_hosts_bound(tmp_path, sim):
    """nvCOMP decodes each stream mostly on its own (H100, 2026-12-06: a wave of eight 8 MiB
    zstd chunks took 28 ms, 128 in one call 19 ms), so the GPU's waves are sized by
    ``gpu_wave_bytes``; ``max_bytes_in_flight`` (host memory) no longer splits them."""
    chunk_bytes = _ones_zstd(tmp_path / "a")
    with cuzarr.configure(max_bytes_in_flight=chunk_bytes):
        a = cuzarr.open(tmp_path / "a", device="gpu")
        sim.reset()
        np.testing.assert_array_equal(cp.asnumpy(a[...]), np.ones((64, 60), "<f4"))
    assert [e.info["n"] for e in _events(sim, "decode", "Zstd")] == [16]
    with cuzarr.configure(max_bytes_in_flight=chunk_bytes, gpu_wave_bytes=4 * chunk_bytes):
        a = cuzarr.open(tmp_path / "a", device="gpu")
        sim.reset()
        np.testing.assert_array_equal(cp.asnumpy(a[...]), np.ones((64, 60), "<f4"))
    assert [e.info["n"] for e in _events(sim, "decode", "Zstd")] == [4, 4, 4, 4]


def test_a_wave_takes_at_most_a_quarter_of_the_free_device_memory(tmp_path, sim, monkeypatch):
    chunk_bytes = _ones_zstd(tmp_path / "a")
    total = 80 << 30
    monkeypatch.setattr(cp.cuda.runtime, "memGetInfo", lambda: (16 * chunk_bytes, total))
    a = cuzarr.open(tmp_path / "a", device="gpu")
    sim.reset()
    np.testing.assert_array_equal(cp.asnumpy(a[...]), np.ones((64, 60), "<f4"))
    assert [e.info["n"] for e in _events(sim, "decode", "Zstd")] == [4, 4, 4, 4]


def test_shard_waves_and_write_waves_follow_gpu_wave_bytes(tmp_path, sim):
    """Shards read and written in waves of ``gpu_wave_bytes`` too: 4 shards of 4 inner chunks,
    one decode call (and one encode call) for all 16 though the host's bound is one chunk."""
    data = np.arange(64 * 64, dtype="<u2").reshape(64, 64)
    inner = 16 * 16 * 2
    with cuzarr.configure(max_bytes_in_flight=inner):
        a = cuzarr.create(
            tmp_path / "s",
            shape=(64, 64),
            chunks=(16, 16),
            shards=(32, 32),
            dtype="<u2",
            compressors=[zarr.codecs.ZstdCodec()],
            device="gpu",
        )
        sim.reset()
        a[...] = cp.asarray(data)
        assert [e.info["n"] for e in _events(sim, "encode", "Zstd")] == [16]
        sim.reset()
        np.testing.assert_array_equal(cp.asnumpy(a[...]), data)
        assert [e.info["n"] for e in _events(sim, "decode", "Zstd")] == [16]
        with cuzarr.configure(gpu_wave_bytes=2 * 32 * 32 * 2):  # two shards a wave
            b = cuzarr.open(tmp_path / "s", device="gpu")
            sim.reset()
            np.testing.assert_array_equal(cp.asnumpy(b[...]), data)
    assert [e.info["n"] for e in _events(sim, "decode", "Zstd")] == [8, 8]
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "s", mode="r")[...], data)


def test_blosc_wave_decodes_streams_in_one_call_and_unshuffles_in_one_launch(tmp_path, sim):
    z = zarr.create_array(
        tmp_path / "a",
        shape=(4096,),
        chunks=(1024,),
        dtype="<u4",
        compressors=[zarr.codecs.BloscCodec(cname="lz4", shuffle="shuffle", blocksize=1024)],
    )
    data = (np.arange(4096, dtype="<u4") * 2654435761) % 100000
    z[...] = data
    a = cuzarr.open(tmp_path / "a", device="gpu")
    sim.reset()
    np.testing.assert_array_equal(cp.asnumpy(a[...]), data)
    decodes = _events(sim, "decode", "LZ4")
    assert len(decodes) == 1 and decodes[0].info["n"] >= 4
    launches = [e.name for e in _events(sim, "launch")]
    assert launches.count("cuzarr_byte_unshuffle") == 1, launches
    assert cuzarr.stats().get("gpu_cpu_decodes", 0) == 0


def test_chains_without_a_gpu_path_decode_on_the_cpu_and_are_counted(tmp_path, sim):
    z = zarr.create_array(
        tmp_path / "a",
        shape=(40,),
        chunks=(10,),
        dtype="<i4",
        zarr_format=2,
        filters=[numcodecs.Delta(dtype="<i4")],
        compressors=None,
    )
    data = np.arange(40, dtype="<i4") ** 2
    z[...] = data
    got = cuzarr.open(tmp_path / "a", device="gpu")[...]
    assert isinstance(got, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(got), data)
    assert cuzarr.stats()["gpu_cpu_decodes"] == 4
    assert not _events(sim, "decode")


def test_gpu_writes_encode_in_one_call_per_wave(tmp_path, sim):
    a = cuzarr.create(
        tmp_path / "a",
        shape=(64,),
        chunks=(16,),
        dtype="<i8",
        compressors=[zarr.codecs.ZstdCodec()],
        device="gpu",
    )
    data = np.arange(64, dtype="<i8") * 7
    sim.reset()
    a[...] = cp.asarray(data)
    encodes = _events(sim, "encode", "Zstd")
    assert len(encodes) == 1 and encodes[0].info["n"] == 4
    assert cuzarr.stats().get("gpu_cpu_encodes", 0) == 0
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)


def test_host_values_are_refused_implicitly(sim):
    """The simulator is as strict as CuPy: no implicit device-to-host conversion."""
    x = cp.arange(4)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(x)
    with pytest.raises(TypeError):
        memoryview(x)
    with pytest.raises(TypeError):
        x + np.arange(4)
    np.testing.assert_array_equal(cp.asnumpy(x + 1), np.arange(4) + 1)


def test_device_reads_of_short_vanishing_and_changing_files(tmp_path, sim):
    from gpu_sim import _kvikio

    z = zarr.create_array(
        tmp_path / "a", shape=(32, 16), chunks=(8, 16), dtype="<u2", compressors=None
    )
    data = np.arange(512, dtype="<u2").reshape(32, 16)
    z[...] = data
    a = cuzarr.open(tmp_path / "a", device="gpu")
    chunk = tmp_path / "a" / "c" / "1" / "0"
    blob = chunk.read_bytes()
    # A file of the wrong size: in a wave, and read alone (straight into the output).
    chunk.write_bytes(blob[:100])
    with pytest.raises(CorruptChunkError, match=r"c/1/0.*100 bytes"):
        a[...]
    with pytest.raises(CorruptChunkError, match=r"c/1/0.*100 bytes"):
        a[8:16]
    chunk.write_bytes(blob)

    # A file that vanishes during the wave's reads: read on the host, where it is missing.
    def delete_chunk(path):
        if path.endswith("c/2/0"):
            _kvikio.DURING_READ.clear()
            (tmp_path / "a" / "c" / "2" / "0").unlink()

    _kvikio.DURING_READ.append(delete_chunk)
    got = cp.asnumpy(a[...])
    want = data.copy()
    want[16:24] = 0
    np.testing.assert_array_equal(got, want)

    # A file replaced while it is read alone: read again on the host.
    def replace_chunk(path):
        if path.endswith("c/0/0"):
            _kvikio.DURING_READ.clear()
            zarr.open_array(tmp_path / "a", mode="r+")[0:8] = data[0:8] + 1

    _kvikio.DURING_READ.append(replace_chunk)
    np.testing.assert_array_equal(cp.asnumpy(a[0:8]), data[0:8] + 1)
    _kvikio.DURING_READ.clear()


def test_stores_without_local_files_upload_from_the_host(sim):
    store = zarr.storage.MemoryStore()
    z = zarr.create_array(
        store, shape=(64,), chunks=(16,), dtype="<i4", compressors=[zarr.codecs.ZstdCodec()]
    )
    z[...] = np.arange(64, dtype="<i4")
    sim.reset()
    with zarr.config.enable_gpu(), cuzarr.configure(strict=True):
        got = zarr.open_array(store, mode="r")[...]
    np.testing.assert_array_equal(cp.asnumpy(got), np.arange(64))
    assert not _events(sim, "cufile")
    assert len(sim.data_transfers("h2d")) == 1


def test_sharded_writes_decode_and_encode_a_wave_in_one_call_each(tmp_path, sim):
    a = cuzarr.create(
        tmp_path / "a",
        shape=(64, 64),
        chunks=(8, 8),
        shards=(32, 32),
        dtype="<i4",
        compressors=[zarr.codecs.ZstdCodec()],
        device="gpu",
    )
    data = np.arange(64 * 64, dtype="<i4").reshape(64, 64)
    sim.reset()
    a[...] = cp.asarray(data)
    assert [e.info["n"] for e in _events(sim, "encode")] == [64]  # 4 shards x 16 inner chunks
    sim.reset()
    a[3:20, 5:40] = cp.asarray(np.ones((17, 35), "<i4"))  # two shards, partly
    data[3:20, 5:40] = 1
    # The inner chunks the write keeps part of, from both shards: one decode; then one encode.
    assert len(_events(sim, "decode")) == 1 and len(_events(sim, "encode")) == 1
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)
