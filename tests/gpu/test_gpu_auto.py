"""``device="auto"``: the GPU past the measured crossover, NumPy results everywhere.

Past ``Settings.gpu_crossover_bytes`` an ``auto`` array runs on
:class:`cuzarr.gpu.host_backend.GpuHostBackend` (decoded and encoded on the GPU, NumPy arrays
in and out); below it, or without a measured crossover, on the CPU engine. The result type never
changes. Event assertions read the device simulator's record and are skipped on a real GPU.
"""

from __future__ import annotations

import pickle

import numcodecs
import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.backends.base import DecodeItem
from cuzarr.backends.select import backend_for, backend_named, decode_unit_nbytes
from cuzarr.errors import CorruptChunkError

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

SHAPE, CHUNKS = (40, 33), (10, 8)
UNIT = 10 * 8 * 4  # decoded bytes of one (inner) chunk of the arrays below
CODECS = {
    "zstd": ({"compressors": [zarr.codecs.ZstdCodec(level=3)]}, "Zstd"),
    "blosc": (
        {"compressors": [zarr.codecs.BloscCodec(cname="lz4", shuffle="bitshuffle")]},
        "LZ4",
    ),
    "sharded-zstd": ({"compressors": [zarr.codecs.ZstdCodec()], "shards": (20, 16)}, "Zstd"),
}
SELECTIONS = [
    (...,),
    (slice(3, 29), slice(5, 31)),
    (7, slice(None, None, 3)),
    (slice(10, 20), slice(8, 16)),  # one whole chunk: decoded into its place in the output
]


@pytest.fixture(autouse=True)
def _zero_stats():
    cuzarr.reset_stats()


def _sim():
    try:
        import gpu_sim
    except ImportError:  # pragma: no cover - tests/ is on sys.path
        return None
    return gpu_sim if gpu_sim.installed() else None


def _events(kind, name=None):
    sim = _sim()
    if sim is None:  # pragma: no cover - a real GPU keeps no record
        return None
    return [e for e in sim.events if e.kind == kind and (name is None or e.name == name)]


def _data():
    return (np.arange(SHAPE[0] * SHAPE[1], dtype="<i4") * 7919 % 10007).reshape(SHAPE)


def _cpu_written(path, codec):
    z = zarr.create_array(path, shape=SHAPE, chunks=CHUNKS, dtype="<i4", **CODECS[codec][0])
    data = _data()
    z[...] = data
    return data


def _settings(crossover):
    return cuzarr.Settings(gpu_crossover_bytes=crossover)


def _auto(path, crossover, mode="r"):
    return cuzarr.open(path, mode=mode, device="auto", settings=_settings(crossover))


def test_auto_without_a_measured_crossover_is_the_cpu_engine(tmp_path):
    data = _cpu_written(tmp_path / "a", "zstd")
    a = cuzarr.open(tmp_path / "a", device="auto", settings=cuzarr.Settings())
    assert a._engine.backend.name == "cpu" and a.xp is np
    got = a[...]
    assert type(got) is np.ndarray
    np.testing.assert_array_equal(got, data)
    assert _events("decode") in ([], None)
    assert cuzarr.Settings().gpu_crossover_bytes is None


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_auto_past_the_crossover_reads_on_the_gpu_into_numpy(tmp_path, codec):
    data = _cpu_written(tmp_path / "a", codec)
    cpu = cuzarr.open(tmp_path / "a", device="cpu")
    a = _auto(tmp_path / "a", UNIT)  # crossover == chunk size: on the GPU
    assert a._engine.backend.name == "gpu-host" and a.xp is np
    for sel in SELECTIONS:
        got = a[sel]
        assert type(got) is np.ndarray
        np.testing.assert_array_equal(got, cpu[sel])
        np.testing.assert_array_equal(got, data[sel])
    decodes = _events("decode", CODECS[codec][1])
    if decodes is not None:
        assert decodes, "no nvCOMP decode call"
        assert cuzarr.stats().get("gpu_cpu_decodes", 0) == 0
        # Each wave comes back to the host in one pinned copy.
        downloads = [e for e in _events("d2h") if e.info["pinned"]]
        assert 1 <= len(downloads) <= len(decodes)


