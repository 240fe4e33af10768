"""Checksums on the device: crc32c of stored chunks, gzip's CRC-32 of decoded ones.

Reads verify every crc32c checksum of a wave in one kernel launch (chunks read by kvikio or
uploaded from the host alike) and gzip's trailer CRC-32 over the decoded bytes; writes compute
them where the bytes are, on the device. What the GPU writes, zarr's default pipeline and
numcodecs read; what is corrupt is named by its key.
"""

from __future__ import annotations

import gzip
import struct

import numcodecs
import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.errors import CorruptChunkError

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

CRC = zarr.codecs.Crc32cCodec()
CHAINS = {
    "raw-crc": [CRC],
    "zstd-crc": [zarr.codecs.ZstdCodec(level=3), CRC],
    "gzip-crc": [zarr.codecs.GzipCodec(level=5), CRC],
    "gzip": [zarr.codecs.GzipCodec(level=1)],
    "zstd-crc-crc": [zarr.codecs.ZstdCodec(), CRC, CRC],
}


def _events(name):
    gpu_sim = pytest.importorskip("gpu_sim")
    if not gpu_sim.installed():
        return None  # a real GPU: the values are what is checked
    return [e for e in gpu_sim.events if e.kind == "launch" and e.name == name]


def _data(shape, dtype="<u2"):
    return ((np.arange(np.prod(shape)) * 7) % 1000).astype(dtype).reshape(shape)


@pytest.mark.parametrize("chain", sorted(CHAINS))
@pytest.mark.parametrize("store", ["local", "memory"])
def test_checksummed_chains_read_on_the_device(tmp_path, chain, store):
    where = tmp_path / "a" if store == "local" else zarr.storage.MemoryStore()
    z = zarr.create_array(
        where, shape=(50, 40), chunks=(16, 16), dtype="<u2", compressors=CHAINS[chain]
    )
    data = _data((50, 40))
    z[...] = data
    cuzarr.reset_stats()
    got = cuzarr.open(where, device="gpu")[...]
    np.testing.assert_array_equal(cp.asnumpy(got), data)
    assert cuzarr.stats().get("gpu_host_crc32c", 0) == 0
    assert cuzarr.stats().get("gpu_cpu_decodes", 0) == 0
    if store == "local":
        assert cuzarr.stats()["gpu_device_reads"] == 12
    launches = _events("cuzarr_crc")
    if launches is not None:
        # One wave: every crc32c of it in one launch, every gzip CRC-32 in another.
        assert len(launches) == ("crc" in chain) + chain.startswith("gzip")


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_checksummed_chains_written_on_the_device_read_by_zarr(tmp_path, chain):
    a = cuzarr.create(
        tmp_path / "a", shape=(50, 40), chunks=(16, 16), dtype="<u2",
        compressors=CHAINS[chain], device="gpu",
    )
    data = _data((50, 40))
    a[...] = cp.asarray(data)
    a[3:9, 30:37] = cp.asarray(data[3:9, 30:37] + 1)
    data[3:9, 30:37] += 1
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)
    launches = _events("cuzarr_crc")
    if launches is not None:
        assert launches, "checksums of the written chunks were not computed on the device"
    assert cuzarr.stats().get("gpu_host_crc32c", 0) == 0


@pytest.mark.parametrize("compressor", ["zlib", "gzip", "lz4", "zstd", None])
def test_v2_chains_with_a_crc32c_filter_free_layout_read_and_written(tmp_path, compressor):
    """v2 arrays of each GPU compressor: device reads, device writes, read back by zarr."""
    comp = None if compressor is None else numcodecs.get_codec({"id": compressor})
    zarr.create_array(
        tmp_path / "a", shape=(70,), chunks=(16,), dtype="<i4", zarr_format=2, compressors=comp
    )
    a = cuzarr.open(tmp_path / "a", mode="r+", device="gpu")
    data = np.arange(70, dtype="<i4") * 3
    a[...] = cp.asarray(data)
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], data)
    cuzarr.reset_stats()
    np.testing.assert_array_equal(cp.asnumpy(cuzarr.open(tmp_path / "a", device="gpu")[...]), data)
    assert cuzarr.stats()["gpu_device_reads"] == 5


def _corrupt(path, edit):
    blob = bytearray(path.read_bytes())
    edit(blob)
    path.write_bytes(bytes(blob))


