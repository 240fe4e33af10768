"""The LRU object cache of remote stores (``Settings.cache_bytes``), without a server."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from cuzarr.codecs.base import Buf
from cuzarr.stores.base import BaseChunkStore, GetResult, PutMode, Range, StoreCaps, Suffix
from cuzarr.stores.cached import CachedChunkStore, ObjectCache, cached


class CountingStore(BaseChunkStore):
    """A dict-backed remote store that counts the requests it serves."""

    caps = StoreCaps(remote=True, versions=True)

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.calls: list[tuple[str, str]] = []
        self.name = "counting://"

    def get(
        self, key: str, byte_range: Range | Suffix | None = None, **options: Any
    ) -> GetResult | None:
        kind = {Range: "range", Suffix: "suffix"}.get(type(byte_range), "get")
        self.calls.append((kind, key))
        data = self.objects.get(key)
        if data is None:
            return None
        if isinstance(byte_range, Suffix):
            part = data[-byte_range.length :]
        elif byte_range is not None:
            part = data[byte_range.start : byte_range.start + byte_range.length]
        else:
            part = data
        return GetResult(np.frombuffer(part, np.uint8), len(data), f"v{hash(data)}")

    def get_many(self, keys: Sequence[str], size_hint: int | None = None) -> list[Buf | None]:
        self.calls.append(("get_many", ",".join(keys)))
        return [None if k not in self.objects else np.frombuffer(self.objects[k], np.uint8)
                for k in keys]

    def read_into(self, key: str, out: np.ndarray) -> int | None:
        raise AssertionError("the cache reads whole objects through get")

    def get_ranges(
        self, key: str, ranges: Sequence[tuple[int, int]], **options: Any
    ) -> list[Buf | None] | None:
        self.calls.append(("ranges", key))
        data = self.objects.get(key)
        if data is None:
            return None
        return [np.frombuffer(data[s : s + n], np.uint8) for s, n in ranges]

    def check_writable(self) -> None:
        pass

    def put(self, key: str, data: Buf, **options: Any) -> None:
        self.calls.append(("set", key))
        self.objects[key] = bytes(memoryview(data))

    def delete(self, key: str) -> None:
        self.calls.append(("delete", key))
        self.objects.pop(key, None)


def _store(max_bytes: int = 1 << 20) -> tuple[CountingStore, CachedChunkStore]:
    inner = CountingStore()
    return inner, cached(inner, ObjectCache(max_bytes))


def test_whole_objects_ranges_and_suffixes_come_from_the_cache() -> None:
    inner, store = _store()
    inner.objects["a"] = bytes(range(100))
    first = store.get("a")
    assert first is not None and bytes(first.data) == bytes(range(100))
    inner.calls.clear()
    assert bytes(_data(store.get("a"))) == bytes(range(100))
    parts = store.get_ranges("a", [(0, 3), (97, 3)])
    assert parts is not None and [bytes(p) for p in parts] == [b"\x00\x01\x02", b"abc"]
    suffix = store.get("a", Suffix(4))
    assert suffix is not None and bytes(suffix.data) == bytes([96, 97, 98, 99])
    assert suffix.size == 100
    part = store.get("a", Range(10, 3))
    assert part is not None and bytes(part.data) == bytes([10, 11, 12])
    out = np.empty(100, np.uint8)
    assert store.read_into("a", out) == 100 and bytes(out) == bytes(range(100))
    assert inner.calls == []
    # Cached bytes cannot be changed by whoever receives them.
    with pytest.raises(ValueError):
        np.asarray(_data(store.get("a")))[0] = 1


def test_get_many_serves_hits_and_fetches_misses_in_one_call() -> None:
    inner, store = _store()
    inner.objects.update({"a": b"AA", "b": b"BBB", "c": b"C"})
    assert store.get("a") is not None and store.get("nope") is None
    inner.calls.clear()
    got = store.get_many(["a", "b", "nope", "c", "gone"])
    assert [None if g is None else bytes(memoryview(g)) for g in got] == [
        b"AA", b"BBB", None, b"C", None
    ]
    # One call for the keys not cached (the missing "nope" was remembered); now all are.
    assert inner.calls == [("get_many", "b,c,gone")]
    inner.calls.clear()
    again = store.get_many(["c", "gone", "b"])
    assert [None if g is None else bytes(memoryview(g)) for g in again] == [b"C", None, b"BBB"]
    assert inner.calls == []


def test_ranges_of_uncached_objects_go_to_the_store_and_are_not_kept() -> None:
    inner, store = _store()
    inner.objects["a"] = b"0123456789"
    assert [bytes(p) for p in store.get_ranges("a", [(2, 3)]) or []] == [b"234"]
    assert [bytes(p) for p in store.get_ranges("a", [(2, 3)]) or []] == [b"234"]
    assert inner.calls == [("ranges", "a"), ("ranges", "a")]


def test_missing_keys_are_remembered() -> None:
    inner, store = _store()
    assert store.get("nope") is None
    assert store.get("nope") is None
    assert store.get_ranges("nope", [(0, 1)]) is None
    assert store.get("nope", Suffix(1)) is None
    assert inner.calls == [("get", "nope")]


def test_writes_and_deletes_go_through_and_drop_the_entry() -> None:
    inner, store = _store()
    inner.objects["a"] = b"old"
    assert bytes(_data(store.get("a"))) == b"old"
    store.put("a", np.frombuffer(b"new", np.uint8))
    assert bytes(_data(store.get("a"))) == b"new"
    store.delete("a")
    assert store.get("a") is None
    assert inner.calls == [("get", "a"), ("set", "a"), ("get", "a"), ("delete", "a"), ("get", "a")]


def test_a_fetch_overlapping_a_write_is_not_kept() -> None:
    """A read that began before a write may hold the old bytes: it must not be cached."""
    inner = CountingStore()
    inner.objects["a"] = b"old"
    cache = ObjectCache(1 << 20)
    started, release = threading.Event(), threading.Event()
    real_get = inner.get

    def slow_get(key: str, *args: Any, **options: Any) -> GetResult | None:
        value = real_get(key)  # the old bytes, read before the write lands
        started.set()
        release.wait(5)
        return value

    inner.get = slow_get  # type: ignore[method-assign]
    store = cached(inner, cache)  # type: ignore[arg-type]
    got: list[GetResult | None] = []
    reader = threading.Thread(target=lambda: got.append(store.get("a")))
    reader.start()
    assert started.wait(5)
    store.put("a", np.frombuffer(b"new", np.uint8))
    release.set()
    reader.join(5)
    assert bytes(_data(got[0])) == b"old"  # what the read saw
    inner.get = real_get  # type: ignore[method-assign]
    assert bytes(_data(store.get("a"))) == b"new"  # not the stale bytes


def test_lru_bound_counts_entries_and_skips_large_objects() -> None:
    overhead = ObjectCache.ENTRY_OVERHEAD
    inner, store = _store(max_bytes=4 * (100 + overhead))
    for k in "abcde":
        inner.objects[k] = bytes(100)
    inner.objects["big"] = bytes(300 + 2 * overhead)  # over a quarter of the bound
    for k in "abcde":
        store.get(k)
    assert len(store.cache) == 4 and store.cache.nbytes == 4 * (100 + overhead)
    inner.calls.clear()
    store.get("a")  # evicted first (least recently used)
    store.get("e")
    assert inner.calls == [("get", "a")]
    store.get("big")
    store.get("big")
    assert inner.calls.count(("get", "big")) == 2


def test_reads_for_update_and_conditional_reads_bypass_the_cache() -> None:
    """A read-modify-write reads the store itself (``fresh``): the version it puts against
    must be the store's current one, never a cached copy's. ``if_match`` reads likewise."""
    inner = CountingStore()
    inner.objects["a"] = b"v1"
    store = cached(inner, ObjectCache(1 << 20))
    assert bytes(_data(store.get("a"))) == b"v1"
    inner.calls.clear()
    fresh = store.get("a", fresh=True)
    assert fresh is not None and fresh.version == f"v{hash(b'v1')}"
    assert inner.calls == [("get", "a")] and len(store.cache) == 0
    inner.calls.clear()
    store.get("a", Range(0, 1), if_match="x")
    assert inner.calls == [("range", "a")]
    assert store.caps.versions and store.caps.remote and not store.caps.read_into


def test_puts_pass_mode_and_version_through() -> None:
    seen: list[tuple[str, PutMode, str | None]] = []

    class Recording(CountingStore):
        def put(self, key: str, data: Buf, **options: Any) -> None:
            seen.append((key, options["mode"], options["version"]))
            super().put(key, data)

    store = cached(Recording(), ObjectCache(1 << 20))
    store.put("a", b"x", mode=PutMode.UPDATE, version="v7")
    store.put("b", b"y", mode=PutMode.CREATE)
    assert seen == [("a", PutMode.UPDATE, "v7"), ("b", PutMode.CREATE, None)]


def _data(got: GetResult | None) -> Buf:
    assert got is not None
    return got.data
