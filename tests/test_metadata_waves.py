"""Metadata of remote stores fetched in waves (``fetch_documents``, ``read_nodes``).

On a store whose requests cost a round trip, cuzarr asks for the metadata documents of many
nodes together: every ``zarr.json``, then ``.zarray`` and ``.zattrs`` where there was none,
then ``.zgroup`` where there was no ``.zarray``. These tests run the same trees through a
local store (one ``get`` per document, as before) and through the same data declared remote
(a recording wrapper), and check that the results are the same node for node (errors too),
which documents each wave asked for, and that a store failure still lands on its own node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
import zarr
from zarr.storage import MemoryStore

from counting_store import CountingStore
from cuzarr.codecs.base import Buf
from cuzarr.errors import CuzarrError, NodeNotFoundError, StoreError
from cuzarr.metadata.load import fetch_documents, read_node, read_nodes
from cuzarr.stores import MemoryChunkStore
from cuzarr.stores.base import GetResult, Range, Suffix
from cuzarr.stores.zarr_store import ZarrChunkStore


class RecordingStore(MemoryChunkStore):
    """A memory store that records its requests, declared remote (or not), failing on keys."""

    def __init__(self, store: Any, *, remote: bool, fail: Sequence[str] = ()) -> None:
        super().__init__(store)
        self.caps = replace(self.caps, remote=remote)
        self.calls: list[tuple[str, list[str]]] = []
        self.fail = set(fail)

    def _check(self, keys: Sequence[str]) -> None:
        for key in keys:
            if key in self.fail:
                raise StoreError(f"Failed to read '{key}' in {self.name}: injected")

    def get(
        self,
        key: str,
        byte_range: Range | Suffix | None = None,
        **kwargs: Any,
    ) -> GetResult | None:
        self.calls.append(("get", [key]))
        self._check([key])
        return super().get(key, byte_range, **kwargs)

    def get_many(self, keys: Sequence[str], size_hint: int | None = None) -> list[Buf | None]:
        self.calls.append(("get_many", list(keys)))
        self._check(keys)
        got = [MemoryChunkStore.get(self, key) for key in keys]
        return [None if g is None else g.data for g in got]


def _tree() -> MemoryStore:
    """v3 and v2 arrays and groups side by side, one node with a malformed document."""
    zs = MemoryStore()
    root = zarr.open_group(zs, mode="w", zarr_format=3, attributes={"title": "root"})
    root.create_array("a3", shape=(4, 4), chunks=(2, 2), dtype="i2")
    root.create_group("g3", attributes={"k": 1})
    g2 = zarr.open_group(zs, path="g2", mode="w", zarr_format=2, attributes={"v": [1, 2]})
    g2.create_array("a2", shape=(6,), chunks=(3,), dtype="f4", attributes={"units": "m"})
    g2.create_array("b2", shape=(5,), chunks=(5,), dtype="u1")
    zarr.create_array(zs, name="plain2", shape=(3,), chunks=(3,), dtype="i8", zarr_format=2)
    zarr.open_group(zs, path="bare2", mode="w", zarr_format=2)
    zs._store_dict["bad3/zarr.json"] = zarr.core.buffer.cpu.Buffer.from_bytes(b"{not json")
    return zs


PATHS = ["", "a3", "g3", "g2", "g2/a2", "g2/b2", "plain2", "bare2", "bad3", "missing"]


def _one(store: Any, path: str, **kwargs: Any) -> Any:
    """``read_node``'s result, or the error it raised."""
    try:
        return read_node(store, path, **kwargs)
    except CuzarrError as exc:
        return exc


def _same(a: Any, b: Any) -> bool:
    """The same node, or errors of one type with one message (both stores share a name)."""
    if isinstance(a, CuzarrError) or isinstance(b, CuzarrError):
        return type(a) is type(b) and str(a) == str(b)
    return bool(a == b)


