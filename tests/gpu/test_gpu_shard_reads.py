"""Inner chunks of local shards read straight into device memory with kvikio.

The shard index is read on the host from one open version; the coalesced ranges of the
needed inner chunks (one range over all of them for a whole shard) are read with kvikio into
device memory, checked against that version, and decoded there. Most tests read the device
simulator's record (skipped on a real GPU, where the values are still checked by the parity
suite).
"""

from __future__ import annotations

import gzip
import io
import os

import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec, ZstdCodec

import cuzarr
from cuzarr.errors import CorruptChunkError
from cuzarr.stores.local import LocalChunkStore
from cuzarr.stores.ranges import ByteRange, CoalescedRange

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

SHAPE, SHARD, INNER = (64, 48), (32, 24), (8, 8)
N_INNER = 12  # (4, 3) inner chunks per shard
INDEX_NBYTES = N_INNER * 16 + 4  # offsets and lengths, then the index's crc32c

CHAINS = {
    "zstd": [BytesCodec(), ZstdCodec()],
    "raw": [BytesCodec()],
    "gzip": [BytesCodec(), GzipCodec()],
    "zstd-crc32c": [BytesCodec(), ZstdCodec(), Crc32cCodec()],
}


def _events(sim, kind, name=None):
    return [e for e in sim.events if e.kind == kind and (name is None or e.name == name)]


def _data():
    """Values with an empty inner chunk (all fill) in shard (0, 0) and shard (1, 1) missing."""
    data = np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE) + 1
    data[8:16, 8:16] = 0
    data[32:, 24:] = 0
    return data


def _sharded(path, chain="zstd", location="end"):
    z = zarr.create_array(
        path,
        shape=SHAPE,
        chunks=SHARD,
        dtype="<i4",
        fill_value=0,
        serializer=ShardingCodec(chunk_shape=INNER, codecs=CHAINS[chain], index_location=location),
        compressors=None,
    )
    data = _data()
    z[...] = data
    assert not (path / "c" / "1" / "1").exists()
    return data


def _table(path, location):
    """The shard's index: (offset, length) per inner chunk, C order."""
    raw = path.read_bytes()
    index = raw[:INDEX_NBYTES] if location == "start" else raw[-INDEX_NBYTES:]
    return np.frombuffer(index[: N_INNER * 16], "<u8").reshape(N_INNER, 2)


def _merged(ranges):
    """Ranges merged where they touch (``max_gap=0``)."""
    out: list[list[int]] = []
    for start, n in sorted(ranges):
        if out and start <= out[-1][0] + out[-1][1]:
            out[-1][1] = max(out[-1][1], start + n - out[-1][0])
        else:
            out.append([start, n])
    return [tuple(r) for r in out]


def _cpu(path):
    return cuzarr.open(path, device="cpu")


@pytest.mark.parametrize("location", ["end", "start"])
@pytest.mark.parametrize("chain", ["zstd", "raw", "gzip", "zstd-crc32c"])
def test_whole_shards_are_read_into_device_memory(tmp_path, sim, chain, location):
    data = _sharded(tmp_path / "a", chain, location)
    a = cuzarr.open(tmp_path / "a", device="gpu")
    sim.reset()
    got = a[...]
    np.testing.assert_array_equal(cp.asnumpy(got), data)
    np.testing.assert_array_equal(cp.asnumpy(got), _cpu(tmp_path / "a")[...])
    # Every inner chunk is needed: one read per present shard, over all its inner chunks.
    reads = _events(sim, "cufile")
    assert all(e.info["device"] for e in reads)
    want = {}
    for key in ("0/0", "0/1", "1/0"):
        path = tmp_path / "a" / "c" / key
        t = _table(path, location)
        present = t[t[:, 0] != np.uint64(2**64 - 1)]
        start = int(present[:, 0].min())
        want[str(path)] = (start, int((present[:, 0] + present[:, 1]).max()) - start)
    assert {e.name: (e.info["offset"], e.info["nbytes"]) for e in reads} == want
    assert len(reads) == 3
    # No host upload of the inner chunks (the pinned staging buffer is never used).
    assert not [e for e in _events(sim, "h2d") if e.info["pinned"]]
    if chain != "raw":
        decodes = _events(sim, "decode")
        assert len(decodes) == 1 and decodes[0].info["n"] == 3 * N_INNER - 1  # one empty
    stats = cuzarr.stats()
    assert stats["gpu_device_reads"] == 3 * N_INNER - 1
    assert stats.get("gpu_device_read_retries", 0) == 0
    assert stats.get("gpu_cpu_decodes", 0) == 0