@pytest.mark.parametrize("store", ["local", "memory"])
def test_a_crc32c_mismatch_is_found_on_the_device_and_named(tmp_path, store):
    z = zarr.create_array(
        tmp_path / "a", shape=(32, 32), chunks=(16, 16), dtype="<u2",
        compressors=[zarr.codecs.ZstdCodec(), CRC],
    )
    z[...] = _data((32, 32))

    def flip(blob):
        blob[-1] ^= 0x01  # the stored checksum itself

    _corrupt(tmp_path / "a" / "c" / "1" / "0", flip)
    if store == "memory":  # the same objects in memory: fetched on the host, uploaded
        files = [f for f in (tmp_path / "a").rglob("*") if f.is_file()]
        where = zarr.storage.MemoryStore(
            {
                f.relative_to(tmp_path / "a").as_posix(): zarr.core.buffer.cpu.Buffer.from_bytes(
                    f.read_bytes()
                )
                for f in files
            }
        )
    else:
        where = tmp_path / "a"
    with pytest.raises(CorruptChunkError, match=r"c/1/0.*crc32c checksum mismatch"):
        cuzarr.open(where, device="gpu")[...]


def test_a_gzip_crc32_mismatch_is_found_on_the_device_and_named(tmp_path):
    z = zarr.create_array(
        tmp_path / "a", shape=(32, 32), chunks=(16, 16), dtype="<u2",
        compressors=[zarr.codecs.GzipCodec()],
    )
    z[...] = _data((32, 32))

    def wrong_crc(blob):
        crc, size = struct.unpack("<II", blob[-8:])
        blob[-8:] = struct.pack("<II", crc ^ 0x80, size)

    _corrupt(tmp_path / "a" / "c" / "0" / "1", wrong_crc)
    with pytest.raises(CorruptChunkError, match=r"c/0/1"):
        cuzarr.open(tmp_path / "a", device="gpu")[...]


def test_gzip_headers_longer_than_the_head_read_on_the_host(tmp_path):
    """A gzip member with a long file name: its chunk is read on the host, and decodes."""
    z = zarr.create_array(
        tmp_path / "a", shape=(32,), chunks=(16,), dtype="<i4",
        compressors=[zarr.codecs.GzipCodec()],
    )
    data = np.arange(32, dtype="<i4")
    z[...] = data
    path = tmp_path / "a" / "c" / "1"
    raw = gzip.decompress(path.read_bytes())
    with open(path, "wb") as fh, gzip.GzipFile("n" * 100, "wb", fileobj=fh, mtime=0) as f:
        f.write(raw)
    assert path.read_bytes()[3] & 0x08  # FNAME: a header longer than the host's head read
    cuzarr.reset_stats()
    np.testing.assert_array_equal(cp.asnumpy(cuzarr.open(tmp_path / "a", device="gpu")[...]), data)
    assert cuzarr.stats().get("gpu_cpu_decodes", 0) == 0


def test_chunks_from_several_device_buffers_decode_in_one_call(tmp_path):
    """Stored chunks in different device buffers, at unaligned offsets: one nvCOMP call."""
    from cuzarr.gpu import device
    from cuzarr.gpu.files import DeviceChunk
    from cuzarr.gpu.plan import GpuChain

    chain = GpuChain(compressor="zstd", crc32c=1)
    codec = numcodecs.Zstd()
    import crc32c

    chunks, want = [], []
    for i in range(3):
        payload = (np.arange(1000, dtype="<u4") * (i + 1)).tobytes()
        blob = codec.encode(payload)
        blob += crc32c.crc32c(blob).to_bytes(4, "little")
        host = np.zeros(len(blob) + 7, np.uint8)
        host[3 + i : 3 + i + len(blob)] = np.frombuffer(blob, np.uint8)
        chunks.append(DeviceChunk(cp.asarray(host), 3 + i, len(blob), blob[:32], blob[-16:]))
        want.append(payload)
    before = _events("cuzarr_scatter")
    out = device.decode_chunks(chain, chunks, 4000)
    assert [bytes(cp.asnumpy(o)) for o in out] == want
    after = _events("cuzarr_scatter")
    if before is not None:
        assert len(after) - len(before) == 3  # one copy launch per source buffer
