"""Object storage against real HTTP servers on loopback.

moto's S3 server (``ThreadedMotoServer`` on 127.0.0.1, random port) is a real S3 endpoint:
round trips of sharded and unsharded arrays (v2 and v3) through cuzarr's explicit API, zarr's
``ObjectStore`` and ``FsspecStore``; partial sharded reads counted in the server's own request
log; conditional writes; and the error cases. A tiny HTTP server on loopback plays a failing
object store for retries. Nothing here talks to any other address.
"""

from __future__ import annotations

import datetime
import http.server
import json
import os
import pickle
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.storage

import cuzarr
from cuzarr.errors import NodeNotFoundError, StoreError
from loopback.s3 import KEY, REGION, S3, SECRET
from loopback.shards import byte_runs, shard_table

pytestmark = pytest.mark.s3

boto3 = pytest.importorskip("boto3")
obstore = pytest.importorskip("obstore")


# ---------------------------------------------------------------------------- servers
# The session's moto server is the ``s3`` fixture (tests/loopback/fixtures.py).


@pytest.fixture
def bucket(s3: S3) -> str:
    name = f"cuzarr-{uuid.uuid4().hex[:12]}"
    s3.client().create_bucket(Bucket=name)
    return name


def _data(shape: tuple[int, ...], dtype: str = "i4") -> np.ndarray:
    return (np.arange(int(np.prod(shape))) % 1000).astype(dtype).reshape(shape)


# ---------------------------------------------------------------------------- round trips

LAYOUTS = {
    "v3": {"chunks": (10, 10)},
    "v3-sharded": {"chunks": (5, 5), "shards": (10, 20)},
    "v2": {"chunks": (10, 10), "zarr_format": 2},
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_round_trip_explicit_api(s3: S3, bucket: str, layout: str) -> None:
    url = f"s3://{bucket}/data/{layout}.zarr"
    expected = _data((30, 40))
    settings = cuzarr.Settings(strict=True)
    a = cuzarr.create(
        url, shape=expected.shape, dtype="i4", storage_options=s3.options(), settings=settings,
        **LAYOUTS[layout],
    )
    a[...] = expected
    a[3:7, 11:29] = -1
    expected[3:7, 11:29] = -1
    b = cuzarr.open(url, storage_options=s3.options(), settings=settings)
    assert isinstance(b, cuzarr.Array)
    np.testing.assert_array_equal(b[...], expected)
    np.testing.assert_array_equal(b[2:9, 13:35], expected[2:9, 13:35])
    # What cuzarr stored is what zarr-python's own pipeline reads from the bucket.
    theirs = zarr.open_array(zarr.storage.ObjectStore(s3.obstore(bucket, f"data/{layout}.zarr")))
    np.testing.assert_array_equal(theirs[...], expected)
    # Pickled arrays re-open the bucket (Dask workers).
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(b))[5:6, :], expected[5:6, :])


@pytest.mark.parametrize("layout", ["v3-sharded", "v2"])
def test_round_trip_through_zarr_object_store(s3: S3, bucket: str, layout: str) -> None:
    from cuzarr.stores import from_zarr_store
    from cuzarr.stores.obstore_ import ObstoreChunkStore

    store = zarr.storage.ObjectStore(s3.obstore(bucket, "z.zarr"))
    assert isinstance(from_zarr_store(store), ObstoreChunkStore)
    expected = _data((30, 40), "f8")
    with cuzarr.configure(strict=True):
        cuzarr.reset_stats()
        z = zarr.create_array(store, shape=expected.shape, dtype="f8", **LAYOUTS[layout])
        z[...] = expected
        got = zarr.open_array(store, mode="r")[1:29, 3:37]
        assert cuzarr.stats()["engine_reads"] >= 1
        assert cuzarr.stats()["engine_writes"] >= 1
    np.testing.assert_array_equal(got, expected[1:29, 3:37])
    np.testing.assert_array_equal(zarr.open_array(store, mode="r")[...], expected)


def test_round_trip_through_fsspec_url(s3: S3, bucket: str) -> None:
    pytest.importorskip("s3fs")
    url = f"s3://{bucket}/fs.zarr"
    expected = _data((20, 20), "u2")
    with cuzarr.configure(strict=True):
        cuzarr.reset_stats()
        z = zarr.create_array(
            url, shape=expected.shape, dtype="u2", chunks=(5, 5), shards=(10, 10),
            storage_options=s3.options(),
        )
        assert type(z.store).__name__ == "FsspecStore"
        z[...] = expected
        got = zarr.open_array(url, mode="r", storage_options=s3.options())[4:17, 2:11]
        assert cuzarr.stats()["engine_reads"] >= 1
    np.testing.assert_array_equal(got, expected[4:17, 2:11])
    # cuzarr's explicit API reads the same URL with the same storage_options (through obstore).
    opened = cuzarr.open(url, storage_options=s3.options())
    np.testing.assert_array_equal(opened[...], expected)


