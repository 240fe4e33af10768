"""The GPU backend's less travelled paths: CPU fallbacks, odd layouts, failures, I/O helpers.

Each test names the path it drives. Runs on a real GPU as under the simulator, except the
ones that inject a device fault (simulator only).
"""

from __future__ import annotations

import zlib

import numcodecs
import numpy as np
import pytest
import zarr

import cuzarr
from counting_store import CountingStore
from cuzarr.errors import CorruptChunkError

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")


@pytest.fixture(autouse=True)
def _zero_stats():
    cuzarr.reset_stats()


def _gpu(path, **kw):
    return cuzarr.open(path, device="gpu", **kw)


def test_nan_chunks_of_a_nan_fill_are_not_stored(tmp_path):
    a = cuzarr.create(
        tmp_path / "a",
        shape=(32,),
        chunks=(8,),
        dtype="<f8",
        fill_value=np.nan,
        compressors=[zarr.codecs.ZstdCodec()],
        device="gpu",
    )
    data = np.arange(32, dtype="<f8")
    data[8:16] = np.nan
    a[...] = cp.asarray(data)
    assert sorted(p.name for p in (tmp_path / "a" / "c").iterdir()) == ["0", "2", "3"]
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)


@pytest.mark.parametrize(
    "kw",
    [
        {
            "filters": [zarr.codecs.TransposeCodec(order=(1, 0))],
            "compressors": [zarr.codecs.ZstdCodec()],
        },
        {
            "serializer": zarr.codecs.BytesCodec(endian="big"),
            "compressors": [zarr.codecs.GzipCodec()],
        },
    ],
    ids=["transpose", "big-endian"],
)
def test_gpu_writes_of_transposed_and_big_endian_chains(tmp_path, kw):
    zarr.create_array(tmp_path / "a", shape=(20, 12), chunks=(8, 6), dtype="<i4", **kw)
    data = np.arange(240, dtype="<i4").reshape(20, 12) * 3
    a = _gpu(tmp_path / "a", mode="r+")
    a[...] = cp.asarray(data)
    assert cuzarr.stats().get("gpu_cpu_encodes", 0) == 0
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)
    np.testing.assert_array_equal(cp.asnumpy(_gpu(tmp_path / "a")[...]), data)


def test_blosc_writes_encode_on_the_cpu_and_are_counted(tmp_path):
    zarr.create_array(
        tmp_path / "a",
        shape=(40,),
        chunks=(10,),
        dtype="<u2",
        compressors=[zarr.codecs.BloscCodec(cname="zstd")],
    )
    data = np.arange(40, dtype="<u2")
    _gpu(tmp_path / "a", mode="r+")[...] = cp.asarray(data)
    assert cuzarr.stats()["gpu_cpu_encodes"] == 4
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)


def test_lz4_chunks_over_16_mib_encode_on_the_cpu(tmp_path):
    n = (16 << 20) // 4 + 1024  # one chunk of 16 MiB + 4 KiB
    zarr.create_array(
        tmp_path / "a",
        shape=(n,),
        chunks=(n,),
        dtype="<i4",
        zarr_format=2,
        compressors=numcodecs.LZ4(),
    )
    data = np.arange(n, dtype="<i4") // 3
    _gpu(tmp_path / "a", mode="r+")[...] = cp.asarray(data)
    assert cuzarr.stats()["gpu_cpu_encodes"] == 1
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)


def test_blosclz_frames_in_a_wave_decode_on_the_cpu(tmp_path):
    n = 4096
    z = zarr.create_array(
        tmp_path / "a",
        shape=(4 * n,),
        chunks=(n,),
        dtype="<i4",
        compressors=[zarr.codecs.BloscCodec(cname="lz4")],
    )
    data = np.arange(4 * n, dtype="<i4") // 7
    z[...] = data
    # Blosc frames name their own compressor: another writer may have used blosclz.
    frame = numcodecs.Blosc(cname="blosclz", clevel=5).encode(data[n : 2 * n].tobytes())
    assert not bytes(frame)[2] & 0x02, "the frame must hold blosclz streams, not a plain copy"
    (tmp_path / "a" / "c" / "1").write_bytes(bytes(frame))
    np.testing.assert_array_equal(cp.asnumpy(_gpu(tmp_path / "a")[...]), data)
    assert cuzarr.stats()["gpu_cpu_decodes"] == 4


