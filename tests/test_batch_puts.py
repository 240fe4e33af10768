"""Batches of local writes in one call into C (``LocalChunkStore.put_many``, ``cz_put_files``).

The same files as one ``put`` per key: temporary names beside the key, swaps of large replaced
files, folders made on demand, nothing torn or left behind when a file cannot be written, and
the key named in the error.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec
from zarr.storage import LocalStore

import cuzarr
from cuzarr import _native
from cuzarr.errors import StoreError
from cuzarr.stores import local, replace
from cuzarr.stores.base import BaseChunkStore
from cuzarr.stores.cached import CachedChunkStore, ObjectCache
from cuzarr.stores.local import EXCHANGE_MIN, TEMP_SUFFIX, LocalChunkStore

pytestmark = pytest.mark.skipif(
    _native.helper() is None, reason=f"batch helper: {_native.unavailable_reason()}"
)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _blob(i: int, n: int = 100) -> np.ndarray:
    return np.full(n, i % 251, np.uint8)


def _spy_batches(
    monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...] = ("_put_files",)
) -> list[int]:
    """Record the size of every batch handed to the helper calls ``names`` of the store."""
    sizes: list[int] = []
    for name in names:
        real = getattr(local, name)
        assert real is not None

        def spy(paths: list[bytes], *args: Any, _real: Any = real, **kw: Any) -> list[int]:
            sizes.append(len(paths))
            return list(_real(paths, *args, **kw))

        monkeypatch.setattr(local, name, spy)
    return sizes


def test_a_batch_writes_every_file_and_makes_missing_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "new" / "store"  # the store's own folder is missing too
    store = LocalChunkStore(root)
    sizes = _spy_batches(monkeypatch)
    keys = [f"c/{i % 3}/{i}" for i in range(12)] + ["top"]
    store.put_many(keys, [_blob(i) for i in range(len(keys))])
    # One call: the helper made the folders on the way.
    assert sizes == [13]
    assert _files(root) == {k: bytes(_blob(i)) for i, k in enumerate(keys)}
    # The old files replaced, no temporary file left.
    store.put_many(keys, [_blob(i + 7, 50) for i in range(len(keys))])
    assert sizes == [13, 13]
    assert _files(root) == {k: bytes(_blob(i + 7, 50)) for i, k in enumerate(keys)}


def test_a_file_where_a_folder_should_be_is_named(tmp_path: Path) -> None:
    store = LocalChunkStore(tmp_path)
    (tmp_path / "c").write_bytes(b"not a folder")
    with pytest.raises(StoreError, match=r"Failed to write chunk 'c/0/1'"):
        store.put_many(["d/0", "c/0/1", "d/1"], [b"a", b"b", b"c"])
    assert _files(tmp_path) == {"c": b"not a folder", "d/0": b"a", "d/1": b"c"}


def test_bytes_memoryviews_and_strided_arrays_are_written_whole(tmp_path: Path) -> None:
    store = LocalChunkStore(tmp_path)
    strided = np.arange(200, dtype=np.uint8)[::2]
    wide = np.arange(12, dtype="<u2").reshape(3, 4)
    store.put_many(
        ["a", "b", "c", "d"], [b"bytes", memoryview(b"view"), strided, wide]
    )
    got = _files(tmp_path)
    assert got == {"a": b"bytes", "b": b"view", "c": strided.tobytes(), "d": wide.tobytes()}


def test_large_replaced_files_are_swapped_and_the_old_ones_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replace, "swaps_help", lambda path: True)  # on any file system
    store = LocalChunkStore(tmp_path)
    big = EXCHANGE_MIN + 10
    store.put_many(["a", "b", "small"], [_blob(1, big), _blob(2, big), _blob(3)])
    removed: list[str] = []
    real = replace.remover.remove

    def spy(path: str) -> None:
        removed.append(path)
        real(path)

    monkeypatch.setattr(replace.remover, "remove", spy)
    store.put_many(
        ["a", "b", "small", "new"], [_blob(4, big), _blob(5, big), _blob(6), _blob(7, big)]
    )
    store.settle()
    if store._exchange:  # swaps worked here: the two replaced large files were swapped
        assert sorted(Path(p).name.split(".")[0] for p in removed) == ["a", "b"]
        assert all(p.endswith(TEMP_SUFFIX) for p in removed)
    else:  # renameat2 refused by this system: renamed over
        assert removed == []
    assert _files(tmp_path) == {
        "a": bytes(_blob(4, big)),
        "b": bytes(_blob(5, big)),
        "small": bytes(_blob(6)),
        "new": bytes(_blob(7, big)),
    }


def test_a_file_system_that_cannot_swap_turns_swaps_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replace, "swaps_help", lambda path: True)
    store = LocalChunkStore(tmp_path)
    big = EXCHANGE_MIN + 1
    store.put_many(["a", "b"], [_blob(1, big), _blob(2, big)])
    real = local._put_files
    assert real is not None

    def no_exchange(paths: list[bytes], buffers: list[Any], **kw: Any) -> list[int]:
        status = real(paths, buffers, **{**kw, "exchange": False})
        return [2 if code == 0 and kw["exchange"] else code for code in status]

    monkeypatch.setattr(local, "_put_files", no_exchange)
    store.put_many(["a", "b"], [_blob(3, big), _blob(4, big)])
    assert store._exchange is False
    assert _files(tmp_path) == {"a": bytes(_blob(3, big)), "b": bytes(_blob(4, big))}


def test_a_file_that_cannot_be_written_is_named_and_the_rest_land(tmp_path: Path) -> None:
    store = LocalChunkStore(tmp_path)
    (tmp_path / "c" / "1").mkdir(parents=True)
    (tmp_path / "c" / "1" / "inside").write_bytes(b"x")  # a folder where a chunk should be
    store.put_many(["c/0", "c/2"], [b"old0", b"old2"])
    with pytest.raises(StoreError, match=r"Failed to write chunk 'c/1' in file://"):
        store.put_many(["c/0", "c/1", "c/2"], [b"new0", b"new1", b"new2"])
    assert _files(tmp_path) == {"c/0": b"new0", "c/1/inside": b"x", "c/2": b"new2"}


def test_the_helper_refuses_what_it_cannot_write() -> None:
    with pytest.raises(ValueError, match="NUL"):
        _native.put_files(
            [b"a\0b"], [np.zeros(1, np.uint8)], tag=b".t-", first=0, suffix=b".partial",
            exchange=False, exchange_min=0,
        )
    with pytest.raises(ValueError, match="contiguous"):
        _native.put_files(
            [b"/tmp/x"], [np.zeros(4, np.uint8)[::2]], tag=b".t-", first=0, suffix=b".p",
            exchange=False, exchange_min=0,
        )
    with pytest.raises(ValueError, match="pair up"):
        _native.put_files(
            [b"/tmp/x", b"/tmp/y"], [np.zeros(1, np.uint8)], tag=b".t-", first=0,
            suffix=b".p", exchange=False, exchange_min=0,
        )
    assert _native.put_files(
        [], [], tag=b".t-", first=0, suffix=b".p", exchange=False, exchange_min=0
    ) == []


def test_a_name_too_long_is_reported_and_nothing_written(tmp_path: Path) -> None:
    path = os.fsencode(tmp_path) + b"/" + b"d" * 5000
    status = _native.put_files(
        [path], [np.zeros(1, np.uint8)], tag=b".t-", first=0, suffix=b".p",
        exchange=False, exchange_min=0,
    )
    assert status == [-36]  # ENAMETOOLONG
    assert not list(tmp_path.iterdir())


CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    import numpy as np
    from cuzarr.errors import StoreError
    from cuzarr.stores.local import LocalChunkStore

    store = LocalChunkStore(sys.argv[1])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    small = [np.full(1000, 9, np.uint8)] * 2
    try:
        # the middle file is larger than the limit: written partly, then refused
        store.put_many(["c/0", "c/1", "c/2"], [small[0], np.full(10000, 9, np.uint8), small[1]])
    except StoreError as exc:
        print("error:", exc)
    """
)