def test_dask_from_zarr_url(s3: S3, bucket: str) -> None:
    pytest.importorskip("s3fs")
    cdask = pytest.importorskip("cuzarr.dask")
    url = f"s3://{bucket}/dask.zarr"
    expected = _data((24, 16), "i2")
    a = cuzarr.create(
        url, shape=expected.shape, dtype="i2", chunks=(4, 4), shards=(8, 8),
        storage_options=s3.options(),
    )
    a[...] = expected
    darr = cdask.from_zarr(url, storage_options=s3.options())
    np.testing.assert_array_equal(darr.compute(scheduler="sync"), expected)


def _cli_env(s3: S3) -> dict[str, str]:
    """The environment of a CLI process: credentials and endpoint as obstore reads them."""
    import os

    return {
        **os.environ,
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": s3.endpoint,
        "AWS_ALLOW_HTTP": "true",
    }


def test_cli_info_copy_verify_on_s3_urls(s3: S3, bucket: str, tmp_path: Any) -> None:
    """The CLI takes the same URLs; credentials and endpoint come from the environment."""
    import subprocess
    import sys

    env = _cli_env(s3)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cuzarr", *args], capture_output=True, text=True,
            timeout=120, env=env,
        )

    expected = _data((40, 30), "f4")
    src = tmp_path / "src.zarr"
    z = zarr.create_array(
        str(src), shape=expected.shape, dtype="f4", chunks=(8, 8), shards=(16, 16)
    )
    z[...] = expected
    url = f"s3://{bucket}/copied.zarr"
    done = cli("copy", str(src), url)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(cuzarr.open(url, storage_options=s3.options())[...], expected)
    info = cli("info", url, "--json")
    assert info.returncode == 0, info.stderr
    node = {n["path"]: n for n in json.loads(info.stdout)["nodes"]}[""]
    assert node["shape"] == [40, 30] and node["shards"] == [16, 16]
    assert cli("verify", url).returncode == 0
    # A corrupted shard is named by verify, through the same URL.
    s3.client().put_object(Bucket=bucket, Key="copied.zarr/c/1/0", Body=b"garbage")
    bad = cli("verify", url)
    assert bad.returncode == 1 and "c/1/0" in bad.stdout + bad.stderr
    missing = cli("info", f"s3://{bucket}/nothing.zarr")
    assert missing.returncode == 2 and "nothing.zarr" in missing.stderr


#: CLI runs of the exit test; each reads an array through obstore and exits.
EXIT_RUNS = int(os.environ.get("CUZARR_EXIT_RUNS", "240"))


@pytest.mark.slow
def test_cli_on_s3_always_exits_cleanly(s3: S3, bucket: str) -> None:
    """No abort at interpreter exit: ``cuzarr info`` and ``verify`` on an s3:// URL, run
    EXIT_RUNS times, two at a time, all exit 0 with their whole output.

    Without the exit drain (cuzarr.stores.io_loop) about 0.5-1% of such runs ended in SIGABRT
    after printing everything: an obstore thread still returning from a callback took the GIL
    during finalization. tests/test_exit_drain.py provokes that race on purpose.
    """
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    url = f"s3://{bucket}/exit.zarr"
    a = cuzarr.create(
        url, shape=(32, 32), dtype="i4", chunks=(8, 8), shards=(16, 16),
        storage_options=s3.options(),
    )
    a[...] = _data((32, 32))
    env = _cli_env(s3)

    def run(i: int) -> tuple[int, str]:
        args = ["info", url, "--json"] if i % 2 else ["verify", url]
        done = subprocess.run(
            [sys.executable, "-m", "cuzarr", *args], capture_output=True, text=True,
            timeout=120, env=env,
        )
        return done.returncode, done.stderr[-500:]

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, range(EXIT_RUNS)))
    bad = [(i, rc, err) for i, (rc, err) in enumerate(results) if rc != 0]
    assert not bad, f"{len(bad)} of {EXIT_RUNS} runs failed, first: {bad[0]}"


def test_group_and_listing(s3: S3, bucket: str) -> None:
    url = f"s3://{bucket}/g.zarr"
    root = zarr.open_group(zarr.storage.ObjectStore(s3.obstore(bucket, "g.zarr")), mode="w")
    root.create_array("x", shape=(4,), dtype="i4", chunks=(2,))[...] = [1, 2, 3, 4]
    g = cuzarr.open(url, storage_options=s3.options())
    assert isinstance(g, cuzarr.Group)
    x = g["x"]
    assert isinstance(x, cuzarr.Array)
    np.testing.assert_array_equal(x[...], [1, 2, 3, 4])
    info = x.info
    assert info.nbytes_stored > 0
    assert info.store == url


