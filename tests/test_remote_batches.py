"""Reads of unsharded arrays from remote stores go in batches of ``get_many`` calls.

A remote store's whole-chunk reads used to be one blocking ``get`` per engine I/O thread (up
to the store's concurrency, 32 threads); they are now batches (``engine.read.remote_batching``)
whose requests a single ``get_many`` sends together. These tests read arrays of several
codecs and selections from a memory store declared remote and recording its calls, and check
the values against zarr's, the batches asked for (no single gets, each chunk once), the sizes
of the batches, and that missing chunks read as the fill value and a corrupt chunk is named.
Whole chunks are decoded straight into the output, others scattered: both kinds are among the
selections.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.storage import MemoryStore

import cuzarr
from cuzarr.codecs.base import Buf
from cuzarr.engine.read import remote_batching
from cuzarr.errors import CorruptChunkError
from cuzarr.stores import MemoryChunkStore
from cuzarr.stores.base import GetResult, Range, Suffix
from cuzarr.stores.targets import StoreHandle


class RemoteMemory(MemoryChunkStore):
    """A memory store declared remote, recording its calls."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.caps = replace(self.caps, remote=True, read_into=False, open_object=False)
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def get(
        self, key: str, byte_range: Range | Suffix | None = None, **kwargs: Any
    ) -> GetResult | None:
        self.calls.append(("get", (key,)))
        return super().get(key, byte_range, **kwargs)

    def get_many(self, keys: Sequence[str], size_hint: int | None = None) -> list[Buf | None]:
        self.calls.append(("get_many", tuple(keys)))
        got = [MemoryChunkStore.get(self, key) for key in keys]
        return [None if g is None else g.data for g in got]


def _array(zs: MemoryStore, store: RemoteMemory, **settings: Any) -> cuzarr.Array:
    handle = StoreHandle(zarr_store=zs)
    handle._chunk_store = store  # the engine reads through the recording store
    a = cuzarr.open(handle, settings=cuzarr.Settings(threads=2, **settings))
    assert isinstance(a, cuzarr.Array)
    return a


CODECS: dict[str, dict[str, Any]] = {
    "zstd": {},
    "blosc": {"compressors": zarr.codecs.BloscCodec(cname="lz4", clevel=5)},
    "raw": {"compressors": None},
    "gzip": {"compressors": zarr.codecs.GzipCodec()},
}


@pytest.mark.parametrize("codec", sorted(CODECS))
@pytest.mark.parametrize(
    "selection",
    [np.s_[...], np.s_[3:41, ::3, 5], np.s_[:, 7:9], np.s_[[1, 30, 47], :, 2:]],
    ids=["all", "strided", "slab", "orthogonal"],
)
def test_remote_reads_equal_zarr_in_batches(codec: str, selection: Any) -> None:
    zs = MemoryStore()
    data = (np.arange(48 * 20 * 12) % 251).astype("u2").reshape(48, 20, 12)
    z = zarr.create_array(zs, shape=data.shape, chunks=(4, 5, 6), dtype="u2", fill_value=7,
                          **CODECS[codec])
    z[...] = data
    del zs._store_dict["c/0/0/0"]  # a missing chunk reads as the fill value
    orthogonal = isinstance(selection, tuple) and isinstance(selection[0], list)
    want = z.oindex[selection] if orthogonal else z[selection]
    store = RemoteMemory(zs)
    a = _array(zs, store)
    got = a.oindex[selection] if orthogonal else a[selection]
    np.testing.assert_array_equal(got, want)
    kinds = {kind for kind, _ in store.calls}
    keys = [k for _, ks in store.calls for k in ks]
    assert kinds == {"get_many"}, kinds  # no request alone
    assert len(keys) == len(set(keys))  # every chunk asked for once
    assert len(store.calls) < len(keys)  # in batches


def test_batches_keep_twice_the_concurrency_in_flight_within_the_byte_bound() -> None:
    def ctx(nbytes: int, threads: int = 2, max_bytes: int = 64 << 20) -> Any:
        settings = cuzarr.Settings(threads=threads, max_bytes_in_flight=max_bytes)
        return SimpleNamespace(settings=settings, codec=SimpleNamespace(nbytes=nbytes))

    batching, threads = remote_batching(ctx(8192), 1000, 32)
    assert threads == 2 and batching.parallel and batching.size * threads == 64
    batching, threads = remote_batching(ctx(8192, threads=16), 1000, 32)
    assert threads == 16 and batching.size == 4
    batching, threads = remote_batching(ctx(8192, threads=1), 1000, 32)
    assert threads == 2  # one thread decodes while the other's requests are in flight
    # Bytes in flight bound the batch: 1 MiB chunks under 4 MiB on 2 threads, 2 a batch.
    assert remote_batching(ctx(1 << 20, max_bytes=4 << 20), 1000, 32)[0].size == 2
    assert remote_batching(ctx(1 << 30), 1000, 32)[0].size == 1
    # A read of few chunks: two batches a thread at least, so that both threads decode.
    assert remote_batching(ctx(8192), 5, 32)[0].size == 2
    assert remote_batching(ctx(1 << 20), 32, 32)[0].size == 8
    assert remote_batching(ctx(8192), 1, 32)[0].size == 1


def test_a_corrupt_chunk_in_a_remote_batch_is_named() -> None:
    zs = MemoryStore()
    z = zarr.create_array(zs, shape=(40, 40), chunks=(5, 5), dtype="i4")
    z[...] = np.arange(1600).reshape(40, 40)
    good = zs._store_dict["c/2/3"]
    zs._store_dict["c/2/3"] = type(good).from_bytes(b"not a zstd frame" * 4)
    a = _array(zs, RemoteMemory(zs))
    with pytest.raises(CorruptChunkError, match=r"c/2/3"):
        a[...]
