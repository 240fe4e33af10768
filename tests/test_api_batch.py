"""``Array.read_many``: several selections in one batch, each shard or chunk fetched once."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import cuzarr
from cuzarr.codecs.base import Buf
from cuzarr.stores.base import BaseChunkStore, GetResult, Range, StoreCaps, Suffix
from cuzarr.testing import assert_same_array

LAYOUTS: dict[str, dict[str, Any]] = {
    "chunked": {"chunks": (7, 5)},
    "chunked-v2": {"chunks": (7, 5), "zarr_format": 2},
    "uncompressed": {"chunks": (8, 8), "compressors": None},
    "sharded": {"chunks": (4, 5), "shards": (8, 10)},
    "sharded-index-start": {"chunks": (4, 5), "shards": (8, 10), "index_location": "start"},
}

SELECTIONS: list[Any] = [
    np.s_[...],
    np.s_[3:17, 2:9],
    np.s_[5:12, 4:20],  # overlaps the previous one
    np.s_[5:12, 4:20],  # the same again
    np.s_[::-3, 1::4],
    np.s_[7, :],
    np.s_[None, 2:5, -1],
    np.s_[..., 3],
    np.s_[4, 6],  # a 0-d array (no ellipsis)
    np.s_[..., 4, 6],  # a scalar
    np.s_[20:23, 0:3],  # missing chunks: fill
    np.s_[0:0, :],  # empty
    ([1, 5, 9], slice(None)),  # not basic: read after the batch
]


def _array(tmp_path: Path, layout: str) -> tuple[cuzarr.Array, np.ndarray]:
    kwargs = dict(LAYOUTS[layout])
    if kwargs.pop("index_location", None) == "start":
        kwargs["shards"] = None
        kwargs["serializer"] = zarr.codecs.ShardingCodec(
            chunk_shape=(4, 5), index_location="start"
        )
        kwargs["chunks"] = (8, 10)
    expected = np.random.default_rng(3).integers(0, 1 << 20, (23, 21)).astype("i4")
    z = zarr.create_array(
        zarr.storage.LocalStore(tmp_path / "a.zarr"), shape=expected.shape, dtype="i4",
        fill_value=-5, **kwargs,
    )
    z[0:20, :] = expected[0:20, :]
    expected[20:, :] = -5
    a = cuzarr.open(tmp_path / "a.zarr")
    assert isinstance(a, cuzarr.Array)
    return a, expected


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_read_many_equals_one_by_one(tmp_path: Path, layout: str) -> None:
    a, expected = _array(tmp_path, layout)
    got = a.read_many(SELECTIONS)
    assert len(got) == len(SELECTIONS)
    for selection, value in zip(SELECTIONS, got, strict=True):
        one = a[selection]
        assert type(value) is type(one), selection
        assert_same_array(value, one, msg=repr(selection))
        if isinstance(selection, tuple) and isinstance(selection[0], list):
            assert_same_array(value, expected[selection[0]], msg="fancy")
        else:
            want = np.asarray(expected[selection])
            assert_same_array(np.asarray(value), want, msg=repr(selection))
    assert a.read_many([]) == []


def test_results_are_independent_buffers(tmp_path: Path) -> None:
    a, expected = _array(tmp_path, "sharded")
    first, second = a.read_many([np.s_[0:8, 0:10], np.s_[0:8, 0:10]])
    first[...] = 0
    assert_same_array(second, expected[0:8, 0:10])


class SlowRemoteStore(BaseChunkStore):
    """A remote store over a dict: each request takes ``delay`` s; counts requests in flight."""

    caps = StoreCaps(remote=True, concurrency=64)

    def __init__(self, objects: dict[str, bytes], delay: float) -> None:
        self.objects = objects
        self.delay = delay
        self.lock = threading.Lock()
        self.in_flight = 0
        self.peak = 0
        self.requests: list[str] = []
        self.name = "slow://"

    def _request(self, key: str) -> None:
        with self.lock:
            self.requests.append(key)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        time.sleep(self.delay)
        with self.lock:
            self.in_flight -= 1

    def get(
        self,
        key: str,
        byte_range: Range | Suffix | None = None,
        **options: Any,
    ) -> GetResult | None:
        self._request(key)
        data = self.objects.get(key)
        if data is None:
            return None
        if isinstance(byte_range, Suffix):
            part = data[-byte_range.length :]
        elif byte_range is not None:
            part = data[byte_range.start : byte_range.start + byte_range.length]
        else:
            part = data
        return GetResult(np.frombuffer(part, np.uint8), len(data))

    def get_ranges(
        self, key: str, ranges: Sequence[tuple[int, int]], **options: Any
    ) -> list[Buf | None] | None:
        self._request(key)
        data = self.objects.get(key)
        if data is None:
            return None
        return [np.frombuffer(data[s : s + n], np.uint8) for s, n in ranges]

    def check_writable(self) -> None:
        raise PermissionError("read-only")

    def put(self, key: str, data: Buf, **options: Any) -> None:
        raise PermissionError("read-only")

    def delete(self, key: str) -> None:
        raise PermissionError("read-only")


def _remote(
    tmp_path: Path, shards: tuple[int, int] | None
) -> tuple[Any, np.ndarray, SlowRemoteStore]:
    from cuzarr.api import StoreHandle
    from cuzarr.metadata.load import read_node

    expected = np.random.default_rng(4).integers(0, 1000, (64, 64)).astype("u2")
    z = zarr.create_array(
        zarr.storage.LocalStore(tmp_path / "r.zarr"), shape=expected.shape, dtype="u2",
        chunks=(8, 8), shards=shards,
    )
    z[...] = expected
    root = tmp_path / "r.zarr"
    objects = {
        p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()
    }
    store = SlowRemoteStore(objects, delay=0.05)
    spec = read_node(cuzarr.stores.LocalChunkStore(root), "")
    a = cuzarr.Array(StoreHandle(root=str(root), read_only=True), spec, settings=cuzarr.Settings())
    a._store = store  # the array reads through the slow remote store
    return a, expected, store


WINDOWS = [np.s_[0:10, 0:10], np.s_[5:20, 3:12], np.s_[30:40, 30:40], np.s_[33:60, 1:7]]


@pytest.mark.parametrize("shards", [(32, 32), None], ids=["sharded", "chunked"])
def test_batch_fetches_each_object_once_all_in_flight_together(
    tmp_path: Path, shards: tuple[int, int] | None
) -> None:
    a, expected, store = _remote(tmp_path, shards)
    got = a.read_many(WINDOWS)
    for w, value in zip(WINDOWS, got, strict=True):
        assert_same_array(value, expected[w])
    # Each shard (or chunk) any window touches is requested exactly once ...
    touched = set()
    for w in WINDOWS:
        size = shards or (8, 8)
        rows = range(w[0].start // size[0], (w[0].stop - 1) // size[0] + 1)
        cols = range(w[1].start // size[1], (w[1].stop - 1) // size[1] + 1)
        touched |= {f"c/{i}/{j}" for i in rows for j in cols}
    assert sorted(store.requests) == sorted(touched)
    # ... and all of them are in flight at the same time (one round trip for the batch).
    assert store.peak == len(touched)
    # One by one, shards shared by windows are requested again, and never all at once.
    store.requests.clear()
    store.peak = 0
    for w in WINDOWS:
        a[w]
    assert len(store.requests) > len(touched) or store.peak < len(touched)
