"""Hypothesis property tests: random layouts, selections and write sequences.

Properties:

* reading any selection through cuzarr gives the NumPy model's values, and the same values
  zarr-python's default pipeline reads from the same store;
* after a random sequence of writes through cuzarr, zarr's default pipeline reads the model's
  values and the store holds the same set of keys as a twin written by zarr's default pipeline;
* ``cuzarr.stores.ranges.coalesce`` and the ``cuzarr.engine.selection`` helpers keep their
  contracts.

Runs are derandomized (and use no example database) so CI sees the same examples every time;
failures found while developing are pinned with ``@example``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, GzipCodec, ShardingCodec, ZstdCodec

import cuzarr
from cuzarr.engine.selection import needed_blocks, rebase
from cuzarr.stores.ranges import ByteRange, coalesce

DEFAULT_PIPELINE = "zarr.core.codec_pipeline.BatchedCodecPipeline"
METADATA_KEYS = {"zarr.json", ".zarray", ".zattrs", ".zgroup"}

SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

DTYPES = ["bool", "uint8", "int16", "uint16", "int32", "int64", "float32", "float64", "complex64"]


# ---------------------------------------------------------------------------- layouts


@dataclass(frozen=True)
class Layout:
    """An array layout; ``shards`` is ``None`` or a multiple of ``chunks`` per dimension."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    dtype: str
    fill_value: Any
    compressor: str | None
    index_location: str = "end"
    zarr_format: int = 3
    order: str = "C"

    @property
    def grid(self) -> tuple[int, ...]:
        """The outer chunk grid (shards when sharded): what ``Array.blocks`` indexes."""
        return self.shards if self.shards is not None else self.chunks


def _fill_values(dtype: str) -> st.SearchStrategy[Any]:
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return st.booleans()
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return st.sampled_from([0, 1, int(info.min), int(info.max)])
    if dt.kind == "f":
        return st.sampled_from([0.0, -0.0, math.nan, 1.5, -math.inf])
    return st.sampled_from([0j, complex(math.nan, 0.0), complex(1.0, -2.0), complex(-0.0, 0.0)])


@st.composite
def layouts(draw: st.DrawFn, max_dims: int = 4) -> Layout:
    ndim = draw(st.integers(0, max_dims))
    # keep arrays tiny: at most ~400 elements
    max_len = {0: 1, 1: 40, 2: 12, 3: 7, 4: 5}[ndim]
    shape = tuple(draw(st.lists(st.integers(0, max_len), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.integers(1, max(1, n))) for n in shape)
    dtype = draw(st.sampled_from(DTYPES))
    fill = draw(_fill_values(dtype))
    compressor = draw(st.sampled_from([None, "zstd", "gzip"]))
    zarr_format = draw(st.sampled_from([3, 3, 3, 2])) if ndim else 3
    shards = None
    index_location = "end"
    order = "C"
    if zarr_format == 2:
        order = draw(st.sampled_from(["C", "F"]))
    elif ndim and draw(st.booleans()):
        ks = draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim))
        shards = tuple(c * k for c, k in zip(chunks, ks, strict=True))
        index_location = draw(st.sampled_from(["end", "start"]))
    return Layout(
        shape=shape,
        chunks=chunks,
        shards=shards,
        dtype=dtype,
        fill_value=fill,
        compressor=compressor,
        index_location=index_location,
        zarr_format=zarr_format,
        order=order,
    )


def _compressor(layout: Layout) -> Any:
    if layout.zarr_format == 2:
        import numcodecs

        return {None: None, "zstd": numcodecs.Zstd(level=1), "gzip": numcodecs.GZip(level=1)}[
            layout.compressor
        ]
    return {None: None, "zstd": ZstdCodec(level=1), "gzip": GzipCodec(level=1)}[layout.compressor]