# ---------------------------------------------------------------------------- request counts


def _shard_table(s3: S3, bucket: str, key: str, n_inner: int) -> np.ndarray:
    """The shard's index, read with boto3 and parsed here (index at the end, crc32c last)."""
    return shard_table(s3.client().get_object(Bucket=bucket, Key=key)["Body"].read(), n_inner)


@pytest.fixture
def sharded(s3: S3, bucket: str) -> tuple[str, np.ndarray]:
    """A 64x64 array of 32x32 shards of 8x8 zstd inner chunks, written by zarr-python."""
    expected = np.random.default_rng(5).integers(0, 1000, (64, 64)).astype("i4")
    z = zarr.create_array(
        zarr.storage.ObjectStore(s3.obstore(bucket, "s.zarr")),
        shape=expected.shape, dtype="i4", chunks=(8, 8), shards=(32, 32),
    )
    z[...] = expected
    return f"s3://{bucket}/s.zarr", expected


def test_partial_sharded_read_fetches_only_needed_ranges(
    s3: S3, bucket: str, sharded: tuple[str, np.ndarray]
) -> None:
    url, expected = sharded
    # Ranges only (no whole-shard fetch), merging only touching ranges.
    ranged_only = cuzarr.Settings(remote_max_gap=0, max_overfetch=0)
    a = cuzarr.open(url, storage_options=s3.options(), settings=ranged_only)
    assert isinstance(a, cuzarr.Array)
    # Inner chunks (1..2, 0..1) of shard (0, 1): rows 8:24, columns 32:48.
    wanted = [(1, 0), (1, 1), (2, 0), (2, 1)]
    flat = [int(np.ravel_multi_index(b, (4, 4))) for b in wanted]
    table = _shard_table(s3, bucket, "s.zarr/c/0/1", 16)
    runs = byte_runs(table, flat)
    index_nbytes = 16 * 16 + 4

    s3.log.clear()
    np.testing.assert_array_equal(a[10:20, 33:47], expected[10:20, 33:47])
    gets = s3.log.under(f"/{bucket}/", "GET")
    assert len(s3.log.under(f"/{bucket}/")) == len(gets) == 1 + len(runs)
    suffix = [g for g in gets if g.range == f"bytes=-{index_nbytes}"]
    assert len(suffix) == 1 and suffix[0].nbytes == index_nbytes
    ranged = sorted(g.range for g in gets if g is not suffix[0])
    assert ranged == sorted(f"bytes={s}-{s + n - 1}" for s, n in runs)
    needed = sum(int(table[i, 1]) for i in flat)
    assert sum(g.nbytes for g in gets) == index_nbytes + needed

    # The same Array reads the shard again without its index: cached across calls.
    s3.log.clear()
    np.testing.assert_array_equal(a[8:24, 32:48], expected[8:24, 32:48])
    gets = s3.log.under(f"/{bucket}/", "GET")
    assert len(gets) == len(runs)
    assert all(g.range != f"bytes=-{index_nbytes}" for g in gets)


def test_partial_read_of_many_shards_coalesces_per_shard(
    s3: S3, bucket: str, sharded: tuple[str, np.ndarray]
) -> None:
    url, expected = sharded
    a = cuzarr.open(url, storage_options=s3.options(), settings=cuzarr.Settings(max_overfetch=0))
    s3.log.clear()
    # Touches all four shards, 2x2 inner chunks of each: one index + one coalesced range each.
    np.testing.assert_array_equal(a[20:44, 20:44], expected[20:44, 20:44])
    gets = s3.log.under(f"/{bucket}/", "GET")
    assert len(gets) == 8
    assert sum(1 for g in gets if g.range and g.range.startswith("bytes=-")) == 4
    # A second read of the same shards needs no index (cached across calls).
    s3.log.clear()
    np.testing.assert_array_equal(a[16:48, 16:48], expected[16:48, 16:48])
    gets = s3.log.under(f"/{bucket}/", "GET")
    assert len(gets) == 4 and not any(g.range.startswith("bytes=-") for g in gets)


