"""One matrix against four real servers on loopback: S3, GCS, Azure Blob and static HTTP.

Every test runs once per service (``service`` fixture, tests/loopback): moto's S3 server,
fake-gcs-server, Azurite and aiohttp's static file server, each on 127.0.0.1 with a random port
and a log of every request it answered. HTTP(S) is read-only: its arrays are written by
zarr-python into the served directory. What differs between services is asserted per service,
never skipped: Azure has no suffix ranges (a shard index costs a HEAD and a ranged GET), GCS
conditions updates on generations, HTTP takes no writes.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.storage

import cuzarr
from cuzarr.errors import (
    NodeNotFoundError,
    ReadOnlyError,
    StaleObjectError,
    StoreError,
    UnsupportedError,
)
from loopback.services import Service
from loopback.shards import byte_runs, shard_table

pytestmark = pytest.mark.object_store
pytest.importorskip("obstore")

LAYOUTS = {
    "v3": {"chunks": (10, 10)},
    "v3-sharded": {"chunks": (5, 5), "shards": (10, 20)},
    "v2": {"chunks": (10, 10), "zarr_format": 2},
}


def _data(shape: tuple[int, ...], dtype: str = "i4") -> np.ndarray:
    return (np.arange(int(np.prod(shape))) % 1000).astype(dtype).reshape(shape)


def _fast_retries(n: int) -> dict[str, Any]:
    return {"max_retries": n, "backoff": {"init_backoff": 0.001, "max_backoff": 0.01},
            "retry_timeout": 10}


def _zarr_store(service: Service, bucket: str, prefix: str, *, read_only: bool) -> Any:
    """A zarr ``ObjectStore`` over obstore for ``prefix`` (HTTPStore for HTTP reads)."""
    if service.name == "http" and read_only:
        from obstore.store import HTTPStore

        store = HTTPStore(service.url(bucket, prefix), client_options={"allow_http": True})
        return zarr.storage.ObjectStore(store, read_only=True)
    return zarr.storage.ObjectStore(service.raw(bucket, prefix), read_only=read_only)


def _write_with_zarr(service: Service, bucket: str, prefix: str, value: np.ndarray,
                     **layout: Any) -> None:
    """Write an array with zarr-python's own pipeline, straight to the server's storage."""
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}):
        z = zarr.create_array(
            _zarr_store(service, bucket, prefix, read_only=False), shape=value.shape,
            dtype=value.dtype, **layout,
        )
        z[...] = value


# ---------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_round_trip_explicit_api(service: Service, layout: str) -> None:
    bucket = service.new_bucket()
    url = service.url(bucket, f"data/{layout}.zarr")
    expected = _data((30, 40))
    strict = cuzarr.Settings(strict=True)
    if service.writable:
        a = cuzarr.create(url, shape=expected.shape, dtype="i4", storage_options=service.options(),
                          settings=strict, **LAYOUTS[layout])
        a[...] = expected
        a[3:7, 11:29] = -1  # read-modify-write of stored chunks (conditional puts)
        expected[3:7, 11:29] = -1
    else:
        _write_with_zarr(service, bucket, f"data/{layout}.zarr", expected, **LAYOUTS[layout])
    b = cuzarr.open(url, storage_options=service.options(), settings=strict)
    assert isinstance(b, cuzarr.Array)
    np.testing.assert_array_equal(b[...], expected)
    np.testing.assert_array_equal(b[2:9, 13:35], expected[2:9, 13:35])
    # What is stored is what zarr-python's own pipeline reads.
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}):
        theirs = zarr.open_array(_zarr_store(service, bucket, f"data/{layout}.zarr",
                                             read_only=True), mode="r")
        np.testing.assert_array_equal(theirs[...], expected)
    # Pickled arrays re-open the URL (Dask workers).
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(b))[5:6, :], expected[5:6, :])


@pytest.mark.parametrize("layout", ["v3-sharded", "v2"])
def test_zarr_object_store_goes_through_cuzarr(service: Service, layout: str) -> None:
    from cuzarr.stores import from_zarr_store
    from cuzarr.stores.obstore_ import ObstoreChunkStore

    bucket = service.new_bucket()
    expected = _data((30, 40), "f8")
    with cuzarr.configure(strict=True):
        cuzarr.reset_stats()
        if service.writable:
            store = _zarr_store(service, bucket, "z.zarr", read_only=False)
            assert isinstance(from_zarr_store(store), ObstoreChunkStore)
            z = zarr.create_array(store, shape=expected.shape, dtype="f8", **LAYOUTS[layout])
            z[...] = expected
            assert cuzarr.stats()["engine_writes"] >= 1
        else:
            _write_with_zarr(service, bucket, "z.zarr", expected, **LAYOUTS[layout])
        reader = _zarr_store(service, bucket, "z.zarr", read_only=True)
        assert isinstance(from_zarr_store(reader), ObstoreChunkStore)
        got = zarr.open_array(reader, mode="r")[1:29, 3:37]
        assert cuzarr.stats()["engine_reads"] >= 1
    np.testing.assert_array_equal(got, expected[1:29, 3:37])


# ---------------------------------------------------------------------------- request counts


@pytest.fixture
def sharded(service: Service) -> tuple[str, str, np.ndarray]:
    """A 64x64 array of 32x32 shards of 8x8 zstd inner chunks, written by zarr-python."""
    bucket = service.new_bucket()
    expected = np.random.default_rng(5).integers(0, 1000, (64, 64)).astype("i4")
    _write_with_zarr(service, bucket, "s.zarr", expected, chunks=(8, 8), shards=(32, 32))
    service.log.clear()
    return bucket, service.url(bucket, "s.zarr"), expected


def _shard_table(service: Service, bucket: str, key: str, n_inner: int) -> np.ndarray:
    """The shard's index, read raw and parsed here (index at the end, crc32c last)."""
    return shard_table(service.get_raw(bucket, key), n_inner)


