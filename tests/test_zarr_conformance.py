"""Regression tests for the differences zarr-python's own suite found with cuzarr's pipeline.

Each scenario runs under zarr's default pipeline and under ``cuzarr.Pipeline`` (strict, so
nothing falls back unnoticed) and must give the same data, and where a store watches its
requests, the same requests. scripts/zarr_suite.py runs zarr's whole suite; these pin the
causes one by one:

1. a sharded write covering the array but not the shard kept cells beyond the shape;
2. 0-d sharded arrays;
3. the store's own methods: wrappers, subclasses, mocks and patched methods are honoured;
4. zarr's ``array.sharding_coalesce_*`` configuration;
5. a pickled array compares equal to the original.
"""

from __future__ import annotations

import pickle
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest.mock import AsyncMock

import numpy as np
import pytest
import zarr
from zarr.abc.store import ByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.storage import LocalStore, MemoryStore, StorePath, WrapperStore, ZipStore

import cuzarr
from cuzarr import _zarr_equivalence as equivalence
from cuzarr.errors import UnsupportedError
from cuzarr.stores import LocalChunkStore, MemoryChunkStore, ZarrChunkStore, from_zarr_store
from cuzarr.zarr_pipeline import Pipeline

DEFAULT = "zarr.core.codec_pipeline.BatchedCodecPipeline"
PIPELINES = ["zarr", "cuzarr"]


@contextmanager
def pipeline(name: str) -> Iterator[None]:
    """zarr's default pipeline, or cuzarr's in strict mode (no silent fallback)."""
    if name == "zarr":
        with zarr.config.set({"codec_pipeline.path": DEFAULT}):
            yield
    else:
        with cuzarr.configure(strict=True):
            yield


def make_store(kind: str, tmp_path: Path) -> Any:
    tmp_path.mkdir(parents=True, exist_ok=True)
    if kind == "memory":
        return MemoryStore()
    if kind == "local":
        return LocalStore(tmp_path / "store")
    return ZipStore(tmp_path / "store.zip", mode="w")


# ------------------------------------------------------------------------- 1. resize, shards


@pytest.mark.parametrize("name", PIPELINES)
@pytest.mark.parametrize("chunks", [(1,), (2,), (4,)])
def test_shard_write_keeps_cells_beyond_a_shrunk_shape(name: str, chunks: tuple[int]) -> None:
    with pipeline(name):
        arr = zarr.create_array(
            {}, shape=(4,), chunks=chunks, shards=(4,), dtype="int16", fill_value=0
        )
        arr[:] = [1, 2, 3, 4]
        arr.resize((2,))
        arr[:] = [9, 9]  # covers the whole array, not the whole shard
        arr.resize((4,))
        np.testing.assert_array_equal(arr[:], [9, 9, 3, 4])


@pytest.mark.parametrize("name", PIPELINES)
def test_edge_shard_write_keeps_what_lies_beyond_the_shape_2d(name: str) -> None:
    with pipeline(name):
        arr = zarr.create_array(
            {}, shape=(6, 6), chunks=(2, 2), shards=(4, 4), dtype="f8", fill_value=-1
        )
        arr[:] = np.arange(36.0).reshape(6, 6)
        arr.resize((5, 5))
        arr[:] = 7.0
        arr.resize((6, 6))
        got = arr[:]
    expected = np.full((6, 6), 7.0)
    expected[5, :] = np.arange(30.0, 36.0)  # row 5 and column 5 lie in the edge shards
    expected[:, 5] = np.arange(5.0, 36.0, 6.0)
    np.testing.assert_array_equal(got, expected)


# ------------------------------------------------------------------------- 2. 0-d shards


@pytest.mark.parametrize("name", PIPELINES)
def test_zero_dimensional_sharded_array(name: str) -> None:
    with pipeline(name):
        arr = zarr.create_array({}, shape=(), dtype="f4", chunks=(), shards=())
        arr[()] = 42.0
        assert arr[()] == pytest.approx(42.0)
        arr[()] = 43.0
        assert arr[()] == pytest.approx(43.0)
        assert list(arr.store_path.store._store_dict) == ["zarr.json", "c"]


def test_zero_dimensional_shard_bytes_equal_zarrs() -> None:
    blobs = []
    for name in PIPELINES:
        with pipeline(name):
            arr = zarr.create_array({}, shape=(), dtype="i8", chunks=(), shards=())
            arr[()] = 123456789
            blobs.append(arr.store_path.store._store_dict["c"].to_bytes())
    assert blobs[0] == blobs[1]


