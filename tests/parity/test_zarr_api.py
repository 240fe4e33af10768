"""zarr-python's array API through cuzarr: resize, append, groups, attributes, consolidated
metadata, ``read_missing_chunks=False``, block / mask / coordinate methods and pickling."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.errors import ChunkNotFoundError

import cuzarr
from cuzarr.testing import (
    Append,
    Resize,
    Selection,
    Write,
    assert_same_array,
    check_parity,
    sample_values,
    stored_items,
    use_pipeline,
)

SHAPE = (13, 9)
CHUNKS = (5, 4)


@pytest.mark.parametrize("fmt", [2, 3])
def test_resize_and_append(fmt: int, make_store: Any) -> None:
    create = {"shape": SHAPE, "chunks": CHUNKS, "dtype": "i4", "fill_value": -5, "zarr_format": fmt}
    steps = [
        Write(Ellipsis, sample_values("i4", SHAPE, seed=21)),
        Resize((7, 12)),  # shrink axis 0 (chunks dropped), grow axis 1 (ragged edge grows)
        Write((slice(None), slice(9, 12)), 3),
        Append(sample_values("i4", (4, 12), seed=22)),
        Append(sample_values("i4", (11, 2), seed=23), axis=1),
    ]
    result = check_parity(make_store, create, steps, reads=[Selection("basic", (slice(5, 11), -1))])
    assert result.model.shape == (11, 14)


@pytest.mark.parametrize("consolidated", [False, True])
def test_groups_attributes_consolidated(consolidated: bool, make_store: Any) -> None:
    """A hierarchy written through cuzarr is byte-identical to zarr's, and reads back."""
    stores = {name: make_store(name) for name in ("zarr", "cuzarr")}
    data = {
        "a/x": sample_values("f8", (6, 5), seed=31),
        "a/b/y": sample_values(">i2", (9,), seed=32),
        "z": sample_values("u1", (4, 4, 4), seed=33),
    }
    for name, store in stores.items():
        with use_pipeline(name):  # type: ignore[arg-type]
            root = zarr.open_group(store, mode="w", attributes={"title": "root"})
            group_a = root.create_group("a", attributes={"level": 1})
            group_a.create_group("b").attrs["tags"] = ["x", "y"]
            for path, values in data.items():
                arr = root.create_array(
                    path, shape=values.shape, chunks=(3,) * values.ndim, dtype=values.dtype
                )
                arr[...] = values
                arr.attrs["units"] = path
            if consolidated:
                zarr.consolidate_metadata(store)
    items = {name: stored_items(store) for name, store in stores.items()}
    assert items["zarr"] == items["cuzarr"]
    cuzarr.reset_stats()
    for name, store in stores.items():
        with use_pipeline("cuzarr"):
            root = zarr.open_consolidated(store) if consolidated else zarr.open_group(store)
            assert dict(root.attrs) == {"title": "root"}
            assert root["a"].attrs["level"] == 1
            assert root["a/b"].attrs["tags"] == ["x", "y"]
            for path, values in data.items():
                arr = root[path]
                assert arr.attrs["units"] == path
                assert_same_array(arr[...], values.astype(arr.dtype), msg=f"{name}:{path}")
    assert cuzarr.stats().get("engine_reads", 0) >= 2 * len(data)


@pytest.mark.parametrize(("fmt", "layout"), [(2, "plain"), (3, "plain"), (3, "sharded")])
def test_read_missing_chunks_false(fmt: int, layout: str, make_store: Any) -> None:
    """Missing chunks raise ChunkNotFoundError through both pipelines, naming the same keys."""
    create: dict[str, Any] = {"shape": SHAPE, "chunks": CHUNKS, "dtype": "f4", "zarr_format": fmt}
    if layout == "sharded":
        create["shards"] = (10, 8)
    # only the first chunk row (shard row) is written
    steps = [Write((slice(0, 5), slice(None)), 1.5)]
    result = check_parity(
        make_store,
        create,
        steps,
        reads=[Selection("basic", (slice(0, 5), slice(None)))],
        open_config={"read_missing_chunks": True},
        compare_bytes=True,
    )
    messages = {}
    for reader in ("zarr", "cuzarr"):
        for writer, store in (("zarr", result.zarr_store), ("cuzarr", result.cuzarr_store)):
            with use_pipeline(reader):  # type: ignore[arg-type]
                arr = zarr.open_array(
                    store, path="arr", mode="r", config={"read_missing_chunks": False}
                )
                # present chunks read fine
                assert_same_array(arr[0:5, :], result.model[0:5, :])
                with pytest.raises(ChunkNotFoundError) as info:
                    arr[...]
                messages[reader, writer] = str(info.value).split("Missing chunks:")[1]  # sans store
                if layout == "sharded":
                    # an inner chunk missing from a present shard reads as the fill value:
                    # read_missing_chunks is about store keys
                    assert_same_array(arr[5:10, 0:8], result.model[5:10, 0:8])
    assert len(set(messages.values())) == 1, messages