def test_corrupt_chunk_of_a_cpu_decoded_chain_is_named(tmp_path):
    z = zarr.create_array(
        tmp_path / "a",
        shape=(40,),
        chunks=(10,),
        dtype="<i4",
        zarr_format=2,
        filters=[numcodecs.Delta(dtype="<i4")],
        compressors=numcodecs.Zlib(),
    )
    z[...] = np.arange(40, dtype="<i4")
    (tmp_path / "a" / "2").write_bytes(b"not zlib at all")
    with pytest.raises(CorruptChunkError, match=r"'2'"):
        _gpu(tmp_path / "a")[...]


def test_a_stream_that_decodes_short_is_corrupt_and_named(tmp_path):
    z = zarr.create_array(
        tmp_path / "a",
        shape=(40,),
        chunks=(10,),
        dtype="<i4",
        zarr_format=2,
        compressors=numcodecs.Zlib(),
    )
    z[...] = np.arange(40, dtype="<i4")
    # A well-formed zlib stream of 12 bytes where 40 are expected: zlib declares no size, so
    # only the decoded size tells.
    (tmp_path / "a" / "1").write_bytes(zlib.compress(b"\x01" * 12))
    with pytest.raises(CorruptChunkError, match=r"'1'"):
        _gpu(tmp_path / "a")[...]


def test_a_device_fault_on_chunks_the_cpu_decodes_says_so(tmp_path):
    gpu_sim = pytest.importorskip("gpu_sim")
    if not gpu_sim.installed():
        pytest.skip("injects a device fault (simulator only)")
    from gpu_sim import _nvcomp

    z = zarr.create_array(
        tmp_path / "a",
        shape=(40,),
        chunks=(10,),
        dtype="<i4",
        compressors=[zarr.codecs.ZstdCodec()],
    )
    z[...] = np.arange(40, dtype="<i4")
    _nvcomp.FAULTS["decode"] = 1
    try:
        with pytest.raises(CorruptChunkError, match="yet each decodes on the CPU"):
            _gpu(tmp_path / "a")[...]
    finally:
        _nvcomp.FAULTS["decode"] = 0
    np.testing.assert_array_equal(cp.asnumpy(_gpu(tmp_path / "a")[...]), np.arange(40))


def test_single_whole_chunk_reads_of_uncompressed_arrays(tmp_path):
    z = zarr.create_array(
        tmp_path / "a", shape=(16, 16), chunks=(8, 16), dtype="<u2", compressors=None
    )
    data = np.arange(256, dtype="<u2").reshape(16, 16)
    z[...] = data
    np.testing.assert_array_equal(cp.asnumpy(_gpu(tmp_path / "a")[8:16]), data[8:16])


def test_single_whole_chunk_reads_missing_or_not_in_files(tmp_path):
    """A missing chunk file reads as the fill value; a store without files takes the
    general way (host read, upload) for the same whole-chunk read."""
    z = zarr.create_array(
        tmp_path / "a", shape=(16, 16), chunks=(8, 16), dtype="<u2", compressors=None,
        fill_value=9,
    )
    z[:8] = np.arange(128, dtype="<u2").reshape(8, 16)
    cuzarr.reset_stats()
    np.testing.assert_array_equal(cp.asnumpy(_gpu(tmp_path / "a")[8:16]), np.full((8, 16), 9))
    assert cuzarr.stats().get("gpu_device_reads", 0) == 0
    mem = zarr.storage.MemoryStore()
    m = zarr.create_array(mem, shape=(16, 16), chunks=(8, 16), dtype="<u2", compressors=None)
    m[...] = np.arange(256, dtype="<u2").reshape(16, 16)
    got = cuzarr.open(mem, device="gpu")[8:16]
    np.testing.assert_array_equal(cp.asnumpy(got), np.arange(128, 256).reshape(8, 16))