def _create(layout: Layout, store_dict: dict[str, Any]) -> zarr.Array[Any]:
    """Create the array in a MemoryStore over ``store_dict`` with the configured pipeline."""
    store = zarr.storage.MemoryStore(store_dict=store_dict)
    kwargs: dict[str, Any] = {}
    if layout.zarr_format == 2:
        kwargs.update(zarr_format=2, order=layout.order, chunks=layout.chunks)
        kwargs["compressors"] = _compressor(layout)
    elif layout.shards is None:
        kwargs.update(chunks=layout.chunks, compressors=_compressor(layout))
    else:
        comp = _compressor(layout)
        kwargs.update(
            chunks=layout.shards,
            compressors=None,
            serializer=ShardingCodec(
                chunk_shape=layout.chunks,
                codecs=[BytesCodec()] + ([comp] if comp is not None else []),
                index_location=layout.index_location,
            ),
        )
    return zarr.create_array(
        store, name="a", shape=layout.shape, dtype=layout.dtype, fill_value=layout.fill_value,
        **kwargs,
    )


def _open(store_dict: dict[str, Any]) -> zarr.Array[Any]:
    return zarr.open_array(zarr.storage.MemoryStore(store_dict=store_dict), path="a", mode="r+")


def _cuzarr_array(open_fn: Callable[[], zarr.Array[Any]]) -> zarr.Array[Any]:
    """Build an array inside ``cuzarr.configure(strict=True)`` (zarr captures the pipeline)."""
    with cuzarr.configure(strict=True):
        arr = open_fn()
    pipe = arr._async_array.codec_pipeline
    assert isinstance(pipe, cuzarr.Pipeline) and pipe.engine is not None, pipe
    return arr


def _default_array(open_fn: Callable[[], zarr.Array[Any]]) -> zarr.Array[Any]:
    with zarr.config.set({"codec_pipeline.path": DEFAULT_PIPELINE}):
        arr = open_fn()
    assert not isinstance(arr._async_array.codec_pipeline, cuzarr.Pipeline)
    return arr


def _chunk_keys(store_dict: dict[str, Any]) -> set[str]:
    return {k for k in store_dict if k.rsplit("/", 1)[-1] not in METADATA_KEYS}


# ---------------------------------------------------------------------------- values


