"""The LRU object cache of remote stores (``Settings.cache_bytes``), without a server."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from cuzarr.codecs.base import Buf
from cuzarr.stores.cached import CachedChunkStore, ObjectCache, cached


class CountingStore:
    """A dict-backed remote store that counts the requests it serves."""

    remote = True

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.calls: list[tuple[str, str]] = []
        self.name = "counting://"

    def get(self, key: str, scratch: object = None) -> Buf | None:
        self.calls.append(("get", key))
        data = self.objects.get(key)
        return None if data is None else np.frombuffer(data, np.uint8)

    def read_into(self, key: str, out: np.ndarray) -> int | None:
        raise AssertionError("the cache reads whole objects through get")

    def get_ranges(self, key: str, ranges: list[tuple[int, int]]) -> list[Buf] | None:
        self.calls.append(("ranges", key))
        data = self.objects.get(key)
        if data is None:
            return None
        return [np.frombuffer(data[s : s + n], np.uint8) for s, n in ranges]

    def get_suffix(self, key: str, length: int) -> tuple[Buf, int | None] | None:
        self.calls.append(("suffix", key))
        data = self.objects.get(key)
        if data is None:
            return None
        return np.frombuffer(data[-length:], np.uint8), len(data)

    def check_writable(self) -> None:
        pass

    def set(self, key: str, data: Buf) -> None:
        self.calls.append(("set", key))
        self.objects[key] = bytes(memoryview(data))

    def delete(self, key: str) -> None:
        self.calls.append(("delete", key))
        self.objects.pop(key, None)


def _store(max_bytes: int = 1 << 20) -> tuple[CountingStore, CachedChunkStore]:
    inner = CountingStore()
    return inner, cached(inner, ObjectCache(max_bytes))  # type: ignore[arg-type]


def test_whole_objects_ranges_and_suffixes_come_from_the_cache() -> None:
    inner, store = _store()
    inner.objects["a"] = bytes(range(100))
    first = store.get("a")
    assert first is not None and bytes(first) == bytes(range(100))
    inner.calls.clear()
    assert bytes(store.get("a")) == bytes(range(100))  # type: ignore[arg-type]
    parts = store.get_ranges("a", [(0, 3), (97, 3)])
    assert parts is not None and [bytes(p) for p in parts] == [b"\x00\x01\x02", b"abc"]
    suffix = store.get_suffix("a", 4)
    assert suffix is not None and bytes(suffix[0]) == bytes([96, 97, 98, 99]) and suffix[1] == 100
    out = np.empty(100, np.uint8)
    assert store.read_into("a", out) == 100 and bytes(out) == bytes(range(100))
    assert inner.calls == []
    # Cached bytes cannot be changed by whoever receives them.
    with pytest.raises(ValueError):
        np.asarray(store.get("a"))[0] = 1


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
    assert store.get_suffix("nope", 1) is None
    assert inner.calls == [("get", "nope")]


def test_writes_and_deletes_go_through_and_drop_the_entry() -> None:
    inner, store = _store()
    inner.objects["a"] = b"old"
    assert bytes(store.get("a")) == b"old"  # type: ignore[arg-type]
    store.set("a", np.frombuffer(b"new", np.uint8))
    assert bytes(store.get("a")) == b"new"  # type: ignore[arg-type]
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

    def slow_get(key: str, scratch: object = None) -> Buf | None:
        value = real_get(key)  # the old bytes, read before the write lands
        started.set()
        release.wait(5)
        return value

    inner.get = slow_get  # type: ignore[method-assign]
    store = cached(inner, cache)  # type: ignore[arg-type]
    got: list[Buf | None] = []
    reader = threading.Thread(target=lambda: got.append(store.get("a")))
    reader.start()
    assert started.wait(5)
    store.set("a", np.frombuffer(b"new", np.uint8))
    release.set()
    reader.join(5)
    assert bytes(got[0]) == b"old"  # type: ignore[arg-type]  # what the read saw
    inner.get = real_get  # type: ignore[method-assign]
    assert bytes(store.get("a")) == b"new"  # type: ignore[arg-type]  # not the stale bytes


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


def test_stores_with_conditional_writes_read_for_update_from_the_store() -> None:
    inner = CountingStore()
    inner.objects["a"] = b"v1"
    updates: list[str] = []

    def get_for_update(key: str) -> Buf | None:
        updates.append(key)
        return inner.get(key)

    inner.get_for_update = get_for_update  # type: ignore[attr-defined]
    store = cached(inner, ObjectCache(1 << 20))  # type: ignore[arg-type]
    assert bytes(store.get("a")) == b"v1"  # type: ignore[arg-type]
    assert bytes(store.get_for_update("a")) == b"v1"  # type: ignore[attr-defined]
    assert updates == ["a"] and len(store.cache) == 0
    assert getattr(cached(CountingStore(), ObjectCache(1)), "get_for_update", None) is None  # type: ignore[arg-type]