def test_small_shards_are_fetched_whole_in_one_request(
    s3: S3, bucket: str, sharded: tuple[str, np.ndarray]
) -> None:
    url, expected = sharded
    a = cuzarr.open(url, storage_options=s3.options())
    assert isinstance(a, cuzarr.Array)
    shard_keys = {f"/{bucket}/s.zarr/c/{i}/{j}" for i in (0, 1) for j in (0, 1)}
    sizes = {
        f"/{bucket}/{k}": s3.client().head_object(Bucket=bucket, Key=k)["ContentLength"]
        for k in (p.split("/", 2)[2] for p in shard_keys)
    }
    s3.log.clear()
    # 2x2 of 16 inner chunks of each 4 KiB shard: the unneeded 3 KiB cost less than a
    # round trip, so each shard is one GET of the whole object (its index included).
    np.testing.assert_array_equal(a[20:44, 20:44], expected[20:44, 20:44])
    gets = s3.log.under(f"/{bucket}/", "GET")
    assert sorted(g.path for g in gets) == sorted(shard_keys)
    assert all(g.range is None and g.nbytes == sizes[g.path] for g in gets)
    # The index came with the object: later partial reads fetch only the coalesced ranges.
    s3.log.clear()
    np.testing.assert_array_equal(a[0:8, 0:8], expected[0:8, 0:8])
    gets = s3.log.under(f"/{bucket}/", "GET")
    assert len(gets) == 1 and gets[0].range is not None
    assert not gets[0].range.startswith("bytes=-")
    assert gets[0].nbytes < sizes[gets[0].path] // 4


def test_overfetch_bound_decides_between_whole_and_ranged(
    s3: S3, bucket: str, sharded: tuple[str, np.ndarray]
) -> None:
    url, expected = sharded
    # Shards decode to 4 KiB; one inner chunk of 16 leaves 3840 bytes unneeded.
    for overfetch, whole in ((3840, True), (3839, False)):
        a = cuzarr.open(
            url, storage_options=s3.options(), settings=cuzarr.Settings(max_overfetch=overfetch)
        )
        s3.log.clear()
        np.testing.assert_array_equal(a[40:48, 40:48], expected[40:48, 40:48])
        gets = s3.log.under(f"/{bucket}/", "GET")
        if whole:
            assert [g.range for g in gets] == [None]
        else:
            assert len(gets) == 2 and gets[0].range is not None and gets[1].range is not None
            assert sum(1 for g in gets if g.range.startswith("bytes=-")) == 1


def test_object_cache_serves_repeated_reads_without_requests(
    s3: S3, bucket: str, sharded: tuple[str, np.ndarray]
) -> None:
    url, expected = sharded
    a = cuzarr.open(
        url, storage_options=s3.options(), settings=cuzarr.Settings(cache_bytes=1 << 20)
    )
    s3.log.clear()
    np.testing.assert_array_equal(a[20:44, 20:44], expected[20:44, 20:44])
    assert len(s3.log.under(f"/{bucket}/", "GET")) == 4  # each shard once, whole
    # Overlapping and smaller windows of the same shards: no request at all.
    s3.log.clear()
    for window in ((slice(0, 64), slice(0, 64)), (slice(3, 9), slice(40, 61)), (5, slice(None))):
        np.testing.assert_array_equal(a[window], expected[window])
    assert s3.log.under(f"/{bucket}/") == []
    # Without the cache (the default) the same reads go to the server again.
    b = cuzarr.open(url, storage_options=s3.options())
    np.testing.assert_array_equal(b[20:44, 20:44], expected[20:44, 20:44])
    s3.log.clear()
    np.testing.assert_array_equal(b[20:44, 20:44], expected[20:44, 20:44])
    assert len(s3.log.under(f"/{bucket}/", "GET")) == 4


def test_object_cache_is_bounded_and_caches_missing_chunks(s3: S3, bucket: str) -> None:
    from cuzarr.stores.cached import CachedChunkStore

    url = f"s3://{bucket}/u.zarr"
    writer = cuzarr.create(
        url, shape=(64, 64), chunks=(8, 8), dtype="i4", fill_value=-1,
        storage_options=s3.options(),
    )
    expected = np.full((64, 64), -1, "i4")
    expected[0:32, :] = np.random.default_rng(2).integers(0, 1 << 30, (32, 64))
    writer[0:32, :] = expected[0:32, :]
    # Large enough for everything: the 32 missing chunks are remembered as missing too.
    big = cuzarr.Settings(cache_bytes=1 << 20)
    a = cuzarr.open(url, storage_options=s3.options(), settings=big)
    s3.log.clear()
    np.testing.assert_array_equal(a[...], expected)
    assert len(s3.log.under(f"/{bucket}/", "GET")) == 64  # 32 stored chunks, 32 missing ones
    s3.log.clear()
    np.testing.assert_array_equal(a[...], expected)
    assert s3.log.under(f"/{bucket}/") == []
    # A small cache stays within its bound, least recently used out first.
    tiny = cuzarr.Settings(cache_bytes=4096)
    small = cuzarr.open(url, storage_options=s3.options(), settings=tiny)
    np.testing.assert_array_equal(small[...], expected)
    store = small._chunk_store()
    assert isinstance(store, CachedChunkStore)
    assert 0 < len(store.cache) < 64 and store.cache.nbytes <= 4096
    # What it holds is served without a request.
    for key in store.cache.held():
        i, j = (int(x) for x in key.split("/")[-2:])
        block = (slice(i * 8, i * 8 + 8), slice(j * 8, j * 8 + 8))
        s3.log.clear()
        np.testing.assert_array_equal(small[block], expected[block])
        assert s3.log.under(f"/{bucket}/") == []