def test_partial_sharded_read_fetches_only_needed_ranges(
    service: Service, sharded: tuple[str, str, np.ndarray]
) -> None:
    bucket, url, expected = sharded
    ranged_only = cuzarr.Settings(remote_max_gap=0, max_overfetch=0)
    a = cuzarr.open(url, storage_options=service.options(), settings=ranged_only)
    assert isinstance(a, cuzarr.Array)
    wanted = [(1, 0), (1, 1), (2, 0), (2, 1)]  # rows 8:24, columns 32:48 of shard (0, 1)
    flat = [int(np.ravel_multi_index(b, (4, 4))) for b in wanted]
    table = _shard_table(service, bucket, "s.zarr/c/0/1", 16)
    runs = byte_runs(table, flat)
    index_nbytes = 16 * 16 + 4
    shard = service.path(bucket, "s.zarr/c/0/1")

    service.log.clear()
    np.testing.assert_array_equal(a[10:20, 33:47], expected[10:20, 33:47])
    seen = service.log.under(f"/{shard.split('/')[1]}/")
    assert all(r.path == shard for r in seen), [r.path for r in seen]
    gets = [r for r in seen if r.method == "GET"]
    size = len(service.get_raw(bucket, "s.zarr/c/0/1"))
    if service.name == "azure":
        # No suffix ranges on Azure: the size first (HEAD), then the index as a plain range,
        # conditional on the ETag the HEAD returned.
        assert [r.method for r in seen].count("HEAD") == 1
        index = [g for g in gets if g.range == f"bytes={size - index_nbytes}-{size - 1}"]
        assert len(index) == 1 and index[0].if_match is not None
    else:
        assert len(seen) == len(gets)
        index = [g for g in gets if g.range == f"bytes=-{index_nbytes}"]
        assert len(index) == 1
    assert index[0].nbytes == index_nbytes
    ranged = sorted(g.range for g in gets if g is not index[0])
    assert ranged == sorted(f"bytes={s}-{s + n - 1}" for s, n in runs)
    needed = sum(int(table[i, 1]) for i in flat)
    assert sum(g.nbytes for g in gets) == index_nbytes + needed
    # The same Array reads the shard again without its index: cached, checked by ETag.
    service.log.clear()
    np.testing.assert_array_equal(a[8:24, 32:48], expected[8:24, 32:48])
    again = service.log.under(shard)
    assert len(again) == len(runs) and all(r.method == "GET" for r in again)
    assert all(r.if_match is not None for r in again)