# ------------------------------------------------------------------------- 3. the store's API


class RecordingStore(WrapperStore[Any]):
    """Logs every read it serves; forwards everything to the wrapped store."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.reads: list[tuple[str, str, Any]] = []

    def _with_store(self, store: Any) -> RecordingStore:
        other = type(self)(store)
        other.reads = self.reads
        return other

    async def get(self, key: str, prototype: Any, byte_range: ByteRequest | None = None) -> Any:
        self.reads.append(("get", key, _show(byte_range)))
        return await self._store.get(key, prototype, byte_range)

    async def get_ranges(
        self, key: str, byte_ranges: Sequence[ByteRequest | None], **kwargs: Any
    ) -> AsyncIterator[Any]:
        gap, most = kwargs.get("max_gap_bytes"), kwargs.get("max_coalesced_bytes")
        self.reads.append(("get_ranges", key, (tuple(map(_show, byte_ranges)), gap, most)))
        async for group in self._store.get_ranges(key, byte_ranges, **kwargs):
            yield group


def _show(r: ByteRequest | None) -> Any:
    if isinstance(r, RangeByteRequest):
        return ("range", r.start, r.end)
    if isinstance(r, SuffixByteRequest):
        return ("suffix", r.suffix)
    return r


def _chunk_reads(store: RecordingStore) -> list[tuple[str, str, Any]]:
    """Chunk reads in a canonical order (zarr lists a shard's ranges in set order)."""
    out = []
    for op, key, what in store.reads:
        if key.endswith("zarr.json"):
            continue
        if op == "get_ranges":
            what = (tuple(sorted(what[0])), *what[1:])
        out.append((op, key, what))
    return sorted(out, key=repr)


@pytest.mark.filterwarnings("ignore:Duplicate name:UserWarning")  # zip: a rewritten shard
@pytest.mark.parametrize("index_location", ["start", "end"])
@pytest.mark.parametrize("kind", ["memory", "local", "zip"])
def test_a_wrapper_sees_the_requests_zarr_makes(
    kind: str, index_location: str, tmp_path: Path
) -> None:
    """Index reads by ranged ``get``, inner chunks by one ``get_ranges`` per shard, with
    zarr's bounds; whole shards by one ``get``: request for request what zarr does."""
    logs = []
    data = np.arange(16 * 64, dtype="float32").reshape(16, 64)
    for name in PIPELINES:
        store = RecordingStore(make_store(kind, tmp_path / name))
        with pipeline(name):
            a = zarr.create_array(
                StorePath(store),
                shape=data.shape,
                chunks=(2, 4),
                shards={"shape": (8, 32), "index_location": index_location},
                dtype=data.dtype,
                fill_value=1,
            )
            a[:] = data
            store.reads.clear()
            np.testing.assert_array_equal(a[0, 22:42], data[0, 22:42])
            np.testing.assert_array_equal(a[:, 0], data[:, 0])
            np.testing.assert_array_equal(a[[8, 8, 12, 12], 3], data[[8, 8, 12, 12], 3])
            np.testing.assert_array_equal(a[8:16, 32:64], data[8:16, 32:64])  # a whole shard
            a[3, 5] = -3.0  # read-modify-write of one shard
            logs.append(_chunk_reads(store))
    assert logs[0] == logs[1]
    assert sum(1 for r in logs[1] if r[0] == "get_ranges") == 5


@pytest.mark.parametrize("kind", ["memory", "local", "zip"])
def test_failed_range_reads_read_as_missing_like_zarr(kind: str, tmp_path: Path) -> None:
    """A shard that vanishes between its index and its chunks (``get_ranges`` raises a group
    holding FileNotFoundError) reads as the fill value; any other failure is raised."""
    data = np.arange(16, dtype="float32")
    for name in PIPELINES:
        store = make_store(kind, tmp_path / name)
        mock = AsyncMock(wraps=store, spec=store.__class__)
        with pipeline(name):
            a = zarr.create_array(
                StorePath(mock), shape=(16,), chunks=(8,), shards=(16,), dtype="f4",
                fill_value=-999,
            )
            a[:] = data

            def gone(key: str, byte_ranges: Any, **kwargs: Any) -> Any:
                async def fail() -> AsyncIterator[Any]:
                    raise BaseExceptionGroup("chunk read failed", [FileNotFoundError(key)])
                    yield

                return fail()

            mock.get_ranges = gone
            assert a[0] == -999

            def broken(key: str, byte_ranges: Any, **kwargs: Any) -> Any:
                async def fail() -> AsyncIterator[Any]:
                    raise BaseExceptionGroup("chunk read failed", [OSError("disk on fire")])
                    yield

                return fail()

            mock.get_ranges = broken
            # zarr raises the group as it is; cuzarr a StoreError naming the key.
            with pytest.raises(Exception) as info:  # the message is checked below
                a[0]
            error = info.value
            while isinstance(error, BaseExceptionGroup):
                error = error.exceptions[0]
            assert "disk on fire" in str(error)


class XorStore(LocalStore):
    """A LocalStore subclass that scrambles chunk bytes on disk (think: encryption)."""

    @staticmethod
    def _flip(value: Any) -> Any:
        from zarr.core.buffer import default_buffer_prototype

        raw = np.frombuffer(value.to_bytes(), np.uint8) ^ 0x5A
        return default_buffer_prototype().buffer.from_bytes(raw.tobytes())

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        if key.endswith("zarr.json"):
            return await super().get(key, prototype, byte_range)
        value = await super().get(key, prototype, byte_range)
        return None if value is None else self._flip(value)

    async def set(self, key: str, value: Any) -> None:
        await super().set(key, value if key.endswith("zarr.json") else self._flip(value))


@pytest.mark.parametrize("shards", [None, (8, 8)])
def test_a_store_subclass_that_overrides_get_is_used_through_its_api(
    shards: tuple[int, int] | None, tmp_path: Path
) -> None:
    store = XorStore(tmp_path / "x")
    assert isinstance(from_zarr_store(store), ZarrChunkStore)
    data = np.arange(256, dtype="u2").reshape(16, 16)
    with pipeline("cuzarr"):
        a = zarr.create_array(store, shape=(16, 16), chunks=(4, 4), shards=shards, dtype="u2")
        a[:] = data
        np.testing.assert_array_equal(a[:], data)
        np.testing.assert_array_equal(a[1:7, 3:9], data[1:7, 3:9])
    with pipeline("zarr"):
        np.testing.assert_array_equal(zarr.open_array(store)[:], data)
    # The bytes on disk really are scrambled (cuzarr wrote through XorStore.set): unscrambled
    # they start with a zstd frame, as stored they do not.
    raw = (tmp_path / "x" / "c" / "0" / "0").read_bytes()
    zstd_magic = b"\x28\xb5\x2f\xfd"
    assert not raw.startswith(zstd_magic)
    assert (np.frombuffer(raw, np.uint8) ^ 0x5A).tobytes().startswith(zstd_magic)


def test_fast_paths_only_for_stores_that_behave_exactly_as_zarrs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Plain(LocalStore):
        """Overrides nothing about data."""

    class PlainMemory(MemoryStore):
        pass

    assert isinstance(from_zarr_store(LocalStore(tmp_path)), LocalChunkStore)
    assert isinstance(from_zarr_store(Plain(tmp_path)), LocalChunkStore)
    assert isinstance(from_zarr_store(PlainMemory()), MemoryChunkStore)
    assert isinstance(from_zarr_store(XorStore(tmp_path)), ZarrChunkStore)
    mock = AsyncMock(wraps=MemoryStore(), spec=MemoryStore)
    assert isinstance(from_zarr_store(mock), ZarrChunkStore)
    assert isinstance(from_zarr_store(RecordingStore(MemoryStore())), ZarrChunkStore)
    # An instance attribute replacing a method, and a method patched on zarr's class itself.
    store = MemoryStore()
    store.get = AsyncMock(wraps=store.get)  # type: ignore[method-assign]
    assert isinstance(from_zarr_store(store), ZarrChunkStore)

    async def patched(self: Any, key: str, prototype: Any, byte_range: Any = None) -> Any:
        return None

    # Verdicts are cached per class pair: a patch made after one was given is seen at once,
    # on the subclass and on zarr's class, and undoing it restores the fast path.
    with monkeypatch.context() as m:
        m.setattr(Plain, "set", patched)
        assert isinstance(from_zarr_store(Plain(tmp_path)), ZarrChunkStore)
        assert isinstance(from_zarr_store(LocalStore(tmp_path)), LocalChunkStore)
    assert isinstance(from_zarr_store(Plain(tmp_path)), LocalChunkStore)
    monkeypatch.setattr(LocalStore, "get", patched)
    assert isinstance(from_zarr_store(LocalStore(tmp_path)), ZarrChunkStore)
    assert isinstance(from_zarr_store(Plain(tmp_path)), ZarrChunkStore)


def test_a_patched_local_store_get_is_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Patching LocalStore.get to hide chunks makes both pipelines read the fill value."""
    original = LocalStore.get

    async def hide_chunks(self: Any, key: str, prototype: Any, byte_range: Any = None) -> Any:
        if key.endswith("zarr.json"):
            return await original(self, key, prototype, byte_range)
        return None

    for name in PIPELINES:
        with pipeline(name):
            a = zarr.create_array(
                LocalStore(tmp_path / name), shape=(8,), chunks=(4,), dtype="i4", fill_value=-5
            )
            a[:] = np.arange(8)
            with monkeypatch.context() as m:
                m.setattr(LocalStore, "get", hide_chunks)
                np.testing.assert_array_equal(a[:], np.full(8, -5))
            np.testing.assert_array_equal(a[:], np.arange(8))


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_patched_zarr_sharding_falls_back_to_zarr(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cuzarr's engine stands in for zarr's sharding code; patched, zarr's own runs."""
    monkeypatch.setattr(
        "zarr.codecs.sharding._ShardIndex.get_chunk_slice", lambda self, chunk_coords: None
    )
    found = equivalence.foreign_codec(
        zarr.create_array({}, shape=(4,), chunks=(2,), shards=(4,), dtype="i1").metadata
    )
    assert found is not None
    assert found.startswith("zarr's sharding: _ShardIndex.get_chunk_slice (replaced by test")
    data = np.arange(16, dtype="float32")
    with cuzarr.configure():
        a = zarr.create_array(
            StorePath(make_store(kind, tmp_path)), shape=(16,), chunks=(8,), shards=(16,),
            dtype="f4", fill_value=-999,
        )
        a[:] = data
        assert a[0] == -999  # what zarr's pipeline reads with that patch
        assert isinstance(a.async_array.codec_pipeline, Pipeline)
        assert a.async_array.codec_pipeline.engine is None
    with cuzarr.configure(strict=True):
        b = zarr.create_array(
            {}, shape=(16,), chunks=(8,), shards=(16,), dtype="f4", fill_value=-999
        )
        with pytest.raises(UnsupportedError, match="get_chunk_slice"):
            b[:] = data


def test_a_codec_class_registered_in_place_of_zarrs_is_used(tmp_path: Path) -> None:
    """A user's codec class registered for ``zstd`` is what zarr runs: cuzarr falls back."""
    from zarr.codecs import ZstdCodec
    from zarr.registry import register_codec

    calls: list[int] = []

    class CountingZstd(ZstdCodec):
        async def _decode_single(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
            calls.append(1)
            return await super()._decode_single(chunk_bytes, chunk_spec)

    register_codec("zstd", CountingZstd)
    name = f"{CountingZstd.__module__}.{CountingZstd.__qualname__}"
    with zarr.config.set({"codecs.zstd": name}), cuzarr.configure():
        a = zarr.create_array(tmp_path / "z", shape=(8,), chunks=(4,), dtype="i4")
        a[:] = np.arange(8)
        b = zarr.open_array(tmp_path / "z")
        np.testing.assert_array_equal(b[:], np.arange(8))
        assert b.async_array.codec_pipeline.engine is None
    assert calls, "the registered codec class decoded the chunks"


# ------------------------------------------------------------------------- 4. zarr's config


def _ranges_kwargs(array_config: dict[str, int] | None) -> list[tuple[int, int]]:
    store = RecordingStore(MemoryStore())
    a = zarr.create_array(
        StorePath(store), shape=(8,), chunks=(2,), shards=(8,), dtype="i4", fill_value=-1,
        config=array_config,
    )
    a[:] = np.arange(8)
    store.reads.clear()
    np.testing.assert_array_equal(a[0:4], np.arange(4))
    return [(r[2][1], r[2][2]) for r in store.reads if r[0] == "get_ranges"]


@pytest.mark.parametrize("name", PIPELINES)
def test_zarrs_coalescing_settings_reach_the_store(name: str) -> None:
    with pipeline(name):
        assert _ranges_kwargs(None) == [(1 << 20, 16 << 20)]
        with zarr.config.set(
            {
                "array.sharding_coalesce_max_gap_bytes": 4242,
                "array.sharding_coalesce_max_bytes": 424242,
            }
        ):
            assert _ranges_kwargs(None) == [(4242, 424242)]
            per_array = {"sharding_coalesce_max_gap_bytes": 99, "sharding_coalesce_max_bytes": 999}
            assert _ranges_kwargs(per_array) == [(99, 999)]


def test_zarrs_coalescing_settings_bound_cuzarrs_own_store_paths(tmp_path: Path) -> None:
    """On local files zarr's gap caps cuzarr's (it is the most a merge may bridge); on
    remote stores zarr's values replace cuzarr's."""
    from cuzarr.stores.base import Coalescing

    a = cuzarr.create(
        tmp_path / "a", shape=(64,), chunks=(4,), shards=(64,), dtype="i4", fill_value=0
    )
    engine = a.to_zarr().async_array.codec_pipeline.engine
    local = LocalChunkStore(str(tmp_path / "a"))
    assert engine.fetch_policy(local).limits == Coalescing(64 << 10, 16 << 20)
    assert engine.fetch_policy(local, Coalescing(10, 100)).limits == Coalescing(10, 100)
    assert engine.fetch_policy(local, Coalescing(1 << 30, 1 << 30)).limits == Coalescing(
        64 << 10, 16 << 20
    )
    remote = ZarrChunkStore(MemoryStore())
    assert engine.fetch_policy(remote, Coalescing(1 << 30, 5)).limits == Coalescing(1 << 30, 5)
    assert engine.fetch_policy(remote).delegated is True


def test_zero_gap_on_local_files_reads_each_inner_chunk_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With zarr's gap set to 0, cuzarr's local fast path merges only touching ranges."""
    from cuzarr.stores import local as local_mod

    with cuzarr.configure(strict=True):
        a = zarr.create_array(
            LocalStore(tmp_path / "g"), shape=(64,), chunks=(4,), shards=(64,), dtype="i4",
            compressors=zarr.codecs.ZstdCodec(), fill_value=0,
        )
        a[:] = np.arange(64)
        reads: list[tuple[int, int]] = []
        real = local_mod._FileReader.read

        def spy(self: Any, ranges: list[tuple[int, int]]) -> Any:
            reads.extend(ranges)
            return real(self, ranges)

        monkeypatch.setattr(local_mod._FileReader, "read", spy)
        sel = np.s_[[0, 8, 16]]
        np.testing.assert_array_equal(a.oindex[sel], [0, 8, 16])
        merged = len(reads)
        reads.clear()
        b = zarr.open_array(
            LocalStore(tmp_path / "g"), config={"sharding_coalesce_max_gap_bytes": 0}
        )
        np.testing.assert_array_equal(b.oindex[sel], [0, 8, 16])
        assert merged == 2  # the index, then one merged read of three inner chunks
        assert len(reads) == 4  # the index, then three separate reads


# ------------------------------------------------------------------------- 5. pickling


@pytest.mark.parametrize(("zarr_format", "shards"), [(2, None), (3, None), (3, (20,))])
def test_a_pickled_array_equals_the_original(
    zarr_format: int, shards: tuple[int] | None, tmp_path: Path
) -> None:
    with cuzarr.configure():
        expected = zarr.create_array(
            store=LocalStore(tmp_path / "p"), shape=(100,), chunks=(10,), shards=shards,
            zarr_format=zarr_format, dtype="i4",  # type: ignore[arg-type]
        )
        expected[:] = list(range(100))
        actual = pickle.loads(pickle.dumps(expected))
        assert actual == expected
        assert actual.async_array.codec_pipeline == expected.async_array.codec_pipeline
        assert hash(actual.async_array.codec_pipeline) == hash(
            expected.async_array.codec_pipeline
        )
        np.testing.assert_array_equal(actual[:], expected[:])
        other = zarr.create_array({}, shape=(100,), chunks=(5,), dtype="i4")
        assert other.async_array.codec_pipeline != expected.async_array.codec_pipeline
        with cuzarr.configure(threads=1):
            single = zarr.open_array(LocalStore(tmp_path / "p"))
        assert single.async_array.codec_pipeline != expected.async_array.codec_pipeline