def test_device_helpers_on_empty_input():
    from cuzarr.gpu import checksums, device, launch

    dev = cp.empty(16, cp.uint8)
    out, starts = device.decode_batch("Zstd", dev, [], [], [])
    assert starts == [] and out.size == 1  # a placeholder buffer, nothing decoded
    empty = device.encode_batch("Zstd", [])
    assert empty.host == [] and empty.starts == [] and empty.sizes == []
    assert checksums.checksums(dev, []) == []
    assert launch.byteswap(cp.empty(0, cp.uint8), 4).size == 0


def test_kvikio_reads_into_device_memory_and_reports_gds(tmp_path):
    from cuzarr.gpu import files as device

    payload = np.arange(4096, dtype=np.uint8)
    (tmp_path / "f").write_bytes(payload.tobytes() * 2)
    buf = cp.empty(4096, cp.uint8)
    assert device.read_file_into(str(tmp_path / "f"), buf, offset=4096) == 4096
    np.testing.assert_array_equal(cp.asnumpy(buf), payload)
    info = device.gdsinfo()
    assert isinstance(info["gds"], bool) and info["gds"] is (info.get("compat_mode") is False)


def test_gpu_only_codec_with_a_wrong_decoded_size_is_corrupt():
    from cuzarr.gpu import device

    blob = device.gpu_only_encode("GDeflate", {}, b"\x07" * 1000)
    assert device.gpu_only_decode("GDeflate", {}, blob, 1000) == b"\x07" * 1000
    with pytest.raises(CorruptChunkError, match="expected 999"):
        device.gpu_only_decode("GDeflate", {}, blob, 999)


def test_gpu_info_and_cuzarr_info_gpu_report_the_io_mode(capsys):
    from cuzarr.cli import main

    info = cuzarr.gpu_info()
    assert info["usable"] is True and info["devices"] >= 1
    assert isinstance(info["io"]["gds"], bool)
    assert main(["info", "--gpu"]) == 0
    out = capsys.readouterr().out
    assert "GPU: " in out and ("GPUDirect Storage" in out or "compatibility mode" in out)


def test_small_zstd_chunks_go_in_device_waves_not_host_batches(tmp_path, monkeypatch):
    """Many small zstd chunks of a local folder: the GPU backend declines the CPU's batched
    host read (it would write device arrays from C) and reads them in waves instead."""
    from cuzarr.backends.cpu import ZSTD_BATCH
    from cuzarr.gpu.backend import GpuBackend

    data = np.arange(32 * 32 * 32, dtype="<u2").reshape(32, 32, 32)
    z = zarr.create_array(
        zarr.storage.LocalStore(tmp_path / "s"), shape=data.shape, chunks=(4, 4, 4),
        dtype="<u2", compressors=[zarr.codecs.ZstdCodec()],
    )
    z[...] = data
    a = _gpu(tmp_path / "s")
    backend = a._engine._ctx.backend
    assert isinstance(backend, GpuBackend)
    codec = a._engine._ctx.codec
    assert not backend.batching(codec, 4 * ZSTD_BATCH, remote=False, op="read", threads=2).parallel
    out = cp.zeros(data.shape, data.dtype)
    keys = ["c/0/0/0", "c/0/0/1"]
    sels = [((slice(0, 4),) * 3, (slice(0, 4),) * 3)] * 2
    assert backend.read_batch(a._chunk_store(), codec, keys, sels, out) is None
    np.testing.assert_array_equal(cp.asnumpy(a[...]), data)


def test_a_wave_from_a_remote_store_is_fetched_in_one_batch():
    zs = CountingStore(delay=0.005)
    data = (np.arange(64 * 48) % 1000).astype("<i4").reshape(64, 48)
    z = zarr.create_array(zs, shape=data.shape, chunks=(8, 8), dtype="<i4",
                          compressors=[zarr.codecs.ZstdCodec()])
    z[...] = data
    del zs._store_dict["c/1/1"]  # missing: the fill value
    data[8:16, 8:16] = 0
    a = cuzarr.open(zs, device="gpu")
    zs.gets.clear()
    got = a[...]
    np.testing.assert_array_equal(cp.asnumpy(got), data)
    chunk_gets = [k for k in zs.gets if k.startswith("c/")]
    assert len(chunk_gets) == len(set(chunk_gets)) == 48
    # The wave's 48 requests out together (one get_many), not one per I/O thread in turn.
    assert zs.max_in_flight > 32