def test_small_shards_are_fetched_whole_in_one_request(
    service: Service, sharded: tuple[str, str, np.ndarray]
) -> None:
    bucket, url, expected = sharded
    a = cuzarr.open(url, storage_options=service.options())
    keys = [f"s.zarr/c/{i}/{j}" for i in (0, 1) for j in (0, 1)]
    sizes = {service.path(bucket, k): len(service.get_raw(bucket, k)) for k in keys}
    service.log.clear()
    np.testing.assert_array_equal(a[20:44, 20:44], expected[20:44, 20:44])
    gets = [r for r in service.log.entries if r.method == "GET"]
    assert sorted(g.path for g in gets) == sorted(sizes)
    assert all(g.range is None and g.nbytes == sizes[g.path] for g in gets)
    assert len(service.log.entries) == 4


# ---------------------------------------------------------------------------- writes


def test_conflicting_writer_is_detected_and_its_object_kept(service: Service) -> None:
    from cuzarr.stores.base import PutMode
    from cuzarr.stores.obstore_ import ObstoreChunkStore

    if not service.writable:
        pytest.skip("HTTP(S) is read-only (test_http_urls_refuse_writes)")
    bucket = service.new_bucket()
    store = ObstoreChunkStore(service.raw(bucket), name=service.url(bucket))
    service.put_raw(bucket, "k", b"old")
    old = store.get("k", fresh=True)
    assert old is not None and bytes(old.data) == b"old" and old.version
    service.put_raw(bucket, "k", b"theirs")
    with pytest.raises(StaleObjectError, match="another writer changed"):
        store.put("k", np.frombuffer(b"mine", np.uint8), mode=PutMode.UPDATE, version=old.version)
    assert service.get_raw(bucket, "k") == b"theirs"
    assert store.get("new") is None
    service.put_raw(bucket, "new", b"theirs")
    with pytest.raises(StaleObjectError, match="another writer"):
        store.put("new", np.frombuffer(b"mine", np.uint8), mode=PutMode.CREATE)
    assert service.get_raw(bucket, "new") == b"theirs"
    now = store.get("k")
    assert now is not None
    store.put("k", np.frombuffer(b"final", np.uint8), mode=PutMode.UPDATE, version=now.version)
    assert service.get_raw(bucket, "k") == b"final"
    # A stale cached version is refused on reads as well (If-Match).
    with pytest.raises(StaleObjectError):
        store.get_ranges("k", [(0, 2)], if_match=old.version)


def test_read_modify_write_is_conditional_and_whole(
    service: Service, sharded: tuple[str, str, np.ndarray]
) -> None:
    if not service.writable:
        pytest.skip("HTTP(S) is read-only (test_http_urls_refuse_writes)")
    bucket, url, expected = sharded
    a = cuzarr.open(url, mode="r+", storage_options=service.options())
    service.log.clear()
    a[1:2, 1:2] = 5  # a read-modify-write of shard (0, 0)
    expected[1:2, 1:2] = 5
    writes = [r for r in service.log.entries if r.method in ("PUT", "POST")]
    assert {r.path for r in writes} == {service.path(bucket, "s.zarr/c/0/0")}
    assert not any(r.range for r in writes)
    np.testing.assert_array_equal(a[...], expected)
    # Another writer replaced the shard after this Array read it: the next partial write
    # re-reads it instead of overwriting the other writer's data.
    b = cuzarr.open(url, mode="r+", storage_options=service.options())
    b[0:1, 0:1] = 9
    expected[0:1, 0:1] = 9
    a[2:3, 2:3] = 7
    expected[2:3, 2:3] = 7
    np.testing.assert_array_equal(cuzarr.open(url, storage_options=service.options())[...],
                                  expected)


def test_http_urls_refuse_writes(service: Service, tmp_path: Any) -> None:
    if service.writable:
        pytest.skip("writable service")
    bucket = service.new_bucket()
    _write_with_zarr(service, bucket, "a.zarr", _data((4, 4)), chunks=(2, 2))
    url = service.url(bucket, "a.zarr")
    with pytest.raises(ReadOnlyError, match=r"reads http\(s\):// URLs only") as info:
        cuzarr.open(url, mode="r+")
    assert url in str(info.value)
    with pytest.raises(ReadOnlyError, match="for writing"):
        cuzarr.create(service.url(bucket, "new.zarr"), shape=(4,), chunks=(2,), dtype="i4")
    a = cuzarr.open(url)
    with pytest.raises(ValueError, match="read-only"):
        a[0, 0] = 1
    assert not [r for r in service.log.entries if r.method not in ("GET", "HEAD")]