@pytest.mark.parametrize("zarr_format", [None, 2, 3])
def test_read_nodes_matches_node_by_node_reads_in_three_waves(zarr_format: int | None) -> None:
    zs = _tree()
    local = RecordingStore(zs, remote=False)
    remote = RecordingStore(zs, remote=True)
    want = [_one(local, p, zarr_format=zarr_format) for p in PATHS]
    assert not [c for c in local.calls if c[0] == "get_many"]
    got = read_nodes(remote, PATHS, zarr_format=zarr_format)
    assert len(got) == len(want)
    for path, g, w in zip(PATHS, got, want, strict=True):
        assert _same(g, w), (path, g, w)
    # Every document came in waves of requests sent together, none one by one.
    kinds = [kind for kind, _ in remote.calls]
    assert kinds == ["get_many"] * len(kinds) and 1 <= len(kinds) <= 3
    waves = [keys for _, keys in remote.calls]
    if zarr_format in (None, 3):
        assert waves[0] == [f"{p}/zarr.json" if p else "zarr.json" for p in PATHS]
    # The documents asked for are those node-by-node reads asked for, plus .zattrs of paths
    # that hold no node at all.
    asked_local = {k for _, keys in local.calls for k in keys}
    asked_remote = [k for keys in waves for k in keys]
    assert len(asked_remote) == len(set(asked_remote))
    extra = set(asked_remote) - asked_local
    assert all(k.endswith("/.zattrs") for k in extra), extra
    assert asked_local <= set(asked_remote)


@pytest.mark.parametrize("zarr_format", [None, 2, 3])
def test_read_nodes_with_a_listing_fetch_only_what_exists_in_one_wave(
    zarr_format: int | None,
) -> None:
    zs = _tree()
    listed = set(zs._store_dict) | {"gone/zarr.json"}  # listed, then deleted before the read
    paths = [*PATHS, "gone"]
    local = RecordingStore(zs, remote=False)
    want = [_one(local, p, zarr_format=zarr_format) for p in paths]
    remote = RecordingStore(zs, remote=True)
    got = read_nodes(remote, paths, zarr_format=zarr_format, listed=listed)
    for path, g, w in zip(paths, got, want, strict=True):
        assert _same(g, w), (path, g, w)
    waves = [keys for kind, keys in remote.calls if kind == "get_many"]
    assert len(waves) == 1
    assert set(waves[0]) <= listed and len(waves[0]) == len(set(waves[0]))
    # What node-by-node reads find is asked for; nothing else but the vanished document
    # (and, for it, the follow-up reads node-by-node makes).
    found = {k for _, keys in local.calls for k in keys if k in zs._store_dict}
    assert found <= set(waves[0])
    singles = [keys[0] for kind, keys in remote.calls if kind == "get"]
    assert all(k.startswith("gone/") for k in singles), singles


@pytest.mark.parametrize(
    ("path", "waves"),
    [
        ("a3", [["a3/zarr.json"]]),
        ("g3", [["g3/zarr.json"]]),
        ("g2/a2", [["g2/a2/zarr.json"], ["g2/a2/.zarray", "g2/a2/.zattrs"]]),
        ("g2", [["g2/zarr.json"], ["g2/.zarray", "g2/.zattrs"], ["g2/.zgroup"]]),
        ("missing", [["missing/zarr.json"], ["missing/.zarray", "missing/.zattrs"],
                     ["missing/.zgroup"]]),
    ],
)
def test_one_remote_node_costs_one_round_trip_per_format_step(
    path: str, waves: list[list[str]]
) -> None:
    zs = _tree()
    remote = RecordingStore(zs, remote=True)
    got = _one(remote, path)
    assert remote.calls == [("get_many", w) for w in waves]
    assert _same(got, _one(RecordingStore(zs, remote=False), path))
    if path == "missing":
        assert isinstance(got, NodeNotFoundError) and "'missing'" in str(got)