def test_object_cache_sees_the_arrays_own_writes(
    s3: S3, bucket: str, sharded: tuple[str, np.ndarray]
) -> None:
    url, expected = sharded
    a = cuzarr.open(
        url, mode="r+", storage_options=s3.options(),
        settings=cuzarr.Settings(cache_bytes=1 << 20),
    )
    np.testing.assert_array_equal(a[...], expected)  # every shard cached
    s3.log.clear()
    a[1:3, 1:3] = 77  # read-modify-write: the read goes to the server (its ETag is needed)
    expected[1:3, 1:3] = 77
    puts = s3.log.under(f"/{bucket}/", "PUT")
    assert len(puts) == 1 and puts[0].if_match is not None
    assert len(s3.log.under(f"/{bucket}/", "GET")) == 1
    np.testing.assert_array_equal(a[0:8, 0:8], expected[0:8, 0:8])
    a[40:48, 40:48] = 5  # a partial shard write, then a whole-array read
    expected[40:48, 40:48] = 5
    np.testing.assert_array_equal(a[...], expected)
    # Another reader sees the same bytes.
    np.testing.assert_array_equal(cuzarr.open(url, storage_options=s3.options())[...], expected)


@pytest.fixture
def raw_sharded(s3: S3, bucket: str) -> tuple[str, np.ndarray, Any]:
    """Uncompressed shards: a stale index would decode the wrong bytes without any error."""
    expected = np.random.default_rng(6).integers(1, 1000, (64, 64)).astype("i4")
    z = zarr.create_array(
        zarr.storage.ObjectStore(s3.obstore(bucket, "r.zarr")),
        shape=expected.shape, dtype="i4", chunks=(8, 8), shards=(32, 32), compressors=None,
        fill_value=0,
    )
    z[...] = expected
    return f"s3://{bucket}/r.zarr", expected, z


def _shift_layout(z: Any, expected: np.ndarray) -> None:
    """Another writer empties the first row of inner chunks of shard (0, 0): later chunks move."""
    z[0:8, 0:32] = 0
    expected[0:8, 0:32] = 0


def test_cached_indexes_are_checked_against_the_shards_etag(
    s3: S3, bucket: str, raw_sharded: tuple[str, np.ndarray, Any]
) -> None:
    url, expected, z = raw_sharded
    ranged = cuzarr.Settings(max_overfetch=0)
    a = cuzarr.open(url, storage_options=s3.options(), settings=ranged)
    np.testing.assert_array_equal(a[8:16, 8:16], expected[8:16, 8:16])  # index cached
    s3.log.clear()
    np.testing.assert_array_equal(a[8:16, 8:16], expected[8:16, 8:16])
    gets = s3.log.under(f"/{bucket}/", "GET")
    assert len(gets) == 1 and gets[0].if_match is not None  # conditional on the index's ETag

    _shift_layout(z, expected)  # the cached index is now wrong for this shard
    s3.log.clear()
    np.testing.assert_array_equal(a[8:16, 8:16], expected[8:16, 8:16])
    gets = s3.log.under(f"/{bucket}/", "GET")
    # The conditional read fails (412), the index is read again, then the ranges.
    assert [g.status for g in gets] == [412, 206, 206]
    assert gets[1].range is not None and gets[1].range.startswith("bytes=-")
    assert gets[2].if_match is not None and gets[2].if_match != gets[0].if_match
    np.testing.assert_array_equal(a[...], expected)