def test_read_only_url_refuses_writes(service: Service) -> None:
    if not service.writable:
        pytest.skip("HTTP(S) is read-only (test_http_urls_refuse_writes)")
    bucket = service.new_bucket()
    url = service.url(bucket, "ro.zarr")
    cuzarr.create(url, shape=(4,), dtype="i4", chunks=(2,), storage_options=service.options())
    a = cuzarr.open(url, storage_options=service.options())
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 1


# ---------------------------------------------------------------------------- errors


def test_missing_bucket_prefix_and_key(service: Service) -> None:
    bucket = service.new_bucket()
    missing_bucket = service.url("nobucket" + bucket, "a.zarr")
    with pytest.raises(NodeNotFoundError) as info:
        cuzarr.open(missing_bucket, storage_options=service.options())
    assert missing_bucket in str(info.value)
    if service.name in ("s3", "gcs"):
        assert "bucket does not exist" in str(info.value)
    elif service.name == "azure":
        assert "container does not exist" in str(info.value)
    missing_prefix = service.url(bucket, "not/here.zarr")
    with pytest.raises(NodeNotFoundError) as info:
        cuzarr.open(missing_prefix, storage_options=service.options())
    assert missing_prefix in str(info.value)
    # A missing chunk is not an error: it reads as the fill value.
    _write_with_zarr(service, bucket, "f.zarr", _data((4, 4)), chunks=(2, 2))
    import obstore

    obstore.delete(service.raw(bucket), "f.zarr/c/1/1")
    got = cuzarr.open(service.url(bucket, "f.zarr"), storage_options=service.options())[...]
    expected = _data((4, 4))
    expected[2:, 2:] = 0
    np.testing.assert_array_equal(got, expected)


def test_denied_access_is_one_clear_error(service: Service) -> None:
    bucket = service.new_bucket()
    _write_with_zarr(service, bucket, "a.zarr", _data((4, 4)), chunks=(2, 2))
    url = service.url(bucket, "a.zarr")
    if service.name == "azure":
        # A wrong key for the account: Azurite checks the SharedKey signature (403).
        opts = {"account_name": "devstoreaccount1", "account_key": "QkFE" * 22,
                "endpoint_url": service.server.endpoint, "max_retries": 0}
    elif service.name == "http":
        url = service.url("private", "a.zarr")  # the server denies everything below /private/
        opts = {"max_retries": 0}
    else:
        # moto and fake-gcs-server do not check credentials here (tests/test_s3.py checks
        # moto's IAM denials): the server answers 403 as S3 and GCS do for a denied request.
        service.log.fail(403, 1)
        opts = service.options(retry_config=_fast_retries(0))
    with pytest.raises(StoreError, match="access denied") as info:
        cuzarr.open(url, storage_options=opts)
    assert url in str(info.value) and "\n" not in str(info.value)


def test_server_errors_are_retried_then_name_the_url(service: Service) -> None:
    bucket = service.new_bucket()
    expected = _data((6, 6))
    _write_with_zarr(service, bucket, "a.zarr", expected, chunks=(3, 3))
    url = service.url(bucket, "a.zarr")
    service.log.clear()
    service.log.fail(503, 2, "GET")
    a = cuzarr.open(url, storage_options=service.options(retry_config=_fast_retries(3)))
    np.testing.assert_array_equal(a[...], expected)
    statuses = [r.status for r in service.log.entries if r.method == "GET"]
    assert statuses[:3] == [503, 503, 200] and len(statuses) == 3 + 4
    service.log.clear()
    service.log.fail(503, 10**6)
    with pytest.raises(StoreError, match="503") as info:
        cuzarr.open(url, storage_options=service.options(retry_config=_fast_retries(2)))
    assert url in str(info.value) and "\n" not in str(info.value)
    assert len(service.log.entries) == 3  # the request and two retries
    service.log.clear()


# ---------------------------------------------------------------------------- front ends


def _cli(service: Service, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cuzarr", *args], capture_output=True, text=True, timeout=120,
        env=service.env(),
    )