def test_a_failed_request_is_the_failing_nodes_error_only() -> None:
    zs = _tree()
    remote = RecordingStore(zs, remote=True, fail=["g2/a2/.zarray"])
    got = read_nodes(remote, PATHS)
    want = [_one(RecordingStore(zs, remote=False), p) for p in PATHS]
    for path, g, w in zip(PATHS, got, want, strict=True):
        if path == "g2/a2":
            assert isinstance(g, StoreError) and "'g2/a2/.zarray'" in str(g)
        else:
            assert _same(g, w), (path, g, w)
    # The failed wave was the second (.zarray and .zattrs): the first wave's documents are
    # kept, so no zarr.json is asked for twice; the failed wave's are asked for again one by
    # one (each node's failure its own).
    asked = [k for _, keys in remote.calls for k in keys]
    assert [kind for kind, _ in remote.calls[:2]] == ["get_many", "get_many"]
    assert remote.calls[0][1] == [f"{p}/zarr.json" if p else "zarr.json" for p in PATHS]
    v3_asked = [k for k in asked if k.endswith("zarr.json")]
    assert len(v3_asked) == len(set(v3_asked)) == len(PATHS)
    assert all(kind == "get" for kind, _ in remote.calls[2:])
    # One node read alone raises the store's error naming the document, asked for once.
    remote.calls.clear()
    with pytest.raises(StoreError, match=r"'g2/a2/\.zarray'"):
        read_node(remote, "g2/a2")
    asked = [k for _, keys in remote.calls for k in keys]
    assert asked.count("g2/a2/.zarray") == 1


def test_fetch_documents_marks_missing_documents() -> None:
    zs = _tree()
    docs = fetch_documents(RecordingStore(zs, remote=True), ["a3", "plain2"])
    assert docs["a3/zarr.json"] is not None and docs["plain2/zarr.json"] is None
    assert docs["plain2/.zarray"] is not None and "plain2/.zattrs" in docs
    assert "plain2/.zgroup" not in docs and "a3/.zarray" not in docs
    assert fetch_documents(RecordingStore(zs, remote=True), []) == {}


def test_zarr_store_get_many_matches_get() -> None:
    zs = _tree()
    store = ZarrChunkStore(zs)
    keys = ["a3/zarr.json", "nothing/here", "g2/.zgroup", "g2/a2/.zattrs"]
    got = store.get_many(keys)
    assert got[1] is None
    for key, value in zip(keys, got, strict=True):
        one = store.get(key)
        if one is None:
            assert value is None
        else:
            assert value is not None and bytes(memoryview(value)) == bytes(memoryview(one.data))
    assert store.get_many([]) == []


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_group_members_of_a_remote_store_in_waves(zarr_format: int) -> None:
    import cuzarr

    zs = CountingStore()
    root = zarr.open_group(zs, mode="w", zarr_format=zarr_format, attributes={"t": 1})
    for i in range(5):
        root.create_array(f"a{i}", shape=(2,), dtype="i4", chunks=(2,))[...] = i
    root.create_group("sub", attributes={"k": 2})
    plain = MemoryStore(store_dict=zs._store_dict)
    g = cuzarr.open(zs)
    assert isinstance(g, cuzarr.Group)
    assert isinstance(g._handle.chunk_store(), ZarrChunkStore)
    zs.gets.clear()
    zs.max_in_flight = 0
    members = dict(g.members())
    # Every listed name's first document asked for together, none twice.
    assert zs.max_in_flight >= 6
    assert len(zs.gets) == len(set(zs.gets))
    local = cuzarr.open(plain)
    assert isinstance(local, cuzarr.Group)
    want = dict(local.members())
    assert sorted(members) == sorted(want) == ["a0", "a1", "a2", "a3", "a4", "sub"]
    for name, member in members.items():
        assert type(member) is type(want[name])
        assert member.metadata == want[name].metadata
    assert g.keys() == local.keys()
    assert [n for n, _ in g.arrays()] == ["a0", "a1", "a2", "a3", "a4"]
    assert int(members["a3"][0]) == 3