def test_zarr_pipeline_caches_indexes_only_with_versions(
    s3: S3, bucket: str, raw_sharded: tuple[str, np.ndarray, Any]
) -> None:
    _url, expected, z = raw_sharded
    with cuzarr.configure(strict=True, max_overfetch=0):
        a = zarr.open_array(zarr.storage.ObjectStore(s3.obstore(bucket, "r.zarr")), mode="r")
        np.testing.assert_array_equal(a[8:16, 8:16], expected[8:16, 8:16])
        s3.log.clear()
        np.testing.assert_array_equal(a[8:16, 8:16], expected[8:16, 8:16])
        gets = s3.log.under(f"/{bucket}/", "GET")
        assert len(gets) == 1 and gets[0].if_match is not None  # index reused, checked
    _shift_layout(z, expected)  # zarr's own pipeline, another writer
    with cuzarr.configure(strict=True, max_overfetch=0):
        np.testing.assert_array_equal(a[8:16, 8:16], expected[8:16, 8:16])
        np.testing.assert_array_equal(a[...], expected)
        # Through zarr's FsspecStore there are no versions: every read fetches the index.
        f = zarr.open_array(f"s3://{bucket}/r.zarr", mode="r", storage_options=s3.options())
        np.testing.assert_array_equal(f[8:16, 8:16], expected[8:16, 8:16])
        s3.log.clear()
        np.testing.assert_array_equal(f[8:16, 8:16], expected[8:16, 8:16])
        gets = s3.log.under(f"/{bucket}/", "GET")
        assert len(gets) == 2 and gets[0].range is not None
        assert sum(1 for g in gets if g.range.startswith("bytes=-")) == 1


def test_read_many_fetches_each_shard_once(
    s3: S3, bucket: str, sharded: tuple[str, np.ndarray]
) -> None:
    url, expected = sharded
    a = cuzarr.open(url, storage_options=s3.options())
    assert isinstance(a, cuzarr.Array)
    windows = [np.s_[0:8, 0:8], np.s_[4:12, 4:12], np.s_[40:48, 40:48], np.s_[20:44, 20:44]]
    s3.log.clear()
    got = a.read_many(windows)
    for w, value in zip(windows, got, strict=True):
        np.testing.assert_array_equal(value, expected[w])
    gets = s3.log.under(f"/{bucket}/", "GET")
    shards = [f"/{bucket}/s.zarr/c/{i}/{j}" for i in (0, 1) for j in (0, 1)]
    assert sorted(g.path for g in gets) == sorted(shards)  # each shard once, whole


def test_start_indexed_shards_are_versioned_too(s3: S3, bucket: str) -> None:
    """An index at the start of the shard is a ranged read: it carries the ETag as well."""
    expected = np.random.default_rng(8).integers(1, 1000, (64, 64)).astype("i4")
    z = zarr.create_array(
        zarr.storage.ObjectStore(s3.obstore(bucket, "st.zarr")),
        shape=expected.shape, dtype="i4", chunks=(32, 32), compressors=None, fill_value=0,
        serializer=zarr.codecs.ShardingCodec(chunk_shape=(8, 8), index_location="start"),
    )
    z[...] = expected
    with cuzarr.configure(strict=True, max_overfetch=0):
        a = zarr.open_array(zarr.storage.ObjectStore(s3.obstore(bucket, "st.zarr")), mode="r")
        np.testing.assert_array_equal(a[8:16, 8:16], expected[8:16, 8:16])
        s3.log.clear()
        np.testing.assert_array_equal(a[8:16, 8:16], expected[8:16, 8:16])
        gets = s3.log.under(f"/{bucket}/", "GET")
        assert len(gets) == 1 and gets[0].if_match is not None
    _shift_layout(z, expected)
    with cuzarr.configure(strict=True, max_overfetch=0):
        s3.log.clear()
        np.testing.assert_array_equal(a[8:16, 8:16], expected[8:16, 8:16])
        assert [g.status for g in s3.log.under(f"/{bucket}/", "GET")] == [412, 206, 206]
        np.testing.assert_array_equal(a[...], expected)


def test_own_writes_invalidate_cached_indexes(
    s3: S3, bucket: str, sharded: tuple[str, np.ndarray]
) -> None:
    url, expected = sharded
    a = cuzarr.open(url, storage_options=s3.options())
    np.testing.assert_array_equal(a[0:8, 0:8], expected[0:8, 0:8])  # caches shard (0, 0)
    # The array's own writes invalidate the cached index of the shards they touch.
    b = cuzarr.open(url, mode="r+", storage_options=s3.options())
    np.testing.assert_array_equal(b[0:8, 0:8], expected[0:8, 0:8])
    b[0:4, 0:4] = -7
    expected[0:4, 0:4] = -7
    np.testing.assert_array_equal(b[0:16, 0:16], expected[0:16, 0:16])


# ---------------------------------------------------------------------------- writes