def test_cli_info_verify_copy(service: Service, tmp_path: Any) -> None:
    """The CLI takes the URLs; endpoint and credentials come from the environment only."""
    bucket = service.new_bucket()
    expected = _data((40, 30), "f4")
    src = tmp_path / "src.zarr"
    zarr.create_array(str(src), shape=expected.shape, dtype="f4", chunks=(8, 8),
                      shards=(16, 16))[...] = expected
    url = service.url(bucket, "copied.zarr")
    if service.writable:
        done = _cli(service, "copy", str(src), url)
        assert done.returncode == 0, done.stderr
    else:
        _write_with_zarr(service, bucket, "copied.zarr", expected, chunks=(8, 8),
                         shards=(16, 16))
        refused = _cli(service, "copy", str(src), service.url(bucket, "other.zarr"))
        assert refused.returncode != 0 and "reads http(s):// URLs only" in refused.stderr
    np.testing.assert_array_equal(
        cuzarr.open(url, storage_options=service.options())[...], expected)
    info = _cli(service, "info", url, "--json")
    assert info.returncode == 0, info.stderr
    node = {n["path"]: n for n in json.loads(info.stdout)["nodes"]}[""]
    assert node["shape"] == [40, 30] and node["shards"] == [16, 16]
    # verify reads every chunk (HTTP: found from the metadata, the server has no listing).
    ok = _cli(service, "verify", url)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    service.put_raw(bucket, "copied.zarr/c/1/0", b"garbage")
    bad = _cli(service, "verify", url)
    assert bad.returncode == 1 and "c/1/0" in bad.stdout + bad.stderr
    # Copy out of the service into a local folder.
    back = tmp_path / "back.zarr"
    service.put_raw(bucket, "copied.zarr/c/1/0", service.get_raw(bucket, "copied.zarr/c/0/0"))
    expected[16:32, 0:16] = expected[0:16, 0:16]
    done = _cli(service, "copy", url, str(back))
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(zarr.open_array(str(back), mode="r")[...], expected)
    missing = _cli(service, "info", service.url(bucket, "nothing.zarr"))
    assert missing.returncode == 2 and "nothing.zarr" in missing.stderr


def test_dask_reads_and_writes_with_one_options_dict(service: Service) -> None:
    cdask = pytest.importorskip("cuzarr.dask")
    da = pytest.importorskip("dask.array")
    bucket = service.new_bucket()
    expected = _data((24, 16), "i2")
    url = service.url(bucket, "dask.zarr")
    opts = service.options()
    if service.writable:
        cuzarr.reset_stats()
        service.log.clear()
        cdask.to_zarr(da.from_array(expected, chunks=(8, 8)), url, chunks=(4, 4),
                      shards=(8, 8), storage_options=opts, compute=True)
        # Written through cuzarr's obstore store (not fsspec): whole-shard puts, counted.
        assert cuzarr.stats()["engine_writes"] >= 1
        shards = {r.path for r in service.log.entries if r.method == "PUT"}
        assert service.path(bucket, "dask.zarr/c/0/0") in shards
        # Appending into the existing array: the same options open it again.
        cdask.to_zarr(da.from_array(expected[:8] * 2, chunks=(8, 8)), url, mode="r+",
                      region=(slice(0, 8), slice(None)), storage_options=opts, compute=True)
        expected[:8] *= 2
    else:
        _write_with_zarr(service, bucket, "dask.zarr", expected, chunks=(4, 4), shards=(8, 8))
        with pytest.raises(ReadOnlyError):
            cdask.to_zarr(da.from_array(expected, chunks=(8, 8)), service.url(bucket, "w.zarr"),
                          storage_options=opts)
    darr = cdask.from_zarr(url, storage_options=opts)
    np.testing.assert_array_equal(darr.compute(scheduler="sync"), expected)


def test_groups_open_without_listing(service: Service) -> None:
    bucket = service.new_bucket()
    store = _zarr_store(service, bucket, "g.zarr", read_only=False)
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}):
        root = zarr.open_group(store, mode="w")
        root.create_array("x", shape=(4,), dtype="i4", chunks=(2,))[...] = [1, 2, 3, 4]
        root.create_group("sub").create_array("y", shape=(2,), dtype="f8", chunks=(2,))[...] = 1.5
        zarr.consolidate_metadata(store)
    service.log.clear()
    g = cuzarr.open(service.url(bucket, "g.zarr"), storage_options=service.options())
    assert isinstance(g, cuzarr.Group)
    np.testing.assert_array_equal(g["x"][...], [1, 2, 3, 4])
    np.testing.assert_array_equal(g["sub/y"][...], [1.5, 1.5])
    np.testing.assert_array_equal(
        cuzarr.open(service.url(bucket, "g.zarr/sub/y"), storage_options=service.options())[...],
        [1.5, 1.5])
    assert not [r for r in service.log.entries if r.method not in ("GET", "HEAD")]