@pytest.mark.parametrize("location", ["end", "start"])
@pytest.mark.parametrize("chain", ["zstd", "raw"])
def test_partial_reads_read_the_coalesced_ranges(tmp_path, sim, chain, location):
    data = _sharded(tmp_path / "a", chain, location)
    sel = (slice(3, 45), slice(5, 30))
    with cuzarr.configure(max_gap=0):
        a = cuzarr.open(tmp_path / "a", device="gpu")
        sim.reset()
        got = cp.asnumpy(a[sel])
    np.testing.assert_array_equal(got, data[sel])
    np.testing.assert_array_equal(got, _cpu(tmp_path / "a")[sel])
    # The inner chunks rows 0..5, columns 0..3 of the array: per shard, the present ones among
    # them, merged where they touch.
    rows, cols = range(0, 6), range(0, 4)
    want = {}
    for sr, sc in ((0, 0), (0, 1), (1, 0)):
        path = tmp_path / "a" / "c" / f"{sr}/{sc}"
        t = _table(path, location)
        ranges = [
            (int(t[i, 0]), int(t[i, 1]))
            for r in rows
            for c in cols
            if r // 4 == sr and c // 3 == sc
            for i in [(r % 4) * 3 + c % 3]
            if t[i, 0] != np.uint64(2**64 - 1)
        ]
        want[str(path)] = sorted(_merged(ranges))
    reads = {}
    for e in _events(sim, "cufile"):
        reads.setdefault(e.name, []).append((e.info["offset"], e.info["nbytes"]))
    assert {k: sorted(v) for k, v in reads.items()} == want
    assert any(len(v) > 1 for v in want.values())  # some shard is read in several ranges
    assert not [e for e in _events(sim, "h2d") if e.info["pinned"]]
    # 24 inner chunks needed: 2 in the missing shard, one empty.
    assert cuzarr.stats()["gpu_device_reads"] == 21
    if chain == "zstd":
        assert len(_events(sim, "decode")) == 1


def test_one_inner_chunk_is_read_alone(tmp_path, sim):
    data = _sharded(tmp_path / "a")
    a = cuzarr.open(tmp_path / "a", device="gpu")
    sim.reset()
    np.testing.assert_array_equal(cp.asnumpy(a[17:23, 26:30]), data[17:23, 26:30])
    (read,) = _events(sim, "cufile")
    t = _table(tmp_path / "a" / "c" / "0" / "1", "end")
    i = 2 * 3 + 0  # inner chunk (2, 0) of shard (0, 1)
    assert (read.info["offset"], read.info["nbytes"]) == (int(t[i, 0]), int(t[i, 1]))
    # An empty inner chunk and a missing shard: no device read.
    sim.reset()
    assert int(cp.asnumpy(a[9:11, 9:11]).sum()) == 0
    assert int(cp.asnumpy(a[40:42, 30:32]).sum()) == 0
    assert not _events(sim, "cufile")


def test_blosc_inner_chunks_are_read_on_the_host(tmp_path, sim):
    path = tmp_path / "a"
    z = zarr.create_array(
        path,
        shape=SHAPE,
        chunks=SHARD,
        dtype="<i4",
        serializer=ShardingCodec(chunk_shape=INNER, codecs=[BytesCodec(), BloscCodec()]),
        compressors=None,
    )
    data = _data()
    z[...] = data
    sim.reset()
    np.testing.assert_array_equal(cp.asnumpy(cuzarr.open(path, device="gpu")[...]), data)
    assert not _events(sim, "cufile")  # Blosc frames are parsed on the host, whole


def _replace_shard(path, value):
    """Rewrite shard (0, 0) with cuzarr's CPU engine (an atomic replacement: a new inode)."""
    cuzarr.open(path, mode="r+", device="cpu")[0:32, 0:24] = value