def test_one_pinned_download_per_wave(tmp_path):
    data = _cpu_written(tmp_path / "a", "zstd")
    a = _auto(tmp_path / "a", UNIT)
    if _sim() is None:  # pragma: no cover
        pytest.skip("reads the device simulator's record")
    _sim().reset()
    np.testing.assert_array_equal(a[...], data)
    decodes = _events("decode", "Zstd")
    assert [e.info["n"] for e in decodes] == [20]  # 4 x 5 chunks, one wave
    downloads = _sim().data_transfers("d2h")  # but nvCOMP's statuses and sizes
    assert len(downloads) == 1 and downloads[0].info["pinned"]
    assert downloads[0].info["nbytes"] == 20 * UNIT  # the whole wave, edge chunks whole


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_auto_past_the_crossover_writes_on_the_gpu(tmp_path, codec):
    data = _data()
    kw = CODECS[codec][0]
    kw = {k: v for k, v in kw.items() if k != "shards"}
    shards = CODECS[codec][0].get("shards")
    a = cuzarr.create(
        tmp_path / "a",
        shape=SHAPE,
        chunks=CHUNKS,
        shards=shards,
        dtype="<i4",
        device="auto",
        settings=_settings(UNIT),
        **kw,
    )
    assert a._engine.backend.name == "gpu-host"
    a[...] = data
    a[3:17, 5:29] = -data[3:17, 5:29]  # partial chunks: read, merged and written again
    want = data.copy()
    want[3:17, 5:29] = -data[3:17, 5:29]
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}):
        back = zarr.open_array(tmp_path / "a", mode="r")[...]
    np.testing.assert_array_equal(back, want)
    np.testing.assert_array_equal(_auto(tmp_path / "a", UNIT)[...], want)
    encodes = _events("encode")
    if encodes is not None and codec != "blosc":  # Blosc is encoded on the CPU (decode-only)
        assert encodes, "no nvCOMP encode call"
        assert cuzarr.stats().get("gpu_cpu_encodes", 0) == 0
    if codec == "blosc":
        assert cuzarr.stats()["gpu_cpu_encodes"] > 0


def test_a_crossover_over_the_chunk_size_stays_on_the_cpu(tmp_path):
    data = _cpu_written(tmp_path / "a", "sharded-zstd")  # shard 1280 bytes, inner chunk 320
    a = _auto(tmp_path / "a", UNIT + 1)
    assert a._engine.backend.name == "cpu"
    np.testing.assert_array_equal(a[...], data)
    assert _events("decode") in ([], None)


def test_the_unit_is_the_inner_chunk_of_a_sharded_array(tmp_path):
    _cpu_written(tmp_path / "a", "sharded-zstd")
    codec = cuzarr.open(tmp_path / "a")._engine.codec
    assert codec.nbytes == 4 * UNIT and decode_unit_nbytes(codec) == UNIT
    assert backend_for(_settings(UNIT), codec).name == "gpu-host"
    assert backend_for(_settings(2 * UNIT), codec).name == "cpu"
    assert backend_for(_settings(UNIT), codec, device=cuzarr.Device.GPU).name == "gpu"
    assert backend_for(_settings(UNIT), codec, device=cuzarr.Device.CPU).name == "cpu"


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_zarr_api_with_numpy_buffers_reads_and_writes_on_the_gpu(tmp_path, codec):
    data = _cpu_written(tmp_path / "a", codec)
    with cuzarr.configure(device="auto", strict=True, gpu_crossover_bytes=UNIT):
        z = zarr.open_array(tmp_path / "a", mode="r+")
        assert z._async_array.codec_pipeline.engine.backend.name == "gpu-host"
        for sel in SELECTIONS:
            got = z[sel]
            assert type(got) is np.ndarray
            np.testing.assert_array_equal(got, data[sel])
        z[5:15, 0:9] = data[5:15, 0:9] + 1
    assert _events("decode", CODECS[codec][1]) != []
    stats = cuzarr.stats()
    assert stats.get("fallback_reads", 0) == 0 and stats.get("fallback_writes", 0) == 0
    want = data.copy()
    want[5:15, 0:9] += 1
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], want)


def test_zarr_api_below_the_crossover_uses_the_cpu_engine(tmp_path):
    data = _cpu_written(tmp_path / "a", "zstd")
    with cuzarr.configure(device="auto", gpu_crossover_bytes=UNIT + 1):
        z = zarr.open_array(tmp_path / "a", mode="r")
        assert z._async_array.codec_pipeline.engine.backend.name == "cpu"
        np.testing.assert_array_equal(z[...], data)
    assert _events("decode") in ([], None)


def test_pickling_keeps_the_choice(tmp_path):
    data = _cpu_written(tmp_path / "a", "zstd")
    a = _auto(tmp_path / "a", UNIT)
    b = pickle.loads(pickle.dumps(a))
    assert b._engine.backend.name == "gpu-host"
    np.testing.assert_array_equal(b[...], data)
    engine = pickle.loads(pickle.dumps(a._engine))
    assert engine.backend.name == "gpu-host" and engine == a._engine
    assert backend_named("gpu-host", _settings(UNIT)).name == "gpu-host"
    assert backend_named("gpu", _settings(UNIT)).name == "gpu"
    with cuzarr.configure(device="auto", gpu_crossover_bytes=UNIT):
        z = zarr.open_array(tmp_path / "a", mode="r")
        z2 = pickle.loads(pickle.dumps(z))
        assert z2._async_array.codec_pipeline.engine.backend.name == "gpu-host"
        np.testing.assert_array_equal(z2[...], data)


def test_dask_blocks_of_an_auto_array_are_numpy(tmp_path):
    da = pytest.importorskip("dask.array")
    from cuzarr.dask import from_zarr

    data = _cpu_written(tmp_path / "a", "zstd")
    with cuzarr.configure(gpu_crossover_bytes=UNIT):
        x = from_zarr(str(tmp_path / "a"), device="auto")
        assert isinstance(x, da.Array) and type(x._meta) is np.ndarray
        got = x.compute(scheduler="sync")
    assert type(got) is np.ndarray
    np.testing.assert_array_equal(got, data)
    assert _events("decode", "Zstd") != []