def test_writes_are_whole_objects_and_conditional(
    s3: S3, bucket: str, sharded: tuple[str, np.ndarray]
) -> None:
    url, expected = sharded
    a = cuzarr.open(url, mode="r+", storage_options=s3.options())
    s3.log.clear()
    a[1:2, 1:2] = 5  # a read-modify-write of shard (0, 0)
    expected[1:2, 1:2] = 5
    puts = s3.log.under(f"/{bucket}/", "PUT")
    assert [p.path for p in puts] == [f"/{bucket}/s.zarr/c/0/0"]
    head = s3.client().head_object(Bucket=bucket, Key="s.zarr/c/0/0")
    # Conditional on the ETag the shard had when read; the new object is whole.
    assert puts[0].if_match is not None and puts[0].if_match != head["ETag"]
    assert not any(p.range for p in s3.log.under(f"/{bucket}/", "PUT"))
    np.testing.assert_array_equal(a[...], expected)
    s3.log.clear()
    a[32:64, 0:32] = 3  # a whole shard: no read, unconditional put
    expected[32:64, 0:32] = 3
    puts = s3.log.under(f"/{bucket}/", "PUT")
    assert len(puts) == 1 and puts[0].if_match is None
    assert not s3.log.under(f"/{bucket}/", "GET")


def test_conflicting_writer_is_detected_and_its_object_kept(s3: S3, bucket: str) -> None:
    from cuzarr.errors import StaleObjectError
    from cuzarr.stores.base import PutMode
    from cuzarr.stores.obstore_ import ObstoreChunkStore

    store = ObstoreChunkStore(s3.obstore(bucket), name=f"s3://{bucket}")
    client = s3.client()
    client.put_object(Bucket=bucket, Key="k", Body=b"old")
    old = store.get("k", fresh=True)
    assert old is not None and bytes(old.data) == b"old" and old.version
    client.put_object(Bucket=bucket, Key="k", Body=b"theirs")
    with pytest.raises(StaleObjectError, match=rf"'k' in s3://{bucket}: another writer changed"):
        store.put("k", np.frombuffer(b"mine", np.uint8), mode=PutMode.UPDATE, version=old.version)
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"theirs"
    # Missing when read, created by someone else before the put.
    assert store.get("new") is None
    client.put_object(Bucket=bucket, Key="new", Body=b"theirs")
    with pytest.raises(StaleObjectError, match="another writer"):
        store.put("new", np.frombuffer(b"mine", np.uint8), mode=PutMode.CREATE)
    assert client.get_object(Bucket=bucket, Key="new")["Body"].read() == b"theirs"
    # A plain put overwrites; an update with the current version succeeds.
    store.put("new", np.frombuffer(b"mine", np.uint8))
    assert client.get_object(Bucket=bucket, Key="new")["Body"].read() == b"mine"
    now = store.get("k")
    assert now is not None
    store.put("k", np.frombuffer(b"final", np.uint8), mode=PutMode.UPDATE, version=now.version)
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"final"
    assert isinstance(StaleObjectError("x"), StoreError)


def test_read_only_url_refuses_writes(s3: S3, bucket: str) -> None:
    url = f"s3://{bucket}/ro.zarr"
    cuzarr.create(url, shape=(4,), dtype="i4", chunks=(2,), storage_options=s3.options())
    a = cuzarr.open(url, storage_options=s3.options())
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 1


# ---------------------------------------------------------------------------- errors


def test_missing_bucket_and_prefix_name_the_url(s3: S3, bucket: str) -> None:
    missing_bucket = f"s3://nobucket-{uuid.uuid4().hex[:8]}/a.zarr"
    with pytest.raises(NodeNotFoundError, match="bucket does not exist") as info:
        cuzarr.open(missing_bucket, storage_options=s3.options())
    assert missing_bucket in str(info.value)
    missing_prefix = f"s3://{bucket}/not/here.zarr"
    with pytest.raises(NodeNotFoundError) as info:
        cuzarr.open(missing_prefix, storage_options=s3.options())
    assert missing_prefix in str(info.value)