def test_get_many_sends_its_requests_together(service: Service) -> None:
    from cuzarr.stores.targets import resolve_target

    bucket = service.new_bucket()
    blobs = {f"m/k{i}": bytes([i + 1]) * (10 + i) for i in range(4)}
    for key, value in blobs.items():
        service.put_raw(bucket, key, value)
    handle = resolve_target(service.url(bucket), read_only=True,
                            storage_options=service.options())
    store = handle.chunk_store()
    keys = [*blobs, "m/none"]
    service.log.clear()
    if service.name == "http":
        service.log.delay = 0.3  # long enough that requests sent together overlap
    got = store.get_many(keys)
    assert [None if g is None else bytes(memoryview(g)) for g in got] == [*blobs.values(), None]
    gets = [r for r in service.log.entries if r.method == "GET"]
    assert sorted(r.path for r in gets) == sorted(service.path(bucket, k) for k in keys)
    assert len(service.log.entries) == len(keys)
    if service.name == "http":
        assert service.log.max_in_flight == len(keys)


def test_v2_group_metadata_in_waves(service: Service) -> None:
    bucket = service.new_bucket()
    store = _zarr_store(service, bucket, "g2.zarr", read_only=False)
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}):
        root = zarr.open_group(store, mode="w", zarr_format=2, attributes={"title": "t"})
        root.create_array("x", shape=(4,), dtype="i4", chunks=(2,))[...] = [1, 2, 3, 4]
    service.log.clear()
    if service.name == "http":
        service.log.delay = 0.3
    g = cuzarr.open(service.url(bucket, "g2.zarr"), storage_options=service.options())
    assert isinstance(g, cuzarr.Group) and dict(g.attrs) == {"title": "t"}
    names = [r.path.rsplit("/", 1)[1] for r in service.log.entries]
    # The requests node-by-node reads make, .zarray and .zattrs sent together.
    assert sorted(names) == sorted(["zarr.json", ".zarray", ".zattrs", ".zgroup"])
    assert all(r.method == "GET" for r in service.log.entries)
    if service.name == "http":
        assert service.log.max_in_flight == 2


def test_group_members_fetch_each_document_once(service: Service) -> None:
    bucket = service.new_bucket()
    store = _zarr_store(service, bucket, "m.zarr", read_only=False)
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}):
        root = zarr.open_group(store, mode="w", zarr_format=2)
        for i in range(3):
            root.create_array(f"a{i}", shape=(2,), dtype="i4", chunks=(2,))[...] = [i, i]
        root.create_group("sub")
    g = cuzarr.open(service.url(bucket, "m.zarr"), storage_options=service.options())
    assert isinstance(g, cuzarr.Group)
    service.log.clear()
    if service.name == "http":
        with pytest.raises(UnsupportedError, match="list"):
            g.keys()
        return
    members = dict(g.members())
    assert sorted(members) == ["a0", "a1", "a2", "sub"]
    gets = [(r.path, r.query) for r in service.log.entries if r.method == "GET"]
    assert len(gets) == len(set(gets)), sorted(gets)
    for i in range(3):
        np.testing.assert_array_equal(members[f"a{i}"][...], [i, i])


# ---------------------------------------------------------------------------- options