def _values(
    shape: tuple[int, ...], dtype: str, fill: Any, seed: int, p_fill: float
) -> np.ndarray[Any, Any]:
    """Random values of ``dtype`` with special floats, and a share ``p_fill`` of fill values."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    a: np.ndarray[Any, Any]
    if dt.kind == "b":
        a = np.asarray(rng.integers(0, 2, size=shape)).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        a = np.asarray(rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt))
    else:
        a = np.asarray(rng.standard_normal(shape) * 10).astype(dt)
        if dt.kind == "c":
            a = np.asarray(a + 1j * np.asarray(rng.standard_normal(shape) * 10).astype(dt))
        specials = np.array([np.nan, -0.0, 0.0, np.inf], dtype=dt)
        mask = rng.random(shape) < 0.2
        a[mask] = rng.choice(specials, size=int(mask.sum()))
    if p_fill:
        a[rng.random(shape) < p_fill] = np.asarray(fill, dtype=dt)
    return np.asarray(a, dtype=dt)


def assert_same(actual: Any, expected: Any) -> None:
    """Exact equality: NaN where NaN, otherwise bit-identical (so -0.0 is not 0.0)."""
    a = np.ascontiguousarray(np.asarray(actual))
    e = np.ascontiguousarray(np.asarray(expected))
    assert a.shape == e.shape, (a.shape, e.shape)
    assert a.dtype == e.dtype, (a.dtype, e.dtype)
    if e.dtype.kind in "fc":
        ar = a.reshape(-1).view(a.real.dtype)
        er = e.reshape(-1).view(e.real.dtype)
        nan_a, nan_e = np.isnan(ar), np.isnan(er)
        np.testing.assert_array_equal(nan_a, nan_e)
        bits = np.dtype(f"u{ar.dtype.itemsize}")
        np.testing.assert_array_equal(ar[~nan_a].view(bits), er[~nan_e].view(bits))
    else:
        np.testing.assert_array_equal(a, e)


# ---------------------------------------------------------------------------- selections


@dataclass(frozen=True)
class Sel:
    """A zarr selection of one kind and the NumPy index that means the same on the model.

    ``index`` applied to the model gives the selected values in the shape zarr returns for
    every kind but ``orthogonal``, where ``drop`` names the integer axes ``index`` (an
    ``np.ix_`` tuple) keeps as length-1 axes.
    """

    kind: str
    selection: Any
    index: Any
    drop: tuple[int, ...] = ()

    def get(self, model: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        got = model[self.index]
        return got.squeeze(axis=self.drop) if self.drop else got

    def set(self, model: np.ndarray[Any, Any], values: Any) -> None:
        if self.drop and np.ndim(values):
            values = np.expand_dims(values, self.drop)
        model[self.index] = values

    def read(self, arr: zarr.Array[Any]) -> Any:
        if self.kind == "basic":
            return arr[self.selection]
        if self.kind == "orthogonal":
            return arr.oindex[self.selection]
        if self.kind in ("coordinate", "mask"):
            return arr.vindex[self.selection]
        return arr.blocks[self.selection]

    def write(self, arr: zarr.Array[Any], values: Any) -> None:
        if self.kind == "basic":
            arr[self.selection] = values
        elif self.kind == "orthogonal":
            arr.oindex[self.selection] = values
        elif self.kind in ("coordinate", "mask"):
            arr.vindex[self.selection] = values
        else:
            arr.blocks[self.selection] = values


def _slices(n: int) -> st.SearchStrategy[slice]:
    bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
    return st.builds(slice, bound, bound, st.sampled_from([None, 1, 1, 2, 3]))


@st.composite
def basic_selections(draw: st.DrawFn, shape: tuple[int, ...]) -> Sel:
    entries: list[Any] = []
    for n in shape:
        if n and draw(st.integers(0, 3)) == 0:
            entries.append(draw(st.integers(-n, n - 1)))
        else:
            entries.append(draw(_slices(n)))
    if draw(st.booleans()):
        # drop a run of trailing full slices, or put an Ellipsis in their place
        cut = draw(st.integers(0, len(entries)))
        entries = entries[:cut] + ([Ellipsis] if draw(st.booleans()) else [])
    sel = tuple(entries)
    return Sel("basic", sel, sel)


@st.composite
def orthogonal_selections(draw: st.DrawFn, shape: tuple[int, ...], unique: bool = False) -> Sel:
    entries: list[Any] = []
    ix: list[np.ndarray[Any, Any]] = []
    drop: list[int] = []
    for axis, n in enumerate(shape):
        # zarr 3.4's BoolArrayDimIndexer fails on a zero-length dimension (IndexError in
        # zarr itself, any pipeline), so masks only go on non-empty dimensions
        kind = draw(st.sampled_from(["slice", "int", "ints", "mask"] if n else ["slice", "ints"]))
        if kind == "slice":
            s = draw(_slices(n))
            entries.append(s)
            ix.append(np.arange(n)[s])
        elif kind == "int":
            i = draw(st.integers(-n, n - 1))
            entries.append(i)
            ix.append(np.array([i]))
            drop.append(axis)
        elif kind == "ints":
            idx = st.integers(-n, n - 1)
            if not n:
                vals = []  # the only integer selection of a zero-length dimension
            elif unique:
                vals = draw(st.lists(st.integers(0, n - 1), max_size=n, unique=True))
                vals = [v - n if draw(st.booleans()) else v for v in vals]
            else:
                vals = draw(st.lists(idx, max_size=6))
            a = np.array(vals, dtype=np.int64)
            entries.append(a)
            ix.append(a)
        else:
            m = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
            entries.append(m)
            ix.append(np.flatnonzero(m))
    return Sel("orthogonal", tuple(entries), np.ix_(*ix), tuple(drop))


@st.composite
def coordinate_selections(draw: st.DrawFn, shape: tuple[int, ...], unique: bool = False) -> Sel:
    size = math.prod(shape)
    if unique:
        flat = draw(st.lists(st.integers(0, size - 1), max_size=min(size, 12), unique=True))
    else:
        flat = draw(st.lists(st.integers(0, size - 1), max_size=12))
    coords = np.unravel_index(np.array(flat, dtype=np.intp), shape)
    # negative coordinates wrap around, as in NumPy
    coords = tuple(
        np.where(np.array(draw(st.lists(st.booleans(), min_size=len(flat),
                                        max_size=len(flat))), dtype=bool), c - n, c)
        for c, n in zip(coords, shape, strict=True)
    )
    return Sel("coordinate", coords, coords)


@st.composite
def mask_selections(draw: st.DrawFn, shape: tuple[int, ...]) -> Sel:
    seed = draw(st.integers(0, 2**32 - 1))
    p = draw(st.sampled_from([0.0, 0.2, 0.7, 1.0]))
    m = np.random.default_rng(seed).random(shape) < p
    return Sel("mask", m, m)


@st.composite
def block_selections(draw: st.DrawFn, shape: tuple[int, ...], grid: tuple[int, ...]) -> Sel:
    entries: list[Any] = []
    index: list[slice] = []
    for n, c in zip(shape, grid, strict=True):
        nb = -(-n // c)
        if draw(st.booleans()):
            b = draw(st.integers(-nb, nb - 1))
            entries.append(b)
            b %= nb
            index.append(slice(b * c, min((b + 1) * c, n)))
        else:
            start = draw(st.integers(0, nb - 1))
            stop = draw(st.integers(start + 1, nb))
            entries.append(slice(start, stop))
            index.append(slice(start * c, min(stop * c, n)))
    return Sel("block", tuple(entries), tuple(index))


def selections(layout: Layout, *, for_write: bool = False) -> st.SearchStrategy[Sel]:
    shape = layout.shape
    options = [basic_selections(shape)]
    if shape:
        options.append(orthogonal_selections(shape, unique=for_write))
        options.append(mask_selections(shape))
    if shape and all(shape):
        options.append(coordinate_selections(shape, unique=for_write))
        options.append(block_selections(shape, layout.grid))
    return st.one_of(*options)


# ---------------------------------------------------------------------------- the model


def _write_model(model: np.ndarray[Any, Any], sel: Sel, value: Any, layout: Layout) -> None:
    """Apply a write to the model, with zarr's rule for chunks that end up "empty".

    Without ``write_empty_chunks``, a (inner) chunk a write leaves equal to the fill value is
    deleted, so it reads back as the fill value itself. "Equal" is zarr's rule
    (``NDBuffer.all_equal``): NaN equals NaN, and for floats -0.0 differs from 0.0, but complex
    values compare by value, so a chunk of ``0j`` under a ``-0j`` fill (or of ``nan+5j`` under a
    ``nan+0j`` fill) is dropped and reads back as the fill's bits.
    """
    from zarr.core.buffer.cpu import NDBuffer

    sel.set(model, value)
    touched = np.zeros(model.shape, dtype=bool)
    sel.set(touched, True)
    fill = np.asarray(layout.fill_value, dtype=model.dtype)
    nchunks = [-(-n // c) for n, c in zip(layout.shape, layout.chunks, strict=True)]
    for idx in np.ndindex(*nchunks):
        region = (
            *(slice(i * c, (i + 1) * c) for i, c in zip(idx, layout.chunks, strict=True)),
            Ellipsis,
        )
        if np.any(touched[region]) and NDBuffer(model[region].copy()).all_equal(fill[()]):
            model[region] = fill


# ---------------------------------------------------------------------------- reads


def _events(layout: Layout, sels: list[Sel]) -> None:
    """Label examples so ``--hypothesis-show-statistics`` shows what the run covered."""
    event(f"ndim={len(layout.shape)}")
    event(f"v{layout.zarr_format}" + (f" sharded index {layout.index_location}"
                                       if layout.shards else ""))
    for sel in sels:
        event(f"selection={sel.kind}")


@st.composite
def read_cases(draw: st.DrawFn) -> tuple[Layout, Sel, Sel, int, float]:
    layout = draw(layouts())
    initial = draw(basic_selections(layout.shape))
    sel = draw(selections(layout))
    seed = draw(st.integers(0, 2**32 - 1))
    p_fill = draw(st.sampled_from([0.0, 0.5, 1.0]))
    return layout, initial, sel, seed, p_fill


@settings(SETTINGS, max_examples=400)
@given(read_cases())
@example(  # 0-d arrays: a whole-chunk read once decoded into a scalar copy, not the output
    (
        Layout(shape=(), chunks=(), shards=None, dtype="float64", fill_value=0.0,
               compressor=None),
        Sel("basic", (), ()),
        Sel("basic", (), ()),
        1,
        0.0,
    )
)
def test_read_matches_model_and_zarr(case: tuple[Layout, Sel, Sel, int, float]) -> None:
    layout, initial, sel, seed, p_fill = case
    _events(layout, [sel])
    store: dict[str, Any] = {}
    ref = _default_array(lambda: _create(layout, store))
    model = np.full(layout.shape, layout.fill_value, dtype=layout.dtype)
    region = initial.get(model)
    values = _values(region.shape, layout.dtype, layout.fill_value, seed, p_fill)
    _write_model(model, initial, values, layout)
    initial.write(ref, values)

    expected = sel.get(model)
    assert_same(sel.read(ref), expected)  # zarr's default pipeline agrees with the model
    arr = _cuzarr_array(lambda: _open(store))
    cuzarr.reset_stats()
    got = sel.read(arr)
    s = cuzarr.stats()
    assert_same(got, expected)
    assert not any(s.get(k, 0) for k in ("fallback_arrays", "fallback_reads")), s
    if expected.size:
        assert s.get("engine_reads", 0) >= 1, s


# ---------------------------------------------------------------------------- writes


@st.composite
def write_cases(draw: st.DrawFn) -> tuple[Layout, list[tuple[Sel, Any]]]:
    layout = draw(layouts())
    model = np.full(layout.shape, layout.fill_value, dtype=layout.dtype)
    writes: list[tuple[Sel, Any]] = []
    for _ in range(draw(st.integers(1, 4))):
        sel = draw(selections(layout, for_write=True))
        shape = sel.get(model).shape
        seed = draw(st.integers(0, 2**32 - 1))
        p_fill = draw(st.sampled_from([0.0, 0.5, 1.0]))
        if draw(st.integers(0, 4)) == 0:
            value: Any = _values((), layout.dtype, layout.fill_value, seed, p_fill)[()]
        else:
            value = _values(shape, layout.dtype, layout.fill_value, seed, p_fill)
        writes.append((sel, value))
    return layout, writes


@settings(SETTINGS, max_examples=300)
@given(write_cases())
@example(  # 0-d arrays: write then read back through the engine
    (
        Layout(shape=(), chunks=(), shards=None, dtype="int16", fill_value=0, compressor="zstd"),
        [(Sel("basic", (), ()), np.int16(5))],
    )
)
@example(  # v2 order="F" without a compressor: a merged edge chunk was stored in C order
    (
        Layout(shape=(2, 3), chunks=(2, 2), shards=None, dtype="bool", fill_value=False,
               compressor=None, zarr_format=2, order="F"),
        [(Sel("basic", (), ()), np.True_)],
    )
)
@example(  # complex 0j under a -0j fill: zarr's empty-chunk rule compares complex by value
    (
        Layout(shape=(1,), chunks=(1,), shards=None, dtype="complex64",
               fill_value=complex(-0.0, 0.0), compressor=None),
        [(Sel("orthogonal", (0,), (np.array([0]),), (0,)), np.complex64(0j))],
    )
)
def test_writes_match_model_and_zarr_twin(case: tuple[Layout, list[tuple[Sel, Any]]]) -> None:
    layout, writes = case
    _events(layout, [sel for sel, _ in writes])
    store: dict[str, Any] = {}
    twin: dict[str, Any] = {}
    arr = _cuzarr_array(lambda: _create(layout, store))
    ref = _default_array(lambda: _create(layout, twin))
    model = np.full(layout.shape, layout.fill_value, dtype=layout.dtype)
    cuzarr.reset_stats()
    for sel, value in writes:
        _write_model(model, sel, value, layout)
        sel.write(arr, value)
        sel.write(ref, value)
    s = cuzarr.stats()
    assert not any(s.get(k, 0) for k in ("fallback_arrays", "fallback_writes")), s

    # what zarr's default pipeline reads from cuzarr's store, and the keys cuzarr left there
    reader = _default_array(lambda: _open(store))
    assert_same(reader[...], model)
    assert _chunk_keys(store) == _chunk_keys(twin)
    # and cuzarr reads the twin the same way
    assert_same(_cuzarr_array(lambda: _open(twin))[...], model)


# ---------------------------------------------------------------------------- coalesce


@st.composite
def range_sets(draw: st.DrawFn) -> tuple[list[ByteRange], bool]:
    disjoint = draw(st.booleans())
    n = draw(st.integers(0, 12))
    if disjoint:
        # lay ranges end to end with random gaps, then shuffle
        pos, out = 0, []
        for i in range(n):
            pos += draw(st.integers(0, 80))
            length = draw(st.integers(0, 120))
            out.append(ByteRange(pos, length, i))
            pos += length
        out = draw(st.permutations(out))
    else:
        out = [
            ByteRange(draw(st.integers(0, 500)), draw(st.integers(0, 150)), i) for i in range(n)
        ]
    return list(out), disjoint


@settings(SETTINGS, max_examples=500)
@given(range_sets(), st.integers(0, 100), st.integers(1, 400))
# Found by a longer randomized run: an empty range at the start of a range larger than
# max_size was read on its own, overlapping it.
@example(
    ranges_disjoint=([ByteRange(0, 2, 1), ByteRange(0, 0, 0), ByteRange(2, 0, 2)], True),
    max_gap=0,
    max_size=1,
)
def test_coalesce_contract(
    ranges_disjoint: tuple[list[ByteRange], bool], max_gap: int, max_size: int
) -> None:
    ranges, disjoint = ranges_disjoint
    reads = coalesce(ranges, max_gap=max_gap, max_size=max_size)

    # every input range lies inside exactly one read
    owner: dict[int, int] = {}
    for k, read in enumerate(reads):
        assert read.parts, "a read without parts"
        for part in read.parts:
            assert part.tag not in owner, f"range {part.tag} in two reads"
            owner[part.tag] = k
            assert read.start <= part.start
            assert part.start + part.length <= read.start + read.length
    assert sorted(owner) == sorted(r.tag for r in ranges)
    assert {(p.start, p.length, p.tag) for r in reads for p in r.parts} == {
        (r.start, r.length, r.tag) for r in ranges
    }

    for read in reads:
        # tight: the read starts at its first part and ends at its last byte
        assert read.start == min(p.start for p in read.parts)
        assert read.start + read.length == max(p.start + p.length for p in read.parts)
        # size limit, unless one range alone spans the read (others lie inside it: empty
        # ranges at its ends)
        assert read.length <= max_size or any(p.length == read.length for p in read.parts)
        # gap limit between consecutive parts
        end = read.parts[0].start + read.parts[0].length
        for p in sorted(read.parts, key=lambda p: p.start)[1:]:
            assert p.start - end <= max_gap
            end = max(end, p.start + p.length)

    for a, b in itertools.pairwise(reads):
        assert a.start <= b.start, "reads out of order"
        if disjoint:
            assert a.start + a.length <= b.start, "reads overlap"
        # reads are split only where the gap or the size limit demands it
        a_end, b_end = a.start + a.length, b.start + b.length
        assert b.start - a_end > max_gap or max(a_end, b_end) - a.start > max_size


# ---------------------------------------------------------------------------- selection helpers


@st.composite
def chunk_selections(draw: st.DrawFn) -> tuple[tuple[Any, ...], tuple[int, ...], tuple[int, ...]]:
    """A chunk selection in one of the forms zarr's indexers produce, over a shard-like box."""
    ndim = draw(st.integers(1, 3))
    block = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    shape = tuple(b * draw(st.integers(1, 4)) for b in block)
    form = draw(st.sampled_from(["mixed", "ix", "coordinate"]))
    if form == "coordinate":
        k = draw(st.integers(1, 8))
        sel: tuple[Any, ...] = tuple(
            np.array(draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k)), dtype=np.intp)
            for n in shape
        )
        return sel, block, shape
    entries: list[Any] = []
    for n, b in zip(shape, block, strict=True):
        kind = draw(st.sampled_from(["int", "slice", "mask", "ints"]))
        if kind == "int":
            entries.append(draw(st.integers(0, n - 1)))
        elif kind == "slice":
            start = draw(st.integers(0, n))
            stop = draw(st.one_of(st.just(n), st.integers(start, n)))
            # steps of one block or more skip whole blocks
            step = draw(st.sampled_from([1, 2, b, b + 1, 2 * b + 1]))
            entries.append(slice(start, stop, step))
        elif kind == "mask":
            entries.append(
                np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
            )
        else:
            vals = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=5))
            entries.append(np.array(vals, dtype=np.intp))
    if form == "ix":
        # zarr's ``ix_``: every entry an integer array, shaped for broadcasting
        dims = [
            np.arange(n)[e] if isinstance(e, slice)
            else np.array([e]) if isinstance(e, int)
            else np.flatnonzero(e) if e.dtype == bool
            else e
            for e, n in zip(entries, shape, strict=True)
        ]
        return tuple(np.ix_(*dims)), block, shape
    # mixed: at most one array (several would broadcast together as coordinates)
    seen = False
    for i, e in enumerate(entries):
        if isinstance(e, np.ndarray):
            if seen:
                entries[i] = slice(0, shape[i], 1)
            seen = True
    return tuple(entries), block, shape