def test_bad_credentials_and_access_denied(s3: S3, bucket: str) -> None:
    url = f"s3://{bucket}/auth.zarr"
    cuzarr.create(url, shape=(4,), dtype="i4", chunks=(2,), storage_options=s3.options())
    iam = boto3.client(
        "iam", endpoint_url=s3.endpoint, aws_access_key_id=KEY,
        aws_secret_access_key=SECRET, region_name=REGION,
    )
    user = f"u{uuid.uuid4().hex[:8]}"
    iam.create_user(UserName=user)
    key = iam.create_access_key(UserName=user)["AccessKey"]
    deny = {"Version": "2012-10-17",
            "Statement": [{"Effect": "Deny", "Action": "s3:*", "Resource": "*"}]}
    iam.put_user_policy(UserName=user, PolicyName="deny", PolicyDocument=json.dumps(deny))
    from moto import settings

    old = settings.INITIAL_NO_AUTH_ACTION_COUNT
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    try:
        opts = s3.options(key="AKIANOSUCHKEY0000000", retry_config={"max_retries": 0})
        with pytest.raises(StoreError, match="InvalidAccessKeyId") as info:
            cuzarr.open(url, storage_options=opts)
        assert url in str(info.value) and "access denied" in str(info.value)
        opts = s3.options(
            key=key["AccessKeyId"], secret=key["SecretAccessKey"], retry_config={"max_retries": 0}
        )
        with pytest.raises(StoreError, match="AccessDenied") as info:
            cuzarr.open(url, storage_options=opts)
        assert url in str(info.value)
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = old


class _FlakyHandler(http.server.BaseHTTPRequestHandler):
    """Serves ``server.files``; the first ``server.failures`` GETs answer 503."""

    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        srv = self.server
        with srv.lock:
            srv.requests += 1
            fail = srv.failures > 0
            if fail:
                srv.failures -= 1
        if fail:
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = srv.files.get(self.path.lstrip("/"))
        if body is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def flaky_http() -> Iterator[Any]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FlakyHandler)
    server.lock = threading.Lock()
    server.requests = 0
    server.failures = 0
    server.files = {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def _fast_retries(n: int) -> dict[str, Any]:
    return {"max_retries": n, "backoff": {"init_backoff": 0.001, "max_backoff": 0.01},
            "retry_timeout": 10}


def test_transient_errors_are_retried(flaky_http: Any) -> None:
    mem = zarr.storage.MemoryStore()
    expected = _data((6, 6))
    zarr.create_array(mem, shape=(6, 6), dtype="i4", chunks=(3, 3))[...] = expected
    flaky_http.files = {k: v.to_bytes() for k, v in mem._store_dict.items()}
    flaky_http.failures = 2
    host, port = flaky_http.server_address[:2]
    url = f"http://{host}:{port}/"
    a = cuzarr.open(url, storage_options={"retry_config": _fast_retries(3)})
    assert isinstance(a, cuzarr.Array)
    np.testing.assert_array_equal(a[...], expected)
    assert flaky_http.failures == 0
    assert flaky_http.requests == 2 + 1 + 4  # two failures, zarr.json, four chunks


def test_server_errors_after_retries_name_the_url(flaky_http: Any) -> None:
    flaky_http.failures = 10**6
    host, port = flaky_http.server_address[:2]
    url = f"http://{host}:{port}/a.zarr"
    with pytest.raises(StoreError, match="503") as info:
        cuzarr.open(url, storage_options={"retry_config": _fast_retries(2)})
    assert url in str(info.value)
    assert flaky_http.requests == 3  # the request and two retries
    assert "\n" not in str(info.value)


def test_unreachable_endpoint_is_one_clear_error() -> None:
    # Port 9 (discard) on loopback: nothing listens there.
    opts = {"endpoint_url": "http://127.0.0.1:9", "key": KEY, "secret": SECRET,
            "retry_config": _fast_retries(1)}
    with pytest.raises(StoreError, match=r"s3://b/a\.zarr"):
        cuzarr.open("s3://b/a.zarr", storage_options=opts)


# ---------------------------------------------------------------------------- options


def test_storage_options_translate_s3fs_names() -> None:
    from cuzarr.stores.object_urls import split_storage_options

    config, client, retry, concurrency = split_storage_options(
        "s3://b/p",
        {
            "endpoint_url": "http://127.0.0.1:1",
            "key": "k",
            "secret": "s",
            "anon": 1,
            "client_kwargs": {"region_name": "eu-west-1"},
            "retry_config": {"max_retries": 2, "backoff": {"init_backoff": 0.5}},
            "concurrency": 7,
        },
    )
    assert config == {
        "endpoint": "http://127.0.0.1:1", "access_key_id": "k", "secret_access_key": "s",
        "skip_signature": True, "region": "eu-west-1",
    }
    assert client == {"allow_http": True}
    assert retry == {"max_retries": 2,
                     "backoff": {"init_backoff": datetime.timedelta(seconds=0.5)}}
    assert concurrency == 7
    with pytest.raises(ValueError, match="repeats"):
        split_storage_options("s3://b", {"key": "a", "access_key_id": "b"})
    with pytest.raises(ValueError, match="concurrency"):
        split_storage_options("s3://b", {"concurrency": 0})
    with pytest.raises(ValueError, match="cannot open"):
        cuzarr.open("s3://b/p", storage_options={"no_such_option": 1})