def test_a_disk_that_refuses_mid_file_leaves_no_torn_file(tmp_path: Path) -> None:
    store = LocalChunkStore(tmp_path)
    store.put_many(["c/0", "c/1", "c/2"], [b"old0", b"old1", b"old2"])
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "error: Failed to write chunk 'c/1'" in done.stdout
    assert "File too large" in done.stdout
    got = _files(tmp_path)
    assert got["c/1"] == b"old1"  # kept whole
    assert got["c/0"] == got["c/2"] == bytes([9]) * 1000
    assert not [k for k in got if k.endswith(TEMP_SUFFIX)]


class _Recording(BaseChunkStore):
    def __init__(self) -> None:
        self.name = "recording"
        self.puts: list[tuple[str, bytes, Any]] = []

    def put(self, key: str, data: Any, *, mode: Any = None, version: Any = None) -> None:
        self.puts.append((key, bytes(data), mode))


def test_stores_without_a_batch_write_put_each_object() -> None:
    store = _Recording()
    store.put_many(["a", "b"], [b"1", b"2"])
    assert [(k, d) for k, d, _m in store.puts] == [("a", b"1"), ("b", b"2")]
    with pytest.raises(ValueError):
        store.put_many(["a"], [b"1", b"2"])


def test_a_cached_store_forgets_what_a_batch_rewrote(tmp_path: Path) -> None:
    inner = LocalChunkStore(tmp_path)
    inner.put_many(["a", "b"], [b"old-a", b"old-b"])
    cache = ObjectCache(1 << 20)
    cached = CachedChunkStore(inner, cache)
    got = cached.get("a")
    assert got is not None and bytes(got.data) == b"old-a"
    assert "a" in cache.held()
    cached.put_many(["a", "b"], [b"new-a", b"new-b"])
    assert "a" not in cache.held()
    got = cached.get("a")
    assert got is not None and bytes(got.data) == b"new-a"


@pytest.mark.parametrize("native", [True, False])
def test_zarr_writes_of_many_small_chunks_go_through_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    """64 chunks of 8 KiB: the engine's batches of small zstd chunks are written by the
    helper (or one put per chunk without it), with the same values as zarr's pipeline."""
    if native:
        # Whole chunks are encoded and written by the helper's put_boxes (test_box_writes.py).
        sizes = _spy_batches(monkeypatch, ("_put_files", "_put_boxes"))
    else:
        monkeypatch.setattr(local, "_put_files", None)
        monkeypatch.setattr(local, "_put_boxes", None)
    value = np.arange(64**3, dtype="uint16").reshape(64, 64, 64) * 7
    with cuzarr.configure(threads=2, strict=True):
        arr = zarr.create_array(
            LocalStore(tmp_path), name="a", shape=value.shape, chunks=(16, 16, 16),
            dtype="uint16", compressors=ZstdCodec(level=3), fill_value=0,
        )
        arr[...] = value
        arr[:16] = value[:16] + 1
    if native:
        assert sizes and sum(sizes) >= 64 + 16 and max(sizes) > 1
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}):
        got = zarr.open_array(LocalStore(tmp_path), path="a", mode="r")[...]
    want = value.copy()
    want[:16] += 1
    np.testing.assert_array_equal(got, want)
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(TEMP_SUFFIX)]