def _selected_points(sel: tuple[Any, ...], shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """Coordinates (n_points, ndim) of every element ``sel`` selects."""
    grids = np.indices(shape)
    return np.stack([g[sel].reshape(-1) for g in grids], axis=-1)


@settings(SETTINGS, max_examples=500)
@given(chunk_selections(), st.integers(0, 2**32 - 1))
@example(((slice(0, 4, 2),), (1,), (4,)), 0)  # a step that skips blocks needs only some
def test_needed_blocks_and_rebase(
    case: tuple[tuple[Any, ...], tuple[int, ...], tuple[int, ...]], seed: int
) -> None:
    sel, block, shape = case
    per_dim = needed_blocks(sel, block, shape)
    assert len(per_dim) == len(shape)
    for d in per_dim:
        assert np.all(np.diff(d) > 0), "block lists are sorted and unique"

    points = _selected_points(sel, shape)
    if not len(points):
        assert any(not len(d) for d in per_dim), "nothing selected, yet blocks in every dim"
        return
    for axis in range(len(shape)):
        # every selected point lies in a listed block, and every listed block holds one
        touched = np.unique(points[:, axis] // block[axis])
        np.testing.assert_array_equal(per_dim[axis], touched)

    full = np.random.default_rng(seed).integers(0, 1000, size=shape)
    lo = tuple(int(d[0]) * b for d, b in zip(per_dim, block, strict=True))
    hi = tuple((int(d[-1]) + 1) * b for d, b in zip(per_dim, block, strict=True))
    size = tuple(h - lo_ for lo_, h in zip(lo, hi, strict=True))
    box = full[tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))]
    np.testing.assert_array_equal(box[rebase(sel, lo, size)], full[sel])