def test_uncompressed_chunks_are_read_through_a_wave(tmp_path):
    z = zarr.create_array(tmp_path / "a", shape=SHAPE, chunks=CHUNKS, dtype="<i4", compressors=None)
    data = _data()
    z[...] = data
    a = _auto(tmp_path / "a", UNIT)
    backend = a._engine.backend
    dest = np.empty(CHUNKS, "<i4")
    assert backend.read_direct(a._chunk_store(), "c/0/0", a._engine.codec, dest) == -1
    np.testing.assert_array_equal(a[10:20, 8:16], data[10:20, 8:16])
    np.testing.assert_array_equal(a[...], data)


def _v2_cpu_chain(path):
    """A chain without a GPU path (v2 filters): decoded and encoded on the CPU."""
    z = zarr.create_array(
        path,
        shape=(40,),
        chunks=(10,),
        dtype="<i4",
        zarr_format=2,
        filters=[numcodecs.Delta(dtype="<i4")],
        compressors=numcodecs.Zlib(),
    )
    z[...] = np.arange(40, dtype="<i4")


def test_chains_without_a_gpu_decoder_stay_on_the_cpu_engine(tmp_path):
    """Past the crossover too: a chain the GPU cannot decode gains nothing from it."""
    _v2_cpu_chain(tmp_path / "a")
    a = _auto(tmp_path / "a", 40, mode="r+")
    assert a._engine.backend.name == "cpu"
    np.testing.assert_array_equal(a[...], np.arange(40))


def test_streams_without_a_gpu_decoder_decode_and_encode_on_the_cpu(tmp_path):
    """blosclz frames (a Blosc chain, so GPU-decodable by its kind) fall back, counted."""
    z = zarr.create_array(
        tmp_path / "a",
        shape=(40,),
        chunks=(10,),
        dtype="<i4",
        compressors=zarr.codecs.BloscCodec(cname="blosclz", typesize=4),
    )
    z[...] = np.arange(40, dtype="<i4")
    a = _auto(tmp_path / "a", 40, mode="r+")
    assert a._engine.backend.name == "gpu-host"
    np.testing.assert_array_equal(a[...], np.arange(40))  # a wave: no destinations
    np.testing.assert_array_equal(a[10:20], np.arange(10, 20))  # one chunk into its place
    a[5:25] = 7
    want = np.arange(40)
    want[5:25] = 7
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], want)
    stats = cuzarr.stats()
    assert stats["gpu_cpu_decodes"] > 0 and stats["gpu_cpu_encodes"] > 0
    assert _events("decode") in ([], None)


def test_corrupt_chunk_of_a_cpu_decoded_chain_is_named(tmp_path):
    z = zarr.create_array(
        tmp_path / "a", shape=(40,), chunks=(10,), dtype="<i4",
        compressors=zarr.codecs.BloscCodec(cname="blosclz", typesize=4),
    )
    z[...] = np.arange(40, dtype="<i4")
    (tmp_path / "a" / "c" / "2").write_bytes(b"not blosc at all")
    with pytest.raises(CorruptChunkError, match=r"c/2"):
        _auto(tmp_path / "a", 40)[...]


def test_corrupt_chunk_on_the_gpu_path_is_named(tmp_path):
    _cpu_written(tmp_path / "a", "zstd")
    (tmp_path / "a" / "c" / "1" / "2").write_bytes(b"\x28\xb5\x2f\xfdnot a frame")
    with pytest.raises(CorruptChunkError, match=r"c/1/2"):
        _auto(tmp_path / "a", UNIT)[...]


def test_empty_batches_and_host_memory(tmp_path):
    data = _cpu_written(tmp_path / "a", "zstd")
    a = _auto(tmp_path / "a", UNIT)
    backend, codec = a._engine.backend, a._engine.codec
    assert backend.decode(codec, [], str) == []
    assert backend.encode(codec, []) == []
    blob = bytes(numcodecs.Zstd().encode(np.ascontiguousarray(data[:10, :8])))
    dest = np.empty(CHUNKS, "<i4")
    got = backend.decode(codec, [DecodeItem(blob, dest, "c/0/0")], str)
    assert got[0] is dest
    np.testing.assert_array_equal(dest, data[:10, :8])
    # Host arrays: memory helpers and the empty-chunk rule run on the host.
    assert type(backend.asarray([1, 2])) is np.ndarray
    assert type(backend.empty((2,), "<i4")) is np.ndarray
    assert backend.full((2,), 3, "<i4").tolist() == [3, 3]
    src = np.arange(3)
    copied = backend.copy(src, "<i4")
    assert copied is not src and copied.tolist() == [0, 1, 2]
    assert backend.all_equal(np.zeros(4), 0) and not backend.all_equal(np.arange(4), 0)
    assert backend.all_equal(np.full(3, np.nan), np.nan)