@pytest.mark.parametrize("sel", [np.s_[...], np.s_[0:20, 0:40]], ids=["whole", "partial"])
def test_a_shard_replaced_during_the_device_read_is_read_from_its_version(tmp_path, sim, sel):
    from gpu_sim import _kvikio

    data = _sharded(tmp_path / "a")
    a = cuzarr.open(tmp_path / "a", device="gpu")
    sim.reset()

    def replace(path):
        if path.endswith("/c/0/0"):
            _kvikio.DURING_READ.clear()
            _replace_shard(tmp_path / "a", 7)

    _kvikio.DURING_READ.append(replace)
    try:
        got = cp.asnumpy(a[sel])
    finally:
        _kvikio.DURING_READ.clear()
    # The version whose index was read: the old one, read again on the host from it.
    np.testing.assert_array_equal(got, data[sel])
    assert cuzarr.stats()["gpu_device_read_retries"] == 1
    # The wave (host bytes of one shard, device bytes of the others): still one decode call.
    assert len(_events(sim, "decode")) == 1
    want = data.copy()
    want[0:32, 0:24] = 7
    np.testing.assert_array_equal(cp.asnumpy(a[sel]), want[sel])


def test_a_shard_deleted_during_the_device_read_is_read_from_its_version(tmp_path, sim):
    from gpu_sim import _kvikio

    data = _sharded(tmp_path / "a", location="start")
    a = cuzarr.open(tmp_path / "a", device="gpu")

    def delete(path):
        if path.endswith("/c/0/1"):
            _kvikio.DURING_READ.clear()
            os.unlink(path)

    _kvikio.DURING_READ.append(delete)
    try:
        got = cp.asnumpy(a[...])
    finally:
        _kvikio.DURING_READ.clear()
    np.testing.assert_array_equal(got, data)
    assert cuzarr.stats()["gpu_device_read_retries"] == 1
    want = data.copy()
    want[0:32, 24:48] = 0
    np.testing.assert_array_equal(cp.asnumpy(a[...]), want)


def test_device_shard_reads_check_the_version_before_reading(tmp_path, sim):
    from cuzarr.gpu import shard_reads
    from cuzarr.gpu.backend import GpuBackend

    _sharded(tmp_path / "a")
    store = LocalChunkStore(tmp_path / "a")
    a = cuzarr.open(tmp_path / "a", device="gpu")
    backend = a._engine._ctx.backend
    assert isinstance(backend, GpuBackend)
    inner = a._engine._ctx.sharding.inner
    reads = backend.range_reads(store, inner)
    assert isinstance(reads, shard_reads.DeviceShardReads)
    t = _table(tmp_path / "a" / "c" / "0" / "0", "end")
    part = ByteRange(int(t[0, 0]), int(t[0, 1]), 0)
    plan = [CoalescedRange(part.start, part.length, (part,))]
    # Replaced after the reader opened it, before the device read: declined, nothing read.
    reader = store.open_object("c/0/0")
    try:
        _replace_shard(tmp_path / "a", 3)
        sim.reset()
        assert reads("c/0/0", reader, plan) is None
        assert not _events(sim, "cufile")
    finally:
        reader.close()
    # Gone: declined too.
    reader = store.open_object("c/0/0")
    try:
        os.unlink(tmp_path / "a" / "c" / "0" / "0")
        assert reads("c/0/0", reader, plan) is None
        assert shard_reads.read_ranges(str(tmp_path / "nothing"), reader, plan, reads.chain) is None
    finally:
        reader.close()
    assert cuzarr.stats()["gpu_device_read_retries"] == 2
    # The CPU backend reads shards on the host; the GPU backend does from memory.
    cpu = cuzarr.open(tmp_path / "a", device="cpu")
    assert cpu._engine._ctx.backend.range_reads(store, inner) is None
    memory = zarr.storage.MemoryStore()
    zarr.create_array(memory, shape=SHAPE, chunks=INNER, shards=SHARD, dtype="<i4")
    in_memory = cuzarr.open(memory, device="gpu")._chunk_store()
    assert backend.range_reads(in_memory, inner) is None


@pytest.mark.parametrize("location", ["end", "start"])
def test_a_corrupt_inner_chunk_is_named_as_on_the_cpu(tmp_path, sim, location):
    _sharded(tmp_path / "a", "zstd", location)
    path = tmp_path / "a" / "c" / "0" / "1"
    t = _table(path, location)
    i = 1 * 3 + 2  # inner chunk (1, 2) of shard (0, 1)
    raw = bytearray(path.read_bytes())
    start = int(t[i, 0])
    raw[start : start + 4] = b"\x00\x01\x02\x03"  # not a zstd frame any more
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptChunkError) as cpu:
        _cpu(tmp_path / "a")[...]
    assert "c/0/1[inner chunk (1, 2)]" in str(cpu.value)
    for sel in (np.s_[...], np.s_[8:16, 40:48], np.s_[0:20, 20:48]):
        with pytest.raises(CorruptChunkError, match=r"c/0/1\[inner chunk \(1, 2\)\]"):
            cuzarr.open(tmp_path / "a", device="gpu")[sel]