def test_block_mask_coordinate_methods(make_store: Any) -> None:
    """The explicit selection methods of ``zarr.Array`` give the same results on both."""
    values = sample_values("i8", SHAPE, seed=41)
    mask = np.zeros(SHAPE, dtype=bool)
    mask[[0, 4, 5, 12], [3, 3, 8, 0]] = True
    results: dict[str, list[Any]] = {}
    stores = {}
    for name in ("zarr", "cuzarr"):
        stores[name] = store = make_store(name)
        with use_pipeline(name):  # type: ignore[arg-type]
            arr = zarr.create_array(store, shape=SHAPE, chunks=CHUNKS, dtype="i8", fill_value=0)
            arr[...] = values
            arr.set_block_selection((1, 2), -1)
            arr.set_mask_selection(mask, -2)
            arr.set_coordinate_selection(([1, 2], [7, 6]), [-3, -4])
            arr.set_orthogonal_selection(([11, 12], slice(0, 2)), -5)
            arr.set_basic_selection((slice(6, 9), 0), -6)
            results[name] = [
                arr.get_block_selection((slice(0, 2), 1)),
                arr.get_mask_selection(mask),
                arr.get_coordinate_selection(([1, 2, 12], [7, 6, 8])),
                arr.get_orthogonal_selection(([12, 0], [8, 1])),
                arr.get_basic_selection((slice(None, None, 4), 0)),
                arr[...],
            ]
    expected = values.copy()
    expected[5:10, 8:9] = -1
    expected[mask] = -2
    expected[[1, 2], [7, 6]] = [-3, -4]
    expected[11:13, 0:2] = -5
    expected[6:9, 0] = -6
    model = [
        expected[0:10, 4:8],
        expected[mask],
        expected[[1, 2, 12], [7, 6, 8]],
        expected[np.ix_([12, 0], [8, 1])],
        expected[::4, 0],
        expected,
    ]
    for name, got in results.items():
        for i, (a, e) in enumerate(zip(got, model, strict=True)):
            assert_same_array(a, e, msg=f"{name} result {i}")
    assert stored_items(stores["zarr"]) == stored_items(stores["cuzarr"])


def test_pickle_pipeline_and_array(tmp_path: Any) -> None:
    store = zarr.storage.LocalStore(tmp_path / "p")
    values = sample_values("f4", SHAPE, seed=51)
    with use_pipeline("cuzarr", strict=True, threads=2):
        arr = zarr.create_array(store, shape=SHAPE, chunks=CHUNKS, dtype="f4", fill_value=np.nan)
        arr[...] = values
        pipeline = arr._async_array.codec_pipeline
        assert isinstance(pipeline, cuzarr.Pipeline)
        assert pipeline.engine is not None
        blob_pipeline = pickle.dumps(pipeline)
        blob_array = pickle.dumps(arr)
    # outside the context: the pickled pipeline carries its own settings and engine
    restored = pickle.loads(blob_pipeline)
    assert isinstance(restored, cuzarr.Pipeline)
    assert restored.engine is not None
    assert restored.settings == pipeline.settings
    assert restored.settings.strict is True and restored.settings.threads == 2
    unpickled = pickle.loads(blob_array)
    assert isinstance(unpickled._async_array.codec_pipeline, cuzarr.Pipeline)
    cuzarr.reset_stats()
    assert_same_array(unpickled[...], values)
    assert_same_array(unpickled[2:7, 1::3], values[2:7, 1::3])
    unpickled[0, 0] = 7.0
    assert cuzarr.stats().get("engine_reads", 0) >= 2
    assert cuzarr.stats().get("engine_writes", 0) >= 1
    with use_pipeline("zarr"):
        again = zarr.open_array(store, mode="r")
        expected = values.copy()
        expected[0, 0] = 7.0
        assert_same_array(again[...], expected)