def test_options_users_pass_are_accepted_or_named() -> None:
    from cuzarr.stores.object_urls import split_storage_options

    # Client options at the top level, as users write them, on every service.
    config, client, retry, _ = split_storage_options(
        "https://example.org/a.zarr", {"allow_http": True, "timeout": 5, "max_retries": 1,
                                       "headers": {"Authorization": "Bearer x"}})
    assert config == {} and retry == {"max_retries": 1}
    assert client["allow_http"] is True and client["default_headers"]["Authorization"]
    with pytest.raises(ValueError, match=r"take no store configuration, got \['region'\].*"
                       r"default_headers"):
        split_storage_options("https://example.org/a.zarr", {"region": "x"})
    # adlfs' names and an Azurite connection string.
    config, client, _, _ = split_storage_options("az://c/a.zarr", {
        "connection_string": "DefaultEndpointsProtocol=http;AccountName=acc;AccountKey=a2V5;"
                             "BlobEndpoint=http://127.0.0.1:1/acc;"})
    assert config == {"account_name": "acc", "account_key": "a2V5",
                      "endpoint": "http://127.0.0.1:1/acc"}
    assert client == {"allow_http": True}
    config, _, _, _ = split_storage_options("az://c/a", {"connection_string":
                                                         "UseDevelopmentStorage=true"})
    assert config == {"use_emulator": True}
    with pytest.raises(ValueError, match=r"unknown part\(s\) \['Nope'\]"):
        split_storage_options("az://c/a", {"connection_string": "Nope=1"})
    config, _, _, _ = split_storage_options("az://c/a", {"sas_token": "sv=1", "anon": 0,
                                                         "account_name": "acc"})
    assert config == {"sas_key": "sv=1", "skip_signature": False, "account_name": "acc"}
    # gcsfs' names; an emulator's key with an http:// base URL allows plain HTTP.
    config, client, _, _ = split_storage_options("gs://b/a", {"token": "anon"})
    assert config == {"skip_signature": True} and client == {}
    key = json.dumps({"gcs_base_url": "http://127.0.0.1:1", "disable_oauth": True})
    config, client, _, _ = split_storage_options("gs://b/a", {"service_account_key": key})
    assert client == {"allow_http": True}
    with pytest.raises(ValueError, match="repeats client_options"):
        split_storage_options("s3://b", {"allow_http": True, "client_options": {"allow_http": 1}})


def test_http_group_without_consolidated_metadata_is_named(http_static: Any) -> None:
    from cuzarr.errors import UnsupportedError
    from cuzarr.tools import collect_info

    root = http_static.root / "plain"
    g = zarr.open_group(str(root / "g.zarr"), mode="w")
    g.create_array("x", shape=(4,), dtype="i4", chunks=(2,))[...] = [1, 2, 3, 4]
    url = f"http://127.0.0.1:{http_static.port}/plain/g.zarr"
    with pytest.raises(UnsupportedError, match="no consolidated metadata") as info:
        collect_info(url)
    assert url in str(info.value)
    # Arrays inside it open by path, no listing needed.
    np.testing.assert_array_equal(cuzarr.open(f"{url}/x")[...], [1, 2, 3, 4])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_http_listing_from_metadata_is_the_directory(http_static: Any, zarr_format: int) -> None:
    import os
    import warnings

    from cuzarr.stores.targets import resolve_target
    from cuzarr.tools.metadata_listing import walk_metadata

    root = http_static.root / f"tree{zarr_format}" / "t.zarr"
    g = zarr.open_group(str(root), mode="w", zarr_format=zarr_format, attributes={"a": 1})
    g.create_array("x", shape=(5, 4), dtype="i4", chunks=(2, 4))[:4] = 7  # one chunk missing
    sub = g.create_group("sub")
    sub.create_array("y", shape=(3,), dtype="f8", chunks=(3,), attributes={"u": "m"})[...] = 1.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr: consolidated metadata is not in the v3 spec
        zarr.consolidate_metadata(str(root))
    want = {
        os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/"): os.path.getsize(
            os.path.join(d, f)
        )
        for d, _, files in os.walk(root)
        for f in files
    }
    url = f"http://127.0.0.1:{http_static.port}/tree{zarr_format}/t.zarr"
    store = resolve_target(url, read_only=True).chunk_store()
    http_static.log.clear()
    walk = walk_metadata(store, url)
    assert walk.sizes == want
    assert all(bytes(memoryview(d)) == (root / k).read_bytes()
               for k, d in walk.documents.items() if d is not None)
    asked = [r.path for r in http_static.log.entries]
    assert len(asked) == len(set(asked)), sorted(asked)  # no object asked for twice
    # cuzarr info reads the tree from what the walk read: again no object twice.
    from cuzarr.tools import collect_info

    http_static.log.clear()
    nodes = collect_info(url)
    assert sorted(n.path for n in nodes) == ["", "sub", "sub/y", "x"]
    assert all(n.error is None for n in nodes)
    asked = [r.path for r in http_static.log.entries]
    assert len(asked) == len(set(asked)), sorted(asked)