def test_an_index_pointing_past_the_end_is_refused_before_any_device_read(tmp_path, sim):
    _sharded(tmp_path / "a", "raw", "start")
    path = tmp_path / "a" / "c" / "0" / "0"
    os.truncate(path, path.stat().st_size - 100)  # the index (at the start) points past the end
    sim.reset()
    for device in ("cpu", "gpu"):
        for sel in (np.s_[0:32, 0:24], np.s_[0:8, 0:16]):
            with pytest.raises(CorruptChunkError, match=r"shard 'c/0/0'.*outside the shard"):
                cuzarr.open(tmp_path / "a", device=device)[sel]
    assert not _events(sim, "cufile")


def _gzip(payload, name):
    buf = io.BytesIO()
    with gzip.GzipFile(filename=name, mode="wb", fileobj=buf, mtime=0) as f:
        f.write(payload)
    return buf.getvalue()


def test_heads_and_tails_come_from_the_open_version(tmp_path, sim):
    """A header longer than the head read (gzip's file name) gets the whole chunk as head."""
    from cuzarr.gpu import device, shard_reads
    from cuzarr.gpu.plan import GpuChain

    payloads = [np.arange(256, dtype="<u4").tobytes(), np.ones(256, "<u4").tobytes()]
    blobs = [_gzip(payloads[0], "x" * 100), _gzip(payloads[1], "")]
    gap = b"\x00" * 5000  # beyond EDGE_GAP: the edges are read in two host reads
    (tmp_path / "f").write_bytes(blobs[0] + gap + blobs[1])
    parts = (ByteRange(0, len(blobs[0]), 7), ByteRange(len(blobs[0]) + len(gap), len(blobs[1]), 9))
    reads = [CoalescedRange(p.start, p.length, (p,)) for p in parts]
    store = LocalChunkStore(tmp_path)
    reader = store.open_object("f")
    chain = GpuChain(compressor="gzip")
    try:
        got = shard_reads.read_ranges(str(tmp_path / "f"), reader, reads, chain)
    finally:
        reader.close()
    assert got is not None and sorted(got) == [7, 9]
    assert bytes(got[7].head) == blobs[0]  # the whole chunk: its header is > HEAD_BYTES
    assert bytes(got[9].head) == blobs[1][:32] and bytes(got[9].tail) == blobs[1][-8:]
    assert got[7].host() == blobs[0] and got[9].host() == blobs[1]
    flats = device.decode_chunks(chain, [got[7], got[9]], 1024)
    assert [bytes(cp.asnumpy(f)) for f in flats] == payloads


def test_nested_shards_on_the_gpu_backend(tmp_path, sim):
    # Inner chunks that are shards themselves have no GPU path: the GPU backend decodes them
    # on its CPU path (results in device memory); writes encode their own inner chunks on
    # the device, leaving out the empty ones as zarr does: the bytes are zarr's.
    nested = ShardingCodec(
        chunk_shape=INNER,
        codecs=[ShardingCodec(chunk_shape=(4, 4), codecs=[BytesCodec(), ZstdCodec()])],
    )
    kw = {
        "shape": SHAPE, "chunks": SHARD, "dtype": "<i4", "fill_value": 0,
        "serializer": nested, "compressors": None,
    }
    data = _data()
    data[40:44, 0:4] = 0  # one inner chunk of an inner shard empty, the inner shard not
    zarr.create_array(tmp_path / "z", **kw)[...] = data
    zarr.create_array(tmp_path / "g", **kw)
    cuzarr.reset_stats()
    sim.reset()
    g = cuzarr.open(tmp_path / "g", mode="r+", device="gpu")
    g[...] = cp.asarray(data)
    g[1:30, 5:6] = cp.asarray(data[1:30, 5:6])  # a partial rewrite of the same values
    assert _events(sim, "encode") and not cuzarr.stats().get("gpu_cpu_encodes")
    for key in ("0/0", "0/1", "1/0"):
        assert (tmp_path / "g" / "c" / key).read_bytes() == (
            tmp_path / "z" / "c" / key
        ).read_bytes(), key
    assert not (tmp_path / "g" / "c" / "1" / "1").exists()
    got = cuzarr.open(tmp_path / "z", device="gpu")[...]
    assert isinstance(got, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(got), data)
    assert cuzarr.stats()["gpu_cpu_decodes"] > 0
